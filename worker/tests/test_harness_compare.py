"""Comparison rules, settings and the result payload, without a candidate process."""

import math
from types import SimpleNamespace

import pytest
import torch
from triton.compiler.errors import CompilationError

from opforge_worker.audit import CodeOwners
from opforge_worker.checks import BackendCompileError, Findings, LaunchCounter
from opforge_worker.compare import bitwise_equal, compare_structure, tensor_diff
from opforge_worker.contract import ElementMismatch, TensorDiff
from opforge_worker.device_kinds import lookup
from opforge_worker.judge import Judge, compute_reference
from opforge_worker.opinfo import find_opinfo
from opforge_worker.results import Failure, ResultBuilder
from opforge_worker.sample_sets import EXTREMAL, SAMPLE_INPUTS
from opforge_worker.settings import Tolerance, load_settings
from opforge_worker.transport import encode_tensors

F32 = Tolerance(atol=1e-5, rtol=1.3e-5)


def test_values_within_tolerance_match():
    expected = torch.tensor([1.0, 100.0, -3.0])

    assert tensor_diff(expected * (1 + 1e-5), expected, F32) is None


def test_values_outside_tolerance_are_summarised():
    expected = torch.tensor([1.0, 2.0, 3.0, 4.0])
    actual = torch.tensor([1.0, 2.5, 3.0, 4.0])

    diff = tensor_diff(actual, expected, F32)

    assert diff.mismatched == 1 and diff.total == 4
    assert diff.max_abs_error == pytest.approx(0.5)
    assert diff.max_rel_error == pytest.approx(0.25)
    assert diff.first_mismatches == [ElementMismatch(index=[1], actual="2.5", expected="2.0")]


@pytest.mark.parametrize(
    "actual",
    [
        [math.nan, 1.0, math.inf],  # NaN where a finite value is expected
        [1.0, 1.0, -math.inf],  # inf of the wrong sign
        [1.0, 1.0, 1e30],  # finite where inf is expected
    ],
)
def test_nan_and_inf_positions_must_match_exactly(actual):
    expected = torch.tensor([1.0, 1.0, math.inf])

    diff = tensor_diff(torch.tensor(actual), expected, Tolerance(atol=1e9, rtol=1e9))

    assert diff is not None and diff.nan_inf_mismatches >= 1


def test_nan_and_inf_at_the_same_positions_match():
    expected = torch.tensor([math.nan, math.inf, -math.inf, 2.0])

    assert tensor_diff(expected.clone(), expected, F32) is None


FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_equal_bytes_match_nan_and_inf_included_whatever_the_layouts(dtype):
    expected = torch.tensor([[math.nan, 1.5, math.inf], [-math.inf, -0.0, 3.0]], dtype=dtype)
    transposed = expected.t().contiguous().t()  # the same values, column-major

    assert tensor_diff(expected.clone(), transposed, F32) is None
    assert tensor_diff(expected[0, 1].clone(), expected[0, 1], F32) is None  # 0-dim


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_nan_where_a_number_is_expected_differs_at_any_tolerance(dtype):
    expected = torch.tensor([1.0, 2.0, 3.0], dtype=dtype)
    actual = torch.tensor([1.0, math.nan, 3.0], dtype=dtype)

    diff = tensor_diff(actual, expected, Tolerance(atol=1e9, rtol=1e9))

    assert diff.nan_inf_mismatches == 1 and diff.mismatched == 1
    assert diff.first_mismatches == [ElementMismatch(index=[1], actual="nan", expected="2.0")]


def test_equal_values_in_other_bytes_match_nan_payloads():
    expected = torch.tensor([0.0, math.nan, 1.0])
    actual = torch.tensor([0.0, math.nan, 1.0])
    actual.view(torch.int32)[1] ^= 1  # another NaN payload

    assert actual[1].isnan() and not bitwise_equal(actual[1], expected[1])
    assert tensor_diff(actual, expected, F32) is None
    assert tensor_diff(expected, actual, Tolerance(atol=0.0, rtol=0.0)) is None


@pytest.mark.parametrize("tolerance", [F32, Tolerance(atol=1e9, rtol=1e9), None], ids=str)
def test_a_zero_of_the_wrong_sign_differs_at_any_tolerance(tolerance):
    expected = torch.tensor([0.0, -0.0, 1.0])
    actual = torch.tensor([-0.0, -0.0, 1.0])  # 0 - x where the operator gives -x: -(0.0)

    diff = tensor_diff(actual, expected, tolerance)

    assert diff.mismatched == 1
    assert diff.first_mismatches == [ElementMismatch(index=[0], actual="-0.0", expected="0.0")]
    assert tensor_diff(expected.clone(), expected, tolerance) is None


