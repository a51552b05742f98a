"""The sets of samples a test draws, by name: OpInfo's own and the ones opforge generates.

OpInfo's ``sample_inputs`` are thin (often one small, contiguous, finite tensor per dtype), so a
kernel that drops NaN, overflows, indexes a strided input as if it were flat or routes integers
through float32 passes them. A test therefore also draws:

- ``reference_inputs``: OpInfo's larger set, where the OpInfo defines one (not its fallback to
  ``sample_inputs``), without the samples ``sample_inputs`` already gives, at most
  ``REFERENCE_MAX_SAMPLES`` of at most ``REFERENCE_MAX_BYTES`` each;
- ``extremal``: the ``EXTREMAL_BASES`` largest of the op's own samples, ``EXTREMAL_ROTATIONS``
  times each, with specials written over every other element and the last one: NaN,
  infinities, -0.0, the largest finite, the smallest normal, subnormals, overflow-prone
  magnitudes (no huge finite values in a reduction: whether their sum overflows depends on the
  order of operations); integer 0, -1, limits and values beyond float32's (and float64's) exact
  range. Only specials inside the op's domain (``UnaryUfuncInfo.domain``, open as OpInfo
  treats it; ``BinaryUfuncInfo``'s per-operand ``low``/``high``/``exclude_zero``). The specials
  cycle through every other element (and the last), so all of them reach the interior and the
  end of the tensor; each rotation starts the cycle one special later, so the first
  ``EXTREMAL_ROTATIONS`` specials (NaN, inf, -inf, -0.0; 0, -1 and the limits) each come first;
  a later operand cycles at a growing offset, so that pairs of specials meet (every pair where
  the tensors hold enough elements, see ``_with_specials``);
- ``layouts``: per layout, the largest of the op's own samples it applies to, every tensor the
  same values in other memory: a strided slice (step 2 in the last dim; the gaps hold NaN or
  the integer maximum, so reading them shows), transposed (last two dims), permuted (dims
  reversed), at a storage offset, channels_last (4-D; for a value-safe op without a 4-D sample,
  its tensors of the dtype tiled to ``CHANNELS_LAST_SHAPE``); and its tensors of the dtype
  broadcast-expanded along dim 0 (stride 0, the first slice repeated: other values, so only
  for value-safe ops);
- ``sizes``: the largest of the op's own samples whose tensors of the dtype all have the
  input's shape, those tensors resized with their values tiled: 0-dim, and with the input's
  number of dims one element, empty, one past a power of two (1025 in the last dim) and more
  than one block in every dim (each dim one past a power of two, ``SIZES_MAX_ELEMENTS`` at
  most).

Only data changes. Generated values and sizes go only to value-safe ops: the ufunc and
reduction OpInfo classes and the operators data/sample_sets.yaml lists; there they replace
tensors of the dtype under test only, so index tensors, sorted sequences and masks of other
dtypes stay OpInfo's. Layouts keep values and go to every op.

A generated sample is kept only when its CPU reference runs, and, for extremal values, gives
outputs of the unmodified sample's shapes (values that change an output's shape are no test of
values). That decision is made once per operator, set and dtype on the samples of
``DECISION_SEED``, so ``generate(..., seed + 1)`` returns the same samples as ``seed`` with fresh
values: the same count, order, shapes, strides, storage offsets and keyword arguments (the
harness calls each sample a second time with them). data/sample_sets.yaml also takes a set
away from an operator, with the reason.

The integer minimum goes only to ops of one operand (not binary ufuncs, whose other operand may
be a Python -1): INT64_MIN / -1 kills the CPU reference's process with SIGFPE.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import warnings
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
import yaml
from torch.utils import _pytree as pytree

from opforge_worker import model_sets
from opforge_worker import opinfo as opinfo_db
from opforge_worker.contract import SampleSet
from opforge_worker.package_data import data_path

SAMPLE_INPUTS = SampleSet.SAMPLE_INPUTS.value
REFERENCE_INPUTS = SampleSet.REFERENCE_INPUTS.value
EXTREMAL = SampleSet.EXTREMAL.value
NUMERICS = SampleSet.NUMERICS.value
LAYOUTS = SampleSet.LAYOUTS.value
SIZES = SampleSet.SIZES.value

#: Every set, in the order a test runs them (the contract's order): the cheapest and most telling
#: first.
SETS = tuple(s.value for s in SampleSet)
#: The sets generated here (``sample_inputs`` is OpInfo's own).
GENERATED_SETS = SETS[1:]

DEFAULT_CONFIG = data_path("sample_sets.yaml")
#: The seed whose samples decide which generated samples an operator keeps, for every seed.
DECISION_SEED = 0
REFERENCE_MAX_SAMPLES = 8
REFERENCE_MAX_BYTES = 1 << 20
#: Samples per extremal base sample, each starting the cycle of specials one later.
EXTREMAL_ROTATIONS = 4
#: Base samples the extremal set writes specials over: the largest ones.
EXTREMAL_BASES = 2
#: Base samples the numerics set transforms: the largest ones.
NUMERICS_BASES = 1
#: The spread transformation lifts the largest 1/SPREAD_EVERY of a tensor's values: "a few
#: large entries" among the sample's own.
SPREAD_EVERY = 8
SIZES_MAX_ELEMENTS = 1 << 18
ONE_PAST_A_POWER_OF_TWO = 1025
STORAGE_OFFSET = 3
#: The shape a value-safe op's sample is tiled to for channels_last where it has no 4-D sample:
#: more than one channel and more than one pixel, so the layout differs from contiguous.
CHANNELS_LAST_SHAPE = (2, 3, 4, 5)

# OpInfo classes by name: importing them (torch.testing._internal) takes seconds, which a
# process that only checks set names should not pay.
UNARY_UFUNC = "UnaryUfuncInfo"
BINARY_UFUNC = "BinaryUfuncInfo"
REDUCTION = "ReductionOpInfo"
_VALUE_SAFE_CLASSES = (UNARY_UFUNC, BINARY_UFUNC, REDUCTION)


def check_names(names) -> tuple[str, ...]:
    """``names`` as a tuple in ``SETS`` order, then the model sets (``model:<name>``) in the
    order given; ValueError naming any unknown set."""
    unknown = [name for name in names if name not in SETS and not model_sets.is_model_set(name)]
    if unknown:
        raise ValueError(
            f"unknown sample sets {unknown} (known: {', '.join(SETS)}, {model_sets.PREFIX}<name>)"
        )
    models = tuple(dict.fromkeys(name for name in names if model_sets.is_model_set(name)))
    return tuple(name for name in SETS if name in names) + models


# -- configuration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class NumericsValues:
    """The numerics set's transformations of one dtype (data/sample_sets.yaml, ``numerics``):
    every value ``x`` of the dtype becomes ``scale * x``, ``x + offset``, or, for the largest
    ``1 / SPREAD_EVERY`` of a tensor's values, ``x + spread``."""

    scales: tuple[float, ...]
    offsets: tuple[float, ...]
    spreads: tuple[float, ...]


