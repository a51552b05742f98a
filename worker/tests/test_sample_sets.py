"""The generated sample sets: deterministic, aligned between seeds, telling, valid and bounded."""

import math
from collections import Counter

import pytest
import torch
from torch.utils import _pytree as pytree

from opforge_worker import opinfo as opinfo_db
from opforge_worker import sample_sets
from opforge_worker.judge import compute_reference
from opforge_worker.sample_sets import EXTREMAL, LAYOUTS, REFERENCE_INPUTS, SIZES
from opforge_worker.transport import decode_inputs, encode_inputs


def op(name, variant=""):
    found = opinfo_db.find_opinfo(name, variant)
    assert found is not None, name
    return found


def tensors(sample):
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def layout(sample):
    return (
        sample.name,
        tuple(sample.kwargs),
        [(t.dtype, t.shape, t.stride(), t.storage_offset()) for t in tensors(sample)],
    )


def same_bits(a, b):
    """Equal bit for bit: NaN equals NaN, -0.0 differs from 0.0."""
    flat_a, flat_b = a.reshape(-1).contiguous(), b.reshape(-1).contiguous()
    return a.shape == b.shape and torch.equal(flat_a.view(torch.uint8), flat_b.view(torch.uint8))


def is_special(value: float, dtype) -> bool:
    specials = [special for _, special in sample_sets.float_specials(dtype, reduction=False)]
    return math.isnan(value) or value in specials


def one_past_a_power_of_two(size: int) -> bool:
    return size > 2 and (size - 1) & (size - 2) == 0


def values(samples, dtype):
    """Every value of ``dtype`` in ``samples``, flattened into one tensor."""
    found = [t.reshape(-1) for s in samples for t in tensors(s) if t.dtype == dtype]
    return torch.cat(found) if found else torch.empty(0, dtype=dtype)


@pytest.mark.parametrize(
    ("name", "set_name", "dtype"),
    [
        ("add", EXTREMAL, torch.float32),
        ("sum", EXTREMAL, torch.int64),
        ("add", LAYOUTS, torch.float32),
        ("abs", SIZES, torch.float16),
        ("abs", REFERENCE_INPUTS, torch.float32),
    ],
)
def test_a_seed_gives_the_same_samples_and_the_next_seed_fresh_values_in_the_same_layout(
    name, set_name, dtype
):
    first = sample_sets.generate(op(name), set_name, dtype, 7)
    again = sample_sets.generate(op(name), set_name, dtype, 7)
    fresh = sample_sets.generate(op(name), set_name, dtype, 8)

    assert first
    assert [layout(s) for s in again] == [layout(s) for s in first]
    assert [layout(s) for s in fresh] == [layout(s) for s in first]
    for a, b in zip(first, again, strict=True):
        assert all(same_bits(x, y) for x, y in zip(tensors(a), tensors(b), strict=True))
    changed = [
        not torch.equal(x.nan_to_num(), y.nan_to_num())
        for a, b in zip(first, fresh, strict=True)
        for x, y in zip(tensors(a), tensors(b), strict=True)
        if x.dtype == dtype and x.numel() > 1
    ]
    assert any(changed)


def test_every_generated_sample_says_which_set_made_it():
    for set_name in sample_sets.GENERATED_SETS:
        for sample in sample_sets.generate(op("mul"), set_name, torch.float32, 0):
            assert sample.name.startswith(f"{set_name}: ")


def test_float_extremals_hold_every_special_where_the_domain_allows():
    samples = sample_sets.generate(op("abs"), EXTREMAL, torch.float32, 0)
    seen = values(samples, torch.float32)
    info = torch.finfo(torch.float32)

    assert seen.isnan().any()
    assert (seen == math.inf).any() and (seen == -math.inf).any()
    assert ((seen == 0) & seen.signbit()).any()  # -0.0
    assert (seen == info.max).any() and (seen == -info.max).any()
    assert (seen == info.smallest_normal).any()
    subnormal = (seen != 0) & (seen.abs() < info.smallest_normal)
    assert subnormal.any()
    assert ((seen.abs() >= 20) & (seen.abs() <= 90)).any()  # where exp(2x) overflows
    # Mixed with the op's own values.
    assert (seen.isfinite() & (seen.abs() < 10) & (seen != 0)).any()


def test_float16_gets_its_own_overflow_magnitudes():
    seen = values(sample_sets.generate(op("tanh"), EXTREMAL, torch.float16, 0), torch.float16)
    assert ((seen.abs() > 5) & (seen.abs() < 12)).any()
    assert not ((seen.abs() >= 20) & seen.isfinite() & (seen.abs() < 1000)).any()


def test_integer_extremals_hold_limits_and_values_float32_cannot_hold():
    int32 = values(sample_sets.generate(op("abs"), EXTREMAL, torch.int32, 0), torch.int32)
    int64 = values(sample_sets.generate(op("abs"), EXTREMAL, torch.int64, 0), torch.int64)

    for seen, dtype in ((int32, torch.int32), (int64, torch.int64)):
        info = torch.iinfo(dtype)
        assert (seen == 0).any() and (seen == -1).any()
        assert (seen == info.max).any() and (seen == info.min).any()
        beyond = seen[seen.abs() > 2**24]
        assert (beyond.double().float().long() != beyond.long()).any()
    assert (int64.abs() > 2**53).any()


