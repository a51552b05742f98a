"""`python -m opforge_worker lint FILE --profile P`: exit status and output."""

import json
import subprocess
import sys
from pathlib import Path

from opforge_worker.linter.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"


def test_clean_example_exits_zero(capsys):
    assert main([str(EXAMPLES / "exp.py"), "--profile", "interpreter"]) == 0
    assert capsys.readouterr().out.strip().endswith("exp.py: ok")


def test_violations_exit_one_with_position_rule_and_hint(tmp_path, capsys):
    candidate = tmp_path / "cheat.py"
    candidate.write_text("import numpy\n")
    assert main([str(candidate), "--op", "exp"]) == 1
    out = capsys.readouterr().out
    assert f"{candidate}:1:1: import: import numpy" in out
    assert "hint: `numpy` cannot be imported" in out
    assert "wrapper_missing" in out and "exp_wrapper" in out


def test_json_report_is_the_api_report(tmp_path, capsys):
    candidate = tmp_path / "broken.py"
    candidate.write_text("def f(:\n")
    assert main([str(candidate), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["syntax_error"]["line"] == 1


def test_module_entry_point_runs(tmp_path):
    child = subprocess.run(
        [sys.executable, "-m", "opforge_worker.linter", str(EXAMPLES / "diag.py")],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip().endswith("diag.py: ok")


def test_unknown_profile_is_a_usage_error(capsys):
    try:
        main([str(EXAMPLES / "exp.py"), "--profile", "tpu"])
    except SystemExit as exit:
        assert exit.code == 2
    else:
        raise AssertionError("an unknown profile must be a usage error")
    assert "tpu.yaml" in capsys.readouterr().err
