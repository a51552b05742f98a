"""A minimal exported package for model-check tests: the API ``opforge export``'s packages have
(``enable``, ``disable``, ``enabled``, ``covered``, ``call_counts``, ``reset_counts``), serving
``aten.add.Tensor`` and ``aten.relu.default`` with Triton kernels for the CPU dispatch key (the
interpreter). A call its kernels were not written for (broadcasting, another dtype, a strided
input, an alpha) goes to ATen's own kernel, as an exported package's does.

``WRONG_ABOVE``, when set, makes the add kernel wrong wherever a sum exceeds it: a kernel that
passes OpInfo's small values and fails a model's activations.
"""

import contextlib
import threading
import warnings

import torch
import triton
import triton.language as tl

WRONG_ABOVE = None
_BLOCK = 256


@triton.jit
def _add_kernel(x, y, out, n, wrong_above, WRONG: tl.constexpr, BLOCK: tl.constexpr):
    index = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = index < n
    total = tl.load(x + index, mask=mask) + tl.load(y + index, mask=mask)
    if WRONG:
        total = tl.where(total > wrong_above, total + 1.0, total)
    tl.store(out + index, total, mask=mask)


@triton.jit
def _relu_kernel(x, out, n, BLOCK: tl.constexpr):
    index = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = index < n
    value = tl.load(x + index, mask=mask)
    tl.store(out + index, tl.where(value > 0, value, 0.0), mask=mask)


def _plain(*tensors) -> bool:
    first = tensors[0]
    return all(
        isinstance(t, torch.Tensor)
        and t.dtype == torch.float32
        and t.shape == first.shape
        and t.is_contiguous()
        and t.numel()
        for t in tensors
    )


def _add(x, y, alpha=1):
    if not _plain(x, y) or alpha != 1:
        return None
    out = torch.empty_like(x)
    wrong = WRONG_ABOVE is not None
    _add_kernel[(triton.cdiv(x.numel(), _BLOCK),)](
        x, y, out, x.numel(), float(WRONG_ABOVE or 0.0), WRONG=wrong, BLOCK=_BLOCK
    )
    return out


def _relu(x):
    if not _plain(x):
        return None
    out = torch.empty_like(x)
    _relu_kernel[(triton.cdiv(x.numel(), _BLOCK),)](x, out, x.numel(), BLOCK=_BLOCK)
    return out


_KERNELS = {"aten.add.Tensor": _add, "aten.relu.default": _relu}
_counts = dict.fromkeys(_KERNELS, 0)
_lock = threading.Lock()
_inside = threading.local()
_registration = None


def _overload(name):
    namespace, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload)


def _served(name, kernel, original):
    def serve(keyset, *args, **kwargs):
        if not getattr(_inside, "depth", 0):
            _inside.depth = 1
            try:
                result = kernel(*args, **kwargs)
            finally:
                _inside.depth = 0
            if result is not None:
                with _lock:
                    _counts[name] += 1
                return result
        # A Python number passed for a Tensor (``x + 1.0``) reaches a Python kernel as the
        # number; ATen's boxed kernel wants the tensor ATen would have made of it.
        args = tuple(
            torch.tensor(arg, dtype=torch.result_type(args[0], arg))
            if isinstance(arg, bool | int | float)
            else arg
            for arg in args
        )
        return original.call_boxed(keyset, *args, **kwargs)

    return serve


def enable():
    global _registration
    if _registration is not None:
        return
    originals = {name: torch.library.get_kernel(_overload(name), "CPU") for name in _KERNELS}
    _registration = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Warning only once for all operators")
        for name, kernel in _KERNELS.items():
            _registration.impl(
                _overload(name), _served(name, kernel, originals[name]), "CPU", with_keyset=True
            )


def disable():
    global _registration
    if _registration is not None:
        _registration._destroy()
        _registration = None


@contextlib.contextmanager
def enabled():
    enable()
    try:
        yield
    finally:
        disable()


def covered():
    return sorted(_KERNELS)


def call_counts():
    with _lock:
        return dict(_counts)


def reset_counts():
    with _lock:
        for name in _counts:
            _counts[name] = 0
