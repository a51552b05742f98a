"""Check the corpus of wrong kernels and honest twins by hand, without the harness's sample sets.

For each pair (worker/tests/wrong_corpus.py): the wrong candidate must be wrong on an input made
to show its defect (a NaN mix, x[:, ::2], an expanded operand, 2^24 + 1, 1025 elements, an empty
dim, -0.0...), and the twin right on it and on many more of every dtype it claims: OpInfo's
sample_inputs, extremal values, strided, transposed, expanded and offset views, 0-dim, empty, one
element, one past a block. Candidates run in this process on the CPU under TRITON_INTERPRET=1.

"Right" means what the harness will demand: within the dtype's tolerance of ATen's result or of
the precise one (computed in float32 for float16 and bfloat16, float64 for float32, then
rounded), NaN and inf at the same positions, a zero with the reference's sign, integers exact.
Memory the wrapper allocates uninitialized is poisoned (NaN, or the integer maximum), as the
harness's candidate process does, so an unwritten output is wrong every time.

    /work/main/.venv/bin/python bench/wrong_corpus_check.py [NAME...]

Exit status 1 when any pair does not behave; one line per pair either way.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import torch
import triton
import triton.language as tl
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "worker"))
sys.path.insert(0, str(ROOT / "worker" / "tests"))

from opforge_worker import opinfo as opinfo_db
from wrong_corpus import TWINS, WRONG, Pair, load_pair, pairs

TOLERANCES = {
    torch.float32: (1.0e-5, 1.3e-5),
    torch.float16: (1.0e-3, 1.0e-3),
    torch.bfloat16: (1.0e-2, 1.6e-2),
}
PRECISE = {
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.float32: torch.float64,
}
UNINITIALIZED = {
    torch.ops.aten.empty.memory_format,
    torch.ops.aten.empty_like.default,
    torch.ops.aten.empty_strided.default,
    torch.ops.aten.new_empty.default,
}


class Poison(TorchDispatchMode):
    """Fill what the wrapper allocates uninitialized, so that an unwritten element is wrong."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func in UNINITIALIZED:
            if result.is_floating_point():
                result.fill_(float("nan"))
            elif result.dtype != torch.bool:
                result.fill_(torch.iinfo(result.dtype).max)
        return result


def load_wrapper(path: Path, wrapper: str) -> Callable:
    namespace = {"torch": torch, "triton": triton, "tl": tl}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102 (the candidate, as the harness runs it)
    return namespace[wrapper]


# --- comparison ------------------------------------------------------------------------------


def close(actual, expected) -> bool:
    if not isinstance(actual, torch.Tensor) or actual.dtype != expected.dtype:
        return False
    if actual.shape != expected.shape:
        return False
    if not expected.is_floating_point():
        return torch.equal(actual, expected)
    atol, rtol = TOLERANCES[expected.dtype]
    a, e = actual.double(), expected.double()
    if not torch.equal(a.isnan(), e.isnan()):
        return False
    special = e.isinf() | a.isinf()
    if not torch.equal(a[special], e[special]):
        return False
    finite = ~(e.isnan() | special)
    if not ((a[finite] - e[finite]).abs() <= atol + rtol * e[finite].abs()).all():
        return False
    zeros = e == 0
    return torch.equal(a[zeros].signbit(), e[zeros].signbit())


def upcast(value, dtype, wide):
    if isinstance(value, torch.Tensor) and value.dtype == dtype:
        return value.to(wide)
    if isinstance(value, (list, tuple)):
        return type(value)(upcast(item, dtype, wide) for item in value)
    return value