@dataclass(frozen=True)
class SampleSetsConfig:
    """data/sample_sets.yaml: operators (``name`` or ``name.variant``) with a reason each, and
    the numerics set's transformations per dtype."""

    #: Value-safe besides the ufunc and reduction classes: every tensor input of the dtype
    #: under test is data, read elementwise.
    value_safe: dict[str, str]
    #: Per generated set, the operators that do not get it.
    exclude: dict[str, dict[str, str]]
    #: Per floating dtype name, the numerics set's transformations; a dtype not listed gets none.
    numerics: dict[str, NumericsValues] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | str | None = None) -> SampleSetsConfig:
        path = Path(path or os.environ.get("OPFORGE_SAMPLE_SETS_CONFIG") or DEFAULT_CONFIG)
        try:
            raw = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as error:
            raise ValueError(f"sample sets config {path}: {error}") from None
        value_safe = raw.get("value_safe") or {}
        exclude = raw.get("exclude") or {}
        if not isinstance(value_safe, dict) or not isinstance(exclude, dict):
            raise ValueError(f"sample sets config {path}: value_safe and exclude must be maps")
        unknown = [name for name in exclude if name not in GENERATED_SETS]
        if unknown:
            raise ValueError(
                f"sample sets config {path}: exclude: unknown sets {unknown} "
                f"(known: {', '.join(GENERATED_SETS)})"
            )
        for section, entries in [("value_safe", value_safe)] + [
            (f"exclude.{name}", entries or {}) for name, entries in exclude.items()
        ]:
            if not isinstance(entries, dict) or not all(
                isinstance(reason, str) and reason for reason in entries.values()
            ):
                raise ValueError(f"sample sets config {path}: {section}: operator: reason, each")
        return cls(
            value_safe=dict(value_safe),
            exclude={name: dict(entries or {}) for name, entries in exclude.items()},
            numerics=_numerics_values(raw.get("numerics") or {}, path),
        )


