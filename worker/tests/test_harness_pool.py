"""The worker's harness pool: tests at once run on harnesses of their own, and all pass."""

import threading

from harness_helpers import DEVICE, request

from opforge_worker.harness import Harness
from opforge_worker.jobs import HarnessPool
from opforge_worker.validate import TARGET_DTYPES

TESTS = [
    ("honest/exp", "exp", list(TARGET_DTYPES)),
    ("honest/amax", "amax", ["float32", "int64"]),
    ("honest/clone", "clone", ["float32", "int32"]),
]


class RecordingHarness(Harness):
    """A real harness that records the tests it runs, each starting once all have their harness."""

    def __init__(self, runs: list, together: threading.Barrier):
        super().__init__(device_kind=DEVICE)
        self.runs, self.together = runs, together

    def run_test(self, payload, cancel=None):
        self.runs.append((self, payload["op"]))
        self.together.wait(timeout=60)
        return super().run_test(payload, cancel)


def test_tests_at_once_run_on_harnesses_of_their_own_and_pass():
    # Three harnesses gate and test side by side. Parsing sources in several threads at once
    # has failed in CPython's AST constructor (see linter.parse_source): a harness_error here.
    runs: list = []
    together = threading.Barrier(len(TESTS))
    pool = HarnessPool(3, lambda: RecordingHarness(runs, together))
    results = {}

    def run(name, op, dtypes):
        results[op] = pool.run_test(request(name, op, dtypes, mode="all"), threading.Event())

    threads = [threading.Thread(target=run, args=test) for test in TESTS]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        pool.close()

    assert len({harness for harness, _ in runs}) == 3
    for _, op, dtypes in TESTS:
        assert results[op]["outcome"] == "pass", results[op]["failure"]
        assert list(results[op]["per_dtype"]) == dtypes
