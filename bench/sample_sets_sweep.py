"""Generates every sample set for every catalog operator and dtype on the CPU, as the harness
draws them (seed and seed + 1), and reports per set the samples, the operators that get any, the
time it took, generation errors, and seed/seed+1 pairs that do not align (a generated set can
align only where OpInfo's sample_inputs do).

    cd worker && python ../bench/sample_sets_sweep.py [--ops abs,sum] [--json out.json]

The catalog's operators are op_db's less data/catalog.yaml's exclusions (the random-operator
check needs the catalog survey and is not made here: random operators are swept too).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from collections import defaultdict

import torch
from opforge_worker import opinfo as opinfo_db
from opforge_worker import sample_sets
from opforge_worker.catalog import CatalogConfig


def catalog_opinfos(config: CatalogConfig, names: set[str] | None) -> list:
    chosen = []
    for opinfo in opinfo_db.load_op_db():
        key = f"{opinfo.name}.{opinfo.variant_test_name}".rstrip(".")
        classes = {cls.__name__ for cls in type(opinfo).__mro__}
        if names is not None and opinfo.name not in names:
            continue
        if key in config.exclude_names or opinfo.name in config.exclude_names:
            continue
        if classes & set(config.exclude_classes):
            continue
        if any(opinfo.name.startswith(prefix) for prefix in config.exclude_prefixes):
            continue
        supported = opinfo.supported_dtypes("cpu")
        if config.exclude_complex_only and all(dtype.is_complex for dtype in supported):
            continue
        chosen.append(opinfo)
    return chosen


def layout(sample) -> tuple:
    leaves = torch.utils._pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return (
        sample.name,
        tuple(sample.kwargs),
        tuple(
            (leaf.dtype, tuple(leaf.shape), leaf.stride(), leaf.storage_offset())
            for leaf in leaves
            if isinstance(leaf, torch.Tensor)
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated operator names (default: the catalog)")
    parser.add_argument("--json", help="write the per-operator counts here")
    arguments = parser.parse_args()
    config = CatalogConfig.load()
    names = set(arguments.ops.split(",")) if arguments.ops else None
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    opinfos = catalog_opinfos(config, names)
    counts = defaultdict(int)
    seconds = defaultdict(float)
    ops_with_any = defaultdict(set)
    elements = defaultdict(int)
    errors, misaligned, per_op = [], [], {}
    start = time.perf_counter()
    op_seconds = {}
    for number, opinfo in enumerate(opinfos, 1):
        key = f"{opinfo.name}.{opinfo.variant_test_name}".rstrip(".")
        op_began = time.perf_counter()
        supported = opinfo.supported_dtypes("cpu")
        per_op[key] = {}
        for dtype_name in config.dtypes:
            dtype = getattr(torch, dtype_name)
            if dtype not in supported:
                continue
            for name in sample_sets.SETS:
                began = time.perf_counter()
                try:
                    first = sample_sets.generate(opinfo, name, dtype, config.sample_seed)
                    second = sample_sets.generate(opinfo, name, dtype, config.sample_seed + 1)
                except Exception as error:  # OpInfo sample functions raise anything
                    errors.append(f"{key} {dtype_name} {name}: {type(error).__name__}: {error}")
                    continue
                finally:
                    seconds[name] += time.perf_counter() - began
                if [layout(s) for s in first] != [layout(s) for s in second]:
                    misaligned.append(f"{key} {dtype_name} {name}")
                counts[name] += len(first)
                per_op[key][f"{dtype_name} {name}"] = len(first)
                if first:
                    ops_with_any[name].add(key)
                for sample in first:
                    leaves = torch.utils._pytree.tree_leaves((sample.input, sample.args))
                    elements[name] += sum(
                        leaf.numel() for leaf in leaves if isinstance(leaf, torch.Tensor)
                    )
        op_seconds[key] = time.perf_counter() - op_began
        if number % 50 == 0:
            print(f"{number}/{len(opinfos)} operators, {time.perf_counter() - start:.0f} s")
    print(f"{len(opinfos)} operators, {time.perf_counter() - start:.0f} s in all")
    print(f"{'set':18} {'samples':>8} {'operators':>9} {'elements':>12} {'seconds':>8}")
    for name in sample_sets.SETS:
        print(
            f"{name:18} {counts[name]:8} {len(ops_with_any[name]):9} {elements[name]:12} "
            f"{seconds[name]:8.1f}"
        )
    slowest = sorted(op_seconds.items(), key=lambda item: -item[1])[:10]
    print("slowest operators: " + ", ".join(f"{key} {spent:.1f} s" for key, spent in slowest))
    print(f"generation errors: {len(errors)}")
    for line in errors:
        print("  " + line[:300])
    print(f"seed/seed+1 misaligned: {len(misaligned)}")
    for line in misaligned:
        print("  " + line)
    if arguments.json:
        with open(arguments.json, "w") as out:
            json.dump({"per_op": per_op, "errors": errors, "misaligned": misaligned}, out)


if __name__ == "__main__":
    main()
