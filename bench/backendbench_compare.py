"""The same kernels judged by BackendBench's OpInfo suite and by `validate`: wall time and tests.

    python bench/backendbench_compare.py --backendbench PATH --device cuda|interpreter \
        --json OUT [--kernels FILE_OR_DIR ...] [--work DIR]

PATH is a BackendBench checkout (its `BackendBench/` package is put on PYTHONPATH of its runs
only; nothing of it is kept here). The kernels are candidate files in our layout
(worker/CANDIDATE.md), by default the library bench/worker_bench.py validates: config/examples and
worker/tests/corpus/honest, the files `validate` reads as an OpInfo (file names it reads as none
are left out of both sides).

BackendBench's side: each kernel goes where its DirectoryBackend looks for it, one folder per ATen
overload its OpInfo's samples dispatch to alone (`exp__default/exp__default_implementation_v1.py`
defining `exp__default_kernel_impl`, which calls our wrapper through the adapter from the
overload's schema, opforge_library.export's files): BackendBench tests a kernel per
overload, on every OpInfo sample that dispatches to that overload alone (bfloat16, the suite's
only dtype). A directory holds one kernel per overload, so kernels that share one (two `exp`
files, variants of one operator) go to further directories, each one run of its own, as a user of
BackendBench would run them; the runs' walls add up. Each run is bench/backendbench_run.py (what
`BackendBench.scripts.main --suite opinfo --backend directory` does, for any device) in a fresh
process with a fresh Triton cache.

Our side: one `python -m opforge_worker validate` of all the files, every variant, every dtype the
operators support among the five targets, every sample set: first with an empty cache directory
(`cold`: the sample store and the compile store are built), then again (`warm`: what every later
run pays). Before both sides, one untimed process imports torch and the OpInfo database, so that
neither pays for a cold disk.

The JSON has both sides' walls and test counts, and BackendBench's wall over ours for each of
ours (`ratio_cold`, `ratio_warm`: above 1, ours is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "worker"
DEFAULT_KERNELS = [REPO / "config" / "examples", WORKER / "tests" / "corpus" / "honest"]


def _candidates(paths: list[Path]) -> list:
    """The (file, operator, variant, wrapper) tests of the files ``validate`` reads as an
    OpInfo."""
    from opforge_worker import validate
    from opforge_worker.opinfo import find_opinfo

    found = []
    for path in validate.candidate_files(paths):
        for candidate in validate.read_candidates(path):
            if not candidate.problem and find_opinfo(candidate.op, candidate.variant):
                found.append(candidate)
    return found


def stage_backendbench(candidates, work: Path) -> list[dict]:
    """Write the kernels in BackendBench's layout (opforge_library.export's files: the kernel
    behind the adapter from the overload's schema), as few directories as hold one kernel per
    overload; each directory's overloads (its --ops) and files."""
    from opforge_library import export

    rounds: list[dict] = []
    sources = work / "sources"
    sources.mkdir(parents=True, exist_ok=True)
    for index, candidate in enumerate(candidates):
        module = sources / f"c{index}_{candidate.path.stem}.py"
        module.write_text(export.PRELUDE + candidate.source)
        wrapper = export.load_wrapper(module, candidate.wrapper)
        specs = {}
        for overload in export.overloads_of(candidate.op, candidate.variant):
            schema = export.resolve_overload(f"aten.{overload}")._schema
            spec = export.adapter_spec(schema, wrapper)
            if isinstance(spec, dict):
                specs[overload] = spec
        if not specs:
            continue
        target = next((r for r in rounds if not set(specs) & set(r["overloads"])), None)
        if target is None:
            target = {"directory": work / f"round-{len(rounds)}", "overloads": [], "files": []}
            rounds.append(target)
        for overload, spec in specs.items():
            folder = export.folder_of(overload)
            kernel = target["directory"] / folder / f"{folder}_implementation_v1.py"
            kernel.parent.mkdir(parents=True)
            kernel.write_text(
                export.backendbench_text(folder, candidate.source, candidate.wrapper, spec)
            )
            target["overloads"].append(overload)
        target["files"].append(f"{candidate.path.name}:{candidate.variant or 'default'}")
    return rounds


def _timed(command: list[str], env: dict, timeout_s: float) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    wall = time.monotonic() - started
    if done.returncode not in (0, 1):  # validate exits 1 when a candidate fails
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return wall, done.stdout


