"""The candidate process and its sandbox.

Judge side: ``CandidateProcess`` spawns ``python -m opforge_worker.sandbox``, talks to it over a
socketpair, enforces wall time and memory, and kills its process group. Candidate side: ``main``
confines itself before importing torch and triton, then serves calls (``candidate.serve``).

Containment layers, strongest first (each is reported in the ready message, ``sandbox`` key):
- user + network + PID namespaces (``unshare`` through libc; Python 3.11 has no ``os.unshare``):
  no network interface but a downed loopback, and killing the namespace's first process kills
  every process the candidate forked, even ones that left the process group. A cuda candidate
  gets no PID namespace (CUDA cannot initialise in one); there the judge process is the child
  subreaper of its candidates, so a descendant that left the process group and lost its parent
  is adopted by the judge, which kills it with its candidate (``kill_candidate``);
- Landlock: reads limited to the system, the Python installation and the scratch directory,
  writes to the scratch directory only, no TCP, no signals or abstract sockets outside the process;
- resource limits: address space (interpreter only: CUDA reserves huge virtual ranges, so there
  the judge polls resident memory), processes, file size, core dumps; CPU time per call;
- an audit hook that refuses, and records, what candidate code may not do (processes, signals,
  sockets, ctypes, writes outside scratch, frame, code and gc introspection). It is best-effort:
  Python code in the same process can reach around it, which is why the kernel-level layers
  above exist;
- a scrubbed environment (no API keys), stdout/stderr captured to files and read back capped.

A candidate that ends the process with a fatal signal (a SIGSEGV in a kernel the interpreter
runs, say) leaves the Python stack at the fault: faulthandler writes it to ``FAULT_REPORT`` in
scratch, and the judge reads it into the crash's backtrace (``fault_backtrace``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import faulthandler
import importlib.util
import json
import os
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

import msgpack

#: Environment variables the candidate process keeps from the judge's: what torch, triton, the C
#: compiler and the CUDA driver read. Everything else (API keys included) is dropped.
_KEPT_ENVIRONMENT = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "CC",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "CUDA_PATH",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "LD_LIBRARY_PATH",
    "TRITON_PTXAS_PATH",
    "TRITON_LIBCUDA_PATH",
)
_MAX_HEADER_BYTES = 1 << 20
_HEADER_LENGTH = struct.Struct("<I")
_MAX_BLOB_BYTES = 1 << 30
_POLL_INTERVAL_S = 0.05
#: How often the judge reads a cuda candidate's resident memory while it serves calls. Reading it
#: walks the process tree in /proc (a few ms with CUDA's threads): doing so on every call cost more
#: than the calls of a warm library validation.
_MEMORY_CHECK_INTERVAL_S = 0.1
_PR_SET_CHILD_SUBREAPER = 36
#: Where, in its scratch directory, the candidate process's faulthandler writes the Python stack
#: when a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGABRT, SIGILL) ends it.
FAULT_REPORT = "fault.log"
#: What of a fault report the judge reads: faulthandler writes at most 100 frames.
_FAULT_REPORT_BYTES = 64 << 10


class CandidateDied(Exception):
    """The candidate process ended while serving a call."""

    def __init__(self, message: str, signal_name: str | None, exit_code: int | None):
        super().__init__(message)
        self.signal_name = signal_name
        self.exit_code = exit_code


class CandidateTimedOut(Exception):
    """A call ran past its wall limit; the process group has been killed."""


class CallCancelled(Exception):
    """The caller's cancel event was set during a call; the process group has been killed."""


class CandidateProtocolError(Exception):
    """The candidate process answered something that is not a protocol message."""


class SandboxStartError(Exception):
    """A fresh candidate process did not come up: the harness's problem, not the candidate's."""


def send_message(conn: Connection, header: dict, blob: bytes = b"") -> None:
    """One message in one frame: the header's length, the header (msgpack), the blob (possibly
    empty). Per reply, two frames of JSON and bytes took the judge 67 us to receive on the CI
    host, one frame 38 us, one frame of msgpack 19 us (bench/judge_bench.py). Strings pass
    with their lone surrogates, as JSON's escapes carried them."""
    encoded = msgpack.packb(header, unicode_errors="surrogatepass")
    conn.send_bytes(b"".join((_HEADER_LENGTH.pack(len(encoded)), encoded, blob)))


