"""`python -m opforge_worker validate` on a small directory, with the real harness."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKER_DIR = Path(__file__).resolve().parents[1]
HONEST_EXP = WORKER_DIR / "tests" / "corpus" / "honest" / "exp.py"
DEVICE = os.environ.get("OPFORGE_TEST_DEVICE", "interpreter")

BROKEN_EXP = """
@triton.jit
def exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1.0, mask=mask)


def exp_wrapper(input):
    x = input.contiguous()
    out = torch.empty_like(x)
    exp_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out
"""


def test_validate_prints_a_table_writes_json_and_fails_on_any_failure(tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    shutil.copy(HONEST_EXP, good / "exp.py")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "exp.py").write_text(BROKEN_EXP)
    unknown = tmp_path / "elsewhere" / "not_an_operator.py"
    unknown.parent.mkdir()
    unknown.write_text("def not_an_operator_wrapper(x): ...\n")

    def validate(directory: Path, *more: Path) -> tuple[subprocess.CompletedProcess, dict]:
        out = tmp_path / f"{directory.name}.json"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "opforge_worker",
                "validate",
                str(directory),
                *map(str, more),
                "--timings",
                "--device",
                DEVICE,
                "--dtypes",
                "float32,float16",
                "--json",
                str(out),
            ],
            cwd=WORKER_DIR,
            capture_output=True,
            text=True,
            timeout=900,
        )
        return done, json.loads(out.read_text())

    done, written = validate(good)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1/1 candidates passed" in done.stdout
    (result,) = written["results"]
    assert (result["op"], result["wrapper"], result["outcome"]) == ("exp", "exp", "pass")
    assert result["dtypes"] == ["float16", "float32"]
    assert result["tests_passed"] == result["tests_run"] > 0
    assert written["device_kind"] == DEVICE
    assert written["processes_started"] == 1
    assert "start-up op_db: " in done.stderr and "start-up total: " in done.stderr

    done, written = validate(bad, unknown)
    assert done.returncode == 1
    assert "0/2 candidates passed" in done.stdout
    outcomes = {r["file"]: r["outcome"] for r in written["results"]}
    assert outcomes == {"exp.py": "accuracy_error", "not_an_operator.py": "invalid"}
    assert "no OpInfo named 'not_an_operator'" in done.stdout


def test_a_python_installation_behind_a_symbolic_link_still_tells_torch_from_the_candidate(
    tmp_path,
):
    """Frames carry the file names modules were imported by, links unresolved: the checks that
    exempt torch's and triton's own frames must match them in that form too. Through a linked
    prefix, torch compute inside an interpreted kernel once passed as launch machinery (a false
    pass: the cheat passes the static gate, so only the dispatch recorder stands against it)."""
    if DEVICE != "interpreter":
        pytest.skip("needs the interpreter device: on a GPU the cheat's kernel does not compile")
    import torch

    prefix = Path(sys.prefix)
    # Only torch installed under the linked prefix is imported through the link.
    assert Path(torch.__file__).resolve().is_relative_to(prefix.resolve()), torch.__file__
    linked = tmp_path / "linked-prefix"
    linked.symlink_to(prefix, target_is_directory=True)
    python = linked / Path(os.path.abspath(sys.executable)).relative_to(prefix)
    candidates = tmp_path / "candidates"
    candidates.mkdir()
    shutil.copy(
        WORKER_DIR / "tests" / "corpus" / "cheats" / "kernel_method.py", candidates / "exp.py"
    )
    out = tmp_path / "out.json"

    done = subprocess.run(
        [python, "-m", "opforge_worker", "validate", str(candidates), "--device", DEVICE]
        + ["--dtypes", "float32", "--json", str(out)],
        cwd=WORKER_DIR,
        capture_output=True,
        text=True,
        timeout=900,
    )

    assert done.returncode == 1, done.stdout + done.stderr
    (result,) = json.loads(out.read_text())["results"]
    assert (result["outcome"], result["failure"]["check"]) == ("cheat_detected", "fallback")
