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
from harness_helpers import DEVICE

from opforge_worker import device_kinds, sandbox

WORKER_ROOT = str(Path(__file__).resolve().parents[1])
#: What a confining script starts with: the candidate side's module, its libc and kinds.
CONFINEMENT = (
    "from opforge_worker import confinement\n"
    "from opforge_worker.device_kinds import lookup\n"
    "libc = confinement.load_libc()\n"
)


def run_confined(script: str, confine: bool, **kwargs) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh Python, after ``confine`` (a statement) when asked."""
    prelude = CONFINEMENT
    code = prelude + (textwrap.dedent(confine) if confine else "") + textwrap.dedent(script)
    env = {**os.environ, "PYTHONPATH": WORKER_ROOT}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, **kwargs
    )


NAMESPACES = (
    f"report = confinement._enter_namespaces(libc, lookup({DEVICE!r}))\n"
    "assert report['namespaces'] != 'none'\n"
)
NAMESPACES_AND_SLEEP = (
    "import time\n"
    + CONFINEMENT
    + "print(confinement._enter_namespaces(libc, lookup('cuda'))['namespaces'], flush=True)\n"
    "time.sleep(600)\n"
)
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
    paths = "confinement.default_read_paths()"
    return f"print(confinement._landlock(libc, {str(scratch)!r}, {paths}, lookup({DEVICE!r})))\n"


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


@pytest.mark.parametrize("device_kind", ["interpreter", "cuda"])
def test_killing_the_sandbox_kills_escaped_descendants(device_kind):
    # A grandchild leaves the process group (setsid) and loses its parent (a double fork). The
    # interpreter's PID namespace takes it down; a cuda candidate has none, and the judge, its
    # subreaper, adopts it and kills it as a process in the candidate's user namespace.
    script = f"""
import os, sys, time
report = confinement._enter_namespaces(libc, lookup({device_kind!r}))
assert report["namespaces"] != "none", report
if report["namespaces"] == "user+net+pid":
    confinement._relay_pid_namespace()
if os.fork() == 0:
    os.setsid()
    parent = os.getpid()
    if os.fork() == 0:
        while os.getppid() == parent:
            time.sleep(0.01)
        print(os.readlink("/proc/self"), flush=True)
        time.sleep(600)
    os._exit(0)
time.sleep(600)
"""
    code = CONFINEMENT + script
    process = sandbox.spawn_candidate(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": WORKER_ROOT},
    )
    escaped = int(process.stdout.readline())
    assert Path(f"/proc/{escaped}").exists()
    assert os.getpgid(escaped) != process.pid
    if device_kind == "cuda":
        assert escaped in sandbox._children(os.getpid())  # adopted by the judge

    sandbox.kill_candidate(process)

    deadline = time.monotonic() + 30
    while Path(f"/proc/{escaped}/status").exists() and time.monotonic() < deadline:
        state = Path(f"/proc/{escaped}/status").read_text()
        if "State:\tZ" in state:
            break
        time.sleep(0.1)
    status = Path(f"/proc/{escaped}/status")
    assert not status.exists() or "State:\tZ" in status.read_text()


def test_killing_a_sandbox_spares_other_children_of_the_judge():
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    env = {**os.environ, "PYTHONPATH": WORKER_ROOT}
    other_candidate, candidate = (
        sandbox.spawn_candidate(
            [sys.executable, "-c", NAMESPACES_AND_SLEEP], stdout=subprocess.PIPE, text=True, env=env
        )
        for _ in range(2)
    )
    try:
        for process in (other_candidate, candidate):
            assert process.stdout.readline().strip() == "user+net"
        sandbox.kill_candidate(candidate)

        assert candidate.returncode == -signal.SIGKILL
        assert bystander.poll() is None and other_candidate.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
        sandbox.kill_candidate(other_candidate)


def test_environment_keeps_only_what_the_toolchain_needs(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("PATH", "/usr/bin")

    env = sandbox.candidate_environment(tmp_path, device_kinds.lookup("interpreter"), WORKER_ROOT)

    assert "OPENAI_API_KEY" not in env
    assert env["PATH"] == "/usr/bin"
    assert env["TRITON_INTERPRET"] == "1"
    assert env["TRITON_CACHE_DIR"].startswith(str(tmp_path))
    assert env["HOME"].startswith(str(tmp_path)) and env["TMPDIR"].startswith(str(tmp_path))
    on_cuda = sandbox.candidate_environment(tmp_path, device_kinds.lookup("cuda"), WORKER_ROOT)
    assert "TRITON_INTERPRET" not in on_cuda


#: A candidate side that holds on to the resident memory each call asks for, then answers.
MEMORY_HOG = """
import sys, time
from multiprocessing.connection import Connection
from opforge_worker.ipc import recv_message, send_message
arguments = dict(zip(sys.argv[1::2], sys.argv[2::2]))
conn = Connection(int(arguments["--fd"]))
send_message(conn, {"kind": "ready", "sandbox": {}})
held = []
while True:
    header, _ = recv_message(conn)
    held.append(b"x" * (header["mb"] << 20))  # written, so resident
    time.sleep(header["sleep_s"])
    send_message(conn, {"kind": "reply", "held_mb": len(held) * header["mb"]})
"""


def memory_hog(tmp_path: Path, limit_mb: int) -> sandbox.CandidateProcess:
    # The judge watches resident memory for cuda candidates (MemoryPolicy.RESIDENT); this
    # candidate side never touches CUDA, so the test needs no GPU.
    options = sandbox.SandboxOptions(
        device_kind="cuda",
        memory_limit_mb=limit_mb,
        max_processes=64,
        max_file_mb=16,
        output_cap_bytes=4096,
        startup_timeout_s=60,
        compile_grace_s=0,
    )
    hog = type("MemoryHog", (sandbox.CandidateProcess,), {"entry": ("-c", MEMORY_HOG)})
    process = hog(tmp_path / "scratch", options)
    process.start()
    return process


def test_resident_memory_over_the_limit_kills_a_long_call(tmp_path):
    process = memory_hog(tmp_path, limit_mb=200)
    try:
        assert process.call({"mb": 16, "sleep_s": 0}, b"", 60)[0]["held_mb"] == 16
        with pytest.raises(sandbox.CandidateDied, match="resident memory .* exceeded the limit"):
            process.call({"mb": 300, "sleep_s": 600}, b"", 60)
        assert not process.alive
    finally:
        process.kill()


def test_resident_memory_grown_by_short_calls_is_caught(tmp_path):
    # Each call is shorter than the watcher's interval; what they hold adds up and is caught.
    process = memory_hog(tmp_path, limit_mb=200)
    held_mb = 0
    try:
        with pytest.raises(sandbox.CandidateDied, match="resident memory .* exceeded the limit"):
            while held_mb < 2000:
                held_mb = process.call({"mb": 8, "sleep_s": 0.01}, b"", 60)[0]["held_mb"]
        assert held_mb < 2000
    finally:
        process.kill()
