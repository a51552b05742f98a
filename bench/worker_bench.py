#!/usr/bin/env python3
"""Device worker benchmark: three measurements side by side in one run, on one device.

(a) warm per-attempt overhead: one candidate submitted `--attempts` times to a warm Harness;
    overhead = wall - (compile_s + run_s) as the harness reports them (goal: < 50 ms).
(b) library validation: every candidate of the library directories (one file per operator, the
    `validate` layout) against all its samples for every dtype it supports, vs a pure-ATen pass over
    the same samples on the same device: the samples generated from the same seed on the device and
    the ATen operator run on each, synchronised (goal: harness within 1.5x).
(c) catalog build: `python -m opforge_worker catalog` in a fresh process, cold (empty cache) and
    then cached.

    python bench/worker_bench.py --device interpreter --json out.json --markdown out.md

Prints a markdown table and writes JSON. Run from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "worker"))

from opforge_worker import toolchain, validate

DEFAULT_LIBRARY = [
    ROOT / "config" / "examples",
    ROOT / "worker" / "tests" / "corpus" / "honest",
]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def request_for(candidate: validate.Candidate, dtypes: list[str]) -> dict:
    return {
        "op": candidate.op,
        "variant": candidate.variant,
        "source": candidate.source,
        "wrapper": candidate.wrapper,
        "dtypes": dtypes,
        "mode": "all",
        "seed": 0,
        "timeout_s": 120.0,
    }


def warm_overhead(
    harness, candidate: validate.Candidate, dtype: str, attempts: int
) -> dict:
    request = request_for(candidate, [dtype])
    first = harness.run_test(
        request, threading.Event()
    )  # cold: process start, first compile
    if first["outcome"] != "pass":
        raise RuntimeError(
            f"{candidate.path.name} does not pass on {dtype}: {first['outcome']}"
        )
    overheads, walls = [], []
    for _ in range(attempts):
        started = time.perf_counter()
        payload = harness.run_test(request, threading.Event())
        wall = time.perf_counter() - started
        walls.append(wall)
        overheads.append(wall - (payload["compile_s"] + payload["run_s"]))
    return {
        "candidate": candidate.path.name,
        "dtype": dtype,
        "attempts": attempts,
        "tests_per_attempt": first["tests_run"],
        "wall_median_ms": statistics.median(walls) * 1000,
        "overhead_median_ms": statistics.median(overheads) * 1000,
        "overhead_p90_ms": percentile(overheads, 0.9) * 1000,
        "overhead_max_ms": max(overheads) * 1000,
    }


def aten_pass(
    candidates, device_kind: str, dtypes_by_file: dict[Path, list[str]]
) -> dict:
    import torch
    from opforge_worker.opinfo import find_opinfo, samples_for

    device = "cuda" if device_kind == "cuda" else "cpu"
    samples_run = 0
    started = time.perf_counter()
    for candidate in candidates:
        opinfo = find_opinfo(candidate.op, candidate.variant)
        for dtype in dtypes_by_file[candidate.path]:
            for sample in samples_for(opinfo, device, getattr(torch, dtype), seed=0):
                opinfo(sample.input, *sample.args, **sample.kwargs)
                samples_run += 1
            if device == "cuda":
                torch.cuda.synchronize()
    return {"wall_s": time.perf_counter() - started, "samples": samples_run}


def library_validation(harness, candidates, device_kind: str) -> dict:
    from opforge_worker.opinfo import find_opinfo

    results, dtypes_by_file = [], {}
    skipped = [c for c in candidates if find_opinfo(c.op, c.variant) is None]
    candidates = [c for c in candidates if c not in skipped]
    started = time.perf_counter()
    for candidate in candidates:
        opinfo = find_opinfo(candidate.op, candidate.variant)
        dtypes = validate.device_dtypes(opinfo, device_kind)
        dtypes_by_file[candidate.path] = dtypes
        payload = harness.run_test(request_for(candidate, dtypes), threading.Event())
        results.append(
            {
                "file": f"{candidate.path.parent.name}/{candidate.path.name}",
                "outcome": payload["outcome"],
                "tests_run": payload["tests_run"],
            }
        )
    harness_s = time.perf_counter() - started
    aten = aten_pass(candidates, device_kind, dtypes_by_file)
    return {
        "candidates": len(candidates),
        "passed": sum(r["outcome"] == "pass" for r in results),
        "harness_s": harness_s,
        "harness_tests": sum(r["tests_run"] for r in results),
        "aten_s": aten["wall_s"],
        "aten_samples": aten["samples"],
        "ratio": harness_s / aten["wall_s"],
        "results": results,
        "skipped_not_an_operator": [str(c.path.relative_to(ROOT)) for c in skipped],
    }


def catalog_build(device_kind: str, ops: str | None) -> dict:
    def timed_build(cache: str) -> float:
        command = [
            sys.executable,
            "-m",
            "opforge_worker",
            "catalog",
            "--device",
            device_kind,
            "--json",
            os.devnull,
        ]
        if ops:
            command += ["--ops", ops]
        started = time.perf_counter()
        subprocess.run(
            command,
            cwd=ROOT / "worker",
            check=True,
            stdout=subprocess.DEVNULL,
            env={**os.environ, "OPFORGE_CACHE_DIR": cache},
        )
        return time.perf_counter() - started

    with tempfile.TemporaryDirectory() as cache:
        cold = timed_build(cache)
        cached = timed_build(cache)
    return {
        "ops": ops or "all",
        "cold_s": cold,
        "cached_s": cached,
        "speedup": cold / cached,
    }


def markdown(report: dict) -> str:
    tools = report["toolchain"]
    lines = [
        (
            f"Device: {report['device_kind']} ({tools['device']}), torch {tools['torch']}, "
            f"triton {tools['triton']}, python {tools['python']}; "
            f"fingerprint {report['fingerprint']}"
        ),
        "",
        "| measurement | value | goal |",
        "|---|---|---|",
    ]
    if "overhead" in report:
        o = report["overhead"]
        lines.append(
            f"| (a) warm per-attempt overhead, {o['candidate']} {o['dtype']}, {o['attempts']} "
            f"attempts of {o['tests_per_attempt']} tests | median {o['overhead_median_ms']:.1f} ms,"
            f" p90 {o['overhead_p90_ms']:.1f} ms, max {o['overhead_max_ms']:.1f} ms (wall median "
            f"{o['wall_median_ms']:.1f} ms) | < 50 ms |"
        )
    if "library" in report:
        lib = report["library"]
        lines.append(
            f"| (b) library of {lib['candidates']} kernels ({lib['passed']} pass), all samples: "
            f"harness vs pure ATen | {lib['harness_s']:.2f} s ({lib['harness_tests']} tests) vs "
            f"{lib['aten_s']:.2f} s ({lib['aten_samples']} samples): {lib['ratio']:.2f}x | "
            f"<= 1.5x |"
        )
    if "catalog" in report:
        cat = report["catalog"]
        lines.append(
            f"| (c) catalog build ({cat['ops']} ops), fresh process | cold {cat['cold_s']:.1f} s, "
            f"cached {cat['cached_s']:.1f} s ({cat['speedup']:.1f}x) | cached << cold |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", required=True, choices=["cuda", "interpreter"])
    parser.add_argument(
        "--library",
        nargs="*",
        type=Path,
        default=DEFAULT_LIBRARY,
        help="directories of candidates (missing ones are skipped)",
    )
    parser.add_argument(
        "--overhead-candidate",
        default="exp.py",
        help="file name, in the library, of the candidate for (a)",
    )
    parser.add_argument("--overhead-dtype", default="float32")
    parser.add_argument("--attempts", type=int, default=20)
    parser.add_argument(
        "--catalog-ops", help="comma-separated subset for (c); default all"
    )
    parser.add_argument("--parts", default="overhead,library,catalog")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()

    from opforge_worker.harness import Harness

    parts = set(args.parts.split(","))
    tools = toolchain.collect(args.device)
    report = {
        "device_kind": args.device,
        "toolchain": tools,
        "fingerprint": toolchain.fingerprint(tools),
        "command": " ".join(sys.argv),
    }
    candidates = [c for d in args.library if d.is_dir() for c in validate.discover(d)]
    harness = Harness(device_kind=args.device)
    try:
        if "overhead" in parts:
            # The first of that name: config/examples comes first in the default library.
            chosen = next(
                c for c in candidates if c.path.name == args.overhead_candidate
            )
            report["overhead"] = warm_overhead(
                harness, chosen, args.overhead_dtype, args.attempts
            )
        if "library" in parts:
            report["library"] = library_validation(harness, candidates, args.device)
    finally:
        harness.close()
    if "catalog" in parts:
        report["catalog"] = catalog_build(args.device, args.catalog_ops)
    table = markdown(report)
    print(table)
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
