"""The sets of samples a test draws, by name: OpInfo's own and the ones opforge generates.

OpInfo's ``sample_inputs`` are thin (often one small, contiguous, finite tensor per dtype), so a
kernel that drops NaN, overflows, indexes a strided input as if it were flat or routes integers
through float32 passes them. A test therefore also draws:

- ``reference_inputs``: OpInfo's larger set, where the OpInfo defines one;
- ``extremal``: NaN, infinities, -0.0, the largest finite, the smallest normal, subnormals,
  overflow-prone magnitudes; integer limits and values beyond float32's exact range;
- ``layouts``: strided slices, transposed, permuted, broadcast-expanded and offset inputs,
  channels_last;
- ``sizes``: one element, 0-dim, empty, one past a power of two, several blocks per grid dim.

``generate(opinfo, name, dtype, seed)`` is deterministic for a seed. For ``seed + 1`` it returns
the same samples with fresh values: the same count, order, shapes, strides and keyword arguments
(the harness calls each sample a second time with them).
"""

from __future__ import annotations

import torch

from opforge_worker import opinfo as opinfo_db

SAMPLE_INPUTS = "sample_inputs"
REFERENCE_INPUTS = "reference_inputs"
EXTREMAL = "extremal"
LAYOUTS = "layouts"
SIZES = "sizes"

#: Every set, in the order a test runs them: the cheapest and most telling first.
SETS = (SAMPLE_INPUTS, REFERENCE_INPUTS, EXTREMAL, LAYOUTS, SIZES)


def check_names(names) -> tuple[str, ...]:
    """``names`` as a tuple in ``SETS`` order; ValueError naming any unknown set."""
    unknown = [name for name in names if name not in SETS]
    if unknown:
        raise ValueError(f"unknown sample sets {unknown} (known: {', '.join(SETS)})")
    return tuple(name for name in SETS if name in names)


def generate(opinfo, name: str, dtype: torch.dtype, seed: int) -> list:
    """The samples (``SampleInput`` on the CPU) that set ``name`` gives ``opinfo`` for ``dtype``."""
    if name == SAMPLE_INPUTS:
        return opinfo_db.samples_for(opinfo, "cpu", dtype, seed)
    if name in SETS:
        return []  # generated sets: being built (issue "Trust the PASS", section 1)
    raise ValueError(f"unknown sample set {name!r} (known: {', '.join(SETS)})")
