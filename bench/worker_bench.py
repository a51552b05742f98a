#!/usr/bin/env python3
"""Device worker benchmark: three measurements side by side in one run, on one device.

(a) warm per-attempt overhead: one candidate submitted `--attempts` times to a warm Harness;
    overhead = wall - (compile_s + run_s) as the harness reports them (goal: < 50 ms).
(b) library validation: every candidate of the library directories (one file per operator, the
    `validate` layout) against all its samples for every dtype it supports, one test job each
    through the worker's harness pool of `--slots` slots (jobs.HarnessPool, as a worker with
    that many slots runs them): a cold pass (fresh harnesses,
    empty sample and compile caches: the first validation after a compiler drop) and a warm pass
    (the same library again: re-validation on an unchanged toolchain) and a restart pass (fresh
    harnesses and samples, the compiled kernels kept: a worker restart, or a torch drop with the
    same Triton), warm passes with each count of `--parallel-slots` harnesses, each pass with
    the judge process's CPU time (all its harness threads; whether the judge bounds the pass),
    side by side with baselines over the same samples: (i) ATen on the device alone (every sample
    set's samples from the same seed, put on the device, the operator run on each, synchronised;
    goal: harness within 1.5x)
    and (ii) ATen validated the harness's way in-process (no Triton, no sandbox: every sample and
    its fresh values to the device, ATen, back, compared with the CPU reference), and (iii) the
    same with the candidates' own wrappers instead of ATen (what the kernels cost with Triton's
    launches, before anything the harness adds).
(c) catalog build: `python -m opforge_worker catalog` in a fresh process, cold (empty cache) and
    then cached.

    python bench/worker_bench.py --device interpreter --json out.json --markdown out.md

Prints a markdown table and writes JSON. Run from the repository root.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
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

from opforge_worker import device_kinds, toolchain, validate

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


def warm_overhead(harness, candidate: validate.Candidate, dtype: str, attempts: int) -> dict:
    request = request_for(candidate, [dtype])
    first = harness.run_test(request, threading.Event())  # cold: process start, first compile
    if first["outcome"] != "pass":
        raise RuntimeError(f"{candidate.path.name} does not pass on {dtype}: {first['outcome']}")
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


def aten_pass(candidates, device_kind: str, dtypes_by_file: dict[Path, list[str]]) -> dict:
    """Baseline (i): every sample set's samples generated (on the CPU, where the sets are made),
    put on the device, and the ATen operator run on each."""
    import torch
    from opforge_worker import sample_sets
    from opforge_worker.opinfo import find_opinfo

    device = device_kinds.lookup(device_kind).torch_device
    samples_run = 0
    started = time.perf_counter()
    for candidate in candidates:
        opinfo = find_opinfo(candidate.op, candidate.variant)
        for dtype in dtypes_by_file[candidate.path]:
            for name in sample_sets.SETS:
                for sample in sample_sets.generate(opinfo, name, getattr(torch, dtype), seed=0):
                    sample = sample.transform(
                        lambda t: t.to(device) if isinstance(t, torch.Tensor) else t
                    )
                    opinfo(sample.input, *sample.args, **sample.kwargs)
                    samples_run += 1
            if device == "cuda":
                torch.cuda.synchronize()
    return {"wall_s": time.perf_counter() - started, "samples": samples_run}


def validated_in_process(
    calls_by_candidate: dict,
    device_kind: str,
    dtypes_by_file: dict[Path, list[str]],
    sample_cache,
) -> dict:
    """Baselines (ii) and (iii): the library validated the harness's way in this process,
    without a sandbox or checks: every prepared sample and its fresh values (the cache the
    harness passes filled) decoded, run on the device by ``calls_by_candidate[candidate]``
    (ATen, or the candidate's own wrapper), brought back and compared with the CPU reference."""
    import torch
    from opforge_worker import sample_sets
    from opforge_worker.checks import tensor_leaves
    from opforge_worker.compare import dtype_name, tensor_diff
    from opforge_worker.opinfo import find_opinfo
    from opforge_worker.settings import load_settings
    from opforge_worker.transport import decode_inputs

    device = torch.device(device_kinds.lookup(device_kind).torch_device)
    settings = load_settings()
    calls, mismatches = 0, 0
    started = time.perf_counter()
    for candidate, run in calls_by_candidate.items():
        opinfo = find_opinfo(candidate.op, candidate.variant)
        for dtype in dtypes_by_file[candidate.path]:
            for seed, name in itertools.product((0, 1), sample_sets.SETS):
                for sample in sample_cache.samples(opinfo, getattr(torch, dtype), seed, name):
                    inputs = decode_inputs(sample.inputs, device)
                    outputs = run(*inputs["args"], **inputs["kwargs"])
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    actual = [t.cpu() for t in tensor_leaves(outputs)]
                    for got, expected in zip(
                        actual, tensor_leaves(sample.reference.expected), strict=False
                    ):
                        tolerance = settings.tolerance(opinfo.name, dtype_name(expected.dtype))
                        mismatches += tensor_diff(got, expected, tolerance) is not None
                    calls += 1
    return {
        "wall_s": time.perf_counter() - started,
        "calls": calls,
        "mismatches": mismatches,
    }


def candidate_wrappers(candidates) -> dict:
    """Each candidate's wrapper, loaded in this process as the candidate process loads it (on
    the interpreter, main() has set TRITON_INTERPRET before anything imported triton)."""
    from opforge_worker.candidate import load_candidate

    return {c: load_candidate(c.path)[c.wrapper] for c in candidates}


def validate_library(pool, slots: int, candidates, device_kind: str) -> dict:
    """One pass over the library through the worker's harness pool, from ``slots`` threads (a
    worker's job threads): each candidate is one test job of every dtype it supports."""
    from opforge_worker.opinfo import find_opinfo

    def run(candidate):
        dtypes = validate.device_dtypes(find_opinfo(candidate.op, candidate.variant), device_kind)
        payload = pool.run_test(request_for(candidate, dtypes), threading.Event())
        return candidate, dtypes, payload

    started, judge_started = time.perf_counter(), time.process_time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=slots) as job_threads:
        done = list(job_threads.map(run, candidates))
    wall = time.perf_counter() - started
    return {
        "wall_s": wall,
        # The judge: this process, every harness's thread (candidate processes not included).
        "judge_cpu_s": time.process_time() - judge_started,
        "compile_s": sum(payload["compile_s"] for _, _, payload in done),
        "run_s": sum(payload["run_s"] for _, _, payload in done),
        "tests": sum(payload["tests_run"] for _, _, payload in done),
        "passed": sum(payload["outcome"] == "pass" for _, _, payload in done),
        "dtypes_by_file": {c.path: dtypes for c, dtypes, _ in done},
        "results": [
            {
                "file": f"{c.path.parent.name}/{c.path.name}",
                "outcome": payload["outcome"],
                "tests_run": payload["tests_run"],
                "compile_s": round(payload["compile_s"], 3),
                "run_s": round(payload["run_s"], 3),
            }
            for c, _, payload in done
        ],
    }