def test_values_within_tolerance_in_other_bytes_match():
    expected = torch.tensor([1.0, 100.0], dtype=torch.float16)
    actual = torch.tensor([1.0, 100.0625], dtype=torch.float16)  # the next half after 100

    assert tensor_diff(actual, expected, Tolerance(atol=1e-3, rtol=1e-3)) is None
    assert tensor_diff(actual, expected, Tolerance(atol=1e-3, rtol=1e-4)).mismatched == 1


@pytest.mark.parametrize(
    ("dtype", "tolerance"), [(torch.float32, None), (torch.complex64, F32)], ids=str
)
def test_compared_exactly_nan_differs_even_from_the_same_bytes(dtype, tolerance):
    # Floats without a tolerance, and complex numbers, compare with ==, where NaN != NaN.
    expected = torch.tensor([math.nan, 1.0], dtype=dtype)

    diff = tensor_diff(expected.clone(), expected, tolerance)

    assert diff.mismatched == 1 and diff.first_mismatches[0].index == [0]


def test_a_difference_out_of_tolerance_is_summarised_in_full():
    expected = torch.tensor([[1.0, 2.0], [math.inf, 4.0]])
    actual = torch.tensor([[1.0, 2.5], [math.inf, math.nan]])

    diff = tensor_diff(actual, expected, F32)

    assert diff == TensorDiff(
        reason="values differ",
        actual_shape=[2, 2],
        expected_shape=[2, 2],
        actual_dtype="float32",
        expected_dtype="float32",
        atol=1e-5,
        rtol=1.3e-5,
        max_abs_error=0.5,
        max_rel_error=0.25,
        nan_inf_mismatches=1,
        mismatched=2,
        total=4,
        first_mismatches=[
            ElementMismatch(index=[0, 1], actual="2.5", expected="2.0"),
            ElementMismatch(index=[1, 1], actual="nan", expected="4.0"),
        ],
    )
    # What goes on the wire is what the contract reads back.
    assert TensorDiff.from_dict(diff.to_dict()) == diff


def mismatches_by_the_rule(actual, expected, tolerance: Tolerance) -> torch.Tensor:
    """Per element, whether it breaks the rule compare.py states (in float64)."""
    a, e = actual.double(), expected.double()
    special = (
        (a.isnan() != e.isnan()) | (a.isposinf() != e.isposinf()) | (a.isneginf() != e.isneginf())
    )
    both_finite = a.isfinite() & e.isfinite()
    wrong_zero = (a == 0) & (e == 0) & (a.signbit() != e.signbit())
    return (
        special
        | wrong_zero
        | both_finite & ((a - e).abs() > tolerance.atol + tolerance.rtol * e.abs())
    )


def values_around_the_bounds(dtype, tolerance: Tolerance) -> tuple[torch.Tensor, torch.Tensor]:
    """(actual, expected) pairs at and next to the tolerance's bounds, and non-finite ones."""
    finfo = torch.finfo(dtype)
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]
    specials = [math.nan, math.inf, -math.inf, finfo.max, -finfo.max]
    pairs = []
    for value in [0.0, -0.0, finfo.tiny, finfo.tiny / 4, 1.0, -3.0, 1e4, *specials]:
        expected = torch.tensor(value, dtype=dtype)
        bound = tolerance.atol + tolerance.rtol * abs(expected.double().item())
        for near in [value, value + bound, value - bound, -value, *specials]:
            actual = torch.tensor(near, dtype=torch.float64).to(dtype)
            for step in (-1, 0, 1):  # the neighbouring representable values
                pairs.append(((actual.view(bits) + step).view(dtype), expected))
    return torch.stack([a for a, _ in pairs]), torch.stack([e for _, e in pairs])


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("tolerance", [F32, Tolerance(0.0, 0.0), Tolerance(1e-3, 1e-2)], ids=str)
def test_an_element_passes_exactly_when_the_rule_holds_at_the_bounds(dtype, tolerance):
    actual, expected = values_around_the_bounds(dtype, tolerance)
    breaks = mismatches_by_the_rule(actual, expected, tolerance)
    assert breaks.any() and not breaks.all()

    for index in range(len(actual)):
        one = slice(index, index + 1)
        passed = tensor_diff(actual[one], expected[one], tolerance) is None
        assert passed == (not breaks[index]), (actual[index].item(), expected[index].item())


