"""A torch.library backend for `validate --backend`'s tests, on the interpreter (dispatch key
CPU): neg right, abs wrong (it returns its input), exp registered for CUDA alone, which CPU
tensors never reach. Like FlagGems, it takes a POSIX semaphore at import (a lock per kernel
there): an installed backend is the user's package, and the sandbox must let it start."""

import multiprocessing

import torch
import triton
import triton.language as tl

_library = None
_lock = multiprocessing.Lock()


@triton.jit
def _unary_kernel(x_ptr, out_ptr, n, NEGATE: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    # x * -1, not -x: the interpreter computes -x as 0 - x, a zero of the wrong sign for +0.
    tl.store(out_ptr + offsets, x * -1 if NEGATE else x, mask=mask)


def _unary(input, negate):
    # ATen's layout: a dense input's strides (read in place), else contiguous (read from a copy).
    out = torch.empty_like(input)
    x = input if input.stride() == out.stride() else torch.empty_like(out).copy_(input)
    if x.numel():
        _unary_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), negate, BLOCK=1024)
    return out


def _neg(x):
    return _unary(x, True)


def _broken_abs(x):
    return _unary(x, False)  # the deliberate bug: no absolute value


def enable():
    global _library
    _library = torch.library.Library("aten", "IMPL")
    _library.impl("neg", _neg, "CPU")
    _library.impl("abs", _broken_abs, "CPU")
    _library.impl("exp", torch.exp, "CUDA")
