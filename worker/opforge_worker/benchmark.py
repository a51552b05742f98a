"""The ``benchmark`` job: a proved candidate timed against its baseline (TIMING.md).

    payload = run_benchmark(Harness(...), request, cancel)  # benchmark_request -> benchmark_result

The judge plans the inputs (``plan_inputs``): the operator's larger OpInfo samples, a size
ladder for its class, and the request's model sets, each as two value sets of one layout (the
samples of ``seed`` and of ``seed + 1``) with their references. Each input goes to the warm
candidate process as one ``benchmark`` request (candidate_timing.py), which times the candidate
and the baseline interleaved and sends back the timings and the first timed output of each value
set; the judge checks those against the references after all timing, and what the candidate
process compared of the other repetitions. The process, its sandbox, the static gate and the
loading of the source are the test job's (``harness._TestRun``): a benchmark takes no path of its
own into the candidate process.

The outcome is pass only when every input's outputs matched and no check fired; any failure
ends the benchmark and no timing of it counts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import pickle
import threading
import time
from dataclasses import dataclass
from functools import cache

import torch
from torch.utils import _pytree as pytree

from opforge_worker import contract, device_kinds, sample_sets, timing
from opforge_worker import opinfo as opinfo_db
from opforge_worker.contract import FailureCheck, Outcome
from opforge_worker.harness import JobCancelled, _StopTest, _TestRun
from opforge_worker.judge import Judge, ReplyError, report_verdict
from opforge_worker.results import Failure
from opforge_worker.samples import PreparedSample, prepare

#: The largest samples of OpInfo's own sets (``sample_inputs``, ``reference_inputs``) timed.
OPINFO_INPUTS = 2
#: The inputs of one model set timed: the largest captured calls.
MODEL_INPUTS = 4
LADDER = "ladder"
OPINFO = "opinfo"


@dataclass(frozen=True)
class TimedInput:
    """One input of a benchmark: two value sets of the same layout."""

    source: str  # opinfo:<set>:<index>, ladder:<elements>, model:<name>:<index>
    shape_class: str
    first: PreparedSample  # value set A
    second: PreparedSample  # value set B


# -- inputs -----------------------------------------------------------------------------------


def elements(sample: PreparedSample) -> int:
    """Elements of the sample's largest tensor argument."""
    shapes, _ = sample.layout
    return max((math.prod(shape) for shape, _ in shapes), default=0)


def moved_bytes(sample: PreparedSample) -> int:
    """What the op must move at least: its tensor inputs read once, its outputs written once."""
    shapes, _ = sample.layout
    read = sum(math.prod(shape) * dtype.itemsize for shape, dtype in shapes)
    written = sum(
        leaf.numel() * leaf.element_size()
        for leaf in pytree.tree_leaves(sample.reference.expected)
        if isinstance(leaf, torch.Tensor)
    )
    return read + written


def ladder_shape(count: int, dims: int) -> tuple[int, ...]:
    """``count`` elements in the sample's number of dims (at least one), all in the last."""
    return (1,) * (max(dims, 1) - 1) + (count,)


