"""The data the worker ships in its package (opforge_worker/data/, pyproject's package-data):
linter profiles, tolerances.yaml, sample_sets.yaml, catalog.yaml. Found through the package, an
installed worker reads them wherever it runs; the daemon reads none of them.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def data_path(relative: str) -> Path:
    """``relative`` under opforge_worker/data/."""
    # The package is installed as files (a wheel or a checkout, never a zip), where a resource is
    # a path.
    return Path(str(files("opforge_worker").joinpath("data", relative)))
