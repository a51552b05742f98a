"""The worker's ZeroMQ CURVE keys: the daemon's public key and the worker's own key pair.

Keys come as ZeroMQ's certificate files (`NAME.key` public, `NAME.key_secret` both keys, as
`opforge keys generate` and pyzmq's zmq.auth write them) or as Z85 text (40 characters), from the
command line or the environment: OPFORGE_WORKER_SERVER_KEY (file or key), OPFORGE_WORKER_KEY_FILE
(the worker's secret key file) or OPFORGE_WORKER_SECRET_KEY (its secret key as Z85).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import zmq
import zmq.auth

SERVER_KEY_ENV = "OPFORGE_WORKER_SERVER_KEY"
KEY_FILE_ENV = "OPFORGE_WORKER_KEY_FILE"
SECRET_KEY_ENV = "OPFORGE_WORKER_SECRET_KEY"

_Z85_KEY_CHARS = 40


@dataclass(frozen=True)
class CurveKeys:
    """All Z85 text: what a DEALER needs to connect to a CURVE server."""

    server_public: str
    public: str
    secret: str

    def apply(self, socket: zmq.Socket) -> None:
        socket.curve_serverkey = self.server_public.encode()
        socket.curve_publickey = self.public.encode()
        socket.curve_secretkey = self.secret.encode()


def _is_z85_key(text: str) -> bool:
    if len(text) != _Z85_KEY_CHARS:
        return False
    try:
        zmq.utils.z85.decode(text)
    except (ValueError, KeyError):
        return False
    return True


def _read_certificate(path: str, what: str) -> tuple[bytes, bytes | None]:
    try:
        return zmq.auth.load_certificate(path)
    except (OSError, ValueError) as error:
        raise ValueError(f"{what} {path!r}: {error}") from None


def _server_public(value: str) -> str:
    if not os.path.exists(value) and _is_z85_key(value):
        return value
    public, _ = _read_certificate(value, "--server-key")
    return public.decode()


def _own_pair(key_file: str | None, secret: str | None) -> tuple[str, str]:
    if key_file:
        public, secret_key = _read_certificate(key_file, "--key-file")
        if not secret_key:
            raise ValueError(
                f"--key-file {key_file!r} holds no secret-key: name the NAME.key_secret file"
            )
        return public.decode(), secret_key.decode()
    if not _is_z85_key(secret):
        raise ValueError(f"{SECRET_KEY_ENV} must be a secret key of 40 Z85 characters")
    return zmq.curve_public(secret.encode()).decode(), secret


def resolve(
    server_key: str | None, key_file: str | None, env: Mapping[str, str] = os.environ
) -> CurveKeys | None:
    """The keys from the flags, else the environment; None when neither names any (the daemon
    then must admit unauthenticated workers). Half a configuration is a ValueError."""
    server_key = server_key or env.get(SERVER_KEY_ENV)
    key_file = key_file or env.get(KEY_FILE_ENV)
    secret = env.get(SECRET_KEY_ENV)
    if not server_key and not key_file and not secret:
        return None
    if not server_key:
        raise ValueError(
            f"a key pair without the daemon's public key: pass --server-key or set {SERVER_KEY_ENV}"
        )
    if not key_file and not secret:
        raise ValueError(
            "the daemon's public key without the worker's own key pair: pass --key-file "
            f"(NAME.key_secret from `opforge keys generate NAME`) or set {KEY_FILE_ENV}"
        )
    if not zmq.has("curve"):
        raise ValueError("this libzmq has no CURVE (zmq.has('curve') is false)")
    public, secret = _own_pair(key_file, secret)
    return CurveKeys(server_public=_server_public(server_key), public=public, secret=secret)
