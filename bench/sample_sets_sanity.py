"""Runs kernels on the interpreter against every sample set, without the harness: the honest
kernels (config/examples/, worker/tests/corpus/honest/) must match the reference on every
generated sample; each small wrong kernel here (one per defect class) must miss on some sample
of a generated set, and shows which sets catch it.

    cd worker && python ../bench/sample_sets_sanity.py [--dtypes float32,int32] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: kernels run on CPU tensors

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from opforge_worker import opinfo as opinfo_db  # noqa: E402
from opforge_worker import sample_sets  # noqa: E402
from opforge_worker.judge import compute_reference  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HONEST = [
    ("argmax", "", ROOT / "config/examples/argmax.py", "argmax_wrapper"),
    ("diag", "", ROOT / "config/examples/diag.py", "diag_wrapper"),
    ("exp", "", ROOT / "config/examples/exp.py", "exp_wrapper"),
    ("amax", "", ROOT / "worker/tests/corpus/honest/amax.py", "amax"),
    ("cat", "", ROOT / "worker/tests/corpus/honest/cat.py", "cat"),
    ("clone", "", ROOT / "worker/tests/corpus/honest/clone.py", "clone"),
    ("exp", "", ROOT / "worker/tests/corpus/honest/exp.py", "exp"),
    ("exp", "", ROOT / "worker/tests/corpus/honest/exp_upcast.py", "exp"),
    ("index_select", "", ROOT / "worker/tests/corpus/honest/index_select.py", "index_select"),
    ("t", "", ROOT / "worker/tests/corpus/honest/t.py", "t"),
]

# One wrong kernel per defect class: (what is wrong, operator, dtypes, source, wrapper). The
# interpreter computes tl.maximum with np.maximum, which propagates NaN where a GPU's maxnum drops
# it: there the first kernel is right; the next two show the same defect (torch.fmax is maxnum).
WRONG = [
    (
        "NaN dropped by tl.maximum (a GPU's: the interpreter's propagates NaN)",
        "maximum",
        ["float32"],
        """
@triton.jit
def maximum_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(a, b), mask=mask)

def maximum(input, other):
    a, b = torch.broadcast_tensors(input, other)
    a, b = a.contiguous(), b.contiguous()
    out = torch.empty(a.shape, dtype=a.dtype)
    if out.numel():
        maximum_kernel[(triton.cdiv(out.numel(), 256),)](a, b, out, out.numel(), BLOCK=256)
    return out
""",
        "maximum",
    ),
    (
        "NaN dropped as a GPU's tl.maximum does (maxnum: torch.fmax, emulated on the CPU)",
        "maximum",
        ["float32", "bfloat16"],
        """
def maximum(input, other):
    return torch.fmax(input, other)
""",
        "maximum",
    ),
    (
        "NaN dropped by tl.where(a > b, a, b)",
        "maximum",
        ["float32"],
        """
@triton.jit
def maximum_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(a > b, a, b), mask=mask)

def maximum(input, other):
    a, b = torch.broadcast_tensors(input, other)
    a, b = a.contiguous(), b.contiguous()
    out = torch.empty(a.shape, dtype=a.dtype)
    if out.numel():
        maximum_kernel[(triton.cdiv(out.numel(), 256),)](a, b, out, out.numel(), BLOCK=256)
    return out
""",
        "maximum",
    ),
    (
        "NaN mapped to 0 by tl.where(x > 0, x, 0)",
        "nn.functional.relu",
        ["float32"],
        """
@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, 0), mask=mask)

def relu(input, inplace=False):
    x = input.contiguous()
    out = torch.empty_like(x)
    if out.numel():
        relu_kernel[(triton.cdiv(out.numel(), 256),)](x, out, out.numel(), BLOCK=256)
    return out
""",
        "relu",
    ),
    (
        "tanh overflows: (e^2x - 1) / (e^2x + 1)",
        "tanh",
        ["float32"],
        """
@triton.jit
def tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    e = tl.exp(2 * x)
    tl.store(out_ptr + offsets, (e - 1) / (e + 1), mask=mask)

