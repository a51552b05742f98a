"""The judge compares under the device kind's numeric contract and the signed_zeros setting, and
every verdict that depends on either says so."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.testing._internal.opinfo.core import SampleInput

from opforge_worker import opinfo as opinfo_db
from opforge_worker.checks import Findings, output_structure, tensor_leaves
from opforge_worker.contract import Outcome
from opforge_worker.device_kinds import lookup
from opforge_worker.judge import Judge
from opforge_worker.results import ResultBuilder
from opforge_worker.sample_sets import SAMPLE_INPUTS
from opforge_worker.samples import prepare
from opforge_worker.settings import SignedZeros, load_settings
from opforge_worker.transport import decode_inputs, encode_tensors

F32 = torch.float32
FLUSHES = "subnormal input: this device (cuda) flushes bfloat16, float32 subnormals to zero"


def judged(op: str, values: list[float], computes, kind="cuda", dtype=F32, **settings):
    """The verdict on a wrapper that computes ``computes(x)`` for ``op`` on a tensor of
    ``values``, by a judge of the device ``kind``; with the judge, for its notes."""
    opinfo = opinfo_db.find_opinfo(op, "")
    prepared = prepare(
        opinfo, SampleInput(torch.tensor(values, dtype=dtype)), SAMPLE_INPUTS, 0, dtype
    )
    (x,) = decode_inputs(prepared.inputs)["args"]
    result = computes(x)
    leaves: list[torch.Tensor] = []
    structure = output_structure(result, leaves, Findings(), torch.device("cpu"), {}, True)
    descriptions, blob = encode_tensors([*leaves, *tensor_leaves([x])])
    reply = {"status": "ok", "findings": [], "structure": structure, "tensors": descriptions}
    reply["outputs"] = len(leaves)
    judge = Judge(opinfo, dataclasses.replace(load_settings(), **settings), lookup(kind))
    failure = judge.verdict(reply, blob, prepared.reference, None, (prepared.inputs, dtype))
    return failure, judge


def flushed(x: torch.Tensor) -> torch.Tensor:
    tiny = torch.finfo(x.dtype).tiny
    return x.where(x.abs() >= tiny, torch.copysign(torch.zeros_like(x), x))


def test_a_result_of_flushed_subnormal_inputs_passes_on_a_flushing_kind_and_says_so():
    # ATen: floor(-1e-40) = -1 and rsqrt(5.9e-39) = 1.3e19; a flushing GPU gives -0.0 and inf.
    for op, values, aten in (
        ("floor", [-1e-40, 2.5], torch.floor),
        ("rsqrt", [5.9e-39, 4.0], torch.rsqrt),
    ):
        failure, judge = judged(op, values, lambda x, aten=aten: aten(flushed(x)))
        assert failure is None, failure
        assert judge.contract_notes == {FLUSHES: 1}


def test_the_same_result_fails_on_a_kind_that_keeps_subnormals():
    failure, judge = judged(
        "floor", [-1e-40, 2.5], lambda x: torch.floor(flushed(x)), "interpreter"
    )
    assert failure.outcome == Outcome.ACCURACY_ERROR
    assert "flushes" not in failure.message and judge.contract_notes == {}


def test_a_wrong_result_fails_on_a_flushing_kind_naming_the_contract_it_was_judged_under():
    failure, judge = judged("floor", [-1e-40, 2.5], lambda x: torch.floor(flushed(x)) + 1)
    assert failure.outcome == Outcome.ACCURACY_ERROR
    assert failure.message.endswith(
        f"(judged under {FLUSHES}, and the output does not match the flushed reference either)"
    )
    assert judge.contract_notes == {}


def test_a_sample_without_subnormals_is_judged_strictly_on_a_flushing_kind():
    failure, _ = judged("floor", [-1.5, 2.5], lambda x: torch.zeros_like(x))
    assert failure.outcome == Outcome.ACCURACY_ERROR and "judged under" not in failure.message


@pytest.mark.parametrize("mode", list(SignedZeros))
def test_the_signed_zeros_setting_decides_a_zero_of_the_other_sign_and_says_so(mode):
    failure, judge = judged(
        "abs", [-0.0, -2.0], lambda x: torch.where(x == 0, x, x.abs()), signed_zeros=mode
    )
    if mode is SignedZeros.IEEE:
        assert failure.outcome == Outcome.ACCURACY_ERROR
        assert failure.diff.signed_zero_mismatches == 1
        assert "signed_zeros: ieee" in failure.message
    else:
        assert failure is None
        assert judge.contract_notes == {
            "signed_zeros: pytorch (-0.0 equals +0.0, as torch.testing compares)": 1
        }


def test_the_result_lists_what_passed_under_the_contract():
    result = ResultBuilder(dtypes=["float32"], contract_notes={FLUSHES: 2})
    assert result.payload()["contract"] == [f"{FLUSHES}: 2 samples"]
    assert ResultBuilder(dtypes=["float32"]).payload()["contract"] == []


def test_a_bad_signed_zeros_setting_is_refused_naming_it(tmp_path):
    from opforge_worker.settings import DEFAULT_SETTINGS_PATH

    bad = tmp_path / "t.yaml"
    bad.write_text(
        DEFAULT_SETTINGS_PATH.read_text().replace("signed_zeros: ieee", "signed_zeros: loose")
    )
    with pytest.raises(ValueError, match=r"signed_zeros is 'loose', expected one of ieee, pytorch"):
        load_settings(bad)
    assert load_settings().signed_zeros is SignedZeros.IEEE
