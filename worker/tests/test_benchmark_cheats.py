"""The timing-cheat corpus (tests/corpus/timing/): every cheat on a benchmark is caught, by the
check named, and its honest twin passes the same benchmark (ANTI-CHEAT.md, "Speed verdicts").

The harness runs without its static gate here, so that each cheat reaches the dynamic layer;
``test_static_gate_refuses_before_timing`` shows which of them the gate refuses first. Cheats
that show only on a GPU run when ``OPFORGE_HARNESS_DEVICE=cuda`` (ops/gpu-check.sh, step
``timing``)."""

import pytest
from harness_helpers import DEVICE, source

from opforge_worker.benchmark import run_benchmark
from opforge_worker.harness import Harness

CUDA_ONLY = "needs a cuda device (OPFORGE_HARNESS_DEVICE=cuda)"


def benchmark_request(name: str, op: str = "exp", **overrides) -> dict:
    return {
        "op": op,
        "variant": "",
        "source": source(name),
        "wrapper": op,
        "dtypes": ["float32"],
        "seed": 0,
        "timeout_s": 120.0,
        **overrides,
    }


@pytest.fixture(scope="module")
def harness():
    with Harness(DEVICE, static_gate=False) as harness:
        yield harness


CHEATS = [
    # (cheat, op, check that must catch it, honest twin, device kind it shows on, or None)
    ("timing/pointer_cache", "exp", "timing_cache", "honest/exp", None),
    ("timing/pointer_cache_copy", "exp", "timing_cache", "honest/exp", None),
    ("timing/shape_cache", "exp", "timing_cache", "honest/exp", None),
    ("timing/batched", "exp", "timing_launches", "honest/exp", None),
    ("timing/patched_timer", "exp", "timing_timer", "honest/exp", None),
    ("timing/deferred_thread", "exp", "thread", "honest/exp", None),
    ("cheats/subclass", "exp", "output_type", "honest/exp", None),
    ("timing/constant", "isfinite", "timing_cache", "timing/isfinite", None),
    ("timing/persisting_l2", "exp", "sandbox", "honest/exp", None),
    ("timing/side_stream", "exp", "stream", "honest/exp", "cuda"),
]


@pytest.mark.parametrize(
    ("cheat", "op", "check", "twin", "shows_on"), CHEATS, ids=[c[0] for c in CHEATS]
)
def test_timing_cheat_is_caught_and_its_twin_passes(harness, cheat, op, check, twin, shows_on):
    if shows_on is not None and shows_on != DEVICE:
        pytest.skip(CUDA_ONLY)
    caught = run_benchmark(harness, benchmark_request(cheat, op))

    assert caught["outcome"] == "cheat_detected", caught["failure"]
    assert caught["failure"]["check"] == check, caught["failure"]
    assert caught["failure"]["message"].startswith(check)
    assert caught["timings"] == []
    honest = run_benchmark(harness, benchmark_request(twin, op))
    assert honest["outcome"] == "pass", honest["failure"]
    assert honest["timings"]


@pytest.mark.parametrize(("kernel", "op"), [("honest/t", "t"), ("honest/clone", "clone")])
def test_an_output_that_views_its_inputs_is_no_reuse_though_input_memory_comes_back(
    harness, kernel, op
):
    # t returns a view of its input (an alias the operator allows), and the benchmark hands the
    # same input memory back every third call with the other value set: neither is a cache.
    result = run_benchmark(harness, benchmark_request(kernel, op))

    assert result["outcome"] == "pass", result["failure"]
    assert result["timings"]


def test_a_kernel_right_only_on_its_first_calls_fails_after_timing(harness):
    # Its first timed output of each value set is right; the later ones are checked too.
    result = run_benchmark(harness, benchmark_request("timing/right_first_calls"))

    assert result["outcome"] == "accuracy_error", result["failure"]
    assert result["failure"]["check"] == "timing_repeat"
    assert result["timings"] == []


GATED = [
    # (cheat, op, outcome with the static gate on, its check)
    ("timing/pointer_cache", "exp", "lint_violation", "static"),
    ("timing/patched_timer", "exp", "cheat_detected", "static"),
    ("timing/deferred_thread", "exp", "cheat_detected", "static"),
    ("timing/persisting_l2", "exp", "cheat_detected", "static"),
    ("timing/side_stream", "exp", "lint_violation", "static"),
    # State in a default argument passes the gate: the dynamic layer catches these alone.
    ("timing/shape_cache", "exp", "cheat_detected", "timing_cache"),
    ("timing/batched", "exp", "cheat_detected", "timing_launches"),
    ("timing/constant", "isfinite", "cheat_detected", "timing_cache"),
]


@pytest.fixture(scope="module")
def gated():
    with Harness(DEVICE) as harness:
        yield harness


@pytest.mark.parametrize(("cheat", "op", "outcome", "check"), GATED, ids=[g[0] for g in GATED])
def test_with_the_static_gate_each_cheat_is_refused_or_caught_while_timing(
    gated, cheat, op, outcome, check
):
    result = run_benchmark(gated, benchmark_request(cheat, op))

    assert (result["outcome"], result["failure"]["check"]) == (outcome, check), result["failure"]
    assert result["timings"] == []