def tanh(input):
    x = input.contiguous()
    out = torch.empty_like(x)
    if out.numel():
        tanh_kernel[(triton.cdiv(out.numel(), 256),)](x, out, out.numel(), BLOCK=256)
    return out
""",
        "tanh",
    ),
    (
        "strided input read as flat",
        "exp",
        ["float32"],
        """
@triton.jit
def exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.exp(x.to(tl.float32)).to(x.dtype), mask=mask)

def exp(input):
    out = torch.empty(input.shape, dtype=input.dtype)
    if out.numel():
        exp_kernel[(triton.cdiv(out.numel(), 256),)](input, out, out.numel(), BLOCK=256)
    return out
""",
        "exp",
    ),
    (
        "integers through float32",
        "neg",
        ["int32", "int64"],
        """
@triton.jit
def neg_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, (-(x.to(tl.float32))).to(x.dtype), mask=mask)

def neg(input):
    x = input.contiguous()
    out = torch.empty_like(x)
    if out.numel():
        neg_kernel[(triton.cdiv(out.numel(), 256),)](x, out, out.numel(), BLOCK=256)
    return out
""",
        "neg",
    ),
]


def load(source: str, wrapper: str):
    namespace = {"torch": torch, "triton": triton, "tl": tl}
    exec(compile(source, wrapper, "exec"), namespace)  # our own kernels, for this check only
    return namespace[wrapper]


def misses(opinfo, wrapper, sample) -> str:
    """Why ``wrapper`` is wrong on ``sample`` (its reference valid), or "" when it matches."""
    expected = compute_reference(opinfo, sample).expected
    try:
        actual = wrapper(sample.input, *sample.args, **sample.kwargs)
        torch.testing.assert_close(actual, expected, equal_nan=True, check_stride=False)
    except Exception as error:  # a wrong kernel fails any way it likes
        return f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
    return ""


def run(opinfo, wrapper, dtype, seed) -> dict[str, list[str]]:
    """Per set, the samples ``wrapper`` misses, each as "name: why"."""
    missed = {}
    for name in sample_sets.SETS:
        samples = sample_sets.generate(opinfo, name, dtype, seed)
        missed[name] = []
        for index, sample in enumerate(samples):
            why = misses(opinfo, wrapper, sample)
            if why:
                missed[name].append(f"{sample.name or f'#{index}'}: {why}")
        print(f"    {name}: {len(samples)} samples, {len(missed[name])} missed")
    return missed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="float32,float16,bfloat16,int32,int64")
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    warnings.simplefilter("ignore")
    dtypes = arguments.dtypes.split(",")
    honest_misses = 0
    for op, variant, path, wrapper_name in HONEST:
        opinfo = opinfo_db.find_opinfo(op, variant)
        wrapper = load(path.read_text(), wrapper_name)
        for dtype_name in dtypes:
            dtype = opinfo_db.dtype_from_name(dtype_name)
            if dtype not in opinfo.supported_dtypes("cpu"):
                continue
            print(f"honest {path.relative_to(ROOT)} {dtype_name}")
            for name, lines in run(opinfo, wrapper, dtype, arguments.seed).items():
                honest_misses += len(lines)
                for line in lines:
                    print(f"      MISSED {name}: {line}")
    print(f"honest kernels: {honest_misses} samples missed")
    uncaught = 0
    for defect, op, defect_dtypes, source, wrapper_name in WRONG:
        opinfo = opinfo_db.find_opinfo(op)
        wrapper = load(source, wrapper_name)
        for dtype_name in defect_dtypes:
            print(f"wrong: {defect} ({op}, {dtype_name})")
            missed = run(opinfo, wrapper, opinfo_db.dtype_from_name(dtype_name), arguments.seed)
            caught = [name for name in sample_sets.GENERATED_SETS if missed[name]]
            uncaught += not caught
            print(f"    caught by: {', '.join(caught) or 'NOTHING'}")
            for name in caught:
                print(f"      e.g. {missed[name][0]}")
    print(f"wrong kernels: {uncaught} not caught by a generated set")


if __name__ == "__main__":
    main()
