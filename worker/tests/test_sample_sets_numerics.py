"""The numerics set: the op's own values scaled, offset and spread, where the float64 reference
stays finite, with an atol that scales with them (sample_sets.py, data/sample_sets.yaml)."""

import pytest
import torch
from torch.utils import _pytree as pytree

from opforge_worker import opinfo as opinfo_db
from opforge_worker import sample_sets
from opforge_worker.sample_sets import NUMERICS
from opforge_worker.samples import prepare

F32_TRANSFORMATIONS = {
    "scaled by 1e4",
    "scaled by 1e-4",
    "offset 1e4",
    "spread: its largest 1/8 +1e3",
}


def op(name, variant=""):
    found = opinfo_db.find_opinfo(name, variant)
    assert found is not None, name
    return found


def numerics(name, dtype, variant=""):
    return sample_sets.generate(op(name, variant), NUMERICS, dtype, 0)


def transformations(samples) -> set[str]:
    return {sample_sets.numerics_of(sample)[0] for sample in samples}


def base_of(name, sample, dtype):
    index = int(sample.name.rsplit("#", 1)[1].rstrip(")"))
    return opinfo_db.samples_for(op(name), "cpu", dtype, 0)[index]


def leaves(sample):
    return pytree.tree_leaves((sample.input, sample.args, sample.kwargs))


