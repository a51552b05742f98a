"""The benchmark job's timer on a GPU (worker/opforge_worker/TIMING.md), three checks in one run:

- calibration: the benchmark job's medians for a few kernels (a Triton exp and add, ATen's exp
  and add, on the ladder's largest input) against ncu's ``gpu__time_duration.sum`` for the same
  kernels on the same shapes (``--cache-control all``, like the job's L2 flush; ``--clock-control
  none``, the clocks the job runs at): within ``CALIBRATION_TOLERANCE``;
- noise: one kernel timed twice in one benchmark (the candidate's own source as its library
  baseline), every shape that is not launch-bound within ``NOISE_TOLERANCE`` of speedup 1;
- persisting L2: the set-aside the candidate process zeroes at start-up, read back (0);
- library: bench/library's kernels against ATen, per dtype the geomean speedup over shapes that
  are not launch-bound, the worst ratios, and the launch-bound shapes labelled.

    python3 bench/timing_check.py --device cuda --json timing.json [--ops abs,exp] [--budget-s 150]

``--device interpreter --no-ncu`` runs the same logic on the interpreter (no speed verdicts:
tests/test_bench_timing.py).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "worker"))

from opforge_worker import timing  # noqa: E402
from opforge_worker.benchmark import run_benchmark  # noqa: E402
from opforge_worker.validate import read_candidates  # noqa: E402

CALIBRATION_TOLERANCE = 0.05
NOISE_TOLERANCE = 0.03
HONEST_EXP = ROOT / "worker" / "tests" / "corpus" / "honest" / "exp.py"
LIBRARY = ROOT / "bench" / "library"
#: (file, operator) calibrated against ncu: a Triton kernel and ATen's, elementwise, unary and
#: binary.
CALIBRATED = ((HONEST_EXP, "exp"), (LIBRARY / "add.py", "add"))
#: The library kernels a default run times: the issue's worst ratios and common elementwise ops.
DEFAULT_OPS = (
    "add",
    "mul",
    "div",
    "lerp",
    "xlogy",
    "exp2",
    "tanh",
    "sqrt",
    "maximum",
    "nn.functional.silu",
)
NCU_CALLS = 10
#: What the noise verdict shows of each shape, so that a deviation explains itself.
NOISE_ROW_KEYS = (
    "source",
    "launch_bound",
    "repetitions",
    "candidate_us",
    "candidate_iqr_us",
    "baseline_us",
    "baseline_iqr_us",
    "speedup",
)


def benchmark_request(path: Path, dtypes, baseline: Path | None = None) -> dict:
    """A benchmark of the candidate file ``path`` (its first operator variant)."""
    candidate = read_candidates(path)[0]
    request = {
        "op": candidate.op,
        "variant": candidate.variant,
        "source": candidate.source,
        "wrapper": candidate.wrapper,
        "dtypes": list(dtypes),
        "seed": 0,
        "timeout_s": 300.0,
    }
    if baseline is not None:
        request.update(baseline_source=baseline.read_text(), baseline_wrapper=candidate.wrapper)
    return request


def largest(result: dict, prefix: str = "ladder:") -> dict | None:
    ladder = [t for t in result.get("timings", []) if t["source"].startswith(prefix)]
    return max(ladder, key=lambda t: t["elements"], default=None)


# -- ncu --------------------------------------------------------------------------------------


def ncu_durations_us(report_csv: str) -> dict[str, list[float]]:
    """gpu__time_duration.sum of every kernel in ncu's --csv output, by kernel name, in us."""
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}
    lines = [line for line in report_csv.splitlines() if line.startswith('"')]
    durations: dict[str, list[float]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = scale.get(row.get("Metric Unit", "nsecond"), 1e-3)
        durations.setdefault(row["Kernel Name"], []).append(value * unit)
    return durations


def profiled_kernels(path: Path, op: str, elements: int, dtype: str) -> None:
    """Run under ncu: the candidate's kernel and ATen's, ``NCU_CALLS`` each, in the profiled
    range only."""
    import torch
    from opforge_worker import opinfo as opinfo_db
    from opforge_worker.candidate import load_candidate

    candidate = read_candidates(path)[0]
    wrapper = load_candidate(path)[candidate.wrapper]
    aten = opinfo_db.find_opinfo(op, candidate.variant).op
    torch_dtype = getattr(torch, dtype)
    arity = 2 if op == "add" else 1
    inputs = [torch.rand(elements, device="cuda", dtype=torch_dtype) + 0.5 for _ in range(arity)]
    for function in (wrapper, aten):
        function(*inputs)  # compiled outside the profiled range
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for function in (wrapper, aten):
        for _ in range(NCU_CALLS):
            function(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def ncu_times(path: Path, op: str, elements: int, dtype: str) -> dict[str, float]:
    """Median ncu duration of the Triton kernel (``*_kernel``) and of ATen's, in us."""
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    command = [
        ncu,
        "--csv",
        "--metrics",
        "gpu__time_duration.sum",
        "--profile-from-start",
        "off",
        "--cache-control",
        "all",
        "--clock-control",
        "none",
        sys.executable,
        __file__,
        "--profile",
        str(path),
        op,
        str(elements),
        dtype,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=True)
    durations = ncu_durations_us(done.stdout)
    triton = [d for name, ds in durations.items() if name.endswith("_kernel") for d in ds]
    aten = [d for name, ds in durations.items() if not name.endswith("_kernel") for d in ds]
    return {"candidate": statistics.median(triton), "baseline": statistics.median(aten)}


def persisting_l2_after_reset() -> int | None:
    """The persisting-L2 set-aside read back after ``timing.no_persisting_l2`` in this
    process's CUDA context (device_kinds' CUDA start-up runs it in every candidate process)."""
    import torch

    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    return timing.no_persisting_l2()


def calibration_verdict(ours_us: float, ncu_us: float) -> dict:
    deviation = ours_us / ncu_us - 1 if ncu_us > 0 else float("inf")
    return {
        "events_us": ours_us,
        "ncu_us": ncu_us,
        "deviation": deviation,
        "within": abs(deviation) <= CALIBRATION_TOLERANCE,
    }


# -- the checks -------------------------------------------------------------------------------


def calibrate(harness, device: str, use_ncu: bool) -> list[dict]:
    rows = []
    for path, op in CALIBRATED:
        result = run_benchmark(harness, benchmark_request(path, ["float32"]))
        top = largest(result)
        row = {"op": op, "outcome": result["outcome"], "shape": top and top["shape"]}
        if top is not None and use_ncu:
            measured = ncu_times(path, op, top["elements"], "float32")
            row["candidate"] = calibration_verdict(top["candidate_us"], measured["candidate"])
            row["baseline"] = calibration_verdict(top["baseline_us"], measured["baseline"])
        rows.append(row)
    return rows


def noise_verdict(result: dict) -> dict:
    steady = [t for t in result.get("timings", []) if not t["launch_bound"]]
    worst = max(steady, key=lambda t: abs(t["speedup"] - 1), default=None)
    return {
        "outcome": result["outcome"],
        "shapes": len(steady),
        "worst_source": worst and worst["source"],
        "worst_deviation": worst and worst["speedup"] - 1,
        "within": bool(steady) and abs(worst["speedup"] - 1) <= NOISE_TOLERANCE,
        "noise": result.get("noise"),
        "rows": [{key: t.get(key) for key in NOISE_ROW_KEYS} for t in result.get("timings", [])],
    }


def summarize_library(results: list[dict]) -> dict:
    """Per dtype: the geomean speedup over the shapes that are not launch-bound, the five worst
    (operator, shape, speedup), the launch-bound shapes, the kernels that did not pass."""
    by_dtype: dict[str, dict] = {}
    for entry in results:
        if entry["result"]["outcome"] != "pass":
            for dtype in entry["dtypes"]:
                by_dtype.setdefault(dtype, _empty())["failed"].append(
                    {"op": entry["op"], "outcome": entry["result"]["outcome"]}
                )
            continue
        for shape in entry["result"]["timings"]:
            summary = by_dtype.setdefault(shape["dtype"], _empty())
            row = {
                "op": entry["op"],
                "source": shape["source"],
                "shape_class": shape["shape_class"],
                "speedup": shape["speedup"],
                "candidate_us": shape["candidate_us"],
                "baseline_us": shape["baseline_us"],
            }
            summary["launch_bound" if shape["launch_bound"] else "steady"].append(row)
    for summary in by_dtype.values():
        steady = summary.pop("steady")
        summary["geomean_speedup"] = timing.geomean([r["speedup"] for r in steady])
        summary["shapes"] = len(steady)
        summary["below_0.8"] = sorted({r["op"] for r in steady if r["speedup"] < 0.8})
        summary["worst"] = sorted(steady, key=lambda r: r["speedup"])[:5]
    return by_dtype


def _empty() -> dict:
    return {"steady": [], "launch_bound": [], "failed": []}


def library(harness, ops, dtypes, budget_s: float) -> dict:
    deadline = time.monotonic() + budget_s
    results, skipped = [], []
    for op in ops:
        path = LIBRARY / f"{op}.py"
        if time.monotonic() > deadline:
            skipped.append(op)
            continue
        result = run_benchmark(harness, benchmark_request(path, dtypes))
        results.append({"op": op, "dtypes": list(dtypes), "result": result})
    return {"per_dtype": summarize_library(results), "skipped_for_time": skipped}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", help="where the report goes (required unless --profile)")
    parser.add_argument("--ops", default=",".join(DEFAULT_OPS), help="bench/library ops, or all")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--budget-s", type=float, default=60.0, help="for the library part")
    parser.add_argument("--no-ncu", action="store_true")
    parser.add_argument("--profile", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.profile:
        path, op, elements, dtype = args.profile
        profiled_kernels(Path(path), op, int(elements), dtype)
        return 0

    if not args.json:
        parser.error("--json is required")
    from opforge_worker.harness import Harness

    ops = sorted(p.stem for p in LIBRARY.glob("*.py")) if args.ops == "all" else args.ops.split(",")
    began = time.monotonic()
    report: dict = {"device": args.device, "timer": None}
    with Harness(args.device) as harness:
        report["timer"] = harness.kind.timer
        # What the candidate process does at start-up, done here: whether this driver takes it.
        report["persisting_l2_bytes_after_reset"] = (
            persisting_l2_after_reset() if args.device == "cuda" else None
        )
        report["calibration"] = calibrate(harness, args.device, not args.no_ncu)
        twice = run_benchmark(
            harness, benchmark_request(HONEST_EXP, ["float32"], baseline=HONEST_EXP)
        )
        report["noise"] = noise_verdict(twice)
        report["library"] = library(harness, ops, args.dtypes.split(","), args.budget_s)
    report["wall_s"] = round(time.monotonic() - began, 1)
    Path(args.json).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    calibrated = [
        side["within"]
        for row in report["calibration"]
        for side in (row.get("candidate"), row.get("baseline"))
        if side
    ]
    print(json.dumps({k: report[k] for k in ("noise", "wall_s")}, indent=1))
    for dtype, summary in report["library"]["per_dtype"].items():
        print(
            f"{dtype}: geomean {summary['geomean_speedup']:.3f} over {summary['shapes']} shapes, "
            f"below 0.8x: {', '.join(summary['below_0.8']) or 'none'}"
        )
    return 0 if all(calibrated) and (args.device != "cuda" or report["noise"]["within"]) else 1


if __name__ == "__main__":
    sys.exit(main())