def median_run(runs: list[dict]) -> dict:
    """The run of median wall time, with every run's wall time beside it."""
    median = sorted(runs, key=lambda run: run["wall_s"])[len(runs) // 2]
    return {**median, "walls_s": [round(run["wall_s"], 3) for run in runs]}


def library_validation(
    candidates,
    device_kind: str,
    slots: int,
    parallel_slots: list[int],
    repeats: int,
    store_root: Path,
) -> dict:
    """Cold pass (fresh harnesses, empty sample and compile caches: the first validation after a
    compiler drop), warm pass (the same harnesses again: re-validation on an unchanged
    toolchain), restart pass (fresh harnesses and sample cache, the compile store kept: a worker
    restarted, or a torch drop with the same Triton), a warm pass with each count of
    ``parallel_slots`` harnesses (a worker with that many slots; its first pass, which starts
    their processes, is not timed), and the ATen baselines over the same samples. The warm passes and the
    baselines run ``repeats`` times each; their medians are compared."""
    from opforge_worker.compile_cache import CompileCache
    from opforge_worker.harness import Harness
    from opforge_worker.jobs import HarnessPool
    from opforge_worker.opinfo import find_opinfo
    from opforge_worker.samples import SampleCache

    skipped = [c for c in candidates if find_opinfo(c.op, c.variant) is None]
    candidates = [c for c in candidates if c not in skipped]
    compile_cache = CompileCache(store_root, device_kind)

    def passes(sample_cache, count: int, harness_count: int = slots) -> list[dict]:
        pool = HarnessPool(
            harness_count,
            lambda: Harness(device_kind, sample_cache=sample_cache, compile_cache=compile_cache),
        )
        try:
            return [
                validate_library(pool, harness_count, candidates, device_kind) for _ in range(count)
            ]
        finally:
            pool.close()

    sample_cache = SampleCache()
    cold, *warms = passes(sample_cache, 1 + repeats)
    (restart,) = passes(SampleCache(), 1)
    parallels = {count: passes(sample_cache, 1 + repeats, count)[1:] for count in parallel_slots}
    dtypes_by_file = cold["dtypes_by_file"]
    for done in (
        cold,
        restart,
        *warms,
        *(run for runs in parallels.values() for run in runs),
    ):
        del done["dtypes_by_file"]
    atens = [aten_pass(candidates, device_kind, dtypes_by_file) for _ in range(repeats)]
    aten_calls = {c: find_opinfo(c.op, c.variant).op for c in candidates}
    triton_calls = candidate_wrappers(candidates)
    validations, unsandboxed = (
        [
            validated_in_process(calls, device_kind, dtypes_by_file, sample_cache)
            for _ in range(repeats)
        ]
        for calls in (aten_calls, triton_calls)
    )
    # A warm pass takes about a second: one pass varies by tens of percent from run to run.
    warm, aten, validated, triton_validated = (
        median_run(runs) for runs in (warms, atens, validations, unsandboxed)
    )
    warm_parallel = {str(count): median_run(runs) for count, runs in parallels.items()}
    return {
        "candidates": len(candidates),
        "slots": slots,
        "repeats": repeats,
        "cold": cold,
        "warm": warm,
        "restart": restart,
        "warm_parallel": warm_parallel,
        "aten_device": aten,
        "aten_validated": validated,
        "triton_validated": triton_validated,
        "ratio_cold_to_aten": cold["wall_s"] / aten["wall_s"],
        "ratio_warm_to_aten": warm["wall_s"] / aten["wall_s"],
        "ratio_restart_to_aten": restart["wall_s"] / aten["wall_s"],
        "ratio_warm_parallel_to_aten": {
            count: run["wall_s"] / aten["wall_s"] for count, run in warm_parallel.items()
        },
        "ratio_warm_to_aten_validated": warm["wall_s"] / validated["wall_s"],
        "ratio_warm_to_triton_validated": warm["wall_s"] / triton_validated["wall_s"],
        "ratio_triton_validated_to_aten": triton_validated["wall_s"] / aten["wall_s"],
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


def walls(run: dict) -> str:
    return ", ".join(f"{wall:.2f}" for wall in run["walls_s"])


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
        cold, warm, restart = lib["cold"], lib["warm"], lib["restart"]
        aten, validated = lib["aten_device"], lib["aten_validated"]
        unsandboxed = lib["triton_validated"]
        kernels = f"library of {lib['candidates']} kernels, {lib['slots']} slot(s)"
        lines += [
            (
                f"| (b) {kernels}, cold pass (empty caches: first validation after a compiler drop) "
                f"| {cold['wall_s']:.2f} s, {cold['passed']} pass, {cold['tests']} tests; compile "
                f"{cold['compile_s']:.2f} s, run {cold['run_s']:.2f} s: "
                f"{lib['ratio_cold_to_aten']:.2f}x ATen on the device | - |"
            ),
            (
                f"| (b) {kernels}, warm pass (the same library again; median of "
                f"{lib['repeats']}: {walls(warm)}) | {warm['wall_s']:.2f} s, "
                f"{warm['passed']} pass; compile {warm['compile_s']:.2f} s, run {warm['run_s']:.2f} s,"
                f" judge CPU {warm['judge_cpu_s']:.2f} s: **{lib['ratio_warm_to_aten']:.2f}x** "
                f"ATen on the device, {lib['ratio_warm_to_aten_validated']:.2f}x ATen validated "
                "in-process | <= 1.5x |"
            ),
            (
                f"| (b) {kernels}, restart pass (fresh harnesses and samples, compiled kernels "
                f"kept) | {restart['wall_s']:.2f} s, {restart['passed']} pass; compile "
                f"{restart['compile_s']:.2f} s, run {restart['run_s']:.2f} s: "
                f"{lib['ratio_restart_to_aten']:.2f}x ATen on the device | - |"
            ),
        ]
        lines += [
            (
                f"| (b) library of {lib['candidates']} kernels, {count} slots, warm pass (median "
                f"of {lib['repeats']}: {walls(par)}) | {par['wall_s']:.2f} s, {par['passed']} "
                f"pass; compile {par['compile_s']:.2f} s, run {par['run_s']:.2f} s, judge CPU "
                f"{par['judge_cpu_s']:.2f} s: **{lib['ratio_warm_parallel_to_aten'][count]:.2f}x**"
                " ATen on the device | <= 1.5x |"
            )
            for count, par in lib["warm_parallel"].items()
        ]
        lines += [
            (
                f"| (b) baseline (i): ATen on the device alone, every set's samples put there "
                f"(median of {lib['repeats']}: {walls(aten)}) | "
                f"{aten['wall_s']:.2f} s ({aten['samples']} samples) | - |"
            ),
            (
                f"| (b) baseline (ii): ATen validated in-process (cached samples to the device, "
                f"CPU reference, compare; fresh values too; median of {lib['repeats']}: "
                f"{walls(validated)}) | {validated['wall_s']:.2f} s "
                f"({validated['calls']} calls, {validated['mismatches']} mismatches) | - |"
            ),
            (
                f"| (b) baseline (iii): the candidates' own wrappers validated in-process like "
                f"(ii), no sandbox, no checks (median of {lib['repeats']}: {walls(unsandboxed)})"
                f" | {unsandboxed['wall_s']:.2f} s ({unsandboxed['calls']} calls, "
                f"{unsandboxed['mismatches']} mismatches): "
                f"{lib['ratio_triton_validated_to_aten']:.2f}x ATen on the device; the warm "
                f"pass is {lib['ratio_warm_to_triton_validated']:.2f}x this | - |"
            ),
        ]
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
        type=lambda path: Path(path).resolve(),
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
    parser.add_argument("--catalog-ops", help="comma-separated subset for (c); default all")
    parser.add_argument("--parts", default="overhead,library,catalog")
    parser.add_argument(
        "--slots",
        type=int,
        default=1,
        help="harnesses validating the library in parallel",
    )
    parser.add_argument(
        "--parallel-slots",
        type=lambda text: [int(count) for count in text.split(",")],
        default=[4, 8],
        help="comma-separated harness counts, one parallel warm pass each",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="timed warm passes and baseline runs; medians are compared",
    )
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    if args.device == "interpreter":
        # For baseline (iii): triton must see it when first imported, not only when decorating.
        os.environ["TRITON_INTERPRET"] = "1"

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
    from opforge_worker.compile_cache import CompileCache

    with tempfile.TemporaryDirectory(prefix="opforge-bench-") as store:
        if "overhead" in parts:
            # The first of that name: config/examples comes first in the default library.
            chosen = next(c for c in candidates if c.path.name == args.overhead_candidate)
            compile_cache = CompileCache(Path(store) / "overhead", args.device)
            with Harness(device_kind=args.device, compile_cache=compile_cache) as harness:
                report["overhead"] = warm_overhead(
                    harness, chosen, args.overhead_dtype, args.attempts
                )
        if "library" in parts:
            report["library"] = library_validation(
                candidates,
                args.device,
                args.slots,
                args.parallel_slots,
                args.repeats,
                Path(store) / "library",
            )
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