def _numerics_values(raw, path: Path) -> dict[str, NumericsValues]:
    """The ``numerics`` section; ValueError naming the dtype and key that is wrong."""
    floating = [name for name, dtype in opinfo_db.DTYPES.items() if dtype.is_floating_point]
    if not isinstance(raw, dict) or not all(name in floating for name in raw):
        raise ValueError(
            f"sample sets config {path}: numerics: a map from dtype ({', '.join(floating)}) "
            "to its scales, offsets and spreads"
        )
    found = {}
    for dtype, entry in raw.items():
        keys = [item.name for item in fields(NumericsValues)]
        if not isinstance(entry, dict) or set(entry) - set(keys):
            raise ValueError(f"sample sets config {path}: numerics.{dtype}: keys {keys} only")
        values = {}
        for key in keys:
            listed = entry.get(key) or []
            if not isinstance(listed, list) or not all(
                isinstance(value, int | float) and math.isfinite(value) and value > 0
                for value in listed
            ):
                raise ValueError(
                    f"sample sets config {path}: numerics.{dtype}.{key}: a list of positive "
                    f"finite numbers, got {listed!r}"
                )
            values[key] = tuple(float(value) for value in listed)
        found[dtype] = NumericsValues(**values)
    return found


_config: SampleSetsConfig | None = None


def config() -> SampleSetsConfig:
    """The configuration, read on first use."""
    global _config
    if _config is None:
        _config = SampleSetsConfig.load()
    return _config


def _listed(opinfo, entries: dict[str, str]) -> bool:
    key = f"{opinfo.name}.{opinfo.variant_test_name}" if opinfo.variant_test_name else opinfo.name
    return key in entries or opinfo.name in entries


def is_value_safe(opinfo) -> bool:
    """Whether generated values and sizes may replace the op's tensors of the dtype under test."""
    return any(_is(opinfo, name) for name in _VALUE_SAFE_CLASSES) or _listed(
        opinfo, config().value_safe
    )


def _is(opinfo, class_name: str) -> bool:
    return class_name in opinfo_db.class_names(opinfo)


# -- generation -------------------------------------------------------------------------------


def generate(opinfo, name: str, dtype: torch.dtype, seed: int) -> list:
    """The samples (``SampleInput`` on the CPU) that set ``name`` gives ``opinfo`` for ``dtype``."""
    if name == SAMPLE_INPUTS:
        return opinfo_db.samples_for(opinfo, "cpu", dtype, seed)
    if model_sets.is_model_set(name):
        return model_sets.generate(opinfo, name, dtype, seed)
    if name not in SETS:
        raise ValueError(f"unknown sample set {name!r} (known: {', '.join(SETS)})")
    if _listed(opinfo, config().exclude.get(name, {})):
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # samples probe edge cases on purpose: noise
        candidates = _BUILDERS[name](opinfo, dtype, seed)
        kept = _kept(opinfo, name, dtype, seed, candidates)
    return [candidates[index].sample for index in kept]


@dataclass
class _Candidate:
    sample: object  # a SampleInput
    #: The unmodified sample whose output shapes an extremal sample must keep, or None.
    same_output_shapes_as: object | None = None
    #: False where the sample tests nothing it was made for: a numerics transformation that
    #: overflows the dtype or the reference (``_numerics_check``).
    meaningful: bool = True


_decisions: dict[tuple, tuple[int, ...]] = {}
_decisions_lock = threading.Lock()


def _kept(opinfo, name: str, dtype: torch.dtype, seed: int, candidates) -> tuple[int, ...]:
    """The indices of the valid candidates, as decided on ``DECISION_SEED``'s candidates: the
    same for every seed whose candidates have the same structure (which OpInfo's samples have)."""
    structure = tuple(_structure(candidate.sample) for candidate in candidates)
    key = (opinfo.name, opinfo.variant_test_name, name, dtype, structure)
    with _decisions_lock:
        decided = _decisions.get(key)
    if decided is not None:
        return decided
    deciding = candidates
    if seed != DECISION_SEED:
        deciding = _BUILDERS[name](opinfo, dtype, DECISION_SEED)
        if tuple(_structure(candidate.sample) for candidate in deciding) != structure:
            deciding = candidates  # OpInfo gave this seed other shapes: nothing to align with
    decided = tuple(index for index, candidate in enumerate(deciding) if _valid(opinfo, candidate))
    with _decisions_lock:
        _decisions[key] = decided
    return decided


def _structure(sample) -> tuple:
    def describe(value):
        if isinstance(value, torch.Tensor):
            return (value.dtype, tuple(value.shape), value.stride(), value.storage_offset())
        return type(value).__name__

    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return (sample.name, tuple(sample.kwargs), tuple(describe(leaf) for leaf in leaves))


def _valid(opinfo, candidate: _Candidate) -> bool:
    from opforge_worker.judge import ReferenceError, compute_reference  # imports triton: seconds

    if not candidate.meaningful:
        return False
    try:
        reference = compute_reference(opinfo, candidate.sample)
        if candidate.same_output_shapes_as is None:
            return True
        unmodified = compute_reference(opinfo, candidate.same_output_shapes_as)
    except ReferenceError:
        return False
    except Exception:  # noqa: BLE001 (a reference the judge cannot hold, e.g. a sparse tensor)
        return False
    return _output_shapes(reference.expected) == _output_shapes(unmodified.expected)