def is_right(op: Callable, output, args: tuple, kwargs: dict, dtype) -> bool:
    """Within tolerance of ATen's result or of the precise one (see the module docstring)."""
    expected = op(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    if close(output, expected):
        return True
    wide = PRECISE.get(dtype)
    if wide is None:
        return False
    precise = op(*upcast(args, dtype, wide), **upcast(kwargs, dtype, wide))
    return close(output, precise.to(expected.dtype))


# --- inputs ----------------------------------------------------------------------------------


def values(dtype) -> torch.Tensor:
    """Specials and ordinary values of ``dtype`` in one 1-D tensor."""
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        special = [
            float("nan"),
            float("inf"),
            float("-inf"),
            -0.0,
            0.0,
            info.max,
            -info.max,
        ]
        special += [
            info.tiny,
            -info.tiny,
            info.tiny / 4,
            -info.tiny / 4,
            1e-3,
            -1e-3,
            0.5,
            -0.5,
        ]
        special += [10.0, -10.0, 20.0, -20.0, 50.0, -50.0, 90.0, -90.0, 1e20, -1e20]
        return torch.tensor(special, dtype=torch.float64).to(dtype)
    info = torch.iinfo(dtype)
    special = [0, 1, -1, info.min, info.max, 2**24 + 1, -(2**24) - 1, 7, -7]
    if dtype == torch.int64:
        special += [2**53 + 1, -(2**53) - 1]
    return torch.tensor(special, dtype=dtype)


def ordinary(shape, dtype, generator) -> torch.Tensor:
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=generator) * 5).to(dtype)
    return torch.randint(-1000, 1000, shape, generator=generator, dtype=dtype)


def layouts(dtype, generator) -> Iterator[torch.Tensor]:
    """The same kinds of tensors the harness's sets hold: shapes, strides, offsets, specials."""
    specials = values(dtype)
    mixed = ordinary((3 * specials.numel() - 1,), dtype, generator)
    mixed[1::3] = specials  # specials between ordinary values, the last one last
    yield mixed
    yield specials
    yield ordinary((), dtype, generator)
    yield ordinary((0, 3), dtype, generator)
    yield ordinary((1,), dtype, generator)
    yield ordinary((1025,), dtype, generator)
    yield ordinary((3, 1029), dtype, generator)
    yield ordinary((6, 10), dtype, generator)[:, ::2]
    yield ordinary((7, 5), dtype, generator).t()
    yield ordinary((1, 5), dtype, generator).expand(4, 5)
    yield ordinary((20,), dtype, generator)[3:]
    yield ordinary((2, 3, 4, 5), dtype, generator).to(memory_format=torch.channels_last)


def unary_inputs(opinfo, dtype, generator) -> Iterator[tuple[tuple, dict]]:
    for sample in opinfo_db.samples_for(opinfo, "cpu", dtype, 0):
        yield (sample.input, *sample.args), dict(sample.kwargs)
    for x in layouts(dtype, generator):
        yield (x,), {}


def binary_inputs(opinfo, dtype, generator) -> Iterator[tuple[tuple, dict]]:
    for sample in opinfo_db.samples_for(opinfo, "cpu", dtype, 0):
        yield (sample.input, *sample.args), dict(sample.kwargs)
    specials = values(dtype)
    yield (specials, specials.flip(0)), {}
    yield (specials[:, None], specials[None, :]), {}
    for x in layouts(dtype, generator):
        yield (x, ordinary(x.shape, dtype, generator)), {}
        yield (ordinary(x.shape, dtype, generator), x), {}
    if opinfo.name == "mul":
        for scalar in (3, -2.5, True):
            yield (ordinary((5, 3), dtype, generator), scalar), {}


def reduction_inputs(opinfo, dtype, generator) -> Iterator[tuple[tuple, dict]]:
    summing = opinfo.name == "sum"
    for sample in opinfo_db.samples_for(opinfo, "cpu", dtype, 0):
        yield (sample.input, *sample.args), dict(sample.kwargs)
    for x in layouts(dtype, generator):
        if not x.numel() and not summing:
            continue  # amin of nothing is an error
        if summing and dtype.is_floating_point and x.numel() and x.abs().max() > 1e4:
            # Large magnitudes of both signs make a float sum depend on its order: no kernel can
            # match every order ATen might take. NaN, inf and -0.0 stay in.
            x = torch.where(x.abs() > 1e4, torch.zeros_like(x), x)
        yield (x,), {}
        if x.dim():
            yield (x,), {"dim": x.dim() - 1}
            yield (x,), {"dim": 0, "keepdim": True}
    if summing:
        yield (ordinary((3, 0), dtype, generator),), {"dim": 1}
        yield (ordinary((3, 0, 2), dtype, generator),), {"dim": (0, 1), "keepdim": True}


