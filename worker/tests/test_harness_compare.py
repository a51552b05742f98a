"""Comparison rules, settings and the result payload, without a candidate process."""

import math

import pytest
import torch
from triton.compiler.errors import CompilationError

from opforge_worker.checks import BackendCompileError, Findings, LaunchCounter
from opforge_worker.compare import bitwise_equal, compare_structure, tensor_diff
from opforge_worker.results import Failure, ResultBuilder
from opforge_worker.sandbox import CodeOwners
from opforge_worker.settings import Tolerance, load_settings

F32 = Tolerance(atol=1e-5, rtol=1.3e-5)


def test_values_within_tolerance_match():
    expected = torch.tensor([1.0, 100.0, -3.0])

    assert tensor_diff(expected * (1 + 1e-5), expected, F32) is None


def test_values_outside_tolerance_are_summarised():
    expected = torch.tensor([1.0, 2.0, 3.0, 4.0])
    actual = torch.tensor([1.0, 2.5, 3.0, 4.0])

    diff = tensor_diff(actual, expected, F32)

    assert diff["mismatched"] == 1 and diff["total"] == 4
    assert diff["max_abs_error"] == pytest.approx(0.5)
    assert diff["max_rel_error"] == pytest.approx(0.25)
    assert diff["first_mismatches"] == [{"index": [1], "actual": 2.5, "expected": 2.0}]


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

    assert diff is not None and diff["nan_inf_mismatches"] >= 1


def test_nan_and_inf_at_the_same_positions_match():
    expected = torch.tensor([math.nan, math.inf, -math.inf, 2.0])

    assert tensor_diff(expected.clone(), expected, F32) is None


def test_integers_compare_exactly():
    diff = tensor_diff(torch.tensor([1, 2, 4]), torch.tensor([1, 2, 3]), None)

    assert diff["mismatched"] == 1
    assert tensor_diff(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3]), None) is None


def test_shape_and_dtype_must_be_the_references():
    expected = torch.zeros(2, 3)

    assert tensor_diff(torch.zeros(3, 2), expected, F32)["reason"] == "shape differs"
    assert (
        tensor_diff(torch.zeros(2, 3, dtype=torch.float64), expected, F32)["reason"]
        == "dtype differs"
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


def test_payload_has_the_documented_shape():
    result = ResultBuilder(dtypes=["float32", "int32"])
    result.record_pass("float32")
    result.record_failure(
        Failure(
            "accuracy_error",
            "accuracy",
            "values differ",
            dtype="float32",
            sample_index=1,
            diff={"mismatched": 1},
        )
    )

    payload = result.payload()

    assert payload["outcome"] == "accuracy_error"
    assert payload["tests_run"] == 2 and payload["tests_passed"] == 1
    assert payload["per_dtype"] == {
        "float32": {"run": 2, "passed": 1, "outcome": "accuracy_error"},
        "int32": {"run": 0, "passed": 0, "outcome": "skipped"},
    }
    assert set(payload["failure"]) == {
        "dtype",
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
    }


def _compile_step_raising(error: Exception, tmp_path):
    counter = LaunchCounter(CodeOwners(tmp_path), lambda: None, "interpreter")
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
