"""The operator catalog: the OpInfo operators of the installed torch, filtered and described.

Per operator: name, variant, category, the dtypes (of data/catalog.yaml's) it supports on the
device, its sample count per dtype from a fixed seed (over every sample set, as a test draws
them) and per set, the ATen overloads its samples dispatch to, and its docstring with the
docstrings it references resolved. Building that means generating and
running every sample on the CPU, which is slow; the device-independent part (the survey) is
cached on disk keyed by the toolchain fingerprint, the settings it depends on, and the survey's
schema version.
Filtering and categorising run on every call, so editing the config needs no rebuild.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import tempfile
import threading
import warnings
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from torch.utils._python_dispatch import TorchDispatchMode

from opforge_worker import device_kinds, docstrings, sample_sets, toolchain
from opforge_worker import opinfo as opinfo_db
from opforge_worker.cache_root import cache_dir
from opforge_worker.package_data import data_path

log = logging.getLogger("opforge_worker.catalog")

CATEGORIES = (
    "elementwise",
    "deep learning",
    "linear algebra",
    "shape manipulation",
    "reduction",
    "indexing & selection",
    "other",
)
# Bumped whenever survey() records something new or differently: old caches are then ignored.
SURVEY_SCHEMA = 5
DEFAULT_CONFIG = data_path("catalog.yaml")
# Operators per task of a parallel survey: small enough to balance slow operators across processes.
_SURVEY_CHUNK = 8
_OPS_PER_PROCESS_AT_LEAST = 32


# -- configuration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CatalogConfig:
    dtypes: tuple[str, ...]
    sample_seed: int
    exclude_complex_only: bool
    exclude_random: bool
    exclude_classes: dict[str, str]
    exclude_prefixes: dict[str, str]
    exclude_names: dict[str, str]
    categories: dict[str, str]
    docstring_max_depth: int
    docstring_max_nodes: int

    @classmethod
    def load(cls, path: Path | str | None = None) -> CatalogConfig:
        path = Path(path or os.environ.get("OPFORGE_CATALOG_CONFIG") or DEFAULT_CONFIG)
        try:
            raw = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as error:
            raise ValueError(f"catalog config {path}: {error}") from None
        try:
            exclude = raw["exclude"]
            config = cls(
                dtypes=tuple(raw["dtypes"]),
                sample_seed=int(raw["sample_seed"]),
                exclude_complex_only=bool(exclude["complex_only"]),
                exclude_random=bool(exclude["random"]),
                exclude_classes=dict(exclude.get("classes") or {}),
                exclude_prefixes=dict(exclude.get("prefixes") or {}),
                exclude_names=dict(exclude.get("names") or {}),
                categories=dict(raw.get("categories") or {}),
                docstring_max_depth=int(raw["docstrings"]["max_depth"]),
                docstring_max_nodes=int(raw["docstrings"]["max_nodes"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"catalog config {path}: missing or malformed {error}") from None
        for dtype in config.dtypes:
            if not isinstance(getattr(torch, dtype, None), torch.dtype):
                raise ValueError(f"catalog config {path}: dtypes: {dtype!r} is not a torch dtype")
        for name, category in config.categories.items():
            if category not in CATEGORIES:
                raise ValueError(
                    f"catalog config {path}: categories: {name}: {category!r} is not one of "
                    f"{', '.join(CATEGORIES)}"
                )
        return config


# -- survey: what torch says about one operator, independent of device and filters -------------


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class _DispatchRecorder(TorchDispatchMode):
    """Records the ATen overloads reaching the dispatcher (after composite decomposition)."""

    def __init__(self):
        super().__init__()
        self.overloads: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.overloads.add(str(func))
        return func(*args, **(kwargs or {}))


def _is_random(overload: str) -> bool:
    namespace, name, overload_name = overload.split(".")
    packet = getattr(getattr(torch.ops, namespace), name)
    return torch.Tag.nondeterministic_seeded in getattr(packet, overload_name).tags


def survey(opinfo, config: CatalogConfig) -> dict[str, Any]:
    """Facts about `opinfo` under the installed torch: its classes, all dtypes it supports on each
    device kind's OpInfo device, per target dtype the sample count (seeded) of every sample set
    and of each, and where generation failed, the ATen overloads its OpInfo samples
    (``sample_inputs``) dispatch to on the CPU, and its docstring DAG. The other sets are
    generated and counted, not run (which would cost the survey time for little): they call the
    same operator on other values, layouts and sizes."""
    supported = {
        device: sorted(_dtype_name(dtype) for dtype in opinfo.supported_dtypes(device))
        for device in device_kinds.OPINFO_DEVICES
    }
    sample_counts: dict[str, int] = {}
    sample_counts_by_set: dict[str, dict[str, int]] = {}
    sample_errors: dict[str, str] = {}
    run_errors = 0
    recorder = _DispatchRecorder()
    # Samples probe edge cases on purpose (and sparse ones are "beta"): their warnings are noise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for dtype_name in config.dtypes:
            if not any(dtype_name in dtypes for dtypes in supported.values()):
                continue
            by_set = _generate_sets(opinfo, getattr(torch, dtype_name), config.sample_seed)
            if isinstance(by_set, str):
                sample_errors[dtype_name] = by_set
                continue
            sample_counts_by_set[dtype_name] = {name: len(found) for name, found in by_set.items()}
            sample_counts[dtype_name] = sum(sample_counts_by_set[dtype_name].values())
            for sample in by_set[sample_sets.SAMPLE_INPUTS]:
                try:
                    with recorder:
                        opinfo(sample.input, *sample.args, **sample.kwargs)
                except Exception:  # e.g. no CPU kernel for float16: the overload still shows
                    run_errors += 1
    overloads = sorted(recorder.overloads)
    return {
        "name": opinfo.name,
        "variant": opinfo.variant_test_name,
        "classes": sorted(opinfo_db.class_names(opinfo)),
        "supported_dtypes": supported,
        "sample_counts": sample_counts,
        "sample_counts_by_set": sample_counts_by_set,
        "sample_errors": sample_errors,
        "sample_run_errors": run_errors,
        "aten_overloads": overloads,
        "random_overloads": [overload for overload in overloads if _is_random(overload)],
        "docstring": docstrings.for_operator(
            opinfo.name,
            fallback=opinfo.op,
            max_depth=config.docstring_max_depth,
            max_nodes=config.docstring_max_nodes,
        ),
    }


def _generate_sets(opinfo, dtype: torch.dtype, seed: int) -> dict[str, list] | str:
    """Every set's samples for ``dtype``, as the harness generates them (so that the counts are
    its tests per dtype); or why a set's generation failed, naming the set: the harness cannot
    test that dtype then."""
    by_set = {}
    for name in sample_sets.SETS:
        try:
            by_set[name] = sample_sets.generate(opinfo, name, dtype, seed)
        except Exception as error:  # OpInfo sample functions raise anything
            return f"{name}: {type(error).__name__}: {error}"[:300]
    return by_set


def _survey_chunk(keys: list[str], config: CatalogConfig) -> list[dict[str, Any]]:
    """Surveys `keys` in a child process: one thread each, the processes share the cores."""
    torch.set_num_threads(1)
    by_key = {_key(op.name, op.variant_test_name): op for op in opinfo_db.load_op_db()}
    return [survey(by_key[key], config) for key in keys]


def survey_processes() -> int:
    return int(os.environ.get("OPFORGE_CATALOG_PROCESSES") or min(os.cpu_count() or 1, 16))


def _survey_missing(
    keys: list[str], config: CatalogConfig, cancel: threading.Event | None
) -> Iterator[dict[str, Any]]:
    """Surveys `keys`, in parallel processes when there are many (a cold full catalog is
    hundreds of operators times five dtypes of samples)."""
    if not keys:
        return
    # A process costs seconds to start (torch and op_db imports): worth it for dozens of ops.
    processes = min(survey_processes(), len(keys) // _OPS_PER_PROCESS_AT_LEAST)
    if processes <= 1:
        by_key = {_key(op.name, op.variant_test_name): op for op in opinfo_db.load_op_db()}
        for key in keys:
            if cancel is not None and cancel.is_set():
                return
            yield survey(by_key[key], config)
        return
    chunks = [keys[start : start + _SURVEY_CHUNK] for start in range(0, len(keys), _SURVEY_CHUNK)]
    # Spawned, not forked: the parent may hold CUDA or threads that a fork would copy broken.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, mp_context=context) as pool:
        futures = [pool.submit(_survey_chunk, chunk, config) for chunk in chunks]
        for future in as_completed(futures):
            if cancel is not None and cancel.is_set():
                for pending in futures:
                    pending.cancel()
                return
            yield from future.result()


def _key(name: str, variant: str) -> str:
    return f"{name}.{variant}" if variant else name


# -- cache ------------------------------------------------------------------------------------


def cache_path(fingerprint: str, config: CatalogConfig, directory: Path | None = None) -> Path:
    settings = json.dumps(
        [
            SURVEY_SCHEMA,
            config.dtypes,
            config.sample_seed,
            config.docstring_max_depth,
            config.docstring_max_nodes,
        ],
        separators=(",", ":"),
    )
    settings_hash = hashlib.sha256(settings.encode()).hexdigest()[:8]
    return (directory or cache_dir()) / f"catalog-{fingerprint}-{settings_hash}.json"


@dataclass
class _Cache:
    """Surveys by key, and once a full build finished, every key of the torch: the op list is
    fixed for a fingerprint, so a cached catalog needs no op_db import (seconds)."""

    surveys: dict[str, dict]
    all_keys: list[str] | None = None

    def keys_for(self, names: Iterable[str] | None) -> list[str] | None:
        """The keys of the named operators (all when None; a name no OpInfo has gives none), or
        None if the cache can't tell."""
        if self.all_keys is None:
            return None
        if names is None:
            return self.all_keys
        wanted = set(names)
        return [key for key in self.all_keys if self.surveys[key]["name"] in wanted]