def _output_shapes(expected) -> list:
    return [
        (tuple(leaf.shape) if isinstance(leaf, torch.Tensor) else None)
        for leaf in pytree.tree_leaves(expected)
    ]


def _replace_tensors(sample, name: str, replace):
    """``sample`` with each tensor ``t`` replaced by ``replace(t, operand)``, ``operand`` its
    position among the sample's tensors."""
    operands = iter(range(1 << 30))

    def each(value):
        return replace(value, next(operands)) if isinstance(value, torch.Tensor) else value

    sample_input, args, kwargs = pytree.tree_map(each, (sample.input, sample.args, sample.kwargs))
    return type(sample)(sample_input, args=tuple(args), kwargs=dict(kwargs), name=name)


def _tensors(sample) -> list[torch.Tensor]:
    return [
        leaf
        for leaf in pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
        if isinstance(leaf, torch.Tensor)
    ]


def _elements(sample, dtype: torch.dtype) -> int:
    return sum(tensor.numel() for tensor in _tensors(sample) if tensor.dtype == dtype)


def _largest(samples, dtype: torch.dtype, count: int, eligible) -> list[int]:
    """The indices of up to ``count`` eligible samples with the most elements of ``dtype``,
    earlier first on ties, in sample order."""
    indices = [index for index, sample in enumerate(samples) if eligible(sample)]
    indices.sort(key=lambda index: -_elements(samples[index], dtype))
    return sorted(indices[:count])


# -- reference_inputs -------------------------------------------------------------------------


def _reference_inputs(opinfo, dtype: torch.dtype, seed: int) -> list[_Candidate]:
    if opinfo.reference_inputs_func is None:
        return []  # OpInfo would fall back to sample_inputs: that set runs them already
    already = Counter(_signature(sample) for sample in _sample_inputs(opinfo, dtype, seed))
    with opinfo_db.seeded(seed):
        references = opinfo.reference_inputs("cpu", dtype, requires_grad=False, set_seed=False)
        candidates = []
        for index, sample in enumerate(references):
            signature = _signature(sample)
            if already[signature]:
                already[signature] -= 1
                continue
            if sum(tensor.nbytes for tensor in _tensors(sample)) > REFERENCE_MAX_BYTES:
                continue
            sample.name = f"reference_inputs: #{index}"
            candidates.append(_Candidate(sample))
            if len(candidates) == REFERENCE_MAX_SAMPLES:
                break
    return candidates


def _sample_inputs(opinfo, dtype, seed) -> list:
    return opinfo_db.samples_for(opinfo, "cpu", dtype, seed)


def _signature(sample) -> tuple:
    """What a sample is, its values aside: reference_inputs often begin with sample_inputs."""
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return (
        tuple(sample.kwargs),
        tuple(
            (leaf.dtype, tuple(leaf.shape), leaf.stride())
            if isinstance(leaf, torch.Tensor)
            else type(leaf).__name__
            for leaf in leaves
        ),
    )


# -- extremal ---------------------------------------------------------------------------------


def float_specials(dtype: torch.dtype, reduction: bool) -> list[tuple[str, float]]:
    """(label, value) of the special floats of ``dtype``. A reduction gets no huge finite
    values: whether their sum or product overflows depends on the order of the operations."""
    info = torch.finfo(dtype)
    tiny = info.smallest_normal
    specials = [
        ("nan", math.nan),
        ("inf", math.inf),
        ("-inf", -math.inf),
        ("-0.0", -0.0),
        # +0.0 beside it: an operator that maps +0.0 to -0.0 (neg) is tested for that sign.
        ("+0.0", 0.0),
        ("smallest normal", tiny),
        ("-smallest normal", -tiny),
        ("subnormal", tiny / 2),
        ("-smallest subnormal", -tiny * info.eps),
    ]
    if reduction:
        return specials
    specials += [("largest finite", info.max), ("-largest finite", -info.max)]
    # Where exp(2x) and friends overflow and naive formulas turn into inf/inf.
    magnitudes = {torch.float16: (6, 9, 11), torch.float64: (20, 90, 400, 750)}.get(
        dtype, (20, 45, 90)
    )
    return specials + [
        (label, value)
        for magnitude in magnitudes
        for label, value in ((str(magnitude), magnitude), (f"-{magnitude}", -magnitude))
    ]


def int_specials(dtype: torch.dtype, with_min: bool) -> list[tuple[str, int]]:
    """(label, value) of the special integers of ``dtype``: 0, -1, its limits (the minimum only
    ``with_min``), values that float32 (and, for int64, float64) cannot hold exactly."""
    info = torch.iinfo(dtype)
    beyond_float32 = 2**24 + 1
    specials = [
        ("0", 0),
        ("-1", -1),
        ("max", info.max),
        ("2^24+1", beyond_float32),
        ("-(2^24+1)", -beyond_float32),
        ("2^24+3", beyond_float32 + 2),
    ]
    if with_min:
        specials.insert(2, ("min", info.min))
    if dtype == torch.int64:
        specials += [("2^53+1", 2**53 + 1), ("-(2^53+1)", -(2**53 + 1))]
    return specials


