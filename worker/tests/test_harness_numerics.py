"""A numerics failure names its set and transformation, and is judged with the atol scaled as
its values were (the wrong corpus's pairs show each class caught, tests/test_harness_wrong.py)."""

import pytest
from harness_helpers import DEVICE, request

from opforge_worker.harness import Harness
from opforge_worker.sample_sets import NUMERICS, SAMPLE_INPUTS
from opforge_worker.settings import load_settings


@pytest.fixture(scope="module")
def harness():
    with Harness(DEVICE) as harness:
        yield harness


def numerics_failure(harness, name, op):
    result = harness.run_test(request(name, op, sample_sets=[SAMPLE_INPUTS, NUMERICS]))
    assert result["outcome"] == "accuracy_error", result["failure"]
    failure = result["failure"]
    assert failure["sample_set"] == NUMERICS
    return failure


def test_tanh_as_a_quotient_of_exponentials_fails_where_its_values_are_scaled_up(harness):
    # (e^2x - 1) / (e^2x + 1) is inf / inf = NaN at 9e4, where tanh is 1.
    failure = numerics_failure(harness, "wrong/tanh.exp_overflow", "tanh")

    assert failure["message"] == "numerics (scaled by 1e4): output: values differ"
    assert "numerics: scaled by 1e4 (sample #" in failure["sample"]
    assert failure["diff"]["nan_inf_mismatches"] > 0


def test_a_scaled_down_sample_is_judged_with_an_atol_scaled_down_alike(harness):
    failure = numerics_failure(harness, "wrong/log1p.naive_near_zero", "log1p")

    assert failure["message"].startswith("numerics (scaled by 1e-4): ")
    float32 = load_settings().tolerances["float32"]
    # log(1 + x) is off by about 6e-8 at x near 1e-4: far inside float32's atol of 1e-5.
    assert failure["diff"]["atol"] < float32.atol * 1e-3
    assert failure["diff"]["max_abs_error"] < float32.atol
