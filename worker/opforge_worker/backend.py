"""An installed backend (a package that registers ATen kernels with the dispatcher on an
``enable()`` call, FlagGems' way) as the candidate of ``validate --backend``.

The judge names the package and its enable call (``BackendSpec``); the candidate process imports
and enables it at its start, before its checks take their fingerprint of the process
(``candidate.CandidateServer.install``), so that the registrations are the process's state and
not a change a test made. ``enable`` finds what the package registered by comparing the
dispatcher's kernel of every ATen overload and dispatch key (``torch._C._dispatch_dump``) before
and after the call, so a registration made any way (``torch.library``, C++) is seen; and it
proves which registered kernels run: every kernel registered through
``torch.library.Library.impl`` during the call (what ``torch.library`` and FlagGems use) is
wrapped in a counter, and each call's reply carries the counts it added (``BackendCounts``). An
overload registered some other way cannot be counted, and says so; opforge's own exported
packages are asked to register through ``torch.library`` (``ROUTING_ENVIRONMENT``).

The judge process never enables the package: its references are ATen's.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import traceback
from dataclasses import asdict, dataclass, field

#: ``python`` in this variable makes opforge's own exported packages register their kernels
#: through ``torch.library`` (their manifest's ``routing_environment``) instead of routing in the
#: dispatcher, where no counter could see them: ``enable`` sets it.
ROUTING_ENVIRONMENT = "OPFORGE_LIBRARY_ROUTING"

#: The ATen namespace's prefix in the dispatcher's operator names.
_ATEN = "aten::"


def normalize_overload(name: str) -> str:
    """The catalog's spelling (``aten.abs.default``) of ``aten::abs``, ``aten::abs.out``,
    ``abs.out`` or ``aten.abs.out``."""
    namespace, _, rest = name.rpartition("::")
    if namespace:
        op, _, overload = rest.partition(".")
        return f"{namespace}.{op}.{overload or 'default'}"
    parts = name.split(".")
    if len(parts) == 2:
        return f"aten.{name}"
    if len(parts) == 1:
        return f"aten.{name}.default"
    return name


@dataclass(frozen=True)
class BackendSpec:
    """Which package to enable and how, as the candidate process's options carry it."""

    package: str
    #: The call that enables it: a dotted name, ``package.enable`` by default.
    enable: str
    #: Directories to put on the candidate process's ``sys.path`` (and let it read): where the
    #: package was found by the judge, when that is not the Python installation's.
    paths: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def locate(package: str, enable: str | None = None) -> BackendSpec:
    """The spec of an importable ``package`` (found, not imported, here); ValueError when it
    cannot be found or the enable call names another package."""
    call = enable or f"{package}.enable"
    module, _, function = call.rpartition(".")
    if not module or not function:
        raise ValueError(f"--enable {call!r}: name a function as module.function")
    if module.split(".")[0] != package.split(".")[0]:
        raise ValueError(f"--enable {call!r} is not a function of the package {package!r}")
    try:
        found = importlib.util.find_spec(package.split(".")[0])
    except (ImportError, ValueError) as error:
        raise ValueError(f"backend {package!r}: {error}") from None
    if found is None:
        raise ValueError(f"backend {package!r}: no such package is installed")
    locations = list(found.submodule_search_locations or []) or [found.origin or ""]
    paths = sorted({os.path.dirname(os.path.realpath(location)) for location in locations})
    return BackendSpec(package, call, [path for path in paths if path])


def kernel_table() -> dict[tuple[str, str], str]:
    """The dispatcher's active kernel of every ATen operator per dispatch key: where each was
    registered (``_dispatch_dump``'s lines, the inactive kernels an override hid left out)."""
    import torch

    table = {}
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith(_ATEN):
            continue
        for line in torch._C._dispatch_dump(name).splitlines():
            key, separator, where = line.partition(": registered at ")
            if separator and "(inactive)" not in key and " " not in key:
                table[(name, key)] = where.split(" :: ")[0]
    return table


class BackendCounts:
    """Calls of the kernels the backend registered through ``Library.impl``, by overload."""

    def __init__(self):
        self.counts: dict[str, int] = {}

    def counted(self, overload: str, kernel):
        """``kernel`` counting its calls under ``overload``."""
        counts = self.counts
        counts.setdefault(overload, 0)

        def counting(*args, **kwargs):
            counts[overload] += 1
            return kernel(*args, **kwargs)

        counting.__name__ = getattr(kernel, "__name__", "kernel")
        counting.__wrapped__ = kernel
        return counting

    def mark(self) -> dict[str, int]:
        return dict(self.counts)

    def since(self, mark: dict[str, int]) -> dict[str, int]:
        """The calls counted since ``mark`` (from ``mark()``), by overload, only those called."""
        return {
            name: count - mark.get(name, 0)
            for name, count in self.counts.items()
            if count != mark.get(name, 0)
        }


def enable(spec: BackendSpec, counts: BackendCounts) -> dict:
    """Import and enable the backend in this process, counting its kernels in ``counts``.

    Returns ``registered`` (overload -> the dispatch keys it registered a kernel for, with where,
    the dispatcher's ``registered at``), ``counted`` (the overloads whose kernels are counted)
    and ``error`` (the import's or the call's traceback; "" when it was enabled)."""
    import torch

    before = kernel_table()
    original = torch.library.Library.impl

    def impl(library, op_name, fn, *args, **kwargs):
        if library.ns == "aten" and fn is not torch.library.fallthrough_kernel:
            name = op_name.name() if hasattr(op_name, "name") else str(op_name)
            qualified = name if "::" in name else f"{library.ns}::{name}"
            fn = counts.counted(normalize_overload(qualified), fn)
        return original(library, op_name, fn, *args, **kwargs)

    error = ""
    # opforge's own exported packages route in the dispatcher unless asked not to, where no
    # counter could see their kernels
    os.environ[ROUTING_ENVIRONMENT] = "python"
    torch.library.Library.impl = impl
    try:
        module, _, function = spec.enable.rpartition(".")
        getattr(importlib.import_module(module), function)()
    except BaseException:  # noqa: BLE001 (the backend's failure, reported to the judge)
        error = traceback.format_exc(limit=-8)
    finally:
        torch.library.Library.impl = original
    registered: dict[str, dict[str, str]] = {}
    for (name, key), where in kernel_table().items():
        if before.get((name, key)) != where:
            registered.setdefault(normalize_overload(name), {})[key] = where
    return {"registered": registered, "counted": sorted(counts.counts), "error": error}