def run_backendbench(rounds, backendbench: Path, device: str, env: dict, work: Path, timeout_s):
    runs = []
    for index, entry in enumerate(rounds):
        out = work / f"backendbench-{index}.json"
        wall, _ = _timed(
            [
                sys.executable,
                str(REPO / "bench" / "backendbench_run.py"),
                "--ops-directory",
                str(entry["directory"]),
                "--device",
                "cuda" if device == "cuda" else "cpu",
                "--ops",
                ",".join(entry["overloads"]),
                "--json",
                str(out),
            ],
            {
                **env,
                "PYTHONPATH": os.pathsep.join([str(backendbench), env["PYTHONPATH"]]),
                "TRITON_CACHE_DIR": str(work / f"triton-backendbench-{index}"),
            },
            timeout_s,
        )
        report = json.loads(out.read_text())
        runs.append({"wall_s": round(wall, 3), "files": entry["files"], **report})
    return {
        "wall_s": round(sum(run["wall_s"] for run in runs), 3),
        "tests": sum(run["tests"] for run in runs),
        "passed": sum(run["passed"] for run in runs),
        "runs": runs,
    }


def run_validate(files: list[Path], device: str, env: dict, out: Path, timeout_s) -> dict:
    wall, _ = _timed(
        [sys.executable, "-m", "opforge_worker", "validate", *map(str, files)]
        + ["--device", device, "--json", str(out)],
        env,
        timeout_s,
    )
    report = json.loads(out.read_text())
    results = report["results"]
    return {
        "wall_s": round(wall, 3),
        "tests": sum(r["tests_run"] for r in results),
        "passed": sum(r["tests_passed"] for r in results),
        "rows": len(results),
        "rows_passed": sum(r["outcome"] == "pass" for r in results),
        "startup_s": report["startup_s"],
        "by_row": [
            {
                "file": r["file"],
                "variant": r["variant"],
                "dtypes": r["dtypes"],
                "tests": r["tests_run"],
                "outcome": r["outcome"],
            }
            for r in results
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backendbench", required=True, type=Path, help="a BackendBench checkout")
    parser.add_argument("--device", required=True, choices=["cuda", "interpreter"])
    parser.add_argument("--json", required=True, type=Path)
    parser.add_argument("--kernels", nargs="+", type=Path, default=DEFAULT_KERNELS)
    parser.add_argument("--work", type=Path, help="scratch (default: a temporary directory)")
    parser.add_argument("--timeout-s", type=float, default=1800, help="per process")
    args = parser.parse_args()
    backendbench = args.backendbench.resolve()
    if not (backendbench / "BackendBench" / "suite" / "opinfo.py").is_file():
        parser.error(f"{backendbench}: not a BackendBench checkout (no BackendBench/suite)")
    if args.device == "interpreter":
        os.environ["TRITON_INTERPRET"] = "1"  # before anything here imports triton
    sys.path.insert(0, str(WORKER))
    work = Path(args.work or tempfile.mkdtemp(prefix="opforge-bb-")).resolve()
    work.mkdir(parents=True, exist_ok=True)

    candidates = _candidates(args.kernels)
    files = list(dict.fromkeys(candidate.path for candidate in candidates))
    rounds = stage_backendbench(candidates, work / "backendbench")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(WORKER), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "OPFORGE_CACHE_DIR": str(work / "opforge-cache"),
    }
    _timed(
        [
            sys.executable,
            "-c",
            "import torch, triton\n"
            "from torch.testing._internal.common_methods_invocations import op_db",
        ],
        env,
        args.timeout_s,
    )
    backendbench_side = run_backendbench(
        rounds, backendbench, args.device, env, work, args.timeout_s
    )
    cold = run_validate(files, args.device, env, work / "validate-cold.json", args.timeout_s)
    warm = run_validate(files, args.device, env, work / "validate-warm.json", args.timeout_s)
    document = {
        "device": args.device,
        "kernels": [f"{c.path.name}:{c.variant or 'default'}" for c in candidates],
        "files": [str(path) for path in files],
        "backendbench": backendbench_side,
        "opforge_cold": cold,
        "opforge_warm": warm,
        "ratio_cold": round(backendbench_side["wall_s"] / cold["wall_s"], 3),
        "ratio_warm": round(backendbench_side["wall_s"] / warm["wall_s"], 3),
    }
    args.json.write_text(json.dumps(document, indent=1) + "\n")
    print("| side | runs | wall | tests | passed |")
    print("|---|---|---|---|---|")
    print(
        f"| BackendBench opinfo | {len(rounds)} | {backendbench_side['wall_s']:.1f} s "
        f"| {backendbench_side['tests']} | {backendbench_side['passed']} |"
    )
    for name, side in (("validate, cold", cold), ("validate, warm", warm)):
        print(f"| {name} | 1 | {side['wall_s']:.1f} s | {side['tests']} | {side['passed']} |")
    print(
        f"BackendBench / validate: {document['ratio_cold']}x cold, {document['ratio_warm']}x warm"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
