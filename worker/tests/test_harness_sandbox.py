"""The kernel-level containment layers, tested on their own: they must hold even when Python
code gets around the audit hook. Each test also shows that the same action works unconfined
(so the test can fail)."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from opforge_worker.sandbox import candidate_environment

WORKER_ROOT = str(Path(__file__).resolve().parents[1])


def run_confined(script: str, confine: bool, **kwargs) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh Python, after ``confine`` (a statement) when asked."""
    prelude = "from opforge_worker import sandbox\nlibc = sandbox._libc()\n"
    code = prelude + (textwrap.dedent(confine) if confine else "") + textwrap.dedent(script)
    env = {**os.environ, "PYTHONPATH": WORKER_ROOT}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, **kwargs
    )


NAMESPACES = "report = sandbox._enter_namespaces(libc)\nassert report['namespaces'] != 'none'\n"
CONNECT = """
import socket
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=5)
    print("connected")
except OSError as error:
    print("refused", error.errno)
"""


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


@pytest.mark.parametrize(("confine", "expected"), [(None, "connected"), (NAMESPACES, "refused")])
def test_network_namespace_cuts_even_loopback(listener, confine, expected):
    result = run_confined(CONNECT.replace("PORT", str(listener)), confine)

    assert result.stdout.split()[:1] == [expected], result.stderr


def landlock(scratch: Path) -> str:
    return f"print(sandbox._landlock(libc, {str(scratch)!r}, sandbox.default_read_paths()))\n"


WRITE_AND_READ = """
def attempt(action, path):
    try:
        action(path)
        print(path, "ok")
    except OSError as error:
        print(path, "denied", error.errno)

attempt(lambda p: open(p, "w").write("x"), OUTSIDE + "/written.txt")
attempt(lambda p: open(p, "w").write("x"), SCRATCH + "/written.txt")
attempt(lambda p: open(p).read(), OUTSIDE + "/secret.txt")
"""


@pytest.mark.parametrize("confined", [False, True])
def test_landlock_confines_writes_and_reads_to_scratch(tmp_path, confined):
    scratch, outside = tmp_path / "scratch", tmp_path / "outside"
    scratch.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("api key")
    script = WRITE_AND_READ.replace("OUTSIDE", repr(str(outside))).replace(
        "SCRATCH", repr(str(scratch))
    )

    result = run_confined(script, landlock(scratch) if confined else None)
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines()[confined:])

    assert lines[str(scratch / "written.txt")] == "ok", result.stderr
    expected = "denied" if confined else "ok"
    assert lines[str(outside / "written.txt")].split()[0] == expected
    assert lines[str(outside / "secret.txt")].split()[0] == expected
    assert (outside / "written.txt").exists() == (not confined)


@pytest.mark.parametrize("confined", [False, True])
def test_landlock_scopes_signals_to_the_sandbox(tmp_path, confined):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        script = f"""
import os, signal
try:
    os.kill({sleeper.pid}, signal.SIGTERM)
    print("sent")
except OSError as error:
    print("denied", error.errno)
"""
        result = run_confined(script, landlock(tmp_path) if confined else None)

        assert result.stdout.splitlines()[-1].split()[0] == ("denied" if confined else "sent")
        assert (
            (sleeper.wait(timeout=30) == -signal.SIGTERM)
            if not confined
            else sleeper.poll() is None
        )
    finally:
        sleeper.kill()
        sleeper.wait()


def test_killing_the_sandbox_kills_escaped_descendants():
    # A grandchild leaves the process group (setsid); the PID namespace still takes it down.
    script = """
import os, sys, time
sandbox._relay_pid_namespace()
if os.fork() == 0:
    os.setsid()
    print(os.readlink("/proc/self"), flush=True)
    time.sleep(600)
time.sleep(600)
"""
    code = "from opforge_worker import sandbox\nlibc = sandbox._libc()\n" + NAMESPACES + script
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": WORKER_ROOT},
        start_new_session=True,
    )
    escaped = int(process.stdout.readline())
    assert Path(f"/proc/{escaped}").exists()
    assert os.getpgid(escaped) != process.pid

    os.killpg(process.pid, signal.SIGKILL)
    process.wait()

    deadline = time.monotonic() + 30
    while Path(f"/proc/{escaped}/status").exists() and time.monotonic() < deadline:
        state = Path(f"/proc/{escaped}/status").read_text()
        if "State:\tZ" in state:
            break
        time.sleep(0.1)
    status = Path(f"/proc/{escaped}/status")
    assert not status.exists() or "State:\tZ" in status.read_text()


def test_environment_keeps_only_what_the_toolchain_needs(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("PATH", "/usr/bin")

    env = candidate_environment(tmp_path, "interpreter", WORKER_ROOT)

    assert "OPENAI_API_KEY" not in env
    assert env["PATH"] == "/usr/bin"
    assert env["TRITON_INTERPRET"] == "1"
    assert env["TRITON_CACHE_DIR"].startswith(str(tmp_path))
    assert env["HOME"].startswith(str(tmp_path)) and env["TMPDIR"].startswith(str(tmp_path))
    assert "TRITON_INTERPRET" not in candidate_environment(tmp_path, "cuda", WORKER_ROOT)
