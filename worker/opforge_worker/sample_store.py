"""Prepared samples and the operators' metadata on disk, so that a judge needs no OpInfo database.

Importing torch's OpInfo database (``common_methods_invocations``) takes seconds of every judge's
start-up (13 s of ``validate``'s 21 s on an H100), yet all a test needs of it is fixed for a given
torch and this worker's code: each operator's metadata (``OpMeta``: names, the dtypes it supports
per device type) and its prepared samples per (operator, variant, dtype, seed, set), the inputs
and their CPU references (``samples.PreparedSample``). The store keeps both, and the database is
imported only when something is missing.

A cached sample stands in for a freshly generated one, so trust comes first:
- Everything lies under a directory named by the digest of its key (``store_key``): the format,
  the toolchain the samples and references are computed with (``toolchain.collect("none")``:
  python, torch, triton; with torch's git revision and numpy: the judge computes them on the
  CPU, so no device or driver enters), the digest
  of this package's code and of the sample-set and tolerance files. Any change there names
  another directory; nothing written under another key is ever read.
- Each file holds its own key and the sha256 of its body, checked on every read; one that fails
  (truncated, altered, written under another key, of a type the safe loader refuses) is logged,
  removed and built again, never used.
- Files are written whole to a temporary name and renamed: a reader never sees half of one.
- The body is read with ``torch.load(weights_only=True)``: plain containers, tensors, dtypes and
  torch's return types, never arbitrary objects (candidates cannot write here anyway: their
  sandbox writes only to its scratch directory).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from opforge_worker import device_kinds, sample_sets, toolchain
from opforge_worker.cache_root import cache_dir
from opforge_worker.judge import Precise, Reference
from opforge_worker.opinfo import class_names
from opforge_worker.samples import PreparedSample
from opforge_worker.settings import DEFAULT_SETTINGS_PATH

log = logging.getLogger("opforge_worker.sample_store")

#: Bumped whenever what a file holds changes: older stores are then never read.
FORMAT = 2
_MAGIC = b"opforge-samples\n"
#: The device types whose supported dtypes an ``OpMeta`` records: the CPU's, where the judge
#: computes references, and each device kind's (its ``opinfo_device``).
DEVICE_TYPES = tuple(sorted({"cpu", *device_kinds.OPINFO_DEVICES}))
_PACKAGE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class OpMeta:
    """What the judge reads of an OpInfo besides its samples; stands in for one in the
    harness, the judge and ``validate``."""

    name: str
    variant_test_name: str
    aten_name: str
    #: The dtypes it supports, by device type (``DEVICE_TYPES``), as their names.
    dtypes: dict[str, tuple[str, ...]]
    #: The names of the OpInfo's classes (``opinfo.class_names``), which class rules read.
    opinfo_classes: tuple[str, ...]

    @classmethod
    def of(cls, opinfo) -> OpMeta:
        return cls(
            name=opinfo.name,
            variant_test_name=opinfo.variant_test_name,
            aten_name=opinfo.aten_name or opinfo.name,
            dtypes={
                device: tuple(
                    sorted(
                        str(dtype).removeprefix("torch.")
                        for dtype in opinfo.supported_dtypes(device)
                    )
                )
                for device in DEVICE_TYPES
            },
            opinfo_classes=tuple(sorted(class_names(opinfo))),
        )

    def supported_dtypes(self, device_type: str) -> set[torch.dtype]:
        return {getattr(torch, name) for name in self.dtypes[device_type]}


def _file_digest(paths) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def store_key(settings_path: Path | None = None) -> dict[str, str]:
    """What the stored samples and references depend on (module docstring)."""
    # The toolchain of a worker without a device (python, torch, triton): the judge computes
    # samples and references on the CPU, so the device and its driver do not enter.
    host = toolchain.collect("none")
    return {
        "format": str(FORMAT),
        # str(): torch's version is a TorchVersion, which the safe loader refuses.
        **{key: str(value) for key, value in host.items() if value},
        "torch_git": str(torch.version.git_version),
        "numpy": np.__version__,
        "code": _file_digest(sorted(_PACKAGE.glob("*.py"))),
        "sample_sets": hashlib.sha256(
            json.dumps(dataclasses.asdict(sample_sets.config()), sort_keys=True).encode()
        ).hexdigest(),
        "settings": _file_digest([Path(settings_path or DEFAULT_SETTINGS_PATH)]),
    }


class StoreError(Exception):
    """A stored file that cannot be trusted: why."""


@functools.cache
def _return_types() -> tuple[type, ...]:
    """torch's named tuples of results (``torch.max(x, 1)``'s), which a reference may hold."""
    return tuple(
        value
        for value in vars(torch.return_types).values()
        if isinstance(value, type) and issubclass(value, tuple)
    )


def _fields(instance) -> dict:
    """A dataclass's constructor arguments (``init`` fields), nested dataclasses likewise."""
    return {
        field.name: _record(getattr(instance, field.name))
        for field in dataclasses.fields(instance)
        if field.init
    }


def _record(value):
    if isinstance(value, Reference | Precise):
        return {"type": type(value).__name__, "fields": _fields(value)}
    return value


def _rebuilt(value):
    if isinstance(value, dict) and value.get("type") in ("Reference", "Precise"):
        cls = Reference if value["type"] == "Reference" else Precise
        return cls(**{key: _rebuilt(item) for key, item in value["fields"].items()})
    return value


