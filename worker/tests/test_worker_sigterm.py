"""A real device worker stops within the supervisor's SIGTERM grace on a CPU-bound host.

devices/supervisor.hpp sends a local worker's process group SIGTERM and SIGKILLs it 5 s later.
A worker busy starting or running candidate processes (torch imports, a kernel that never
returns) must still exit by itself before that, say goodbye, and leave no candidate behind: the
candidates run in sessions of their own, which the supervisor's SIGKILL of the group misses.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fake_daemon import FakeDaemon
from test_connection_e2e import DEVICE, SLOW_EXP, WORKER_DIR, exp_request

# The supervisor's stop_grace default (devices/supervisor.hpp).
SUPERVISOR_GRACE_S = 5.0


def _busy_loops() -> list[subprocess.Popen]:
    """One spinning process per core: the load that made every local worker overrun its grace."""
    return [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 1)
    ]


def _running(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie waiting for its new parent to reap it does not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _candidates_under(root: Path) -> list[int]:
    """Pids of the running candidate processes whose sandbox lies under ``root``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            b"opforge_worker.confinement" in command
            and any(str(root).encode() in part for part in command)
            and _running(int(entry.name))
        ):
            found.append(int(entry.name))
    return found


def _wait_for_candidates(root: Path, count: int, timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while len(pids := _candidates_under(root)) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(pids)} of {count} candidate processes started")
        time.sleep(0.05)
    return pids


def test_sigterm_under_cpu_load_exits_within_the_grace_and_kills_candidates(
    daemon: FakeDaemon, tmp_path
):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "opforge_worker", "serve", "--connect", daemon.endpoint),
            *("--device", DEVICE, "--slots", "2", "--role", "device"),
        ],
        cwd=WORKER_DIR,
        env={**os.environ, "OPFORGE_CACHE_DIR": str(tmp_path / "cache"), "TMPDIR": str(scratch)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    hogs: list[subprocess.Popen] = []
    try:
        identity, _ = daemon.receive_type("hello", timeout_s=300)
        daemon.welcomed_with = {"heartbeat_ms": 200, "liveness": 1000}
        daemon.send(identity, "welcome", **daemon.welcomed_with)
        # Two candidates that never return, on both slots: each starts a candidate process,
        # whose torch import takes seconds on a loaded host; SIGTERM finds them starting or
        # spinning, and neither watches the job's cancel event meanwhile.
        request = {**exp_request(SLOW_EXP), "timeout_s": 600.0}
        daemon.send_job(identity, "t1", "test", request)
        daemon.send_job(identity, "t2", "test", request)
        hogs = _busy_loops()
        candidates = _wait_for_candidates(scratch, 2, timeout_s=300)

        process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError("the worker ignored SIGTERM for 30 s") from None
        took_s = time.monotonic() - signalled
        assert code == 0, process.stderr.read()
        assert took_s < SUPERVISOR_GRACE_S, f"exited {took_s:.2f} s after SIGTERM"

        _, goodbye = daemon.receive_type("goodbye")
        assert goodbye["reason"] == signal.strsignal(signal.SIGTERM)
        survivors = [pid for pid in candidates if _running(pid)]
        assert survivors == [], f"candidate processes left running: {survivors}"
        assert _candidates_under(scratch) == []
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in _candidates_under(scratch):
            os.kill(pid, signal.SIGKILL)
