"""The runtime of a package ``opforge export`` wrote: registers its Triton kernels with
``torch.library`` for the ATen overloads its manifest covers.

Copied verbatim into every exported package (beside ``_adapter.py``), so it imports only torch,
triton and the package's own modules. It knows no device kind by name: what the package's kind
needs (its dispatch key, the environment triton must be imported in) is in the manifest, where
the exporter wrote it from the worker's registry (``opforge_worker/device_kinds.py``).

- A call is served by the library's kernel only where the judge tested its kind: the signature
  of its typed arguments (dtypes, Python number types) is one the exporter recorded from the
  OpInfo samples of the kernel's accepted dtypes, every tensor is on one device, and the adapter
  can call the wrapper. Anything else goes to the kernel the overload had before ``enable()``
  (``torch.library.get_kernel``), with the dispatch key set it came with.
- While a library kernel (or an original kernel it fell through to) runs, every overridden
  overload goes straight to its original kernel: the wrapper's own allocations and copies, and
  the interpreter's, never re-enter the library.
- A kernel that raises is answered by the original kernel too, with one warning per overload.
- In-place and ``out=`` overloads run the functional kernel and write its result into the
  destination with a Triton copy; where ATen would have to convert, resize a non-empty tensor or
  refuse, the call falls through and ATen does exactly what it always does.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import threading
import warnings
from pathlib import Path

import torch
import triton
import triton.language as tl

from ._adapter import Adapter

#: Dimensions the copy kernel indexes; a destination with more must be contiguous.
_COPY_DIMS = 4
_COPY_BLOCK = 1024


@triton.jit
def _strided_copy(src, dst, n, s1, s2, s3, a0, a1, a2, a3, b0, b1, b2, b3, BLOCK: tl.constexpr):
    index = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = index < n
    i3 = index % s3
    rest = index // s3
    i2 = rest % s2
    rest = rest // s2
    i1 = rest % s1
    i0 = rest // s1
    value = tl.load(src + i0 * a0 + i1 * a1 + i2 * a2 + i3 * a3, mask=mask)
    tl.store(dst + i0 * b0 + i1 * b1 + i2 * b2 + i3 * b3, value, mask=mask)


def _copy_layout(tensor: torch.Tensor) -> tuple[list[int], list[int]] | None:
    """Sizes and strides padded to the copy kernel's dimensions, or None beyond them."""
    if tensor.dim() > _COPY_DIMS:
        if not tensor.is_contiguous():
            return None
        return [1] * (_COPY_DIMS - 1) + [tensor.numel()], [0] * (_COPY_DIMS - 1) + [1]
    pad = _COPY_DIMS - tensor.dim()
    return [1] * pad + list(tensor.shape), [0] * pad + list(tensor.stride())


def _write_into(result: torch.Tensor, destination: torch.Tensor) -> bool:
    """Copy ``result`` into ``destination`` (same shape and dtype) by Triton; False where the
    copy kernel cannot address one of them."""
    source, target = _copy_layout(result), _copy_layout(destination)
    if source is None or target is None:
        return False
    sizes, source_strides = source
    _, target_strides = target
    if any(size > 1 and stride == 0 for size, stride in zip(sizes, target_strides, strict=True)):
        return False  # one element written twice: ATen refuses it, let it say so
    n = destination.numel()
    if n:
        _strided_copy[(triton.cdiv(n, _COPY_BLOCK),)](
            result, destination, n, *sizes[1:], *source_strides, *target_strides,
            BLOCK=_COPY_BLOCK,
        )  # fmt: skip
    return True


def _tensors(values) -> list[torch.Tensor]:
    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(_tensors(value))
    return found


class _Guard(threading.local):
    depth = 0


