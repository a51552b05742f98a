"""The toolchain a worker runs on, and its fingerprint (messages/PROTOCOL.md, `hello`).

The daemon keys validations by the fingerprint: a new Triton or torch drop on a host changes it, and
the library is re-validated there. The fingerprint is the first 16 hex digits of sha256 over the
canonical JSON of the toolchain map: sorted keys, no spaces, UTF-8 (non-ASCII kept, not escaped).
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from pathlib import Path

TOOLCHAIN_KEYS = ("python", "torch", "triton", "cuda", "driver", "device")
INTERPRETER_DEVICE_NAME = "cpu (triton interpreter)"
DEVICE_KINDS = ("cuda", "interpreter", "none")


def fingerprint(toolchain: dict[str, str]) -> str:
    canonical = json.dumps(toolchain, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


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


def device_name(device_kind: str) -> str:
    if device_kind == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    if device_kind == "interpreter":
        return INTERPRETER_DEVICE_NAME
    return ""


def collect(device_kind: str) -> dict[str, str]:
    """The toolchain map for `device_kind` (`cuda`, `interpreter` or `none`)."""
    if device_kind not in DEVICE_KINDS:
        raise ValueError(f"device kind {device_kind!r}: expected one of {', '.join(DEVICE_KINDS)}")
    import torch
    import triton

    on_cuda = device_kind == "cuda"
    if on_cuda and not torch.cuda.is_available():
        raise RuntimeError("device kind 'cuda': torch sees no CUDA device on this host")
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": (torch.version.cuda or "") if on_cuda else "",
        "driver": nvidia_driver_version() if on_cuda else "",
        "device": device_name(device_kind),
    }
