"""The toolchain a worker runs on, and its fingerprint (messages/PROTOCOL.md, `hello`).

The daemon keys validations by the fingerprint: a new Triton or torch drop on a host changes it, and
the library is re-validated there. The fingerprint is the first 16 hex digits of sha256 over the
canonical JSON of the toolchain map: sorted keys, no spaces, UTF-8 (non-ASCII kept, not escaped).
"""

from __future__ import annotations

import hashlib
import json
import platform

from opforge_worker import device_kinds

#: The entries a device kind contributes (device_kinds.DeviceKind.toolchain).
DEVICE_KEYS = ("cuda", "driver", "device")
TOOLCHAIN_KEYS = ("python", "torch", "triton", *DEVICE_KEYS)


def fingerprint(toolchain: dict[str, str]) -> str:
    canonical = json.dumps(toolchain, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def collect(device_kind: str) -> dict[str, str]:
    """The toolchain map for `device_kind` (a device_kinds.KINDS name or NO_DEVICE)."""
    device = (
        dict.fromkeys(DEVICE_KEYS, "")
        if device_kind == device_kinds.NO_DEVICE
        else device_kinds.lookup(device_kind).toolchain()
    )
    import torch
    import triton

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        **device,
    }