def _read_cache(path: Path) -> _Cache:
    try:
        stored = json.loads(path.read_text())
        return _Cache(dict(stored["surveys"]), stored["all_keys"])
    except FileNotFoundError:
        return _Cache({})
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("ignoring unreadable catalog cache %s: %s", path, error)
        return _Cache({})


def _write_cache(path: Path, cache: _Cache) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written whole then renamed: a reader never sees half a cache, a crash leaves the old one.
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as out:
        json.dump({"surveys": cache.surveys, "all_keys": cache.all_keys}, out)
    os.replace(out.name, path)


# -- filter and category ----------------------------------------------------------------------


def exclusion_reason(entry: dict, device_kind: str, config: CatalogConfig) -> str | None:
    name, key = entry["name"], _key(entry["name"], entry["variant"])
    for listed in (key, name):
        if listed in config.exclude_names:
            return config.exclude_names[listed]
    for cls in entry["classes"]:
        if cls in config.exclude_classes:
            return config.exclude_classes[cls]
    for prefix, reason in config.exclude_prefixes.items():
        if name.startswith(prefix):
            return reason
    supported = entry["supported_dtypes"][_dtype_device(device_kind)]
    if config.exclude_complex_only and supported and all("complex" in d for d in supported):
        return f"complex-only: supports only {', '.join(supported)} on {device_kind}"
    if not set(supported) & set(config.dtypes):
        return (
            f"supports none of {', '.join(config.dtypes)} on {device_kind} "
            f"(supports: {', '.join(supported) or 'nothing'})"
        )
    if config.exclude_random and entry["random_overloads"]:
        overloads = ", ".join(entry["random_overloads"])
        return f"random: dispatches to {overloads} (nondeterministic_seeded)"
    if not any(
        entry["sample_counts"].get(dtype) for dtype in _device_dtypes(entry, device_kind, config)
    ):
        errors = "; ".join(f"{d}: {e}" for d, e in entry["sample_errors"].items())
        return "no sample inputs for any supported dtype" + (f" ({errors})" if errors else "")
    return None


