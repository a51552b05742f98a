"""Device kinds: everything about an accelerator that the worker's code depends on.

A kind is what a worker announces in ``hello`` and what the daemon routes test jobs by; the daemon
takes any name a worker announces (bounded in length and charset), so adding an accelerator means
one entry in ``KINDS`` here plus its linter profile (``data/linter/<kind>.yaml``). Nothing else in
the worker's packages compares kind names: what an exported package needs of its kind, the
exporter writes into its manifest from here.

This module is read in the candidate process before it confines itself, so it imports no torch or
triton at module level: the hooks import them when they run.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from types import MappingProxyType

from opforge_worker import timing

#: What a lint-only worker announces: it tests on no device.
NO_DEVICE = "none"


@dataclass(frozen=True)
class NumericContract:
    """What a kind's arithmetic does where IEEE 754 and ATen's CPU leave a device room: the judge
    compares under it (judge.Judge), and every verdict that depends on it says so.

    Defects of a toolchain are not part of it: they are measured, per toolchain fingerprint, by the
    conformance probes (data/conformance.yaml, conformance.py); ``known_defects`` names the probes
    this kind's toolchains are known to fail, so that a report tells a known defect from a new one.
    """

    #: The dtypes whose subnormal values this device's kernels flush to zero (read as zero,
    #: written as zero, keeping the sign).
    flushes_subnormals: frozenset[str]
    #: Whether its arithmetic keeps the sign of a zero as IEEE 754 says; where it does not, the
    #: judge never asks a zero for its sign.
    keeps_zero_signs: bool
    #: Conformance probes (data/conformance.yaml) known to fail on this kind's toolchains.
    known_defects: frozenset[str]


#: The contract of a device that computes as IEEE 754 says, with no known defect.
IEEE_754 = NumericContract(
    flushes_subnormals=frozenset(), keeps_zero_signs=True, known_defects=frozenset()
)


class MemoryPolicy(Enum):
    #: RLIMIT_AS in the candidate process: the kernel refuses the allocation that crosses it.
    ADDRESS_SPACE = "address space"
    #: The judge polls the candidate tree's resident memory and kills it above the limit, for
    #: runtimes that reserve huge virtual ranges (CUDA), where an address-space limit cannot apply.
    RESIDENT = "resident"


@dataclass(frozen=True)
class DeviceKind:
    name: str
    #: The torch device the candidates' tensors live on.
    torch_device: str
    #: The device OpInfo's dtype tables are asked about: the dtypes a kernel must handle here.
    opinfo_device: str
    #: Set in the candidate process's scrubbed environment; holds ``triton_environment``.
    environment: Mapping[str, str]
    #: What a process must have in its environment before it imports triton to run this kind's
    #: kernels (Triton picks its interpreter at import): an exported package refuses to enable
    #: without it, and modelcheck sets it.
    triton_environment: Mapping[str, str]
    #: The torch.library dispatch key an exported package registers its kernels under unless
    #: told otherwise: the key of ``torch_device``'s tensors (PrivateUse1 for an out-of-tree one).
    dispatch_key: str
    #: Whether a kernel's first launch compiles it (Triton's JIT; the device libraries pick their
    #: algorithms on first use too), so that a first pass is slower than the ones after it; the
    #: interpreter runs the source as it is.
    compiles_on_first_launch: bool
    #: Whether the candidate gets a PID namespace of its own; without one the judge, as child
    #: subreaper, kills the descendants that left the process group.
    pid_namespace: bool
    #: Paths beyond scratch the candidate may write, for the device runtime's own use.
    runtime_writable: tuple[str, ...]
    memory_policy: MemoryPolicy
    #: The candidate process's memory limit unless tolerances.yaml's ``memory_limit_mb`` names one.
    memory_limit_mb: int
    #: Jobs a worker runs at once for ``--slots auto``, which is also what the daemon passes for
    #: the workers it starts itself with ``slots: auto``: this is the one table of the counts.
    default_slots: int
    #: Whether Triton times the configs of an autotuned kernel here; where it cannot, each config
    #: runs once and the first listed is chosen.
    benchmarks_autotune: bool
    #: Whether replies' device-to-host copies go through pinned host memory.
    pinned_staging: bool
    #: Brings the runtime up in the candidate process before any candidate runs, so that its
    #: seconds are the process's start-up rather than the first candidate's run time.
    start_runtime: Callable[[], None] | None
    #: Waits for the device's queued work (and surfaces its faults); None where launches complete
    #: before they return.
    synchronize: Callable[[], None] | None
    #: The (device, raw stream) a launch goes to now; None where the device has no streams. A
    #: launch away from the one seen at start-up is reported (``stream`` finding).
    launch_stream: Callable[[], tuple[int, int]] | None
    #: The torch functions an exported package's direct launch (opforge_library/_launch.py)
    #: asks for the current device (``device``) and that device's raw stream (``stream``), by
    #: dotted name: the manifest carries them, since the package imports no opforge module.
    #: Empty where the kind's kernels are not compiled by Triton's JIT (nothing to launch
    #: directly).
    direct_launch: Mapping[str, str]
    #: What times a benchmark's calls (timing.py): the device's own clock where it has one.
    timer: str
    #: Memory bandwidth in GB/s by device name (``toolchain()["device"]``), the peak a
    #: benchmark's achieved bandwidth is a share of: vendors' figures.
    peak_memory_gbps: Mapping[str, float]
    #: What its arithmetic may do that ATen's CPU does not (``NumericContract``).
    numerics: NumericContract
    #: The device-specific entries of the toolchain map (toolchain.TOOLCHAIN_KEYS): ``cuda``,
    #: ``driver``, ``device``; RuntimeError when the device is absent.
    toolchain: Callable[[], dict[str, str]]

    @property
    def lint_profile(self) -> str:
        """The linter profile of the static gate, data/linter/<name>.yaml: named like the kind,
        because lint jobs name their profile by the session's device kind (op_session.cpp) and
        a lint worker serves every kind."""
        return self.name


def nvidia_driver_version() -> str:
    """The NVIDIA kernel driver's version, or "" on a host without one."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
        return done.stdout.splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    # Without nvidia-smi (some containers) the kernel module still says its version.
    try:
        banner = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return ""
    for word in banner.split():
        if word.count(".") >= 1 and word.replace(".", "").isdigit():
            return word
    return ""


