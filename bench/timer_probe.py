"""How the L2 flush and the timer shape a benchmark's times, on cuda (issue 28, the timer
against ncu and its noise):

    python bench/timer_probe.py OUT_DIR [flush] [noise]

- ``flush``: a Triton exp and ATen's, at 4K, 1M and 16M float32 elements, CUDA events around each
  call after four kinds of flush (a 256 MiB fill, a 256 MiB read, both, none), 60 calls each:
  medians and IQRs in OUT_DIR/flush.json. ncu's gpu__time_duration of the same kernels is
  bench/timing_check.py's calibration.
- ``noise``: the worker's benchmark job of one kernel against itself and against ATen, every
  shape's medians and spreads in OUT_DIR/noise.json.
"""

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "worker"))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
what = sys.argv[2:] or ["flush", "noise"]


def log(name, obj):
    (out / f"{name}.json").write_text(json.dumps(obj, indent=1, default=str))
    print(name, json.dumps(obj, default=str)[:4000], flush=True)


@triton.jit
def _exp_kernel(x, y, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(y + i, tl.exp(tl.load(x + i, mask=m)), mask=m)


def texp(x):
    y = torch.empty_like(x)
    n = x.numel()
    _exp_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
    return y


def events(fn, x, flush, reps=60, head_us=200):
    times = []
    for _ in range(reps):
        flush()
        torch.cuda._sleep(int(head_us * 1980))
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn(x)
        b.record()
        times.append((a, b))
    torch.cuda.synchronize()
    t = [a.elapsed_time(b) * 1e3 for a, b in times]
    q = statistics.quantiles(t, n=4)
    return {"median": statistics.median(t), "iqr": q[2] - q[0]}


if "flush" in what:
    buf = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")
    sink = torch.empty((), dtype=torch.int64, device="cuda")
    count = [0]

    def fill():
        count[0] += 1
        buf.fill_(count[0])

    def read():
        torch.sum(buf, dim=0, dtype=torch.int64, out=sink)

    def fill_read():
        fill()
        read()

    def none():
        pass

    res = {}
    for n in (4096, 1 << 20, 1 << 24):
        x = torch.rand(n, device="cuda") + 0.5
        texp(x)
        torch.exp(x)
        for fname, f in (("fill", fill), ("read", read), ("fill_read", fill_read), ("none", none)):
            for side, fn in (("aten", torch.exp), ("triton", texp)):
                res[f"{n}/{fname}/{side}"] = events(fn, x, f)
    log("flush", res)

if "noise" in what:
    from opforge_worker.benchmark import run_benchmark
    from opforge_worker.harness import Harness
    from timing_check import HONEST_EXP, benchmark_request

    with Harness("cuda") as harness:
        twice = run_benchmark(
            harness, benchmark_request(HONEST_EXP, ["float32"], baseline=HONEST_EXP)
        )
        aten = run_benchmark(harness, benchmark_request(HONEST_EXP, ["float32"]))
    keys = (
        "source",
        "elements",
        "launch_bound",
        "repetitions",
        "candidate_us",
        "candidate_iqr_us",
        "baseline_us",
        "baseline_iqr_us",
        "speedup",
    )
    log(
        "noise",
        {
            "self": [{k: t[k] for k in keys} for t in twice.get("timings", [])],
            "self_outcome": twice.get("outcome"),
            "self_failure": twice.get("failure"),
            "aten": [{k: t[k] for k in keys} for t in aten.get("timings", [])],
        },
    )
