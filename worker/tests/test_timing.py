"""The timing protocol's logic (TIMING.md): statistics, interleaving, repetitions, launch-bound
labels, shape classes, the ladder, and a benchmark holding every slot of a worker."""

import threading
import time

import pytest
import torch

from opforge_worker import benchmark, timing
from opforge_worker import jobs as worker_jobs
from opforge_worker.jobs import HarnessPool
from opforge_worker.samples import SampleCache

DATA = timing.load()


def test_medians_and_interquartile_ranges_interpolate_between_ranks():
    summary = timing.summarize([5.0, 1.0, 3.0, 2.0, 4.0])

    assert (summary.median, summary.iqr) == (3.0, 2.0)
    assert timing.quantile([1.0, 2.0], 0.25) == 1.25
    assert timing.summarize([10.0, 10.0, 10.0, 1000.0]).median == 10.0  # not the mean
    assert timing.summarize([2.0, 4.0]).relative_iqr == pytest.approx(1.0 / 3.0)
    with pytest.raises(ValueError):
        timing.summarize([])


def test_candidate_and_baseline_alternate_and_the_value_sets_take_turns():
    order = timing.schedule(3)

    assert order == [
        (0, 0, "candidate"),
        (0, 0, "baseline"),
        (1, 1, "candidate"),
        (1, 1, "baseline"),
        (2, 0, "candidate"),
        (2, 0, "baseline"),
    ]


def test_repetitions_fill_the_budget_within_their_bounds():
    protocol = DATA.protocol("cuda")

    assert protocol.repetitions([1e-3, 1e-3]) == 100  # 2 ms a repetition: the maximum
    assert protocol.repetitions([0.05, 0.05]) == 20
    assert protocol.repetitions([1.0, 1.0]) == protocol.min_repetitions
    assert protocol.repetitions([0.0, 0.0]) == protocol.max_repetitions


def test_a_baseline_under_the_threshold_is_launch_bound():
    protocol = DATA.protocol("cuda")

    assert protocol.launch_bound(4.0) and protocol.launch_bound(9.99)
    assert not protocol.launch_bound(10.0) and not protocol.launch_bound(250.0)
    assert not DATA.protocol("interpreter").speed_verdicts


def test_shape_classes_bucket_by_elements_with_bounds_inclusive():
    assert [DATA.shape_class(n) for n in (1, 4096, 4097, 1 << 20, (1 << 24) + 1)] == [
        "n<=4K",
        "n<=4K",
        "n<=64K",
        "n<=1M",
        "n>16M",
    ]


def test_geomean_skips_nothing_positive():
    assert timing.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert timing.geomean([]) == 0.0


def test_the_host_timer_sees_a_patched_clock():
    timer = timing.HostTimer()
    original = time.perf_counter
    try:
        time.perf_counter = lambda: 0.0
        assert timer.tampered() == ["time.perf_counter"]
        assert timer.elapsed_us(timer.stop(timer.start())) >= 0.0  # still its own clock
    finally:
        time.perf_counter = original
    assert timer.tampered() == []


def test_an_elementwise_ladder_keeps_the_sample_structure_and_carries_specials():
    from opforge_worker import opinfo as opinfo_db

    exp = opinfo_db.find_opinfo("exp", "")
    ladder = benchmark.ladder_inputs(exp, torch.float32, 0, [1, 4096], DATA)

    assert [t.source for t in ladder] == ["ladder:1", "ladder:4096"]
    assert [t.shape_class for t in ladder] == ["n<=4K", "n<=4K"]
    assert benchmark.elements(ladder[1].first) == 4096
    assert ladder[1].first.layout == ladder[1].second.layout
    expected = ladder[1].second.reference.expected
    assert expected.isnan().any() and expected.isinf().any()  # a constant cannot match both
    assert not ladder[1].first.reference.expected.isnan().any()
    assert benchmark.moved_bytes(ladder[1].first) == 2 * 4096 * 4


