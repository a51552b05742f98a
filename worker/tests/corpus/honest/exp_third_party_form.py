# ruff: noqa: UP045 (typing.Optional on purpose: the form third-party sets write)
"""Honest exp written the way third-party kernel sets write it (issue 27): a docstring before the
imports, `from __future__`, math and typing imports, the harness's own modules imported again,
autotune configs in a module constant, a kernel named without the `_kernel` suffix launched from
a helper, torch.broadcast_tensors (a view) in the wrapper. The static gate refused each of these
on form; none changes what runs.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import triton
import triton.language as tl

CONFIGS = [
    triton.Config({"BLOCK": 256}, num_warps=2),
    triton.Config({"BLOCK": 1024}, num_warps=4),
]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def _exp_impl(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.exp(x.to(tl.float32)).to(out_ptr.dtype.element_ty), mask=mask)


def _launch(x: torch.Tensor, out: torch.Tensor, n: int) -> None:
    _exp_impl[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)


def exp(input: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    (x,) = torch.broadcast_tensors(input)
    dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
    # ATen's layout: a dense input's strides (read in place), else contiguous (read from a copy).
    result = torch.empty_like(x, dtype=dtype)
    if x.stride() != result.stride():
        x = torch.empty_like(result, dtype=x.dtype).copy_(x)
    n = math.prod(x.shape)
    if n:
        _launch(x, result, n)
    return result
