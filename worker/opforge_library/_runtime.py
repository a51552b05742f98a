"""The runtime of a package ``opforge export`` wrote: registers its Triton kernels with
``torch.library`` for the ATen overloads its manifest covers.

Copied verbatim into every exported package (beside ``_adapter.py``), so it imports only torch,
triton and the package's own modules. It knows no device kind by name: what the package's kind
needs (its dispatch key, the environment triton must be imported in) is in the manifest, where
the exporter wrote it from the worker's registry (``opforge_worker/device_kinds.py``).

- A call is served by the library's kernel only where the judge tested its kind and the
  kernel is not measured slower than the original there: the signature of its typed arguments
  (dtypes, Python number types) is one the exporter recorded from the OpInfo samples of the
  kernel's accepted dtypes, the manifest routes that signature's dtype to the kernel in the
  call's shape class (the elements of its largest tensor argument, bucketed by the manifest's
  ``shape_classes``), every tensor is on one device, and the adapter can call the wrapper.
  Anything else goes to the kernel the overload had before ``enable()``
  (``torch.library.get_kernel``), with the dispatch key set it came with. An overload routed
  to the original everywhere is not registered at all.
- A call pays for these checks once per call shape (how many arguments by position, which by
  keyword: ``_adapter.CallShape``) and per signature (decoded at ``enable()``); after that it
  only indexes lists and looks up a dict, on the way to the kernel as on the way past it.
- While a library kernel (or an original kernel it fell through to) runs, every overridden
  overload goes straight to its original kernel: the wrapper's own allocations and copies, and
  the interpreter's, never re-enter the library (routed in the dispatcher, nor any other
  opforge package's).
- Routed in the dispatcher (``_dispatch.cpp``, the default), a served call of a functional
  overload whose wrapper has a place for every argument goes from there to the wrapper, with
  the same device and layout rules as ``Overload.__call__``; the others enter the ``Overload``.
- A served call launches its Triton kernels directly (``_launch.py``: Triton's binder, cache and
  launcher, without the per-call lookups of ``JITFunction.run`` and ``Autotuner.run``), unless
  ``set_direct_launch(False)``.
- A kernel that raises is answered by the original kernel too, with one warning per overload.
- A functional overload whose output layout is contract (the manifest's ``layout``: elementwise
  operators, clone; opforge_worker's data/layout_contract.yaml) is served only where ATen's
  result layout is known without running ATen, and only with a result of that layout: every
  tensor argument contiguous (ATen's result is contiguous), or one tensor argument, dense and
  non-overlapping in any order of its dims (transposed, channels_last: ATen's result has its
  strides). Other calls, and a result of another layout (one warning per overload), go to the
  original kernel: a served call never changes the layout the caller gets.
- In-place and ``out=`` overloads run the functional kernel and write its result into the
  destination with a Triton copy through the destination's own strides, so it keeps its layout
  as under ATen; where ATen would convert, resize (and restride) the destination or refuse, the
  call falls through and ATen does exactly what it always does.
"""

from __future__ import annotations

import atexit
import bisect
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

from . import _launch, _native
from ._adapter import Adapter, CallShape

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
    """Copy ``result`` into ``destination`` (same shape and dtype, ``_addressable``) by Triton,
    through each one's strides: the destination keeps its layout. False where the copy kernel
    cannot address ``result``."""
    source, target = _copy_layout(result), _copy_layout(destination)
    if source is None or target is None:
        return False
    sizes, source_strides = source
    _, target_strides = target
    n = destination.numel()
    if n:
        _strided_copy[(triton.cdiv(n, _COPY_BLOCK),)](
            result, destination, n, *sizes[1:], *source_strides, *target_strides,
            BLOCK=_COPY_BLOCK,
        )  # fmt: skip
    return True


