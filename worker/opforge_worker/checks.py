"""Dynamic checks that run inside the candidate process around every wrapper call.

- ``LaunchCounter`` wraps triton's launch entry points (``JITFunction.run`` for compiled kernels,
  ``InterpretedFunction.run`` under TRITON_INTERPRET=1, both reached by ``kernel[grid](...)`` and
  by the autotuner), counts real launches, times compilation (reusing the kernels the process
  has loaded already, when given them) and checks the launch stream. On the interpreter it also
  gives the autotuner the benchmark the missing driver cannot: each config once, the first
  chosen.
- ``DispatchRecorder`` is a TorchDispatchMode: every ATen op the wrapper runs is classified; only
  allocation, views, copies and metadata are allowed, and never the operator under test itself or
  an op of its own kind (a ``clone`` wrapper may not copy with torch). It also fills the memory
  the wrapper allocates uninitialized (``empty`` and its kin) with a poison value, NaN or the
  integer dtype's largest value (True for bool), so that an output the kernels leave unwritten
  fails on its first call, whatever the allocator handed out before. The fill runs inside the
  mode's handler, where the mode is off: it is the harness's, never counted as the wrapper's.
- ``EscapeHatches`` records candidate calls that bypass ATen dispatch to read tensor data on the
  host (``Tensor.numpy``, ``tolist``, ``__array__``, DLPack, storages) or that take the recorder
  off the dispatch-mode stack.
- ``ThreadWatch`` records threads started by the wrapper: their work escapes the recorder.
- ``output_structure`` flattens the wrapper's result and checks types, devices and aliasing.
- ``ProcessState`` fingerprints what later sources in the process rely on (torch's, triton's
  and the harness's functions and classes, dispatcher registrations, global settings) and
  tells what a source changed of it.

Each of these runs in the candidate's own process, so a candidate that sets out to tamper with
them could; ``Integrity`` verifies after every call that the hooks are still the ones installed,
the audit hook (audit.py) refuses frame, code and gc introspection from candidate code, and the
harness's static gate (harness.py) does not run a source that could reach them at all.
"""

from __future__ import annotations

import _signal
import _thread
import builtins
import faulthandler
import functools
import operator
import os
import signal
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode
from triton.compiler.errors import CompilationError

from opforge_worker.aten_kinds import COMPUTE, aten_kind, uninitialized
from opforge_worker.audit import CodeOwners, path_prefixes
from opforge_worker.contract import FailureCheck
from opforge_worker.device_kinds import DeviceKind

#: Allocations whose memory holds whatever was there before (data/aten_kinds.yaml).
_UNINITIALIZED = uninitialized()


class BackendCompileError(Exception):
    """Triton's backend (MLIR passes, ptxas) failed on the candidate's kernel: a compile error.

    The frontend raises CompilationError; the backend raises plain RuntimeErrors (on an H100 with
    triton 3.6, "PassManager::run failed" for a reduction over a 1-element block), which would
    otherwise read as the candidate's runtime error.
    """


@dataclass
class CallPolicy:
    """What this operator's wrapper may do; sent by the judge with each call."""

    op_names: frozenset[str]  # the operator under test, as ATen names (never allowed)
    launch_exempt: bool  # a pure view/metadata operator: no launch needed, its own op allowed
    host_read_allowed: bool  # data-dependent output shape: Tensor.item() allowed
    #: Every op allowed: the wrapper calls the operator through torch by design, where an
    #: enabled backend's kernels are what is judged (``validate --backend``).
    ops_allowed: bool = False

    def forbidden_kind(self, name: str) -> str | None:
        """Why the wrapper may not run ATen op ``name``, or None when it may."""
        if self.ops_allowed:
            return None
        kind = aten_kind(name)
        if not self.launch_exempt and name.removesuffix("_") in self.op_names:
            return "the operator under test itself"
        if kind == COMPUTE:
            return "a compute op (ATen fallback)"
        if kind == "host_read" and not self.host_read_allowed:
            return "a read of device data on the host"
        own_kinds = {aten_kind(op) for op in self.op_names}
        if not self.launch_exempt and kind in own_kinds and kind in ("fill", "copy"):
            return f"a {kind} op, the same kind as the operator under test"
        return None