def _cuda_start() -> None:
    import torch
    import triton

    torch.cuda.init()
    # Triton's driver builds its C helpers now, into the process's own cache rather than the
    # first source's.
    torch.zeros(1, device="cuda")
    triton.runtime.driver.active.get_current_device()
    # No persisting-L2 set-aside: an access-policy window cannot keep a kernel's working set in
    # L2 across a benchmark's flushes (TIMING.md).
    timing.no_persisting_l2()


def _cuda_synchronize() -> None:
    import torch

    # torch.cuda.synchronize() without its device lookups (a fifth of a call's sync in a profile
    # of a warm pass on the H100): the current device, as it does.
    torch._C._cuda_synchronize()


def _cuda_launch_stream() -> tuple[int, int]:
    """Read as Triton's launcher reads it: cheaper, on every launch, than building and comparing
    torch.cuda.Stream objects."""
    import torch

    device = torch._C._cuda_getDevice()
    return device, torch._C._cuda_getCurrentRawStream(device)


def _cuda_toolchain() -> dict[str, str]:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("device kind 'cuda': torch sees no CUDA device on this host")
    return {
        "cuda": torch.version.cuda or "",
        "driver": nvidia_driver_version(),
        "device": torch.cuda.get_device_name(0),
    }


INTERPRETER_DEVICE_NAME = "cpu (triton interpreter)"
_INTERPRETED = MappingProxyType({"TRITON_INTERPRET": "1"})


def _interpreter_toolchain() -> dict[str, str]:
    return {"cuda": "", "driver": "", "device": INTERPRETER_DEVICE_NAME}


