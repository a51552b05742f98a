"""The worker's DEALER loop against a real ZeroMQ ROUTER playing the daemon."""

from __future__ import annotations

import random
import threading

import msgpack
import pytest
import zmq
from fake_daemon import WAIT_S

from opforge_worker import protocol
from opforge_worker.connection import Backoff, JobCancelled, Worker, WorkerConfig

TOOLCHAIN = {
    "python": "3.12.3",
    "torch": "2.11.0",
    "triton": "3.6.0",
    "cuda": "",
    "driver": "",
    "device": "cpu (triton interpreter)",
}


class RunningWorker:
    def __init__(self, endpoint: str, handlers, **overrides):
        config = WorkerConfig(
            endpoint=endpoint,
            role="device",
            device_kind="interpreter",
            slots=2,
            toolchain=TOOLCHAIN,
            fingerprint="0123456789abcdef",
            backoff_initial_s=0.05,
            backoff_max_s=0.2,
            shutdown_grace_s=5.0,
            **overrides,
        )
        self.worker = Worker(config, handlers)
        self.thread = threading.Thread(target=self.worker.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.worker.stop("test over")
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), "the worker did not stop"


def blocking(release: threading.Event, result: dict):
    """A handler that holds its slot until `release` is set."""

    def handler(payload, cancel):
        assert release.wait(WAIT_S)
        return result

    return handler


def echo(payload, cancel):
    return {"echo": payload}


def test_hello_announces_the_worker(daemon):
    running = RunningWorker(daemon.endpoint, {"test": echo, "catalog": echo})
    try:
        identity, hello = daemon.receive_type("hello")
        assert identity.decode() == running.worker.config.worker_id
        assert hello["worker_id"] == running.worker.config.worker_id
        assert hello["role"] == "device"
        assert hello["device_kind"] == "interpreter"
        assert hello["device_name"] == "cpu (triton interpreter)"
        assert hello["slots"] == 2
        assert hello["jobs"] == ["catalog", "test"]
        assert hello["toolchain"] == TOOLCHAIN
        assert hello["fingerprint"] == "0123456789abcdef"
        assert hello["pid"] > 0
    finally:
        running.stop()


def test_heartbeats_continue_while_a_slow_job_runs_then_the_result_arrives(daemon):
    release = threading.Event()
    running = RunningWorker(daemon.endpoint, {"test": blocking(release, {"value": 42})})
    try:
        identity = daemon.welcome(heartbeat_ms=20)
        daemon.send_job(identity, "j1", "test")
        busy_beats = 0
        while busy_beats < 3:
            _, beat = daemon.receive_type("heartbeat")
            busy_beats += beat["busy"] == 1
        release.set()
        _, result = daemon.receive_type("result")
        assert result["job_id"] == "j1"
        assert result["status"] == "done"
        assert result["payload"] == {"value": 42}
        assert result["elapsed_ms"] >= 0
        _, beat = daemon.receive_type("heartbeat")
        assert beat["busy"] == 0
    finally:
        release.set()
        running.stop()


# A handler stops with JobCancelled, or with whatever its own machinery raises (the harness's).
@pytest.mark.parametrize("stopping", [JobCancelled, RuntimeError])
def test_cancel_stops_the_job_and_answers_cancelled(daemon, stopping):
    started = threading.Event()

    def waits_for_cancel(payload, cancel):
        started.set()
        if cancel.wait(WAIT_S):
            raise stopping("candidate process killed")
        return {"finished": True}

    running = RunningWorker(daemon.endpoint, {"test": waits_for_cancel})
    try:
        identity = daemon.welcome()
        daemon.send_job(identity, "j2", "test")
        assert started.wait(WAIT_S)
        daemon.send(identity, "cancel", job_id="j2")
        daemon.send(identity, "cancel", job_id="never-sent")  # a no-op
        _, result = daemon.receive_type("result")
        assert (result["job_id"], result["status"], result["payload"]) == ("j2", "cancelled", {})
    finally:
        running.stop()


def test_unserved_kind_and_handler_fault_fail_with_a_clear_error(daemon):
    def broken(payload, cancel):
        raise RuntimeError("the harness lost its candidate process")

    running = RunningWorker(daemon.endpoint, {"test": broken})
    try:
        identity = daemon.welcome()
        daemon.send_job(identity, "j3", "lint")
        _, result = daemon.receive_type("result")
        assert result["job_id"] == "j3"
        assert result["status"] == "failed"
        assert result["error"] == "job kind 'lint' is not served by this worker (test)"
        daemon.send_job(identity, "j4", "test")
        _, result = daemon.receive_type("result")
        assert result["status"] == "failed"
        assert result["error"] == "RuntimeError: the harness lost its candidate process"
    finally:
        running.stop()