@dataclass
class Findings:
    """Everything a call did that makes it a cheat, each as (check, message)."""

    items: list[tuple[str, str]] = field(default_factory=list)

    def add(self, check: FailureCheck, message: str) -> None:
        if (check, message) not in self.items and len(self.items) < 50:
            self.items.append((check, message))


class LoadedKernels:
    """The kernels this process has compiled or loaded, by source and by Triton's cache key.

    Every test loads its source afresh, with new ``@triton.jit`` functions whose first launches
    go to Triton's cache: reading a compiled kernel's files, building its launcher and loading
    its binary onto the device cost milliseconds per kernel, a third of a warm library pass on an
    H100. A source validated again in this process gets back the kernels its earlier loads
    compiled. The key holds everything Triton's own cache key holds (the kernel's source and
    dependencies, its specialization, the target, the options, the environment that
    invalidates the cache), so a hit is the kernel Triton's cache would have returned; it also
    holds the loaded source's digest, so that no source ever runs a kernel another source's
    load produced.
    """

    def __init__(self, capacity: int = 256):
        self.capacity = capacity
        #: The sha256 of the loaded source, set by each load; "" reuses nothing.
        self.source = ""
        self._kernels: OrderedDict[tuple, object] = OrderedDict()

    def key(self, src, target, options, env_vars) -> tuple | None:
        from triton._C.libtriton import get_cache_invalidating_env_vars
        from triton.compiler import ASTSource

        if not self.source or not isinstance(src, ASTSource):
            return None
        return (
            self.source,
            src.hash(),
            repr(target),
            repr(sorted((options or {}).items())),
            repr(sorted((env_vars or get_cache_invalidating_env_vars()).items())),
        )

    def find(self, key: tuple):
        kernel = self._kernels.get(key)
        if kernel is not None:
            self._kernels.move_to_end(key)
        return kernel

    def keep(self, key: tuple, kernel) -> None:
        # Its source's kernel function holds, as its globals, the namespace of the candidate
        # that compiled it: kept, it would keep whatever that namespace holds (tensors on the
        # device, say) alive for later candidates, whose verdicts its memory could change.
        kernel.src = _CompiledSource(kernel.src)
        self._kernels[key] = kernel
        while len(self._kernels) > self.capacity:
            self._kernels.popitem(last=False)


class _CompiledSource:
    """What a compiled kernel still reads of its source: the constants and signature its
    launcher is built from, the argument names, and no launch-metadata function."""

    def __init__(self, src):
        self.constants = dict(src.constants)
        self.signature = dict(src.signature)
        self.fn = SimpleNamespace(arg_names=list(src.fn.arg_names), launch_metadata=None)


class _LangSnapshot:
    """What the interpreter of Triton before 3.6 patches in triton.language for a launch, and
    never puts back; restore() does, as 3.6's own patch scope would."""

    def __init__(self):
        import triton.language as tl

        owners = (tl, tl.core, tl.math, tl.tensor, tl.dtype, tl.core.tensor_descriptor_base)
        self.saved = [(owner, dict(vars(owner))) for owner in owners]

    def restore(self) -> None:
        for owner, saved in self.saved:
            for name in set(vars(owner)) - set(saved):
                delattr(owner, name)
            for name, value in saved.items():
                if vars(owner).get(name) is not value:
                    setattr(owner, name, value)


