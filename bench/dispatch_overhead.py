#!/usr/bin/env python3
"""What an exported package adds to a call: torch.abs, torch.sigmoid and torch.neg with the package
enabled and without it, side by side in one run, on one device kind (issue 28, dispatch overhead).

    python bench/dispatch_overhead.py --device cuda|interpreter [--package DIR] [--json OUT]
        [--kernels real|stand-in] [--sizes 1,1048576] [--calls 100] [--repetitions 60]
        [--profile OUT.txt]

Rows, each the median and interquartile range of ``--repetitions`` samples, a sample being one
batch of ``--calls`` calls (its device work synchronised at the end) divided by the calls:
- ``eager``: the package disabled, ATen's kernel;
- ``package``: the package enabled, the call served by its kernel (asserted from its counts);
- ``triton_launch``: the package enabled with ``set_direct_launch(False)``: its kernels go through
  Triton's own ``JITFunction.run``/``Autotuner.run`` (``triton_launch - package`` is what the
  direct launch saves);
- ``python_routing``: the package enabled with ``set_native_routing(False)``: every call enters
  its Python ``Overload`` (``python_routing - package`` is what the routing in the dispatcher,
  ``_dispatch.cpp``, saves);
- ``overload``: routed in the dispatcher with ``set_direct_call(False)``: a served call enters
  the Python ``Overload`` instead of the dispatcher calling the wrapper (``overload - package``
  is what the direct call saves);
- ``wrapper``: the kernel's wrapper called directly (the direct launch without the dispatcher
  and the runtime): ``package - wrapper`` is what the runtime adds, ``wrapper - eager`` the
  kernel's own launch and run against ATen's;
- ``falls through``: a float64 call, a dtype the package does not serve, with and without it,
  and ``floor``: the same call through the least a Python kernel can do (registered like the
  package's, it hands every call to the original kernel): what no Python runtime gets below.
The variants are interleaved batch by batch, so drift hits each alike. ``--clock cpu`` times the
thread's CPU time instead of the wall clock: on a CPU shared with other work (the interpreter
kind on a busy host), it leaves out the time the thread waited for a core.

``--kernels real`` (the default on cuda) exports the corpus's kernels (abs, sigmoid with
autotune, neg) into a package; ``stand-in`` (the default on the interpreter, where a kernel is
interpreted in Python and its time says nothing of a launch) exports wrappers that only allocate
their result, so ``package - wrapper`` is the runtime's own cost, measurable on the CPU too.
``--package`` benches an exported package instead (the library step's), which must serve the
three operators in float32.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import msgpack

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "worker"))

from opforge_worker import contract, device_kinds, validate  # noqa: E402

CORPUS = ROOT / "worker" / "tests" / "corpus"
#: The operators benched: the public function, its overload, and the corpus kernel that serves it.
OPERATORS = {
    "abs": ("aten.abs.default", CORPUS / "export" / "abs.py"),
    "sigmoid": ("aten.sigmoid.default", CORPUS / "honest" / "sigmoid_autotune.py"),
    "neg": ("aten.neg.default", CORPUS / "honest" / "neg.py"),
}
#: A dtype none of the benched kernels is exported for: its calls fall through.
UNSERVED_DTYPE = "float64"
SERVED_DTYPE = "float32"
PACKAGE = "opforge_dispatch_bench"
STAND_IN = "def {op}(input):\n    return torch.empty_like(input)\n"


def bundle(device: str, kernels: str) -> contract.LibraryBundle:
    """The three operators' kernels as a library bundle (this bench's, not a proved library: the
    proofs are placeholders, the export's mapping checks still run)."""
    found = []
    for op, (overload, path) in OPERATORS.items():
        (candidate,) = validate.read_candidates(path)
        source = candidate.source if kernels == "real" else STAND_IN.format(op=op)
        found.append(
            contract.LibraryKernel(
                op=op,
                wrapper=candidate.wrapper,
                source=source,
                hash=f"{abs(hash(source)):016x}"[:16],
                dtypes=[SERVED_DTYPE],
                aten_overloads=[overload],
                provenance={"origin": f"bench/dispatch_overhead.py ({kernels})"},
                proofs=[],
            )
        )
    return contract.LibraryBundle(
        device_kind=device, fingerprint="", daemon_version="", kernels=found
    )