def test_integers_compare_exactly():
    diff = tensor_diff(torch.tensor([1, 2, 4]), torch.tensor([1, 2, 3]), None)

    assert diff.mismatched == 1
    assert diff.first_mismatches == [ElementMismatch(index=[2], actual="4", expected="3")]
    assert diff.atol is None and diff.max_abs_error is None  # no tolerance, no error measured
    assert tensor_diff(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3]), None) is None


def test_shape_and_dtype_must_be_the_references():
    expected = torch.zeros(2, 3)

    assert tensor_diff(torch.zeros(3, 2), expected, F32).reason == "shape differs"
    assert (
        tensor_diff(torch.zeros(2, 3, dtype=torch.float64), expected, F32).reason == "dtype differs"
    )


def test_structure_must_be_the_references():
    expected = (torch.zeros(2), torch.ones(2, dtype=torch.int64))
    leaves = [torch.zeros(2), torch.ones(2, dtype=torch.int64)]
    good = {
        "type": "tuple",
        "items": [{"type": "tensor", "index": 0}, {"type": "tensor", "index": 1}],
    }

    assert compare_structure(good, leaves, expected, lambda dtype: F32) is None
    message, _ = compare_structure(
        {"type": "tensor", "index": 0}, leaves, expected, lambda dtype: F32
    )
    assert "sequence of 2" in message