class LaunchCounter:
    """Wraps triton's launch entry points once per process.

    Under the interpreter it also undoes what a call leaves patched: the interpreter patches
    ``tl``'s builtins for a kernel and restores them after it, but a ``@triton.jit`` function the
    kernel calls (``tl.max`` calls one) patches the builtins of its own module, ``tl.core``, and
    never restores them, which would leave every later source a different ``tl.core``. Each such
    call's patches are undone when it returns, innermost first, as the kernel's own are.
    """

    def __init__(
        self,
        owners: CodeOwners,
        on_compile: Callable[[], None],
        kind: DeviceKind,
        loaded: LoadedKernels | None = None,
    ):
        self.owners = owners
        self.on_compile = on_compile
        self.kind = kind
        self.loaded = loaded
        self.depth = 0
        self.launches = 0
        self.compile_s = 0.0
        self.findings: Findings | None = None
        self.default_stream = None
        self.installed: dict[tuple[type, str], Callable] = {}
        #: The interpreter's patch scopes opened during the current launch, innermost last.
        self._lang_scopes: list = []
        #: Triton before 3.6: its _patch_lang returns no scope, so one is taken here.
        self._lang_snapshots = False

    def install(self) -> None:
        import triton.compiler
        from triton.compiler.compiler import CompiledKernel
        from triton.runtime import interpreter
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        self._wrap(JITFunction, "run", self._counted_run)
        if "run" in vars(InterpretedFunction):
            self._wrap(InterpretedFunction, "run", self._counted_run)
        else:
            # Triton before 3.6: the interpreter's kernel[grid] builds its executor in
            # __getitem__ and has no class-level run to wrap.
            self._wrap(InterpretedFunction, "__getitem__", self._counted_grid)
        self._wrap(interpreter, "_patch_lang", self._recorded_scope)
        self._lang_snapshots = "run" not in vars(InterpretedFunction)
        self._wrap(InterpretedFunction, "__call__", self._restoring_call)
        # What JITFunction compiles with (it imports the name when it first runs on a device).
        self._wrap(triton.compiler, "compile", self._timed_compile)
        # On a device, a compiled kernel's first launch builds its launcher (a C compile) and
        # loads its binary: compile time, granted the compile grace, not the candidate's run time.
        self._wrap(CompiledKernel, "_init_handles", self._timed_load)
        # The autotuner benchmarks with torch between launches; that is triton's doing.
        self._wrap(Autotuner, "run", self._machinery)
        if not self.kind.benchmarks_autotune:
            # An autotuned kernel with several configs would fail without a benchmarker, so each
            # config runs once (one that fails on the device fails here too) and the first listed
            # is chosen.
            self._wrap(Autotuner, "do_bench", _run_each_config_once)
        if self.kind.launch_stream is not None:
            # Read before any candidate runs: the stream every launch must go to.
            self.default_stream = self.kind.launch_stream()

    def _wrap(self, cls: type, name: str, make: Callable) -> None:
        wrapper = make(getattr(cls, name))
        setattr(cls, name, wrapper)
        self.installed[(cls, name)] = wrapper

    def _counted_run(self, original):
        counter = self

        def run(kernel, *args, grid, warmup, **kwargs):
            if warmup:
                return original(kernel, *args, grid=grid, warmup=warmup, **kwargs)
            counter._check_stream()
            counter.depth += 1
            try:
                result = original(kernel, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                counter.depth -= 1
                if not counter.depth:  # the kernel's own scope, which the interpreter restored
                    counter._lang_scopes.clear()
            counter.launches += 1
            return result

        return run

    def _counted_grid(self, original):
        counter = self

        def launch(kernel, *args, grid, warmup, **kwargs):
            opened = len(counter._lang_scopes)
            try:
                return original(kernel, grid)(*args, **kwargs)
            finally:
                # That interpreter leaves triton.language patched after a launch; 3.6 restores it.
                while len(counter._lang_scopes) > opened:
                    counter._lang_scopes.pop().restore()

        counted = self._counted_run(launch)

        def getitem(kernel, grid):
            return functools.partial(counted, kernel, grid=grid, warmup=False)

        return getitem

    def _recorded_scope(self, original):
        counter = self

        def patch_lang(fn):
            if counter._lang_snapshots:
                scope = _LangSnapshot()
                original(fn)
            else:
                scope = original(fn)
            counter._lang_scopes.append(scope)
            return scope

        return patch_lang

    def _restoring_call(self, original):
        counter = self

        def call(function, *args, **kwargs):
            opened = len(counter._lang_scopes)
            try:
                return original(function, *args, **kwargs)
            finally:
                while len(counter._lang_scopes) > opened:
                    counter._lang_scopes.pop().restore()

        return call

    def _machinery(self, original):
        counter = self

        def run(*args, **kwargs):
            counter.depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                counter.depth -= 1

        return run

    def _timed_compile(self, original):
        counter = self

        def compile(src, target=None, options=None, _env_vars=None):
            # The key hashes the kernel's dependencies, which can fail as compiling does.
            try:
                key = (
                    counter.loaded.key(src, target, options, _env_vars) if counter.loaded else None
                )
                kernel = counter.loaded.find(key) if key else None
                if kernel is None:
                    kernel = timed(src, target, options, _env_vars)
                    if key:
                        counter.loaded.keep(key, kernel)
                return kernel
            except CompilationError:
                raise
            except Exception as error:
                raise BackendCompileError(f"{type(error).__name__}: {error}") from error

        def timed(src, target, options, env_vars):
            counter.on_compile()
            start = time.perf_counter()
            try:
                return original(src, target=target, options=options, _env_vars=env_vars)
            finally:
                counter.compile_s += time.perf_counter() - start

        return compile

    def _timed_load(self, original):
        counter = self

        def init_handles(kernel):
            if kernel.module is not None:  # loaded already: nothing to build
                return original(kernel)
            counter.on_compile()
            start = time.perf_counter()
            try:
                return original(kernel)
            finally:
                counter.compile_s += time.perf_counter() - start

        return init_handles

    def _check_stream(self) -> None:
        if self.kind.launch_stream is None or self.findings is None:
            return
        if self.kind.launch_stream() != self.default_stream:
            self.findings.add(
                FailureCheck.STREAM, "kernel launched on a stream other than the default one"
            )

    def begin(self, findings: Findings) -> None:
        self.launches, self.compile_s, self.findings = 0, 0.0, findings

    def end(self) -> None:
        self.findings = None


def _run_each_config_once(_original) -> property:
    """The autotuner's ``do_bench`` on the interpreter: runs a config once, times nothing."""

    def benchmark(kernel_call, quantiles=None):
        kernel_call()
        return [0.0] * len(quantiles) if quantiles else 0.0

    return property(lambda _autotuner: benchmark)


#: Torch's mode stack itself, taken before EscapeHatches wraps the pop.
_push_dispatch_mode = torch._C._push_on_torch_dispatch_stack
_pop_dispatch_mode = torch._C._pop_torch_dispatch_stack


class DispatchRecorder(TorchDispatchMode):
    """Classifies every ATen op run while the wrapper runs.

    It goes on and off torch's mode stack directly: TorchDispatchMode's own ``__exit__`` runs
    under dynamo's disable wrapper and pops through the escape-hatch guard, whose frame walk
    (and the audit event of its ``sys._getframe``) was paid on every call for the harness's own
    pop. The flags it also keeps matter to torch.compile only.
    """

    def __init__(
        self,
        policy: CallPolicy,
        findings: Findings,
        launches: LaunchCounter,
        owners: CodeOwners,
        poison: bool = True,
    ):
        super().__init__()
        self.policy = policy
        self.findings = findings
        self.launches = launches
        self.owners = owners
        #: Off for a benchmark's timed calls, whose time must not include the harness's fill.
        self.poison = poison

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in dynamo's disable, whose first call imports
        # torch._dynamo: 5 s of a candidate process's start-up on the H100. No candidate may
        # run torch.compile (the linter refuses it; without the linter, its import replaces
        # module state and fails the integrity check: corpus cheats/torch_compile), so there is
        # nothing for the wrapper to keep dynamo out of.
        return False

    def __enter__(self):
        _push_dispatch_mode(self)
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        _pop_dispatch_mode(None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        reason = self.policy.forbidden_kind(name)
        if reason and not self._inside_launch_machinery():
            self.findings.add(FailureCheck.FALLBACK, f"wrapper ran aten::{name}, {reason}")
        result = func(*args, **(kwargs or {}))
        # Triton's own allocations during a launch are written before they are read.
        if self.poison and name in _UNINITIALIZED and self.launches.depth == 0:
            result.fill_(poison_value(result.dtype))
        return result

    def _inside_launch_machinery(self) -> bool:
        """Triton's interpreter copies arguments with torch during a launch; that is allowed."""
        return self.launches.depth > 0 and not self.owners.nearest_is_candidate(
            sys._getframe(2), skip=_TORCH_PREFIXES
        )


_TORCH_PREFIXES = path_prefixes(os.path.dirname(torch.__file__))


def holds_only_poison(tensor: torch.Tensor) -> bool:
    """Whether every element of ``tensor`` is ``poison_value``: an allocation left unwritten
    (reads the device: for the rare call that launched nothing)."""
    poison = poison_value(tensor.dtype)
    return bool((tensor.isnan() if poison != poison else tensor == poison).all())


def poison_value(dtype: torch.dtype):
    """What uninitialized memory of ``dtype`` is filled with: a value no correct output leaves
    in place by luck, NaN where the dtype has one."""
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).max


def _escape_hatches() -> list[tuple[object, str, str, str]]:
    """(owner, attribute, check, label) for every callable that gets around the checks.

    Host reads hand tensor data to the host without ATen dispatch; dispatch escapes take the
    recorder off the mode stack or hide ops from Python dispatch.
    """
    from torch.utils import _python_dispatch

    hatches = [
        (torch.Tensor, name, FailureCheck.HOST_READ, f"Tensor.{name}")
        for name in (
            "numpy",
            "tolist",
            "__array__",
            "__dlpack__",
            "untyped_storage",
            "storage",
            "_typed_storage",
        )
    ]
    hatches += [(torch, "to_dlpack", FailureCheck.HOST_READ, "torch.to_dlpack")]
    hatches += [
        (_python_dispatch, name, FailureCheck.DISPATCH_ESCAPE, f"_python_dispatch.{name}")
        for name in ("_pop_mode", "_pop_mode_temporarily", "_disable_current_modes")
    ]
    hatches += [
        (torch._C, name, FailureCheck.DISPATCH_ESCAPE, f"torch._C.{name}")
        for name in (
            "_pop_torch_dispatch_stack",
            "_unset_dispatch_mode",
            "_DisableTorchDispatch",
            "_ExcludeDispatchKeyGuard",
        )
        if hasattr(torch._C, name)
    ]
    return hatches


class EscapeHatches:
    """Records calls, from candidate code, of callables that get around the checks.

    Triton's interpreter reads storages while it launches a kernel, and torch pops modes for its
    own purposes: only calls whose nearest non-torch caller is candidate code count.
    """

    def __init__(self, owners: CodeOwners, launches: LaunchCounter):
        self.owners = owners
        self.launches = launches
        self.findings: Findings | None = None
        self.installed: dict[tuple[object, str], Callable] = {}

    def install(self) -> None:
        for owner, name, check, label in _escape_hatches():
            wrapper = self._guarded(getattr(owner, name), check, label)
            setattr(owner, name, wrapper)
            self.installed[(owner, name)] = wrapper

    def _guarded(self, original, check: FailureCheck, label: str):
        hatches = self

        def guarded(*args, **kwargs):
            hatches.check(check, label)
            return original(*args, **kwargs)

        guarded.__name__ = getattr(original, "__name__", label)
        return guarded

    def check(self, check: FailureCheck, label: str) -> None:
        if self.findings is None:
            return
        if not self.owners.nearest_is_candidate(sys._getframe(2), skip=_TORCH_PREFIXES):
            return
        self.findings.add(check, f"wrapper called {label}")


class ThreadWatch:
    """Records and refuses threads started during a call, unless triton starts them itself.

    The recorder sees only the calling thread; work on another thread escapes it.
    """

    def __init__(self, owners: CodeOwners):
        self.owners = owners
        self.findings: Findings | None = None
        self.installed: dict[tuple[object, str], Callable] = {}

    def install(self) -> None:
        names = (
            "start_new_thread",
            "_start_new_thread",
            "start_joinable_thread",
            "_start_joinable_thread",
        )
        for module in (_thread, threading):
            for name in names:
                if hasattr(module, name):
                    wrapper = self._watched(getattr(module, name))
                    setattr(module, name, wrapper)
                    self.installed[(module, name)] = wrapper

    def _watched(self, original):
        watch = self

        def start(*args, **kwargs):
            if watch.findings is not None and not watch.owners.nearest_is_triton(sys._getframe(1)):
                watch.findings.add(
                    FailureCheck.THREAD, "wrapper started a thread; its work escapes checks"
                )
                raise PermissionError("opforge sandbox: candidates may not start threads")
            return original(*args, **kwargs)

        return start


class Integrity:
    """Verifies that the installed hooks are still in place."""

    def __init__(self, *hooks):
        self.expected = {}
        for hook in hooks:
            self.expected.update(hook.installed)

    def broken(self) -> list[str]:
        return [
            f"{getattr(owner, '__name__', owner)}.{name} was replaced"
            for (owner, name), wrapper in self.expected.items()
            if getattr(owner, name, None) is not wrapper
        ]


def dispatch_mode_intact(recorder: DispatchRecorder) -> bool:
    return _get_current_dispatch_mode() is recorder


class ProcessState:
    """What every later source in this process relies on, fingerprinted once the process is set
    up (``snapshot``) and verified after each source's code ran (``changes``).

    A warm process runs source after source. One that replaced ``torch.exp``, a method of
    ``torch.Tensor``, a ``tl`` function or a function of the harness, registered a kernel for an
    ATen op, pushed a torch function mode, set a timer or changed a global setting would change
    what later sources run: a later cheat could pass through the patch, an honest source fail.
    Watched: the namespaces of torch, torch.nn.functional, torch.library, torch._C, triton,
    triton.language, triton's JIT and interpreter, builtins and the harness's modules (their
    classes too), ``torch.Tensor`` and triton's kernel classes; ``sys.modules``; the import
    machinery, torch's global settings, mode stacks and dispatch keys excluded or included,
    operator libraries loaded, signal handlers and the interval timer, the environment, the
    working directory, Python threads left running; and every registration through
    ``torch._C._dispatch_library``, which all of ``torch.library`` goes through.

    An intact process costs one pass over the identities of a few thousand values; only a
    difference is looked at name by name. A module that appears (an import, torch's lazy
    submodules) changes nothing a source relies on and is taken into the fingerprint.
    """

    def __init__(self, owners: CodeOwners, set_per_source: tuple[tuple[object, str], ...] = ()):
        """``set_per_source``: (a watched class or ``os.environ``, a name) that the harness itself
        sets for each source, which no source is blamed for."""
        self.owners = owners
        self.installed: dict[tuple[object, str], Callable] = {}
        #: Registrations since the snapshot: (what was registered, whether candidate code did).
        self.registrations: list[tuple[str, bool]] = []
        self._set_per_source = {(id(owner), name) for owner, name in set_per_source}
        self._namespaces: list[_Namespace] = []
        self._modules = _Namespace("sys.modules", sys.modules, sys.modules, True)
        self._settings: list[tuple[str, object]] = []
        self._environment: dict[str, str] = {}
        self._threads = 0

    def install(self) -> None:
        """Watch registrations with the dispatcher (call before ``snapshot``)."""
        original = torch._C._dispatch_library
        state = self

        def dispatch_library(*args, **kwargs):
            by_candidate = state.owners.nearest_is_candidate(sys._getframe(1), _TORCH_PREFIXES)
            state.registrations.append((" ".join(filter(None, map(str, args[:3]))), by_candidate))
            return original(*args, **kwargs)

        torch._C._dispatch_library = dispatch_library
        self.installed[(torch._C, "_dispatch_library")] = dispatch_library

    def snapshot(self) -> None:
        """Take the fingerprint every later ``changes`` compares with."""
        self._namespaces = [
            _Namespace(label, owner, vars(owner), modules_may_appear)
            for label, owner, modules_may_appear in _watched_namespaces()
        ]
        self._modules = _Namespace("sys.modules", sys.modules, sys.modules, True)
        self._settings = [(label, read()) for label, read in _SETTINGS]
        self._environment = self._own_environment()
        self._threads = threading.active_count()
        self.registrations.clear()

    def changes(self) -> tuple[list[str], bool]:
        """(what changed that candidate code did or could have done, whether anything changed
        at all): a registration by torch itself, or a Python thread left running (the thread
        watch refuses the candidate's own), changes the process without accusing anyone."""
        changed: list[str] = []
        for namespace in (*self._namespaces, self._modules):
            changed += namespace.changes(self._set_per_source)
        for (label, before), (_, read) in zip(self._settings, _SETTINGS, strict=True):
            try:
                same = read() == before
            except Exception as error:  # noqa: BLE001 (a working directory removed, say)
                same, label = False, f"{label} ({type(error).__name__})"
            if not same:
                changed.append(f"{label} changed")
        environment = self._own_environment()
        if environment != self._environment:
            names = dict(set(environment.items()) ^ set(self._environment.items()))
            changed += [f"os.environ[{name!r}] changed" for name in sorted(names)]
        by_candidate = [what for what, by in self.registrations if by]
        changed += [f"a torch.library registration ({what})" for what in by_candidate]
        threads_left = threading.active_count() != self._threads
        return changed, bool(changed or self.registrations or threads_left)

    def _own_environment(self) -> dict[str, str]:
        return {
            name: value
            for name, value in os.environ.items()
            if (id(os.environ), name) not in self._set_per_source
        }


#: Attributes Python adds to a class the first time they are read (triton's interpreter reads
#: ``tl.tensor.__annotations__`` when it runs a kernel).
_MADE_ON_READ = frozenset({"__annotations__"})
#: Bookkeeping of Python and triton in a namespace, which no later source relies on: the
#: warnings machinery adds and resets ``__warningregistry__`` in the module that warned (the
#: interpreter's numpy arithmetic warns of overflow on extremal samples); on CUDA, triton loads
#: each compiled kernel's launcher as the module ``sys.modules["__triton_launcher"]``, replaced
#: by every compile.
_BOOKKEEPING = frozenset({"__warningregistry__", "__triton_launcher"})
_NOT_INHERITED = object()


def _inherited(owner: object, name: str):
    """What a class ``owner`` inherits as ``name`` (triton's interpreter, undoing its patches,
    sets the inherited ``__repr__`` on ``tl.tensor`` itself), or ``_NOT_INHERITED``."""
    for base in getattr(owner, "__mro__", ())[1:]:
        if name in vars(base):
            return vars(base)[name]
    return _NOT_INHERITED


class _Namespace:
    """A watched namespace (a module's or a class's attributes, ``sys.modules``) and the objects
    it held when fingerprinted, held so that none is freed and its id taken by another."""

    def __init__(self, label: str, owner: object, namespace, modules_may_appear: bool):
        self.label = label
        self.owner = owner
        self.namespace = namespace
        #: Whether modules may appear in it (an import, torch's lazy submodules): classes no.
        self.modules_may_appear = modules_may_appear
        self._fingerprint()

    def _fingerprint(self) -> None:
        self.keys, self.values = tuple(self.namespace), tuple(self.namespace.values())

    def changes(self, set_per_source: set[tuple[int, str]]) -> list[str]:
        """What was replaced, deleted or added since the fingerprint, but for names the harness
        sets per source; the fingerprint is taken again where nothing else changed."""
        # Identities in order: far cheaper than building and comparing tuples of ids.
        if len(self.namespace) == len(self.values) and all(
            map(operator.is_, self.namespace.values(), self.values)
        ):
            return []
        found, owner = [], id(self.owner)
        for name, value in zip(self.keys, self.values, strict=True):
            if (owner, name) in set_per_source or name in _BOOKKEEPING:
                continue
            if name not in self.namespace:
                found.append(f"{self.label}.{name} was deleted")
            elif self.namespace[name] is not value:
                found.append(f"{self.label}.{name} was replaced")
        known = set(self.keys)
        for name, value in list(self.namespace.items()):
            appeared = (
                name in _MADE_ON_READ
                or name in _BOOKKEEPING
                or (self.modules_may_appear and isinstance(value, ModuleType))
                or value is _inherited(self.owner, name)
            )
            if name not in known and not appeared and (owner, name) not in set_per_source:
                found.append(f"{self.label}.{name} was added")
        if not found:
            self._fingerprint()
        return found


def _watched_namespaces() -> list[tuple[str, object, bool]]:
    """(label, module or class, whether modules may appear in it) for ``ProcessState``."""
    import torch.library
    import torch.nn.functional
    import triton
    import triton.language as tl
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime import interpreter, jit
    from triton.runtime.autotuner import Autotuner

    modules = [
        builtins,
        torch,
        torch._C,
        torch.nn.functional,
        torch.library,
        triton,
        tl,
        tl.core,
        tl.math,
        jit,
        interpreter,
        time,  # what a host timer reads (timing.py)
    ]
    modules += [module for name, module in sys.modules.items() if name.startswith(_HARNESS)]
    classes = [torch.Tensor, tl.tensor, jit.JITFunction, interpreter.InterpretedFunction]
    classes += [CompiledKernel, Autotuner, TorchDispatchMode, torch.cuda.Event]
    classes += [
        value
        for module in modules
        if module.__name__.startswith(_HARNESS)
        for value in vars(module).values()
        if isinstance(value, type) and value.__module__ == module.__name__
    ]
    watched = [(module.__name__, module, True) for module in modules]
    return watched + [(f"{cls.__module__}.{cls.__qualname__}", cls, False) for cls in classes]


_HARNESS = "opforge_worker"


class _Identities(tuple):
    """Objects equal to another such tuple only when they are the same objects; held, so that no
    object made later can take the id of one that was replaced."""

    def __eq__(self, other) -> bool:
        return len(self) == len(other) and all(a is b for a, b in zip(self, other, strict=True))

    __hash__ = tuple.__hash__


_STANDARD_SIGNALS = tuple(range(1, signal.SIGRTMIN))
#: Global state a source could leave behind, read the same way before and after: (label, read).
_SETTINGS: list[tuple[str, Callable[[], object]]] = [
    ("torch.get_default_dtype()", torch.get_default_dtype),
    ("torch.get_default_device()", lambda: str(torch.get_default_device())),
    ("torch.is_grad_enabled()", torch.is_grad_enabled),
    ("torch.is_inference_mode_enabled()", torch.is_inference_mode_enabled),
    ("torch.get_num_threads()", torch.get_num_threads),
    ("torch.are_deterministic_algorithms_enabled()", torch.are_deterministic_algorithms_enabled),
    ("the torch dispatch mode stack", torch._C._len_torch_dispatch_stack),
    ("the torch function mode stack", torch._C._len_torch_function_stack),
    # Dispatch keys a thread excludes or includes outlive the call: excluding Python would hide
    # every later op from the dispatch recorder.
    ("the dispatch keys excluded", lambda: str(torch._C._dispatch_tls_local_exclude_set())),
    ("the dispatch keys included", lambda: str(torch._C._dispatch_tls_local_include_set())),
    # A library of operators loaded from a shared object registers them without torch.library.
    ("torch.ops.loaded_libraries", lambda: frozenset(torch.ops.loaded_libraries)),
    ("sys.meta_path", lambda: _Identities(sys.meta_path)),
    ("sys.path_hooks", lambda: _Identities(sys.path_hooks)),
    ("sys.path", lambda: tuple(sys.path)),
    ("sys.excepthook", lambda: _Identities((sys.excepthook,))),
    ("threading.excepthook", lambda: _Identities((threading.excepthook,))),
    # _signal's getsignal: signal's converts each handler to an enum, which costs more than
    # all the rest of the check.
    ("a signal handler", lambda: _Identities(map(_signal.getsignal, _STANDARD_SIGNALS))),
    ("the interval timer", lambda: signal.getitimer(signal.ITIMER_REAL)),
    ("faulthandler", faulthandler.is_enabled),
    ("the working directory", os.getcwd),
]


# -- outputs ----------------------------------------------------------------------------------


def tensor_leaves(value) -> list[torch.Tensor]:
    """Tensors inside nested tuples, lists and dict values, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [leaf for item in value for leaf in tensor_leaves(item)]
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in tensor_leaves(item)]
    return []


def output_structure(
    value,
    leaves: list,
    findings: Findings,
    device: torch.device,
    input_storages: dict[int, int],
    alias_allowed: bool,
):
    """Describe ``value`` for the reply's header, putting its tensors (detached, where they are)
    in ``leaves``."""
    if isinstance(value, torch.Tensor):
        if type(value) is not torch.Tensor:
            findings.add(
                FailureCheck.OUTPUT_TYPE,
                f"output is a {type(value).__name__}, not a plain torch.Tensor",
            )
            return {"type": "other", "name": type(value).__name__}
        if value.device.type != device.type:
            findings.add(
                FailureCheck.OUTPUT_DEVICE, f"output is on {value.device}, expected {device.type}"
            )
        storage = value.untyped_storage()
        if storage.nbytes() and storage.data_ptr() in input_storages and not alias_allowed:
            findings.add(
                FailureCheck.ALIASING,
                f"output shares memory with input {input_storages[storage.data_ptr()]}",
            )
        leaves.append(value.detach())
        return {"type": "tensor", "index": len(leaves) - 1}
    if isinstance(value, tuple | list):
        items = [
            output_structure(item, leaves, findings, device, input_storages, alias_allowed)
            for item in value
        ]
        return {"type": "tuple" if isinstance(value, tuple) else "list", "items": items}
    if type(value) is int and not -(1 << 63) <= value < 1 << 64:
        # Beyond what the reply's header carries, and than any reference (ATen's ints are 64-bit).
        return {"type": "scalar", "value": str(value)}
    if value is None or type(value) in (bool, int, float):
        return {"type": "scalar", "value": value}
    findings.add(FailureCheck.OUTPUT_TYPE, f"output contains a {type(value).__name__}")
    return {"type": "other", "name": type(value).__name__}
