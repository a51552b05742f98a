"""The benchmark job through the harness (TIMING.md): its inputs (OpInfo's larger samples, the
ladder, a carried model set), its baselines (ATen, a library kernel), what its result holds, and
its verdict after timing on the model set's inputs."""

import pytest
import torch
from harness_helpers import DEVICE, FLAT_NEG, source

from opforge_worker import model_sets, timing
from opforge_worker.benchmark import run_benchmark
from opforge_worker.harness import Harness
from opforge_worker.opinfo import find_opinfo
from opforge_worker.samples import SampleCache

CATALOG = [{"name": "neg", "variant": "", "aten_overloads": ["aten.neg.default"]}]
PROTOCOL = timing.load().protocol(DEVICE)


def benchmark_request(op: str, candidate: str, **overrides) -> dict:
    return {
        "op": op,
        "source": candidate,
        "wrapper": op,
        "dtypes": ["float32"],
        "seed": 0,
        "timeout_s": 120.0,
        **overrides,
    }


@pytest.fixture(scope="module")
def toy_set(tmp_path_factory):
    """The set model:toy as the daemon carries it: one strided neg call."""
    elsewhere = tmp_path_factory.mktemp("capturing-host")
    capture = model_sets.Capture()
    with capture:
        torch.neg(torch.randn(6, 8)[:, ::2])
    model_sets.save("toy", capture, CATALOG, elsewhere)
    return {"model:toy": model_sets.encoded("toy", elsewhere)["neg"]}


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPFORGE_MODEL_SETS_DIR", str(tmp_path_factory.mktemp("worker-sets")))
        with Harness(DEVICE, sample_cache=SampleCache()) as harness:
            yield harness


def test_a_pass_times_every_input_against_aten(harness, toy_set):
    result = run_benchmark(
        harness, benchmark_request("neg", source("honest/neg"), model_samples=toy_set)
    )

    assert (result["outcome"], result["baseline"]) == ("pass", "aten"), result["failure"]
    assert result["timer"] == harness.kind.timer
    sources = [t["source"] for t in result["timings"]]
    assert sources[0].startswith("opinfo:")
    elementwise = next(ladder for ladder in timing.load().ladders if ladder.name == "elementwise")
    assert [s for s in sources if s.startswith("ladder:")] == [
        f"ladder:{n}" for n in elementwise.elements if n <= PROTOCOL.ladder_max_elements
    ]
    model = [t for t in result["timings"] if t["source"].startswith("model:")]
    assert [(t["source"], t["shape_class"]) for t in model] == [("model:toy:0", "model:toy")]
    for shape in result["timings"]:
        assert PROTOCOL.min_repetitions <= shape["repetitions"] <= PROTOCOL.max_repetitions
        assert shape["speedup"] == pytest.approx(shape["baseline_us"] / shape["candidate_us"])
        assert shape["launch_bound"] == (shape["baseline_us"] < PROTOCOL.launch_bound_us)
        assert shape["candidate_iqr_us"] >= 0 and shape["baseline_iqr_us"] >= 0
    ladder = {t["source"]: t for t in result["timings"]}
    assert (ladder["ladder:4096"]["elements"], ladder["ladder:4096"]["bytes"]) == (4096, 32768)
    assert result["geomean_speedup"] > 0 and result["noise"] >= 0


def test_the_model_set_is_checked_after_timing(harness, toy_set):
    # Right on OpInfo's contiguous samples and the ladder, wrong on the model's strided call.
    result = run_benchmark(harness, benchmark_request("neg", FLAT_NEG, model_samples=toy_set))

    assert result["outcome"] == "accuracy_error", result["failure"]
    assert result["failure"]["sample_set"] == "model:toy:0"
    assert result["timings"] == []


def test_a_library_kernel_is_the_baseline_when_given(harness):
    exp = source("honest/exp")
    result = run_benchmark(harness, benchmark_request("exp", exp, baseline_source=exp))

    assert result["outcome"] == "pass", result["failure"]
    assert result["baseline"].startswith("library:") and len(result["baseline"]) == 24


def test_a_baseline_the_gate_refuses_is_the_harness_problem(harness):
    refused = source("honest/exp") + "\nimport os\n"
    result = run_benchmark(
        harness, benchmark_request("exp", source("honest/exp"), baseline_source=refused)
    )

    assert result["outcome"] == "harness_error"
    assert "library baseline" in result["failure"]["message"]


def test_a_bad_request_is_a_harness_error(harness):
    result = run_benchmark(harness, {"op": "exp"})

    assert result["outcome"] == "harness_error"
    assert result["failure"]["message"].startswith("bad benchmark request")


def test_an_operator_of_a_tensor_list_is_timed_on_its_ladder(harness):
    # cat's OpInfo samples stop at a few thousand elements; models join far larger tensors.
    result = run_benchmark(harness, benchmark_request("cat", source("honest/cat")))

    assert result["outcome"] == "pass", result["failure"]
    joining = timing.load().ladder(find_opinfo("cat"))
    assert joining is not None and joining.name == "joining"
    ladder = [t for t in result["timings"] if t["source"].startswith("ladder:")]
    assert [t["source"] for t in ladder] == [
        f"ladder:{n}" for n in joining.elements if n <= PROTOCOL.ladder_max_elements
    ]
    # the largest tensor of the call (each joined one) decides its shape class, as at export
    for timed in ladder:
        count = int(timed["source"].split(":")[1])
        assert timed["elements"] == count
        assert timed["shape_class"] == timing.load().shape_class(count)