def _dense_order(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s elements fill its memory once each, in some order of its dims
    (TensorIterator then gives an elementwise result its strides)."""
    expected = 1
    for size, stride in sorted(
        (pair for pair in zip(tensor.shape, tensor.stride(), strict=True) if pair[0] != 1),
        key=lambda pair: pair[1],
    ):
        if stride != expected:
            return False
        expected *= size
    return True


def _same_layout(result: torch.Tensor, strides: tuple[int, ...]) -> bool:
    """Whether ``result`` has ``strides`` on every dim of size > 1 (size-1 dims' strides
    address nothing: torch._prims_common.check_significant_strides)."""
    return len(strides) == result.dim() and all(
        size == 1 or stride == expected
        for size, stride, expected in zip(result.shape, result.stride(), strides, strict=True)
    )


def _aten_layout(tensors: list[torch.Tensor]):
    """The layout ATen gives an elementwise result of ``tensors`` where it is known without
    running ATen: ``_CONTIGUOUS``, a single dense argument's strides, or None."""
    if all(tensor.is_contiguous() for tensor in tensors):
        return _CONTIGUOUS
    if len(tensors) == 1 and _dense_order(tensors[0]):
        return tuple(tensors[0].stride())
    return None


def _has_layout(result, layout) -> bool:
    """Whether every tensor of ``result`` has ``layout`` (``_aten_layout``)."""
    results = result if isinstance(result, (tuple, list)) else (result,)
    for item in results:
        if not isinstance(item, torch.Tensor) or item.numel() == 0:
            continue
        if layout is _CONTIGUOUS:
            if not item.is_contiguous():
                return False
        elif not _same_layout(item, layout):
            return False
    return True


#: ``_aten_layout`` of arguments that are all contiguous.
_CONTIGUOUS = "contiguous"


class _Guard(threading.local):
    depth = 0


#: Python number types a token ``py:NAME`` may name (the typed arguments are tensors or numbers).
_PYTHON_TYPES = {kind.__name__: kind for kind in (bool, int, float, complex, str)}
_NUMBERS = (bool, int, float, complex)
_NUMBER_TYPES = frozenset(_NUMBERS)


def _decode_token(token: str):
    """The runtime's key of a signature token (``float32``, ``py:int``, ``none``, ``[a|b]``), as
    ``_call_key`` computes it from a call; None for a token this torch cannot meet."""
    if token.startswith("["):
        items = [_decode_token(item) for item in token[1:-1].split("|") if item]
        return None if None in items else frozenset(items)
    if token == "none":
        return type(None)
    if token.startswith("py:"):
        return _PYTHON_TYPES.get(token[3:])
    dtype = getattr(torch, token, None)
    return dtype if isinstance(dtype, torch.dtype) else None


def _decode_signature(signature: str) -> tuple | None:
    keys = tuple(_decode_token(token) for token in signature.split(",")) if signature else ()
    return None if None in keys else keys


def _key_of(value, tensors: list):
    """The signature key of a typed argument that is not a tensor (a tensor's is its dtype); the
    tensors of a list go into ``tensors``."""
    if isinstance(value, (list, tuple)):
        items = set()
        for item in value:
            if isinstance(item, torch.Tensor):
                items.add(item.dtype)
                tensors.append(item)
            else:
                items.add(type(item))
        return frozenset(items)
    return type(value)


class Overload:
    """One covered overload: its adapter, the signatures it serves and in which shape classes,
    and its original kernel."""

    def __init__(self, library: Library, name: str, entry: dict):
        self.library = library
        self.name = name
        self.kind = entry["kind"]  # functional, inplace or out
        self.kernel = entry["kernel"]
        #: Whether ATen's result layout is the operator's contract (functional overloads only:
        #: in place and out= write into the caller's destination through its strides).
        self.keeps_layout = self.kind == "functional" and entry["layout"] == "contract"
        self.adapter = Adapter(entry["adapter"])
        self.routes = _routes(entry, library.manifest["shape_classes"])
        self.bounds = [
            shape_class["max_elements"]
            for shape_class in library.manifest["shape_classes"]
            if shape_class["max_elements"] is not None
        ]
        self.guard = library.guard
        #: The adapter's call shapes, by the key the hot path builds without a call.
        self.shapes: dict[object, object] = {}
        self.original = None
        self.wrapper = None  # both set by enable()
        self.warned = False

    def serves_anything(self) -> bool:
        return bool(self.routes)

    def __call__(self, keyset, *args, **kwargs):
        # The hot path of every call of the overload, served or not: each step is one lookup or
        # one short loop (bench/dispatch_overhead.py measures it).
        shape = self.shapes.get((len(args), *kwargs) if kwargs else len(args))
        if shape is None:
            shape = self.adapter.shape_of(args, kwargs)
            self.shapes[(len(args), *kwargs) if kwargs else len(args)] = shape
        if self.guard.depth or not shape.fits:
            return self._original(keyset, args, kwargs)
        values = shape.values(args, kwargs) if kwargs or shape.tail else args
        tensors: list[torch.Tensor] = []
        key = []
        for index in shape.typed:
            value = values[index]
            if isinstance(value, torch.Tensor):
                key.append(value.dtype)
                tensors.append(value)
            else:
                key.append(_key_of(value, tensors))
        key = tuple(key)
        route = self.routes.get(key)
        if route is None:
            return self._original(keyset, args, kwargs, shape, key)
        if route is not True:
            largest = max(tensor.numel() for tensor in tensors) if tensors else 1
            if not route[bisect.bisect_left(self.bounds, largest)]:
                return self._original(keyset, args, kwargs, shape, key)
        if len(tensors) > 1:
            device = tensors[0].device
            if any(tensor.device != device for tensor in tensors):
                return self._original(keyset, args, kwargs, shape, key)
        call = shape.wrapper_call(values)
        destination = None
        if self.kind != "functional":
            destination = values[0 if self.kind == "inplace" else shape.destination]
            if not _addressable(destination):
                call = None
        layout = None
        if self.keeps_layout:
            layout = _aten_layout(tensors)
            if layout is None:
                call = None
        if call is None:
            return self._original(keyset, args, kwargs, shape, key)
        guard = self.guard
        guard.depth += 1
        try:
            result = self._run(call, destination)
        finally:
            guard.depth -= 1
        if layout is not None and result is not None and not _has_layout(result, layout):
            self._refuse_layout(result)
            result = None
        if result is None:
            return self._original(keyset, args, kwargs, shape, key)
        library = self.library
        with library.lock:
            library.counts[self.name] += 1
        return result

    def _run(self, call: tuple[list, dict], destination: torch.Tensor | None):
        """The overload's result by the library's kernel, or None to fall through."""
        try:
            result = self.wrapper(*call[0], **call[1])
        except Exception as error:  # noqa: BLE001 (the kernel's own failure, any kind)
            # A call the judge's samples did not foresee: ATen's kernel answers it (the
            # wrapper's result is new memory, nothing of the caller's was written yet).
            self._warn_once(error)
            return None
        if destination is None:
            return result
        if (
            not isinstance(result, torch.Tensor)
            or result.dtype != destination.dtype
            or result.device != destination.device
            or result.shape != destination.shape
        ):
            # ATen converts, refuses, or resizes the destination, and restrides it as its
            # own kernel lays out the result: only ATen knows that layout.
            return None
        return destination if _write_into(result, destination) else None

    def direct_call(self) -> tuple[list[int], list[tuple[str, int]]] | None:
        """Where the dispatcher routing (``_dispatch.cpp``) may call the wrapper itself: the
        schema's arguments it takes by position and by keyword, for the dispatcher's call
        convention (every argument passed, the keyword-only ones by name). None where this
        ``Overload`` must serve: in place and out= (the copy into the destination), or an
        argument the wrapper has no place for (whose value must be its default)."""
        args = self.adapter.args
        shape = CallShape(
            args,
            sum(not arg["kwarg_only"] for arg in args),
            tuple(arg["name"] for arg in args if arg["kwarg_only"]),
        )
        if self.kind != "functional" or not shape.fits or shape.dropped:
            return None
        return list(shape.positional), [(name, index) for name, index in shape.keywords]

    def _refuse_layout(self, result) -> None:
        self._warn_once(f"returned a layout other than ATen's ({_strides_of(result)})")

    def _warn_once(self, problem: Exception | str) -> None:
        if not self.warned:
            self.warned = True
            if isinstance(problem, Exception):
                problem = f"raised {type(problem).__name__}: {problem}"
            warnings.warn(
                f"{self.library.package}: the kernel for {self.name} {problem}; "
                "PyTorch's kernel ran instead",
                RuntimeWarning,
                stacklevel=4,
            )

    def _original(self, keyset, args: tuple, kwargs: dict, shape=None, key: tuple = ()):
        """The original kernel's answer. The call's signature ``key`` (of its ``shape``), where
        the caller has it, says whether a Tensor argument came as a Python number, which a boxed
        call cannot take; without it the arguments are looked at."""
        if shape is None:
            if any(isinstance(value, _NUMBERS) for value in [*args, *kwargs.values()]):
                args, kwargs = self._numbers_as_tensors(args, kwargs)
        else:
            for place in shape.tensor_keys:  # a loop, not any(): this is every fall-through
                if key[place] in _NUMBER_TYPES:
                    args, kwargs = self._numbers_as_tensors(args, kwargs)
                    break
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
            if index < len(names) and names[index] in tensor_args and isinstance(value, _NUMBERS)
            else value
            for index, value in enumerate(args)
        )
        kwargs = {
            name: tensor_of(value) if name in tensor_args and isinstance(value, _NUMBERS) else value
            for name, value in kwargs.items()
        }
        return args, kwargs