def encode_samples(samples: list[PreparedSample]) -> list[dict]:
    return [_fields(sample) for sample in samples]


def decode_samples(records: list[dict]) -> list[PreparedSample]:
    return [
        PreparedSample(**{key: _rebuilt(item) for key, item in record.items()})
        for record in records
    ]


class SampleStore:
    """The store of one key under ``root`` (default: the worker's cache, ``samples/``)."""

    def __init__(self, root: Path | None = None, settings_path: Path | None = None):
        self.key = store_key(settings_path)
        digest = hashlib.sha256(json.dumps(self.key, sort_keys=True).encode()).hexdigest()
        self.directory = Path(root or cache_dir() / "samples") / digest[:24]

    # -- the operators ----------------------------------------------------------------------

    @functools.cached_property
    def ops(self) -> dict[tuple[str, str], OpMeta]:
        """Every OpInfo's metadata by (name, variant), in op_db order (the first of two that
        share them): read from the store, else from op_db and stored."""
        # JSON: names and dtype names only, read in milliseconds where torch.load takes tenths.
        path = self.directory / "ops.json"
        metas = None
        try:
            metas = [
                OpMeta(
                    **{
                        **record,
                        "dtypes": {d: tuple(n) for d, n in record["dtypes"].items()},
                        "opinfo_classes": tuple(record["opinfo_classes"]),
                    }
                )
                for record in self._read(path, {"kind": "ops"})
            ]
        except FileNotFoundError:
            pass
        except (StoreError, TypeError, KeyError, AttributeError) as error:
            self._discard(path, error)
        if metas is None:
            from opforge_worker.opinfo import load_op_db

            metas = [OpMeta.of(opinfo) for opinfo in load_op_db()]
            try:
                self._write(path, {"kind": "ops"}, [dataclasses.asdict(meta) for meta in metas])
            except OSError as error:  # the next run imports op_db again, no verdict changes
                log.warning("operators' metadata not stored: %s", error)
        found: dict[tuple[str, str], OpMeta] = {}
        for meta in metas:
            found.setdefault((meta.name, meta.variant_test_name), meta)
        return found

    # -- prepared samples -------------------------------------------------------------------

    def load(
        self, op: OpMeta, dtype: torch.dtype, seed: int, sample_set: str
    ) -> list[PreparedSample] | None:
        """The stored samples of one set, or None when there are none to trust."""
        entry = _entry(op, dtype, seed, sample_set)
        path = self._path(entry)
        try:
            return decode_samples(self._read(path, entry))
        except FileNotFoundError:
            return None
        except (StoreError, TypeError, KeyError) as error:
            self._discard(path, error)
            return None

    def save(self, op: OpMeta, dtype: torch.dtype, seed: int, sample_set: str, samples) -> None:
        entry = _entry(op, dtype, seed, sample_set)
        try:
            self._write(self._path(entry), entry, encode_samples(samples))
        except OSError as error:  # a full disk costs the next run a generation, no verdict
            log.warning("samples of %s not stored: %s", entry, error)

    # -- files ------------------------------------------------------------------------------

    def _path(self, entry: dict) -> Path:
        name = hashlib.sha256(json.dumps(entry, sort_keys=True).encode()).hexdigest()[:32]
        return self.directory / name[:2] / f"{name}.pt"

    def _write(self, path: Path, entry: dict, payload) -> None:
        document = {"key": self.key, "entry": entry, "payload": payload}
        if path.suffix == ".json":
            data = json.dumps(document, sort_keys=True).encode()
        else:
            body = io.BytesIO()
            torch.save(document, body)
            data = body.getvalue()
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as out:
            out.write(_MAGIC + hashlib.sha256(data).hexdigest().encode() + b"\n" + data)
        os.replace(out.name, path)

    def _read(self, path: Path, entry: dict):
        data = path.read_bytes()
        head, _, body = data.partition(b"\n")
        digest, _, body = body.partition(b"\n")
        if head + b"\n" != _MAGIC or hashlib.sha256(body).hexdigest().encode() != digest:
            raise StoreError("its digest does not match its contents")
        try:
            if path.suffix == ".json":
                stored = json.loads(body)
            else:
                with torch.serialization.safe_globals(list(_return_types())):
                    stored = torch.load(io.BytesIO(body), weights_only=True)
        except Exception as error:  # noqa: BLE001 (whatever the loader refuses is untrusted)
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise StoreError(f"it does not load: {type(error).__name__}: {first}") from None
        if not isinstance(stored, dict) or stored.get("key") != self.key:
            raise StoreError("it was written under another key")
        if stored.get("entry") != entry:
            raise StoreError(f"it holds {stored.get('entry')}, not {entry}")
        return stored["payload"]

    @staticmethod
    def _discard(path: Path, error: Exception) -> None:
        log.warning("ignoring stored samples %s, built again: %s", path, error)
        path.unlink(missing_ok=True)


def _entry(op: OpMeta, dtype: torch.dtype, seed: int, sample_set: str) -> dict:
    return {
        "op": op.name,
        "variant": op.variant_test_name,
        "dtype": str(dtype).removeprefix("torch."),
        "seed": seed,
        "set": sample_set,
    }
