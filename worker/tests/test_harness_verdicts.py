"""Verdicts that name the real fault, against a reference that is right: the precise reference
of low-precision dtypes, signed zeros, stale results against fresh-value misses, unwritten
outputs, and dtypes that cannot be tested here.

The harness runs without its static gate (the cache cheat breaks one of its rules): this suite
tests the verdicts of what runs."""

import math

import pytest
import torch
from harness_helpers import DEVICE, OPINFO_SAMPLES_ONLY, opinfo_counts, request
from torch.testing._internal.opinfo.core import SampleInput

from opforge_worker.compare import tensor_diff
from opforge_worker.contract import ElementMismatch
from opforge_worker.harness import Harness
from opforge_worker.judge import Judge, compute_reference
from opforge_worker.opinfo import find_opinfo
from opforge_worker.sample_sets import SAMPLE_INPUTS
from opforge_worker.samples import SampleCache
from opforge_worker.settings import Tolerance, load_settings
from opforge_worker.transport import encode_tensors


@pytest.fixture(scope="module")
def harness():
    with Harness(DEVICE, static_gate=False) as harness:
        yield harness


def reply_with(output: torch.Tensor, inputs: list[torch.Tensor]) -> tuple[dict, bytes]:
    """A candidate process's reply to a call that returned ``output`` and left ``inputs``."""
    descriptions, blob = encode_tensors([output, *inputs])
    reply = {"status": "ok", "findings": [], "structure": {"type": "tensor", "index": 0}}
    return {**reply, "tensors": descriptions, "outputs": 1}, blob


def first_addr_sample_in_half():
    """addr's first float16 sample, where ATen's CPU path rounds between its operations."""
    opinfo = find_opinfo("addr")
    return opinfo, SampleCache().samples(opinfo, torch.float16, 0, SAMPLE_INPUTS)[0].reference


def test_a_correctly_rounded_half_kernel_passes_where_atens_half_path_is_less_exact(harness):
    _, reference = first_addr_sample_in_half()
    aten, precise = reference.expected.double(), reference.precise.expected.double()
    # The premise: ATen's own float16 result misses the correctly rounded one beyond tolerance.
    assert not torch.isclose(aten, precise, rtol=1e-3, atol=1e-3).all()

    result = harness.run_test(
        request("honest/addr", "addr", dtypes=("float16", "float32"), **OPINFO_SAMPLES_ONLY)
    )

    assert result["outcome"] == "pass", result["failure"]
    assert result["per_dtype"]["float16"] == opinfo_counts(6, 6, "pass")


def test_an_output_a_few_ulps_beyond_tolerance_of_both_references_fails():
    opinfo, reference = first_addr_sample_in_half()
    judge = Judge(opinfo, load_settings())
    inputs = reference.inputs_after
    precise = reference.precise.expected
    assert judge.verdict(*reply_with(precise.clone(), inputs), reference) is None
    assert judge.verdict(*reply_with(reference.expected.clone(), inputs), reference) is None

    # Off where ATen and the precise value differ, past the farther of the two by 3 ulps.
    index = (reference.expected != precise).nonzero()[0].tolist()
    farther = max(reference.expected[tuple(index)], precise[tuple(index)], key=abs).item()
    bound = 1e-3 + 1e-3 * abs(farther)
    wrong = precise.clone()
    off = torch.tensor(abs(farther) + bound, dtype=torch.float16).view(torch.int16) + 3
    wrong[tuple(index)] = off.view(torch.float16) * (1 if farther > 0 else -1)
    failure = judge.verdict(*reply_with(wrong, inputs), reference)

    assert failure.outcome == "accuracy_error"
    assert failure.diff.mismatched == 1
    (shown,) = failure.diff.first_mismatches
    assert shown.index == index
    assert shown.expected == repr(reference.expected[tuple(index)].item())
    assert shown.precise == repr(precise[tuple(index)].item())
    assert "precise" in failure.diff.accepted


