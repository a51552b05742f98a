"""Triton's compiled kernels kept across candidate processes, one store per candidate source.

Re-validating an unchanged kernel (the library after a torch drop with the same Triton, or after a
worker restart) should not compile it again. Each candidate source gets its own directory in the
store, keyed by the compiler's fingerprint and the source's sha256, and only the judge ever writes
the store: a source loads with a fresh Triton cache directory in the candidate process's scratch,
where Triton writes, reading through to that source's directory of the store (``use``; the
candidate process may read the store, never write it); after the source's test passed, the judge
copies what Triton wrote anew back under the same key (``keep``). A candidate can thus only ever
fill its own source's directory, never plant an entry another source would load.

The judge reads a directory the candidate process could write: ``keep`` takes plain files only
(never symbolic links or devices), two levels deep as Triton lays them out, within a size budget.
The store is bounded: least recently used sources are evicted once it holds more than its limit.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import stat
import uuid
from pathlib import Path

from opforge_worker import toolchain
from opforge_worker.cache_root import cache_dir

#: What the store may hold, and what one source may add to it.
DEFAULT_STORE_BYTES = 2 << 30
MAX_SOURCE_BYTES = 256 << 20
_MAX_FILES = 10_000
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Toolchain keys compiled kernels do not depend on: torch and the CUDA it was built with.
_NOT_COMPILER = ("torch", "cuda")


@functools.cache
def compiler_fingerprint(device_kind: str) -> str:
    """The fingerprint of what Triton's output depends on: the toolchain without torch."""
    tools = toolchain.collect(device_kind)
    return toolchain.fingerprint({k: v for k, v in tools.items() if k not in _NOT_COMPILER})


def default_root() -> Path:
    return cache_dir() / "triton"


class CompileCache:
    def __init__(self, root: Path, device_kind: str, max_bytes: int = DEFAULT_STORE_BYTES):
        self.root = Path(root)
        self.device_kind = device_kind
        self.max_bytes = max_bytes

    def directory(self, source: str) -> Path:
        digest = hashlib.sha256(source.encode()).hexdigest()
        return self.root / f"{compiler_fingerprint(self.device_kind)}-{digest}"

    def use(self, source: str) -> Path | None:
        """``source``'s directory, marked recently used (evicted last), or None if it has none."""
        stored = self.directory(source)
        try:
            os.utime(stored)
        except OSError:
            return None
        return stored

    def keep(self, source: str, triton_cache: Path) -> int:
        """Store the entries Triton wrote into ``triton_cache`` under ``source``; how many files
        were added. Entries already stored are left as they are."""
        stored = self.directory(source)
        known = set(os.listdir(stored)) if stored.is_dir() else set()
        found = _plain_entries(triton_cache, skip=known)
        if not found:
            return 0  # nothing new (a re-validation): no copy, and the store did not grow
        stored.mkdir(parents=True, exist_ok=True)
        added = 0
        for name, files in found.items():
            staging = stored / f".staging-{uuid.uuid4().hex}"
            staging.mkdir()
            for file_name, data in files.items():
                (staging / file_name).write_bytes(data)
            try:
                os.rename(staging, stored / name)  # atomic: readers see all of it or nothing
                added += len(files)
            except OSError:  # another judge stored it first
                shutil.rmtree(staging, ignore_errors=True)
        self._evict(keep=stored)
        return added

    def _evict(self, keep: Path) -> None:
        sources = []
        for directory in self.root.iterdir():
            with contextlib.suppress(OSError):
                size = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())
                sources.append((directory.stat().st_mtime, size, directory))
        held = sum(size for _, size, _ in sources)
        for _, size, directory in sorted(sources):
            if held <= self.max_bytes:
                return
            if directory != keep:
                shutil.rmtree(directory, ignore_errors=True)
                held -= size


def _plain_entries(triton_cache: Path, skip: set[str]) -> dict[str, dict[str, bytes]]:
    """Triton's entries in ``triton_cache`` but those named in ``skip``: {entry: {file: bytes}},
    plain files only, read without following links, empty when over the budget (a candidate
    filled it)."""
    try:
        top = os.open(triton_cache, _OPEN_FLAGS | os.O_DIRECTORY)
    except OSError:
        return {}
    found: dict[str, dict[str, bytes]] = {}
    budget, files = MAX_SOURCE_BYTES, 0
    try:
        for name in os.listdir(top):
            if name.startswith(("tmp.", ".")) or name in skip:
                continue
            try:
                entry = os.open(name, _OPEN_FLAGS | os.O_DIRECTORY, dir_fd=top)
            except OSError:  # a link or a plain file at the top: not Triton's
                continue
            try:
                contents = {}
                for file_name in os.listdir(entry):
                    data = _read_plain_file(entry, file_name, budget)
                    if data is None:
                        continue
                    budget -= len(data)
                    files += 1
                    if budget < 0 or files > _MAX_FILES:
                        return {}
                    contents[file_name] = data
                if contents:
                    found[name] = contents
            finally:
                os.close(entry)
    finally:
        os.close(top)
    return found


def _read_plain_file(directory_fd: int, name: str, limit: int) -> bytes | None:
    try:
        fd = os.open(name, _OPEN_FLAGS | os.O_NONBLOCK, dir_fd=directory_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as stream:
            return stream.read(limit + 1)
    finally:
        os.close(fd)