def test_bitwise_equal_sees_nan_payloads_and_zero_signs():
    assert bitwise_equal(torch.tensor([math.nan]), torch.tensor([math.nan]))
    assert not bitwise_equal(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert not bitwise_equal(torch.tensor([1.0]), torch.tensor([1.0], dtype=torch.float64))


@pytest.mark.parametrize("dtype", [*FLOATS, torch.complex64, torch.complex128], ids=str)
def test_bitwise_equal_compares_every_byte_of_every_float_width(dtype):
    values = torch.tensor([[0.0, math.nan], [math.inf, 1.5]], dtype=dtype)
    other_nan, negative_zero = values.clone(), values.clone()
    other_nan.view(torch.uint8)[0, dtype.itemsize] ^= 1  # the lowest byte of values[0, 1]
    negative_zero[0, 0] = -0.0

    assert bitwise_equal(values.t().contiguous().t(), values)
    assert bitwise_equal(values[1, 0].clone(), values[1, 0])
    assert other_nan[0, 1].isnan() and not bitwise_equal(other_nan, values)
    assert not bitwise_equal(negative_zero, values)
    assert not bitwise_equal(values.t(), values)  # same shape, values transposed


def test_bitwise_equal_compares_integers_and_bools_by_value_and_dtype():
    assert bitwise_equal(torch.tensor([[1, -2], [3, 4]]).t(), torch.tensor([[1, 3], [-2, 4]]))
    assert not bitwise_equal(torch.tensor([1, 2]), torch.tensor([1, 3]))
    assert not bitwise_equal(torch.tensor([1, 2]), torch.tensor([1, 2], dtype=torch.int32))
    assert bitwise_equal(torch.tensor([True, False]), torch.tensor([True, False]))
    assert not bitwise_equal(torch.tensor([True, False]), torch.tensor([True, True]))


def reply_with(output: torch.Tensor, input_after: torch.Tensor) -> tuple[dict, bytes]:
    """A candidate process's reply to a call that returned ``output``."""
    descriptions, blob = encode_tensors([output, input_after])
    reply = {"status": "ok", "findings": [], "structure": {"type": "tensor", "index": 0}}
    return {**reply, "tensors": descriptions, "outputs": 1}, blob


@pytest.mark.parametrize("writes", [False, True], ids=["reads", "writes"])
def test_the_inputs_state_after_a_call_is_the_references(writes):
    # An operator that writes its input (as an in-place one would) must leave it as the
    # reference does; one that does not write it must leave it untouched, bit for bit.
    sample = SimpleNamespace(input=torch.tensor([1.0, -0.0]), args=(), kwargs={})
    operator = SimpleNamespace(op=lambda x: x.mul_(2) if writes else x * 2)
    reference = compute_reference(operator, sample)
    judge = Judge(find_opinfo("exp"), load_settings())
    output = torch.tensor([2.0, -0.0])
    untouched, doubled = sample.input.clone(), output.clone()

    assert reference.inputs_written == (writes,)
    assert judge.verdict(*reply_with(output, doubled if writes else untouched), reference) is None
    if writes:
        failure = judge.verdict(*reply_with(output, untouched), reference)
        assert (failure.outcome, failure.check) == ("accuracy_error", "accuracy")
        assert failure.message == "input 0 after the call (the operator writes it): values differ"
        assert failure.diff.first_mismatches == [
            ElementMismatch(index=[0], actual="1.0", expected="2.0")
        ]
    else:
        failure = judge.verdict(*reply_with(output, torch.tensor([1.0, 0.0])), reference)
        assert (failure.outcome, failure.check) == ("cheat_detected", "mutation")
        assert failure.message.startswith("mutation: wrapper modified input 0 (Tensor[float32]")


def test_shipped_settings_load():
    settings = load_settings()

    assert settings.tolerance("exp", "bfloat16") == Tolerance(atol=1e-2, rtol=1.6e-2)
    assert settings.tolerance("exp", "int32") is None
    assert "t" in settings.launch_exempt_ops


def test_malformed_settings_name_the_problem(tmp_path):
    path = tmp_path / "tolerances.yaml"
    path.write_text("tolerances:\n  float32: {atol: fast}\n")

    with pytest.raises(ValueError, match="tolerances.float32"):
        load_settings(path)


def test_negative_tolerances_are_refused(tmp_path):
    path = tmp_path / "tolerances.yaml"
    path.write_text(
        "tolerances: {}\nop_tolerances:\n  exp:\n    float16: {atol: 0, rtol: -1.0e-3}\n"
    )

    with pytest.raises(ValueError, match="op_tolerances.exp.float16: atol and rtol must not be"):
        load_settings(path)


def test_payload_has_the_documented_shape():
    result = ResultBuilder(dtypes=["float32", "int32"], sample_sets=(SAMPLE_INPUTS, EXTREMAL))
    result.record_pass("float32", SAMPLE_INPUTS)
    result.record_failure(
        Failure(
            "accuracy_error",
            "accuracy",
            "values differ",
            dtype="float32",
            sample_set=EXTREMAL,
            sample_index=1,
            diff=TensorDiff(reason="values differ", mismatched=1),
        )
    )

    payload = result.payload()

    assert payload["outcome"] == "accuracy_error"
    assert payload["tests_run"] == 2 and payload["tests_passed"] == 1
    assert payload["per_dtype"] == {
        "float32": {
            "run": 2,
            "passed": 1,
            "outcome": "accuracy_error",
            "sets": {SAMPLE_INPUTS: {"run": 1, "passed": 1}, EXTREMAL: {"run": 1, "passed": 0}},
        },
        "int32": {
            "run": 0,
            "passed": 0,
            "outcome": "skipped",
            "sets": {SAMPLE_INPUTS: {"run": 0, "passed": 0}, EXTREMAL: {"run": 0, "passed": 0}},
        },
    }
    assert set(payload["failure"]) == {
        "dtype",
        "sample_set",
        "sample_index",
        "sample",
        "message",
        "check",
        "findings",
        "compile_log",
        "backtrace",
        "cuda_error",
        "signal",
        "exit_code",
        "diff",
        "stdout",
        "stderr",
    }
    assert set(payload) == {
        "outcome",
        "tests_run",
        "tests_passed",
        "per_dtype",
        "failure",
        "compile_s",
        "run_s",
        "sandbox",
        "contract",
    }


def _compile_step_raising(error: Exception, tmp_path):
    counter = LaunchCounter(CodeOwners(tmp_path), lambda: None, lookup("interpreter"))
    counter.begin(Findings())

    def backend(*args, **kwargs):
        raise error

    return counter._timed_compile(backend)


def test_a_backend_failure_while_compiling_is_a_compile_error(tmp_path):
    # What triton 3.6 raised on an H100 for a reduction over a 1-element block.
    compile_step = _compile_step_raising(RuntimeError("PassManager::run failed"), tmp_path)

    with pytest.raises(BackendCompileError, match="RuntimeError: PassManager::run failed"):
        compile_step(object())


def test_a_frontend_compilation_error_passes_through_unchanged(tmp_path):
    error = CompilationError.__new__(CompilationError)
    compile_step = _compile_step_raising(error, tmp_path)

    with pytest.raises(CompilationError) as caught:
        compile_step(object())
    assert caught.value is error
