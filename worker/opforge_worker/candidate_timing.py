"""A benchmark's side in the candidate process: the ``benchmark`` request (TIMING.md).

The judge sends one input of a benchmark as two value sets of the same layout (A and B, each
with its reference in the judge) and how to call the baseline; ``run`` times the candidate and
the baseline on them, interleaved, and replies with the timings and, for the judge to check
against the references after all timing, the first timed output of each value set as a call's
reply. Every call of the candidate, warm-up and timed, runs under the same checks as a test's
(``CandidateServer._guarded``: the dispatch recorder, launch counting and the stream check, the
thread watch, the sandbox's audit). On top of them, per timed call:

- fresh inputs: decoded again from the judge's bytes for every call (its layout as OpInfo made
  it), the calls alternating between A and B from the first warm-up call on; the candidate's
  go into three sets of input memory in turn, so that memory always comes back holding the
  other value set's values while the two calls before keep theirs: a result cached by input
  pointer or shape is a stale one from the first timed call on, whatever an allocator reuses;
- ``timing_cache``: an output in memory an earlier repetition's output still holds;
- ``timing_launches``: a timed call launched another number of kernels than the warm-up call
  before timing (work batched across repetitions, or skipped once answers are known);
- ``timing_timer``: the timer's functions no longer those this process started with;
- every later output of a value set is compared, on the device and after its stop event, with
  the first one of that set (within the dtype's tolerance), and with the first one of the other
  set: a repetition that matches only the other set's is stale (``timing_cache`` in the judge),
  one that matches neither is wrong (``timing_repeat``).
"""

from __future__ import annotations

import pickle
from collections import deque

import torch

from opforge_worker import timing
from opforge_worker.checks import CallPolicy, tensor_leaves
from opforge_worker.contract import FailureCheck, Outcome
from opforge_worker.transport import decode_inputs, to_device

#: Repetitions whose outputs stay alive while the next one runs (against the two value sets:
#: an output handed back again is one an earlier repetition still holds).
_HELD_REPETITIONS = 2
#: The candidate's input memory, used in turn: odd, against the two value sets alternating, so
#: that each comes back with the other set's values; more than two, so that the two calls
#: before keep theirs.
_INPUT_MEMORIES = 3
#: Event pairs around nothing, timed like a call, whose median the events' own part of every
#: interval is (TIMING.md).
_EMPTY_MARKS = 20


def run(server, header: dict, blob) -> tuple[dict, bytes]:
    """The reply to one ``benchmark`` request and its tensors' bytes."""
    return _TimedInput(server, header, blob).run()


class _Stop(Exception):
    """A call failed or had findings: its reply ends the benchmark."""

    def __init__(self, reply: dict):
        super().__init__(reply.get("status"))
        self.reply = reply