def export_package(device: str, kernels: str, into: Path) -> Path:
    from opforge_library import export

    path = into / "bundle.msgpack"
    path.write_bytes(msgpack.packb(bundle(device, kernels).to_dict()))
    arguments = ["--bundle", str(path), "--format", "torch-library", "--out", str(into)]
    if export.main([*arguments, "--name", PACKAGE, "--device-kind", device]) != 0:
        raise SystemExit("dispatch_overhead: the export failed")
    return into / PACKAGE


def load(package_dir: Path):
    sys.path.insert(0, str(package_dir.resolve().parent))
    return importlib.import_module(package_dir.resolve().name)


def quartiles(values: list[float]) -> tuple[float, float]:
    """(median, interquartile range)."""
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return median, q3 - q1


#: What a variant runs under: ATen alone, the package enabled, or the floor kernel registered.
EAGER, PACKAGE, TRITON_LAUNCH, FLOOR = "eager", "package", "triton_launch", "floor"
PYTHON_ROUTING = "python_routing"
OVERLOAD = "overload"


class Case:
    """One call timed in several variants: (name, state, function) each."""

    def __init__(self, label: str, overload: str, variants: list[tuple[str, str, object]]):
        self.label = label
        self.overload = overload
        self.variants = variants
        self.samples: dict[str, list[float]] = {name: [] for name, _, _ in variants}


class States:
    """Switches between EAGER, PACKAGE, TRITON_LAUNCH (the package with Triton's own launch
    path instead of its direct launch) and FLOOR; FLOOR registers, for ``overload``, a Python
    kernel that only calls the original one, as the package registers its own."""

    def __init__(self, package, dispatch_key: str):
        self.package = package
        self.key = dispatch_key
        self.floor = None

    def enter(self, state: str, overload: str) -> None:
        import torch

        self.package.disable()
        if hasattr(self.package, "set_direct_launch"):  # packages of earlier opforge lack it
            self.package.set_direct_launch(state != TRITON_LAUNCH)
        if hasattr(self.package, "set_native_routing"):
            self.package.set_native_routing(state != PYTHON_ROUTING)
        if hasattr(self.package, "set_direct_call"):
            self.package.set_direct_call(state != OVERLOAD)
        if self.floor is not None:
            self.floor._destroy()
            self.floor = None
        if state in (PACKAGE, TRITON_LAUNCH, PYTHON_ROUTING, OVERLOAD):
            self.package.enable()
        elif state == FLOOR:
            namespace, op, name = overload.split(".")
            target = getattr(getattr(getattr(torch.ops, namespace), op), name)
            original = torch.library.get_kernel(target, self.key)

            def floor(keyset, *args, **kwargs):
                return original.call_boxed(keyset, *args, **kwargs)

            self.floor = torch.library.Library(namespace, "IMPL")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # overriding ATen's kernel is the point
                self.floor.impl(target, floor, self.key, with_keyset=True)


def run(cases: list[Case], states: States, kind, calls: int, repetitions: int, clock) -> None:
    sync = kind.synchronize or (lambda: None)
    for repetition in range(repetitions + 1):  # the first round warms up (compiles, autotunes)
        for case in cases:
            for name, state, function in case.variants:
                states.enter(state, case.overload)
                sync()
                start = clock()
                for _ in range(calls):
                    function()
                sync()
                elapsed = clock() - start
                if repetition:
                    case.samples[name].append(elapsed / calls * 1e6)
    states.enter(EAGER, "")