def category(entry: dict, config: CatalogConfig) -> str:
    name, classes = entry["name"], entry["classes"]
    if name in config.categories:
        return config.categories[name]
    if name.startswith("nn.functional."):
        return "deep learning"
    if name.startswith("linalg."):
        return "linear algebra"
    if "ReductionOpInfo" in classes:
        return "reduction"
    if "UnaryUfuncInfo" in classes or "BinaryUfuncInfo" in classes:
        return "elementwise"
    if "ShapeFuncInfo" in classes:
        return "shape manipulation"
    return "other"


def _dtype_device(device_kind: str) -> str:
    return device_kinds.lookup(device_kind).opinfo_device


def _device_dtypes(entry: dict, device_kind: str, config: CatalogConfig) -> list[str]:
    supported = set(entry["supported_dtypes"][_dtype_device(device_kind)])
    return [dtype for dtype in config.dtypes if dtype in supported]


def describe(entry: dict, device_kind: str, config: CatalogConfig) -> dict[str, Any]:
    dtypes = [
        d for d in _device_dtypes(entry, device_kind, config) if entry["sample_counts"].get(d)
    ]
    return {
        "name": entry["name"],
        "variant": entry["variant"],
        "category": category(entry, config),
        "dtypes": dtypes,
        "sample_counts": {dtype: entry["sample_counts"][dtype] for dtype in dtypes},
        "sample_counts_by_set": {dtype: entry["sample_counts_by_set"][dtype] for dtype in dtypes},
        "aten_overloads": entry["aten_overloads"],
        "docstring": entry["docstring"],
    }


