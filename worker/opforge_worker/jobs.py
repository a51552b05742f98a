"""The job kinds a worker serves, by role (messages/PROTOCOL.md, "Job payloads").

Role `device` serves `test`, `benchmark`, `catalog` and `backend` on its device; role `lint`
serves `lint` and needs no device. Heavy modules (the harness, the linter, the catalog) are
imported on first use, so that a worker says hello within a second of starting.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from opforge_worker import contract, device_kinds
from opforge_worker.benchmark import run_benchmark
from opforge_worker.connection import JobCancelled, JobHandler


class HarnessPool:
    """One warm Harness per slot: a job takes one and gives it back, so concurrent jobs never share
    a candidate process.

    A test goes, if it is idle, to the harness that tested the same source lately: its candidate
    process has the source's namespace and kernels loaded, and elsewhere the kernels load again.
    On an H100, warm passes of the nine-kernel library at 8 slots spent up to 0.30 s compiling
    when tests landed on other processes than the pass before.

    A job keeps its one harness for all its dtypes. Spreading the dtypes of a test of every
    sample over idle slots was tried and measured slower on an H100: a warm pass of the
    nine-kernel library took 0.33 s and 0.40 s at 4 slots, against 0.16 s and 0.21 s (8 slots:
    0.23 and 0.33 s against 0.14 and 0.20 s), for the same reloads and per-test costs.
    """

    #: Sources remembered per harness: as many as its candidate process keeps loaded
    #: (candidate.LoadedNamespaces).
    _SOURCES_REMEMBERED = 64
    #: How often a benchmark waiting for the slots looks at its cancel event.
    _CANCEL_POLL_S = 0.2

    def __init__(self, slots: int, make_harness: Callable[[], Any]):
        self._make_harness = make_harness
        self._slots = slots
        self._created: list = []
        self._idle: list = []  # longest idle first
        self._sources: dict[int, OrderedDict[str, None]] = {}  # by id(harness)
        self._changed = threading.Condition()
        self._closed = False
        #: A benchmark holds the slots: other jobs wait (``run_benchmark``).
        self._exclusive = False

    def _take(self, source: str, exclusive: bool = False):
        with self._changed:
            while True:
                if self._closed:
                    raise JobCancelled("the worker is stopping")
                if self._exclusive and not exclusive:
                    self._changed.wait()
                    continue
                if self._idle:
                    chosen = next(
                        (h for h in self._idle if source in self._sources[id(h)]), self._idle[0]
                    )
                    self._idle.remove(chosen)
                    return chosen
                if len(self._created) < self._slots:
                    harness = self._make_harness()
                    self._created.append(harness)
                    self._sources[id(harness)] = OrderedDict()
                    return harness
                self._changed.wait()

    def _give_back(self, harness, source: str) -> None:
        with self._changed:
            if not self._closed:
                sources = self._sources[id(harness)]
                sources[source] = None
                sources.move_to_end(source)
                if len(sources) > self._SOURCES_REMEMBERED:
                    sources.popitem(last=False)
                self._idle.append(harness)
                self._changed.notify_all()
                return
        harness.close()

    def run_test(self, payload: dict[str, Any], cancel: threading.Event) -> dict[str, Any]:
        source = hashlib.sha256(str(payload.get("source")).encode()).hexdigest()
        harness = self._take(source)
        try:
            return harness.run_test(payload, cancel)
        finally:
            self._give_back(harness, source)

    def run_benchmark(self, payload: dict[str, Any], cancel: threading.Event) -> dict[str, Any]:
        """A benchmark runs alone on the device: it waits for the jobs running now, and the
        slots take no other job until it is done (TIMING.md: nothing shares the GPU while it
        times)."""
        source = hashlib.sha256(str(payload.get("source")).encode()).hexdigest()
        with self.every_slot(cancel):
            harness = self._take(source, exclusive=True)
            try:
                return run_benchmark(harness, payload, cancel)
            finally:
                self._give_back(harness, source)

    @contextlib.contextmanager
    def every_slot(self, cancel: threading.Event):
        """Holds every slot for one job: waits for the jobs running now, and the slots take no
        other job until it ends."""
        with self._changed:
            while self._exclusive:
                self._wait_or_cancel(cancel)
            self._exclusive = True
            try:
                while len(self._idle) < len(self._created):  # jobs still running
                    self._wait_or_cancel(cancel)
            except BaseException:
                self._end_exclusive()
                raise
        try:
            yield
        finally:
            with self._changed:
                self._end_exclusive()

    def _wait_or_cancel(self, cancel: threading.Event) -> None:
        if self._closed or cancel.is_set():
            raise JobCancelled("the worker is stopping" if self._closed else "cancelled")
        self._changed.wait(self._CANCEL_POLL_S)

    def _end_exclusive(self) -> None:
        self._exclusive = False
        self._changed.notify_all()

    @property
    def exclusive(self) -> bool:
        """Whether a benchmark holds every slot now."""
        return self._exclusive

    def close(self) -> None:
        """Stops at once, for a worker that exits within its SIGTERM grace: every harness kills
        its candidate processes, a busy one's too (``Harness.abort``); the idle ones close now,
        each busy one when its job gives it back. Jobs that come later are cancelled."""
        with self._changed:
            self._closed = True
            for harness in self._created:
                harness.abort()
            idle, self._idle = self._idle, []
            self._created.clear()
            self._changed.notify_all()
        for harness in idle:
            harness.close()


def _catalog_job(device_kind: str):
    def run(payload: dict[str, Any], cancel: threading.Event) -> dict[str, Any]:
        from opforge_worker import catalog

        request = contract.CatalogRequest.from_dict(payload)
        ops = request.filters.ops if request.filters else None
        built = catalog.build(device_kind, cancel=cancel, ops=ops)
        if cancel.is_set():
            raise JobCancelled
        return built

    return run


def _lint_job(payload: dict[str, Any], cancel: threading.Event) -> dict[str, Any]:
    from opforge_worker.linter import lint_source

    request = contract.LintRequest.from_dict(payload)
    return lint_source(
        request.source, op=request.op, wrapper=request.wrapper, profile=request.profile
    )


@functools.cache
def _stored_samples():
    """The prepared samples every slot shares, backed by the sample store (sample_store.py): a
    restarted worker judges from it without importing the OpInfo database."""
    from opforge_worker.sample_store import SampleStore
    from opforge_worker.samples import SampleCache

    return SampleCache(store=SampleStore())


def handlers_for(
    role: str,
    device_kind: str,
    slots: int,
    toolchain_defects: tuple[contract.ToolchainDefect, ...] = (),
) -> tuple[dict[str, JobHandler], Any]:
    """The handlers a worker of `role` serves, and a callable that releases what they hold;
    ``toolchain_defects``: what the conformance probes found here (conformance.py)."""
    if role == contract.WorkerRole.LINT:
        return {contract.JobKind.LINT: _lint_job}, lambda: None
    if role != contract.WorkerRole.DEVICE:
        raise ValueError(f"role {role!r}: expected one of {', '.join(contract.WORKER_ROLES)}")
    if device_kind == device_kinds.NO_DEVICE:
        known = ", ".join(device_kinds.KINDS)
        raise ValueError(f"role 'device' needs a device kind, one of {known}")

    def make_harness():
        from opforge_worker.harness import Harness

        return Harness(
            device_kind=device_kind,
            sample_cache=_stored_samples(),
            toolchain_defects=toolchain_defects,
        )

    pool = HarnessPool(slots, make_harness)
    handlers = {
        contract.JobKind.TEST: pool.run_test,
        contract.JobKind.BENCHMARK: pool.run_benchmark,
        contract.JobKind.CATALOG: _catalog_job(device_kind),
        contract.JobKind.BACKEND: _backend_job(pool, device_kind, slots, toolchain_defects),
    }
    return handlers, pool.close


def _backend_job(
    pool: HarnessPool,
    device_kind: str,
    slots: int,
    toolchain_defects: tuple[contract.ToolchainDefect, ...],
) -> JobHandler:
    """An installed backend judged as ``validate --backend`` judges it, in candidate processes
    of its own that enabled it (one per slot): it holds every slot meanwhile, so that no test
    shares the device with them and no candidate process of the pool has the backend enabled."""

    def run(payload: dict[str, Any], cancel: threading.Event) -> dict[str, Any]:
        from opforge_worker import validate

        request = contract.BackendRequest.from_dict(payload)
        with pool.every_slot(cancel):
            validation = validate.validate_backend(
                request.package,
                device_kind,
                enable=request.enable or None,
                dtypes=[str(dtype) for dtype in request.dtypes],
                timeout_s=request.timeout_s,
                ops=request.ops,
                jobs=slots,
                toolchain_defects=toolchain_defects,
                cancel=cancel,
            )
        if cancel.is_set():
            raise JobCancelled
        # Built as the contract's type, so that only its fields travel (a verdict also says
        # where each kernel was registered, which the daemon has no field for).
        return contract.BackendResult(
            package=validation.backend["package"],
            enable=validation.backend["enable"],
            overloads=[contract.BackendOverload.from_dict(o) for o in validation.overloads],
        ).to_dict()

    return run