def cases_for(package, kind, sizes: list[int]) -> list[Case]:
    import torch

    kernels = package.manifest["kernels"]
    covered = package.manifest["covered"]
    found = []
    for op, (overload, _) in OPERATORS.items():
        if overload not in covered:
            raise SystemExit(f"dispatch_overhead: the package does not serve {overload}")
        module = importlib.import_module(
            f"{package.__name__}.kernels.{covered[overload]['kernel']}"
        )
        wrapper = getattr(module, kernels[covered[overload]["kernel"]]["wrapper"])
        function = getattr(torch, op)
        for size in sizes:
            x = torch.randn(size, device=kind.torch_device, dtype=getattr(torch, SERVED_DTYPE))
            found.append(
                Case(
                    f"{op} {SERVED_DTYPE} n={size}",
                    overload,
                    [
                        ("eager", EAGER, lambda f=function, x=x: f(x)),
                        ("package", PACKAGE, lambda f=function, x=x: f(x)),
                        ("triton_launch", TRITON_LAUNCH, lambda f=function, x=x: f(x)),
                        (PYTHON_ROUTING, PYTHON_ROUTING, lambda f=function, x=x: f(x)),
                        (OVERLOAD, OVERLOAD, lambda f=function, x=x: f(x)),
                        ("wrapper", EAGER, lambda w=wrapper, x=x: w(x)),
                    ],
                )
            )
        wide = torch.randn(1, device=kind.torch_device, dtype=getattr(torch, UNSERVED_DTYPE))
        found.append(
            Case(
                f"{op} {UNSERVED_DTYPE} n=1 (falls through)",
                overload,
                [
                    ("eager", EAGER, lambda f=function, x=wide: f(x)),
                    ("package", PACKAGE, lambda f=function, x=wide: f(x)),
                    ("floor", FLOOR, lambda f=function, x=wide: f(x)),
                    (PYTHON_ROUTING, PYTHON_ROUTING, lambda f=function, x=wide: f(x)),
                ],
            )
        )
    return found


def check_served(package, kind) -> None:
    """Each benched call is what its row says: float32 served, float64 not."""
    import torch

    package.enable()
    package.reset_counts()
    for op, (overload, _) in OPERATORS.items():
        for dtype in (SERVED_DTYPE, UNSERVED_DTYPE):
            getattr(torch, op)(
                torch.randn(4, device=kind.torch_device, dtype=getattr(torch, dtype))
            )
        if package.call_counts()[overload] != 1:
            raise SystemExit(f"dispatch_overhead: {overload} served {package.call_counts()}")
    package.disable()


def profile(cases: list[Case], states: States, calls: int, lines: int = 30) -> str:
    """Where the time of each case's ``package`` variant goes: cProfile over ``calls`` calls,
    the functions that took the most time of their own. Profiling slows Python calls, so the
    shares say where to look, not what a call costs."""
    report = io.StringIO()
    for case in cases:
        for name, state, function in case.variants:
            if name != PACKAGE:
                continue
            states.enter(state, case.overload)
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(calls):
                function()
            profiler.disable()
            report.write(f"== {case.label}, {calls} calls with the package\n")
            pstats.Stats(profiler, stream=report).sort_stats("tottime").print_stats(lines)
    states.enter(EAGER, "")
    return report.getvalue()


def rows(cases: list[Case]) -> list[dict]:
    found = []
    for case in cases:
        row = {"case": case.label}
        for name, values in case.samples.items():
            row[f"{name}_us"], row[f"{name}_iqr_us"] = quartiles(values)
        row["added_us"] = row["package_us"] - row["eager_us"]
        row["ratio"] = row["package_us"] / row["eager_us"]
        if "wrapper_us" in row:
            row["runtime_us"] = row["package_us"] - row["wrapper_us"]
        if "triton_launch_us" in row:
            row["direct_launch_saves_us"] = row["triton_launch_us"] - row["package_us"]
        if "floor_us" in row:
            row["above_floor_us"] = row["package_us"] - row["floor_us"]
        if "python_routing_us" in row:
            row["native_routing_saves_us"] = row["python_routing_us"] - row["package_us"]
        if "overload_us" in row:
            row["direct_call_saves_us"] = row["overload_us"] - row["package_us"]
        found.append(row)
    return found


