#!/usr/bin/env python3
"""The judge's own seconds in a library validation, apart from the candidate's kernels.

worker_bench.py times whole passes, where on the interpreter the kernels' seconds hide the judge's.
This validates the library once (worker_bench's default), recording every reply the judge checked,
then replays the judge's work on them, without a candidate process, and prints the median of
--repeats timings of each part:

- verdict: ``Judge.verdict`` on every reply (decoding it, the input-state check, the comparison,
  or none of them for a reply equal to the byte to the reference's exact reply: it says how many);
- receive: every reply's header and blob sent over a socketpair and read by ``recv_message``;
- static gate: the harness's lint of every test's source, as each ``run_test`` does it.

    python bench/judge_bench.py --device interpreter --repeats 20
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "worker"))
sys.path.insert(0, str(ROOT / "bench"))

from opforge_worker import device_kinds, validate
from opforge_worker import harness as harness_module
from opforge_worker import judge as judge_module
from opforge_worker.compile_cache import CompileCache
from opforge_worker.ipc import recv_message, send_message
from opforge_worker.opinfo import find_opinfo
from worker_bench import DEFAULT_LIBRARY, request_for


def recorded_pass(harness, requests: list[dict]) -> list[tuple]:
    """Validate ``requests``; every (judge, reply, blob, reference) the judge gave a verdict on."""
    recorded = []
    verdict = judge_module.Judge.verdict

    def recording(judge, reply, blob, reference):
        recorded.append((judge, reply, blob, reference))
        return verdict(judge, reply, blob, reference)

    judge_module.Judge.verdict = recording
    try:
        for request in requests:
            payload = harness.run_test(request, threading.Event())
            if payload["outcome"] != "pass":
                raise RuntimeError(f"{request['op']} did not pass: {payload['failure']}")
    finally:
        judge_module.Judge.verdict = verdict
    return recorded


def median_seconds(work, repeats: int) -> float:
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=device_kinds.KINDS, default="interpreter")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    candidates = [c for directory in DEFAULT_LIBRARY for c in validate.discover(directory)]
    opinfos = [(c, find_opinfo(c.op, c.variant)) for c in candidates]
    requests = [
        request_for(c, validate.device_dtypes(opinfo, args.device))
        for c, opinfo in opinfos
        if opinfo is not None  # as worker_bench, which skips them
    ]
    with (
        tempfile.TemporaryDirectory() as store,
        harness_module.Harness(
            args.device, compile_cache=CompileCache(Path(store), args.device)
        ) as harness,
    ):
        recorded = recorded_pass(harness, requests)

        def verdicts():
            for judge, reply, blob, reference in recorded:
                if judge.verdict(reply, blob, reference) is not None:
                    raise RuntimeError(f"{judge.opinfo.name}: a recorded pass now fails")

        def static_gates():
            for request in requests:
                harness_module._TestRun(harness, request, threading.Event())._static_gate()

        judge_end, candidate_end = socket.socketpair()
        sender, receiver = (
            Connection(candidate_end.detach()),
            Connection(judge_end.detach()),
        )

        def receives():
            # Sent from another thread: a large reply would fill the socket's buffer.
            def send_all():
                for _, reply, blob, _ in recorded:
                    send_message(sender, reply, blob)

            sending = threading.Thread(target=send_all)
            sending.start()
            for _ in recorded:
                recv_message(receiver)
            sending.join()

        parts = [
            ("verdict", verdicts, len(recorded), "call"),
            ("receive", receives, len(recorded), "call"),
            ("static gate", static_gates, len(requests), "test"),
        ]
        exact = sum(
            judge._reproduces_exactly(reply, blob, reference)
            for judge, reply, blob, reference in recorded
        )
        print(
            f"{len(recorded)} calls ({exact} replies exact), {len(requests)} tests, "
            f"median of {args.repeats}:"
        )
        for name, work, count, unit in parts:
            seconds = median_seconds(work, args.repeats)
            print(f"  {name:12} {seconds * 1e3:8.2f} ms {seconds / count * 1e6:8.1f} us/{unit}")
        sender.close()
        receiver.close()


if __name__ == "__main__":
    main()
