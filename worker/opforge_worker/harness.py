"""The validation harness: the public API the device worker calls for ``test`` jobs.

    h = Harness(device_kind="interpreter", tolerances_path=None, scratch_root=None)
    h.start_process()  # optional: the candidate process starts now, while the caller works on
    payload = h.run_test(request, cancel=None)  # request/result: messages/PROTOCOL.md "test"
    h.close()

Before a candidate runs, the harness lints its source with the device kind's linter profile and
refuses it when it breaks one of the profile's ``refused_before_test`` rules
(``Profile.gate_verdict``): ``cheat_detected`` (check ``static``) when one broken rule is of the
``cheat`` class (reflection, private and dunder attributes, forbidden modules and builtins,
aliasing or patching modules, classes), else ``cheat_detected`` (check ``fallback``) when the
wrapper calls a torch function that computes, else ``lint_violation`` (check ``static``: a
mistake of dialect or form: a name the profile does not have, a method that computes on the
host, an import of a module it does not have, autotuning beyond its bounds). The findings list
every refused violation, those that decided the outcome first. The
dynamic checks run in the candidate's own interpreter, where code that can
reflect reaches them (a dispatch mode's findings, a traceback's frames, a hook's globals) and can
erase what they saw; they hold only against code that cannot reach them, and this static gate
keeps such code from running. It does not depend on a ``lint`` job having run first: a ``test``
job's verdict stands alone. A harness remembers the gate's verdict on the sources it saw last,
so that validating a library again lints none of them again. ``static_gate=False`` is for tests
of the dynamic layer on its own.

The caller's process is the judge: it generates the samples on CPU from the request's seed,
computes the reference with CPU ATen, and compares. A test draws the sample sets its request names
(``sample_sets``, default every one), in ``sample_sets.SETS`` order: OpInfo's ``sample_inputs``,
then the larger and generated sets (``sample_sets.py``). Samples and references are prepared once
per (operator, variant, dtype, seed, set) and cached (``samples.py``). One warm candidate process
(``sandbox.CandidateProcess``) runs the candidates, one after another; it is replaced after a
crash, a timeout, a CUDA error, after a call that tampered with the checks or reached for them
(frames, objects, ctypes: the process is no longer trusted), and after a load or a batch that
left the process changed for later sources (``candidate.py``: the change is the source's cheat
when its test had no failure yet); its replacement starts at once, in the background, so that
neither the verdict nor the next test waits for its start-up. A refused attempt at harm (the
network, files outside scratch, processes, threads) is a cheat but keeps the process: the action
did not happen, and the process is verified after it as after any source, so that a refusal
costs the call, not the start of a new process.
cuda and interpreter take exactly the same path; the device kind changes only the candidate
process's environment and where it puts the inputs.

A result's texts name nothing of the harness's scratch directory (``_StableNames``): the
candidate's file is "candidate.py" in every traceback, compile log, message and output, so that
the same failure is byte-identical feedback whichever process and job directory ran it.

Every sample is called twice: with its inputs, then with fresh values of the same shapes (the
sample at the same index of the same set at ``seed + 1``), so that answers cached across calls
fail. A failure names the set of its sample and the sample's index within it. A wrong result on
the fresh values is ``cheat_detected`` (check ``fresh_inputs``) only when it is stale, the first
call's reference and not the fresh one; otherwise it is the ``accuracy_error`` it looks like.

A requested dtype the OpInfo has no CPU reference for in this torch is skipped with its reason
(``per_dtype``); the others are tested, and the test passes when they all pass. When no
requested dtype can be tested, the verdict is ``harness_error``.

The calls of one dtype, the samples of all its sets one after another, go to the candidate process
in batches (one request of at most ``_BATCH_BYTES`` of inputs), so that a warm validation does not
pay a round trip per call nor per set, and the judge plans each batch in groups: the first call
alone, the rest ``_GROUP_CALLS`` at a time. The candidate process waits for the device once per
group and sends the group's replies together (``candidate.py``): on a GPU shared by several
candidate processes, every wait and every copy to the host can cost a context switch, which a group
pays once. The judge checks every reply in order exactly as it would one call's, each call with its
own ``timeout_s``: the replies are the progress markers that put a death or a timeout on the right
sample. Where a group makes that uncertain, the judge does not guess. A death, a timeout or a
device fault while a group of more than one call was in flight could be any of its calls'; the
judge then replaces the process and runs the test on from that sample one call at a time, as it
runs the first call of every batch, so that the failure lands on the call that causes it. Its
verdict is the one a test run one call at a time from the start would give; a hang on a later
sample costs its time limit twice. At the first failure the judge tells the candidate process to
stop and drops the replies to calls it ran past it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import shutil
import tempfile
import threading
import traceback
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path

import torch

from opforge_worker import compile_cache as compile_cache_module
from opforge_worker import contract, device_kinds, model_sets, sample_sets
from opforge_worker import opinfo as opinfo_db
from opforge_worker import samples as samples_module
from opforge_worker.backend import BackendSpec
from opforge_worker.contract import FailureCheck, Outcome
from opforge_worker.judge import Judge, Reference, ReplyError, report_verdict
from opforge_worker.linter import Profile, lint_source, load_profile
from opforge_worker.linter.profile import REFUSAL_CLASSES
from opforge_worker.results import Failure, ResultBuilder
from opforge_worker.samples import PreparedSample, SampleCache
from opforge_worker.sandbox import (
    CallCancelled,
    CandidateDied,
    CandidateProcess,
    CandidateProtocolError,
    CandidateTimedOut,
    SandboxStartError,
    candidate_options,
)
from opforge_worker.settings import load_settings

log = logging.getLogger("opforge_worker.harness")

#: Crashes and timeouts after which a test in mode ``all`` stops: each costs a fresh process.
_MAX_PROCESS_DEATHS = 3
#: The inputs one batch of calls may carry (a sample larger than this goes alone).
_BATCH_BYTES = 64 << 20
#: The calls of a group, after a batch's first call, which goes alone: the candidate process
#: waits for the device once per group.
_GROUP_CALLS = 16
#: The sources whose static-gate verdict a harness remembers: a library's kernels, validated
#: again and again (the generation loop's attempts, re-validations after a compiler drop).
_GATED_SOURCES = 1024


class JobCancelled(Exception):
    """``run_test`` stopped because its cancel event was set; the candidate process is killed."""


class _StopTest(Exception):
    """Internal: the failure recorded ends the test (first_failure, or too many deaths)."""


class _InDoubt(Exception):
    """Internal: a death, timeout or device fault while a group of calls was in flight, which
    any of them may have caused; the process is gone."""


class Harness:
    def __init__(
        self,
        device_kind: str = "interpreter",
        tolerances_path=None,
        scratch_root=None,
        sample_cache: SampleCache | None = None,
        compile_cache: compile_cache_module.CompileCache | None = None,
        static_gate: bool = True,
        standby: CandidateProcess | None = None,
        toolchain_defects: tuple[contract.ToolchainDefect, ...] = (),
        toolchain_patches: tuple[str, ...] = (),
        backend: BackendSpec | None = None,
    ):
        self.device_kind = device_kind
        #: The installed backend its candidate processes enable (``validate --backend``): the
        #: candidate then calls the operator through torch, which is no fallback, and need not
        #: launch a kernel of its own; each result counts the backend's kernels' calls
        #: (``backend_calls``).
        self.backend = backend
        #: The defects the conformance probes found on this toolchain that a verified patch
        #: corrects: only those can explain a failure (``_explained_by_defect``).
        self.toolchain_defects = tuple(defect for defect in toolchain_defects if defect.patch)
        #: The patches this harness's candidate processes run with (the re-run's harness).
        self.toolchain_patches = toolchain_patches
        #: The harness that re-runs failed tests with the defects corrected, made when needed.
        self._patched: Harness | None = None
        self.kind = device_kinds.lookup(device_kind)
        #: The linter profile of the static gate, None when it is off.
        self.lint_profile = load_profile(self.kind.lint_profile) if static_gate else None
        #: The gate, which remembers its verdicts on the latest sources; None when it is off.
        self.static_gate = _StaticGate(self.lint_profile) if static_gate else None
        #: Prepared samples, by default the process's (shared by every Harness in it).
        # Not ``or``: an empty cache is falsy (it has a length).
        self.samples = sample_cache if sample_cache is not None else samples_module.CACHE
        #: Triton's compiled kernels per candidate source, by default under the worker's cache.
        self.compile_cache = compile_cache or compile_cache_module.CompileCache(
            compile_cache_module.default_root(), device_kind
        )
        self.compile_cache.root.mkdir(parents=True, exist_ok=True)  # a path the sandbox can name
        self.settings = load_settings(tolerances_path)
        self._owned_scratch = scratch_root is None
        root = Path(scratch_root or tempfile.mkdtemp(prefix="opforge-harness-"))
        root.mkdir(parents=True, exist_ok=True)
        self.scratch_root = root.resolve()
        self._stable_names = _StableNames(self.scratch_root)
        self._process: CandidateProcess | None = None
        #: The replacement started when a process is discarded, before the next test needs it:
        #: a new process takes seconds to start (torch, CUDA), and the verdict that discarded
        #: the last one should not wait for them, nor should the next test when it comes later.
        #: A caller may spawn it before importing this module (``validate``: torch takes
        #: seconds), with ``candidate_options`` and this harness's scratch as ``process-1``.
        self._standby: CandidateProcess | None = standby
        self._processes_started = 0 if standby is None else 1
        self._lock = threading.Lock()
        #: Every candidate process this harness started and has not removed, for ``abort``,
        #: which another thread calls while a test holds ``_lock``; guarded by ``_spawn_lock``.
        self._live: set[CandidateProcess] = set() if standby is None else {standby}
        self._spawn_lock = threading.Lock()
        self._aborted = False

    # -- public API -------------------------------------------------------------------------

    def run_test(self, request: dict, cancel: threading.Event | None = None) -> dict:
        """Validate one candidate; returns the result payload documented in results.py."""
        cancel = cancel or threading.Event()
        with self._lock:
            payload = _TestRun(self, request, cancel).run()
            return self._explained_by_defect(request, payload, cancel)

    def _explained_by_defect(self, request: dict, payload: dict, cancel) -> dict:
        """``payload`` as ``device_defect`` where a recorded defect of the toolchain explains its
        accuracy failure: the failing dtype's test, run again in a candidate process with the
        defects of that dtype corrected (toolchain_patches.py), passes every sample. Never a
        pass: the candidate failed on this device as it is; the verdict says which defect, with
        its reproducer and workaround, so that the failure is not taken for the kernel's."""
        failure = payload.get("failure") or {}
        dtype = failure.get("dtype", "")
        defects = [defect for defect in self.toolchain_defects if defect.dtype == dtype]
        if payload["outcome"] != Outcome.ACCURACY_ERROR or not defects:
            return payload
        if self._patched is None:
            self._patched = Harness(
                device_kind=self.device_kind,
                scratch_root=self.scratch_root / "patched",
                sample_cache=self.samples,
                compile_cache=self.compile_cache,
                static_gate=self.static_gate is not None,
                toolchain_patches=tuple(sorted({d.patch for d in self.toolchain_defects})),
                backend=self.backend,
            )
        rerun = {**request, "dtypes": [dtype], "mode": contract.TestMode.FIRST_FAILURE.value}
        if self._patched.run_test(rerun, cancel)["outcome"] != Outcome.PASS:
            return payload
        first = defects[0]
        failure["message"] = (
            f"device_defect: {first.probe}: this toolchain computes {first.expression} on "
            f"{first.dtype} wrongly ({first.inputs} gives {first.actual}, expected "
            f"{first.expected}); with it corrected ({first.patch}) every {dtype} sample passes. "
            f"Workaround: {first.workaround or 'none known'}. As seen on this device: "
            f"{failure['message']}"
        )
        failure["defects"] = [defect.to_dict() for defect in defects]
        payload["per_dtype"][dtype]["outcome"] = Outcome.DEVICE_DEFECT.value
        payload["outcome"] = Outcome.DEVICE_DEFECT.value
        return payload

    @property
    def processes_started(self) -> int:
        """The candidate processes this harness started, replacements included."""
        return self._processes_started

    def close(self) -> None:
        """Kill the candidate process and remove scratch space this harness created."""
        with self._lock:
            if self._patched is not None:
                self._patched.close()
            self._discard_process(replace=False)
            if self._standby is not None:
                self._remove(self._standby)
                self._standby = None
            if self._owned_scratch:
                shutil.rmtree(self.scratch_root, ignore_errors=True)

    def abort(self) -> None:
        """Kill every candidate process now and start no more, from any thread, for a worker
        that exits: a test running here ends at once (a harness error, or cancelled when its
        cancel event is set) instead of waiting out its time limit or a candidate's start-up,
        which watch no cancel event. ``close`` still releases the rest."""
        with self._spawn_lock:
            self._aborted = True
            for process in self._live:
                process.interrupt()
        if self._patched is not None:
            self._patched.abort()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- candidate process ------------------------------------------------------------------

    def process(self) -> CandidateProcess:
        """The warm candidate process, started if there is none (SandboxStartError if it fails)."""
        if self._process is not None and self._process.alive:
            return self._process
        self._discard_process(replace=False)
        standby, self._standby = self._standby, None
        if standby is not None:
            try:
                return self._ready(standby)
            except SandboxStartError as error:
                # It waited unattended (killed from outside, say): that is no verdict's business.
                log.warning("standby candidate process lost, starting another: %s", error)
        return self._ready(self._spawn())

    def start_process(self) -> None:
        """Start the candidate process in the background unless one is warm or starting: its
        seconds of start-up (torch, triton, the device) then pass while the caller works (the
        judge's import of the OpInfo database, say), and the first test waits for what is left.
        A failure to start is reported by the test that needs the process."""
        with self._lock:
            if self._standby is None and (self._process is None or not self._process.alive):
                with contextlib.suppress(SandboxStartError):
                    self._standby = self._spawn()

    def _ready(self, process: CandidateProcess) -> CandidateProcess:
        """``process`` once it is ready, as the warm process (SandboxStartError if it fails)."""
        try:
            process.await_ready()
        except SandboxStartError:
            self._remove(process)
            raise
        self._process = process
        return process

    def _spawn(self) -> CandidateProcess:
        with self._spawn_lock:
            if self._aborted:
                raise SandboxStartError("the harness was aborted: the worker is stopping")
            self._processes_started += 1
            scratch = self.scratch_root / f"process-{self._processes_started}"
            process = CandidateProcess(
                scratch,
                candidate_options(
                    self.settings,
                    self.device_kind,
                    self.compile_cache.root,
                    self.toolchain_patches,
                    self.backend,
                ),
            )
            process.spawn()
            self._live.add(process)
        return process

    def _discard_process(self, replace: bool = True) -> None:
        """Kill the warm process; with ``replace``, start the next one in the background."""
        if self._process is None:
            return
        self._remove(self._process)
        self._process = None
        if replace and self._standby is None:
            # A failure to start is reported by process() when a process is needed.
            with contextlib.suppress(SandboxStartError):
                self._standby = self._spawn()

    def _remove(self, process: CandidateProcess) -> None:
        process.kill()
        with self._spawn_lock:
            self._live.discard(process)
        shutil.rmtree(process.scratch, ignore_errors=True)