def _strides_of(result) -> str:
    results = result if isinstance(result, (tuple, list)) else (result,)
    return ", ".join(
        f"strides {tuple(item.stride())}" for item in results if isinstance(item, torch.Tensor)
    )


def _tensors(values) -> list[torch.Tensor]:
    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(_tensors(value))
    return found


def _routes(entry: dict, shape_classes: list[dict]) -> dict[tuple, object]:
    """Signature key -> True (served in every shape class) or, per shape class, whether the
    kernel serves it; a signature served in none is left out: it falls through at once."""
    names = [shape_class["name"] for shape_class in shape_classes]
    found = {}
    for signature, dtype in entry["signatures"].items():
        key = _decode_signature(signature)
        by_class = entry["routes"].get(dtype, {})
        served = tuple(by_class.get(name, {}).get("to") == "kernel" for name in names)
        if key is not None and any(served):
            found[key] = True if all(served) else served
    return found


def _addressable(destination: torch.Tensor) -> bool:
    """Whether the copy kernel can write every element of ``destination`` once."""
    layout = _copy_layout(destination)
    return layout is not None and not any(
        size > 1 and stride == 0 for size, stride in zip(*layout, strict=True)
    )


class Library:
    """The package's kernels and their registration; the package's functions are its methods."""

    def __init__(self, package: str, directory: Path):
        self.package = package
        self.manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
        self.guard = _Guard()
        self.lock = threading.Lock()
        self.counts = dict.fromkeys(self.manifest["covered"], 0)
        self._wrappers: dict[str, object] = {}
        self._registration = None
        self._dispatch_key = ""
        self._registered: list[str] = []
        self._made: list[Overload] | None = None
        self._direct_launch = True
        self._direct_call = True
        # ``python`` there routes from Python: asked by a judge counting torch.library's kernels
        self._native_routing = os.environ.get(self.manifest["routing_environment"]) != "python"
        self._warned_native = False
        self._device_calls = _launch.device_calls(self.manifest["direct_launch"])
        self._kernel_namespaces: list[dict] = []

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
        if self._direct_launch:
            _launch.install(globals(), self._device_calls)  # the in-place and out= copy kernel
        overloads = []
        for overload in self._overloads():
            if not overload.serves_anything():
                # Routed to the original kernel in every signature and shape class: unregistered,
                # its calls cost nothing.
                continue
            overload.wrapper = self.wrapper(overload.kernel)
            # before any registration: the kernel ATen has now
            overload.original = torch.library.get_kernel(_resolve(overload.name), key)
            overloads.append(overload)
        registration = self._registration_for(key)
        with warnings.catch_warnings():
            # Overriding ATen's kernel is the point; torch warns about it once per process.
            warnings.filterwarnings("ignore", "Warning only once for all operators")
            for overload in overloads:
                registration.impl(overload)
        self._registration, self._dispatch_key = registration, key
        self._registered = sorted(overload.name for overload in overloads)

    def disable(self) -> None:
        """Give every covered overload its original kernel back."""
        if self._registration is not None:
            self._registration.destroy()
            self._registration = None
            self._registered = []

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

    def set_native_routing(self, on: bool) -> None:
        """Route calls in the dispatcher (``_dispatch.cpp``, the default: built the first time a
        package is enabled, and a call the library does not serve never enters Python) or
        from Python; an enabled library is registered again."""
        self._register_again(_native_routing=on)

    def set_direct_call(self, on: bool) -> None:
        """Routed in the dispatcher, call a functional overload's wrapper from there (the
        default) or serve every call through the runtime's Python ``Overload``; an enabled
        library is registered again."""
        self._register_again(_direct_call=on)

    def _register_again(self, **settings: bool) -> None:
        enabled_for = self._dispatch_key if self._registration is not None else None
        self.disable()
        for name, value in settings.items():
            setattr(self, name, value)
        if enabled_for is not None:
            self.enable(enabled_for)

    def routing(self) -> str:
        """Where calls are routed: ``native``, ``python``, or ``python (why not native)``."""
        if not self._native_routing:
            return "python"
        if _native.load() is None:
            return f"python ({_native.problem()})"
        return "native"

    def _registration_for(self, key: str):
        if self._native_routing:
            native = _native.load()
            if native is not None:
                return _NativeRegistration(native, key, self)
            if not self._warned_native:
                self._warned_native = True
                warnings.warn(
                    f"{self.package}: calls are routed from Python, the slower way: the "
                    f"dispatcher routing could not be built ({_native.problem()})",
                    RuntimeWarning,
                    stacklevel=4,
                )
        return _PythonRegistration(key)

    def set_direct_launch(self, on: bool) -> None:
        """Launch the kernels directly (``_launch.py``, the default) or through Triton's own
        ``run``: the same kernels and configs either way, the first with less Python per call."""
        self._direct_launch = on
        for namespace in [globals(), *self._kernel_namespaces]:
            if on:
                _launch.install(namespace, self._device_calls)
            else:
                _launch.uninstall(namespace)

    def is_enabled(self) -> bool:
        return self._registration is not None

    def covered(self) -> list[str]:
        """The ATen overloads the library serves (``aten.abs.default``, the catalog's spelling)."""
        return sorted(self.manifest["covered"])

    def registered(self) -> list[str]:
        """The overloads ``enable()`` registered: the covered ones the manifest routes to the
        library's kernel for some dtype and shape class (the others cost their calls nothing)."""
        return list(self._registered)

    def call_counts(self) -> dict[str, int]:
        """Calls the library's kernels served, per overload, since import or ``reset_counts()``."""
        with self.lock:
            counts = dict(self.counts)
        if self._registration is not None:
            for name, count in self._registration.served().items():
                counts[name] += count
        return counts

    def reset_counts(self) -> None:
        with self.lock:
            self.counts = dict.fromkeys(self.counts, 0)
        if self._registration is not None:
            self._registration.reset_served()

    # -- for the overloads -------------------------------------------------------------------------

    def _overloads(self) -> list[Overload]:
        """The covered overloads this torch has, made once: their call shapes outlive
        ``disable()``."""
        if self._made is None:
            self._made = []
            for name, entry in self.manifest["covered"].items():
                if _resolve(name) is None:  # exported with another torch
                    warnings.warn(
                        f"{self.package}: torch {torch.__version__} has no {name}", stacklevel=3
                    )
                    continue
                self._made.append(Overload(self, name, entry))
        return self._made

    def wrapper(self, kernel: str):
        found = self._wrappers.get(kernel)
        if found is None:
            entry = self.manifest["kernels"][kernel]
            module = importlib.import_module(f"{self.package}.kernels.{kernel}")
            self._kernel_namespaces.append(vars(module))
            if self._direct_launch:
                _launch.install(vars(module), self._device_calls)
            found = self._wrappers[kernel] = getattr(module, entry["wrapper"])
        return found


