"""Builds and loads the package's routing in the dispatcher (``_dispatch.cpp``).

Copied verbatim into every exported package. The extension is compiled against the torch it
will run in, the first time a package is enabled in a Python of that torch, with torch's own
extension builder (``torch.utils.cpp_extension.load``: a C++ compiler, ninja and Python's
headers), and cached under ``TORCH_EXTENSIONS_DIR``: built once per torch and source. Its name
carries a digest of the source and of torch's build, so a changed torch builds its own instead
of loading one built for another.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("_dispatch.cpp")

_lock = threading.Lock()
_loaded: dict[str, object] = {}  # "module" -> the extension, or "problem" -> why there is none


def load():
    """The extension, or None where it cannot be built or loaded here; ``problem()`` says why."""
    with _lock:
        if not _loaded:
            try:
                _loaded["module"] = _build()
            except Exception as error:  # noqa: BLE001 (a compiler's or loader's failure, any kind)
                text = " ".join(str(error).split())
                _loaded["problem"] = f"{type(error).__name__}: {text}"[:400]
        return _loaded.get("module")


def problem() -> str:
    return _loaded.get("problem", "")


def _build():
    from torch.utils import cpp_extension

    source = SOURCE.read_bytes()
    build = f"{torch.__version__} {torch.version.git_version} {sys.version}".encode()
    digest = hashlib.sha256(source + b"\0" + build).hexdigest()[:16]
    # One path per digest: torch's builder rebuilds when the source's path changes, and every
    # package (every pip install, every export) holds its own copy.
    stable = Path(cpp_extension.get_default_build_root()) / "opforge_dispatch_sources"
    stable.mkdir(parents=True, exist_ok=True)
    path = stable / f"{digest}.cpp"
    if not path.exists() or path.read_bytes() != source:
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_bytes(source)
        partial.replace(path)
    return cpp_extension.load(
        name=f"opforge_dispatch_{digest}",
        sources=[str(path)],
        extra_cflags=["-O2"],
        verbose=False,
    )