# -- build ------------------------------------------------------------------------------------


def select(op_db: Iterable, names: Iterable[str] | None) -> list:
    """The OpInfos named (every variant of each; a name no OpInfo has gives none), or all."""
    ops = list(op_db)
    if names is None:
        return ops
    wanted = set(names)
    return [op for op in ops if op.name in wanted]


def require_known(catalog: dict[str, Any]) -> dict[str, Any]:
    """``catalog``, or ValueError naming what it was asked for that no OpInfo has (for the
    command lines; a catalog job answers with ``unknown`` instead)."""
    if catalog["unknown"]:
        raise ValueError(f"no OpInfo named {', '.join(catalog['unknown'])}")
    return catalog


def build(
    device_kind: str,
    *,
    ops: Iterable[str] | None = None,
    config: CatalogConfig | None = None,
    cache_directory: Path | None = None,
    use_cache: bool = True,
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    """The catalog for `device_kind`: `torch`, `device_kind`, `fingerprint`, `operators` (sorted
    by category then name), `excluded` ([{name, variant, reason}]), `unknown` (the names in
    `ops` no OpInfo has) and `stats` (surveys computed and read from the cache)."""
    config = config or CatalogConfig.load()
    tools = toolchain.collect(device_kind)
    fingerprint = toolchain.fingerprint(tools)
    path = cache_path(fingerprint, config, cache_directory)
    cache = _read_cache(path) if use_cache else _Cache({})
    keys = cache.keys_for(ops)
    if keys is None:
        keys = [_key(op.name, op.variant_test_name) for op in select(opinfo_db.load_op_db(), ops)]
    missing = [key for key in keys if key not in cache.surveys]
    if missing:
        log.info("surveying %d of %d operators (not in %s)", len(missing), len(keys), path)
    computed = 0
    for entry in _survey_missing(missing, config, cancel):
        cache.surveys[_key(entry["name"], entry["variant"])] = entry
        computed += 1
        if computed % 100 == 0:
            log.info("surveyed %d of %d operators", computed, len(missing))
    completed = ops is None and cache.all_keys is None and computed == len(missing)
    if completed:
        cache.all_keys = keys
    if use_cache and (computed or completed):
        _write_cache(path, cache)
    surveys = {key: cache.surveys[key] for key in keys if key in cache.surveys}
    unknown = sorted(set(ops or ()) - {entry["name"] for entry in surveys.values()})
    operators, excluded = [], []
    for entry in surveys.values():
        reason = exclusion_reason(entry, device_kind, config)
        if reason is None:
            operators.append(describe(entry, device_kind, config))
        else:
            excluded.append({"name": entry["name"], "variant": entry["variant"], "reason": reason})
    operators.sort(key=lambda op: (CATEGORIES.index(op["category"]), op["name"], op["variant"]))
    excluded.sort(key=lambda op: (op["name"], op["variant"]))
    return {
        "torch": torch.__version__,
        "device_kind": device_kind,
        "fingerprint": fingerprint,
        "operators": operators,
        "excluded": excluded,
        "unknown": unknown,
        "stats": {"computed": computed, "cached": len(surveys) - computed},
    }


def format_table(catalog: dict[str, Any]) -> str:
    """Operators grouped by category, then counts per category and exclusions."""
    lines = []
    by_category: dict[str, list[dict]] = {}
    for op in catalog["operators"]:
        by_category.setdefault(op["category"], []).append(op)
    name_width = max(
        (len(_key(op["name"], op["variant"])) for op in catalog["operators"]), default=8
    )
    for name in CATEGORIES:
        ops = by_category.get(name, [])
        if not ops:
            continue
        lines.append(f"\n{name} ({len(ops)})")
        for op in ops:
            samples = sum(op["sample_counts"].values())
            lines.append(
                f"  {_key(op['name'], op['variant']):<{name_width}}  "
                f"{','.join(op['dtypes']):<40}  {samples:>5} samples  "
                f"{len(op['aten_overloads']):>3} aten overloads"
            )
    lines.append("")
    lines.append(f"{'category':<22}{'operators':>10}")
    for name in CATEGORIES:
        lines.append(f"{name:<22}{len(by_category.get(name, [])):>10}")
    lines.append(f"{'total':<22}{len(catalog['operators']):>10}")
    lines.append(f"excluded: {len(catalog['excluded'])}")
    for op in catalog["excluded"]:
        lines.append(f"  {_key(op['name'], op['variant'])}: {op['reason']}")
    return "\n".join(lines)
