"""One run of BackendBench's OpInfo suite over one kernel directory, for bench/backendbench_compare.py.

    python bench/backendbench_run.py --ops-directory DIR --device cuda|cpu --json OUT [--ops a,b]

What `python -m BackendBench.scripts.main --suite opinfo --backend directory --ops-directory DIR
--ops ...` does without worker processes: build `OpInfoTestSuite` (every OpInfo's samples for
the suite's device and bfloat16, traced to their ATen overload), load the directory's kernels
(`DirectoryBackend`) and run `eval.eval_one_op` for each of the suite's tests whose overload the
directory implements. main.py fixes the device to cuda; this takes it as an argument so that the
same run works on the Triton interpreter (cpu). It writes the test counts that main.py only
summarises as a score, and leaves out main.py's result files.

BackendBench must be importable (PYTHONPATH). The modules its import chain names but the OpInfo
suite never calls (the LLM clients, the TorchBench data loaders: anthropic, requests, tenacity,
datasets, pyarrow, tqdm) are replaced by empty stand-ins where they are not installed (GPU hosts
have none of them and no registry): that only takes their import time off BackendBench's clock.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import sys
import time
import types

#: Imported on BackendBench's import path (BackendBench/__init__ -> backends -> llm; suite ->
#: torchbench -> data_loaders), never called by the OpInfo suite.
_UNUSED = (
    "anthropic",
    "requests",
    "tenacity",
    "tenacity.wait",
    "datasets",
    "pyarrow",
    "pyarrow.parquet",
    "tqdm",
)


class _StandIn(types.ModuleType):
    """A module whose every attribute is a callable stand-in: a decorator given a function
    returns it, anything else returns another stand-in."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _StandInCallable()


class _StandInCallable:
    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return _StandInCallable()

    def __getattr__(self, name: str):
        return _StandInCallable()


def _stand_ins() -> list[str]:
    missing = []
    for name in _UNUSED:
        parent = name.split(".")[0]
        if parent in missing or importlib.util.find_spec(parent) is None:
            stand_in = sys.modules[name] = _StandIn(name)
            # torch._dynamo asks importlib for the spec of modules it has rules for (tqdm).
            stand_in.__spec__ = importlib.machinery.ModuleSpec(name, None)
            if "." in name:
                setattr(sys.modules[parent], name.split(".", 1)[1], sys.modules[name])
            missing.append(name)
    return missing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops-directory", required=True)
    parser.add_argument("--device", required=True, choices=["cuda", "cpu"])
    parser.add_argument("--ops", help="comma-separated overloads, as main.py's --ops")
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    started = time.monotonic()
    stood_in = _stand_ins()

    import torch
    from BackendBench import eval as bb_eval
    from BackendBench.backends import DirectoryBackend
    from BackendBench.suite import OpInfoTestSuite

    imported = time.monotonic()
    ops = args.ops.split(",") if args.ops else None
    suite = OpInfoTestSuite(f"opinfo_{args.device}_bfloat16", args.device, torch.bfloat16, ops)
    backend = DirectoryBackend(args.ops_directory)
    built = time.monotonic()
    per_op: dict[str, dict[str, int]] = {}
    for test in suite:
        if test.op not in backend:
            continue
        _, _, correctness, _ = bb_eval.eval_one_op(
            test.op, backend[test.op], test.correctness_tests, test.performance_tests
        )
        counts = per_op.setdefault(str(test.op), {"tests": 0, "passed": 0})
        counts["tests"] += len(correctness)
        counts["passed"] += sum(result.is_correct for result in correctness)
    done = time.monotonic()
    with open(args.json, "w") as out:
        json.dump(
            {
                "tests": sum(c["tests"] for c in per_op.values()),
                "passed": sum(c["passed"] for c in per_op.values()),
                "per_overload": per_op,
                "kernels_loaded": len(backend.compiled_kernels),
                "phases_s": {
                    "imports": round(imported - started, 3),
                    "suite_and_kernels": round(built - imported, 3),
                    "tests": round(done - built, 3),
                },
                "stand_ins": stood_in,
            },
            out,
            indent=1,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
