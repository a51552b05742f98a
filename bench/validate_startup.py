"""Time `python -m opforge_worker validate`'s start-up: from the process's start to its first test.

Run from the repository root, naming one or more worker folders to compare (an older commit's
`worker/`, exported with `git archive`, say); their runs alternate, so that a shared machine's
load falls on each alike:

    /work/main/.venv/bin/python bench/validate_startup.py --runs 5 \
        --worker before=/tmp/before/worker --worker after=worker [--device interpreter]

Each run validates `worker/tests/corpus/honest/exp.py`, float32 only, in a fresh process, and
reads the start-up phases the run reports (`--json`'s `startup_s`, validate.STARTUP_PHASES); a
worker without them (before they existed) gives its whole wall time only. Each worker has a cache
directory of its own (OPFORGE_CACHE_DIR), kept across its runs, and `--warmup` untimed runs
first fill it: the timed runs are the ones a user makes after the first. Prints a markdown table
of medians, in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CANDIDATE = REPO / "worker" / "tests" / "corpus" / "honest" / "exp.py"


def run_once(worker: Path, device: str, candidates: Path, out: Path, cache: Path) -> dict:
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "opforge_worker",
            "validate",
            str(candidates),
            "--device",
            device,
        ]
        + ["--dtypes", "float32", "--json", str(out)],
        cwd=worker,
        env={**os.environ, "PYTHONPATH": str(worker), "OPFORGE_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{worker}: validate failed:\n{done.stdout}{done.stderr}")
    startup = json.loads(out.read_text()).get("startup_s", {})
    return {
        **startup,
        "start-up total": sum(startup.values()) if startup else None,
        "wall": wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="append", required=True, help="LABEL=FOLDER")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="untimed runs of each worker first: they fill its caches (the sample store)",
    )
    parser.add_argument("--device", default="interpreter", choices=["interpreter", "cuda"])
    args = parser.parse_args()
    workers = dict(item.split("=", 1) for item in args.worker)
    samples: dict[str, list[dict]] = {label: [] for label in workers}
    with tempfile.TemporaryDirectory() as scratch:
        candidates = Path(scratch) / "candidates"
        candidates.mkdir()
        (candidates / CANDIDATE.name).write_text(CANDIDATE.read_text())
        for run in range(args.warmup + args.runs):
            for label, folder in workers.items():
                out = Path(scratch) / f"{label}.json"
                cache = Path(scratch) / f"cache-{label}"  # each worker's own, kept across runs
                found = run_once(Path(folder).resolve(), args.device, candidates, out, cache)
                if run >= args.warmup:
                    samples[label].append(found)
    totals = ["start-up total", "wall"]
    found = dict.fromkeys(key for runs in samples.values() for run in runs for key in run)
    phases = [key for key in found if key not in totals] + totals
    print(f"load average: {' '.join(f'{load:.1f}' for load in os.getloadavg())}")
    print("| phase | " + " | ".join(workers) + " |")
    print("|---|" + "---|" * len(workers))
    for phase in phases:
        cells = []
        for label in workers:
            values = [run[phase] for run in samples[label] if run.get(phase) is not None]
            cells.append(f"{statistics.median(values):.2f}" if values else "-")
        print(f"| {phase} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
