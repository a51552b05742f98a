"""The kinds of ATen op a wrapper may run besides its kernels (data/aten_kinds.yaml), read by the
dynamic fallback check (checks.py) and by the linter's profiles (linter/profile.py): one list.
"""

from __future__ import annotations

import functools

import yaml

from opforge_worker.contract import FailureCheck
from opforge_worker.package_data import data_path

#: The kind of every ATen op not listed: it computes, so a wrapper running it is a fallback.
COMPUTE = "compute"
#: The check, and the linter rule, that reports a wrapper computing with torch instead of a
#: kernel (the harness's outcome for it is cheat_detected).
FALLBACK_CHECK = FailureCheck.FALLBACK
#: Kinds whose names host code may use: they allocate, fill, view, copy or read metadata.
HOST_KINDS = ("empty", "fill", "view", "copy", "metadata")


@functools.cache
def _data() -> dict:
    return yaml.safe_load(data_path("aten_kinds.yaml").read_text(encoding="utf-8"))


@functools.cache
def kinds() -> dict[str, frozenset[str]]:
    """Kind -> ATen names (overload packets without a trailing underscore)."""
    return {kind: frozenset(names) for kind, names in _data()["kinds"].items()}


@functools.cache
def uninitialized() -> frozenset[str]:
    """Allocations whose memory holds whatever was there before."""
    return frozenset(_data()["uninitialized"])


def aten_kind(name: str) -> str:
    """``empty``, ``fill``, ``view``, ``copy``, ``metadata``, ``host_read`` or ``compute``."""
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return next((kind for kind, names in kinds().items() if name in names), COMPUTE)


def host_names() -> frozenset[str]:
    """The public names of the host kinds: torch functions, tensor methods and attributes a
    wrapper may use without computing."""
    every = kinds()
    return frozenset(
        name for kind in HOST_KINDS for name in every[kind] if not name.startswith("_")
    )


def view_names() -> frozenset[str]:
    """Public view names, some of them tensor attributes (``x.real``, ``x.mT``)."""
    return frozenset(name for name in kinds()["view"] if not name.startswith("_"))