def recv_message(conn: Connection) -> tuple[dict, memoryview]:
    """The next message, its blob a view of the frame; CandidateProtocolError when it is
    malformed or oversized. Unpacking msgpack from the candidate process runs none of its code."""
    try:
        frame = memoryview(conn.recv_bytes(_MAX_HEADER_BYTES + _MAX_BLOB_BYTES))
        if len(frame) < _HEADER_LENGTH.size:
            raise ValueError(f"a frame of {len(frame)} bytes")
        (length,) = _HEADER_LENGTH.unpack_from(frame)
        end = _HEADER_LENGTH.size + length
        if length > _MAX_HEADER_BYTES or end > len(frame):
            raise ValueError(f"a header of {length} bytes in a frame of {len(frame)}")
        header = msgpack.unpackb(frame[_HEADER_LENGTH.size : end], unicode_errors="surrogatepass")
    except (EOFError, OSError, ValueError, msgpack.UnpackException) as error:
        raise CandidateProtocolError(
            f"malformed message from the candidate process: {error}"
        ) from None
    if not isinstance(header, dict):
        raise CandidateProtocolError("candidate process sent a header that is not a map")
    return header, frame[end:]


#: Pids of the candidate processes this process started and has not reaped yet, across every
#: Harness in it (one per slot): they are this process's children that ``kill_candidate`` spares.
_live_candidates: set[int] = set()
_candidates_lock = threading.Lock()


def spawn_candidate(command: list[str], **popen_options) -> subprocess.Popen:
    """Start a candidate process in its own session, as a registered child of this process.

    This process becomes a child subreaper: every descendant of a candidate that loses its
    parent is re-parented here rather than to init, where ``kill_candidate`` finds it.
    """
    with _candidates_lock:  # a concurrent kill_candidate must see the new child registered
        if _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "cannot become the candidates' child subreaper")
        process = subprocess.Popen(command, start_new_session=True, **popen_options)
        _live_candidates.add(process.pid)
    return process


