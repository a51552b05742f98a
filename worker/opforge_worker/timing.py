"""The timing protocol of a benchmark (TIMING.md): its data, its statistics and its timers.

Read by the candidate process (which times), by the judge (which summarizes and labels) and by
the GPU benches under bench/; nothing here imports the harness. The timers hold the functions
they call from the moment this module is imported, before any candidate runs, and say when the
names they came from no longer point at them (``Timer.tampered``): a candidate that patches
``torch.cuda.Event`` or ``time.perf_counter`` changes neither what is measured nor goes unseen.
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from opforge_worker.package_data import data_path

TIMING_PATH = data_path("timing.yaml")

#: The sides of a benchmark, in the order each repetition runs them.
CANDIDATE, BASELINE = "candidate", "baseline"
SIDES = (CANDIDATE, BASELINE)

#: What measured, as benchmark_result.timer says it.
CUDA_EVENTS, PERF_COUNTER = "cuda_events", "perf_counter"


@dataclass(frozen=True)
class ShapeClass:
    name: str
    max_elements: int | None  # None: no bound (the last class)


@dataclass(frozen=True)
class Protocol:
    """One device kind's entry of ``protocols``."""

    speed_verdicts: bool
    warmup: int
    min_repetitions: int
    max_repetitions: int
    budget_s: float
    flush_bytes: int
    host_head_start_us: float
    launch_bound_us: float
    ladder_max_elements: int

    def repetitions(self, seconds_per_call: Sequence[float]) -> int:
        """Repetitions of each side that fit ``budget_s``, from one untimed call of each side."""
        per_repetition = sum(max(s, 0.0) for s in seconds_per_call)
        if per_repetition <= 0:
            return self.max_repetitions
        fitting = int(self.budget_s / per_repetition)
        return max(self.min_repetitions, min(self.max_repetitions, fitting))

    def launch_bound(self, baseline_us: float) -> bool:
        """Whether a baseline this fast measures a launch rather than a kernel."""
        return baseline_us < self.launch_bound_us


@dataclass(frozen=True)
class Ladder:
    name: str
    opinfo_classes: frozenset[str]  # the OpInfo classes (by name) whose operators it times
    ops: frozenset[str]  # and operators by name, whatever their class
    elements: tuple[int, ...]


@dataclass(frozen=True)
class TimingData:
    shape_classes: tuple[ShapeClass, ...]
    protocols: dict[str, Protocol]
    ladders: tuple[Ladder, ...]

    def ladder(self, opinfo) -> Ladder | None:
        """The ladder of ``opinfo``'s class or name, None for none."""
        from opforge_worker.opinfo import class_names  # torch: not for device_kinds' importers

        names = class_names(opinfo)
        return next(
            (
                ladder
                for ladder in self.ladders
                if ladder.opinfo_classes & names or opinfo.name in ladder.ops
            ),
            None,
        )

    def shape_class(self, elements: int) -> str:
        """The class of an input whose largest tensor has ``elements``."""
        for shape_class in self.shape_classes:
            if shape_class.max_elements is None or elements <= shape_class.max_elements:
                return shape_class.name
        raise ValueError("timing.yaml: the last shape class must have no bound")

    def protocol(self, device_kind: str) -> Protocol:
        try:
            return self.protocols[device_kind]
        except KeyError:
            raise ValueError(
                f"timing.yaml has no protocol for device kind {device_kind!r}"
            ) from None


@cache
def load(path: str | None = None) -> TimingData:
    """timing.yaml; ValueError naming the key when it is malformed."""
    where = Path(path or TIMING_PATH)
    raw = yaml.safe_load(where.read_text())
    try:
        classes = tuple(
            ShapeClass(str(entry["name"]), entry["max_elements"]) for entry in raw["shape_classes"]
        )
        bounds = [c.max_elements for c in classes]
        if bounds[-1] is not None or any(
            b is None or b <= a for a, b in zip([0, *bounds[:-2]], bounds[:-1], strict=True)
        ):
            raise ValueError("shape_classes: ascending bounds, the last one null")
        maxima = raw["ladder_max_elements"]
        protocols = {
            kind: Protocol(
                speed_verdicts=bool(entry["speed_verdicts"]),
                warmup=int(entry["warmup"]),
                min_repetitions=int(entry["min_repetitions"]),
                max_repetitions=int(entry["max_repetitions"]),
                budget_s=float(entry["budget_s"]),
                flush_bytes=int(entry["flush_bytes"]),
                host_head_start_us=float(entry["host_head_start_us"]),
                launch_bound_us=float(entry["launch_bound_us"]),
                ladder_max_elements=int(maxima[kind]),
            )
            for kind, entry in raw["protocols"].items()
        }
        ladders = tuple(
            Ladder(
                name,
                frozenset(entry.get("opinfo_classes", ())),
                frozenset(entry.get("ops", ())),
                tuple(int(n) for n in entry["elements"]),
            )
            for name, entry in raw["ladders"].items()
        )
    except (KeyError, TypeError, IndexError) as error:
        raise ValueError(f"{where}: missing or malformed key: {error!r}") from None
    for protocol in protocols.values():
        if not 1 <= protocol.min_repetitions <= protocol.max_repetitions:
            raise ValueError(f"{where}: protocols need 1 <= min_repetitions <= max_repetitions")
    return TimingData(classes, protocols, ladders)


# -- statistics -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    median: float
    iqr: float  # the interquartile range, third quartile less the first

    @property
    def relative_iqr(self) -> float:
        return self.iqr / self.median if self.median > 0 else 0.0


