"""The worked examples pass both lint profiles and match PyTorch on every OpInfo sample.

The acceptance is the validation harness (on OPFORGE_HARNESS_DEVICE, the interpreter unless the
GPU script sets cuda). A second, stricter check runs every OpInfo *reference* input, dense and
strided, plus rows longer than one block, in a child process (TRITON_INTERPRET must be set before
triton is imported). This file is also that child:
`TRITON_INTERPRET=1 python test_examples.py OP` checks one example on the interpreter,
`python test_examples.py OP --device cuda` on a GPU (the GPU script); both exit 1 on a failure.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "config" / "examples"
EXAMPLE_OPS = ("exp", "argmax", "diag")
OPFORGE_DTYPES = ("bfloat16", "float16", "float32", "int32", "int64")
_STRIDED_COPY_LIMIT = 65536


@pytest.mark.parametrize("profile", ["cuda", "interpreter"])
@pytest.mark.parametrize("op", EXAMPLE_OPS)
def test_example_passes_lint(op, profile):
    from opforge_worker.linter import lint_source

    source = (EXAMPLES_DIR / f"{op}.py").read_text()
    report = lint_source(source, op=op, wrapper=f"{op}_wrapper", profile=profile)
    assert report == {
        "ok": True,
        "violations": [],
        "syntax_error": None,
        "gate_outcome": "pass",
        "gate_check": "",
    }


@pytest.fixture(scope="module")
def harness():
    from opforge_worker.harness import Harness

    with Harness(os.environ.get("OPFORGE_HARNESS_DEVICE", "interpreter")) as harness:
        yield harness


@pytest.mark.parametrize("op", EXAMPLE_OPS)
def test_example_passes_the_harness_for_every_dtype(harness, op):
    request = {
        "op": op,
        "variant": "",
        "source": (EXAMPLES_DIR / f"{op}.py").read_text(),
        "wrapper": f"{op}_wrapper",
        "dtypes": list(OPFORGE_DTYPES),
        "mode": "all",
        "seed": 0,
        "timeout_s": 120.0,
    }
    result = harness.run_test(request)
    assert result["failure"] is None, result["failure"]
    assert result["outcome"] == "pass"
    for dtype in OPFORGE_DTYPES:
        entry = result["per_dtype"][dtype]
        assert entry["run"] == entry["passed"] > 0, (dtype, entry)


# Minutes on the interpreter: CI deselects it (-m "not slow"), the GPU check runs it.
@pytest.mark.slow
@pytest.mark.parametrize("op", EXAMPLE_OPS)
def test_example_matches_torch_on_every_reference_input(op):
    env = dict(os.environ, TRITON_INTERPRET="1")
    child = subprocess.run(
        [sys.executable, __file__, op], env=env, capture_output=True, text=True, timeout=900
    )
    assert child.stdout, child.stderr[-4000:]
    summary = json.loads(child.stdout.splitlines()[-1])
    assert summary["failures"] == [], summary["failures"][:5]
    assert child.returncode == 0, child.stderr[-4000:]
    # Every opforge dtype the op supports was exercised, each with more than a token sample.
    assert sorted(summary["samples"]) == sorted(summary["dtypes"])
    assert all(count >= 3 for count in summary["samples"].values()), summary["samples"]


def _load_example(op):
    import importlib.util

    import torch
    import triton
    import triton.language as tl

    spec = importlib.util.spec_from_file_location(
        f"opforge_example_{op}", EXAMPLES_DIR / f"{op}.py"
    )
    module = importlib.util.module_from_spec(spec)
    # The names a candidate gets from the harness instead of imports.
    module.torch, module.triton, module.tl = torch, triton, tl
    spec.loader.exec_module(module)
    return getattr(module, f"{op}_wrapper")


def _edge_samples(op, dtype):
    """Inputs the OpInfo samples miss: rows longer than one block, ties across blocks, NaNs."""
    from torch.testing import make_tensor
    from torch.testing._internal.opinfo.core import SampleInput

    if op == "argmax":
        # A narrow integer range makes many ties, so the first index must win across blocks.
        rows = make_tensor((3, 2500), dtype=dtype, device="cpu", low=-4, high=4)
        if dtype.is_floating_point:
            rows[1, 1500] = rows[1, 2000] = float("nan")
        return [
            SampleInput(rows),
            SampleInput(rows, dim=-1),
            SampleInput(rows, dim=0, keepdim=True),
        ]
    if op == "diag":
        vector = make_tensor((300,), dtype=dtype, device="cpu")
        matrix = make_tensor((300, 200), dtype=dtype, device="cpu")
        return [SampleInput(vector, args=(-7,)), SampleInput(matrix.t(), args=(5,))]
    return []


def _check(op, device):
    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.common_utils import noncontiguous_like

    wrapper = _load_example(op)
    opinfo = next(info for info in op_db if info.name == op and info.variant_test_name == "")
    supported = opinfo.supported_dtypes(device)
    dtypes = [name for name in OPFORGE_DTYPES if getattr(torch, name) in supported]
    failures, samples = [], {}
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        edge_samples = _edge_samples(op, dtype)
        all_samples = [*opinfo.reference_inputs("cpu", dtype), *edge_samples]
        for index, sample in enumerate(all_samples):
            layouts = ["dense", "strided"]
            if device == "cpu" and sample.input.numel() > _STRIDED_COPY_LIMIT:
                layouts.remove("strided")  # the interpreter is slow; smaller samples cover strides
            for layout in layouts:
                tensor = sample.input.to(device)
                tensor = tensor if layout == "dense" else noncontiguous_like(tensor)
                # The reference is PyTorch on the CPU, as in the harness.
                expected = opinfo.op(tensor.cpu(), *sample.args, **sample.kwargs)
                arguments = f"{tuple(tensor.shape)} {sample.args} {sample.kwargs}"
                where = f"{dtype_name} #{index} {layout} {arguments}"
                try:
                    actual = wrapper(tensor.clone(), *sample.args, **sample.kwargs)
                    assert type(actual) is torch.Tensor, type(actual)
                    assert actual.device == tensor.device, actual.device
                    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
                    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True)
                except Exception as error:  # noqa: BLE001 - every failure is reported, not raised
                    failures.append(f"{where}: {type(error).__name__}: {error}"[:500])
                samples[dtype_name] = samples.get(dtype_name, 0) + 1
    print(json.dumps({"dtypes": dtypes, "samples": samples, "failures": failures}))
    return not failures


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Check one worked example against PyTorch.")
    parser.add_argument("op", choices=EXAMPLE_OPS)
    parser.add_argument("--device", default="cpu", help="cpu (needs TRITON_INTERPRET=1) or cuda")
    arguments = parser.parse_args()
    sys.exit(0 if _check(arguments.op, arguments.device) else 1)