def _domain(opinfo, operand: int):
    """(low, high, open, no_zero) bounds the op's values must keep for ``operand``."""
    if _is(opinfo, UNARY_UFUNC) and operand == 0:
        low, high = opinfo.domain
        return low, high, True, False
    if _is(opinfo, BINARY_UFUNC) and operand < 2:
        bounds = (opinfo.lhs_make_tensor_kwargs, opinfo.rhs_make_tensor_kwargs)[operand] or {}
        return bounds.get("low"), bounds.get("high"), False, bool(bounds.get("exclude_zero"))
    return None, None, False, False


def _in_domain(value, domain) -> bool:
    low, high, open_bounds, no_zero = domain
    if math.isnan(value):
        return True
    if no_zero and value == 0:
        return False
    if low is not None and (value <= low if open_bounds else value < low):
        return False
    return high is None or (value < high if open_bounds else value <= high)


def _specials(opinfo, dtype: torch.dtype, operand: int, alone: bool) -> list[tuple[str, float]]:
    """The specials for ``operand`` (its position among the sample's tensors of ``dtype``);
    ``alone``: it is the op's only operand, so the integer minimum cannot meet a -1 divisor."""
    if dtype.is_floating_point:
        candidates = float_specials(dtype, reduction=_is(opinfo, REDUCTION))
    else:
        candidates = int_specials(dtype, with_min=alone)
    domain = _domain(opinfo, operand)
    return [(label, value) for label, value in candidates if _in_domain(value, domain)]


def _with_specials(tensor: torch.Tensor, specials, operand: int, rotation: int) -> torch.Tensor:
    """``tensor``'s values (same layout, a copy) with specials at every other element and the
    last. Slot ``j`` (of ``m``) holds special ``(j + rotation + operand * offset) % n``, offset
    ``j // n + rotation * ceil(m / n)``: operand 0 cycles through the specials, a later operand
    through them at another offset for each cycle and rotation, so that pairs meet (all of them
    where ``EXTREMAL_ROTATIONS * m >= n * n``)."""
    flat = tensor.reshape(-1).clone()
    count, n = flat.numel(), len(specials)
    positions = list(range(0, count, 2))
    if count > 1 and positions[-1] != count - 1:
        positions.append(count - 1)
    values = torch.tensor([value for _, value in specials], dtype=tensor.dtype)
    slots = torch.arange(len(positions))
    offsets = slots // n + rotation * -(-len(positions) // n)
    flat[torch.tensor(positions, dtype=torch.long)] = values[
        (slots + rotation + operand * offsets) % n
    ]
    result = tensor.clone()
    result.copy_(flat.view(tensor.shape))
    return result


def _extremal(opinfo, dtype: torch.dtype, seed: int) -> list[_Candidate]:
    if dtype == torch.bool or not is_value_safe(opinfo):
        return []
    bases = _sample_inputs(opinfo, dtype, seed)

    def eligible(sample):
        return any(t.dtype == dtype and t.numel() for t in _tensors(sample))

    candidates = []
    for base_index in _largest(bases, dtype, EXTREMAL_BASES, eligible):
        base = bases[base_index]
        tensors = _tensors(base)
        # Each tensor of the dtype by its position among all tensors: operand 0, 1, ...
        operands = {
            position: operand
            for operand, position in enumerate(
                position for position, t in enumerate(tensors) if t.dtype == dtype
            )
        }
        alone = len(operands) == 1 and not _is(opinfo, BINARY_UFUNC)
        specials = [_specials(opinfo, dtype, operand, alone) for operand in operands.values()]
        if not specials[0]:
            continue  # the domain leaves the first operand no special: nothing to name it by
        for rotation in range(EXTREMAL_ROTATIONS):
            first, _ = specials[0][rotation % len(specials[0])]
            name = f"extremal: {_labels(specials[0])} mix on sample #{base_index}"
            name += f", first element {first}"
            sample = _extremal_sample(base, name, operands, specials, rotation)
            candidates.append(_Candidate(sample, base))
    return candidates


def _extremal_sample(base, name: str, operands: dict, specials: list, rotation: int):
    """``base`` with specials over its operands (by tensor position), shifted for ``rotation``."""

    def replace(tensor, position):
        operand = operands.get(position)
        if operand is None or not tensor.numel() or not specials[operand]:
            return tensor
        return _with_specials(tensor, specials[operand], operand, rotation)

    return _replace_tensors(base, name, replace)