@dataclass
class _Batch:
    """One batch of calls sent to a candidate process, its replies consumed in order."""

    process: CandidateProcess
    #: The size of the planned group of each call.
    group_sizes: list[int]
    replies: int = 0
    ended: bool = False  # batch_end received, or the process is gone
    output_marks: object = None  # where the output of the next call begins, as reported
    #: Replies received with their tensors' bytes, not yet judged.
    received: deque = field(default_factory=deque)

    @property
    def calls(self) -> int:
        return len(self.group_sizes)


def _groups(calls: int, group_calls: int) -> list[int]:
    """The sizes of the groups a batch of ``calls`` runs in: the first call alone, then at most
    ``group_calls`` at a time."""
    if not calls:
        return []
    rest = calls - 1
    return [1] + [min(group_calls, rest - done) for done in range(0, rest, group_calls)]


def _calls(sample: PreparedSample, replay: PreparedSample | None) -> list[PreparedSample]:
    """The calls a sample makes when they all pass: itself, then its fresh values; a call
    without a reference is not made (it fails in the judge)."""
    if sample.reference is None:
        return []
    if replay is None or replay.layout != sample.layout or replay.reference is None:
        return [sample]
    return [sample, replay]


class _TestRun:
    """One ``run_test`` call."""

    #: The job kind, as a bad request's message names it.
    kind = contract.JobKind.TEST

    def __init__(self, harness: Harness, request: dict, cancel: threading.Event):
        self.harness = harness
        self.request = request
        self.cancel = cancel
        self.result = ResultBuilder(
            dtypes=[str(d) for d in request.get("dtypes") or []],
            backend_calls={} if harness.backend is not None else None,
        )
        self.loaded_in: CandidateProcess | None = None
        self.triton_cache: Path | None = None  # where the loaded source's kernels are compiled
        self.deaths = 0
        #: One call at a time once a group left a failure in doubt.
        self.group_calls = _GROUP_CALLS

    def run(self) -> dict:
        try:
            self._run()
            self._keep_compiled_kernels()
        except _StopTest:
            pass
        except JobCancelled:
            raise
        except Exception as error:  # noqa: BLE001 (a harness bug must not read as a verdict)
            self.harness._discard_process()
            self.result.record_failure(
                Failure(
                    Outcome.HARNESS_ERROR,
                    FailureCheck.HARNESS,
                    f"harness failure: {error!r}",
                    backtrace=traceback.format_exc(),
                )
            )
        return self.harness._stable_names.payload(self.result.payload())

    def _run(self) -> None:
        try:
            request = self.spec = contract.TestRequest.from_dict(self.request)
        except contract.ContractError as error:
            self._stop(
                Failure(
                    Outcome.HARNESS_ERROR, FailureCheck.HARNESS, f"bad test request: {error.detail}"
                )
            )
        try:
            # The contract bounds set names; which sets exist (model:<name> ones included) is
            # this worker's to say.
            self.sample_sets = self.result.sample_sets = sample_sets.check_names(
                request.sample_sets or sample_sets.SETS
            )
        except ValueError as error:
            self._stop(
                Failure(
                    Outcome.HARNESS_ERROR,
                    FailureCheck.HARNESS,
                    f"bad test request: key 'sample_sets': {error}",
                )
            )
        self._install_model_sets(request)
        opinfo = self.harness.samples.find(request.op, request.variant)
        if opinfo is None:
            self._stop(
                Failure(
                    Outcome.HARNESS_ERROR,
                    FailureCheck.HARNESS,
                    f"no OpInfo named {request.op!r} with variant {request.variant!r} "
                    "in this torch",
                )
            )
        self._static_gate()
        self.judge = Judge(opinfo, self.harness.settings, self.harness.kind)
        self.result.contract_notes = self.judge.contract_notes
        self.mode = request.mode
        self.seed = request.seed
        self.timeout_s = request.timeout_s
        for dtype in self.result.dtypes:
            self._run_dtype(opinfo, dtype)
        if not self.result.tested:
            reasons = "; ".join(f"{d}: {r}" for d, r in self.result.skip_reasons.items())
            self._stop(
                Failure(
                    Outcome.HARNESS_ERROR,
                    FailureCheck.HARNESS,
                    f"no dtype could be tested: {reasons}",
                )
            )

    def _install_model_sets(self, request) -> None:
        """Store the request's model sets (``model_samples``) for its operator."""
        try:
            for name, encoded_file in (request.model_samples or {}).items():
                model_sets.install(name, request.op, request.variant, encoded_file)
        except ValueError as error:
            self._stop(
                Failure(
                    Outcome.HARNESS_ERROR,
                    FailureCheck.HARNESS,
                    f"bad {self.kind} request: key 'model_samples': {error}",
                )
            )
        except OSError as error:
            self._stop(
                Failure(
                    Outcome.HARNESS_ERROR,
                    FailureCheck.HARNESS,
                    f"model set not stored here: {error}",
                )
            )

    def _static_gate(self) -> None:
        """Refuse, before it runs, a source that breaks a rule of ``refused_before_test``; a
        source that does not parse goes on, for loading to report its compile error."""
        gate = self.harness.static_gate
        if gate is None:
            return
        request = self.spec
        refused = gate.refused(request.source, request.op, request.wrapper)
        if refused:
            outcome, check = gate.profile.gate_verdict(refusal for refusal, _ in refused)
            # Those that decided the outcome first: cheats, then fallbacks, then the rest.
            ordered = [text for _, text in sorted(refused, key=_severity)]
            more = f" ({len(ordered) - 1} more in findings)" if len(ordered) > 1 else ""
            self._stop(
                Failure(
                    outcome,
                    check,
                    f"{check}: refused before running: {ordered[0]}{more}",
                    findings=[f"{check}: {text}" for text in ordered],
                )
            )

    def _keep_compiled_kernels(self) -> None:
        """After a pass, store what Triton compiled for this source, for its next validation."""
        if self.triton_cache is None or self.result.failure is not None:
            return
        try:
            self.harness.compile_cache.keep(self.spec.source, self.triton_cache)
        except OSError as error:  # a full disk costs the next validation a compile, no verdict
            log.warning("compiled kernels of %s not stored: %s", self.spec.op, error)

    def _run_dtype(self, opinfo, dtype: str) -> None:
        torch_dtype = self.torch_dtype = opinfo_db.dtype_from_name(dtype)
        if torch_dtype not in opinfo.supported_dtypes("cpu"):
            # The candidate is not to blame, and the other dtypes can still be tested.
            reason = f"{opinfo.name} has no CPU reference for {dtype} in torch {torch.__version__}"
            self.result.record_skipped(dtype, reason)
            return
        samples: list[PreparedSample] = []
        replays: list[PreparedSample | None] = []
        for name in self.sample_sets:
            drawn, fresh = self._draw(opinfo, dtype, name)
            samples += drawn
            replays += [fresh[index] if index < len(fresh) else None for index in range(len(drawn))]
        if not samples:
            self._stop(
                Failure(
                    Outcome.HARNESS_ERROR,
                    FailureCheck.HARNESS,
                    f"the sample sets {', '.join(self.sample_sets)} yield no samples for {dtype}",
                    dtype=dtype,
                )
            )
        start = 0
        while start < len(samples):
            start = self._run_batch(dtype, samples, replays, start)

    def _draw(self, opinfo, dtype: str, sample_set: str) -> tuple[list, list]:
        """The prepared samples of one set for ``dtype`` and their fresh values (``seed + 1``)."""
        torch_dtype = opinfo_db.dtype_from_name(dtype)
        try:
            return (
                self.harness.samples.samples(opinfo, torch_dtype, self.seed, sample_set),
                self.harness.samples.samples(opinfo, torch_dtype, self.seed + 1, sample_set),
            )
        except Exception as error:
            self._stop(
                Failure(
                    Outcome.HARNESS_ERROR,
                    FailureCheck.HARNESS,
                    f"sample generation failed for set {sample_set}: "
                    f"{type(error).__name__}: {error}",
                    dtype=dtype,
                )
            )

    def _run_batch(
        self,
        dtype: str,
        samples: list[PreparedSample],
        replays: list[PreparedSample | None],
        start: int,
    ) -> int:
        """Run the samples from ``start`` in one batch, up to its byte budget or the first
        failure; the index of the next sample to run."""
        self._check_cancel()
        end, calls, size = start, [], 0
        while end < len(samples):
            more = _calls(samples[end], replays[end])
            more_size = sum(len(call.inputs) for call in more)
            if end > start and size + more_size > _BATCH_BYTES:
                break
            calls += more
            size += more_size
            end += 1
        batch = self._send_batch(calls)
        try:
            for index in range(start, end):
                try:
                    failure = self._run_sample(batch, samples[index], replays[index])
                except _InDoubt:
                    self.group_calls = 1
                    return index  # run again from this sample, one call at a time
                sample = samples[index]
                if failure is None:
                    self.result.record_pass(dtype, sample.sample_set)
                    continue
                failure.dtype, failure.sample_set = dtype, sample.sample_set
                failure.sample_index = sample.index
                failure.sample = failure.sample or sample.label()
                if sample.transformation:  # "numerics (scaled by 1e4): output: values differ"
                    failure.message = (
                        f"{sample.sample_set} ({sample.transformation}): {failure.message}"
                    )
                self.result.record_failure(failure)
                if (
                    self.mode == contract.TestMode.FIRST_FAILURE
                    or self.deaths >= _MAX_PROCESS_DEATHS
                ):
                    raise _StopTest
                return index + 1
        finally:
            self._end_batch(batch)
        return end

    def _send_batch(self, calls: list[PreparedSample]) -> _Batch:
        process = self._loaded_process()
        groups = _groups(len(calls), self.group_calls)
        batch = _Batch(process, [size for size in groups for _ in range(size)], ended=not calls)
        if calls:
            header = self.judge.batch_request(
                [call.reference for call in calls],
                [len(call.inputs) for call in calls],
                self.spec.wrapper,
                self.timeout_s,
            )
            header["groups"] = groups
            if self.harness.backend is not None:
                # The call through torch is the design; the backend's kernel counts are the
                # proof that it ran, not a launch.
                header.update(ops_allowed=True, launch_exempt=True)
            process.send(header, b"".join(call.inputs for call in calls))
        return batch

    def _run_sample(
        self, batch: _Batch, sample: PreparedSample, replay: PreparedSample | None
    ) -> Failure | None:
        failure = self._call(batch, sample)
        if failure is not None or replay is None or replay.layout != sample.layout:
            return failure
        # Judged against the first call's reference too: only a stale result is a cheat.
        failure = self._call(batch, replay, earlier=sample.reference)
        if failure is not None:
            failure.sample = replay.label(fresh_values=True)
        return failure

    def _call(
        self, batch: _Batch, sample: PreparedSample, earlier: Reference | None = None
    ) -> Failure | None:
        """Judge the batch's next reply, the call of the wrapper on ``sample``; ``earlier`` is
        the reference of the call before it on other values of the same shapes, if any."""
        reference = sample.reference
        if reference is None:
            return Failure(Outcome.HARNESS_ERROR, FailureCheck.HARNESS, sample.reference_error)
        process = batch.process
        reply, reply_blob = self._next_reply(batch)
        if isinstance(reply, Failure):
            return reply
        if reply.get("status") == Outcome.CRASH and reply.get("calls_in_flight", 1) > 1:
            self.harness._discard_process()
            batch.ended = True
            raise _InDoubt
        try:
            failure = self.judge.verdict(
                reply, reply_blob, reference, earlier, (sample.inputs, self.torch_dtype)
            )
        except ReplyError as error:
            failure = Failure(Outcome.HARNESS_ERROR, FailureCheck.HARNESS, str(error))
            reply["recycle"] = True
        if failure:
            failure.stdout, failure.stderr = self._output(process, reply.get("output_marks"))
        if reply.get("recycle"):
            self.harness._discard_process()
            batch.ended = True
        return failure

    def _next_reply(self, batch: _Batch):
        """The reply to the batch's next call with its bytes, or a Failure (and the batch is
        over); _InDoubt when the process died or timed out while a group was in flight."""
        process = batch.process
        process.mark_output_at(batch.output_marks)
        if not batch.received:
            message, blob = self._awaited(
                process,
                lambda: process.receive(self.timeout_s, True, self.cancel),
                in_group=batch.group_sizes[batch.replies] > 1,
            )
            if isinstance(message, Failure):
                batch.ended = True
                return message, blob
            problem = _unpack_replies(message, blob, batch.received)
            if problem:
                return self._broken_batch(batch, problem)
        reply, blob = batch.received.popleft()
        if reply.get("index") != batch.replies:
            return self._broken_batch(
                batch,
                f"the candidate process answered call {batch.replies} of a batch with "
                f"the reply to {reply.get('index')!r}",
            )
        batch.replies += 1
        batch.output_marks = reply.get("output_marks")
        self.result.compile_s += reply.get("compile_s", 0.0)
        self.result.run_s += reply.get("run_s", 0.0)
        self.result.count_backend_calls(reply.get("backend_calls"))
        return reply, blob

    def _broken_batch(self, batch: _Batch, problem: str) -> tuple[Failure, bytes]:
        """The harness error of a candidate process that broke the batch's protocol (replaced)."""
        self.harness._discard_process()
        batch.ended = True
        batch.received.clear()
        return Failure(Outcome.HARNESS_ERROR, FailureCheck.HARNESS, problem), b""

    def _end_batch(self, batch: _Batch) -> None:
        """Read the batch to its end, after telling the candidate process to stop when calls are
        left: replies past a failure are dropped; the process is replaced when they break it."""
        if batch.ended or batch.process is not self.harness._process:
            return
        process = batch.process
        if batch.replies < batch.calls:
            process.send({"cmd": "stop"})
        while True:
            try:
                reply, _ = process.receive(self.timeout_s, True, self.cancel)
            except CallCancelled:
                self.harness._discard_process()
                raise JobCancelled(f"test of {self.request.get('op')} cancelled") from None
            except (CandidateTimedOut, CandidateDied, CandidateProtocolError):
                self.harness._discard_process()
                return
            if reply.get("kind") == "batch_end":
                self._state_after_batch(reply)
                return
            replies = reply.get("replies") if reply.get("kind") == "replies" else None
            if not isinstance(replies, list) or any(
                not isinstance(item, dict) or item.get("recycle") for item in replies
            ):
                self.harness._discard_process()
                return

    def _state_after_batch(self, batch_end: dict) -> None:
        """Replace the process when the batch left it changed for later sources (candidate.py
        verifies it at each batch's end); what the source changed is its cheat when its test had
        no failure yet, and ends the test."""
        if not batch_end.get("recycle"):
            return
        self.harness._discard_process()
        try:
            failure = report_verdict({"status": "ok", "findings": batch_end.get("findings", [])})
        except (ReplyError, TypeError, ValueError):
            failure = Failure(
                Outcome.HARNESS_ERROR, FailureCheck.HARNESS, "malformed batch_end findings"
            )
        if failure is not None and self.result.failure is None:
            self._stop(failure)

    def _loaded_process(self) -> CandidateProcess:
        """The warm process with this test's candidate loaded (started or reloaded as needed)."""
        try:
            process = self.harness.process()
        except SandboxStartError as error:
            self._stop(Failure(Outcome.HARNESS_ERROR, FailureCheck.HARNESS, str(error)))
        self.result.sandbox = process.report
        if self.loaded_in is process:
            return process
        job_dir = process.new_job_dir()
        path = job_dir / "candidate.py"
        path.write_text(self.spec.source)
        # Triton compiles this source's kernels into a directory of its own, reading through to
        # what its earlier validations compiled (compile_cache.py).
        self.triton_cache = job_dir / "triton-cache"
        self.triton_cache.mkdir()
        stored = self.harness.compile_cache.use(self.spec.source)
        header = {
            "cmd": "load",
            "path": str(path),
            "wrapper": self.spec.wrapper,
            "timeout_s": self.timeout_s,
            "triton_cache": str(self.triton_cache),
            "compile_store": str(stored or ""),
        }
        reply, _ = self._awaited(
            process, lambda: process.call(header, b"", self.timeout_s, self.cancel)
        )
        if isinstance(reply, Failure):
            self._stop(reply)
        try:
            failure = report_verdict(reply)
        except ReplyError as error:
            failure = Failure(Outcome.HARNESS_ERROR, FailureCheck.HARNESS, str(error))
        if failure:
            failure.stdout, failure.stderr = self._output(process)
            if reply.get("recycle"):
                self.harness._discard_process()
            self._stop(failure)
        self.result.compile_s += reply.get("compile_s", 0.0)
        self.loaded_in = process
        return process

    def _awaited(self, process: CandidateProcess, receive, in_group: bool = False):
        """``receive()``'s reply; a Failure when the process died, timed out or broke protocol,
        except that a death or a timeout while a group of calls was in flight is _InDoubt."""
        try:
            return receive()
        except CallCancelled:
            self.harness._discard_process()
            raise JobCancelled(f"test of {self.request.get('op')} cancelled") from None
        except CandidateTimedOut as error:
            failure = Failure(Outcome.TIMEOUT, FailureCheck.TIMEOUT, str(error))
        except CandidateDied as error:
            failure = Failure(
                Outcome.CRASH,
                FailureCheck.CRASH,
                str(error),
                signal=error.signal_name or "",
                exit_code=error.exit_code,
                backtrace=process.fault_backtrace(),
            )
        except CandidateProtocolError as error:
            self.harness._discard_process()
            return Failure(Outcome.HARNESS_ERROR, FailureCheck.HARNESS, str(error)), b""
        if in_group:
            self.harness._discard_process()
            raise _InDoubt
        return self._died(failure, process), b""

    def _died(self, failure: Failure, process: CandidateProcess) -> Failure:
        self.deaths += 1
        failure.stdout, failure.stderr = self._output(process)
        self.harness._discard_process()
        return failure

    def _check_cancel(self) -> None:
        if self.cancel.is_set():
            raise JobCancelled(f"test of {self.request.get('op')} cancelled")

    def _output(self, process: CandidateProcess, until=None) -> tuple[str, str]:
        tail = process.output_tail(until)
        return tail["stdout"], tail["stderr"]

    def _stop(self, failure: Failure):
        self.result.record_failure(failure)
        raise _StopTest