def markdown(found: list[dict]) -> str:
    lines = [
        "| call | eager us (IQR) | package us (IQR) | added us | ratio | wrapper us (IQR) "
        "| runtime us (package - wrapper) | floor us (IQR) "
        "| package with Triton's launch us (IQR) | package routed from Python us (IQR) "
        "| package served through the Overload us (IQR) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in found:
        wrapper = (
            f"{row['wrapper_us']:.2f} ({row['wrapper_iqr_us']:.2f}) | {row['runtime_us']:.2f}"
            if "wrapper_us" in row
            else "- | -"
        )
        wrapper += (
            f" | {row['floor_us']:.2f} ({row['floor_iqr_us']:.2f})" if "floor_us" in row else " | -"
        )
        wrapper += (
            f" | {row['triton_launch_us']:.2f} ({row['triton_launch_iqr_us']:.2f})"
            if "triton_launch_us" in row
            else " | -"
        )
        wrapper += (
            f" | {row['python_routing_us']:.2f} ({row['python_routing_iqr_us']:.2f})"
            if "python_routing_us" in row
            else " | -"
        )
        wrapper += (
            f" | {row['overload_us']:.2f} ({row['overload_iqr_us']:.2f})"
            if "overload_us" in row
            else " | -"
        )
        lines.append(
            f"| {row['case']} | {row['eager_us']:.2f} ({row['eager_iqr_us']:.2f}) "
            f"| {row['package_us']:.2f} ({row['package_iqr_us']:.2f}) | {row['added_us']:.2f} "
            f"| {row['ratio']:.2f}x | {wrapper} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", required=True, choices=device_kinds.KINDS)
    parser.add_argument("--package", type=Path, help="an exported package's directory")
    parser.add_argument("--kernels", choices=["real", "stand-in"])
    parser.add_argument(
        "--sizes", help="elements, comma-separated (default: 1,1048576; 1 on the interpreter)"
    )
    parser.add_argument("--calls", type=int, default=100, help="calls per timed batch")
    parser.add_argument("--repetitions", type=int, default=60, help="timed batches per variant")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--profile", type=Path, help="also write a cProfile of each served variant to this file"
    )
    args = parser.parse_args(argv)
    kind = device_kinds.lookup(args.device)
    for name, value in kind.triton_environment.items():
        os.environ.setdefault(name, value)  # before triton is imported
    kernels = args.kernels or ("real" if kind.compiles_on_first_launch else "stand-in")
    default_sizes = "1,1048576" if kind.compiles_on_first_launch else "1"
    sizes = [int(size) for size in (args.sizes or default_sizes).split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        package_dir = args.package or export_package(args.device, kernels, Path(scratch))
        package = load(package_dir)
        check_served(package, kind)
        routing = package.routing() if hasattr(package, "routing") else "python"
        cases = cases_for(package, kind, sizes)
        clock = time.perf_counter if args.clock == "wall" else time.thread_time
        states = States(package, package.manifest["dispatch_key"])
        run(cases, states, kind, args.calls, args.repetitions, clock)
        if args.profile:
            args.profile.write_text(profile(cases, states, args.calls * 10))
    found = rows(cases)
    import torch
    import triton

    facts = {
        "device": args.device,
        "kernels": "package" if args.package else kernels,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "clock": args.clock,
        "calls_per_sample": args.calls,
        "repetitions": args.repetitions,
        "routing": routing,
    }
    print(" ".join(f"{key}={value}" for key, value in facts.items()))
    print(markdown(found))
    if args.json:
        args.json.write_text(json.dumps({**facts, "rows": found}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
