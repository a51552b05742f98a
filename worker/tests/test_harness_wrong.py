"""Wrong-but-plausible kernels fail, each in the sample set made to catch its defect, and their
honest twins pass every set on every dtype they claim (tests/wrong_corpus.py reads the pairs).

OpInfo's ``sample_inputs`` alone pass every wrong kernel here; a wrong kernel is therefore run on
``sample_inputs`` and the one set its header names, so the failure shows that this set catches
the defect, whatever the other sets would also catch. A twin runs every set."""

import pytest
from harness_helpers import DEVICE, request
from wrong_corpus import TWINS, WRONG, pairs

from opforge_worker.harness import Harness
from opforge_worker.sample_sets import SAMPLE_INPUTS, SETS

PAIRS = pairs()


@pytest.fixture(scope="module")
def harness():
    with Harness(DEVICE) as harness:
        yield harness


def test_every_wrong_kernel_has_a_twin_and_every_twin_a_wrong_kernel():
    assert PAIRS
    assert {path.stem for path in TWINS.glob("*.py")} == {path.stem for path in WRONG.glob("*.py")}


@pytest.mark.parametrize("pair", PAIRS, ids=[pair.name for pair in PAIRS])
def test_wrong_kernel_fails_in_the_set_that_catches_its_defect(harness, pair):
    result = harness.run_test(
        request(
            pair.wrong,
            pair.op,
            pair.wrong_dtypes,
            wrapper=pair.wrapper,
            sample_sets=[SAMPLE_INPUTS, pair.sample_set],
        )
    )

    failure = result["failure"]
    assert result["outcome"] == pair.outcome, failure
    if pair.check:
        assert failure["check"] == pair.check, failure
    assert failure["sample_set"] == pair.sample_set, failure
    assert failure["dtype"] in pair.wrong_dtypes
    assert failure["sample"], failure


@pytest.mark.parametrize("pair", PAIRS, ids=[pair.name for pair in PAIRS])
def test_honest_twin_passes_every_set_on_every_claimed_dtype(harness, pair):
    result = harness.run_test(
        request(
            pair.twin,
            pair.op,
            pair.twin_dtypes,
            wrapper=pair.wrapper,
            mode="all",
            sample_sets=list(SETS),
        )
    )

    assert result["failure"] is None, result["failure"]
    assert result["outcome"] == "pass"
    assert list(result["per_dtype"]) == list(pair.twin_dtypes)
    for dtype in pair.twin_dtypes:
        entry = result["per_dtype"][dtype]
        assert entry["outcome"] == "pass", (dtype, entry)
        assert entry["run"] == entry["passed"] > 0