class _StableNames:
    """Rewrites the texts of a result's failure so that they name nothing of this harness's
    scratch directory: the same failing candidate gets byte-identical feedback from every
    harness, whichever process and job directory ran it. The candidate's source is
    "candidate.py"; what else lies in its job directory is under "<job>"; a temporary file is
    "<tmp>"; the rest of scratch is under "<scratch>"; an object's address in its repr is
    "0x...".
    """

    def __init__(self, scratch_root: Path):
        root = re.escape(str(scratch_root))
        process = root + r"/process-\d+"
        self._rules = [
            (re.compile(process + r"/jobs/\d+/candidate\.py"), "candidate.py"),
            (re.compile(process + r"/jobs/\d+"), "<job>"),
            (re.compile(process + r"/tmp/[^/\s'\"]+"), "<tmp>"),
            (re.compile(root), "<scratch>"),
            (re.compile(r"(<[^<>\n]* at )0x[0-9a-fA-F]+>"), r"\g<1>0x...>"),
        ]

    def payload(self, payload: dict) -> dict:
        failure = payload.get("failure") or {}
        for key, value in failure.items():
            if isinstance(value, list):  # the findings
                failure[key] = [self._text(item) for item in value]
            else:
                failure[key] = self._text(value)
        return payload

    def _text(self, text):
        if not isinstance(text, str):
            return text
        for pattern, name in self._rules:
            text = pattern.sub(name, text)
        return text


