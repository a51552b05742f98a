"""The worker's harness pool: a test of every sample spreads its dtypes over idle slots, and its
result is the one a single harness gives."""

import threading

import pytest
from harness_helpers import DEVICE, request

from opforge_worker.harness import Harness
from opforge_worker.jobs import HarnessPool
from opforge_worker.results import Failure, ResultBuilder, merge_dtype_results

#: Passes bfloat16 and float32; for int32 it returns int32 where exp gives float32.
MIXED = ("honest/exp_upcast", "exp", ["bfloat16", "int32", "float32"])


class RecordingHarness:
    """A real harness that records the dtypes and mode of every test it runs."""

    def __init__(self, runs: list):
        self.harness = Harness(device_kind=DEVICE)
        self.runs = runs

    def run_test(self, payload, cancel):
        self.runs.append((self, tuple(payload["dtypes"]), payload["mode"]))
        return self.harness.run_test(payload, cancel)

    def close(self):
        self.harness.close()


@pytest.fixture(scope="module")
def pool():
    """Three slots, each with its harness started (three tests at once start them)."""
    runs: list = []
    pool = HarnessPool(3, lambda: RecordingHarness(runs))
    pool.runs = runs
    starts = [
        threading.Thread(target=pool.run_test, args=(request("honest/clone", "clone"), None))
        for _ in range(3)
    ]
    for thread in starts:
        thread.start()
    for thread in starts:
        thread.join()
    assert len({harness for harness, _, _ in runs}) == 3
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def alone():
    with Harness(device_kind=DEVICE) as harness:
        yield harness


def test_a_test_of_every_sample_is_spread_and_reports_what_one_harness_reports(pool, alone):
    name, op, dtypes = MIXED
    payload = request(name, op, dtypes, mode="all")
    pool.runs.clear()

    spread = pool.run_test(payload, threading.Event())

    assert sorted(dtypes for _, dtypes, _ in pool.runs) == sorted((dtype,) for dtype in dtypes)
    assert len({harness for harness, _, _ in pool.runs}) > 1
    single = alone.run_test(payload, threading.Event())
    assert single["outcome"] == "accuracy_error"
    assert single["per_dtype"]["float32"]["outcome"] == "pass"  # mode all ran past int32
    for key in ("outcome", "tests_run", "tests_passed", "per_dtype"):
        assert spread[key] == single[key], (key, spread["failure"])
    for key in ("dtype", "sample_index", "check", "message", "diff"):
        assert spread["failure"][key] == single["failure"][key], key
    assert spread["sandbox"] == single["sandbox"]


def test_a_test_that_stops_at_its_first_failure_keeps_one_harness(pool):
    name, op, dtypes = MIXED
    pool.runs.clear()

    result = pool.run_test(request(name, op, dtypes), threading.Event())

    assert [(dtypes, mode) for _, dtypes, mode in pool.runs] == [(tuple(dtypes), "first_failure")]
    assert result["per_dtype"]["float32"]["outcome"] == "skipped"


def test_merged_failure_is_the_earliest_dtypes_and_counts_add_up():
    def result(dtype, run, passed, failure=None):
        builder = ResultBuilder(dtypes=[dtype], compile_s=0.5, run_s=0.25)
        builder.run[dtype], builder.passed[dtype] = run, passed
        if failure:
            builder.record_failure(failure)
            builder.run[dtype] -= 1  # record_failure counted the failing sample
        return builder.payload()

    results = {
        "float16": result("float16", 4, 4),
        "int32": result("int32", 2, 1, Failure("crash", "crash", "died", "int32", 1)),
        "float32": result(
            "float32", 3, 2, Failure("accuracy_error", "accuracy", "off", "float32", 2)
        ),
    }

    merged = merge_dtype_results(["float16", "float32", "int32"], results)

    assert merged["outcome"] == "accuracy_error"
    assert (merged["failure"]["dtype"], merged["failure"]["message"]) == ("float32", "off")
    assert (merged["tests_run"], merged["tests_passed"]) == (9, 7)
    assert list(merged["per_dtype"]) == ["float16", "float32", "int32"]
    assert merged["per_dtype"]["int32"] == {"run": 2, "passed": 1, "outcome": "crash"}
    assert (merged["compile_s"], merged["run_s"]) == (1.5, 0.75)
    passing = {dtype: result(dtype, 1, 1) for dtype in ("float16", "int32")}
    assert merge_dtype_results(["float16", "int32"], passing)["failure"] is None
