"""A test draws the sample sets its request names, and a failure names the set it came from.

The generated sets are hand-made here (``sample_sets.generate`` patched in the judge process), so
that these tests say what the harness does with any set, whatever the generators yield: OpInfo's
three float32 samples of exp, then an ``extremal`` set of a finite sample and a NaN one.
"""

import pytest
import torch
from harness_helpers import DEVICE, request, source
from torch.testing._internal.opinfo.core import SampleInput

from opforge_worker import sample_sets
from opforge_worker.harness import Harness
from opforge_worker.sample_sets import EXTREMAL, SAMPLE_INPUTS, SETS
from opforge_worker.samples import SampleCache

HONEST = source("honest/exp")
#: exp that answers 0 where its input is NaN (exp(NaN) is NaN).
NAN_TO_ZERO = HONEST.replace(
    "tl.exp(x.to(tl.float32))", "tl.where(x == x, tl.exp(x.to(tl.float32)), 0.0)"
)


def extremal(dtype: torch.dtype, seed: int) -> list:
    """A finite sample, then a NaN one; the values of both change with the seed."""
    offset = float(seed)
    return [
        SampleInput(torch.tensor([offset, 1.5], dtype=dtype), name="finite"),
        SampleInput(
            torch.tensor([float("nan"), offset, float("-inf")], dtype=dtype), name="nan/inf mix"
        ),
    ]


@pytest.fixture(scope="module")
def harness():
    # A cache of its own: the process's would keep the hand-made samples for other tests.
    with Harness(DEVICE, sample_cache=SampleCache()) as harness:
        yield harness


@pytest.fixture
def drawn(monkeypatch, harness):
    """The (set, seed) of every generation, from an empty cache; sets other than these two
    yield nothing."""
    monkeypatch.setattr(harness, "samples", SampleCache())
    calls = []
    original = sample_sets.generate

    def hand_made(opinfo, name, dtype, seed):
        calls.append((name, seed))
        if name == EXTREMAL:
            return extremal(dtype, seed)
        return original(opinfo, name, dtype, seed) if name == SAMPLE_INPUTS else []

    monkeypatch.setattr(sample_sets, "generate", hand_made)
    return calls


def counts(sample_inputs: tuple[int, int], extremal: tuple[int, int]) -> dict:
    """``per_dtype[d]["sets"]`` of a test of every set, given (run, passed) of the two that give
    samples here."""
    given = {SAMPLE_INPUTS: sample_inputs, EXTREMAL: extremal}
    return {
        name: dict(zip(("run", "passed"), given.get(name, (0, 0)), strict=True)) for name in SETS
    }


def test_a_failure_names_its_set_and_its_index_within_it(harness, drawn):
    result = harness.run_test(request("honest/exp", "exp", source=NAN_TO_ZERO))

    assert result["outcome"] == "accuracy_error", result["failure"]
    failure = result["failure"]
    assert (failure["sample_set"], failure["sample_index"]) == (EXTREMAL, 1)
    assert failure["sample"].startswith("extremal #1 (nan/inf mix): (Tensor[float32](3,) = [nan")
    assert result["per_dtype"]["float32"]["sets"] == counts((3, 3), (2, 1))
    assert (result["tests_run"], result["tests_passed"]) == (5, 4)


def test_every_set_runs_by_default_with_its_own_fresh_values(harness, drawn):
    result = harness.run_test(request("honest/exp", "exp", mode="all"))

    assert result["outcome"] == "pass", result["failure"]
    assert result["per_dtype"]["float32"]["sets"] == counts((3, 3), (2, 2))
    assert sorted(set(drawn)) == sorted((name, seed) for name in SETS for seed in (0, 1))


def test_a_request_draws_only_the_sets_it_names(harness, drawn):
    result = harness.run_test(
        request("honest/exp", "exp", source=NAN_TO_ZERO, sample_sets=[SAMPLE_INPUTS])
    )
    extremal_only = harness.run_test(
        request("honest/exp", "exp", mode="all", sample_sets=[EXTREMAL])
    )

    assert result["outcome"] == "pass", result["failure"]
    assert result["per_dtype"]["float32"]["sets"] == {SAMPLE_INPUTS: {"run": 3, "passed": 3}}
    assert extremal_only["outcome"] == "pass", extremal_only["failure"]
    assert extremal_only["per_dtype"]["float32"]["sets"] == {EXTREMAL: {"run": 2, "passed": 2}}
    assert {name for name, _ in drawn} == {SAMPLE_INPUTS, EXTREMAL}


@pytest.mark.parametrize(
    ("named", "message"),
    [
        (
            ["extremal", "no_such_set"],
            "bad test request: key 'sample_sets': unknown sample sets ['no_such_set'] (known: "
            "sample_inputs, reference_inputs, extremal, numerics, layouts, sizes, model:<name>)",
        ),
        ([], "bad test request: key 'sample_sets': must not be empty"),
        ("extremal", "bad test request: key 'sample_sets': expected array, got str"),
    ],
    ids=["unknown", "empty", "not_a_list"],
)
def test_a_request_naming_no_valid_sets_is_a_harness_error(harness, named, message):
    result = harness.run_test(request("honest/exp", "exp", sample_sets=named))

    assert result["outcome"] == "harness_error"
    assert result["failure"]["message"].startswith(message)
    assert result["failure"]["sample_set"] == "" and result["tests_run"] == 0