def test_every_transformation_maps_each_value_of_the_dtype_as_it_says():
    samples = {sample_sets.numerics_of(s)[0]: s for s in numerics("softmax", torch.float32)}
    assert set(samples) == F32_TRANSFORMATIONS

    for label, sample in samples.items():
        assert sample.name == f"numerics: {label} (sample #{sample.name.rsplit('#')[1]}"
        base = base_of("softmax", sample, torch.float32)
        assert sample.args == base.args and sample.kwargs == base.kwargs  # dim untouched
        x = base.input.double()
        if label == "scaled by 1e4":
            expected = x * 1e4
        elif label == "scaled by 1e-4":
            expected = x * 1e-4
        elif label == "offset 1e4":
            expected = x + 1e4
        else:
            lifted = max(1, x.numel() // sample_sets.SPREAD_EVERY)
            threshold = x.reshape(-1).topk(lifted).values[-1]
            expected = x + 1e3 * (x >= threshold)
            assert int((expected != x).sum()) == lifted
        assert torch.equal(sample.input, expected.float()), label


def test_index_and_integer_inputs_are_untouched():
    for name in ("index_select", "gather", "index_add"):
        samples = numerics(name, torch.float32)
        assert samples, name
        for sample in samples:
            base = base_of(name, sample, torch.float32)
            for ours, theirs in zip(leaves(sample), leaves(base), strict=True):
                if isinstance(ours, torch.Tensor) and ours.dtype != torch.float32:
                    assert torch.equal(ours, theirs), (name, sample.name)
                elif not isinstance(ours, torch.Tensor):
                    assert ours == theirs
    for dtype in (torch.int64, torch.int32, torch.bool):
        assert numerics("add", dtype) == []


def test_a_transformation_whose_float64_reference_overflows_is_dropped():
    # exp(9e4), exp(x + 1e4) and exp(x + 1e3) overflow float64.
    assert transformations(numerics("exp", torch.float32)) == {"scaled by 1e-4"}
    # A product of two operands scaled by 1e3 overflows float16 (65504).
    assert transformations(numerics("mm", torch.float16)) == {"scaled by 1e-2"}
    # Values that leave the dtype's range: acos's domain is [-1, 1].
    assert "scaled by 1e4" not in transformations(numerics("acos", torch.float32))


def test_each_dtype_gets_the_transformations_its_range_and_precision_allow():
    assert transformations(numerics("add", torch.float32)) == F32_TRANSFORMATIONS
    assert transformations(numerics("add", torch.float16)) == {
        "scaled by 1e3",
        "scaled by 1e-2",
        "offset 1e2",
        "spread: its largest 1/8 +1e3",
    }
    # bfloat16 keeps 8 bits: at any offset worth the name its values would merge.
    assert transformations(numerics("add", torch.bfloat16)) == {
        "scaled by 1e4",
        "scaled by 1e-4",
        "spread: its largest 1/8 +1e3",
    }


def test_reductions_and_normalizations_get_offsets_and_spreads():
    for name in ("var", "std", "sum", "mean", "log_softmax", "nn.functional.layer_norm"):
        found = transformations(numerics(name, torch.float32))
        assert {"offset 1e4", "spread: its largest 1/8 +1e3"} <= found, name


@pytest.mark.parametrize("name", ["sort", "argsort", "topk", "argmax", "kthvalue"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_where_the_result_holds_indices_no_two_values_merge(name, dtype):
    samples = numerics(name, dtype)
    assert samples or dtype == torch.float16  # float16's merge more often: all may be dropped
    for sample in samples:
        base = base_of(name, sample, dtype)
        for ours, theirs in zip(leaves(sample), leaves(base), strict=True):
            if isinstance(ours, torch.Tensor) and ours.dtype == dtype:
                assert ours.unique().numel() == theirs.unique().numel(), sample.name


def test_the_atol_scales_with_the_magnitude_of_the_values_and_of_the_result():
    scales = {
        name: {
            sample_sets.numerics_of(s)[0]: sample_sets.numerics_of(s)[1]
            for s in numerics(name, torch.float32)
        }
        for name in ("log1p", "var")
    }
    # Scaled down: an atol of 1e-5 would pass log(1 + x) at x = 1e-4.
    assert 1e-4 <= scales["log1p"]["scaled by 1e-4"] < 1e-3
    # The variance of values scaled by 1e4 is 1e8 times theirs.
    assert scales["var"]["scaled by 1e4"] == pytest.approx(1e8, rel=1e-3)
    # At an offset the values are about 1e3 times OpInfo's (within 9): the mean's rounding.
    assert 5e2 < scales["var"]["offset 1e4"] < 5e3


def test_a_prepared_sample_carries_its_transformation_and_atol_scale():
    sample = numerics("log1p", torch.float32)[0]
    label, scale = sample_sets.numerics_of(sample)

    prepared = prepare(op("log1p"), sample, NUMERICS, 0, torch.float32)

    assert prepared.transformation == label
    assert prepared.reference.atol_scale == scale != 1.0
    plain = opinfo_db.samples_for(op("log1p"), "cpu", torch.float32, 0)[0]
    assert sample_sets.numerics_of(plain) == ("", 1.0)
    assert prepare(op("log1p"), plain, "sample_inputs", 0, torch.float32).reference.atol_scale == 1


def test_fresh_values_keep_the_samples_and_their_transformations():
    first = numerics("var", torch.float32)
    fresh = sample_sets.generate(op("var"), NUMERICS, torch.float32, 1)
    assert [s.name for s in fresh] == [s.name for s in first]
    assert any(not torch.equal(a.input, b.input) for a, b in zip(first, fresh, strict=True))


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("numerics:\n  float8: {scales: [2.0]}\n", "numerics"),
        ("numerics:\n  float32: {scales: [-1.0]}\n", "numerics.float32.scales"),
        ("numerics:\n  float32: {shifts: [1.0]}\n", "numerics.float32"),
        # YAML 1.1 reads 1.0e4 (no sign) as a string.
        ("numerics:\n  float32: {offsets: [1.0e4]}\n", "numerics.float32.offsets"),
    ],
)
def test_the_numerics_config_names_what_is_wrong(tmp_path, text, named):
    config = tmp_path / "sample_sets.yaml"
    config.write_text(text)
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        sample_sets.SampleSetsConfig.load(config)


def test_an_excluded_operator_gets_no_numerics(tmp_path, monkeypatch):
    config = tmp_path / "sample_sets.yaml"
    shipped = sample_sets.SampleSetsConfig.load()
    config.write_text("exclude:\n  numerics:\n    softmax: excluded for this test\n")
    monkeypatch.setattr(
        sample_sets,
        "_config",
        sample_sets.SampleSetsConfig(
            value_safe={},
            exclude=sample_sets.SampleSetsConfig.load(config).exclude,
            numerics=shipped.numerics,
        ),
    )
    assert numerics("softmax", torch.float32) == []
    assert numerics("log_softmax", torch.float32)
