"""opforge device worker: the Python side of opforge (catalog, linter, validation harness)."""

__version__ = "0.1.0"
