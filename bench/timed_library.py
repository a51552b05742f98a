"""The library as the daemon times it, exported with its timings, inside real models (issue 28).

    python bench/timed_library.py --device cuda [--opforge .daemon/opforge] [--python python3]
        --work DIR [--phase library|export|models|all] [--forwards N] [--json OUT] [SET ...]

Phase ``library``: `opforge serve` on DIR/data with one device worker of ``--device`` (and a lint
worker) imports every SET (`opforge import SET --layout candidates`; default: config/examples,
the honest corpus, tests/fixtures/import/candidates and ``demo``, the demo's recorded answers,
hand-written, each operator's last), and the daemon's maintenance times every current kernel on
the worker's toolchain (a background benchmark job per kernel, `maintenance.retime`). Once every
current kernel has a timing there, or none came for ``--settle-s``, `opforge export --format
torch-library` writes two packages from the same bundle: DIR/routed (the default routing:
launch-bound shape classes go to the original) and DIR/timed (``--launch-bound timed``: every
timed class by its speedup), with each kernel's timings in DIR/kernels.json.

Phase ``export`` writes the packages again from DIR/data (after a change of the exporter's
routing). Phase ``models``: `python -m opforge_library modelcheck --model all` (``--size``,
default small) with each package, each one's forward passes interleaved with eager's
(``--forwards``), so every ratio is measured side by side in one process: the pair-by-pair
slowdown with its IQR, the calls served, what each covered overload costs. The phases are
separate commands where one device command may not run them all; DIR keeps what each wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from revalidate_bench import ROOT, add_daemon_arguments, start, write_config

#: The set name that stands for the demo's recorded answers.
DEMO = "demo"
DEFAULT_SETS = [
    "config/examples",
    "worker/tests/corpus/honest",
    "tests/fixtures/import/candidates",
    DEMO,
]
#: `opforge import`'s exit status when some kernels of the set were refused (the import fixtures
#: hold wrong ones on purpose).
IMPORT_REFUSED_SOME = 3
#: The two exports of one bundle: the default routing, and launch-bound classes by their speedup.
PACKAGES = {"routed": [], "timed": ["--launch-bound", "timed"]}


def demo_set(into: Path) -> Path:
    """The demo's recorded answers (hand-written, not from a model), each operator's last, as a
    candidates directory."""
    from library_on_device import demo_kernels  # imports torch: only when the demo is a set

    into.mkdir(parents=True, exist_ok=True)
    demo_kernels(ROOT / "config/demo/answers", into)
    return into


def current_kernels(daemon) -> list[dict]:
    return [k for k in daemon.json("kernels")["kernels"] if k["current"]]


def timed_on(kernel: dict, fingerprint: str) -> bool:
    return any(t["fingerprint"] == fingerprint for t in kernel.get("timings", []))


def library_phase(args, work: Path) -> dict:
    data, config = work / "data", work / "opforge.yaml"
    shutil.rmtree(work, ignore_errors=True)
    data.mkdir(parents=True)
    write_config(config, args.device, args.slots, args.python, args.dtypes)
    daemon, worker = start(args.opforge, data, config, work / "cache")
    try:
        fingerprint = worker["fingerprint"]
        sets = [
            str(demo_set(work / "demo") if name == DEMO else ROOT / name)
            for name in args.sets or DEFAULT_SETS
        ]
        started = time.monotonic()
        for kernel_set in sets:
            imported = daemon.client(
                "import",
                kernel_set,
                "--layout",
                "candidates",
                "--timeout-ms",
                "3600000",
                check=False,
            )
            if imported.returncode not in (0, IMPORT_REFUSED_SOME):
                raise RuntimeError(
                    f"import {kernel_set}: exit {imported.returncode}: {imported.stderr}"
                )
        import_s = time.monotonic() - started
        print(f"imported {len(current_kernels(daemon))} current kernels in {import_s:.1f} s")

        # Timings arrive kernel by kernel; one whose benchmark a check stopped stays untimed.
        last_count, last_change = -1, time.monotonic()
        while True:
            kernels = current_kernels(daemon)
            count = sum(timed_on(k, fingerprint) for k in kernels)
            if count != last_count:
                last_count, last_change = count, time.monotonic()
                print(f"  {count} of {len(kernels)} timed after {time.monotonic() - started:.0f} s")
            if count == len(kernels) or time.monotonic() - last_change > args.settle_s:
                break
            time.sleep(1.0)
        timing_s = time.monotonic() - started - import_s
        untimed = [k["operator"] for k in kernels if not timed_on(k, fingerprint)]
        (work / "kernels.json").write_text(json.dumps(kernels, indent=1) + "\n")
        export_packages(daemon, args.device, work, args.packages)
        return {
            "device": args.device,
            "device_name": worker.get("device_name", ""),
            "fingerprint": fingerprint,
            "sets": sets,
            "kernels": len(kernels),
            "timed": count,
            "untimed": untimed,
            "import_s": round(import_s, 1),
            "timing_s": round(timing_s, 1),
            "timings": {
                k["operator"]: [
                    {
                        key: t[key]
                        for key in ("dtype", "shape_class", "speedup", "noise", "launch_bound")
                    }
                    for t in k.get("timings", [])
                    if t["fingerprint"] == fingerprint
                ]
                for k in kernels
            },
        }
    finally:
        daemon.stop()


def export_packages(daemon, device: str, work: Path, names: list[str]) -> None:
    for name in names:
        flags = PACKAGES[name]
        shutil.rmtree(work / name, ignore_errors=True)
        daemon.client(
            "export", "--format", "torch-library", "--out", str(work / name),
            "--device-kind", device, *flags,
        )  # fmt: skip


def export_phase(args, work: Path) -> None:
    """The packages exported again from the library DIR/data holds (after a change of routing)."""
    daemon, _ = start(args.opforge, work / "data", work / "opforge.yaml", work / "cache")
    try:
        export_packages(daemon, args.device, work, args.packages)
    finally:
        daemon.stop()


def package_dir(export_dir: Path) -> Path:
    """The package directory an export wrote (the one holding its manifest)."""
    (manifest,) = export_dir.rglob("manifest.json")
    return manifest.parent


def routes(package: Path) -> dict:
    """How many (overload, dtype, shape class) routes go to the kernel and to the original."""
    manifest = json.loads((package / "manifest.json").read_text())
    counted = {"kernel": 0, "original": 0}
    for entry in manifest["covered"].values():
        for by_class in entry["routes"].values():
            for route in by_class.values():
                counted[route["to"]] += 1
    return counted


def models_phase(args, work: Path) -> dict:
    out = {}
    for name in args.packages:
        package = package_dir(work / name)
        report = work / f"models-{name}.json"
        checked = subprocess.run(
            [
                args.python,
                "-m",
                "opforge_library",
                "modelcheck",
                "--model",
                "all",
                "--size",
                args.size,
                "--device-kind",
                args.device,
                "--package",
                str(package),
                "--forwards",
                str(args.forwards),
                "--report",
                str(report),
            ],
            check=False,
            cwd=ROOT / "worker",
        )
        # Exit 2: a model failed or could not be built; the report holds those that ran.
        models = json.loads(report.read_text()) if report.exists() else []
        out[name] = {
            "modelcheck_exit": checked.returncode,
            "routes": routes(package),
            "models": [
                {
                    key: model.get(key)
                    for key in (
                        "model",
                        "served_calls",
                        "slowdown",
                        "slowdown_iqr",
                        "seconds_with_library",
                        "seconds_without_library",
                        "max_rel_deviation",
                        "failing_overloads",
                        "overload_times",
                    )
                }
                for model in models
            ],
        }
        for model in out[name]["models"]:
            print(
                f"{name}: {model['model']} x{model['slowdown']:.3f} (IQR "
                f"{model['slowdown_iqr']:.3f}), {model['served_calls']} calls served"
            )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_daemon_arguments(parser)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "opforge-timed")
    parser.add_argument("--phase", choices=["library", "export", "models", "all"], default="all")
    parser.add_argument("--settle-s", type=float, default=30.0)
    parser.add_argument(
        "--dtypes",
        default="float32",
        help="what the import proves and the maintenance times (the models run float32)",
    )
    parser.add_argument("--forwards", type=int, default=21)
    parser.add_argument("--size", choices=["tiny", "small"], default="small")
    parser.add_argument(
        "--packages", nargs="+", choices=list(PACKAGES), default=list(PACKAGES), metavar="NAME"
    )
    parser.add_argument("--json", type=Path, help="write the numbers here (merged per phase)")
    parser.add_argument("sets", nargs="*")
    args = parser.parse_args()

    numbers = json.loads(args.json.read_text()) if args.json and args.json.exists() else {}
    if args.phase in ("library", "all"):
        numbers["library"] = library_phase(args, args.work)
        if args.json:
            args.json.write_text(json.dumps(numbers, indent=1) + "\n")
    if args.phase == "export":
        export_phase(args, args.work)
    if args.phase in ("models", "all"):
        numbers["packages"] = models_phase(args, args.work)
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