class _StaticGate:
    """The violations of rules of ``refused_before_test`` in a source, each described with its
    class of refusal (``cheat`` or ``lint``, the profile's ``refused_before_test``): linted once
    per source, operator and wrapper (all the lint's verdict depends on, with the profile) while
    it is among the ``_GATED_SOURCES`` most recently gated. One test at a time uses it (under
    the harness's lock)."""

    def __init__(self, profile: Profile):
        self.profile = profile
        #: Keyed by the source's digest: a key holds 32 bytes, whatever the source's size.
        self._refused: OrderedDict[tuple[bytes, str, str], tuple[tuple[str, str], ...]] = (
            OrderedDict()
        )

    def refused(self, source: str, op: str, wrapper: str) -> tuple[tuple[str, str], ...]:
        """(class of refusal, description) of each refused violation, in the report's order."""
        # surrogatepass: a JSON string may hold a lone surrogate, which still names one source.
        digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).digest()
        key = (digest, op, wrapper)
        refused = self._refused.get(key)
        if refused is not None:
            self._refused.move_to_end(key)
            return refused
        report = lint_source(source, op=op, wrapper=wrapper, profile=self.profile)
        classes = [self.profile.refusal_class(v["rule"]) for v in report["violations"]]
        refused = self._refused[key] = tuple(
            (refusal, _describe_violation(violation))
            for refusal, violation in zip(classes, report["violations"], strict=True)
            if refusal is not None
        )
        if len(self._refused) > _GATED_SOURCES:
            self._refused.popitem(last=False)
        return refused