KINDS: Mapping[str, DeviceKind] = MappingProxyType(
    {
        kind.name: kind
        for kind in (
            DeviceKind(
                name="interpreter",
                torch_device="cpu",
                opinfo_device="cpu",
                # Triton runs kernels in its interpreter; hiding GPUs keeps torch off them.
                environment=MappingProxyType({**_INTERPRETED, "CUDA_VISIBLE_DEVICES": ""}),
                triton_environment=_INTERPRETED,
                dispatch_key="CPU",
                compiles_on_first_launch=False,
                pid_namespace=True,
                runtime_writable=(),
                memory_policy=MemoryPolicy.ADDRESS_SPACE,
                memory_limit_mb=12288,
                # Each slot competes for the host's cores.
                default_slots=1,
                # No driver, hence no benchmarker; timing interpreted kernels ranks nothing that
                # matters on a GPU.
                benchmarks_autotune=False,
                pinned_staging=False,
                start_runtime=None,
                synchronize=None,
                launch_stream=None,
                direct_launch=MappingProxyType({}),
                timer=timing.PERF_COUNTER,
                peak_memory_gbps=MappingProxyType({}),
                # The interpreter runs kernels with numpy on the host: IEEE 754 with subnormals.
                numerics=NumericContract(
                    flushes_subnormals=frozenset(),
                    keeps_zero_signs=True,
                    # Measured on Triton 3.6 (conformance.py): its interpreter applies float
                    # operators to a bfloat16's uint16 bits (-0.5 for 0.5 is -8.0), rounds
                    # float32 to bfloat16 toward zero, and builds -x as 0 - x (+0.0 for +0.0).
                    known_defects=frozenset(
                        {
                            "negate_bfloat16",
                            "add_bfloat16",
                            "multiply_bfloat16",
                            "less_bfloat16",
                            "convert_float32_to_bfloat16",
                            "negate_zero_float32",
                            "negate_zero_bfloat16",
                        }
                    ),
                ),
                toolchain=_interpreter_toolchain,
            ),
            DeviceKind(
                name="cuda",
                torch_device="cuda",
                opinfo_device="cuda",
                environment=MappingProxyType({}),
                triton_environment=MappingProxyType({}),
                dispatch_key="CUDA",
                compiles_on_first_launch=True,
                # cuInit fails with error 304 inside a PID namespace (an H100, driver 580).
                pid_namespace=False,
                # The CUDA driver names its threads by opening /proc/self/task/<tid>/comm with
                # O_TRUNC; refusing that makes cuInit fail with error 304.
                runtime_writable=("/proc/self/task",),
                memory_policy=MemoryPolicy.RESIDENT,
                memory_limit_mb=32768,
                # Several candidate processes keep the GPU busy: an H100 re-validated the
                # nine-kernel library 3x as fast with 8 as with 1 (bench/results/worker-h100.md).
                default_slots=8,
                benchmarks_autotune=True,
                pinned_staging=True,
                start_runtime=_cuda_start,
                synchronize=_cuda_synchronize,
                launch_stream=_cuda_launch_stream,
                direct_launch=MappingProxyType(
                    {
                        "device": "torch._C._cuda_getDevice",
                        "stream": "torch._C._cuda_getCurrentRawStream",
                    }
                ),
                timer=timing.CUDA_EVENTS,
                peak_memory_gbps=MappingProxyType(
                    {
                        "NVIDIA H200": 4800.0,
                        "NVIDIA H100 80GB HBM3": 3350.0,
                        "NVIDIA H100 PCIe": 2000.0,
                        "NVIDIA A100-SXM4-80GB": 2039.0,
                        "NVIDIA A100-SXM4-40GB": 1555.0,
                    }
                ),
                # Triton's NVIDIA backend compiles float32 arithmetic with denormals flushed
                # (floor(-1e-40) gives -0.0, rsqrt(5.9e-39) inf); bfloat16, computed in float32,
                # shares float32's exponent range and so its subnormals; float16's subnormals are
                # normal float32 values, and float64 keeps them.
                numerics=NumericContract(
                    flushes_subnormals=frozenset({"float32", "bfloat16"}),
                    keeps_zero_signs=True,
                    known_defects=frozenset(),
                ),
                toolchain=_cuda_toolchain,
            ),
        )
    }
)


#: The devices OpInfo's dtype tables are surveyed for (the catalog's ``supported_dtypes`` keys).
OPINFO_DEVICES = tuple(sorted({kind.opinfo_device for kind in KINDS.values()}))


def lookup(name: str) -> DeviceKind:
    """The kind named ``name``; ValueError naming the known kinds when there is none."""
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"device kind {name!r}: expected one of {', '.join(KINDS)}") from None
