#!/usr/bin/env python3
"""What each part of a candidate call costs, in one process, the parts added one after another.

worker_bench.py times whole validations and harness_profile.py says where a profiled pass goes;
this times the candidate process's side of one call without a profiler's distortion. Three
candidates of the worker_bench library (exp, diag, amax) are loaded as the candidate process
loads them and called on their float32 samples, each configuration for ``--rounds`` rounds
(median per call):

1. the bare wrapper and a synchronisation, inputs already on the device;
2. inside the dispatch recorder;
3. with the launch counter's hooks installed, then the escape hatches and the thread watch;
4. through ``CandidateServer._guarded`` (CPU limit, integrity, findings);
5. with the audit hook installed (it cannot be removed, so it comes last);
6. the whole ``CandidateServer._call``: decoding the inputs (the sample's bytes already on the
   device, as a batch puts them there), the call, the outputs and inputs gathered for the reply
   (``transport.ReplyStaging``), brought to the host with a wait after each call, then with a
   wait per group of 8 calls;

then, for the data path, decoding alone, decoding with the copies to the device (from host
memory, and from the sample's bytes already on the device, as a batch decodes), and
the outputs described, gathered and brought to the host alone.

    python bench/check_costs.py --device cuda

Not confined: it runs in this process, with the hooks of a candidate process installed into it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "worker"))

CANDIDATES = [
    ROOT / "config" / "examples" / "exp.py",
    ROOT / "config" / "examples" / "diag.py",
    ROOT / "worker" / "tests" / "corpus" / "honest" / "amax.py",
]


class Case:
    """One candidate, loaded, with its float32 samples on the device and its batch header."""

    def __init__(self, path: Path, jobs: Path, device):
        import torch
        from opforge_worker import validate
        from opforge_worker.candidate import load_candidate
        from opforge_worker.judge import Judge
        from opforge_worker.opinfo import find_opinfo
        from opforge_worker.samples import CACHE
        from opforge_worker.settings import load_settings
        from opforge_worker.transport import to_device

        (candidate,) = validate.read_candidates(path)
        loaded = jobs / path.name
        loaded.write_text(candidate.source)
        self.name = candidate.wrapper
        self.wrapper = load_candidate(loaded)[candidate.wrapper]
        opinfo = find_opinfo(candidate.op, candidate.variant)
        self.samples = CACHE.samples(opinfo, torch.float32, 0)
        self.header = Judge(opinfo, load_settings()).batch_request(
            [sample.reference for sample in self.samples],
            [len(sample.inputs) for sample in self.samples],
            candidate.wrapper,
            60.0,
        )
        self.header["alias_allowed"] = self.header["alias_allowed"][0]
        self.on_device = [decoded_on(sample.inputs, device) for sample in self.samples]
        # Each sample's bytes on the device, as a batch puts them there before its calls.
        self.staged = [to_device(sample.inputs, device) for sample in self.samples]
        self.results: dict[int, object] = {}

    def policy(self):
        from opforge_worker.checks import CallPolicy

        header = self.header
        return CallPolicy(
            frozenset(header["op_names"]),
            header["launch_exempt"],
            header["host_read_allowed"],
        )


def decoded_on(blob: bytes, device):
    from opforge_worker.transport import decode_inputs

    inputs = decode_inputs(blob, device)
    return inputs["args"], inputs["kwargs"]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", required=True, choices=["cuda", "interpreter"])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    if args.device == "interpreter":
        os.environ["TRITON_INTERPRET"] = "1"  # read when @triton.jit decorates

    import torch
    from opforge_worker.candidate import CandidateServer, StoreBackedCacheManager
    from opforge_worker.checks import (
        DispatchRecorder,
        Findings,
        Integrity,
        tensor_leaves,
    )
    from opforge_worker.device_kinds import lookup
    from opforge_worker.transport import decode_inputs

    kind = lookup(args.device)
    device = torch.device(kind.torch_device)
    scratch = Path(tempfile.mkdtemp(prefix="opforge-check-costs-"))
    jobs = scratch / "jobs" / "1"
    jobs.mkdir(parents=True)
    cases = [Case(path, jobs, device) for path in CANDIDATES]
    server = CandidateServer(None, kind, scratch, {"compile_grace_s": 120})

    def sync():
        if kind.synchronize is not None:
            kind.synchronize()

    def timed(label: str, one_call) -> None:
        for case in cases:  # warm: compiles, first launches
            for index in range(len(case.samples)):
                one_call(case, index)
        per_call = []
        for _ in range(args.rounds):
            started, calls = time.perf_counter(), 0
            for case in cases:
                for index in range(len(case.samples)):
                    one_call(case, index)
                    calls += 1
            per_call.append((time.perf_counter() - started) / calls)
        median_us = statistics.median(per_call) * 1e6
        print(f"| {label} | {median_us:.1f} us | {calls} |", flush=True)

    def bare(case, index):
        call_args, call_kwargs = case.on_device[index]
        case.wrapper(*call_args, **call_kwargs)
        sync()

    def recorded(case, index):
        call_args, call_kwargs = case.on_device[index]
        findings = Findings()
        server.launches.begin(findings)
        with DispatchRecorder(case.policy(), findings, server.launches, server.owners):
            case.wrapper(*call_args, **call_kwargs)
        sync()
        server.launches.end()

    def guarded(case, index):
        call_args, call_kwargs = case.on_device[index]
        reply = server._guarded(
            lambda: case.wrapper(*call_args, **call_kwargs), 60.0, case.policy()
        )
        assert reply["status"] == "ok" and not reply["findings"], reply

    def whole_call(case, index, group_calls=1):
        server.namespace = {case.name: case.wrapper}
        reply = server._call(case.header, case.samples[index].inputs, case.staged[index])
        assert reply["status"] == "ok" and not reply["findings"], reply
        if (index + 1) % group_calls == 0 or index + 1 == len(case.samples):
            server.staging.collect()

    def decoding(case, index):
        decode_inputs(case.samples[index].inputs)

    def decoding_to_device(case, index):
        decoded_on(case.samples[index].inputs, device)
        sync()

    def decoding_staged(case, index):
        decode_inputs(case.samples[index].inputs, staged=case.staged[index])
        sync()

    def results(case, index):
        call_args, call_kwargs = case.on_device[index]
        if index not in case.results:
            case.results[index] = case.wrapper(*call_args, **call_kwargs)
        reply = {"status": "ok", "findings": [], "launches": 1}
        inputs = tensor_leaves((call_args, call_kwargs))
        leaves = server._describe(reply, case.results[index], inputs, case.policy(), case.header)
        server.staging.add([*leaves, *inputs])
        server.staging.collect()

    print(f"Device: {args.device}, torch {torch.__version__}")
    print("\n| configuration (each adds to the one above) | per call, median | calls/round |")
    print("|---|---|---|")
    timed("bare wrapper + synchronisation, inputs on the device", bare)
    timed("inside the dispatch recorder", recorded)
    if device.type == "cuda":
        torch.zeros(1, device="cuda")
    import triton

    triton.knobs.cache.manager_class = StoreBackedCacheManager
    server.launches.install()
    timed("launch counter's hooks installed", recorded)
    server.escapes.install()
    server.threads.install()
    timed("escape hatches and thread watch installed", recorded)
    server.integrity = Integrity(server.launches, server.escapes, server.threads)
    timed("through CandidateServer._guarded", guarded)
    server.audit.install()
    timed("audit hook installed", guarded)
    timed("the whole CandidateServer._call, a wait after each", whole_call)
    timed(
        "the whole CandidateServer._call, a wait per 8 calls",
        lambda case, index: whole_call(case, index, group_calls=8),
    )
    print("\n| data path alone | per call, median | calls/round |")
    print("|---|---|---|")
    timed("decode_inputs", decoding)
    timed("decode_inputs, copies to the device, synchronisation", decoding_to_device)
    timed(
        "decode_inputs from the batch's bytes on the device, synchronisation",
        decoding_staged,
    )
    timed("outputs described (_describe), gathered and brought to the host", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