def test_specials_reach_the_first_and_last_elements_and_meet_the_other_operands_specials():
    samples = sample_sets.generate(op("add"), EXTREMAL, torch.float32, 0)
    assert samples
    for sample in samples:
        for operand in tensors(sample)[:2]:
            flat = operand.reshape(-1)
            assert is_special(flat[0].item(), torch.float32), sample.name
            assert is_special(flat[-1].item(), torch.float32), sample.name
    # Each rotation puts another special first.
    firsts = {str(tensors(s)[0].reshape(-1)[0].item()) for s in samples}
    assert {"nan", "inf", "-inf", "-0.0"} <= firsts

    pairs = set()
    for sample in samples:
        lhs, rhs = torch.broadcast_tensors(*tensors(sample)[:2])
        for a, b in zip(lhs.reshape(-1).tolist(), rhs.reshape(-1).tolist(), strict=True):
            pairs.add((str(a), str(b)))
    assert {("nan", "inf"), ("inf", "nan"), ("inf", "-inf"), ("-inf", "inf")} <= pairs
    assert ("nan", "-0.0") in pairs and ("-0.0", "nan") in pairs


@pytest.mark.parametrize(
    ("name", "dtype", "forbidden"),
    [
        ("log", torch.float32, lambda v: (v < 0) | ((v == 0) & v.signbit())),
        ("sqrt", torch.float32, lambda v: v == -math.inf),
        ("log", torch.int64, lambda v: v < 0),
        ("acos", torch.float32, lambda v: v.isinf() | (v.abs() > 1)),
    ],
)
def test_extremals_stay_inside_the_ops_domain(name, dtype, forbidden):
    samples = sample_sets.generate(op(name), EXTREMAL, dtype, 0)
    assert samples
    seen = values(samples, dtype)
    assert not forbidden(seen).any()


def test_binary_operands_keep_their_own_domain():
    # div with rounding excludes a zero divisor for integers (it raises).
    for sample in sample_sets.generate(op("div", "trunc_rounding"), EXTREMAL, torch.int64, 0):
        divisor = tensors(sample)[1]
        assert (divisor != 0).all()
        # INT64_MIN / -1 traps (SIGFPE): the minimum never goes to a binary op.
        assert (tensors(sample)[0] != torch.iinfo(torch.int64).min).all()


def test_index_inputs_are_untouched_and_get_no_generated_values_or_sizes():
    for name in ("index_select", "gather"):
        for dtype in (torch.float32, torch.int64):
            assert sample_sets.generate(op(name), EXTREMAL, dtype, 0) == []
            assert sample_sets.generate(op(name), SIZES, dtype, 0) == []
            bases = opinfo_db.samples_for(op(name), "cpu", dtype, 0)
            layouts = sample_sets.generate(op(name), LAYOUTS, dtype, 0)
            assert layouts
            for sample in layouts:
                base = bases[int(sample.name.rsplit("#", 1)[1].rstrip(")"))]
                for moved, original in zip(tensors(sample), tensors(base), strict=True):
                    assert torch.equal(moved, original)  # same values, other strides


@pytest.mark.parametrize(("name", "dtype"), [("nonzero", torch.float32), ("bincount", torch.int64)])
def test_ops_whose_output_shape_depends_on_values_get_no_extremal_samples(name, dtype):
    assert sample_sets.generate(op(name), EXTREMAL, dtype, 0) == []


def test_an_extremal_sample_that_changes_the_output_shape_is_dropped(tmp_path, monkeypatch):
    config = tmp_path / "sample_sets.yaml"
    config.write_text("value_safe:\n  nonzero: declared value-safe for this test\n")
    monkeypatch.setattr(sample_sets, "_config", sample_sets.SampleSetsConfig.load(config))
    monkeypatch.setattr(sample_sets, "_decisions", {})
    nonzero = op("nonzero")

    kept = sample_sets.generate(nonzero, EXTREMAL, torch.float32, 0)
    built = sample_sets._extremal(nonzero, torch.float32, 0)

    assert len(kept) < len(built)
    for sample in kept:
        base = next(c.same_output_shapes_as for c in built if c.sample.name == sample.name)
        expected = compute_reference(nonzero, sample).expected
        assert expected.shape == compute_reference(nonzero, base).expected.shape


