"""Time the linter on the worked examples and a typical candidate (mean and p99 over N runs).

Run from the repository root:
    /work/main/.venv/bin/python bench/lint_bench.py [--runs 1000]
The profile is loaded once (as in the worker) and timed separately.
"""

import argparse
import ast
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "worker"))

from opforge_worker.linter import lint_source, load_profile

# What a model typically answers for a row-wise op: two kernels, a wrapper with argument handling.
TYPICAL_CANDIDATE = """
@triton.jit
def softmax_rows_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    numerator = tl.exp(x)
    denominator = tl.sum(numerator, axis=0)
    y = numerator / denominator
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_looped_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * n_cols
    running_max = tl.full((BLOCK,), -float("inf"), tl.float32)
    running_sum = tl.zeros((BLOCK,), tl.float32)
    start = 0
    while start < n_cols:
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        new_max = tl.maximum(running_max, x)
        running_sum = running_sum * tl.exp(running_max - new_max) + tl.exp(x - new_max)
        running_max = new_max
        start += BLOCK
    row_max = tl.max(running_max, axis=0)
    row_sum = tl.sum(running_sum * tl.exp(running_max - row_max), axis=0)
    start = 0
    while start < n_cols:
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        y = tl.exp(x - row_max) / row_sum
        tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=cols < n_cols)
        start += BLOCK


def softmax_wrapper(input, dim, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    if input.dim() == 0:
        return torch.ones_like(input)
    dim = dim % input.dim()
    moved = input.movedim(dim, -1).contiguous()
    rows = moved.reshape(-1, moved.shape[-1])
    out = torch.empty_like(rows)
    n_rows, n_cols = rows.shape
    if n_rows == 0 or n_cols == 0:
        return out.reshape(moved.shape).movedim(-1, dim)
    if n_cols <= 4096:
        block = triton.next_power_of_2(n_cols)
        softmax_rows_kernel[(n_rows,)](
            rows, out, n_cols, rows.stride(0), out.stride(0), BLOCK=block
        )
    else:
        softmax_looped_kernel[(n_rows,)](rows, out, n_cols, BLOCK=1024)
    return out.reshape(moved.shape).movedim(-1, dim)
"""


def summarize(samples):
    samples = sorted(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return statistics.fmean(samples) / 1e6, p99 / 1e6


def measure(source, op, profile, runs):
    """Lint and bare ast.parse timings, interleaved so machine load hits both alike."""
    lint_samples, parse_samples = [], []
    for _ in range(runs):
        start = time.perf_counter_ns()
        report = lint_source(source, op=op, wrapper=f"{op}_wrapper", profile=profile)
        lint_samples.append(time.perf_counter_ns() - start)
        start = time.perf_counter_ns()
        ast.parse(source)
        parse_samples.append(time.perf_counter_ns() - start)
    assert report["ok"], report
    return summarize(lint_samples), summarize(parse_samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args()
    start = time.perf_counter_ns()
    load_profile("cuda")
    print(f"profile load (cuda, cold): {(time.perf_counter_ns() - start) / 1e6:.1f} ms")
    candidates = {
        op: (REPO / "config" / "examples" / f"{op}.py").read_text()
        for op in ("exp", "argmax", "diag")
    }
    candidates["softmax"] = TYPICAL_CANDIDATE
    print(f"load average: {' '.join(f'{load:.1f}' for load in os.getloadavg())}")
    print(
        "| candidate | lines | profile | lint mean (ms) | lint p99 (ms) | ast.parse mean (ms) | runs |"
    )
    print("|---|---|---|---|---|---|---|")
    for profile in ("cuda", "interpreter"):
        load_profile(profile)
        for op, source in candidates.items():
            (mean, p99), (parse_mean, _) = measure(source, op, profile, args.runs)
            lines = source.count("\n")
            print(
                f"| {op} | {lines} | {profile} | {mean:.3f} | {p99:.3f} | {parse_mean:.3f} | {args.runs} |"
            )


if __name__ == "__main__":
    main()
