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


#: neg that reads its input as if it were contiguous: right on OpInfo's samples, wrong on a strided
#: slice (the one Llama's rotary embedding negates).
FLAT_NEG = (
    source("honest/neg")
    .replace("    x = input.contiguous()\n", "    x = input\n")
    .replace("torch.empty_like(x)", "torch.empty(x.shape, dtype=x.dtype, device=x.device)")
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
