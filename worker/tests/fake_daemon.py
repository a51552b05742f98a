"""A ZeroMQ ROUTER playing the daemon, for the worker's connection tests."""

from __future__ import annotations

import time
from pathlib import Path

import zmq
from zmq.auth.thread import ThreadAuthenticator

from opforge_worker import protocol

# Generous: a wait that runs out is a failure, never a timing assertion.
WAIT_S = 20.0


class FakeDaemon:
    """A bound ROUTER that decodes what workers send with the daemon-side schema."""

    def __init__(self, secret_key: bytes | None = None, allowed_dir: Path | None = None):
        """With `secret_key`, a CURVE server admitting the public keys (`*.key`) in
        `allowed_dir`, as the daemon's workers socket does."""
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.authenticator: ThreadAuthenticator | None = None
        if secret_key is not None:
            self.authenticator = ThreadAuthenticator(self.context)
            self.authenticator.start()
            self.authenticator.configure_curve(domain="*", location=str(allowed_dir))
            self.router.curve_server = True
            self.router.curve_secretkey = secret_key
        port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.welcomed_with: dict | None = None

    def receive(self, timeout_s: float = WAIT_S) -> tuple[bytes, protocol.Message]:
        if not self.router.poll(timeout_s * 1000, zmq.POLLIN):
            raise AssertionError(f"nothing from the worker within {timeout_s} s")
        identity, frame = self.router.recv_multipart()
        return identity, protocol.decode(frame, protocol.WORKER_TO_DAEMON)

    def receive_type(self, type_: str, timeout_s: float = WAIT_S) -> tuple[bytes, protocol.Message]:
        """The next message of `type_`, skipping others (heartbeats mostly). A hello met on the
        way is welcomed again: on a loaded host a worker may give up waiting for the first one."""
        deadline = time.monotonic() + timeout_s
        while True:
            identity, message = self.receive(max(0.0, deadline - time.monotonic()))
            if message.type == type_:
                return identity, message
            if message.type == "hello" and self.welcomed_with is not None:
                self.send(identity, "welcome", **self.welcomed_with)

    def send(self, identity: bytes, type_: str, **fields) -> None:
        self.router.send_multipart([identity, protocol.encode(type_, **fields)])

    def send_job(
        self,
        identity: bytes,
        job_id: str,
        kind: str = "test",
        payload=None,
        deadline_ms: int = 600000,
    ) -> None:
        self.send(
            identity,
            "job",
            job_id=job_id,
            kind=kind,
            attempt=1,
            deadline_ms=deadline_ms,
            payload=payload or {},
        )

    def send_raw(self, identity: bytes, *parts: bytes) -> None:
        self.router.send_multipart([identity, *parts])

    def welcome(self, heartbeat_ms: int = 50, liveness: int = 1000) -> bytes:
        identity, hello = self.receive_type("hello")
        self.welcomed_with = {"heartbeat_ms": heartbeat_ms, "liveness": liveness}
        self.send(identity, "welcome", **self.welcomed_with)
        return identity

    def close(self) -> None:
        self.router.close(linger=0)
        if self.authenticator is not None:
            self.authenticator.stop()
        self.context.term()
