#!/usr/bin/env python3
"""Where the seconds of a library validation go, in the judge and in the candidate process.

worker_bench.py says how long a pass takes; this says why. It validates the library (the
worker_bench default: config/examples and the honest corpus) in a cold pass (empty caches), a warm
pass (the same harness again) and a restart pass (a fresh harness, the compile store kept), with
cProfile on in the judge for each pass and, in the candidate process, around each request it
serves (start-up, each load, each batch of calls): the candidate process is started through a
profiling entry point instead of ``python -m opforge_worker.confinement``, confined the same way.

    python bench/harness_profile.py --device cuda --out /tmp/profile

It prints each pass's wall, compile and run times, then the functions by cumulative time for the
judge and the candidate side of the warm and restart passes, and writes every profile as a pstats
file under --out (``python -m pstats FILE`` browses one). Profiling slows both processes, more so
the candidate process's Python: compare passes with each other, not with worker_bench's numbers.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "worker"))
sys.path.insert(0, str(ROOT / "bench"))

from opforge_worker import sandbox, validate
from opforge_worker.compile_cache import CompileCache
from opforge_worker.harness import Harness
from opforge_worker.opinfo import find_opinfo
from opforge_worker.samples import SampleCache
from worker_bench import DEFAULT_LIBRARY, request_for

#: The candidate process's entry point, profiling each request into its scratch directory (the
#: only place it may write).
PROFILED_ENTRY = r"""
import cProfile, os, sys
from opforge_worker import candidate, confinement

scratch = sys.argv[sys.argv.index("--scratch") + 1]
served = [0]

def profiled(name):
    original = getattr(candidate.CandidateServer, name)

    def run(self, *args):
        profile = cProfile.Profile()
        profile.enable()
        try:
            return original(self, *args)
        finally:
            profile.disable()
            served[0] += 1
            profile.dump_stats(os.path.join(scratch, "profile-%05d-%s.pstats" % (served[0], name)))

    setattr(candidate.CandidateServer, name, run)

for name in ("install", "_load", "_call_batch"):
    profiled(name)
confinement.main(sys.argv[1:])
"""


def profiled_pass(harness: Harness, requests: list[dict], name: str, out: Path) -> None:
    judge = cProfile.Profile()
    totals = {"compile_s": 0.0, "run_s": 0.0, "tests_run": 0}
    started = time.perf_counter()
    judge.enable()
    for request in requests:
        payload = harness.run_test(request, threading.Event())
        if payload["outcome"] != "pass":
            raise RuntimeError(f"{request['op']} did not pass: {payload['outcome']}")
        for key in totals:
            totals[key] += payload[key]
    judge.disable()
    wall = time.perf_counter() - started
    judge.dump_stats(out / f"judge-{name}.pstats")
    # The candidate process writes a request's profile after replying to it: let the last land.
    time.sleep(1.0)
    candidate_side = out / f"candidate-{name}"
    candidate_side.mkdir()
    for index, path in enumerate(sorted(harness.scratch_root.glob("process-*/profile-*.pstats"))):
        path.rename(candidate_side / f"{index:05d}-{path.parent.name}-{path.name}")
    print(
        f"{name} pass: wall {wall:.2f} s, compile {totals['compile_s']:.2f} s, "
        f"run {totals['run_s']:.2f} s, {totals['tests_run']} tests"
    )


def top(paths: list[Path], title: str, count: int) -> None:
    stream = io.StringIO()
    stats = None
    for path in paths:
        try:
            if stats is None:
                stats = pstats.Stats(str(path), stream=stream)
            else:
                stats.add(str(path))
        except (EOFError, OSError, TypeError) as error:  # a profile cut short by a kill
            print(f"skipped {path.name}: {error}")
    if stats is None:
        return
    stream.seek(0)
    stream.truncate()
    stats.sort_stats("cumulative").print_stats(count)
    print(f"\n== {title}")
    print(stream.getvalue().split("\n\n", 1)[-1])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", required=True, choices=["cuda", "interpreter"])
    parser.add_argument("--out", type=Path, required=True, help="a new or empty directory")
    parser.add_argument("--top", type=int, default=30, help="functions listed per profile")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    candidates = [c for d in DEFAULT_LIBRARY for c in validate.discover(d)]
    requests = [
        request_for(candidate, validate.device_dtypes(opinfo, args.device))
        for candidate in candidates
        if (opinfo := find_opinfo(candidate.op, candidate.variant)) is not None
    ]
    sandbox.CandidateProcess.entry = ("-c", PROFILED_ENTRY)
    with tempfile.TemporaryDirectory(prefix="opforge-profile-") as work:
        store = CompileCache(Path(work) / "store", args.device)
        for names in (("cold", "warm"), ("restart",)):
            with Harness(
                args.device,
                sample_cache=SampleCache(),
                compile_cache=store,
                scratch_root=Path(work) / names[0],
            ) as harness:
                for name in names:
                    profiled_pass(harness, requests, name, args.out)
    for name in ("warm", "restart"):
        top([args.out / f"judge-{name}.pstats"], f"judge, {name} pass", args.top)
        candidate_side = sorted((args.out / f"candidate-{name}").glob("*.pstats"))
        top(candidate_side, f"candidate process, {name} pass", args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
