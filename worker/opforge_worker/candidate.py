"""Loading and running a candidate inside the (sandboxed) candidate process.

A candidate source is plain Python: one wrapper function and ``@triton.jit`` kernels, with
``torch``, ``triton`` and ``tl`` (``triton.language``) already in its namespace, so it needs no
imports (worker/CANDIDATE.md). ``serve`` answers the judge's requests (see ``harness.py``):

- ``load``: compile and execute the source from its file in a job directory, or take back the
  namespace an earlier load of the same source made in this process (``LoadedNamespaces``);
  Triton compiles its kernels into the cache directory the judge named for this source, finding
  those compiled before in the source's directory of the judge's compile store
  (``compile_cache.py``); kernels an earlier load of the same source compiled in this process
  are reused as they are (``checks.LoadedKernels``);
- ``call_batch``: for each sample of the batch in order, decode its inputs on the device (from
  the batch's bytes, copied there once), run the wrapper under the dynamic checks
  (``checks.py``) and gather its outputs and its inputs as the call left them on the device
  (``transport.ReplyStaging``), without waiting for the device. The judge plans the batch's
  calls in groups (``groups``: their sizes): at the end of each, the process waits for the
  device once, brings the group's tensors to the host in one copy and sends the group's
  replies in one message, one reply per call: what the checks found and, after a call that
  succeeded, its tensors as raw bytes. A group ends early after a call that did not succeed or
  had findings, when its tensors pass ``_GROUP_BYTES``, and when its calls have taken a tenth
  of the per-call limit, so that replies keep coming for slow calls. Expected outputs are never
  sent here. A device fault surfaces at a wait: one that surfaces with more than one call of a
  group in flight is reported as such (``fault_calls``), since any of them may have caused it.
  The replies are the judge's progress markers. The batch ends after the last sample, after a
  reply that asks for a fresh process, or when the judge sent ``stop`` (it found a failure);
  ``batch_end`` follows its replies.
- ``load_baseline`` and ``benchmark``: a benchmark's library baseline beside the loaded source,
  and the timing of one input (``candidate_timing.py``, worker/opforge_worker/TIMING.md).

A warm process runs source after source, so none may leave it changed for the next: after
every load and at the end of every batch (whatever ended it), the process verifies what later
sources rely on against its fingerprint taken at start (``checks.ProcessState``: torch's,
triton's and the harness's functions and classes, registrations with the dispatcher, global
settings). A change is an ``integrity`` finding in the load's reply or in ``batch_end``, which
then asks for a fresh process (``recycle``); so do, without a finding, a registration torch
made itself and a Python thread left running.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import resource
import select
import sys
import time
import traceback
import types
from collections import OrderedDict
from collections.abc import Callable
from itertools import accumulate
from multiprocessing.connection import Connection
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.compiler.errors import CompilationError
from triton.runtime import interpreter
from triton.runtime.cache import FileCacheManager
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from opforge_worker import backend as backend_module
from opforge_worker import candidate_timing, toolchain_patches
from opforge_worker.audit import AuditGuard, CodeOwners
from opforge_worker.checks import (
    BackendCompileError,
    CallPolicy,
    DispatchRecorder,
    EscapeHatches,
    Findings,
    Integrity,
    LaunchCounter,
    LoadedKernels,
    ProcessState,
    ThreadWatch,
    dispatch_mode_intact,
    holds_only_poison,
    output_structure,
    tensor_leaves,
)
from opforge_worker.contract import FailureCheck, Outcome
from opforge_worker.device_kinds import DeviceKind
from opforge_worker.ipc import recv_message, send_message
from opforge_worker.transport import ReplyStaging, decode_inputs, to_device

_MAX_TEXT = 20_000
#: What the CPU-time limit of a request allows for (os.cpu_count reads /sys: 20 us a call).
_CPUS = os.cpu_count() or 1
#: Findings after which the process is replaced: the checks may have been reached. A refusal
#: (check ``sandbox`` or ``thread``) leaves the process as it was, since the action did not
#: happen (``ProcessState`` verifies the rest); one that reached for the harness itself
#: (``AuditGuard.tamper_attempts``) replaces it too.
_UNTRUSTING_CHECKS = frozenset({FailureCheck.INTEGRITY, FailureCheck.DISPATCH_ESCAPE})
#: The tensors a group of calls may gather on the device before it ends.
_GROUP_BYTES = 16 << 20


_CANDIDATE_MODULE = "opforge_candidate"


def load_candidate(path: Path) -> dict:
    """Execute the candidate source at ``path`` in a namespace that provides torch, triton, tl.

    The code is compiled from the file itself so that ``@triton.jit`` can read kernel sources
    and tracebacks show the candidate's lines.
    """
    source = path.read_text()
    namespace = {
        "__name__": _CANDIDATE_MODULE,
        "__builtins__": builtins,
        "torch": torch,
        "triton": triton,
        "tl": tl,
    }
    exec(compile(source, str(path), "exec"), namespace)
    return namespace


class LoadedNamespaces:
    """Namespaces of the sources this process loaded, by the source's sha256, so that a source
    tested here again runs in the namespace its earlier load made.

    A fresh load makes new ``@triton.jit`` functions, and each builds its argument binder again
    and looks every specialization up again, hashing the kernel's dependencies: on an H100 a
    reloaded diag took 7.0 ms for its float32 samples, 2.3 ms in its earlier load's namespace.
    A namespace is set aside only while everything it holds is code, constants and containers of
    them (``_holds_nothing_alive``): no tensor and nothing whose contents are not known, so that
    keeping it costs later candidates nothing, neither memory nor a verdict. It is checked again
    after every test it serves, since its wrapper may have stored something in it. The bound also
    bounds the compiled kernels its ``@triton.jit`` functions hold.
    """

    def __init__(self, capacity: int = 64):
        self.capacity = capacity
        self._namespaces: OrderedDict[str, dict] = OrderedDict()

    def set_aside(self, digest: str, namespace: dict) -> None:
        """Keep ``namespace``, the one the last test of the source ``digest`` ran in, if it holds
        nothing alive; the least recently used beyond the bound are dropped."""
        if not digest or not _holds_nothing_alive(namespace):
            return
        self._namespaces[digest] = namespace
        while len(self._namespaces) > self.capacity:
            self._namespaces.popitem(last=False)

    def take(self, digest: str) -> dict | None:
        """The namespace set aside for the source ``digest`` (now the caller's), or None."""
        return self._namespaces.pop(digest, None)


#: Values that hold nothing of a candidate's: constants, modules, dtypes.
_INERT = (type(None), bool, int, float, complex, str, bytes, types.ModuleType)
_INERT += (torch.dtype, torch.device, tl.dtype)


_INTERPRETER_GLOBALS = vars(interpreter)
_ABSENT = object()


def _holds_nothing_alive(namespace: dict) -> bool:
    """Whether everything reachable from ``namespace`` is code, constants and containers of
    them: functions (their defaults and closures), kernels (their Python function), lists,
    tuples, sets, dicts, ``tl.constexpr``, types not defined by the candidate. Anything else, a
    tensor first, may hold memory. Triton's interpreter copies its own module's globals into the
    namespace of a kernel it runs; those are triton's, not the candidate's."""
    pending = [
        value
        for name, value in namespace.items()
        if value is not _INTERPRETER_GLOBALS.get(name, _ABSENT)
    ]
    seen = set()
    while pending:
        value = pending.pop()
        if isinstance(value, _INERT) or id(value) in seen:
            continue
        seen.add(id(value))
        kind = type(value)
        if kind in (list, tuple, set, frozenset):
            pending.extend(value)
        elif kind is dict:
            pending.extend((*value.keys(), *value.values()))
        elif kind is types.FunctionType:
            pending.extend(value.__defaults__ or ())
            pending.extend((value.__kwdefaults__ or {}).values())
            pending.extend(_cell_contents(value.__closure__ or ()))
        elif kind is types.BuiltinFunctionType:  # a method of a tensor holds the tensor
            pending.append(value.__self__)
        elif kind is tl.constexpr:
            pending.append(value.value)
        elif isinstance(value, JITFunction | InterpretedFunction):
            pending.append(value.fn)  # the rest is compiled kernels and their launchers
        elif isinstance(value, type) and value.__module__ != _CANDIDATE_MODULE:
            continue  # torch's, triton's or Python's: the candidate's own may hold anything
        else:
            return False
    return True


def _cell_contents(cells) -> list:
    contents = []
    for cell in cells:
        try:
            contents.append(cell.cell_contents)
        except ValueError:  # a cell not yet assigned
            continue
    return contents


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "\n[... truncated]"


def _is_device_fault(error: BaseException) -> bool:
    accelerator_error = getattr(torch, "AcceleratorError", ())
    text = str(error)
    return isinstance(error, accelerator_error) or "CUDA error" in text or "[CUDA]" in text


class StoreBackedCacheManager(FileCacheManager):
    """Triton's file cache in the loaded source's own directory, reading through to that
    source's entries in the judge's compile store (``compile_cache.py``), which this process
    may read but never write: an unchanged source loads its compiled kernels without a copy.

    Triton records a compiled kernel's files with their absolute paths, which name the directory
    they were first compiled in; each is looked up by name, here first, then in the store.
    """

    #: The loaded source's directory in the compile store, "" for none; set by each load.
    store_dir = ""

    def __init__(self, key, override=False, dump=False):
        super().__init__(key, override, dump)
        self.stored = os.path.join(self.store_dir, key) if self.store_dir else ""

    def get_file(self, filename: str) -> str | None:
        for directory in (self.cache_dir, self.stored):
            path = os.path.join(directory, filename)
            if directory and os.path.exists(path):
                return path
        return None

    def has_file(self, filename: str) -> bool:
        return self.get_file(filename) is not None

    def get_group(self, filename: str) -> dict[str, str] | None:
        path = self.get_file(f"__grp__{filename}")
        if path is None:
            return None
        with open(path) as stream:
            children = json.load(stream).get("child_paths")
        if not isinstance(children, dict):
            return None
        found = {name: self.get_file(os.path.basename(child)) for name, child in children.items()}
        return {name: child for name, child in found.items() if child is not None}


class CandidateServer:
    def __init__(self, conn: Connection, kind: DeviceKind, scratch: Path, options: dict):
        self.conn = conn
        self.kind = kind
        self.device = torch.device(kind.torch_device)
        self.options = options
        self.owners = CodeOwners(scratch / "jobs")
        self.audit = AuditGuard(scratch, self.owners)
        self.loaded_kernels = LoadedKernels()
        self.loaded_namespaces = LoadedNamespaces()
        self.launches = LaunchCounter(self.owners, self._notify_compile, kind, self.loaded_kernels)
        self.escapes = EscapeHatches(self.owners, self.launches)
        self.threads = ThreadWatch(self.owners)
        # Set by each load: Triton's knob of the cache directory sets the variable too.
        per_source = ((StoreBackedCacheManager, "store_dir"), (os.environ, "TRITON_CACHE_DIR"))
        self.state = ProcessState(self.owners, per_source)
        self.staging = ReplyStaging(
            self.device, synchronize=kind.synchronize if kind.pinned_staging else None
        )
        self.namespace: dict = {}
        #: Calls of the enabled backend's kernels (``validate --backend``), and what enabling it
        #: found; None without a backend.
        self.backend_counts: backend_module.BackendCounts | None = None
        self.backend_report: dict | None = None
        #: A benchmark's library baseline, set by ``load_baseline``.
        self.baseline = None
        #: The sha256 of the source ``namespace`` was loaded from; "" when the load failed.
        self.namespace_source = ""

    def install(self) -> None:
        torch.set_num_threads(1)
        if self.kind.start_runtime is not None:
            self.kind.start_runtime()
        # Before the hooks and the integrity snapshot: the patched toolchain is this process's.
        toolchain_patches.apply(self.options.get("toolchain_patches", ()))
        self._enable_backend()
        triton.knobs.cache.manager_class = StoreBackedCacheManager
        self._warm_dispatch_recorder()
        hooks = (self.launches, self.escapes, self.threads, self.state)
        for hook in hooks:
            hook.install()
        self.integrity = Integrity(*hooks)
        self.audit.install()
        self.state.snapshot()

    def _enable_backend(self) -> None:
        """Enable the options' backend, if any: its registrations are this process's state from
        the start (before the integrity snapshot), the same for every test it serves."""
        spec = self.options.get("backend")
        if not spec:
            return
        spec = backend_module.BackendSpec(**spec)
        sys.path[:0] = [path for path in spec.paths if path not in sys.path]
        self.backend_counts = backend_module.BackendCounts()
        self.backend_report = backend_module.enable(spec, self.backend_counts)

    def _warm_dispatch_recorder(self) -> None:
        """Run one op under the dispatch recorder now. torch imports ``torch._dynamo`` the first
        time a dispatch mode is entered (seconds: 1.2 s on a CPU here); that is the process's
        start-up, not the first candidate's run time, which its per-call limit bounds."""
        policy = CallPolicy(frozenset(), launch_exempt=True, host_read_allowed=True)
        with DispatchRecorder(policy, Findings(), self.launches, self.owners):
            torch.empty(1, device=self.device)

    def _notify_compile(self) -> None:
        send_message(self.conn, {"kind": "compile_begin"})

    def serve_forever(self, report: dict) -> None:
        # Polled between the calls of a batch: Connection.poll builds a selector every time.
        self._judge_wrote = select.poll()
        self._judge_wrote.register(self.conn.fileno(), select.POLLIN)
        ready = {"kind": "ready", "sandbox": report}
        if self.backend_report is not None:
            ready["backend"] = self.backend_report
        send_message(self.conn, ready)
        while True:
            try:
                header, blob = recv_message(self.conn)
            except Exception:  # the judge went away: nothing left to serve
                return
            command = header.get("cmd")
            if command == "stop":  # for a batch that had ended before the judge's stop came
                continue
            if command == "call_batch":
                self._call_batch(header, blob)
                continue
            if command == "benchmark":
                self._benchmark(header, blob)
                continue
            try:
                if command not in ("load", "load_baseline"):
                    raise ValueError(f"bad request {header!r}")
                reply = self._load(header) if command == "load" else self._load_baseline(header)
            except Exception as error:  # noqa: BLE001 (the harness's own failure, reported)
                reply = _harness_error(error)
            send_message(self.conn, {"kind": "reply", **reply})

    # -- requests ---------------------------------------------------------------------------

    def _load(self, header: dict) -> dict:
        self.loaded_namespaces.set_aside(self.namespace_source, self.namespace)
        self.baseline = None
        self.namespace, self.namespace_source = {}, ""
        triton.knobs.cache.dir = header["triton_cache"]
        StoreBackedCacheManager.store_dir = header["compile_store"]
        path = Path(header["path"])
        source = hashlib.sha256(path.read_bytes()).hexdigest()
        self.loaded_kernels.source = source

        def load():
            self.namespace = self.loaded_namespaces.take(source) or load_candidate(path)

        reply = self._guarded(load, header["timeout_s"], policy=None)
        self._verify_state(reply)
        if reply["status"] == "ok" and not callable(self.namespace.get(header["wrapper"])):
            reply.update(
                status=Outcome.RUNTIME_ERROR,
                message=f"the source defines no function named {header['wrapper']!r}",
            )
        if reply["status"] == "ok":
            self.namespace_source = source
        return reply

    def _load_baseline(self, header: dict) -> dict:
        """Load a benchmark's library baseline (another source) beside the loaded candidate:
        its kernels compile for it alone (``checks.LoadedKernels``), under the same checks."""
        box: dict = {}
        source, self.loaded_kernels.source = self.loaded_kernels.source, ""
        try:
            reply = self._guarded(
                lambda: box.update(namespace=load_candidate(Path(header["path"]))),
                header["timeout_s"],
                policy=None,
            )
        finally:
            self.loaded_kernels.source = source
        self._verify_state(reply)
        self.baseline = box.get("namespace", {}).get(header["wrapper"])
        if reply["status"] == "ok" and not callable(self.baseline):
            reply.update(
                status=Outcome.RUNTIME_ERROR,
                message=f"the baseline defines no function named {header['wrapper']!r}",
            )
        return reply

    def _benchmark(self, header: dict, blob) -> None:
        """Time the loaded candidate against its baseline on one input (candidate_timing.py)."""
        try:
            reply, data = candidate_timing.run(self, header, blob)
        except Exception as error:  # noqa: BLE001 (the harness's own failure, reported)
            reply, data = {"kind": "benchmark", **_harness_error(error)}, b""
        self._verify_state(reply)
        send_message(self.conn, reply, data)

    def _call_batch(self, header: dict, blob: bytes) -> None:
        """Run the batch's samples in order, their replies sent group by group, then
        ``batch_end``."""
        view, position, staged = memoryview(blob), 0, None
        # A malformed header (the judge's bug) still gets a reply: a harness error, not a crash.
        sizes = header.get("sizes") or [0]
        group_ends = set(accumulate(header.get("groups") or [len(sizes)]))
        group: list[dict] = []
        for index, size in enumerate(sizes):
            if not group:
                group_began = time.perf_counter()
            try:
                if staged is None:  # every sample of the batch to the device in one copy
                    staged = to_device(blob, self.device)
                sample = view[position : position + size], staged[position : position + size]
                position += size
                call = {**header, "alias_allowed": header["alias_allowed"][index]}
                reply = self._call(call, *sample)
            except Exception as error:  # noqa: BLE001 (the harness's own failure, reported)
                reply = _harness_error(error)
            reply.update(index=index, output_marks=_output_marks())
            group.append(reply)
            if (
                index + 1 in group_ends
                or reply["status"] != "ok"
                or reply["findings"]
                or self.staging.used > _GROUP_BYTES
                or time.perf_counter() - group_began > header["timeout_s"] / 10
            ):
                recycle = self._send_group(group)
                group = []
                if recycle or self._stop_requested():
                    break
        if group:
            self._send_group(group)
        batch_end = {"kind": "batch_end"}
        self._verify_state(batch_end)
        send_message(self.conn, batch_end)

    def _verify_state(self, reply: dict) -> None:
        """Add to ``reply`` what the source's code changed of what later sources in this process
        rely on (``checks.ProcessState``), as integrity findings; a changed process is replaced."""
        changed, stale = self.state.changes()
        findings = Findings([tuple(item) for item in reply.get("findings", ())])
        for change in changed:
            findings.add(FailureCheck.INTEGRITY, f"{change} while the source ran")
        if findings.items:
            reply["findings"] = findings.items
        if stale:
            reply["recycle"] = True

    def _send_group(self, group: list[dict]) -> bool:
        """Wait for the group's calls and send their replies, with their tensors' bytes, in one
        message; whether the process must be replaced."""
        began, data = time.perf_counter(), b""
        if group[-1]["status"] == Outcome.CRASH:  # a device fault: nothing can be copied any more
            self.staging.clear()
        else:
            try:
                data = self.staging.collect()
            except Exception as error:  # noqa: BLE001 (the candidate's fault, or the harness's)
                failure = self._classify(error) if _is_device_fault(error) else None
                group.append(failure or _harness_error(error))
        calls = [reply for reply in group if "index" in reply]
        calls[-1]["run_s"] = calls[-1].get("run_s", 0.0) + time.perf_counter() - began
        last = group[-1]
        if last["status"] == Outcome.CRASH or last is not calls[-1]:
            # The device ran the group's calls without waiting for each: a fault may be any of
            # theirs, and the judge tells which by running them again one at a time.
            first = calls[0]["index"]
            group = [{**last, "index": first, "output_marks": calls[-1]["output_marks"]}]
            group[0]["calls_in_flight"] = len(calls)
            data = b""
        send_message(self.conn, {"kind": "replies", "replies": group}, data)
        return any(reply.get("recycle") for reply in group)

    def _stop_requested(self) -> bool:
        """Whether the judge sent ``stop`` (the only request it sends while a batch runs)."""
        if not self._judge_wrote.poll(0):
            return False
        header, _ = recv_message(self.conn)
        return header.get("cmd") == "stop"

    def _call(self, header: dict, blob, staged: torch.Tensor) -> dict:
        """One call of the wrapper, its tensors gathered in the staging; its reply."""
        policy = CallPolicy(
            frozenset(header["op_names"]),
            header["launch_exempt"],
            header["host_read_allowed"],
            header.get("ops_allowed", False),
        )
        wrapper = self.namespace[header["wrapper"]]
        reply: dict = {"findings": []}
        try:
            sample = decode_inputs(blob, staged=staged)
            args, kwargs = sample["args"], sample["kwargs"]
            inputs = tensor_leaves((args, kwargs))
            box = {}

            def call():
                box["result"] = wrapper(*args, **kwargs)

            counted = self.backend_counts.mark() if self.backend_counts else None
            reply = self._guarded(call, header["timeout_s"], policy, wait=False)
            if counted is not None:
                reply["backend_calls"] = self.backend_counts.since(counted)
            if reply["status"] != "ok":  # the judge reads no tensors after a failing call
                return reply
            leaves = self._describe(reply, box["result"], inputs, policy, header)
            reply["tensors"], reply["nbytes"] = self.staging.add([*leaves, *inputs])
            return reply
        except Exception as error:
            # Only the candidate's kernels run on this process's device, asynchronously, and a
            # fault leaves the context failing every later operation: a fault that surfaces in
            # the harness's own copies is the candidate's crash.
            if not _is_device_fault(error):
                raise
            reply.update(self._classify(error))
            return reply

    def _describe(
        self, reply: dict, result, inputs: list[torch.Tensor], policy: CallPolicy, header: dict
    ) -> list[torch.Tensor]:
        """Describe the outputs and their findings into ``reply``; the output tensors."""
        input_storages = {
            tensor.untyped_storage().data_ptr(): index
            for index, tensor in enumerate(inputs)
            if tensor.untyped_storage().nbytes()
        }
        findings = Findings([tuple(item) for item in reply["findings"]])
        leaves: list[torch.Tensor] = []
        reply["structure"] = output_structure(
            result, leaves, findings, self.device, input_storages, header["alias_allowed"]
        )
        produced = [leaf for leaf in leaves if leaf.numel()]
        # Outputs left as allocated (poisoned by the dispatch recorder) are wrong, not forged:
        # the judge reports them as the accuracy error they are.
        if (
            reply["launches"] == 0
            and not policy.launch_exempt
            and produced
            and not all(map(holds_only_poison, produced))
        ):
            findings.add(FailureCheck.NO_LAUNCH, "no Triton kernel was launched")
        reply["findings"] = findings.items
        reply["outputs"] = len(leaves)
        return leaves

    def _guarded(
        self,
        body: Callable[[], None],
        timeout_s: float,
        policy: CallPolicy | None,
        wait: bool = True,
        poison: bool = True,
    ) -> dict:
        """Run ``body`` with every check armed; classify how it ended. With ``wait``, that is
        once the device has run what it launched; without, a call's kernels may still run (its
        group's wait comes later), unless it raised."""
        findings = Findings()
        violations_mark = len(self.audit.violations)
        tamper_mark = self.audit.tamper_attempts
        self._limit_cpu(timeout_s)
        self.launches.begin(findings)
        self.escapes.findings = self.threads.findings = findings
        reply = {"status": "ok"}
        start = time.perf_counter()
        try:
            if policy is None:
                body()
            else:
                recorder = DispatchRecorder(policy, findings, self.launches, self.owners, poison)
                with recorder:
                    body()
                    if not dispatch_mode_intact(recorder):
                        findings.add(FailureCheck.INTEGRITY, "the dispatch recorder was removed")
            if wait and self.kind.synchronize is not None:
                self.kind.synchronize()
        except BaseException as error:  # noqa: BLE001 (the candidate's exception, reported)
            reply = self._classify(self._device_fault_behind(error))
        finally:
            self.launches.end()
            self.escapes.findings = self.threads.findings = None
        elapsed = time.perf_counter() - start
        for broken in self.integrity.broken():
            findings.add(FailureCheck.INTEGRITY, broken)
        for violation in self.audit.violations[violations_mark:]:
            findings.add(FailureCheck.SANDBOX, violation)
        del self.audit.violations[violations_mark:]  # a refusing loop must not grow the process
        if (
            any(check in _UNTRUSTING_CHECKS for check, _ in findings.items)
            or self.audit.tamper_attempts > tamper_mark
        ):
            reply["recycle"] = True
        reply.update(
            findings=findings.items,
            launches=self.launches.launches,
            compile_s=self.launches.compile_s,
            run_s=max(elapsed - self.launches.compile_s, 0.0),
        )
        return reply

    def _device_fault_behind(self, error: BaseException) -> BaseException:
        """The device fault the candidate's kernels caused before it raised ``error``, if any.

        Kernels run asynchronously: a fault surfaces only at the next synchronization, so a
        candidate that raises after a faulting launch must still be reported (and its process
        replaced) as a crash, never leave the fault to the next candidate.
        """
        if self.kind.synchronize is None or _is_device_fault(error):
            return error
        try:
            self.kind.synchronize()
        except Exception as fault:  # noqa: BLE001 (the candidate's fault, reported)
            if _is_device_fault(fault):
                return fault
        return error

    def _classify(self, error: BaseException) -> dict:
        backtrace = _clip(
            "".join(traceback.format_exception(type(error), error, self._from_candidate(error)))
        )
        message = _clip(f"{type(error).__name__}: {error}")
        if isinstance(error, SyntaxError | CompilationError | BackendCompileError):
            return {"status": Outcome.COMPILE_ERROR, "message": message, "compile_log": backtrace}
        if _is_device_fault(error):
            return {
                "status": Outcome.CRASH,
                "message": message,
                "cuda_error": _clip(str(error)),
                "backtrace": backtrace,
                "recycle": True,
            }
        return {"status": Outcome.RUNTIME_ERROR, "message": message, "backtrace": backtrace}

    def _from_candidate(self, error: BaseException):
        """The traceback from the candidate's first frame on: harness frames are noise there.
        A syntax error in the source has no frame of the candidate's and needs none: it names
        the line itself."""
        first = error.__traceback__
        while first is not None and not first.tb_frame.f_code.co_filename.startswith(
            self.owners.candidate_root
        ):
            first = first.tb_next
        if first is None and isinstance(error, SyntaxError):
            return None
        return first or error.__traceback__

    def _limit_cpu(self, timeout_s: float) -> None:
        """Bound CPU time for one request, beyond what the process has used so far."""
        usage = resource.getrusage(resource.RUSAGE_SELF)
        budget = (timeout_s + self.options["compile_grace_s"]) * _CPUS + 10
        soft = int(usage.ru_utime + usage.ru_stime + budget) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))


def _harness_error(error: Exception) -> dict:
    # The candidate's code runs inside _guarded, which catches what it raises: what arrives here
    # is the harness's fault, and must not look like a crash.
    return {
        "status": Outcome.HARNESS_ERROR,
        "message": f"candidate process: {error!r}",
        "backtrace": _clip(traceback.format_exc()),
        "recycle": True,
    }


def _output_marks() -> list[int]:
    """How much the process has printed so far (its output files, opened for appending)."""
    return [os.fstat(fd).st_size for fd in (1, 2)]


def serve(
    conn: Connection, kind: DeviceKind, scratch: Path, report: dict, options: dict | None = None
) -> None:
    """Entry point of the candidate process once it is confined (confinement.main)."""
    server = CandidateServer(conn, kind, scratch, options or {})
    server.install()
    server.serve_forever(report)
