"""Honest kernels pass on every dtype they claim, through the static gate and the real sandboxed
candidate process."""

import pytest
from harness_helpers import DEVICE, request

from opforge_worker.harness import Harness
from opforge_worker.validate import TARGET_DTYPES


@pytest.fixture(scope="module")
def harness():
    with Harness(DEVICE) as harness:
        yield harness


HONEST = [
    # (corpus file, op, dtypes it claims)
    ("honest/exp", "exp", list(TARGET_DTYPES)),
    ("honest/exp_upcast", "exp", ["bfloat16"]),
    ("honest/amax", "amax", list(TARGET_DTYPES)),
    ("honest/index_select", "index_select", ["float32", "int64"]),
    ("honest/cat", "cat", ["float32", "bfloat16"]),
    ("honest/clone", "clone", ["float32", "int32"]),
    ("honest/t", "t", ["float32"]),
    # What the static gate once refused by its spelling (test_linter.py's NEAR_MISSES): autotune,
    # heuristics, __all__ and a __main__ self-test that would fail if it ran (it asks for CUDA);
    ("honest/sigmoid_autotune", "sigmoid", ["float32", "int64"]),
    # torch.tensor of host lists, a complex dtype table, set.add, list.sort, a local named os,
    # torch.device in an annotation;
    ("honest/flip_strided", "flip", ["float32", "int64"]),
    # float.is_integer, torch.as_tensor of a host number;
    ("honest/softplus_scalars", "nn.functional.softplus", ["float32"]),
    # a docstring before __future__, math, typing and torch imports, autotune configs in a
    # module constant, a kernel named freely launched from a helper, torch.broadcast_tensors.
    ("honest/exp_third_party_form", "exp", ["float32", "bfloat16", "int64"]),
]


@pytest.mark.parametrize(("name", "op", "dtypes"), HONEST, ids=[h[0] for h in HONEST])
def test_honest_kernel_passes_every_claimed_dtype(harness, name, op, dtypes):
    result = harness.run_test(request(name, op, dtypes, op.rsplit(".", 1)[-1], mode="all"))

    assert result["failure"] is None, result["failure"]
    assert result["outcome"] == "pass"
    assert list(result["per_dtype"]) == dtypes
    for dtype in dtypes:
        entry = result["per_dtype"][dtype]
        assert entry["outcome"] == "pass"
        assert entry["run"] == entry["passed"] > 0
    assert (
        result["tests_run"]
        == result["tests_passed"]
        == sum(result["per_dtype"][d]["run"] for d in dtypes)
    )


def test_candidate_process_stays_warm_between_candidates(harness):
    harness.run_test(request("honest/exp", "exp"))
    started = harness._processes_started

    for name, op in (("honest/clone", "clone"), ("honest/exp", "exp"), ("honest/t", "t")):
        assert harness.run_test(request(name, op))["outcome"] == "pass"

    assert harness._processes_started == started


def test_payload_reports_the_containment_in_force(harness):
    sandbox = harness.run_test(request("honest/exp", "exp"))["sandbox"]

    assert set(sandbox) >= {"namespaces", "network", "landlock", "limits", "environment"}
    assert "OPFORGE" not in sandbox["environment"]