def test_unencodable_result_is_reported_as_failed(daemon):
    running = RunningWorker(daemon.endpoint, {"test": lambda payload, cancel: {"x": object()}})
    try:
        identity = daemon.welcome()
        daemon.send_job(identity, "j5", "test")
        _, result = daemon.receive_type("result")
        assert result["status"] == "failed"
        assert "cannot be encoded as msgpack" in result["error"]
    finally:
        running.stop()


def test_malformed_frames_are_dropped_and_the_worker_keeps_serving(daemon):
    running = RunningWorker(daemon.endpoint, {"test": echo})
    try:
        identity = daemon.welcome()
        daemon.send_raw(identity, b"\xc1 not msgpack")
        daemon.send_raw(identity, msgpack.packb([1, 2, 3]))
        daemon.send_raw(identity, msgpack.packb({"v": 2, "type": "job"}))
        daemon.send_raw(identity, msgpack.packb({"v": 1, "type": "teleport"}))
        daemon.send_raw(identity, msgpack.packb({"v": 1, "type": "job", "job_id": 7}))
        daemon.send_raw(identity, protocol.encode("heartbeat"), protocol.encode("heartbeat"))
        daemon.send_raw(identity, b"\xdd\xff\xff\xff\xff")  # a 4-billion-entry array header
        daemon.send_job(identity, "j6", "test", {"still": "alive"})
        _, result = daemon.receive_type("result")
        assert (result["job_id"], result["status"]) == ("j6", "done")
        assert result["payload"] == {"echo": {"still": "alive"}}
    finally:
        running.stop()


def test_reconnects_with_hello_after_the_daemon_goes_silent(daemon):
    running = RunningWorker(daemon.endpoint, {"test": echo})
    try:
        first_identity = daemon.welcome(heartbeat_ms=20, liveness=3)
        daemon.welcomed_with = None
        # Say nothing more: the worker must give up on us and say hello again.
        identity, hello = daemon.receive_type("hello")
        assert identity == first_identity
        assert hello["worker_id"] == running.worker.config.worker_id
        # And it serves on the new connection.
        daemon.send(identity, "welcome", heartbeat_ms=50, liveness=1000)
        daemon.send_job(identity, "j7", "test")
        _, result = daemon.receive_type("result")
        assert (result["job_id"], result["status"]) == ("j7", "done")
    finally:
        running.stop()


def test_hello_required_and_daemon_goodbye_bring_a_new_hello(daemon):
    running = RunningWorker(daemon.endpoint, {"test": echo})
    try:
        identity = daemon.welcome()
        daemon.welcomed_with = None
        daemon.send(identity, "hello_required")
        daemon.receive_type("hello")
        daemon.send(identity, "welcome", heartbeat_ms=50, liveness=1000)
        daemon.send(identity, "goodbye", reason="daemon shutting down")
        identity, hello = daemon.receive_type("hello")
        assert hello["worker_id"] == running.worker.config.worker_id
    finally:
        running.stop()


def test_results_wait_for_the_welcome_after_a_reconnect(daemon):
    release = threading.Event()
    running = RunningWorker(daemon.endpoint, {"test": blocking(release, {"ok": True})})
    try:
        identity = daemon.welcome()
        daemon.send_job(identity, "j8", "test")
        daemon.send(identity, "hello_required")
        daemon.receive_type("hello")
        release.set()
        # Unwelcomed, the worker holds the result back; nothing but hello may arrive.
        assert not daemon.router.poll(300, zmq.POLLIN)
        daemon.send(identity, "welcome", heartbeat_ms=50, liveness=1000)
        _, result = daemon.receive_type("result")
        assert (result["job_id"], result["status"]) == ("j8", "done")
    finally:
        release.set()
        running.stop()


def test_stop_says_goodbye_and_cancels_running_jobs(daemon):
    started = threading.Event()
    saw_cancel = threading.Event()

    def waits(payload, cancel):
        started.set()
        if cancel.wait(WAIT_S):
            saw_cancel.set()
            raise JobCancelled
        return {}

    running = RunningWorker(daemon.endpoint, {"test": waits})
    identity = daemon.welcome()
    daemon.send_job(identity, "j9", "test")
    assert started.wait(WAIT_S)
    running.stop()
    _, goodbye = daemon.receive_type("goodbye")
    assert goodbye["reason"] == "test over"
    assert saw_cancel.is_set()


def test_backoff_doubles_to_its_cap_with_jitter_and_resets():
    backoff = Backoff(1.0, 32.0, random.Random(7))
    ceilings = [1, 2, 4, 8, 16, 32, 32, 32]
    delays = [backoff.next_delay() for _ in ceilings]
    assert all(
        ceiling / 2 <= delay <= ceiling for delay, ceiling in zip(delays, ceilings, strict=True)
    )
    assert len(set(delays)) == len(delays)  # jittered, not lockstep
    backoff.reset()
    assert 0.5 <= backoff.next_delay() <= 1.0