def test_layouts_are_the_same_values_in_other_memory():
    bases = opinfo_db.samples_for(op("amax"), "cpu", torch.float32, 0)
    samples = {
        s.name.split(" (")[0]: s
        for s in sample_sets.generate(op("amax"), LAYOUTS, torch.float32, 0)
    }

    assert set(samples) == {
        f"layouts: {kind}"
        for kind in (
            "strided slice",
            "transposed",
            "permuted",
            "storage offset",
            "channels_last",
            "broadcast-expanded",
        )
    }
    for kind, sample in samples.items():
        moved = tensors(sample)[0]
        base = tensors(bases[int(sample.name.rsplit("#", 1)[1].rstrip(")"))])[0]
        if kind == "layouts: broadcast-expanded":
            assert 0 in moved.stride()
            assert torch.equal(moved, base[:1].expand(base.shape))
            continue
        assert torch.equal(moved, base)
        if kind == "layouts: storage offset":
            assert moved.storage_offset() > 0
        elif kind == "layouts: channels_last":
            assert moved.is_contiguous(memory_format=torch.channels_last)
            assert not moved.is_contiguous()
        else:
            assert not moved.is_contiguous()
    # A kernel that reads the gaps of the strided slice as data reads NaN.
    strided = tensors(samples["layouts: strided slice"])[0]
    gaps = torch.empty(0).set_(strided.untyped_storage()).view(torch.float32)
    assert gaps.isnan().sum() == strided.numel()


def test_layouts_reach_the_candidate_process_as_they_are():
    for sample in sample_sets.generate(op("amax"), LAYOUTS, torch.float32, 0):
        sent = {"args": [sample.input, *sample.args], "kwargs": sample.kwargs}
        arrived = decode_inputs(encode_inputs(sent))
        pairs = zip(pytree.tree_leaves(sent), pytree.tree_leaves(arrived), strict=True)
        for before, after in pairs:
            if isinstance(before, torch.Tensor):
                assert (after.shape, after.stride(), after.storage_offset()) == (
                    before.shape,
                    before.stride(),
                    before.storage_offset(),
                )
                assert same_bits(after, before)


def test_sizes_cover_the_edge_sizes_and_stay_bounded():
    samples = sample_sets.generate(op("exp"), SIZES, torch.float32, 0)
    shapes = [tuple(tensors(s)[0].shape) for s in samples]
    numels = [math.prod(shape) for shape in shapes]

    assert () in shapes
    assert 1 in numels and 0 in numels
    assert any(1025 in shape for shape in shapes)
    assert any(shape and all(map(one_past_a_power_of_two, shape)) for shape in shapes)
    assert max(numels) <= sample_sets.SIZES_MAX_ELEMENTS
    assert max(numels) > sample_sets.SIZES_MAX_ELEMENTS // 4


def test_every_dim_of_a_many_block_shape_is_one_past_a_power_of_two():
    for dims in (1, 2, 3, 4):
        shape = sample_sets._several_blocks(dims)
        assert len(shape) == dims
        assert all(map(one_past_a_power_of_two, shape))
        assert math.prod(shape) <= sample_sets.SIZES_MAX_ELEMENTS


def test_reference_inputs_only_where_the_opinfo_defines_them_and_bounded():
    assert op("gather").reference_inputs_func is None
    assert sample_sets.generate(op("gather"), REFERENCE_INPUTS, torch.float32, 0) == []

    samples = sample_sets.generate(op("abs"), REFERENCE_INPUTS, torch.float32, 0)
    assert 0 < len(samples) <= sample_sets.REFERENCE_MAX_SAMPLES
    for sample in samples:
        assert sum(t.nbytes for t in tensors(sample)) <= sample_sets.REFERENCE_MAX_BYTES
    # None repeats what sample_inputs already runs: reference_inputs hold those and then these.
    plain = opinfo_db.samples_for(op("abs"), "cpu", torch.float32, 0)
    every = op("abs").reference_inputs("cpu", torch.float32)
    signatures = [Counter(map(sample_sets._signature, found)) for found in (plain, samples, every)]
    assert signatures[0] + signatures[1] <= signatures[2]


def test_bool_gets_no_extremal_values():
    assert sample_sets.generate(op("logical_not"), EXTREMAL, torch.bool, 0) == []


def test_the_config_names_what_is_wrong(tmp_path):
    config = tmp_path / "sample_sets.yaml"
    config.write_text("exclude:\n  extremals:\n    abs: typo in the set's name\n")
    with pytest.raises(ValueError, match="extremals"):
        sample_sets.SampleSetsConfig.load(config)
    config.write_text("exclude:\n  layouts:\n    abs:\n")
    with pytest.raises(ValueError, match="exclude.layouts"):
        sample_sets.SampleSetsConfig.load(config)


def test_an_excluded_operator_does_not_get_the_set(tmp_path, monkeypatch):
    config = tmp_path / "sample_sets.yaml"
    config.write_text("exclude:\n  layouts:\n    abs: excluded for this test\n")
    monkeypatch.setattr(sample_sets, "_config", sample_sets.SampleSetsConfig.load(config))
    assert sample_sets.generate(op("abs"), LAYOUTS, torch.float32, 0) == []
    assert sample_sets.generate(op("abs"), EXTREMAL, torch.float32, 0)


def test_the_shipped_config_loads():
    loaded = sample_sets.SampleSetsConfig.load()
    assert set(loaded.exclude) <= set(sample_sets.GENERATED_SETS)