def _severity(refused: tuple[str, str]) -> int:
    """Where a refusal of this class stands in the findings (REFUSAL_CLASSES's order)."""
    return REFUSAL_CLASSES.index(refused[0])


def _describe_violation(violation: dict) -> str:
    """A lint violation in one line: rule, where, the offending text, the hint."""
    text = f" `{violation['text']}`" if violation["text"] else ""
    return f"{violation['rule']} at line {violation['line']}{text}: {violation['hint']}"


def _unpack_replies(message: dict, blob: bytes, received: deque) -> str | None:
    """Queue a group's replies with their tensors' bytes; what is wrong with the message, if
    anything (it comes from an untrusted process)."""
    replies = message.get("replies") if message.get("kind") == "replies" else None
    if not isinstance(replies, list) or not replies:
        return f"the candidate process sent {message.get('kind')!r} where replies were due"
    sizes = [reply.get("nbytes", 0) if isinstance(reply, dict) else None for reply in replies]
    if not all(type(size) is int and size >= 0 for size in sizes) or sum(sizes) != len(blob):
        return "the candidate process's replies do not account for the bytes it sent"
    view, position = memoryview(blob), 0
    for reply, size in zip(replies, sizes, strict=True):
        received.append((reply, view[position : position + size]))
        position += size
    return None