def kill_candidate(process: subprocess.Popen) -> None:
    """Kill and reap a candidate process and every process descending from it.

    Its process group, its PID namespace (when it has one) and its current process tree go
    first; then the orphans this process adopted that run in a user namespace other than its
    own: only candidates' descendants do, and one that left its candidate's tree has escaped.
    """
    if process.returncode is None:  # once reaped, its pid may name someone else's process
        for pid in _descendants(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    with _candidates_lock:
        _live_candidates.discard(process.pid)
        _reap_escaped_descendants()


def _reap_escaped_descendants() -> None:
    own_namespace = _user_namespace(os.getpid())
    while True:
        # A killed orphan's own children are re-parented here when it exits, before it is
        # reaped: looking again until none is left finds every generation.
        escaped = [
            pid
            for pid in _children(os.getpid())
            if pid not in _live_candidates and _user_namespace(pid) not in (None, own_namespace)
        ]
        if not escaped:
            return
        for pid in escaped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in escaped:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


@dataclass
class SandboxOptions:
    """What a candidate process is allowed; built from the harness settings."""

    device_kind: str
    memory_limit_mb: int
    max_processes: int
    max_file_mb: int
    output_cap_bytes: int
    startup_timeout_s: float
    compile_grace_s: float
    extra_read_paths: list[str] = field(default_factory=list)


def candidate_options(settings, device_kind: str, compile_root: Path) -> SandboxOptions:
    """A candidate process's options from the harness ``settings`` (settings.Settings), reading
    the compile store at ``compile_root``: each source reads its own entries there."""
    return SandboxOptions(
        device_kind=device_kind,
        memory_limit_mb=settings.memory_limit_mb[device_kind],
        max_processes=settings.max_processes,
        max_file_mb=settings.max_file_mb,
        output_cap_bytes=settings.output_cap_bytes,
        startup_timeout_s=settings.startup_timeout_s,
        compile_grace_s=settings.compile_grace_s,
        extra_read_paths=[*settings.extra_read_paths, str(compile_root)],
    )


class CandidateProcess:
    """One warm candidate process, as seen from the judge."""

    #: The interpreter arguments that start the candidate side (tests start a variant of it).
    entry: tuple[str, ...] = ("-m", "opforge_worker.sandbox")

    def __init__(self, scratch: Path, options: SandboxOptions):
        self.scratch = scratch
        self.options = options
        self.report: dict = {}
        self._process: subprocess.Popen | None = None
        self._conn: Connection | None = None
        #: Waits for ``_conn`` to be readable. Connection.poll builds a selector on every call,
        #: tens of microseconds of the judge's time per reply; this one is registered once.
        self._readable: select.poll | None = None
        self._output_marks = (0, 0)
        self._jobs = 0
        self._memory_checked_at = -_MEMORY_CHECK_INTERVAL_S

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Spawn and wait until torch and triton are imported inside the sandbox."""
        self.spawn()
        self.await_ready()

    def spawn(self) -> None:
        """Start the process without waiting for it (``await_ready`` does): its seconds of
        start-up can pass while the judge does other work."""
        for sub in ("jobs", "tmp", "home", "triton-cache"):
            (self.scratch / sub).mkdir(parents=True, exist_ok=True)
        judge_end, candidate_end = socket.socketpair()
        package_root = str(Path(__file__).resolve().parents[1])
        command = [
            sys.executable,
            *self.entry,
            "--fd",
            str(candidate_end.fileno()),
            "--scratch",
            str(self.scratch),
            "--options",
            json.dumps(self.options.__dict__),
        ]
        stdout = open(self.scratch / "stdout.log", "ab")  # noqa: SIM115 (handed to the child)
        stderr = open(self.scratch / "stderr.log", "ab")  # noqa: SIM115
        try:
            self._process = spawn_candidate(
                command,
                env=candidate_environment(self.scratch, self.options.device_kind, package_root),
                cwd=self.scratch,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                pass_fds=(candidate_end.fileno(),),
            )
        except OSError as error:
            raise SandboxStartError(f"cannot spawn the candidate process: {error}") from None
        finally:
            candidate_end.close()
            stdout.close()
            stderr.close()
        self._conn = Connection(judge_end.detach())
        self._readable = select.poll()
        self._readable.register(self._conn.fileno(), select.POLLIN)

    def await_ready(self) -> None:
        """Wait for the spawned process's ready message (SandboxStartError if none comes)."""
        try:
            ready, _ = self.receive(self.options.startup_timeout_s, extend_for_compile=False)
        except (CandidateDied, CandidateTimedOut, CandidateProtocolError) as error:
            tail = self.output_tail()
            self.kill()
            raise SandboxStartError(
                f"candidate process failed to start: {error}\n{tail['stderr']}"
            ) from None
        if ready.get("kind") != "ready":
            self.kill()
            raise SandboxStartError(f"candidate process sent {ready!r} instead of ready")
        self.report = ready.get("sandbox", {})

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def kill(self) -> None:
        """Kill the process and all its descendants (``kill_candidate``) and reap them."""
        if self._process is None:
            return
        kill_candidate(self._process)
        if self._conn is not None:
            self._conn.close()
        self._process = None
        self._conn = None
        self._readable = None

    # -- calls ------------------------------------------------------------------------------

    def new_job_dir(self) -> Path:
        """A fresh directory under scratch for one candidate source; candidate code lives there."""
        self._jobs += 1
        # The process writes its output with O_APPEND: truncating starts each candidate afresh
        # and keeps a warm process clear of the file-size limit.
        for name in ("stdout.log", "stderr.log"):
            with contextlib.suppress(OSError):
                os.truncate(self.scratch / name, 0)
        job_dir = self.scratch / "jobs" / str(self._jobs)
        job_dir.mkdir(parents=True)
        return job_dir

    def call(
        self, header: dict, blob: bytes, timeout_s: float, cancel: threading.Event | None = None
    ) -> tuple[dict, bytes]:
        """Send one request and wait for its reply, killing the process on death or timeout."""
        self.send(header, blob)
        return self.receive(timeout_s, extend_for_compile=True, cancel=cancel)

    def send(self, header: dict, blob: bytes = b"") -> None:
        """Send one request; output printed from now on belongs to it (``output_tail``)."""
        self._mark_output()
        with contextlib.suppress(OSError):  # the process died; receive() reports how
            send_message(self._conn, header, blob)

    def receive(
        self, timeout_s: float, extend_for_compile: bool, cancel: threading.Event | None = None
    ) -> tuple[dict, bytes]:
        """Wait for a reply. A ``compile_begin`` notice extends the limit once by the grace."""
        deadline = time.monotonic() + timeout_s
        extended = not extend_for_compile
        while True:
            if cancel is not None and cancel.is_set():
                self.kill()
                raise CallCancelled("cancelled; process group killed")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise CandidateTimedOut(f"no answer within {timeout_s:g} s; process group killed")
            self._enforce_memory()
            # Hang-up and error events count as ready, as in Connection.poll: reading then tells
            # a death from a reply.
            try:
                ready = bool(self._readable.poll(min(remaining, _POLL_INTERVAL_S) * 1000))
            except OSError:
                ready = True
            if not ready:
                if not self.alive:
                    raise self._death()
                continue
            try:
                header, blob = recv_message(self._conn)
            except CandidateProtocolError:
                if self._wait_exit(5.0):
                    raise self._death() from None
                self.kill()
                raise
            if header.get("kind") == "compile_begin":
                if not extended:
                    deadline += self.options.compile_grace_s
                    extended = True
                continue
            return header, blob

    # -- output and limits ------------------------------------------------------------------

    def _mark_output(self) -> None:
        self._output_marks = tuple(
            _file_size(self.scratch / name) for name in ("stdout.log", "stderr.log")
        )

    def mark_output_at(self, marks) -> None:
        """Output from ``marks`` (the stdout and stderr sizes the process reported at the end of
        a batch's call) on belongs to its next call; marks that are not two sizes are ignored."""
        self._output_marks = _output_sizes(marks) or self._output_marks

    def fault_backtrace(self) -> str:
        """The Python stack at the fatal signal that ended the process (faulthandler's report),
        most recent call first: the candidate's frames, then the stack from the candidate's
        outermost frame on, without the harness's frames (noise there); "" when the process
        wrote none (it exited, or was killed)."""
        try:
            with open(self.scratch / FAULT_REPORT, "rb") as stream:
                report = stream.read(_FAULT_REPORT_BYTES).decode(errors="replace")
        except OSError:
            return ""
        lines = report.splitlines()
        harness = f'  File "{os.path.dirname(os.path.realpath(__file__))}{os.sep}'
        frames = [line for line in lines if line.startswith('  File "')]
        frames = [frame for frame in frames if not frame.startswith(harness)]
        if not frames:
            return ""
        error = next((line for line in lines if line.startswith("Fatal Python error")), "")
        candidate = f'  File "{os.path.realpath(self.scratch / "jobs")}{os.sep}'
        own = [index for index, frame in enumerate(frames) if frame.startswith(candidate)]
        return "\n".join(
            [
                error or "Fatal Python error",
                "",
                "The candidate's frames (most recent call first):",
                *[frames[index] for index in own],
                "",
                "The stack (most recent call first):",
                *frames[: own[-1] + 1 if own else len(frames)],
            ]
        )

    def output_tail(self, until=None) -> dict[str, str]:
        """What the process printed since the last call began, capped; up to ``until`` (sizes
        the process reported when the call ended) when they are two sizes: a batch's process
        may have printed for its next call already."""
        cap = self.options.output_cap_bytes
        ends = _output_sizes(until) or (None, None)
        result = {}
        for name, mark, end in zip(("stdout", "stderr"), self._output_marks, ends, strict=True):
            path = self.scratch / f"{name}.log"
            length = cap + 1 if end is None else max(0, min(cap + 1, end - mark))
            try:
                with path.open("rb") as stream:
                    stream.seek(mark)
                    data = stream.read(length)
            except OSError:
                data = b""
            text = data[:cap].decode(errors="replace")
            result[name] = text + ("\n[... output capped]" if len(data) > cap else "")
        return result

    def _enforce_memory(self) -> None:
        """Kill the process when its tree's resident memory is over the limit (cuda: there the
        address-space limit cannot apply), at most every _MEMORY_CHECK_INTERVAL_S across calls:
        memory only grows while a call runs, and a call is polled at least that often."""
        now = time.monotonic()
        if (
            self.options.device_kind != "cuda"
            or now < self._memory_checked_at + _MEMORY_CHECK_INTERVAL_S
        ):
            return
        self._memory_checked_at = now
        if not self.alive:
            return
        rss_kb = sum(_rss_kb(pid) for pid in _descendants(self._process.pid))
        if rss_kb > self.options.memory_limit_mb * 1024:
            self.kill()
            raise CandidateDied(
                f"resident memory {rss_kb // 1024} MiB exceeded the limit of "
                f"{self.options.memory_limit_mb} MiB; process group killed",
                signal_name="SIGKILL",
                exit_code=None,
            )

    def _wait_exit(self, timeout_s: float) -> bool:
        try:
            self._process.wait(timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False

    def _death(self) -> CandidateDied:
        self._wait_exit(5.0)
        code = self._process.poll() if self._process else None
        self.kill()
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            return CandidateDied(f"candidate process killed by {name}", name, None)
        return CandidateDied(f"candidate process exited with status {code}", None, code)


def candidate_environment(scratch: Path, device_kind: str, package_root: str) -> dict[str, str]:
    """The scrubbed environment: only what torch, triton and the toolchain need."""
    env = {name: os.environ[name] for name in _KEPT_ENVIRONMENT if name in os.environ}
    env.update(
        HOME=str(scratch / "home"),
        TMPDIR=str(scratch / "tmp"),
        TRITON_CACHE_DIR=str(scratch / "triton-cache"),
        TRITON_HOME=str(scratch / "home"),
        PYTHONPATH=package_root,
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",  # output lands in the log of the call that printed it
        PYTHONNOUSERSITE="1",
        OMP_NUM_THREADS="1",
    )
    env.setdefault("PATH", "/usr/bin:/bin")
    if device_kind == "interpreter":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _output_sizes(marks) -> tuple[int, int] | None:
    """``marks`` (from the candidate process) when they are two sizes, else None."""
    sizes = marks if isinstance(marks, list) and len(marks) == 2 else ()
    return tuple(sizes) if sizes and all(type(s) is int and s >= 0 for s in sizes) else None


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (a child is listed under the thread that forked
    it, or that adopted it)."""
    # os.listdir and open, not Path.glob: the cuda memory check walks a tree of CUDA's threads
    # every _MEMORY_CHECK_INTERVAL_S, and glob took twice as long (1.2 ms for 41 threads).
    children, task = [], f"/proc/{pid}/task"
    with contextlib.suppress(OSError):
        for thread in os.listdir(task):
            with contextlib.suppress(OSError), open(f"{task}/{thread}/children") as listing:
                children.extend(int(child) for child in listing.read().split())
    return children


def _descendants(pid: int) -> list[int]:
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(_children(current))
    return found


def _user_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/user")
    except OSError:
        return None


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


# ===================================== candidate side =======================================

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_CLONE_NEWPID = 0x20000000
_PR_SET_NO_NEW_PRIVS = 38
_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
# Landlock filesystem rights (linux/landlock.h).
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_WRITE_TREE = sum(1 << bit for bit in range(4, 13))  # remove, make char/dir/reg/sock/fifo/...
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1
#: Files under /etc that the dynamic loader and libc read; the rest of /etc stays unreadable.
_ETC_READABLE = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "passwd",
    "group",
    "nsswitch.conf",
    "host.conf",
    "hosts",
    "alternatives",
)


class _LandlockRulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _LandlockPathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _enter_namespaces(libc, device_kind: str) -> dict:
    """unshare user+net+pid namespaces, falling back to fewer; returns what was achieved.

    CUDA cannot initialise inside a PID namespace (cuInit fails with error 304, seen on an H100
    with driver 580), so a cuda candidate gets user+net only.
    """
    uid, gid = os.getuid(), os.getgid()
    attempts = (
        ("user+net+pid", _CLONE_NEWUSER | _CLONE_NEWNET | _CLONE_NEWPID),
        ("user+net", _CLONE_NEWUSER | _CLONE_NEWNET),
    )
    if device_kind == "cuda":
        attempts = attempts[1:]
    errors = []
    for name, flags in attempts:
        if libc.unshare(flags) == 0:
            Path("/proc/self/setgroups").write_text("deny")
            Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
            Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
            return {"namespaces": name, "network": "isolated (empty network namespace)"}
        errors.append(f"{name}: {os.strerror(ctypes.get_errno())}")
    return {"namespaces": "none", "network": f"NOT isolated: unshare failed ({'; '.join(errors)})"}


def _relay_pid_namespace() -> None:
    """Fork the PID namespace's first process; this parent mirrors how it ends, then exits."""
    child = os.fork()
    if child == 0:
        return
    os.closerange(3, 1 << 16)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            os._exit(70)
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _set_limits(options: dict) -> dict:
    limits = {
        resource.RLIMIT_NPROC: options["max_processes"],
        resource.RLIMIT_FSIZE: options["max_file_mb"] << 20,
        resource.RLIMIT_CORE: 0,
    }
    if options["device_kind"] != "cuda":
        limits[resource.RLIMIT_AS] = options["memory_limit_mb"] << 20
    for which, value in limits.items():
        resource.setrlimit(which, (value, value))
    memory = (
        f"address space {options['memory_limit_mb']} MiB (RLIMIT_AS)"
        if options["device_kind"] != "cuda"
        else f"resident {options['memory_limit_mb']} MiB (watched by the judge)"
    )
    return {
        "limits": f"{memory}, {options['max_processes']} processes/threads (RLIMIT_NPROC), "
        f"files {options['max_file_mb']} MiB (RLIMIT_FSIZE), no core dumps, CPU time per call"
    }


def _landlock(libc, scratch: Path, read_paths: list[str], device_kind: str) -> dict:
    """Confine the filesystem (and, where the kernel supports it, TCP and signals)."""
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_CREATE_RULESET_VERSION)
    if abi < 1:
        return {
            "landlock": f"unavailable ({os.strerror(ctypes.get_errno())}); writes are "
            "confined only by the audit hook"
        }
    handled_fs = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_READ_DIR | _FS_WRITE_TREE
    handled_fs |= (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    attr = _LandlockRulesetAttr(
        fs=handled_fs,
        net=(_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0,
        scoped=(_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6 else 0,
    )
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), size, 0)
    if ruleset < 0:
        return {"landlock": f"ruleset refused ({os.strerror(ctypes.get_errno())})"}
    read = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
    device_files = read | _FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0)
    rules = [(path, read) for path in read_paths]
    rules += [(f"/etc/{name}", read) for name in _ETC_READABLE]
    rules += [("/dev", device_files), (str(scratch), handled_fs)]
    if device_kind == "cuda":
        # The CUDA driver names its threads by opening /proc/self/task/<tid>/comm with O_TRUNC;
        # refusing that makes cuInit fail with error 304.
        rules.append(("/proc/self/task", device_files))
    for path, rights in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        allowed = rights & handled_fs
        if not os.path.isdir(path):
            allowed &= _FILE_RIGHTS
        rule = _LandlockPathBeneathAttr(allowed=allowed, parent_fd=fd)
        added = libc.syscall(
            _SYS_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0
        )
        os.close(fd)
        if added != 0:
            os.close(ruleset)
            return {"landlock": f"rule for {path} refused ({os.strerror(ctypes.get_errno())})"}
    if (
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
        or libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0
    ):
        os.close(ruleset)
        return {"landlock": f"restrict_self failed ({os.strerror(ctypes.get_errno())})"}
    os.close(ruleset)
    extras = (", no TCP" if abi >= 4 else "") + (", no signals outside" if abi >= 6 else "")
    return {"landlock": f"ABI {abi}: reads limited, writes only under scratch{extras}"}


def default_read_paths(extra: tuple[str, ...] = ()) -> list[str]:
    """Directories the candidate process must read: system, Python, installed packages.

    Called in the candidate process itself, whose sys.path holds only the installation, the
    worker package (PYTHONPATH) and its scratch directory, not the judge's script directories.
    """
    paths = {"/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/proc", "/sys", *extra}
    paths |= {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths |= {os.path.dirname(os.path.realpath(sys.executable))}
    paths |= {entry for entry in sys.path if entry and os.path.isdir(entry)}
    paths.add(str(Path(__file__).resolve().parents[1]))
    return sorted({os.path.realpath(path) for path in paths})


def path_prefixes(*paths: str) -> tuple[str, ...]:
    """Each path as a directory prefix, both as given (absolute) and resolved.

    A frame's file name is the path its module was imported by, links unresolved: with the
    Python installation or a virtual environment behind a symbolic link, only the unresolved
    form matches, and a resolved-only prefix would take torch's or triton's frames for someone
    else's (torch compute inside a kernel would then pass as launch machinery).
    """
    forms = {form(path) + os.sep for path in paths for form in (os.path.abspath, os.path.realpath)}
    return tuple(sorted(forms))


class CodeOwners:
    """Tells candidate code from library code by the file a frame runs in.

    Candidate sources are compiled from files under the scratch ``jobs`` directory (kernels run
    by the interpreter keep that file name too). The standard library is transparent: a socket
    opened by ``urllib`` called from candidate code belongs to the candidate.
    """

    def __init__(self, candidate_root: Path):
        self.candidate_root = str(candidate_root) + os.sep
        triton_spec = importlib.util.find_spec("triton")
        self.triton_prefixes = path_prefixes(os.path.dirname(triton_spec.origin))
        stdlib = (sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib"))
        self._stdlib = path_prefixes(*filter(None, stdlib))
        site = (sysconfig.get_path("purelib"), sysconfig.get_path("platlib"))
        self._site = path_prefixes(*filter(None, site))

    def _transparent(self, filename: str) -> bool:
        if filename.startswith("<frozen"):
            return True
        return filename.startswith(self._stdlib) and not filename.startswith(self._site)

    def nearest_file(self, frame, skip: tuple[str, ...] = ()) -> str:
        """The file of the nearest frame outside the stdlib (and outside ``skip``), or ""."""
        while frame is not None:
            filename = frame.f_code.co_filename
            if not self._transparent(filename) and not filename.startswith(skip):
                return filename
            frame = frame.f_back
        return ""

    def nearest_is_candidate(self, frame, skip: tuple[str, ...] = ()) -> bool:
        return self.nearest_file(frame, skip).startswith(self.candidate_root)

    def nearest_is_triton(self, frame) -> bool:
        """Whether triton's own code (its compiler starting ptxas, say) is acting."""
        return self.nearest_file(frame).startswith(self.triton_prefixes)


#: Audit events candidate code may never raise, whoever it calls through.
_ALWAYS_REFUSED_PREFIXES = ("socket.",)
#: Starting processes: only triton may (the C compiler for launchers, ptxas); torch never needs
#: to during a call, and a process started on the candidate's behalf escapes every check.
_PROCESS_EVENTS = frozenset(
    {
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "pty.spawn",
    }
)
#: Refused events that reach for the harness itself (frames, objects, tracing): the same code
#: may have reached it by a route no hook sees, so its process is replaced (as after ctypes).
#: The other refusals (network, files, processes, signals, limits) leave the process as it was.
_TAMPERING_EVENTS = frozenset(
    {
        "sys._getframe",
        "sys._current_frames",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "sys.settrace",
        "sys.setprofile",
        # CPython raises these for restricted attributes: reading a traceback's, generator's or
        # coroutine's frame (tb_frame, gi_frame, cr_frame), a frame's or function's code
        # (f_code, __code__), and replacing a function's code or defaults. A frame reached from
        # a caught exception walks into the harness's frames and their locals, where the
        # findings of the call are kept.
        "object.__getattr__",
        "object.__setattr__",
        "object.__delattr__",
    }
)
#: Audit events refused when the nearest non-stdlib caller is candidate code (library code keeps
#: them: torch loads libraries through ctypes, inspects frames).
_CANDIDATE_REFUSED = _TAMPERING_EVENTS | {
    "os.kill",
    "os.killpg",
    "signal.pthread_kill",
    "resource.setrlimit",
    "resource.prlimit",
    "os.setsid",
    "os.setpgid",
}
_CANDIDATE_REFUSED_PREFIXES = ("ctypes.",)
#: Path-changing audit events and the positions of their path arguments.
_PATH_EVENTS = {
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.mkdir": (0,),
    "os.rename": (0, 1),
    "os.symlink": (1,),
    "os.link": (1,),
    "os.truncate": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.utime": (0,),
    "shutil.rmtree": (0,),
    "os.mkfifo": (0,),
    "os.mknod": (0,),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class AuditGuard:
    """A process-wide audit hook that refuses and records forbidden actions of candidate code.

    Refusal raises PermissionError in the candidate; the record survives the candidate catching
    it, and any record makes the verdict ``cheat_detected``. A refused action did not happen, so
    the process may serve later sources; ``tamper_attempts`` counts the refusals that reached for
    the harness itself, after which it may not. Audit hooks cannot be removed.
    """

    def __init__(self, scratch: Path, owners: CodeOwners):
        self.scratch = str(scratch) + os.sep
        self.owners = owners
        self.violations: list[str] = []
        #: How many refusals reached for the harness itself (``_TAMPERING_EVENTS``, ctypes).
        self.tamper_attempts = 0
        self._busy = False

    def install(self) -> None:
        sys.addaudithook(self._hook)
        self._guard_fork_exec()

    def _guard_fork_exec(self) -> None:
        """``_posixsubprocess.fork_exec`` starts processes without an audit event of its own
        (subprocess.Popen raises one before calling it, and keeps its own reference as
        ``subprocess._fork_exec``); guard the direct routes too."""
        import _posixsubprocess

        original = _posixsubprocess.fork_exec
        guard = self

        def fork_exec(*args, **kwargs):
            if not guard.owners.nearest_is_triton(sys._getframe(1)):
                reason = "_posixsubprocess.fork_exec refused (only triton may start processes)"
                guard.violations.append(reason)
                raise PermissionError(f"opforge sandbox: {reason}")
            return original(*args, **kwargs)

        _posixsubprocess.fork_exec = subprocess._fork_exec = fork_exec

    def _hook(self, event: str, args: tuple) -> None:
        if self._busy:
            return
        self._busy = True
        try:
            reason = self._reason(event, args)
        finally:
            self._busy = False
        if reason:
            self.violations.append(reason)
            if event in _TAMPERING_EVENTS or event.startswith(_CANDIDATE_REFUSED_PREFIXES):
                self.tamper_attempts += 1
            raise PermissionError(f"opforge sandbox: {reason}")

    def _reason(self, event: str, args: tuple) -> str | None:
        if event.startswith(_ALWAYS_REFUSED_PREFIXES):
            return f"network access refused ({event})"
        if event == "open":
            return self._write_reason(args)
        if event in _PATH_EVENTS:
            for index in _PATH_EVENTS[event]:
                if index < len(args) and not self._inside_scratch(args[index]):
                    return f"{event} outside the scratch directory refused ({args[index]!r})"
            return None
        if event in _PROCESS_EVENTS and not self.owners.nearest_is_triton(sys._getframe(2)):
            return f"{event} refused (only triton's compiler may start processes)"
        refused = event in _CANDIDATE_REFUSED or event.startswith(_CANDIDATE_REFUSED_PREFIXES)
        if refused and self._from_candidate():
            return f"{event} from candidate code refused"
        return None

    def _write_reason(self, args: tuple) -> str | None:
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        if not isinstance(path, str | bytes | os.PathLike):
            return None
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        if writes and not self._inside_scratch(path) and os.fsdecode(path) != os.devnull:
            return f"write outside the scratch directory refused ({os.fsdecode(path)})"
        return None

    def _inside_scratch(self, path) -> bool:
        if not isinstance(path, str | bytes | os.PathLike):
            return True  # a file descriptor: already opened under the rules above
        return os.path.realpath(os.fsdecode(path)).startswith(self.scratch)

    def _from_candidate(self) -> bool:
        return self.owners.nearest_is_candidate(sys._getframe(3))


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="opforge candidate process (started by the judge)")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--scratch", type=Path, required=True)
    parser.add_argument("--options", required=True)
    args = parser.parse_args(argv)
    options = json.loads(args.options)
    libc = _libc()
    report = _enter_namespaces(libc, options["device_kind"])
    if report["namespaces"] == "user+net+pid":
        _relay_pid_namespace()
    report.update(_set_limits(options))
    read_paths = default_read_paths(tuple(options["extra_read_paths"]))
    report.update(_landlock(libc, args.scratch.resolve(), read_paths, options["device_kind"]))
    report["environment"] = "scrubbed: " + ", ".join(sorted(os.environ))
    # The stream stays open for the process's life: faulthandler holds it.
    faulthandler.enable(open(args.scratch / FAULT_REPORT, "w"), all_threads=False)  # noqa: SIM115

    from opforge_worker.candidate import serve

    serve(Connection(args.fd), options["device_kind"], args.scratch.resolve(), report, options)


if __name__ == "__main__":
    main()
