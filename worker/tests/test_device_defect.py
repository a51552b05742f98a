"""A failure that a recorded defect of the toolchain explains is device_defect, never a pass and
never the kernel's fault; one that no defect explains stays what it is. The real worker's harness
on the interpreter, with the defects its conformance probes find here."""

from __future__ import annotations

import pytest
from harness_helpers import source

from opforge_worker.conformance import probe_toolchain
from opforge_worker.harness import Harness

#: neg as ``-x``: Triton 3.6's interpreter subtracts a bfloat16's bits from 0 (0.5 -> -8.0), and
#: Triton builds -x as 0 - x (+0.0 for +0.0, where neg gives -0.0).
MINUS_NEG = source("honest/neg").replace(
    "tl.load(x_ptr + offsets, mask=mask) * -1", "-tl.load(x_ptr + offsets, mask=mask)"
)
#: Its wrong twin, -x - x: twice the negation, wrong on any device, through the same defects.
WRONG_NEG = source("honest/neg").replace(
    "tl.load(x_ptr + offsets, mask=mask) * -1",
    "-tl.load(x_ptr + offsets, mask=mask) - tl.load(x_ptr + offsets, mask=mask)",
)


def neg_request(candidate: str, dtype: str) -> dict:
    return {
        "op": "neg",
        "variant": "",
        "source": candidate,
        "wrapper": "neg",
        "dtypes": [dtype],
        "mode": "first_failure",
        "seed": 0,
        "timeout_s": 60.0,
    }


@pytest.fixture(scope="module")
def defects(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPFORGE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        return tuple(probe_toolchain("interpreter", "d" * 16).defects)


@pytest.fixture(scope="module")
def harness(defects, tmp_path_factory):
    with Harness(
        "interpreter", scratch_root=tmp_path_factory.mktemp("h"), toolchain_defects=defects
    ) as h:
        yield h


def test_a_bfloat16_neg_by_minus_x_is_a_device_defect_naming_it(harness):
    result = harness.run_test(neg_request(MINUS_NEG, "bfloat16"))
    assert result["outcome"] == "device_defect", result["failure"]
    assert result["per_dtype"]["bfloat16"]["outcome"] == "device_defect"
    failure = result["failure"]
    assert failure["check"] == "accuracy"
    assert failure["message"].startswith(
        "device_defect: negate_bfloat16: this toolchain computes -x on bfloat16 wrongly "
        "(x=[0.5, -0.25, 1.0, -3.0], y=[0.5, -0.25, 1.0, -3.0] gives [-8.0, 16.0, -4.0, 1.5], "
        "expected [-0.5, 0.25, -1.0, 3.0]); with it corrected (negation_sign_flip) every "
        "bfloat16 sample passes. Workaround: (-x.to(tl.float32)).to(tl.bfloat16)."
    )
    assert "values differ" in failure["message"]  # what the device did, kept
    probes = [defect["probe"] for defect in failure["defects"]]
    assert probes[0] == "negate_bfloat16" and all("bfloat16" in p for p in probes)
    assert "probe[(1,)](x, y, out, 4, BLOCK=4)" in failure["defects"][0]["reproducer"]


def test_a_float32_neg_by_minus_x_loses_the_sign_of_zero_to_the_frontend(harness):
    result = harness.run_test(neg_request(MINUS_NEG, "float32"))
    assert result["outcome"] == "device_defect", result["failure"]
    assert [d["probe"] for d in result["failure"]["defects"]] == ["negate_zero_float32"]


def test_a_wrong_kernel_stays_an_accuracy_error_where_a_defect_touches_it_too(harness):
    result = harness.run_test(neg_request(WRONG_NEG, "bfloat16"))
    assert result["outcome"] == "accuracy_error"
    assert "defects" not in result["failure"]
    assert not result["failure"]["message"].startswith("device_defect")


def test_the_honest_neg_passes_and_no_defect_is_named(harness):
    # (x * -1 on bfloat16 the interpreter cannot run: it has no bfloat16 constants.)
    result = harness.run_test(neg_request(source("honest/neg"), "float32"))
    assert result["outcome"] == "pass", result["failure"]


def test_without_recorded_defects_the_failure_is_what_it_looks_like(tmp_path):
    with Harness("interpreter", scratch_root=tmp_path) as plain:
        result = plain.run_test(neg_request(MINUS_NEG, "bfloat16"))
    assert result["outcome"] == "accuracy_error"
