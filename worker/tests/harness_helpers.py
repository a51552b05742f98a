"""Shared by the test_harness*.py suites: the candidate corpus and requests built from it."""

import os
from pathlib import Path

from opforge_worker.sample_sets import SAMPLE_INPUTS

CORPUS = Path(__file__).parent / "corpus"
#: The device the harness suites run on: the interpreter in CI; on a GPU host,
#: ``OPFORGE_HARNESS_DEVICE=cuda pytest tests/test_harness_*.py`` runs the same corpus on CUDA.
DEVICE = os.environ.get("OPFORGE_HARNESS_DEVICE", "interpreter")
#: Overrides of a request for tests whose counts and indices are those of OpInfo's own samples:
#: the generated sets would add theirs.
OPINFO_SAMPLES_ONLY = {"sample_sets": [SAMPLE_INPUTS]}


def source(name: str) -> str:
    """The candidate at tests/corpus/<name>.py."""
    return (CORPUS / f"{name}.py").read_text()


def edited(text: str, *edits: tuple[str, str]) -> str:
    """``text`` with each (old, new) replaced; an edit that matches nothing is an error, so a
    derived kernel never silently stays its original."""
    for old, new in edits:
        if old not in text:
            raise ValueError(f"edit does not apply: {old!r}")
        text = text.replace(old, new)
    return text


#: neg that reads its input as if it were contiguous: right on OpInfo's samples, wrong on a strided
#: slice (the one Llama's rotary embedding negates).
FLAT_NEG = edited(
    source("honest/neg"),
    (
        "    # ATen's layout: a dense input's strides (read in place), else contiguous"
        " (read from a copy).\n",
        "",
    ),
    (
        "    out = torch.empty_like(input)\n",
        "    out = torch.empty(input.shape, dtype=input.dtype, device=input.device)\n",
    ),
    (
        "    x = (\n"
        "        input\n"
        "        if input.stride() == out.stride()\n"
        "        else torch.empty_like(out, dtype=input.dtype).copy_(input)\n"
        "    )\n",
        "    x = input\n",
    ),
)


def request(name: str, op: str, dtypes=("float32",), wrapper=None, **overrides) -> dict:
    """A test request for the corpus candidate ``name``, its wrapper named after the op."""
    return {
        "op": op,
        "variant": "",
        "source": source(name),
        "wrapper": wrapper or op,
        "dtypes": list(dtypes),
        "mode": "first_failure",
        "seed": 0,
        "timeout_s": 60.0,
        **overrides,
    }


def opinfo_counts(run: int, passed: int, outcome: str) -> dict:
    """The ``per_dtype`` entry of a test of ``OPINFO_SAMPLES_ONLY``."""
    sets = {SAMPLE_INPUTS: {"run": run, "passed": passed}}
    return {"run": run, "passed": passed, "outcome": outcome, "sets": sets}
