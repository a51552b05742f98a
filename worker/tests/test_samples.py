"""Prepared samples: generated once per key, bounded, and out of the candidate's reach."""

import pytest
import torch
from harness_helpers import DEVICE, request
from torch.testing._internal.opinfo.core import SampleInput

from opforge_worker import opinfo as opinfo_db
from opforge_worker import sample_sets
from opforge_worker.harness import Harness
from opforge_worker.sample_sets import EXTREMAL, SAMPLE_INPUTS
from opforge_worker.samples import SampleCache, prepare
from opforge_worker.transport import decode_inputs

EXP = opinfo_db.find_opinfo("exp")


@pytest.fixture
def generations(monkeypatch):
    """Counts sample generations."""
    calls = []
    original = opinfo_db.samples_for

    def counted(opinfo, device, dtype, seed):
        calls.append((opinfo.name, dtype, seed))
        return original(opinfo, device, dtype, seed)

    monkeypatch.setattr(opinfo_db, "samples_for", counted)
    return calls


def test_samples_are_generated_once_per_key(generations):
    cache = SampleCache()

    first = cache.samples(EXP, torch.float32, 0, SAMPLE_INPUTS)
    again = cache.samples(EXP, torch.float32, 0, SAMPLE_INPUTS)
    other_seed = cache.samples(EXP, torch.float32, 1, SAMPLE_INPUTS)

    assert again is first and other_seed is not first
    assert generations == [("exp", torch.float32, 0), ("exp", torch.float32, 1)]
    assert [s.layout for s in first] == [s.layout for s in other_seed]
    assert first[0].inputs != other_seed[0].inputs  # same shapes, other values


def test_each_set_is_generated_and_cached_on_its_own(monkeypatch):
    drawn = []
    original = sample_sets.generate

    def recorded(opinfo, name, dtype, seed):
        drawn.append(name)
        if name == EXTREMAL:
            values = [float("nan"), float("inf")] if seed == 0 else [float("nan"), 2.0]
            return [SampleInput(torch.tensor(values, dtype=dtype), name="nan/inf mix")]
        return original(opinfo, name, dtype, seed)

    monkeypatch.setattr(sample_sets, "generate", recorded)
    cache = SampleCache()

    opinfo_samples = cache.samples(EXP, torch.float32, 0, SAMPLE_INPUTS)
    extremal = cache.samples(EXP, torch.float32, 0, EXTREMAL)
    again = cache.samples(EXP, torch.float32, 0, EXTREMAL)

    assert drawn == [SAMPLE_INPUTS, EXTREMAL] and again is extremal and len(cache) == 2
    assert [(s.sample_set, s.index) for s in opinfo_samples] == [
        (SAMPLE_INPUTS, index) for index in range(3)
    ]
    assert extremal[0].label() == "extremal #0 (nan/inf mix): (Tensor[float32](2,) = [nan, inf])"
    assert opinfo_samples[1].label().startswith("sample_inputs #1: (Tensor[float32](1, 0, 3)")
    assert (
        extremal[0]
        .label(fresh_values=True)
        .startswith("extremal #0 (nan/inf mix), fresh values: (")
    )


def test_least_recently_used_entries_go_first_beyond_the_bound(generations):
    size = sum(
        sample.nbytes for sample in SampleCache().samples(EXP, torch.float32, 0, SAMPLE_INPUTS)
    )
    cache = SampleCache(max_bytes=2 * size)
    generations.clear()

    for seed in (0, 1, 0, 2, 0, 1):  # 2 evicts 1 (0 was used since); 1 comes back, evicting 2
        cache.samples(EXP, torch.float32, seed, SAMPLE_INPUTS)

    assert [seed for _, _, seed in generations] == [0, 1, 2, 1]
    assert len(cache) == 2


def test_an_entry_larger_than_the_bound_is_not_kept(generations):
    cache = SampleCache(max_bytes=16)

    cache.samples(EXP, torch.float32, 0, SAMPLE_INPUTS)
    cache.samples(EXP, torch.float32, 0, SAMPLE_INPUTS)

    assert len(generations) == 2 and len(cache) == 0


def test_the_candidate_gets_fresh_copies_never_the_cached_tensors():
    sample = next(iter(opinfo_db.samples_for(EXP, "cpu", torch.float32, 0)))
    prepared = prepare(EXP, sample, SAMPLE_INPUTS, 0)
    before = [t.clone() for t in prepared.reference.inputs_before]

    for tensor in decode_inputs(prepared.inputs)["args"]:
        tensor.fill_(7)  # what a mutating candidate does to its inputs

    assert all(
        torch.equal(kept, original)
        for kept, original in zip(prepared.reference.inputs_before, before, strict=True)
    )
    assert torch.equal(decode_inputs(prepared.inputs)["args"][0], before[0])


def test_a_mutating_candidate_leaves_the_cache_as_generated():
    cache = SampleCache()
    with Harness(DEVICE, sample_cache=cache) as harness:
        assert harness.run_test(request("cheats/mutate_input", "exp"))["failure"]["check"] == (
            "mutation"
        )
        assert harness.run_test(request("honest/exp", "exp"))["outcome"] == "pass"
        assert harness.run_test(request("cheats/mutate_input", "exp"))["failure"]["check"] == (
            "mutation"
        )

    regenerated = SampleCache().samples(EXP, torch.float32, 0, SAMPLE_INPUTS)
    cached = cache.samples(EXP, torch.float32, 0, SAMPLE_INPUTS)
    assert [s.inputs for s in cached] == [s.inputs for s in regenerated]
    for kept, fresh in zip(cached, regenerated, strict=True):
        assert torch.equal(kept.reference.expected, fresh.reference.expected)


def test_an_opinfo_is_found_by_its_name_and_variant():
    for opinfo in opinfo_db.load_op_db():
        assert opinfo_db.find_opinfo(opinfo.name, opinfo.variant_test_name) is opinfo
    assert opinfo_db.find_opinfo("max", "reduction_no_dim").variant_test_name == "reduction_no_dim"
    assert opinfo_db.find_opinfo("max", "no such variant") is None
    assert opinfo_db.find_opinfo("no such operator") is None
    # A request's variant is whatever JSON value it sent.
    assert opinfo_db.find_opinfo("exp", ["a list"]) is None