def test_inputs_are_the_largest_opinfo_samples_then_the_ladder_within_the_kind_bound():
    from opforge_worker import opinfo as opinfo_db

    exp = opinfo_db.find_opinfo("exp", "")
    protocol = DATA.protocol("interpreter")
    planned = benchmark.plan_inputs(exp, torch.float32, 0, SampleCache(), [], DATA, protocol)

    sources = [t.source for t in planned]
    assert sources[: benchmark.OPINFO_INPUTS] == [s for s in sources if s.startswith("opinfo:")]
    assert [s for s in sources if s.startswith("ladder:")] == [
        "ladder:1",
        "ladder:4096",
        "ladder:65536",
    ]
    assert DATA.ladder(opinfo_db.find_opinfo("sum", "")).name == "reduction"
    assert DATA.ladder(opinfo_db.find_opinfo("add", "")).name == "elementwise"
    assert DATA.ladder(opinfo_db.find_opinfo("cat", "")).name == "joining"  # by its name
    assert DATA.ladder(opinfo_db.find_opinfo("flip", "")) is None


def test_stale_repetitions_are_a_cache_and_wrong_ones_a_repeat_failure():
    assert benchmark._differing_failure([]) is None
    stale = benchmark._differing_failure([[4, True]])
    assert (stale.outcome, stale.check) == ("cheat_detected", "timing_cache")
    wrong = benchmark._differing_failure([[2, False], [4, False]])
    assert (wrong.outcome, wrong.check) == ("accuracy_error", "timing_repeat")
    assert "2 repetitions differ" in wrong.message


class _SlowHarness:
    """Records how many jobs ran at once; a benchmark must run alone."""

    running = 0
    seen: list = []
    lock = threading.Lock()

    def _job(self, kind):
        with self.lock:
            _SlowHarness.running += 1
            _SlowHarness.seen.append((kind, _SlowHarness.running))
        time.sleep(0.2)
        with self.lock:
            _SlowHarness.running -= 1
        return {"kind": kind}

    def run_test(self, payload, cancel):
        return self._job("test")

    def run_benchmark(self, payload, cancel):
        return self._job("benchmark")

    def close(self):
        pass

    def abort(self):
        pass


def test_a_benchmark_waits_for_running_jobs_and_holds_every_slot(monkeypatch):
    monkeypatch.setattr(
        worker_jobs,
        "run_benchmark",
        lambda harness, payload, cancel: harness.run_benchmark(payload, cancel),
    )
    pool = HarnessPool(3, _SlowHarness)
    _SlowHarness.seen = []
    cancel = threading.Event()
    jobs = [
        threading.Thread(target=pool.run_test, args=({"source": f"t{i}"}, cancel)) for i in range(2)
    ]
    jobs.append(threading.Thread(target=pool.run_benchmark, args=({"source": "b"}, cancel)))
    jobs += [
        threading.Thread(target=pool.run_test, args=({"source": f"u{i}"}, cancel)) for i in range(2)
    ]
    for job in jobs:
        job.start()
        time.sleep(0.02)
    for job in jobs:
        job.join(10)

    assert [kind for kind, at_once in _SlowHarness.seen if kind == "benchmark"] == ["benchmark"]
    assert all(at_once == 1 for kind, at_once in _SlowHarness.seen if kind == "benchmark")
    assert max(at_once for _, at_once in _SlowHarness.seen) >= 2  # tests still share the slots
    assert not pool.exclusive


def test_a_waiting_benchmark_is_cancelled():
    pool = HarnessPool(1, _SlowHarness)
    busy = threading.Thread(target=pool.run_test, args=({"source": "t"}, threading.Event()))
    busy.start()
    time.sleep(0.05)
    cancel = threading.Event()
    cancel.set()
    from opforge_worker.connection import JobCancelled

    with pytest.raises(JobCancelled):
        pool.run_benchmark({"source": "b"}, cancel)
    busy.join(5)
    assert not pool.exclusive
