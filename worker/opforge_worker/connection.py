"""The worker side of the workers socket (messages/PROTOCOL.md): one DEALER, jobs on threads.

One thread (the one calling `Worker.run`, the main thread under the CLI so that SIGTERM reaches it)
owns the ZeroMQ socket and does all I/O: it sends hello and heartbeats, receives jobs and cancels,
and sends results. Jobs run on `slots` job threads, which hand results back through a queue and wake
the I/O thread through a pipe it polls next to the socket. The I/O thread never runs a job, so
heartbeats keep going while jobs run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import random
import secrets
import socket
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zmq
import zmq.utils.monitor

from opforge_worker import protocol
from opforge_worker.contract import ConformanceReport, JobStatus
from opforge_worker.curve_keys import CurveKeys

log = logging.getLogger("opforge_worker.connection")

# Handshake failures of a CURVE client: refused by the daemon's allow-list, or not understood.
_REFUSALS = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL

# A job handler gets the job's payload and an Event set on cancel, and returns the result payload.
# Raising means the worker could not run the job (status `failed`), never a verdict on a candidate.
JobHandler = Callable[[dict[str, Any], threading.Event], dict[str, Any]]


class JobCancelled(Exception):
    """Raised by a handler that stopped because its cancel Event was set. Any exception raised
    once the Event is set means the same."""


@dataclass
class WorkerConfig:
    endpoint: str
    role: str  # `device` or `lint`
    device_kind: str  # `cuda`, `interpreter` or `none`
    slots: int
    toolchain: dict[str, str]
    fingerprint: str
    worker_id: str = field(
        default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
    )
    max_frame_bytes: int = protocol.DEFAULT_MAX_FRAME_BYTES
    # Used until the daemon's `welcome` says otherwise.
    heartbeat_ms: int = 1000
    liveness: int = 3
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 32.0
    # How long a SIGTERM'd worker waits for cancelled jobs to let go of the device: well within
    # the 5 s the daemon's supervisor gives a local worker before SIGKILL (devices/supervisor.hpp),
    # which would leave the candidate processes, in sessions of their own, running.
    shutdown_grace_s: float = 2.0
    # None connects without authentication, which a daemon admits only on ipc or loopback when
    # its configuration allows it.
    curve: CurveKeys | None = None
    # What the conformance probes found on this toolchain (contract.ConformanceReport), sent in
    # every hello so that the daemon lists the toolchain's defects; None when none ran.
    conformance: ConformanceReport | None = None


@dataclass
class _Job:
    job_id: str
    kind: str
    payload: dict[str, Any]
    cancel: threading.Event


@dataclass
class _Outcome:
    job_id: str
    status: str
    payload: dict[str, Any]
    error: str
    elapsed_ms: int


class Backoff:
    """Reconnect delays: initial, doubling to max, each drawn from [delay/2, delay] (jitter keeps a
    fleet of workers from reconnecting in lockstep after the daemon restarts)."""

    def __init__(self, initial_s: float, max_s: float, rng: random.Random | None = None):
        self._initial = initial_s
        self._max = max_s
        self._next = initial_s
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self._max)
        return self._rng.uniform(delay / 2, delay)

    def reset(self) -> None:
        self._next = self._initial


class Worker:
    def __init__(
        self,
        config: WorkerConfig,
        handlers: dict[str, JobHandler],
        release: Callable[[], None] = lambda: None,
    ):
        """``release`` frees what the handlers hold once the worker stops; it is called while
        cancelled jobs may still run, and must make them return at once (kill their
        subprocesses) rather than wait for them."""
        if config.slots < 1:
            raise ValueError(f"slots must be >= 1, got {config.slots}")
        self.config = config
        self._handlers = handlers
        self._release = release
        self._context = zmq.Context()
        self._socket: zmq.Socket | None = None
        # With CURVE: the socket's failed handshakes, which say why the daemon never answers.
        self._monitor: zmq.Socket | None = None
        self._logged_refusals: set[int] = set()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._outcomes: queue.Queue[_Outcome] = queue.Queue()
        self._running: dict[str, threading.Event] = {}  # job id -> cancel, queued or running
        self._running_lock = threading.Lock()
        self._unsent: deque[_Outcome] = deque()
        self._stop_reason: str | None = None
        self._welcomed = False
        self._logged_malformed: set[str] = set()
        self._backoff = Backoff(config.backoff_initial_s, config.backoff_max_s)
        self._threads = [
            threading.Thread(target=self._job_loop, name=f"opforge-job-{slot}", daemon=True)
            for slot in range(config.slots)
        ]

    # -- public ------------------------------------------------------------------------------

    def stop(self, reason: str) -> None:
        """Asks `run` to say goodbye and return. Safe from signal handlers and other threads."""
        self._stop_reason = reason
        self._wake()

    def run(self) -> None:
        """Serves until `stop`; reconnects whenever the daemon goes silent or says goodbye."""
        for thread in self._threads:
            thread.start()
        try:
            self._connect()
            while self._stop_reason is None:
                self._serve_until_lost()
                if self._stop_reason is None:
                    self._reconnect_after_backoff()
            self._say_goodbye(self._stop_reason)
        finally:
            self._shutdown()

    @property
    def jobs_served(self) -> list[str]:
        return sorted(self._handlers)

    # -- connection --------------------------------------------------------------------------

    def _connect(self) -> None:
        dealer = self._context.socket(zmq.DEALER)
        dealer.setsockopt_string(zmq.ROUTING_ID, self.config.worker_id)
        dealer.setsockopt(zmq.LINGER, 0)
        # The transport drops a larger frame before it is allocated in full.
        dealer.setsockopt(zmq.MAXMSGSIZE, self.config.max_frame_bytes)
        if self.config.curve is not None:
            self.config.curve.apply(dealer)
            self._monitor = dealer.get_monitor_socket(_REFUSALS)
        try:
            dealer.connect(self.config.endpoint)
        except zmq.ZMQError as error:
            dealer.close(linger=0)
            raise ValueError(f"endpoint {self.config.endpoint!r}: {error}") from None
        self._socket = dealer
        self._welcomed = False
        self._send_hello()
        log.info("connecting to %s as %s", self.config.endpoint, self.config.worker_id)

    def _disconnect(self, linger_ms: int = 0) -> None:
        if self._monitor is not None:
            self._socket.disable_monitor()
            self._monitor.close(linger=0)
            self._monitor = None
        if self._socket is not None:
            self._socket.close(linger=linger_ms)
            self._socket = None

    def _reconnect_after_backoff(self) -> None:
        self._disconnect()
        delay = self._backoff.next_delay()
        log.warning("daemon lost; reconnecting in %.1f s", delay)
        deadline = time.monotonic() + delay
        # Wait on the wake pipe, so that stop() and finished jobs are noticed while waiting.
        while self._stop_reason is None and time.monotonic() < deadline:
            poller = zmq.Poller()
            poller.register(self._wake_read, zmq.POLLIN)
            poller.poll(max(0.0, deadline - time.monotonic()) * 1000)
            self._drain_wake()
            self._collect_outcomes()
        if self._stop_reason is None:
            self._connect()

    def _serve_until_lost(self) -> None:
        """Returns when the daemon is presumed dead or said goodbye, or on stop()."""
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(self._wake_read, zmq.POLLIN)
        if self._monitor is not None:
            poller.register(self._monitor, zmq.POLLIN)
        last_heard = time.monotonic()
        next_beat = time.monotonic()
        while self._stop_reason is None:
            now = time.monotonic()
            interval_s = self.config.heartbeat_ms / 1000
            if now - last_heard > interval_s * self.config.liveness:
                return
            if self._welcomed and now >= next_beat:
                self._send("heartbeat", busy=self._busy())
                next_beat = now + interval_s
            wait_s = min(next_beat - now if self._welcomed else interval_s, interval_s)
            events = dict(poller.poll(max(0.0, wait_s) * 1000))
            if self._wake_read in events:
                self._drain_wake()
            if self._monitor in events:
                self._log_refusals()
            self._collect_outcomes()
            if self._socket in events:
                while self._socket.poll(0, zmq.POLLIN):
                    message = self._receive()
                    if message is None:
                        continue
                    last_heard = time.monotonic()
                    if message.type == "goodbye":
                        log.warning("daemon said goodbye: %s", message["reason"])
                        return
                    if message.type == "welcome":
                        next_beat = time.monotonic()
                    self._handle(message)

    def _log_refusals(self) -> None:
        """Says once per kind why the daemon does not answer: it keeps refusing the handshake."""
        while self._monitor.poll(0, zmq.POLLIN):
            event = zmq.utils.monitor.recv_monitor_message(self._monitor)["event"]
            if event in self._logged_refusals:
                continue
            self._logged_refusals.add(event)
            if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                log.error(
                    "the daemon refused this worker's key %s: it is not on the daemon's "
                    "allow-list (admit it with `opforge keys generate NAME`, or copy its NAME.key "
                    "into workers.curve.allowed_keys, then SIGHUP the daemon)",
                    self.config.curve.public,
                )
            else:
                log.error(
                    "the CURVE handshake with %s failed: is --server-key the daemon's public key, "
                    "and does the daemon use CURVE?",
                    self.config.endpoint,
                )

    def _receive(self) -> protocol.Message | None:
        parts = self._socket.recv_multipart(copy=True)
        try:
            return protocol.decode_multipart(parts, max_frame_bytes=self.config.max_frame_bytes)
        except protocol.MalformedFrame as malformed:
            # Logged once per reason: a misbehaving peer must not flood the log either.
            if malformed.reason not in self._logged_malformed:
                self._logged_malformed.add(malformed.reason)
                log.warning(
                    "dropped a malformed frame from the daemon (%s): %s",
                    malformed.reason,
                    malformed,
                )
            return None

    def _handle(self, message: protocol.Message) -> None:
        if message.type == "welcome":
            self.config.heartbeat_ms = max(1, message["heartbeat_ms"])
            self.config.liveness = max(1, message["liveness"])
            self._welcomed = True
            self._backoff.reset()
            log.info(
                "welcomed: heartbeat %d ms, liveness %d",
                self.config.heartbeat_ms,
                self.config.liveness,
            )
            self._flush_unsent()
        elif message.type == "hello_required":
            log.info("daemon does not know us (restarted?); saying hello again")
            self._welcomed = False
            self._send_hello()
        elif message.type == "job":
            self._accept(message)
        elif message.type == "cancel":
            with self._running_lock:
                cancel = self._running.get(message["job_id"])
            if cancel is not None:
                cancel.set()
        # `heartbeat` only refreshes liveness, which the caller did.

    def _accept(self, message: protocol.Message) -> None:
        job_id = message["job_id"]
        with self._running_lock:
            if job_id in self._running:
                # A redelivered job already running here: its result will answer both.
                return
            cancel = threading.Event()
            self._running[job_id] = cancel
        self._jobs.put(_Job(job_id, message["kind"], message["payload"], cancel))

    # -- frames out --------------------------------------------------------------------------

    def _send(self, type_: str, **fields: Any) -> bool:
        """Sends without blocking: a daemon that stopped reading must not stall the I/O thread
        (the liveness check then reconnects). False when the frame could not be queued."""
        try:
            self._socket.send(protocol.encode(type_, **fields), zmq.NOBLOCK)
        except zmq.Again:
            log.warning("the daemon is not taking frames; %s not sent", type_)
            return False
        return True

    def _send_hello(self) -> None:
        config = self.config
        self._send(
            "hello",
            worker_id=config.worker_id,
            role=config.role,
            device_kind=config.device_kind,
            device_name=config.toolchain.get("device", ""),
            slots=config.slots,
            jobs=self.jobs_served,
            toolchain=config.toolchain,
            fingerprint=config.fingerprint,
            host=socket.gethostname(),
            pid=os.getpid(),
            **({"conformance": config.conformance.to_dict()} if config.conformance else {}),
        )

    def _collect_outcomes(self) -> None:
        while True:
            try:
                self._unsent.append(self._outcomes.get_nowait())
            except queue.Empty:
                break
        if self._welcomed and self._socket is not None:
            self._flush_unsent()

    def _flush_unsent(self) -> None:
        while self._unsent:
            try:
                self._socket.send(self._encode_result(self._unsent[0]), zmq.NOBLOCK)
            except zmq.Again:
                return  # kept for the next flush, or for the next connection's welcome
            self._unsent.popleft()

    def _encode_result(self, outcome: _Outcome) -> bytes:
        fields = {
            "job_id": outcome.job_id,
            "status": outcome.status,
            "payload": outcome.payload,
            "elapsed_ms": outcome.elapsed_ms,
        }
        if outcome.error:
            fields["error"] = outcome.error
        try:
            frame = protocol.encode("result", **fields)
        except (TypeError, ValueError, OverflowError) as error:
            problem = f"the job's result cannot be encoded as msgpack: {error}"
        else:
            if len(frame) <= self.config.max_frame_bytes:
                return frame
            problem = (
                f"the job's result is {len(frame)} bytes, over the "
                f"{self.config.max_frame_bytes}-byte frame limit"
            )
        log.error("job %s: %s", outcome.job_id, problem)
        return protocol.encode(
            "result",
            job_id=outcome.job_id,
            status=JobStatus.FAILED.value,
            payload={},
            error=problem,
            elapsed_ms=outcome.elapsed_ms,
        )

    def _say_goodbye(self, reason: str) -> None:
        if self._socket is None:
            return
        self._send("goodbye", reason=reason)
        # Give the goodbye time to leave before the socket closes.
        self._disconnect(linger_ms=1000)

    # -- jobs --------------------------------------------------------------------------------

    def _busy(self) -> int:
        with self._running_lock:
            return len(self._running)

    def _job_loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            started = time.monotonic()
            status, payload, error = self._run_job(job)
            elapsed_ms = int((time.monotonic() - started) * 1000)
            with self._running_lock:
                self._running.pop(job.job_id, None)
            self._outcomes.put(_Outcome(job.job_id, status, payload, error, elapsed_ms))
            self._wake()

    def _run_job(self, job: _Job) -> tuple[str, dict[str, Any], str]:
        if job.cancel.is_set():
            return JobStatus.CANCELLED.value, {}, ""
        handler = self._handlers.get(job.kind)
        if handler is None:
            served = ", ".join(self.jobs_served)
            return (
                JobStatus.FAILED.value,
                {},
                f"job kind {job.kind!r} is not served by this worker ({served})",
            )
        try:
            payload = handler(job.payload, job.cancel)
        except Exception as error:  # a harness fault: reported, never fatal to the worker
            if job.cancel.is_set():  # JobCancelled, or the handler's own way of stopping
                return JobStatus.CANCELLED.value, {}, ""
            log.error("job %s (%s) failed:\n%s", job.job_id, job.kind, traceback.format_exc())
            return JobStatus.FAILED.value, {}, f"{type(error).__name__}: {error}"
        if job.cancel.is_set():
            return JobStatus.CANCELLED.value, {}, ""
        return JobStatus.DONE.value, payload, ""

    # -- plumbing ----------------------------------------------------------------------------

    def _wake(self) -> None:
        # A full pipe already holds wake-ups enough.
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_write, b"\0")

    def _drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_read, 4096):
                pass

    def _shutdown(self) -> None:
        with self._running_lock:
            for cancel in self._running.values():
                cancel.set()
        for _ in self._threads:
            self._jobs.put(None)
        # A job waiting on a candidate's start-up or kernel watches no cancel event.
        self._release()
        deadline = time.monotonic() + self.config.shutdown_grace_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._disconnect()
        self._context.term()
        os.close(self._wake_read)
        os.close(self._wake_write)