class _TimedInput:
    def __init__(self, server, header: dict, blob):
        self.server = server
        self.header = header
        self.device = server.device
        view = memoryview(blob)
        sizes = header["sizes"]  # value set A, value set B, the pickled ATen baseline
        ends = [sum(sizes[: i + 1]) for i in range(len(sizes))]
        staged = to_device(view[: ends[1]], self.device)
        self.value_sets = [
            (view[0 : ends[0]], staged[0 : ends[0]]),
            (view[ends[0] : ends[1]], staged[ends[0] : ends[1]]),
        ]
        self.policy = CallPolicy(
            frozenset(header["op_names"]), header["launch_exempt"], header["host_read_allowed"]
        )
        self.protocol = timing.Protocol(**header["protocol"])
        self.timer = timing.make_timer(header["timer"])
        self.flush = timing.L2Flush(self.device, self.protocol.flush_bytes)
        self.candidate_digest = server.loaded_kernels.source
        aten = header["baseline"] == "aten"
        self.baseline = pickle.loads(view[ends[1] : ends[2]]) if aten else server.baseline
        #: A library baseline is a candidate like any other, checked as one.
        self.baseline_policy = None if aten else self.policy
        self.tolerance = header.get("tolerance")
        self.expected_launches: int | None = None
        self.input_memories: list[list[torch.Tensor]] = [[] for _ in range(_INPUT_MEMORIES)]
        self.candidate_calls = 0

    # -- one call ---------------------------------------------------------------------------

    def _call(self, side: str, value_set: int, timed: bool):
        """(reply, result, input tensors, timer mark) of one call of ``side``."""
        data, staged = self.value_sets[value_set]
        function = self.server.namespace[self.header["wrapper"]]
        policy, memory = self.policy, None
        if side == timing.BASELINE:
            function, policy = self.baseline, self.baseline_policy
        else:
            memory = self.input_memories[self.candidate_calls % _INPUT_MEMORIES]
            self.candidate_calls += 1
        inputs = decode_inputs(data, staged=staged, into=memory)
        args, kwargs = inputs["args"], inputs["kwargs"]
        box: dict = {}

        def body():
            if timed:
                box["mark"] = self.timer.start()
            box["result"] = function(*args, **kwargs)
            if timed:
                box["mark"] = self.timer.stop(box["mark"])

        if timed:
            self.flush.flush()
            if isinstance(self.timer, timing.EventTimer):
                self.timer.head_start(self.protocol.host_head_start_us)
        # A kernel compiled for one side is never served to the other (checks.LoadedKernels).
        self.server.loaded_kernels.source = (
            self.candidate_digest if side == timing.CANDIDATE else ""
        )
        try:
            # A timed call's allocations are not poisoned (TIMING.md: fresh outputs).
            reply = self.server._guarded(
                body, self.header["timeout_s"], policy, wait=False, poison=not timed
            )
        finally:
            self.server.loaded_kernels.source = self.candidate_digest
        if reply["status"] != "ok" or reply["findings"]:
            if side == timing.BASELINE and reply["status"] != Outcome.CRASH:
                raise _Stop(_baseline_failed(reply))
            raise _Stop(reply)
        if timed:
            for name in self.timer.tampered():
                reply["findings"].append((FailureCheck.TIMING_TIMER, f"{name} was replaced"))
            if reply["findings"]:
                raise _Stop({**reply, "recycle": True})
        return reply, box.get("result"), tensor_leaves((args, kwargs)), box.get("mark")

    # -- the benchmark ----------------------------------------------------------------------

    def run(self) -> tuple[dict, bytes]:
        try:
            return self._run()
        except _Stop as stop:
            return {"kind": "benchmark", **stop.reply}, b""
        finally:
            # A benchmark that stopped gathered first calls' tensors that belong to no reply
            # (one that ended has collected them already).
            self.server.staging.clear()

    def _run(self) -> tuple[dict, bytes]:
        warmup = max(self.protocol.warmup, 1)
        probes = {}
        for index in range(warmup):
            for side in timing.SIDES:
                last = index == warmup - 1
                # The last warm-up call is on value set B, the first timed one on A.
                reply, *_, mark = self._call(side, (index - warmup) % 2, timed=last)
                if side == timing.CANDIDATE:
                    self.expected_launches = reply["launches"]
                probes[side] = mark
        self._synchronize()
        probe_s = [self.timer.elapsed_us(probes[side]) / 1e6 for side in timing.SIDES]
        repetitions = self.protocol.repetitions(probe_s)

        marks: dict[str, list] = {side: [] for side in timing.SIDES}
        #: value set -> (reply, result, a copy of its values) of its first timed call, its
        #: tensors gathered as the call left them: its input memory is used again, and an output
        #: that is a view of its inputs (an alias the operator allows) changes with it
        first: dict[int, tuple] = {}
        held: deque = deque(maxlen=_HELD_REPETITIONS * len(timing.SIDES))
        agreements: list[tuple[int, torch.Tensor, torch.Tensor | None]] = []
        findings: list = []
        for repetition, value_set, side in timing.schedule(repetitions):
            reply, result, inputs, mark = self._call(side, value_set, timed=True)
            marks[side].append(mark)
            if side == timing.CANDIDATE:
                alias = {"alias_allowed": self.header["alias_allowed"][value_set]}
                leaves = self.server._describe(reply, result, inputs, self.policy, alias)
                findings += self._reuse_and_launches(reply, result, inputs, held, first, repetition)
                findings += reply["findings"]
                if value_set not in first:
                    reply["tensors"], reply["nbytes"] = self.server.staging.add([*leaves, *inputs])
                    first[value_set] = (reply, result, _values_of(result))
                else:
                    own = self._agrees(result, first[value_set][2])
                    other = first.get(1 - value_set)
                    agreements.append(
                        (repetition, own, self._agrees(result, other[2]) if other else None)
                    )
            held.append((result, inputs))
            if findings:
                raise _Stop({**reply, "findings": findings})
        empty = []
        if isinstance(self.timer, timing.EventTimer):
            empty = self.timer.empty_marks(
                self.flush, self.protocol.host_head_start_us, _EMPTY_MARKS
            )
        self._synchronize()
        offset_us = (
            timing.summarize([self.timer.elapsed_us(m) for m in empty]).median if empty else 0.0
        )
        differing = _differing(agreements)
        reply = {
            "kind": "benchmark",
            "status": "ok",
            "findings": [],
            "repetitions": repetitions,
            "timer": self.timer.name,
            "times_us": {
                side: [max(self.timer.elapsed_us(mark) - offset_us, 0.0) for mark in marks[side]]
                for side in timing.SIDES
            },
            "timer_offset_us": offset_us,
            "differing": differing,
            "calls": [first[value_set][0] for value_set in sorted(first)],
        }
        return reply, bytes(self.server.staging.collect())

    def _reuse_and_launches(
        self, reply: dict, result, inputs: list, held: deque, first: dict, repetition: int
    ) -> list:
        found = []
        # An output in its own call's input memory is an alias, which the call's alias check
        # judges; that memory is used again by design (fresh inputs, TIMING.md).
        own_inputs = {tensor.untyped_storage().data_ptr() for tensor in inputs}
        earlier = {
            leaf.untyped_storage().data_ptr()
            for output in [*(output for output, _ in held), *(kept[1] for kept in first.values())]
            for leaf in tensor_leaves(output)
            if leaf.untyped_storage().nbytes()
        } - own_inputs
        if any(
            leaf.untyped_storage().data_ptr() in earlier
            for leaf in tensor_leaves(result)
            if leaf.untyped_storage().nbytes()
        ):
            found.append(
                (
                    FailureCheck.TIMING_CACHE,
                    f"repetition {repetition} returned memory that an earlier "
                    "repetition's output still holds",
                )
            )
        if reply["launches"] != self.expected_launches:
            found.append(
                (
                    FailureCheck.TIMING_LAUNCHES,
                    f"repetition {repetition} launched {reply['launches']} "
                    f"kernels, the call before timing {self.expected_launches}",
                )
            )
        return found

    def _agrees(self, result, reference) -> torch.Tensor:
        """A device bool: ``result`` within tolerance of ``reference`` (another output of the
        candidate's), leaf by leaf; NaN where NaN is."""
        agree = torch.ones((), dtype=torch.bool, device=self.device)
        ours, theirs = tensor_leaves(result), tensor_leaves(reference)
        if len(ours) != len(theirs) or (not ours and result != reference):
            return ~agree
        for a, b in zip(ours, theirs, strict=True):
            if a.shape != b.shape or a.dtype != b.dtype:
                return ~agree
            if a.numel() == 0:
                continue
            if a.dtype.is_floating_point and self.tolerance is not None:
                atol, rtol = self.tolerance
                close = torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
            elif a.dtype.is_floating_point:
                close = (a == b) | (a.isnan() & b.isnan())
            else:
                close = a == b
            agree = agree & close.all()
        return agree

    def _synchronize(self) -> None:
        if self.server.kind.synchronize is None:
            return
        try:
            self.server.kind.synchronize()
        except Exception as error:  # noqa: BLE001 (the candidate's kernels faulted)
            raise _Stop(self.server._classify(error)) from None


def _values_of(result):
    """A copy of ``result``'s tensors, for comparisons after its memory may have changed."""
    leaves = tensor_leaves(result)
    return [leaf.clone() for leaf in leaves] if leaves else result


def _differing(agreements) -> list[list]:
    """[repetition, stale] of each repetition whose output missed its value set's first one:
    stale when it matched the other set's instead."""
    if not agreements:
        return []
    # Read once all timing is done: each bool() waits for the device.
    own = torch.stack([agreed for _, agreed, _ in agreements]).tolist()
    other = [other is not None and bool(other) for _, _, other in agreements]
    return [
        [repetition, bool(stale)]
        for (repetition, _, _), agreed, stale in zip(agreements, own, other, strict=True)
        if not agreed
    ]


def _baseline_failed(reply: dict) -> dict:
    """A baseline that failed is the harness's problem, never the candidate's."""
    detail = reply.get("message") or "; ".join(m for _, m in reply.get("findings", ()))
    return {
        "status": Outcome.HARNESS_ERROR,
        "message": f"the baseline failed on this input: {detail}",
        "findings": [],
        "recycle": True,
    }
