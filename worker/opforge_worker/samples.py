"""Samples as the judge uses them, prepared once per (operator, variant, dtype, seed, set).

The generation loop tests the same operator for every attempt a model makes, and re-validation
tests the same library again: on a GPU, generating the samples and their CPU references cost more
than the candidate's calls. A prepared sample holds the inputs encoded for the candidate process
(immutable bytes, decoded into fresh tensors in the candidate process for every call) and the
reference, computed on copies of the inputs (with its precise twin for a low-precision dtype,
judge.py): nothing the candidate does reaches the cached tensors, and the judge's checks only
read them. The samples come from ``sample_sets.generate``: each set is cached on its own, so that
a test drawing fewer sets generates no others.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch

from opforge_worker import model_sets, sample_sets
from opforge_worker import opinfo as opinfo_db
from opforge_worker.checks import tensor_leaves
from opforge_worker.judge import Reference, ReferenceError, compute_reference, describe_sample
from opforge_worker.transport import encode_inputs

#: What the process-wide cache may hold: samples and references of a few hundred operators.
DEFAULT_CACHE_BYTES = 1 << 30


@dataclass(frozen=True)
class PreparedSample:
    sample_set: str  # the name of its set (sample_sets.SETS)
    index: int  # its index within the set
    name: str  # the SampleInput's name, "" when it has none
    description: str  # its arguments: shapes, dtypes, strides, values of the small ones
    #: Shapes and dtypes of its tensors, names of its keyword arguments: fresh values replay a
    #: sample only when the layout is the same.
    layout: tuple
    inputs: bytes  # transport.encode_inputs of the sample's args and kwargs
    reference: Reference | None
    reference_error: str  # why the CPU reference failed, when it did
    #: What a numerics sample's values went through ("scaled by 1e4"), "" for other sets' samples.
    transformation: str = ""

    def label(self, fresh_values: bool = False) -> str:
        """The sample for feedback, where it came from first: "extremal #2 (nan/inf mix):
        (Tensor...)", with ", fresh values" after the name for its replay."""
        name = f" ({self.name})" if self.name else ""
        replay = ", fresh values" if fresh_values else ""
        return f"{self.sample_set} #{self.index}{name}{replay}: {self.description}"

    @property
    def nbytes(self) -> int:
        """About what it holds: the encoded inputs, the sample's tensors and the reference's,
        with the reference's exact reply (computed on the first call judged against it)."""
        if self.reference is None:
            return 2 * len(self.inputs)
        precise = self.reference.precise
        held = tensor_leaves(
            (
                self.reference.expected,
                self.reference.inputs_after,
                (precise.expected, precise.inputs_after) if precise else None,
            )
        )
        return (
            2 * len(self.inputs)
            + sum(tensor.nbytes for tensor in held)
            + self.reference.exact_reply_nbytes
        )


def prepare(
    opinfo, sample, sample_set: str, index: int, dtype: torch.dtype | None = None
) -> PreparedSample:
    """``sample``, the ``index``-th of ``sample_set``, prepared for the candidate process, with
    its reference for the tested ``dtype`` (with a precise twin where ``judge.PRECISE_DTYPES``
    gives it one)."""
    arguments = [sample.input, *sample.args]
    kwargs = dict(sample.kwargs)
    leaves = tensor_leaves((arguments, kwargs))
    transformation, atol_scale = sample_sets.numerics_of(sample)
    try:
        # A numerics sample's zeros are underflows: their sign is no part of its test.
        reference = compute_reference(
            opinfo, sample, dtype, atol_scale, zero_signs=not transformation
        )
        error = ""
    except ReferenceError as failure:
        reference, error = None, str(failure)
    return PreparedSample(
        sample_set=sample_set,
        index=index,
        name=sample.name or "",
        description=describe_sample(sample),
        layout=(tuple((tuple(t.shape), t.dtype) for t in leaves), tuple(kwargs)),
        inputs=encode_inputs({"args": arguments, "kwargs": kwargs}),
        reference=reference,
        reference_error=error,
        transformation=transformation,
    )


class SampleCache:
    """Prepared samples by (operator, variant, dtype, seed, set), least recently used evicted first
    once they hold more than ``max_bytes``. Thread-safe: a worker's slots share one.

    With a ``store`` (``sample_store.SampleStore``), samples missing here are read from disk
    before they are generated, generated ones are written there, and operators are looked up in
    its metadata (``find``): the OpInfo database is imported only to generate what the store
    lacks."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES, store=None):
        self.max_bytes = max_bytes
        self.store = store
        self._entries: OrderedDict[tuple, tuple[list[PreparedSample], int]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()
        # Sample generation seeds the process's global random generators.
        self._generating = threading.Lock()

    def find(self, name: str, variant: str = ""):
        """The operator ``name`` with ``variant``, or None: the store's metadata
        (``sample_store.OpMeta``) where there is a store, else the OpInfo."""
        if self.store is None:
            return opinfo_db.find_opinfo(name, variant)
        try:
            return self.store.ops.get((name, variant))
        except TypeError:  # unhashable: a request's variant may be any JSON value
            return None

    def variants(self) -> dict[str, tuple[str, ...]]:
        """Each operator's variants' names, in op_db order."""
        found: dict[str, list[str]] = {}
        keys = (
            self.store.ops
            if self.store is not None
            else ((op.name, op.variant_test_name) for op in opinfo_db.load_op_db())
        )
        for name, variant in keys:
            variants = found.setdefault(name, [])
            if variant not in variants:
                variants.append(variant)
        return {name: tuple(variants) for name, variants in found.items()}

    def samples(self, op, dtype: torch.dtype, seed: int, sample_set: str) -> list[PreparedSample]:
        """The prepared samples of one set of ``op`` (an OpInfo, or what ``find`` returns);
        whatever generating them raises is raised, never cached."""
        key = (op.name, op.variant_test_name, dtype, seed, sample_set)
        # A model set is its capture's file, which the store's key does not cover.
        store = self.store
        if model_sets.is_model_set(sample_set):
            key += model_sets.version(sample_set, op.name, op.variant_test_name)
            store = None
        found = self._get(key)
        if found is not None:
            return found
        with self._generating:
            found = self._get(key)
            if found is not None:
                return found
            prepared = store.load(op, dtype, seed, sample_set) if store else None
            if prepared is None:
                opinfo = (
                    op
                    if hasattr(op, "sample_inputs")
                    else opinfo_db.find_opinfo(op.name, op.variant_test_name)
                )
                prepared = [
                    prepare(opinfo, sample, sample_set, index, dtype)
                    for index, sample in enumerate(
                        sample_sets.generate(opinfo, sample_set, dtype, seed)
                    )
                ]
                if store is not None:
                    store.save(op, dtype, seed, sample_set, prepared)
        self._put(key, prepared)
        return prepared

    def _get(self, key: tuple) -> list[PreparedSample] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def _put(self, key: tuple, prepared: list[PreparedSample]) -> None:
        size = sum(sample.nbytes for sample in prepared)
        if size > self.max_bytes:
            return
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = (prepared, size)
            self._held += size
            while self._held > self.max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._held -= evicted

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


#: The judge process's cache, shared by every Harness in it.
CACHE = SampleCache()
