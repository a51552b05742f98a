"""The worker authenticates with ZeroMQ CURVE: its keys from flags, files or the environment, and
the real worker process admitted by a CURVE daemon that knows its key, refused by one that does
not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import zmq
import zmq.auth
import zmq.utils.monitor
from fake_daemon import FakeDaemon

from opforge_worker import curve_keys

WORKER_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture
def keys(tmp_path):
    """The daemon's key pair, an admitted worker's and a stranger's, as certificate files."""
    for name in ("server", "worker", "stranger"):
        zmq.auth.create_certificates(str(tmp_path), name)
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "worker.key").write_text((tmp_path / "worker.key").read_text())
    return tmp_path


def pair(keys: Path, name: str) -> tuple[str, str]:
    public, secret = zmq.auth.load_certificate(str(keys / f"{name}.key_secret"))
    return public.decode(), secret.decode()


def test_keys_come_from_files(keys):
    resolved = curve_keys.resolve(str(keys / "server.key"), str(keys / "worker.key_secret"), env={})
    assert resolved == curve_keys.CurveKeys(
        server_public=pair(keys, "server")[0],
        public=pair(keys, "worker")[0],
        secret=pair(keys, "worker")[1],
    )


def test_keys_come_from_the_environment_as_files_or_z85(keys):
    server_public = pair(keys, "server")[0]
    public, secret = pair(keys, "worker")
    from_files = curve_keys.resolve(
        None,
        None,
        env={
            curve_keys.SERVER_KEY_ENV: str(keys / "server.key"),
            curve_keys.KEY_FILE_ENV: str(keys / "worker.key_secret"),
        },
    )
    from_text = curve_keys.resolve(
        None,
        None,
        env={curve_keys.SERVER_KEY_ENV: server_public, curve_keys.SECRET_KEY_ENV: secret},
    )
    expected = curve_keys.CurveKeys(server_public=server_public, public=public, secret=secret)
    assert from_files == from_text == expected
    # Flags win over the environment.
    flagged = curve_keys.resolve(
        str(keys / "server.key"),
        str(keys / "stranger.key_secret"),
        env={curve_keys.KEY_FILE_ENV: str(keys / "worker.key_secret")},
    )
    assert flagged.public == pair(keys, "stranger")[0]


def test_no_keys_means_no_curve_and_half_a_configuration_is_an_error(keys):
    assert curve_keys.resolve(None, None, env={}) is None
    with pytest.raises(ValueError, match="without the daemon's public key: pass --server-key"):
        curve_keys.resolve(None, str(keys / "worker.key_secret"), env={})
    with pytest.raises(ValueError, match="without the worker's own key pair: pass --key-file"):
        curve_keys.resolve(str(keys / "server.key"), None, env={})
    with pytest.raises(ValueError, match="holds no secret-key: name the NAME.key_secret file"):
        curve_keys.resolve(str(keys / "server.key"), str(keys / "worker.key"), env={})
    with pytest.raises(ValueError, match="--server-key 'nowhere.key'"):
        curve_keys.resolve("nowhere.key", str(keys / "worker.key_secret"), env={})
    with pytest.raises(ValueError, match="OPFORGE_WORKER_SECRET_KEY must be a secret key of 40"):
        curve_keys.resolve(
            str(keys / "server.key"), None, env={curve_keys.SECRET_KEY_ENV: "too short"}
        )


def lint_worker(daemon: FakeDaemon, cache: Path, *args: str, env: dict | None = None):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "opforge_worker",
            "serve",
            "--connect",
            daemon.endpoint,
            "--device",
            "none",
            "--role",
            "lint",
            *args,
        ],
        cwd=WORKER_DIR,
        env={**os.environ, "OPFORGE_CACHE_DIR": str(cache), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(process: subprocess.Popen) -> str:
    process.send_signal(signal.SIGTERM)
    try:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        return err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture
def curve_daemon(keys):
    fake = FakeDaemon(secret_key=pair(keys, "server")[1].encode(), allowed_dir=keys / "allowed")
    yield fake
    fake.close()


def test_a_worker_with_an_admitted_key_registers_and_serves(curve_daemon, keys, tmp_path):
    process = lint_worker(
        curve_daemon,
        tmp_path,
        "--server-key",
        str(keys / "server.key"),
        "--key-file",
        str(keys / "worker.key_secret"),
    )
    try:
        identity = curve_daemon.welcome()
        curve_daemon.send_job(identity, "l1", "lint", {"source": "x = 1\n", "op": "exp"})
        _, result = curve_daemon.receive_type("result", timeout_s=300)
        assert (result["job_id"], result["status"]) == ("l1", "failed")
    finally:
        stop(process)


def test_keys_from_the_environment_register_too(curve_daemon, keys, tmp_path):
    process = lint_worker(
        curve_daemon,
        tmp_path,
        env={
            curve_keys.SERVER_KEY_ENV: pair(keys, "server")[0],
            curve_keys.SECRET_KEY_ENV: pair(keys, "worker")[1],
        },
    )
    try:
        _, hello = curve_daemon.receive_type("hello", timeout_s=300)
        assert hello["role"] == "lint"
    finally:
        stop(process)


def test_a_stranger_and_a_worker_without_keys_are_never_heard(curve_daemon, keys, tmp_path):
    stranger = lint_worker(
        curve_daemon,
        tmp_path,
        "--server-key",
        str(keys / "server.key"),
        "--key-file",
        str(keys / "stranger.key_secret"),
    )
    plain = lint_worker(curve_daemon, tmp_path)
    monitor = curve_daemon.router.get_monitor_socket(
        zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    )
    try:
        # Both send hello as soon as they connect; CURVE drops them before any frame is read.
        failures = set()
        while failures != {"auth", "protocol"}:
            assert monitor.poll(300_000), "neither worker tried to connect"
            event = zmq.utils.monitor.recv_monitor_message(monitor)["event"]
            failures.add("auth" if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH else "protocol")
        with pytest.raises(AssertionError, match="nothing from the worker"):
            curve_daemon.receive(timeout_s=2)
        assert stranger.poll() is None and plain.poll() is None, "they keep trying"
    finally:
        curve_daemon.router.disable_monitor()
        monitor.close(linger=0)
        refused = stop(stranger)
        stop(plain)
    assert f"the daemon refused this worker's key {pair(keys, 'stranger')[0]}" in refused
    assert pair(keys, "stranger")[1] not in refused


def test_bad_keys_stop_the_worker_with_exit_2(daemon, keys, tmp_path):
    process = lint_worker(daemon, tmp_path, "--server-key", str(keys / "server.key"))
    _, err = process.communicate(timeout=120)
    assert process.returncode == 2
    assert "opforge_worker serve: the daemon's public key without the worker's own key pair" in err
