"""The job kinds a worker serves, by role (messages/PROTOCOL.md, "Job payloads").

Role `device` serves `test` and `catalog` on its device; role `lint` serves `lint` and needs no
device. Heavy modules (the harness, the linter, the catalog) are imported on first use, so that a
worker says hello within a second of starting.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any

from opforge_worker.connection import JobCancelled, JobHandler

ROLES = ("device", "lint")


def _required(payload: dict[str, Any], key: str, kind: type) -> Any:
    if key not in payload:
        raise ValueError(f"payload: missing key {key!r}")
    value = payload[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"payload: key {key!r}: expected {kind.__name__}")
    return value


class HarnessPool:
    """One warm Harness per slot: a job takes one and gives it back, so concurrent jobs never share
    a candidate process.

    A test of several dtypes in mode ``all`` also takes the harnesses that are idle when it
    starts, and they test its dtypes side by side, each dtype apart. On an H100 the warm pass of
    a nine-kernel library at 8 slots was bound by its largest test (amax: 200 of its 720 calls)
    while other slots had finished. Mode ``first_failure`` keeps one harness: it stops early, and
    the dtypes after a failure would be work for nothing.
    """

    def __init__(self, slots: int, make_harness: Callable[[], Any]):
        self._make_harness = make_harness
        self._idle: queue.Queue = queue.Queue()
        self._created = []
        self._lock = threading.Lock()
        self._slots = slots

    def _take(self):
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if len(self._created) < self._slots:
                harness = self._make_harness()
                self._created.append(harness)
                return harness
        return self._idle.get()

    def _take_idle(self, most: int) -> list:
        """Up to ``most`` harnesses that are idle now (none started for it: a start takes
        seconds)."""
        taken = []
        while len(taken) < most:
            try:
                taken.append(self._idle.get_nowait())
            except queue.Empty:
                break
        return taken

    def run_test(self, payload: dict[str, Any], cancel: threading.Event) -> dict[str, Any]:
        harnesses = [self._take()]
        try:
            dtypes = payload.get("dtypes")
            if (
                payload.get("mode") == "all"
                and isinstance(dtypes, list)
                and len(set(map(str, dtypes))) == len(dtypes) > 1
            ):
                harnesses += self._take_idle(len(dtypes) - 1)
            if len(harnesses) == 1:
                return harnesses[0].run_test(payload, cancel)
            return _test_dtypes_apart(harnesses, payload, cancel)
        finally:
            for harness in harnesses:
                self._idle.put(harness)

    def close(self) -> None:
        with self._lock:
            for harness in self._created:
                harness.close()
            self._created.clear()


def _test_dtypes_apart(harnesses: list, payload: dict[str, Any], cancel: threading.Event) -> dict:
    """``payload``'s test, its dtypes tested one by one on ``harnesses`` side by side, in one
    result (``results.merge_dtype_results``)."""
    from opforge_worker.results import merge_dtype_results

    pending: queue.SimpleQueue = queue.SimpleQueue()
    for dtype in payload["dtypes"]:
        pending.put(dtype)
    results: dict[str, dict] = {}

    def drain(harness) -> None:
        try:
            while True:
                try:
                    dtype = pending.get_nowait()
                except queue.Empty:
                    return
                results[str(dtype)] = harness.run_test({**payload, "dtypes": [dtype]}, cancel)
        except BaseException:
            while not pending.empty():  # the others stop after their current dtype
                pending.get_nowait()
            raise

    with concurrent.futures.ThreadPoolExecutor(len(harnesses) - 1) as helpers:
        futures = [helpers.submit(drain, harness) for harness in harnesses[1:]]
        try:
            drain(harnesses[0])
        finally:
            for future in futures:
                future.exception()  # every harness is done before any goes back to the pool
    for future in futures:
        future.result()
    return merge_dtype_results([str(dtype) for dtype in payload["dtypes"]], results)


def _catalog_job(device_kind: str):
    def run(payload: dict[str, Any], cancel: threading.Event) -> dict[str, Any]:
        from opforge_worker import catalog

        filters = payload.get("filters") or {}
        if not isinstance(filters, dict):
            raise ValueError("payload: key 'filters': expected a map")
        built = catalog.build(device_kind, cancel=cancel, **catalog.filter_arguments(filters))
        if cancel.is_set():
            raise JobCancelled
        return built

    return run


def _lint_job(payload: dict[str, Any], cancel: threading.Event) -> dict[str, Any]:
    from opforge_worker.linter import lint_source

    return lint_source(
        _required(payload, "source", str),
        op=_required(payload, "op", str),
        wrapper=_required(payload, "wrapper", str),
        profile=_required(payload, "profile", str),
    )


def handlers_for(role: str, device_kind: str, slots: int) -> tuple[dict[str, JobHandler], Any]:
    """The handlers a worker of `role` serves, and a callable that releases what they hold."""
    if role == "lint":
        return {"lint": _lint_job}, lambda: None
    if role != "device":
        raise ValueError(f"role {role!r}: expected one of {', '.join(ROLES)}")
    if device_kind == "none":
        raise ValueError("role 'device' needs a device kind, 'cuda' or 'interpreter'")

    def make_harness():
        from opforge_worker.harness import Harness

        return Harness(device_kind=device_kind)

    pool = HarnessPool(slots, make_harness)
    return {"test": pool.run_test, "catalog": _catalog_job(device_kind)}, pool.close
