"""The corpus of wrong-but-plausible kernels and their honest twins, read from their headers.

``tests/corpus/wrong/<op>.<defect>.py`` is a candidate with one defect; its header says what it
must fail with on the dtypes where the defect shows::

    # Must fail: accuracy_error in extremal (float32)

or, where the outcome alone does not tell the defect's class, with the failure check too
(contract.FailureCheck)::

    # Must fail: accuracy_error/layout in layouts (float32)

``tests/corpus/wrong_twins/<op>.<defect>.py`` fixes exactly that defect and must pass every set
on the dtypes its header claims::

    # Claims: bfloat16, float16, float32, int32, int64

The wrapper is found as ``opforge_worker validate`` finds it (``validate.default_wrapper``).
"""

from __future__ import annotations

from dataclasses import dataclass

import corpus_headers
from harness_helpers import CORPUS

from opforge_worker import sample_sets
from opforge_worker.contract import FAILURE_CHECKS
from opforge_worker.results import OUTCOMES
from opforge_worker.validate import TARGET_DTYPES, default_wrapper

WRONG = CORPUS / "wrong"
TWINS = CORPUS / "wrong_twins"


@dataclass(frozen=True)
class Pair:
    name: str  # <op>.<defect>: the file name in both folders, without .py
    op: str
    wrapper: str
    outcome: str  # what the wrong one must fail with
    check: str  # the failure check it must fail, "" where the header names none
    sample_set: str  # the set whose samples must catch it
    wrong_dtypes: tuple[str, ...]  # where the defect shows
    twin_dtypes: tuple[str, ...]  # every dtype the twin claims

    @property
    def wrong(self) -> str:
        """The wrong candidate's corpus name (harness_helpers.source)."""
        return f"{WRONG.name}/{self.name}"

    @property
    def twin(self) -> str:
        """The honest twin's corpus name (harness_helpers.source)."""
        return f"{TWINS.name}/{self.name}"


def _dtypes(dtypes: tuple[str, ...], where: str) -> tuple[str, ...]:
    unknown = [dtype for dtype in dtypes if dtype not in TARGET_DTYPES]
    if unknown:
        raise ValueError(f"{where}: unknown dtypes {unknown} (known: {', '.join(TARGET_DTYPES)})")
    return dtypes


def load_pair(name: str) -> Pair:
    """The pair ``name``; ValueError naming the file and line when a header is missing or bad."""
    wrong_path, twin_path = WRONG / f"{name}.py", TWINS / f"{name}.py"
    if not twin_path.exists():
        raise ValueError(f"{wrong_path}: no honest twin at {twin_path}")
    outcome, check, sample_set, wrong_dtypes = corpus_headers.must_fail(wrong_path)
    if outcome not in OUTCOMES or outcome == "pass":
        raise ValueError(f"{wrong_path}: {outcome!r} is not a failing outcome of {OUTCOMES}")
    if check and check not in FAILURE_CHECKS:
        raise ValueError(f"{wrong_path}: {check!r} is not a failure check of {FAILURE_CHECKS}")
    sample_sets.check_names([sample_set])
    op = name.rsplit(".", 1)[0]
    return Pair(
        name=name,
        op=op,
        wrapper=default_wrapper(op, wrong_path.read_text()),
        outcome=outcome,
        check=check,
        sample_set=sample_set,
        wrong_dtypes=_dtypes(wrong_dtypes, str(wrong_path)),
        twin_dtypes=_dtypes(corpus_headers.claims(twin_path), str(twin_path)),
    )


def pairs() -> list[Pair]:
    """Every pair of the corpus, by name."""
    return [load_pair(path.stem) for path in sorted(WRONG.glob("*.py"))]