class _PythonRegistration:
    """The overloads' kernels registered from Python: every call enters ``Overload.__call__``."""

    def __init__(self, key: str):
        self.key = key
        self.library = torch.library.Library("aten", "IMPL")

    def impl(self, overload: Overload) -> None:
        self.library.impl(_resolve(overload.name), overload, self.key, with_keyset=True)

    def served(self) -> dict[str, int]:
        return {}  # every served call is counted by its Overload

    def reset_served(self) -> None:
        pass

    def destroy(self) -> None:
        self.library._destroy()


class _NativeRegistration:
    """The overloads' kernels registered through ``_dispatch.cpp``: a call whose signature and
    shape class the routes give to the original kernel goes there without entering Python, and
    a functional overload's call it serves goes from there to the wrapper (``direct_call``)."""

    def __init__(self, native, key: str, library: Library):
        self.registration = native.Registration(key)
        self.library = library
        self.names: dict[str, str] = {}  # the extension's name of an overload -> the runtime's
        # gone while the interpreter is whole, not during its teardown
        atexit.register(self.destroy)

    def impl(self, overload: Overload) -> None:
        _, op, variant = overload.name.split(".")
        name = op if variant == "default" else f"{op}.{variant}"
        classes = len(overload.bounds) + 1
        routes = {
            ",".join(_token_text(item) for item in key): (
                (1 << classes) - 1
                if route is True
                else sum(1 << place for place, served in enumerate(route) if served)
            )
            for key, route in overload.routes.items()
        }
        direct = overload.direct_call() if self.library._direct_call else None
        positional, keywords = direct or ([], [])
        self.registration.impl(
            name, overload, list(overload.adapter.typed), routes, overload.bounds,
            overload.wrapper if direct else None, positional, keywords, overload.keeps_layout,
        )  # fmt: skip
        self.names[name] = overload.name

    def served(self) -> dict[str, int]:
        """Calls the extension served itself, by the runtime's overload name."""
        return {self.names[name]: count for name, count in self.registration.served().items()}

    def reset_served(self) -> None:
        self.registration.reset_served()

    def destroy(self) -> None:
        atexit.unregister(self.destroy)
        with self.library.lock:
            for name, count in self.served().items():
                self.library.counts[name] += count
        self.registration.reset_served()
        self.registration.destroy()


def _token_text(key) -> str:
    """A signature token as ``_dispatch.cpp`` spells it from a call: ``_decode_token`` undone,
    with a list's items sorted."""
    if isinstance(key, frozenset):
        return "[" + "|".join(sorted(_token_text(item) for item in key)) + "]"
    if key is type(None):
        return "none"
    if isinstance(key, torch.dtype):
        return str(key).removeprefix("torch.")
    return f"py:{key.__name__}"


def _resolve(name: str):
    """``aten.abs.default`` -> the OpOverload, or None in this torch."""
    namespace, op, overload = name.split(".")
    try:
        return getattr(getattr(getattr(torch.ops, namespace), op), overload)
    except AttributeError:
        return None
