"""`validate --sets` draws only the sample sets it names and refuses names it does not know."""

from __future__ import annotations

import json

from harness_helpers import DEVICE, source

from opforge_worker.__main__ import main
from opforge_worker.sample_sets import SAMPLE_INPUTS

#: exp plus one: wrong on every sample that has an element.
EXP_PLUS_ONE = source("honest/exp").replace(
    "tl.exp(x.to(tl.float32))", "(tl.exp(x.to(tl.float32)) + 1.0)"
)


def test_validate_sets_selects_the_sets_and_reports_the_failing_one(tmp_path):
    (tmp_path / "exp.py").write_text(EXP_PLUS_ONE)
    out = tmp_path / "out.json"

    code = main(
        ["validate", str(tmp_path), "--device", DEVICE, "--dtypes", "float32"]
        + ["--sets", SAMPLE_INPUTS, "--json", str(out)]
    )

    assert code == 1
    (result,) = json.loads(out.read_text())["results"]
    assert result["outcome"] == "accuracy_error"
    failure = result["failure"]
    assert (failure["sample_set"], failure["sample_index"]) == (SAMPLE_INPUTS, 0)
    # Every sample runs (mode all), of that one set only; the empty one passes.
    assert result["per_dtype"]["float32"]["sets"] == {SAMPLE_INPUTS: {"run": 3, "passed": 1}}


def test_validate_refuses_unknown_sets_naming_them(tmp_path, capsys):
    (tmp_path / "exp.py").write_text(EXP_PLUS_ONE)

    code = main(["validate", str(tmp_path), "--device", DEVICE, "--sets", "extremal,bogus,nope"])

    assert code == 2
    assert "unknown sample sets ['bogus', 'nope']" in capsys.readouterr().err
