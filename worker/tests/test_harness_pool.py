"""The worker's harness pool: tests at once run on harnesses of their own, and a source goes back
to the harness that tested it."""

import threading

from harness_helpers import DEVICE, request

from opforge_worker.harness import Harness
from opforge_worker.jobs import HarnessPool
from opforge_worker.validate import TARGET_DTYPES


class RecordingHarness(Harness):
    """A real harness that records the tests it runs; its first test starts once every harness
    of the pool has one (the pool's size in ``together``)."""

    def __init__(self, runs: list, together: threading.Barrier):
        super().__init__(device_kind=DEVICE)
        self.runs, self.together = runs, together

    def run_test(self, payload, cancel=None):
        first = all(harness is not self for harness, _ in self.runs)
        self.runs.append((self, payload["op"]))
        if first:
            self.together.wait(timeout=60)
        return super().run_test(payload, cancel)


def run_at_once(pool: HarnessPool, tests) -> dict:
    results = {}

    def run(name, op, dtypes):
        results[op] = pool.run_test(request(name, op, dtypes, mode="all"), threading.Event())

    threads = [threading.Thread(target=run, args=test) for test in tests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_tests_at_once_run_on_harnesses_of_their_own_and_pass():
    # Three harnesses gate and test side by side. Parsing sources in several threads at once
    # has failed in CPython's AST constructor (see linter.parse_source): a harness_error here.
    tests = [
        ("honest/exp", "exp", list(TARGET_DTYPES)),
        ("honest/amax", "amax", ["float32", "int64"]),
        ("honest/clone", "clone", ["float32", "int32"]),
    ]
    runs: list = []
    together = threading.Barrier(3)
    pool = HarnessPool(3, lambda: RecordingHarness(runs, together))
    try:
        results = run_at_once(pool, tests)
    finally:
        pool.close()

    assert len({harness for harness, _ in runs}) == 3
    for _, op, dtypes in tests:
        assert results[op]["outcome"] == "pass", results[op]["failure"]
        assert list(results[op]["per_dtype"]) == dtypes


def test_a_source_tested_again_goes_to_the_harness_that_tested_it():
    # There its candidate process has the source's kernels loaded. Taking the harness idle the
    # longest instead would alternate between the two below.
    tests = [("honest/clone", "clone", ["float32"]), ("honest/t", "t", ["float32"])]
    runs: list = []
    together = threading.Barrier(2)
    pool = HarnessPool(2, lambda: RecordingHarness(runs, together))
    try:
        run_at_once(pool, tests)
        first_of = {op: harness for harness, op in runs}
        for name, op, dtypes in [tests[0], tests[0], tests[1], tests[1], tests[0]]:
            result = pool.run_test(request(name, op, dtypes, mode="all"), threading.Event())
            assert result["outcome"] == "pass", result["failure"]
    finally:
        pool.close()

    assert len(set(first_of.values())) == 2
    assert [harness is first_of[op] for harness, op in runs[2:]] == [True] * 5