def _labels(specials) -> str:
    labels = [label for label, _ in specials]
    return "/".join(labels) if len(labels) <= 4 else "/".join(labels[:4]) + "/..."


# -- numerics ---------------------------------------------------------------------------------


def numerics_of(sample) -> tuple[str, float]:
    """(transformation, atol scale) of a numerics sample: what made it, for its failures, and
    the factor its tolerance's atol takes (``_numerics_check``); ("", 1.0) for any other."""
    return getattr(sample, "transformation", ""), getattr(sample, "atol_scale", 1.0)


@functools.cache
def _numerics_sample_class():
    # op_db's module, imported by whoever holds an OpInfo to transform the samples of.
    from torch.testing._internal.opinfo.core import SampleInput

    class NumericsSample(SampleInput):
        """A sample of the numerics set: its transformation and its tolerance's atol scale."""

        __slots__ = ("transformation", "atol_scale")

    return NumericsSample


def _power_label(value: float) -> str:
    """1e4 for 10000.0, 2.5e-3 for 0.0025: the magnitude a person reads at once."""
    mantissa, exponent = f"{value:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def _spread(values: torch.Tensor, spread: float) -> torch.Tensor:
    """``values`` (float64) with the largest ``1 / SPREAD_EVERY`` of its finite ones (at least
    one) lifted by ``spread``: an increasing map, so order and ties hold."""
    finite = values[values.isfinite()]
    if finite.numel() < 2:
        return values
    count = max(1, finite.numel() // SPREAD_EVERY)
    threshold = finite.topk(count).values[-1]
    return values + spread * (values >= threshold)


def _transformations(values: NumericsValues):
    """(label, map of a float64 tensor) of each transformation ``values`` names."""
    for scale in values.scales:
        yield f"scaled by {_power_label(scale)}", lambda t, scale=scale: t * scale
    for offset in values.offsets:
        yield f"offset {_power_label(offset)}", lambda t, offset=offset: t + offset
    for spread in values.spreads:
        label = f"spread: its largest 1/{SPREAD_EVERY} +{_power_label(spread)}"
        yield label, lambda t, spread=spread: _spread(t, spread)


def _numerics(opinfo, dtype: torch.dtype, seed: int) -> list[_Candidate]:
    values = config().numerics.get(str(dtype).removeprefix("torch."))
    if values is None:
        return []
    bases = _sample_inputs(opinfo, dtype, seed)

    def eligible(sample):
        tensors = _tensors(sample)
        return all(t.layout == torch.strided for t in tensors) and any(
            t.dtype == dtype and t.numel() for t in tensors
        )

    numerics_sample = _numerics_sample_class()
    candidates = []
    for base_index in _largest(bases, dtype, NUMERICS_BASES, eligible):
        base = bases[base_index]
        base_outputs = _wide_outputs(opinfo, base, dtype)
        for label, transform in _transformations(values):

            def replace(tensor, _operand, transform=transform):
                if tensor.dtype != dtype:
                    return tensor  # indices, masks, other dtypes: not the data under test
                return tensor.clone().copy_(transform(tensor.double()))

            name = f"{NUMERICS}: {label} (sample #{base_index})"
            derived = _replace_tensors(base, name, replace)
            sample = numerics_sample(
                derived.input, args=derived.args, kwargs=derived.kwargs, name=name
            )
            sample.transformation = label
            sample.atol_scale, meaningful = _numerics_check(
                opinfo, dtype, base, base_outputs, derived
            )
            candidates.append(_Candidate(sample, base, meaningful))
    return candidates


def _wide_outputs(opinfo, sample, dtype: torch.dtype) -> list[torch.Tensor] | None:
    """The tensors of the operator's result on ``sample`` with its tensors of ``dtype`` in
    float64, or None where it fails there."""
    from opforge_worker.judge import upcast  # imports triton: seconds

    arguments = upcast([sample.input, *sample.args], dtype, torch.float64)
    try:
        result = opinfo.op(*arguments, **upcast(dict(sample.kwargs), dtype, torch.float64))
    except Exception:  # noqa: BLE001 (the operator may not run in float64: no test of numerics)
        return None
    return [leaf for leaf in pytree.tree_leaves(result) if isinstance(leaf, torch.Tensor)]


def _magnitude(tensors) -> float:
    """The largest finite magnitude among the floating ``tensors``, 0.0 where there is none."""
    found = [
        t.detach().double().abs().nan_to_num(0.0, 0.0, 0.0).max()
        for t in tensors
        if t.dtype.is_floating_point and t.numel()
    ]
    return float(max(found)) if found else 0.0


def _numerics_check(opinfo, dtype, base, base_outputs, derived) -> tuple[float, bool]:
    """(atol scale, meaningful) of ``derived``, a numerics transformation of ``base``.

    Meaningful: it changes the sample's values, keeps its finite inputs finite in ``dtype``,
    and the operator's float64 result, rounded to ``dtype``, is finite wherever the base's is,
    in the same shapes; where the result holds integers (indices, counts), the transformation
    merges no two values (ties would make them ambiguous).

    The atol scale: an honest kernel's rounding error grows with the magnitude of what it
    computes with, its inputs (a normalization at an offset) and its outputs (a product of two
    scaled operands); atol scales with the larger of the two ratios to the base's (a scaled
    down sample gets a tighter atol, where log(1 + x) shows)."""
    before = [t for t in _tensors(base) if t.dtype == dtype]
    after = [t for t in _tensors(derived) if t.dtype == dtype]
    inputs = list(zip(after, before, strict=True))
    if all(torch.equal(a.nan_to_num(), b.nan_to_num()) for a, b in inputs):
        return 1.0, False  # nothing changed: all zeros scaled, say
    if any(bool((~a.isfinite() & b.isfinite()).any()) for a, b in inputs):
        return 1.0, False  # beyond the dtype's range
    outputs = _wide_outputs(opinfo, derived, dtype)
    if (
        outputs is None
        or base_outputs is None
        or [t.shape for t in outputs] != [t.shape for t in base_outputs]
        or any(t.layout != torch.strided for t in (*outputs, *base_outputs))
    ):
        return 1.0, False  # no float64 result, or none whose values can be read
    pairs = list(zip(outputs, base_outputs, strict=True))
    if any(_overflows(ours, theirs, dtype) for ours, theirs in pairs):
        return 1.0, False
    indices = any(not t.dtype.is_floating_point and t.dtype != torch.bool for t in base_outputs)
    if indices and any(a.unique().numel() < b.unique().numel() for a, b in inputs):
        return 1.0, False
    ratios = [
        new / old
        for new, old in (
            (_magnitude(after), _magnitude(before)),
            (_magnitude(outputs), _magnitude(base_outputs)),
        )
        if new > 0 and old > 0
    ]
    return (max(ratios) if ratios else 1.0), True


def _overflows(output: torch.Tensor, base_output: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether ``output`` (float64), rounded to ``dtype``, is not finite where the base's is."""
    if not output.dtype.is_floating_point:
        return False
    if output.dtype == torch.float64:
        output, base_output = output.to(dtype), base_output.to(dtype)
    return bool((~output.isfinite() & base_output.isfinite()).any())


# -- layouts ----------------------------------------------------------------------------------


def _poison(dtype: torch.dtype):
    """What a layout's unused memory holds: a kernel reading it gets a visibly wrong value."""
    if dtype.is_floating_point:
        return math.nan
    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).max


def _strided_slice(tensor: torch.Tensor) -> torch.Tensor | None:
    if tensor.dim() == 0 or tensor.numel() < 2:
        return None
    padded = (*tensor.shape[:-1], 2 * tensor.shape[-1])
    result = torch.full(padded, _poison(tensor.dtype), dtype=tensor.dtype)[..., ::2]
    return result.copy_(tensor)


def _transposed(tensor: torch.Tensor) -> torch.Tensor | None:
    if tensor.dim() < 2 or min(tensor.shape[-2:]) < 2:
        return None
    return tensor.transpose(-1, -2).contiguous().transpose(-1, -2)


def _permuted(tensor: torch.Tensor) -> torch.Tensor | None:
    if sum(size > 1 for size in tensor.shape) < 3:
        return None
    reverse = tuple(reversed(range(tensor.dim())))
    return tensor.permute(reverse).contiguous().permute(reverse)


def _offset(tensor: torch.Tensor) -> torch.Tensor | None:
    size = STORAGE_OFFSET + tensor.numel()
    storage = torch.full((size,), _poison(tensor.dtype), dtype=tensor.dtype)
    result = storage[STORAGE_OFFSET:].view(tensor.shape)
    return result.copy_(tensor)


def _channels_last(tensor: torch.Tensor) -> torch.Tensor | None:
    if tensor.dim() != 4:
        return None
    result = tensor.contiguous(memory_format=torch.channels_last)
    return result if result.stride() != tensor.contiguous().stride() else None


def _expanded(tensor: torch.Tensor) -> torch.Tensor | None:
    if tensor.dim() == 0 or tensor.shape[0] < 2:
        return None
    return tensor[:1].clone().expand(tensor.shape)


#: (name, transform, whether it keeps values): a transform gives None where it does not apply.
_LAYOUTS = (
    ("strided slice", _strided_slice, True),
    ("transposed", _transposed, True),
    ("permuted", _permuted, True),
    ("storage offset", _offset, True),
    ("channels_last", _channels_last, True),
    ("broadcast-expanded", _expanded, False),
)


def _layouts(opinfo, dtype: torch.dtype, seed: int) -> list[_Candidate]:
    bases = _sample_inputs(opinfo, dtype, seed)
    value_safe = is_value_safe(opinfo)
    candidates = []
    for name, transform, keeps_values in _LAYOUTS:
        if not keeps_values and not value_safe:
            continue

        def applies(tensor, transform=transform, keeps_values=keeps_values):
            # Other values go only into tensors of the dtype under test: data, not indices.
            return (keeps_values or tensor.dtype == dtype) and transform(tensor) is not None

        def eligible(sample, applies=applies):
            return any(applies(tensor) for tensor in _tensors(sample))

        for base_index in _largest(bases, dtype, 1, eligible):

            def replace(tensor, _operand, transform=transform, applies=applies):
                return transform(tensor) if applies(tensor) else tensor

            sample_name = f"layouts: {name} (sample #{base_index})"
            candidates.append(_Candidate(_replace_tensors(bases[base_index], sample_name, replace)))
    if value_safe and not any(
        c.sample.name.startswith("layouts: channels_last") for c in candidates
    ):
        candidates += _channels_last_4d(bases, dtype)
    return candidates


def _channels_last_4d(bases, dtype: torch.dtype) -> list[_Candidate]:
    """For a value-safe op whose own samples hold no 4-D tensor (most ufuncs'), the largest
    sample whose operands of the dtype share the input's shape, those tiled to
    ``CHANNELS_LAST_SHAPE`` in channels_last: an elementwise result keeps that layout."""
    candidates = []
    for base_index in _largest(
        bases, dtype, 1, lambda sample: _operands_share_shape(sample, dtype)
    ):
        described = "x".join(map(str, CHANNELS_LAST_SHAPE))
        name = f"layouts: channels_last {described} (sample #{base_index})"

        def replace(tensor, _operand):
            if tensor.dtype != dtype:
                return tensor
            return _tiled(tensor, CHANNELS_LAST_SHAPE).contiguous(memory_format=torch.channels_last)

        candidates.append(_Candidate(_replace_tensors(bases[base_index], name, replace)))
    return candidates


# -- sizes ------------------------------------------------------------------------------------


def _several_blocks(dims: int) -> tuple[int, ...]:
    """A shape whose every dim is one past a power of two, as large as ``SIZES_MAX_ELEMENTS``
    allows: more than one block in every dim of any grid."""
    exponents = [1] * dims
    while True:
        for dim in reversed(range(dims)):
            grown = list(exponents)
            grown[dim] += 1
            if math.prod(2**e + 1 for e in grown) <= SIZES_MAX_ELEMENTS:
                exponents = grown
                break
        else:
            return tuple(2**e + 1 for e in exponents)


def _size_shapes(dims: int) -> list[tuple[str, tuple[int, ...]]]:
    shapes = [("0-dim", ())]
    if dims:
        shapes += [
            ("one element", (1,) * dims),
            ("empty", (0, *(3,) * (dims - 1))),
            ("one past a power of two", (*(3,) * (dims - 1), ONE_PAST_A_POWER_OF_TWO)),
            ("several blocks per dim", _several_blocks(dims)),
        ]
    return shapes


def _tiled(tensor: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """``tensor``'s values repeated (in order) into a contiguous tensor of ``shape``."""
    flat = tensor.reshape(-1)
    return flat[torch.arange(math.prod(shape)) % flat.numel()].reshape(shape)


def _operands_share_shape(sample, dtype: torch.dtype) -> bool:
    """Whether the sample's input and every other tensor of ``dtype`` have one shape, with
    elements: all of them can take a new shape together and the sample stays valid."""
    operands = [t for t in _tensors(sample) if t.dtype == dtype]
    return (
        isinstance(sample.input, torch.Tensor)
        and sample.input.dtype == dtype
        and all(t.shape == sample.input.shape and t.numel() for t in operands)
    )


def _sizes(opinfo, dtype: torch.dtype, seed: int) -> list[_Candidate]:
    if not is_value_safe(opinfo):
        return []
    bases = _sample_inputs(opinfo, dtype, seed)

    candidates = []
    for base_index in _largest(
        bases, dtype, 1, lambda sample: _operands_share_shape(sample, dtype)
    ):
        base = bases[base_index]
        for label, shape in _size_shapes(base.input.dim()):
            described = "x".join(map(str, shape)) or "()"
            name = f"sizes: {label} {described} (sample #{base_index})"

            def replace(tensor, _operand, shape=shape):
                return _tiled(tensor, shape) if tensor.dtype == dtype else tensor

            candidates.append(_Candidate(_replace_tensors(base, name, replace)))
    return candidates


_BUILDERS = {
    REFERENCE_INPUTS: _reference_inputs,
    EXTREMAL: _extremal,
    NUMERICS: _numerics,
    LAYOUTS: _layouts,
    SIZES: _sizes,
}