def _resized(sample, dtype: torch.dtype, shape: tuple[int, ...], name: str):
    """``sample`` with its tensors of ``dtype`` (all of the input's shape) tiled to ``shape``."""
    count = math.prod(shape)

    def each(value):
        if not isinstance(value, torch.Tensor) or value.dtype != dtype:
            return value
        flat = value.reshape(-1)
        return flat.repeat(-(-count // flat.numel()))[:count].reshape(shape).clone()

    sample_input, args, kwargs = pytree.tree_map(each, (sample.input, sample.args, sample.kwargs))
    return type(sample)(sample_input, args=tuple(args), kwargs=dict(kwargs), name=name)


#: Written over a few elements of the second value set's input, where the op takes any value:
#: an output that does not depend on the input (a constant that matches the first set's
#: finite values) then misses the second set's.
_SPECIALS = (float("nan"), float("inf"), float("-inf"))


def _with_specials(opinfo, sample, dtype: torch.dtype):
    if not dtype.is_floating_point or not sample_sets.is_value_safe(opinfo):
        return sample
    flat = _first_input(sample).view(-1)
    count = flat.numel()
    for position, value in zip((0, count // 2, count - 1), _SPECIALS, strict=True):
        flat[position] = value
    return sample


def _first_input(sample) -> torch.Tensor | None:
    """The sample's input tensor, or the first of its input list (cat's), None for neither."""
    value = sample.input
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return value if isinstance(value, torch.Tensor) else None


def _ladder_base(samples, dtype: torch.dtype) -> int | None:
    """The index of the largest sample whose tensors of ``dtype`` all have the input's shape
    (the shape of every tensor of its input list, where the input is one)."""

    def eligible(sample):
        first = _first_input(sample)
        if first is None or first.dtype != dtype:
            return False
        operands = [
            leaf
            for leaf in pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
            if isinstance(leaf, torch.Tensor) and leaf.dtype == dtype
        ]
        return all(t.shape == first.shape and t.numel() for t in operands)

    indices = [i for i, sample in enumerate(samples) if eligible(sample)]
    return max(indices, key=lambda i: _first_input(samples[i]).numel(), default=None)


def ladder_inputs(opinfo, dtype: torch.dtype, seed: int, counts, data: timing.TimingData):
    """The ladder's inputs: the largest eligible OpInfo sample's structure, its tensors tiled
    to each count, the values of ``seed`` and of ``seed + 1``."""
    firsts = opinfo_db.samples_for(opinfo, "cpu", dtype, seed)
    seconds = opinfo_db.samples_for(opinfo, "cpu", dtype, seed + 1)
    base = _ladder_base(firsts, dtype)
    if base is None or base >= len(seconds):
        return []
    dims = _first_input(firsts[base]).dim()
    found = []
    for count in counts:
        shape = ladder_shape(count, dims)
        name = f"ladder: {count} elements (sample #{base})"
        first = _resized(firsts[base], dtype, shape, name)
        second = _with_specials(opinfo, _resized(seconds[base], dtype, shape, name), dtype)
        pair = [prepare(opinfo, sample, LADDER, count, dtype) for sample in (first, second)]
        if all(p.reference is not None for p in pair):
            found.append(TimedInput(f"{LADDER}:{count}", data.shape_class(count), *pair))
    return found


def _paired(samples_cache, opinfo, dtype, seed, set_name: str) -> list[tuple[int, tuple]]:
    firsts = samples_cache.samples(opinfo, dtype, seed, set_name)
    seconds = samples_cache.samples(opinfo, dtype, seed + 1, set_name)
    return [
        (index, (a, b))
        for index, (a, b) in enumerate(zip(firsts, seconds, strict=False))
        if a.layout == b.layout and a.reference is not None and b.reference is not None
    ]


def plan_inputs(
    opinfo, dtype: torch.dtype, seed: int, samples_cache, models, data, protocol
) -> list[TimedInput]:
    """Every input of a benchmark of ``dtype``, in the order they are timed."""
    planned: list[TimedInput] = []
    ours = []
    for set_name in (sample_sets.SAMPLE_INPUTS, sample_sets.REFERENCE_INPUTS):
        ours += [
            (f"{OPINFO}:{set_name}:{index}", pair)
            for index, pair in _paired(samples_cache, opinfo, dtype, seed, set_name)
        ]
    ours.sort(key=lambda item: -elements(item[1][0]))
    planned += [
        TimedInput(label, data.shape_class(elements(a)), a, b)
        for label, (a, b) in ours[:OPINFO_INPUTS]
    ]
    ladder = data.ladder(opinfo)
    counts = [n for n in (ladder.elements if ladder else ()) if n <= protocol.ladder_max_elements]
    planned += ladder_inputs(opinfo, dtype, seed, counts, data)
    for name in models:
        pairs = _paired(samples_cache, opinfo, dtype, seed, name)
        pairs.sort(key=lambda item: -elements(item[1][0]))
        planned += [
            TimedInput(f"{name}:{index}", name, a, b) for index, (a, b) in pairs[:MODEL_INPUTS]
        ]
    return planned


# -- the run ----------------------------------------------------------------------------------


@cache
def _device_name(kind: str) -> str:
    try:
        return device_kinds.lookup(kind).toolchain()["device"]
    except RuntimeError:
        return ""


class BenchmarkRun(_TestRun):
    """One ``run_benchmark`` call: a test run's process, gate and loading, timing instead."""

    kind = contract.JobKind.BENCHMARK

    def __init__(self, harness, request: dict, cancel):
        super().__init__(harness, request, cancel)
        self.timings: list[dict] = []
        self.baseline_label = ""
        self.baseline_blob = b""
        self.baseline_loaded_in = None
        self.data = timing.load()
        self.protocol = self.data.protocol(harness.device_kind)

    def run(self) -> dict:
        began = time.perf_counter()
        try:
            self._run()
        except _StopTest:
            pass
        except JobCancelled:
            raise
        except Exception as error:  # noqa: BLE001 (a harness bug must not read as a verdict)
            self.harness._discard_process()
            self.result.record_failure(
                Failure(Outcome.HARNESS_ERROR, FailureCheck.HARNESS, f"harness failure: {error!r}")
            )
        failure = self.result.failure
        counted = [] if failure else self.timings
        steady = [t for t in counted if not t["launch_bound"]] or counted
        payload = contract.BenchmarkResult(
            outcome=failure.outcome if failure else Outcome.PASS.value,
            baseline=self.baseline_label,
            timer=self.harness.kind.timer,
            timings=[contract.ShapeTiming.from_dict(t) for t in counted],
            geomean_speedup=timing.geomean([t["speedup"] for t in steady]),
            noise=max(
                (
                    summary
                    for t in counted
                    for summary in (
                        t["candidate_iqr_us"] / t["candidate_us"] if t["candidate_us"] else 0.0,
                        t["baseline_iqr_us"] / t["baseline_us"] if t["baseline_us"] else 0.0,
                    )
                ),
                default=0.0,
            ),
            failure=None,
            run_s=round(time.perf_counter() - began, 6),
        ).to_dict()
        payload["failure"] = failure.to_payload() if failure else None
        return self.harness._stable_names.payload(payload)

    def _bad_request(self, detail: str):
        self._stop(
            Failure(Outcome.HARNESS_ERROR, FailureCheck.HARNESS, f"bad benchmark request: {detail}")
        )

    def _run(self) -> None:
        try:
            request = self.spec = contract.BenchmarkRequest.from_dict(self.request)
        except contract.ContractError as error:
            self._bad_request(error.detail)
        self._install_model_sets(request)
        opinfo = opinfo_db.find_opinfo(request.op, request.variant)
        if opinfo is None:
            self._bad_request(f"no OpInfo named {request.op!r} with variant {request.variant!r}")
        self._static_gate()
        self._gate_baseline(request)
        self.judge = Judge(opinfo, self.harness.settings, self.harness.kind)
        self.seed = request.seed
        self.timeout_s = request.timeout_s
        if request.baseline_source:
            digest = hashlib.sha256(request.baseline_source.encode()).hexdigest()
            self.baseline_label = f"library:{digest[:16]}"
        else:
            self.baseline_label = "aten"
            try:
                self.baseline_blob = pickle.dumps(opinfo.op)
            except (pickle.PicklingError, AttributeError, TypeError):
                self._bad_request(
                    f"{request.op} has no ATen function this worker can call by name: "
                    "give baseline_source"
                )
        models = list(request.model_samples or {})
        for dtype in self.result.dtypes:
            torch_dtype = opinfo_db.dtype_from_name(dtype)
            if torch_dtype not in opinfo.supported_dtypes("cpu"):
                self._stop(
                    Failure(
                        Outcome.HARNESS_ERROR, FailureCheck.HARNESS, f"no CPU reference for {dtype}"
                    )
                )
            inputs = plan_inputs(
                opinfo,
                torch_dtype,
                self.seed,
                self.harness.samples,
                models,
                self.data,
                self.protocol,
            )
            if not inputs:
                self._stop(
                    Failure(
                        Outcome.HARNESS_ERROR, FailureCheck.HARNESS, f"no input to time for {dtype}"
                    )
                )
            for timed in inputs:
                self._check_cancel()
                self._time(dtype, timed)

    def _gate_baseline(self, request) -> None:
        gate = self.harness.static_gate
        if gate is None or not request.baseline_source:
            return
        refused = gate.refused(request.baseline_source, request.op, request.baseline_wrapper)
        if refused:
            self._stop(
                Failure(
                    Outcome.HARNESS_ERROR,
                    FailureCheck.HARNESS,
                    f"the library baseline is refused by the static gate: {refused[0][1]}",
                )
            )

    def _process_with_baseline(self):
        process = self._loaded_process()
        if not self.spec.baseline_source or self.baseline_loaded_in is process:
            return process
        path = process.new_job_dir() / "baseline.py"
        path.write_text(self.spec.baseline_source)
        header = {
            "cmd": "load_baseline",
            "path": str(path),
            "wrapper": self.spec.baseline_wrapper or self.spec.wrapper,
            "timeout_s": self.timeout_s,
        }
        reply, _ = self._awaited(
            process, lambda: process.call(header, b"", self.timeout_s, self.cancel)
        )
        failure = reply if isinstance(reply, Failure) else report_verdict(reply)
        if failure is not None:
            self._stop(
                Failure(
                    Outcome.HARNESS_ERROR,
                    FailureCheck.HARNESS,
                    f"the library baseline did not load: {failure.message}",
                )
            )
        self.baseline_loaded_in = process
        return process

    def _time(self, dtype: str, timed: TimedInput) -> None:
        process = self._process_with_baseline()
        first, second = timed.first, timed.second
        header = self.judge.batch_request(
            [first.reference, second.reference],
            [len(first.inputs), len(second.inputs), len(self.baseline_blob)],
            self.spec.wrapper,
            self.timeout_s,
        )
        tolerance = self.judge.tolerance_for(opinfo_db.dtype_from_name(dtype))
        header.update(
            cmd="benchmark",
            baseline="library" if self.spec.baseline_source else "aten",
            protocol=dataclasses.asdict(self.protocol),
            timer=self.harness.kind.timer,
            tolerance=[tolerance.atol, tolerance.rtol] if tolerance else None,
        )
        blob = first.inputs + second.inputs + self.baseline_blob
        reply, data = self._awaited(
            process, lambda: process.call(header, blob, self.timeout_s, self.cancel)
        )
        failure = reply if isinstance(reply, Failure) else self._judged(reply, data, timed)
        if isinstance(reply, dict) and reply.get("recycle"):
            self.harness._discard_process()
        if failure is not None:
            failure.dtype, failure.sample_set = dtype, timed.source
            failure.sample = failure.sample or first.label()
            self._stop(failure)
        self.timings.append(self._shape_timing(dtype, timed, reply))

    def _judged(self, reply: dict, data, timed: TimedInput) -> Failure | None:
        """The benchmark's verdict on one input, after its timing: what the candidate process
        found, then its first outputs against the references, then its other repetitions."""
        try:
            if reply.get("kind") != "benchmark":
                raise ReplyError(f"a {reply.get('kind')!r} reply to a benchmark")
            failure = report_verdict(reply)
            if failure is not None:
                return failure
            calls = reply["calls"]
            if len(calls) != 2:
                raise ReplyError("a benchmark reply without both value sets' outputs")
            view, position = memoryview(data), 0
            # Each value set's output is checked against the other's reference too: a result
            # cached from any call of the other set (its warm-up included) is a stale one.
            pairs = ((timed.first, timed.second), (timed.second, timed.first))
            for call, (sample, other) in zip(calls, pairs, strict=True):
                size = call.get("nbytes", 0)
                failure = self.judge.verdict(
                    call, view[position : position + size], sample.reference, other.reference
                )
                position += size
                if failure is not None:
                    return _as_timing_cache(failure)
            if position != len(data):
                raise ReplyError("the benchmark reply's outputs do not account for its bytes")
        except (ReplyError, KeyError, TypeError) as error:
            self.harness._discard_process()
            return Failure(Outcome.HARNESS_ERROR, FailureCheck.HARNESS, f"benchmark reply: {error}")
        return _differing_failure(reply.get("differing") or [])

    def _shape_timing(self, dtype: str, timed: TimedInput, reply: dict) -> dict:
        candidate = timing.summarize(reply["times_us"][timing.CANDIDATE])
        baseline = timing.summarize(reply["times_us"][timing.BASELINE])
        moved = moved_bytes(timed.first)
        achieved = moved / candidate.median / 1e3 if candidate.median > 0 else 0.0
        peak = self.harness.kind.peak_memory_gbps.get(_device_name(self.harness.device_kind))
        return {
            "shape_class": timed.shape_class,
            "source": timed.source,
            "dtype": dtype,
            "shape": timed.first.description,
            "elements": elements(timed.first),
            "bytes": moved,
            "launch_bound": self.protocol.launch_bound(baseline.median),
            "repetitions": int(reply["repetitions"]),
            "candidate_us": candidate.median,
            "candidate_iqr_us": candidate.iqr,
            "baseline_us": baseline.median,
            "baseline_iqr_us": baseline.iqr,
            "speedup": baseline.median / candidate.median if candidate.median > 0 else 0.0,
            "achieved_gbps": achieved,
            "peak_share": achieved / peak if peak else None,
        }


def _as_timing_cache(failure: Failure) -> Failure:
    """A stale output in a benchmark is a result reused across its repetitions."""
    if failure.check != FailureCheck.FRESH_INPUTS:
        return failure
    failure.check = FailureCheck.TIMING_CACHE
    failure.message = "timing_cache: " + failure.message.removeprefix("fresh_inputs: ")
    return failure


def _differing_failure(differing: list) -> Failure | None:
    """The failure of repetitions whose outputs missed their value set's checked one."""
    if not differing:
        return None
    repetition, stale = differing[0]
    if stale:
        return Failure(
            Outcome.CHEAT_DETECTED,
            FailureCheck.TIMING_CACHE,
            f"timing_cache: repetition {repetition}'s output is the other value set's: "
            "a result reused across repetitions",
        )
    return Failure(
        Outcome.ACCURACY_ERROR,
        FailureCheck.TIMING_REPEAT,
        f"timing_repeat: repetition {repetition}'s output differs from the checked output of "
        f"the same inputs ({len(differing)} repetitions differ): right only on some calls",
    )


def run_benchmark(harness, request: dict, cancel: threading.Event | None = None) -> dict:
    """Time a proved candidate against its baseline on ``harness``'s candidate process (TIMING.md);
    returns the benchmark_result payload. Here, not a Harness method, so that the harness does
    not import the benchmark that builds on it."""
    with harness._lock:
        return BenchmarkRun(harness, request, cancel or threading.Event()).run()
