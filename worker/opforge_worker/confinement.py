"""The candidate process's entry point: it confines itself, then serves calls.

``python -m opforge_worker.confinement`` (started by the judge, sandbox.py) enters namespaces,
sets resource limits and Landlock rules as its device kind allows (device_kinds.py), and only then
imports torch and triton (``candidate.serve``). Containment layers, strongest first (each is
reported in the ready message, ``sandbox`` key):
- user + network + PID namespaces (``unshare`` through libc; Python 3.11 has no ``os.unshare``):
  no network interface but a downed loopback, and killing the namespace's first process kills
  every process the candidate forked, even ones that left the process group. A kind without a
  PID namespace (cuda) has the judge as child subreaper of its candidates instead, so a
  descendant that left the process group and lost its parent is adopted by the judge, which
  kills it with its candidate (``sandbox.kill_candidate``);
- Landlock: reads limited to the system, the Python installation and the scratch directory,
  writes to the scratch directory only, no TCP, no signals or abstract sockets outside the process;
- resource limits: address space (where the kind's memory policy says so; otherwise the judge
  polls resident memory), processes, file size, core dumps; CPU time per call;
- the audit hook (audit.py), in the process itself;
- a scrubbed environment (no API keys), stdout/stderr captured to files and read back capped.

A candidate that ends the process with a fatal signal (a SIGSEGV in a kernel the interpreter
runs, say) leaves the Python stack at the fault: faulthandler writes it to ``ipc.FAULT_REPORT`` in
scratch, and the judge reads it into the crash's backtrace.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import faulthandler
import json
import os
import resource
import signal
import sys
from multiprocessing.connection import Connection
from pathlib import Path

from opforge_worker.device_kinds import DeviceKind, MemoryPolicy, lookup
from opforge_worker.ipc import FAULT_REPORT

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


def load_libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _enter_namespaces(libc, kind: DeviceKind) -> dict:
    """unshare user+net+pid namespaces, falling back to fewer; returns what was achieved. A kind
    whose runtime cannot start inside a PID namespace gets user+net only."""
    uid, gid = os.getuid(), os.getgid()
    attempts = (
        ("user+net+pid", _CLONE_NEWUSER | _CLONE_NEWNET | _CLONE_NEWPID),
        ("user+net", _CLONE_NEWUSER | _CLONE_NEWNET),
    )
    if not kind.pid_namespace:
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


def _set_limits(options: dict, kind: DeviceKind) -> dict:
    limits = {
        resource.RLIMIT_NPROC: options["max_processes"],
        resource.RLIMIT_FSIZE: options["max_file_mb"] << 20,
        resource.RLIMIT_CORE: 0,
    }
    by_address_space = kind.memory_policy is MemoryPolicy.ADDRESS_SPACE
    if by_address_space:
        limits[resource.RLIMIT_AS] = options["memory_limit_mb"] << 20
    for which, value in limits.items():
        resource.setrlimit(which, (value, value))
    memory = (
        f"address space {options['memory_limit_mb']} MiB (RLIMIT_AS)"
        if by_address_space
        else f"resident {options['memory_limit_mb']} MiB (watched by the judge)"
    )
    return {
        "limits": f"{memory}, {options['max_processes']} processes/threads (RLIMIT_NPROC), "
        f"files {options['max_file_mb']} MiB (RLIMIT_FSIZE), no core dumps, CPU time per call"
    }


#: Where POSIX semaphores and shared memory live (``multiprocessing.Lock``, ``sem_open``).
SHARED_MEMORY = "/dev/shm"


def _landlock(
    libc, scratch: Path, read_paths: list[str], kind: DeviceKind, shared_memory: bool = False
) -> dict:
    """Confine the filesystem (and, where the kernel supports it, TCP and signals);
    ``shared_memory`` also lets the process make files in ``SHARED_MEMORY``."""
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
    if shared_memory:
        rules.append((SHARED_MEMORY, handled_fs))
    rules += [(path, device_files) for path in kind.runtime_writable]
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
    extras = f" and {SHARED_MEMORY}" if shared_memory else ""
    extras += (", no TCP" if abi >= 4 else "") + (", no signals outside" if abi >= 6 else "")
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


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="opforge candidate process (started by the judge)")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--scratch", type=Path, required=True)
    parser.add_argument("--options", required=True)
    args = parser.parse_args(argv)
    options = json.loads(args.options)
    kind = lookup(options["device_kind"])
    libc = load_libc()
    report = _enter_namespaces(libc, kind)
    if report["namespaces"] == "user+net+pid":
        _relay_pid_namespace()
    report.update(_set_limits(options, kind))
    read_paths = default_read_paths(tuple(options["extra_read_paths"]))
    # An installed backend (validate --backend) is the user's own package, not a candidate's
    # source: FlagGems makes a multiprocessing.Lock per kernel at import, a POSIX semaphore.
    shared_memory = bool(options.get("backend"))
    report.update(_landlock(libc, args.scratch.resolve(), read_paths, kind, shared_memory))
    report["environment"] = "scrubbed: " + ", ".join(sorted(os.environ))
    # The stream stays open for the process's life: faulthandler holds it.
    faulthandler.enable(open(args.scratch / FAULT_REPORT, "w"), all_threads=False)  # noqa: SIM115

    # Torch, triton and the candidate side's checks load only now, inside the confinement.
    from opforge_worker.candidate import serve

    serve(Connection(args.fd), kind, args.scratch.resolve(), report, options)


if __name__ == "__main__":
    main()
