"""Where a candidate process's start-up goes on a device: the imports, CUDA's context, Triton's
driver helpers (built into the process's Triton cache: fresh or already filled), and the first
dispatch mode (torch._dynamo's import). Each phase is timed in a fresh interpreter.

    python bench/candidate_startup_phases.py --device cuda
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

PROBE = r"""
import json, os, sys, time
t0 = time.perf_counter(); marks = {}
import torch; marks["import torch"] = time.perf_counter() - t0
import triton, triton.language; marks["import triton"] = time.perf_counter() - t0
if sys.argv[1] == "cuda":
    torch.cuda.init(); torch.zeros(1, device="cuda"); marks["cuda context"] = time.perf_counter() - t0
    triton.runtime.driver.active.get_current_device(); marks["triton driver"] = time.perf_counter() - t0
from torch.utils._python_dispatch import TorchDispatchMode
class Mode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))
with Mode():
    torch.empty(1)
marks["first dispatch mode"] = time.perf_counter() - t0
print(json.dumps(marks))
"""


def run(device: str, cache: str) -> dict:
    env = dict(os.environ, TRITON_CACHE_DIR=cache)
    out = subprocess.run(
        [sys.executable, "-c", PROBE, device], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    shared = tempfile.mkdtemp()
    rows = {
        "fresh cache": run(args.device, tempfile.mkdtemp()),
        "filled cache (1st)": run(args.device, shared),
        "filled cache (2nd)": run(args.device, shared),
    }
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
