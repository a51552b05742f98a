"""The header lines of the wrong-kernel corpus (``# Must fail: ...``) and of its honest twins
(``# Claims: ...``), read without importing the worker: ``bench/verdict_counts.py`` lays the
corpus out for any worker tree, an older one included, and ``wrong_corpus.py`` checks the names
they hold against the worker's vocabulary."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

_MUST_FAIL = re.compile(r"^# Must fail: (\w+)(?:/(\w+))? in (\w+) \(([\w, ]+)\)$", re.MULTILINE)
_CLAIMS = re.compile(r"^# Claims: ([\w, ]+)$", re.MULTILINE)


class MustFail(NamedTuple):
    outcome: str
    check: str  # "" where the header names none
    sample_set: str
    dtypes: tuple[str, ...]


def _header(pattern: re.Pattern, path: Path) -> re.Match:
    match = pattern.search(path.read_text())
    if match is None:
        raise ValueError(f"{path}: no header line matching {pattern.pattern!r}")
    return match


def _listed(text: str) -> tuple[str, ...]:
    return tuple(dtype.strip() for dtype in text.split(","))


def must_fail(path: Path) -> MustFail:
    """A wrong kernel's header: what it must fail with, in which set, on which dtypes."""
    outcome, check, sample_set, dtypes = _header(_MUST_FAIL, path).groups()
    return MustFail(outcome, check or "", sample_set, _listed(dtypes))


def claims(path: Path) -> tuple[str, ...]:
    """The dtypes an honest twin claims."""
    return _listed(_header(_CLAIMS, path).group(1))
