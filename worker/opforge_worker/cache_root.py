"""Where the worker keeps what outlives a process (catalog, compiled kernels, prepared samples).

A module of its own, importing nothing heavy: ``validate`` names the compile store to the
candidate process it starts before the judge imports torch.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$OPFORGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/opforge``, else ``~/.cache/opforge``."""
    named = os.environ.get("OPFORGE_CACHE_DIR")
    if named:
        return Path(named)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "opforge"
