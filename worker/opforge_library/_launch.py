"""A direct launch of the package's Triton kernels: Triton's own launcher, called with what a
served call repeats looked up once.

Copied verbatim into every exported package (beside ``_runtime.py``). ``JITFunction.run`` spends
most of a small call outside the launcher (bench/results/dispatch-profile-h200.txt): the device
through ``torch.cuda.current_device``'s lazy-init checks, the stream through the driver proxy,
two environment reads (``TRITON_DEBUG``, the instrumentation mode), a launch-metadata dict for
hooks that are not there, and calls of two empty hook chains; ``Autotuner.run`` builds three
dicts per call to find a config it already chose. ``DirectLaunch`` and ``TunedLaunch`` stand in
for the ``run`` of one kernel each and keep what decides the result exactly as Triton has it:
the binder, the specialization and its cache key, the compiled kernel from Triton's own cache,
the autotuner's own cache key and chosen config, the launcher with its scratch allocation. They
hand the call to Triton's ``run`` whenever anything they do not repeat is in play: a warm-up, a
kernel not compiled yet or compiling, pre-run or launch hooks, changed globals, a config not yet
tuned or with a pre-hook, a tuning key passed by keyword. The debug and instrumentation knobs
are read when a kernel is installed (``Library.enable``), not per call.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import NamedTuple

from triton import knobs
from triton.runtime.autotuner import Autotuner, Heuristics
from triton.runtime.jit import JITFunction, compute_cache_key

_MISSING = object()


def _hooked() -> bool:
    runtime = knobs.runtime
    return bool(runtime.launch_enter_hook.calls or runtime.launch_exit_hook.calls)


class DeviceCalls(NamedTuple):
    """How a launch finds its device and that device's raw stream, as Triton's launcher does."""

    current_device: Callable[[], int]
    current_raw_stream: Callable[[int], int]


def device_calls(names: Mapping[str, str]) -> DeviceCalls | None:
    """The manifest's ``direct_launch`` (dotted names of torch functions, written from the device
    kind's registry entry) resolved in this torch; None where it names none or this torch lacks
    them (a build without the kind's device): Triton's own ``run`` launches there."""
    if not names:
        return None
    try:
        return DeviceCalls(_resolve(names["device"]), _resolve(names["stream"]))
    except AttributeError:
        return None


def _resolve(dotted: str):
    module, *path = dotted.split(".")
    value = importlib.import_module(module)
    for name in path:
        value = getattr(value, name)
    return value


class DirectLaunch:
    """``run`` of one ``JITFunction`` on a device with streams."""

    def __init__(self, fn: JITFunction, device: DeviceCalls):
        self.fn = fn
        self.device = device
        self.triton_run = type(fn).run.__get__(fn)
        self.debug = knobs.runtime.debug
        self.instrumentation = knobs.compilation.instrumentation_mode

    def __call__(self, *args, grid, warmup, **kwargs):
        fn = self.fn
        if warmup or fn.pre_run_hooks or _hooked():
            return self.triton_run(*args, grid=grid, warmup=warmup, **kwargs)
        device = self.device.current_device()
        caches = fn.device_caches.get(device)
        if caches is None:  # the first call on this device makes its binder
            return self.triton_run(*args, grid=grid, warmup=warmup, **kwargs)
        kernel_cache, kernel_key_cache, _, _, binder = caches
        kwargs["debug"] = kwargs.get("debug", fn.debug) or self.debug
        kwargs["instrumentation_mode"] = self.instrumentation
        bound_args, specialization, options = binder(*args, **kwargs)
        kernel = kernel_cache.get(compute_cache_key(kernel_key_cache, specialization, options))
        if kernel is None or hasattr(kernel, "result"):
            return self.triton_run(*args, grid=grid, warmup=warmup, **kwargs)
        for (name, _), (value, globals_dict) in fn.used_global_vals.items():
            if globals_dict.get(name, _MISSING) != value:
                return self.triton_run(*args, grid=grid, warmup=warmup, **kwargs)  # it raises
        if callable(grid):
            grid = grid(bound_args)
        size = len(grid)
        kernel.run(
            grid[0], grid[1] if size > 1 else 1, grid[2] if size > 2 else 1,
            self.device.current_raw_stream(device), kernel.function, kernel.packed_metadata,
            None, None, None, *bound_args.values(),
        )  # fmt: skip
        return kernel


class TunedLaunch:
    """``run`` of one ``Autotuner``: the config it chose for the call's key, without its dicts."""

    def __init__(self, tuner: Autotuner):
        self.tuner = tuner
        self.triton_run = type(tuner).run.__get__(tuner)
        names = tuner.arg_names
        self.key_places = [names.index(key) for key in tuner.keys if key in names]
        self.arg_names = frozenset(names)
        self.config_kwargs: dict[int, dict] = {}

    def __call__(self, *args, **kwargs):
        tuner = self.tuner
        if len(tuner.configs) <= 1 or any(name in self.arg_names for name in kwargs):
            return self.triton_run(*args, **kwargs)
        # Autotuner.run's key: the tuning arguments' values, then every argument's dtype
        key = [args[place] for place in self.key_places if place < len(args)]
        key.extend(str(arg.dtype) for arg in args if hasattr(arg, "dtype"))
        config = tuner.cache.get(tuple(key))
        if config is None or config.pre_hook is not None:
            return self.triton_run(*args, **kwargs)
        tuner.best_config = config
        found = self.config_kwargs.get(id(config))
        if found is None:
            found = self.config_kwargs[id(config)] = config.all_kwargs()
        return tuner.fn.run(*args, **kwargs, **found)


def _launchers(value) -> list:
    """The kernel objects a module-level name holds, outermost first (autotune over heuristics
    over jit)."""
    found = []
    while isinstance(value, (Autotuner, Heuristics, JITFunction)):
        found.append(value)
        value = getattr(value, "fn", None)
    return found


def install(namespace: dict, device: DeviceCalls | None) -> int:
    """Give every Triton kernel of ``namespace`` (a module's globals) its direct launch; how
    many were given one. A kernel of Triton's interpreter is none of these types: untouched;
    without ``device`` calls, JIT functions keep Triton's launch (their autotuners do not)."""
    installed = 0
    for value in list(namespace.values()):
        for kernel in _launchers(value):
            if "run" in vars(kernel):
                continue
            if isinstance(kernel, JITFunction):
                if device is None:
                    continue
                kernel.run = DirectLaunch(kernel, device)
            elif isinstance(kernel, Autotuner):
                kernel.run = TunedLaunch(kernel)
            else:
                continue
            installed += 1
    return installed


def uninstall(namespace: dict) -> None:
    """Triton's own launch again for every kernel of ``namespace``."""
    for value in list(namespace.values()):
        for kernel in _launchers(value):
            if isinstance(vars(kernel).get("run"), (DirectLaunch, TunedLaunch)):
                del kernel.run