# --- the defect of each pair, shown on one input ------------------------------------------------


def _defects() -> dict[str, tuple[tuple, dict]]:
    nan, generator = float("nan"), torch.Generator().manual_seed(0)
    f32 = torch.float32
    return {
        "nn.functional.relu.nan_dropped": ((torch.tensor([nan, 1.0, -2.0, nan]),), {}),
        "maximum.nan_dropped": (
            (torch.tensor([nan, 1.0, nan]), torch.tensor([1.0, nan, 2.0])),
            {},
        ),
        "tanh.exp_overflow": ((torch.tensor([50.0, 90.0, 0.5, -50.0]),), {}),
        "sigmoid.exp_overflow": ((torch.tensor([100.0, 90.0, 0.0, -100.0]),), {}),
        "sqrt.flat_strided": (
            (torch.rand(6, 10, generator=generator)[:, ::2],),
            {},
        ),
        "square.int_through_float32": (
            (torch.tensor([4097, -5000, 3], dtype=torch.int32),),
            {},
        ),
        "neg.negative_zero": ((torch.tensor([0.0, 1.0, -0.0]),), {}),
        "abs.negative_zero": ((torch.tensor([-0.0, -1.5, 2.0]),), {}),
        "exp2.last_block": (
            (torch.randn(1025, generator=generator, dtype=f32) * 10,),
            {},
        ),
        "mul.operand_strides": (
            (
                torch.randn(1, 5, generator=generator).expand(4, 5),
                torch.randn(4, 5, generator=generator),
            ),
            {},
        ),
        "amin.nan_dropped": (
            (torch.tensor([[1.0, nan, -3.0], [2.0, 0.5, 4.0]]),),
            {"dim": 1},
        ),
        "sum.empty_unwritten": ((torch.randn(3, 0, generator=generator),), {"dim": 1}),
    }


INPUTS = {
    "maximum": binary_inputs,
    "mul": binary_inputs,
    "sum": reduction_inputs,
    "amin": reduction_inputs,
}


def check(pair: Pair, defect: tuple[tuple, dict]) -> list[str]:
    """What is wrong with the pair: empty when both behave."""
    problems = []
    opinfo = opinfo_db.find_opinfo(pair.op)
    wrong = load_wrapper(WRONG / f"{pair.name}.py", pair.wrapper)
    twin = load_wrapper(TWINS / f"{pair.name}.py", pair.wrapper)
    args, kwargs = defect
    dtype = args[0].dtype
    with Poison():
        wrong_output = wrong(*args, **kwargs)
        twin_output = twin(*args, **kwargs)
    if is_right(opinfo.op, wrong_output, args, kwargs, dtype):
        problems.append("the wrong one is right on its defect's input")
    if not is_right(opinfo.op, twin_output, args, kwargs, dtype):
        problems.append(f"the twin is wrong on the defect's input: {twin_output}")
    generator = torch.Generator().manual_seed(1)
    inputs = INPUTS.get(pair.op, unary_inputs)
    for dtype_name in pair.twin_dtypes:
        dtype = opinfo_db.dtype_from_name(dtype_name)
        for args, kwargs in inputs(opinfo, dtype, generator):
            with Poison():
                output = twin(*args, **kwargs)
            if not is_right(opinfo.op, output, args, kwargs, dtype):
                described = [
                    (tuple(a.shape), a.stride(), a.dtype) if isinstance(a, torch.Tensor) else a
                    for a in args
                ]
                problems.append(f"the twin is wrong on {dtype_name} {described} {kwargs}")
    return problems


def main(names: list[str]) -> int:
    defects = _defects()
    failed = 0
    for pair in [load_pair(name) for name in names] if names else pairs():
        problems = check(pair, defects[pair.name])
        failed += bool(problems)
        print(f"{pair.name}: {'ok' if not problems else 'NOT OK'}")
        for problem in problems[:5]:
            print(f"    {problem}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