@pytest.mark.parametrize(
    "actual", [[1.25, 0.0, math.inf], [1.25, math.nan, 6e4], [1.25, math.nan, -math.inf]]
)
def test_nan_and_inf_positions_must_match_whatever_the_precise_reference(actual):
    expected = torch.tensor([1.0, math.nan, math.inf], dtype=torch.float16)
    precise = torch.tensor([1.25, math.nan, math.inf], dtype=torch.float16)
    tolerance = Tolerance(atol=1e-3, rtol=1e-3)
    assert tensor_diff(precise.clone(), expected, tolerance, precise) is None

    diff = tensor_diff(torch.tensor(actual, dtype=torch.float16), expected, tolerance, precise)

    assert diff.mismatched == 1 and diff.nan_inf_mismatches == 1


def test_a_zero_of_the_wrong_sign_fails():
    opinfo = find_opinfo("neg")
    reference = compute_reference(
        opinfo, SampleInput(torch.tensor([0.0, -0.0, 2.0])), torch.float32
    )
    judge = Judge(opinfo, load_settings())
    inputs = reference.inputs_after

    assert judge.verdict(*reply_with(torch.tensor([-0.0, 0.0, -2.0]), inputs), reference) is None
    failure = judge.verdict(*reply_with(torch.tensor([0.0, 0.0, -2.0]), inputs), reference)

    assert failure.outcome == "accuracy_error"
    assert failure.diff.signed_zero_mismatches == 1
    assert failure.diff.first_mismatches == [
        ElementMismatch(index=[0], actual="0.0", expected="-0.0")
    ]


def test_a_kernel_that_reuses_its_first_result_is_a_cheat(harness):
    result = harness.run_test(request("cheats/cache", "exp"))

    assert result["outcome"] == "cheat_detected", result["failure"]
    failure = result["failure"]
    assert failure["check"] == "fresh_inputs"
    assert "reused" in failure["message"]
    assert failure["sample"].startswith("sample_inputs #0, fresh values: ")


def test_a_kernel_wrong_only_on_the_fresh_values_is_an_accuracy_error(harness):
    result = harness.run_test(request("outcomes/fresh_values_wrong", "exp"))

    assert result["outcome"] == "accuracy_error", result["failure"]
    failure = result["failure"]
    assert (failure["check"], failure["sample_index"]) == ("accuracy", 0)
    assert failure["sample"].startswith("sample_inputs #0, fresh values: ")
    assert failure["diff"]["mismatched"] == 1


def test_an_unwritten_output_is_an_accuracy_error_on_its_first_call(harness):
    # prod of an empty tensor is 1; the candidate returns its torch.empty as it came.
    result = harness.run_test(request("outcomes/unwritten_output", "prod"))

    assert result["outcome"] == "accuracy_error", result["failure"]
    failure = result["failure"]
    assert (failure["sample_index"], failure["findings"]) == (10, [])
    assert not failure["sample"].startswith("fresh values")
    assert failure["diff"]["first_mismatches"] == [
        {"index": [], "actual": "nan", "expected": "1.0"}
    ]


def test_a_dtype_without_a_cpu_reference_is_skipped_and_the_others_run(harness):
    assert torch.bool not in find_opinfo("neg").supported_dtypes("cpu")

    result = harness.run_test(request("honest/neg", "neg", dtypes=("bool", "float32")))

    assert result["outcome"] == "pass", result["failure"]
    tested = result["per_dtype"]["float32"]
    assert tested["outcome"] == "pass" and tested["run"] == tested["passed"] > 0
    skipped = result["per_dtype"]["bool"]
    assert (skipped["run"], skipped["outcome"]) == (0, "skipped")
    assert "neg has no CPU reference for bool" in skipped["reason"]


def test_a_test_with_no_dtype_to_test_is_a_harness_error(harness):
    result = harness.run_test(request("honest/neg", "neg", dtypes=("bool",)))

    assert result["outcome"] == "harness_error"
    assert "no dtype could be tested: bool: neg has no CPU" in result["failure"]["message"]
    assert result["per_dtype"]["bool"]["outcome"] == "skipped"