class Overload:
    """One covered overload: its adapter, what the judge tested, and its original kernel."""

    def __init__(self, library: Library, name: str, entry: dict):
        self.library = library
        self.name = name
        self.kind = entry["kind"]  # functional, inplace or out
        self.kernel = entry["kernel"]
        self.adapter = Adapter(entry["adapter"])
        self.signatures = frozenset(entry["signatures"])
        self.destination = entry.get("destination", "")
        self.original = None
        self.warned = False

    def __call__(self, keyset, *args, **kwargs):
        library = self.library
        if library.guard.depth:
            return self._original(keyset, args, kwargs)
        bound = self.adapter.bind(args, kwargs)
        served = None if bound is None else self._serve(bound)
        if served is None:
            return self._original(keyset, args, kwargs)
        library.count(self.name)
        return served

    def _serve(self, bound: dict):
        """The overload's result by the library's kernel, or None to fall through."""
        if self.adapter.signature(bound) not in self.signatures:
            return None
        devices = {tensor.device for tensor in _tensors(bound.values())}
        if len(devices) != 1:
            return None
        call = self.adapter.wrapper_call(bound)
        if isinstance(call, str):
            return None
        wrapper = self.library.wrapper(self.kernel)
        with self.library.guarded():
            try:
                result = wrapper(*call[0], **call[1])
            except Exception as error:  # noqa: BLE001 (the kernel's own failure, any kind)
                # A call the judge's samples did not foresee: ATen's kernel answers it (the
                # wrapper's result is new memory, nothing of the caller's was written yet).
                self._warn_once(error)
                return None
            if self.kind == "functional":
                return result
            destination = bound[self.destination]
            if (
                not isinstance(result, torch.Tensor)
                or result.dtype != destination.dtype
                or result.device != destination.device
            ):
                return None
            if destination.shape != result.shape:
                if self.kind == "inplace" or destination.numel():
                    return None  # ATen resizes with a warning, or refuses
                destination.resize_(result.shape)
            return destination if _write_into(result, destination) else None

    def _warn_once(self, error: Exception) -> None:
        if not self.warned:
            self.warned = True
            warnings.warn(
                f"{self.library.package}: the kernel for {self.name} raised "
                f"{type(error).__name__}: {error}; PyTorch's kernel ran instead",
                RuntimeWarning,
                stacklevel=4,
            )

    def _original(self, keyset, args: tuple, kwargs: dict):
        if any(arg["tensor"] for arg in self.adapter.args):
            args, kwargs = self._numbers_as_tensors(args, kwargs)
        with self.library.guarded():
            return self.original.call_boxed(keyset, *args, **kwargs)

    def _numbers_as_tensors(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The dispatcher hands a Python number passed for a Tensor argument (``x + 2``) to a
        Python kernel as the number, and a boxed call wants a tensor: one of the dtype ATen's
        promotion would give the number beside the call's first tensor, so the original kernel
        computes in the same dtype as without the library."""
        first = next(iter(_tensors([*args, *kwargs.values()])), None)

        def tensor_of(value):
            if first is None:
                return torch.tensor(value)
            return torch.tensor(value, dtype=torch.result_type(first, value), device="cpu")

        names = [arg["name"] for arg in self.adapter.args if not arg["kwarg_only"]]
        tensor_args = {arg["name"] for arg in self.adapter.args if arg["tensor"]}
        args = tuple(
            tensor_of(value)
            if index < len(names)
            and names[index] in tensor_args
            and isinstance(value, (bool, int, float, complex))
            else value
            for index, value in enumerate(args)
        )
        kwargs = {
            name: tensor_of(value)
            if name in tensor_args and isinstance(value, (bool, int, float, complex))
            else value
            for name, value in kwargs.items()
        }
        return args, kwargs


class Library:
    """The package's kernels and their registration; the package's functions are its methods."""

    def __init__(self, package: str, directory: Path):
        self.package = package
        self.manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
        self.guard = _Guard()
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self.manifest["covered"], 0)
        self._wrappers: dict[str, object] = {}
        self._registration = None
        self._dispatch_key = ""

    # -- the package's API -----------------------------------------------------------------------

    def enable(self, dispatch_key: str | None = None) -> None:
        """Register every covered overload for ``dispatch_key`` (default: the manifest's)."""
        key = dispatch_key or self.manifest["dispatch_key"]
        if self._registration is not None:
            if key != self._dispatch_key:
                raise RuntimeError(f"{self.package} is enabled for {self._dispatch_key}, not {key}")
            return
        unset = [
            f"{name}={value}"
            for name, value in self.manifest["triton_environment"].items()
            if os.environ.get(name) != value
        ]
        if unset:
            raise RuntimeError(
                f"{self.package} holds kernels for device kind {self.manifest['device_kind']!r}: "
                f"set {' '.join(unset)} before anything imports triton"
            )
        if not hasattr(torch.library, "get_kernel"):
            raise RuntimeError(
                f"{self.package} needs torch 2.9 or later (torch.library.get_kernel)"
            )
        overloads = []
        for name, entry in self.manifest["covered"].items():
            if _resolve(name) is None:  # exported with another torch
                warnings.warn(
                    f"{self.package}: torch {torch.__version__} has no {name}", stacklevel=2
                )
                continue
            overload = Overload(self, name, entry)
            self.wrapper(overload.kernel)
            # before any registration: the kernel ATen has now
            overload.original = torch.library.get_kernel(_resolve(name), key)
            overloads.append(overload)
        registration = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            # Overriding ATen's kernel is the point; torch warns about it once per process.
            warnings.filterwarnings("ignore", "Warning only once for all operators")
            for overload in overloads:
                registration.impl(_resolve(overload.name), overload, key, with_keyset=True)
        self._registration, self._dispatch_key = registration, key

    def disable(self) -> None:
        """Give every covered overload its original kernel back."""
        if self._registration is not None:
            self._registration._destroy()
            self._registration = None

    @contextlib.contextmanager
    def enabled(self, dispatch_key: str | None = None):
        """The library's kernels inside the block; as before after it."""
        was_enabled = self._registration is not None
        self.enable(dispatch_key)
        try:
            yield self
        finally:
            if not was_enabled:
                self.disable()

    def is_enabled(self) -> bool:
        return self._registration is not None

    def covered(self) -> list[str]:
        """The ATen overloads the library serves (``aten.abs.default``, the catalog's spelling)."""
        return sorted(self.manifest["covered"])

    def call_counts(self) -> dict[str, int]:
        """Calls the library's kernels served, per overload, since import or ``reset_counts()``."""
        with self._lock:
            return dict(self._counts)

    def reset_counts(self) -> None:
        with self._lock:
            self._counts = dict.fromkeys(self._counts, 0)

    # -- for the overloads -------------------------------------------------------------------------

    def count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    @contextlib.contextmanager
    def guarded(self):
        self.guard.depth += 1
        try:
            yield
        finally:
            self.guard.depth -= 1

    def wrapper(self, kernel: str):
        found = self._wrappers.get(kernel)
        if found is None:
            entry = self.manifest["kernels"][kernel]
            module = importlib.import_module(f"{self.package}.kernels.{kernel}")
            found = self._wrappers[kernel] = getattr(module, entry["wrapper"])
        return found


def _resolve(name: str):
    """``aten.abs.default`` -> the OpOverload, or None in this torch."""
    namespace, op, overload = name.split(".")
    try:
        return getattr(getattr(getattr(torch.ops, namespace), op), overload)
    except AttributeError:
        return None
