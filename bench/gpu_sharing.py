#!/usr/bin/env python3
"""How processes sharing one GPU slow each other's small synchronous calls.

A worker's slots are candidate processes on one GPU, each with a CUDA context of its own, and
a warm validation is a stream of small calls, each waiting on the device more than once. This
runs the same loop in 1, 2, 4, ... processes at once and reports, per loop shape, each
process's median time per iteration and the iterations per second of them all together:

- ``cpu``: Python busy for about as long as a call's host work (no device: the control);
- ``aten``: one ATen op on a device tensor and a synchronisation;
- ``triton``: one Triton launch and a synchronisation;
- ``call_pageable``: a harness call as the candidate process made it until 8706afc: the input
  copied to the device from pageable memory, a Triton launch, a synchronisation, output and
  input copied back to pageable memory one by one (four waits on the device);
- ``call_staged``: the same call as the candidate process made it from 8706afc on, with the
  input copied from a device-side batch buffer, and output and input copied into one pinned
  staging buffer behind one synchronisation (two waits on the device);
- ``call_staged_gap``: ``call_staged`` with 50 us of host work between its two waits, as a
  harness that checks the outputs between them;
- ``call_busy``: ``call_staged`` and 150 us of host work, as a call with a harness's host work.

The shapes below do the same 150 us of host work per iteration and wait on the device only
every few iterations, to tell what in a call costs a switch when several contexts share the GPU:

- ``launch_gap``: a Triton launch (one wait every 64 iterations, to bound the queue);
- ``launch_wait8``: the same, one wait every 8 iterations;
- ``d2d_gap``: the input copied on the device by a copy (``copy_``) and a Triton launch;
- ``d2h_gap``: a Triton launch and its output copied into pinned host memory;
- ``call_deferred``: ``call_busy`` with one wait every 8 calls, each call's copies into a slot
  of its own of the pinned staging buffer;
- ``call_device_staged``: the same call with every copy on the device made by a Triton kernel:
  the input from the batch buffer, the output and the input into a device staging buffer, and
  one copy of that buffer into pinned memory before the wait every 8 calls.

    python bench/gpu_sharing.py --processes 1,2,4,8 --seconds 1.5

Prints a markdown table; ``--json`` writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time

SHAPES = [
    "cpu",
    "aten",
    "triton",
    "call_pageable",
    "call_staged",
    "call_staged_gap",
    "call_busy",
    "launch_gap",
    "launch_wait8",
    "d2d_gap",
    "d2h_gap",
    "call_deferred",
    "call_device_staged",
]
#: Iterations per wait of the deferred shapes: ``call_*`` and ``launch_wait8``, the others.
GROUP = 8
LONG_GROUP = 64
HOST_WORK_S = 150e-6
ELEMENTS = 4096


def _loops(shapes: list[str], seconds: float, start_at: float) -> dict[str, list[float]]:
    """Each shape's iteration times, every process starting each shape at the same moment."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add_one(src, dst, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(dst + offsets, tl.load(src + offsets, mask=mask) + 1, mask=mask)

    @triton.jit
    def copy(src, dst, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(dst + offsets, tl.load(src + offsets, mask=mask), mask=mask)

    device = torch.device("cuda")
    host_input = torch.randn(ELEMENTS)
    batch_buffer = host_input.to(device)
    staging = torch.empty(2 * ELEMENTS * GROUP, pin_memory=True)
    device_staging = torch.empty(2 * ELEMENTS * GROUP, device=device)
    counter = [0]
    grid = (triton.cdiv(ELEMENTS, 1024),)

    def busy(seconds=100e-6):
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            pass

    def aten():
        batch_buffer.add(1)
        torch.cuda.synchronize()

    def triton_launch():
        out = torch.empty_like(batch_buffer)
        add_one[grid](batch_buffer, out, ELEMENTS, BLOCK=1024)
        torch.cuda.synchronize()

    def call_pageable():
        source = host_input.to(device)
        out = torch.empty_like(source)
        add_one[grid](source, out, ELEMENTS, BLOCK=1024)
        torch.cuda.synchronize()
        return out.cpu(), source.cpu()

    def call_staged(gap_s=0.0):
        source = torch.empty_like(batch_buffer)
        source.copy_(batch_buffer, non_blocking=True)
        out = torch.empty_like(source)
        add_one[grid](source, out, ELEMENTS, BLOCK=1024)
        torch.cuda.synchronize()
        busy(gap_s)
        staging[:ELEMENTS].copy_(out, non_blocking=True)
        staging[ELEMENTS : 2 * ELEMENTS].copy_(source, non_blocking=True)
        torch.cuda.current_stream().synchronize()
        return memoryview(staging.numpy())

    def every(iterations: int, wait) -> None:
        """Host work, then ``wait`` on the device every ``iterations`` iterations."""
        busy(HOST_WORK_S)
        counter[0] += 1
        if counter[0] % iterations == 0:
            wait()

    def launch(wait_every: int):
        out = torch.empty_like(batch_buffer)
        add_one[grid](batch_buffer, out, ELEMENTS, BLOCK=1024)
        every(wait_every, torch.cuda.synchronize)

    def d2d_gap():
        source = torch.empty_like(batch_buffer)
        source.copy_(batch_buffer, non_blocking=True)
        add_one[grid](source, torch.empty_like(source), ELEMENTS, BLOCK=1024)
        every(LONG_GROUP, torch.cuda.synchronize)

    def d2h_gap():
        out = torch.empty_like(batch_buffer)
        add_one[grid](batch_buffer, out, ELEMENTS, BLOCK=1024)
        staging[:ELEMENTS].copy_(out, non_blocking=True)
        every(LONG_GROUP, torch.cuda.synchronize)

    def call_deferred():
        base = 2 * ELEMENTS * (counter[0] % GROUP)
        source = torch.empty_like(batch_buffer)
        source.copy_(batch_buffer, non_blocking=True)
        out = torch.empty_like(source)
        add_one[grid](source, out, ELEMENTS, BLOCK=1024)
        staging[base : base + ELEMENTS].copy_(out, non_blocking=True)
        staging[base + ELEMENTS : base + 2 * ELEMENTS].copy_(source, non_blocking=True)
        every(GROUP, torch.cuda.current_stream().synchronize)

    def copy_back_and_wait():
        staging.copy_(device_staging, non_blocking=True)
        torch.cuda.current_stream().synchronize()

    def call_device_staged():
        base = 2 * ELEMENTS * (counter[0] % GROUP)
        source = torch.empty_like(batch_buffer)
        copy[grid](batch_buffer, source, ELEMENTS, BLOCK=1024)
        out = torch.empty_like(source)
        add_one[grid](source, out, ELEMENTS, BLOCK=1024)
        copy[grid](out, device_staging[base:], ELEMENTS, BLOCK=1024)
        copy[grid](source, device_staging[base + ELEMENTS :], ELEMENTS, BLOCK=1024)
        every(GROUP, copy_back_and_wait)

    bodies = {
        "cpu": busy,
        "aten": aten,
        "triton": triton_launch,
        "call_pageable": call_pageable,
        "call_staged": call_staged,
        "call_staged_gap": lambda: call_staged(50e-6),
        "call_busy": lambda: (call_staged(), busy(HOST_WORK_S)),
        "launch_gap": lambda: launch(LONG_GROUP),
        "launch_wait8": lambda: launch(GROUP),
        "d2d_gap": d2d_gap,
        "d2h_gap": d2h_gap,
        "call_deferred": call_deferred,
        "call_device_staged": call_device_staged,
    }
    for body in bodies.values():
        for _ in range(50):  # compile, warm the allocators
            body()
    runs = {}
    for index, shape in enumerate(shapes):
        while time.time() < start_at + index * (seconds + 0.5):
            time.sleep(0.001)
        times = runs[shape] = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            bodies[shape]()
            times.append(time.perf_counter() - began)
    return runs


def measure(processes: int, shapes: list[str], seconds: float) -> list[dict]:
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        start_at = time.time() + 20.0  # after every process has imported torch and compiled
        runs = pool.starmap(_loops, [(shapes, seconds, start_at)] * processes)
    rows = []
    for shape in shapes:
        medians = [statistics.median(run[shape]) for run in runs]
        rows.append(
            {
                "processes": processes,
                "shape": shape,
                "median_us": round(1e6 * statistics.median(medians), 1),
                "slowest_median_us": round(1e6 * max(medians), 1),
                "iterations_per_s": round(sum(len(run[shape]) for run in runs) / seconds),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="1,2,4,8")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--json")
    options = parser.parse_args()
    shapes = options.shapes.split(",")
    rows = [
        row
        for processes in options.processes.split(",")
        for row in measure(int(processes), shapes, options.seconds)
    ]
    rows.sort(key=lambda row: shapes.index(row["shape"]))
    print(
        "| shape | processes | median per iteration | slowest process's median | iterations/s, all |"
    )
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['shape']} | {row['processes']} | {row['median_us']} us"
            f" | {row['slowest_median_us']} us | {row['iterations_per_s']} |"
        )
    if options.json:
        with open(options.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
