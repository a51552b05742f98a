"""The exported runtime's direct launch (opforge_library/_launch.py): the same kernel, config and
result as Triton's own ``run``, with Triton's path taken wherever the direct one would differ.
The autotuner's part runs on the interpreter; the JIT launch needs a CUDA device."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest
import torch

DEVICE = os.environ.get("OPFORGE_TEST_DEVICE", "interpreter")
if DEVICE == "interpreter":
    os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton

import triton  # noqa: E402

from opforge_library import _launch  # noqa: E402
from opforge_worker import device_kinds  # noqa: E402

ON = "cuda" if DEVICE == "cuda" else "cpu"
# what an exported package's manifest carries for the kind
CALLS = _launch.device_calls(device_kinds.lookup(DEVICE).direct_launch)

KERNELS = """
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * factor, mask=mask)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"]
)
@triton.jit
def tuned_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)
"""


@pytest.fixture
def kernels(tmp_path):
    path = tmp_path / "launch_kernels.py"
    path.write_text(KERNELS)
    spec = importlib.util.spec_from_file_location("launch_kernels", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["launch_kernels"] = module
    spec.loader.exec_module(module)
    if DEVICE != "cuda":
        # the interpreter has no timer: each config runs once, the first is chosen
        module.tuned_kernel.do_bench = run_once
    yield module
    sys.modules.pop("launch_kernels", None)


def run_once(kernel_call, quantiles=None):
    kernel_call()
    return [0.0] * len(quantiles) if quantiles else 0.0


class Counted:
    """Counts the calls that reach Triton's own ``run``."""

    def __init__(self, launcher):
        self.launcher, self.calls = launcher, 0
        self.triton_run = launcher.triton_run
        launcher.triton_run = self

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.triton_run(*args, **kwargs)


def tuned(kernels, x):
    out = torch.empty_like(x)
    kernels.tuned_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
    return out


def test_install_gives_each_kernel_a_direct_launch_and_uninstall_takes_it_back(kernels):
    namespace = vars(kernels)
    # scale_kernel, the autotuner and the jit function under it; the interpreter's jit functions
    # are not Triton's JITFunction: there only the autotuner is taken
    expected = 3 if DEVICE == "cuda" else 1
    assert _launch.install(namespace, CALLS) == expected
    assert _launch.install(namespace, CALLS) == 0  # once only
    assert isinstance(kernels.tuned_kernel.run, _launch.TunedLaunch)
    _launch.uninstall(namespace)
    assert "run" not in vars(kernels.tuned_kernel)
    assert "run" not in vars(kernels.scale_kernel)


def test_a_tuned_kernel_runs_the_config_the_autotuner_chose_without_its_run(kernels):
    _launch.install(vars(kernels), CALLS)
    counted = Counted(kernels.tuned_kernel.run)
    x = torch.arange(100, dtype=torch.float32, device=ON)
    first = tuned(kernels, x)  # tunes: Triton's path
    chosen = kernels.tuned_kernel.best_config
    assert counted.calls == 1
    second = tuned(kernels, x)
    assert counted.calls == 1  # the config it chose, found by the autotuner's own key
    assert kernels.tuned_kernel.best_config is chosen
    torch.testing.assert_close(first, x + 1, rtol=0, atol=0)
    torch.testing.assert_close(second, x + 1, rtol=0, atol=0)
    # another key (a size it has not tuned for, another dtype) is Triton's to tune
    tuned(kernels, torch.arange(10, dtype=torch.float32, device=ON))
    tuned(kernels, torch.arange(100, dtype=torch.float64, device=ON))
    assert counted.calls == 3
    assert len(kernels.tuned_kernel.cache) == 3


def test_a_tuning_key_passed_by_keyword_takes_the_autotuners_path(kernels):
    _launch.install(vars(kernels), CALLS)
    counted = Counted(kernels.tuned_kernel.run)
    x = torch.arange(40, dtype=torch.float32, device=ON)
    for _ in range(2):
        out = torch.empty_like(x)
        kernels.tuned_kernel[lambda meta: (triton.cdiv(40, meta["BLOCK"]),)](x, out, n=40)
        torch.testing.assert_close(out, x + 1, rtol=0, atol=0)
    assert counted.calls == 2


needs_cuda = pytest.mark.skipif(DEVICE != "cuda", reason="the JIT launch needs a CUDA device")


def scaled(kernels, x, factor):
    out = torch.empty_like(x)
    kernels.scale_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), factor, BLOCK=64)
    return out


@needs_cuda
def test_a_jit_kernel_launches_its_compiled_kernel_directly(kernels):
    _launch.install(vars(kernels), CALLS)
    counted = Counted(kernels.scale_kernel.run)
    x = torch.arange(1000, dtype=torch.float32, device=ON)
    torch.testing.assert_close(scaled(kernels, x, 2.0), x * 2, rtol=0, atol=0)  # compiles
    assert counted.calls == 1
    compiled = sum(len(caches[0]) for caches in kernels.scale_kernel.device_caches.values())
    for factor in (3.0, 0.5):
        torch.testing.assert_close(scaled(kernels, x, factor), x * factor, rtol=0, atol=0)
    # an unaligned view and n=1 specialize differently: Triton compiles them, as without us
    torch.testing.assert_close(scaled(kernels, x[1:], 2.0), x[1:] * 2, rtol=0, atol=0)
    assert counted.calls == 2
    after = sum(len(caches[0]) for caches in kernels.scale_kernel.device_caches.values())
    assert after == compiled + 1


@needs_cuda
def test_a_launch_hook_is_honoured_by_taking_tritons_path(kernels):
    from triton import knobs

    _launch.install(vars(kernels), CALLS)
    x = torch.arange(64, dtype=torch.float32, device=ON)
    scaled(kernels, x, 2.0)
    seen = []
    knobs.runtime.launch_enter_hook.add(seen.append)
    try:
        torch.testing.assert_close(scaled(kernels, x, 2.0), x * 2, rtol=0, atol=0)
    finally:
        knobs.runtime.launch_enter_hook.remove(seen.append)
    assert len(seen) == 1


def test_the_kinds_launch_calls_resolve_only_in_a_torch_that_has_them():
    names = device_kinds.lookup("cuda").direct_launch
    calls = _launch.device_calls(names)
    if torch.backends.cuda.is_built():
        assert calls.current_device is torch._C._cuda_getDevice
    else:  # a CPU build of torch: Triton's own run launches
        assert calls is None
    assert _launch.device_calls({}) is None