def quantile(samples: Sequence[float], q: float) -> float:
    """The ``q`` quantile, interpolated between the closest ranks (numpy's default)."""
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("no samples")
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(samples: Sequence[float]) -> Summary:
    return Summary(quantile(samples, 0.5), quantile(samples, 0.75) - quantile(samples, 0.25))


def geomean(values: Sequence[float]) -> float:
    positive = [v for v in values if v > 0]
    if not positive:
        return 0.0
    return math.exp(sum(math.log(v) for v in positive) / len(positive))


def schedule(repetitions: int, value_sets: int = 2) -> list[tuple[int, int, str]]:
    """(repetition, value set, side) in the order they run: candidate and baseline interleaved
    (A B A B ...), each repetition on the next value set in turn, so that a result reused
    across calls is a stale one."""
    return [(r, r % value_sets, side) for r in range(repetitions) for side in SIDES]


# -- timers -----------------------------------------------------------------------------------

_perf_counter = time.perf_counter


class Timer:
    """Times one call: ``start``, the call, ``stop``; ``elapsed_us`` once the device is done."""

    name = ""

    def tampered(self) -> list[str]:
        """The names this timer's functions came from that point elsewhere now."""
        return []


class HostTimer(Timer):
    """``time.perf_counter`` around the call: the interpreter's, where kernels run on the host
    as they launch. Logic only: no speed verdict comes from it."""

    name = PERF_COUNTER

    def start(self):
        return _perf_counter()

    def stop(self, started):
        return _perf_counter() - started

    def elapsed_us(self, mark) -> float:
        return mark * 1e6

    def tampered(self) -> list[str]:
        return [] if time.perf_counter is _perf_counter else ["time.perf_counter"]


class EventTimer(Timer):
    """A pair of CUDA events around the call on the current stream: the device's own clock,
    read after one synchronization at the end of all repetitions."""

    name = CUDA_EVENTS

    def __init__(self):
        import torch

        self._torch_cuda = torch.cuda
        self._event = torch.cuda.Event
        self._record = torch.cuda.Event.record
        self._elapsed = torch.cuda.Event.elapsed_time
        self._sleep = torch.cuda._sleep
        self._cycles_per_us = _clock_mhz(torch)

    def head_start(self, microseconds: float) -> None:
        """Queue ``microseconds`` of device time (a spin kernel): the host's part of the next
        call runs while it does, so that the events time the device's part."""
        if microseconds > 0:
            self._sleep(int(microseconds * self._cycles_per_us))

    def start(self):
        event = self._event(enable_timing=True)
        self._record(event)
        return event

    def stop(self, started):
        end = self._event(enable_timing=True)
        self._record(end)
        return started, end

    def elapsed_us(self, mark) -> float:
        started, end = mark
        return self._elapsed(started, end) * 1e3

    def empty_marks(self, flush: L2Flush, head_start_us: float, count: int) -> list:
        """``count`` event pairs around nothing, each placed as a timed call's: what the events
        add to an interval by themselves, subtracted from every timed call (TIMING.md)."""
        marks = []
        for _ in range(count):
            flush.flush()
            self.head_start(head_start_us)
            marks.append(self.stop(self.start()))
        return marks

    def tampered(self) -> list[str]:
        changed = []
        if self._torch_cuda.Event is not self._event:
            changed.append("torch.cuda.Event")
        if self._event.record is not self._record:
            changed.append("torch.cuda.Event.record")
        if self._event.elapsed_time is not self._elapsed:
            changed.append("torch.cuda.Event.elapsed_time")
        if self._torch_cuda._sleep is not self._sleep:
            changed.append("torch.cuda._sleep")
        return changed


def _clock_mhz(torch) -> float:
    """The device's clock in MHz (cycles per microsecond), for the spin kernel's length."""
    try:
        return float(torch.cuda.get_device_properties(0).clock_rate) / 1e3
    except (AttributeError, RuntimeError):
        return 2000.0


def make_timer(timer: str) -> Timer:
    return EventTimer() if timer == CUDA_EVENTS else HostTimer()


class L2Flush:
    """A buffer larger than the device's L2, read by a plain torch reduction before each timed
    call: whatever either side left in the cache is gone. A read, not a write: a fill leaves the
    cache full of dirty lines that the timed kernel then pays to write back (TIMING.md). The
    reduction is ATen's own kernel, issued by the harness outside the call's dispatch recorder
    and before the timer starts."""

    def __init__(self, device, nbytes: int):
        import torch

        self._buffer = torch.ones(max(nbytes // 4, 1), dtype=torch.int32, device=device)
        self._sink = torch.empty((), dtype=torch.int64, device=device)
        self._sum = torch.sum

    def flush(self) -> None:
        self._sum(self._buffer, dim=0, dtype=self._sink.dtype, out=self._sink)


# -- the persisting L2 window -----------------------------------------------------------------

#: CU_LIMIT_PERSISTING_L2_CACHE_SIZE of the CUDA driver API.
_PERSISTING_L2_LIMIT = 0x06


def no_persisting_l2() -> int | None:
    """Set the current context's persisting-L2 set-aside to 0 bytes, so that an access-policy
    window (``cudaStreamSetAttribute``) keeps nothing in L2 across calls; the set-aside read
    back, None where the driver is not reachable."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    if driver.cuCtxSetLimit(_PERSISTING_L2_LIMIT, ctypes.c_size_t(0)) != 0:
        return None
    return persisting_l2_bytes(driver)


def persisting_l2_bytes(driver=None) -> int | None:
    """The current context's persisting-L2 set-aside, None where it cannot be read."""
    try:
        driver = driver or ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    value = ctypes.c_size_t(0)
    if driver.cuCtxGetLimit(ctypes.byref(value), _PERSISTING_L2_LIMIT) != 0:
        return None
    return value.value
