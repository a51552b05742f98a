"""OpInfo lookup and deterministic sample generation, shared by the catalog and the harness.

PyTorch's OpInfo database (``torch.testing._internal.common_methods_invocations.op_db``) is the
source of truth for what an operator is and which inputs it must handle. Importing it takes a few
seconds, so it is loaded once per process.
"""

from __future__ import annotations

import contextlib
import functools
import random

import numpy as np
import torch

from opforge_worker import contract

#: Wire names of the dtypes opforge validates (the contract's), and the torch dtype each stands
#: for: torch names them alike.
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in contract.DTYPES}


def dtype_from_name(name: str) -> torch.dtype:
    """The torch dtype for a wire name; KeyError naming the dtype when unknown."""
    try:
        return DTYPES[name]
    except KeyError:
        raise KeyError(f"unknown dtype {name!r} (known: {', '.join(DTYPES)})") from None


def class_names(opinfo) -> frozenset[str]:
    """The names of ``opinfo``'s classes (``UnaryUfuncInfo``, ``OpInfo``...), by which data files
    choose rules (layout contract, timing ladders, value-safe sets): its type's, or for the
    stand-in of one that a judge works with (``sample_store.OpMeta``), those recorded of the
    OpInfo it stands for. A stand-in's own type names no OpInfo class: read as the OpInfo's, it
    would silently exempt every operator from every class rule."""
    recorded = getattr(opinfo, "opinfo_classes", None)
    if recorded is not None:
        return frozenset(recorded)
    return frozenset(cls.__name__ for cls in type(opinfo).__mro__ if cls is not object)


@functools.cache
def load_op_db() -> tuple:
    """Every OpInfo of the installed torch, in op_db order."""
    from torch.testing._internal.common_methods_invocations import op_db

    return tuple(op_db)


@functools.cache
def _by_name_and_variant() -> dict:
    """Each OpInfo by (name, variant_test_name), the first of op_db when two share them: a scan
    of op_db's several hundred OpInfos took a few tenths of a millisecond for each test."""
    found = {}
    for opinfo in load_op_db():
        found.setdefault((opinfo.name, opinfo.variant_test_name), opinfo)
    return found


def find_opinfo(name: str, variant: str = ""):
    """The OpInfo named ``name`` with ``variant_test_name == variant``, or None."""
    try:
        return _by_name_and_variant().get((name, variant))
    except TypeError:  # unhashable: a request's variant may be any JSON value, naming no OpInfo
        return None


@contextlib.contextmanager
def seeded(seed: int):
    """Torch's, Python's and numpy's generators seeded with ``seed`` inside, as they were after.

    Sample generators draw from all three; the caller's random streams are left untouched.
    """
    python_state = random.getstate()
    numpy_state = np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed % 2**32)
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def samples_for(opinfo, device: str, dtype: torch.dtype, seed: int) -> list:
    """The OpInfo's sample inputs for ``dtype`` on ``device``: the same for the same seed,
    other values (same shapes) for another seed."""
    with seeded(seed):
        # set_seed=False: OpInfo would otherwise reseed every sample from a fixed seed,
        # making the request's seed meaningless.
        return list(opinfo.sample_inputs(device, dtype, requires_grad=False, set_seed=False))
