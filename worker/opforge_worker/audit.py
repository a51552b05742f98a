"""The candidate process's in-process layer: which code a frame belongs to (``CodeOwners``), and
the audit hook (``AuditGuard``) that refuses, and records, what candidate code may not do.

It is best-effort: Python code in the same process can reach around it, which is why the kernel's
layers (confinement.py) come first. The runtime checks (checks.py) tell candidate code from
library code with ``CodeOwners`` too.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
from pathlib import Path


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
