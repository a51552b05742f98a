"""Re-validation of the library on a toolchain against one validate sweep of it (issue 19).

    python bench/revalidate_bench.py --device interpreter|cuda [--opforge build/opforge]
        [--slots N] [--json OUT] [SET ...]

It starts `opforge serve` on a fresh data directory with one device worker of `--device` (and a
lint worker, which the import needs), fills the library with `opforge import SET --layout
candidates` for every SET (default: config/examples, the honest corpus and
tests/fixtures/import/candidates, the sets bench/library_on_device.py proves), and then times:

  (a) one `python -m opforge_worker validate` sweep of the library's current kernels, written out
      as candidate files, over the dtypes the import tested (the campaigns' defaults);
  (b) `opforge revalidate --fingerprint F --device K` on the worker's own fingerprint, from the
      request until the daemon owes nothing there and runs nothing: the same tests, pinned to
      the fingerprint, as background jobs of the daemon.

A genuinely new fingerprint is the same work: every current kernel is owed once. On one host the
fingerprint changes only with the worker's Python, torch, Triton, CUDA or driver
(ops/toolchain-venv.sh builds a second Triton for the interpreter); by hand on the same
fingerprint needs no second environment, so that is what this times. It prints both walls and
their ratio (issue 19's goal: at most 1.1x) and says when the library holds fewer than 50 kernels.
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

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SETS = ["config/examples", "worker/tests/corpus/honest", "tests/fixtures/import/candidates"]
DTYPES = "bfloat16,float16,float32,int32,int64"  # campaigns.dtypes, which `import` tests


class Daemon:
    def __init__(self, opforge: Path, data: Path, config: Path) -> None:
        self.opforge, self.data, self.config = opforge, data, config
        self.log = open(data / "serve.log", "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [str(opforge), "serve", "--config", str(config), "--data-dir", str(data)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def client(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [str(self.opforge), *args, "--config", str(self.config), "--data-dir", str(self.data)],
            capture_output=True,
            text=True,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"opforge {' '.join(args)}: exit {done.returncode}: {done.stderr}")
        return done

    def json(self, *args: str) -> dict:
        return json.loads(self.client(*args, "--json").stdout)

    def wait(self, what: str, ready, limit_s: float) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"opforge serve exited ({self.process.returncode}); see {self.log.name}"
                )
            try:
                if ready():
                    return
            except (RuntimeError, json.JSONDecodeError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{what} within {limit_s} s; see {self.log.name}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.client("shutdown", check=False)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


def write_config(path: Path, device: str, slots: int, python: str) -> None:
    path.write_text(
        f"""control:
  listen: ""
workers:
  listen: tcp://127.0.0.1:*
local_workers:
  - {{role: device, kind: {device}, count: 1, slots: {slots}}}
  - {{role: lint, kind: none, count: 1, slots: 2}}
python: {python}
metrics:
  listen: ""
campaigns:
  device_kind: {device}
  dtypes: {DTYPES}
maintenance:
  poll_ms: 200
"""
    )


def library_files(kernels: list[dict], into: Path) -> int:
    """The current kernels as candidate files named after their operator; how many."""
    count = 0
    for kernel in kernels:
        if not kernel.get("current"):
            continue
        name = kernel["op"] + (f".{kernel['variant']}" if kernel["variant"] else "")
        marker = f"# opforge: wrapper={kernel['wrapper']}\n"
        (into / f"{name}.py").write_text(marker + kernel["source"], encoding="utf-8")
        count += 1
    return count


def revalidation(status: dict, fingerprint: str) -> dict:
    for toolchain in status.get("maintenance", {}).get("toolchains", []):
        if toolchain["fingerprint"] == fingerprint:
            return toolchain
    return {}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=["interpreter", "cuda"], required=True)
    parser.add_argument("--opforge", type=Path, default=ROOT / "build/opforge")
    parser.add_argument("--python", default=sys.executable, help="the workers' interpreter")
    parser.add_argument("--slots", type=int, default=1, help="the device worker's slots")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument("sets", nargs="*", default=DEFAULT_SETS)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="opforge-revalidate-"))
    data, config, library = work / "data", work / "opforge.yaml", work / "library"
    data.mkdir()
    library.mkdir()
    write_config(config, args.device, args.slots, args.python)
    daemon = Daemon(args.opforge, data, config)
    try:
        daemon.wait(
            "the daemon did not answer", lambda: daemon.client("status").returncode == 0, 60
        )

        def device_worker() -> dict | None:
            workers = daemon.json("workers")["workers"]
            live = [w for w in workers if w["role"] == "device" and w["state"] != "dead"]
            return live[0] if live and len(workers) >= 2 else None

        daemon.wait("the local workers did not connect", device_worker, 300)
        worker = device_worker()
        fingerprint = worker["fingerprint"]

        imported = time.monotonic()
        for kernel_set in args.sets:
            daemon.client(
                "import",
                str(ROOT / kernel_set),
                "--layout",
                "candidates",
                "--timeout-ms",
                "3600000",
            )
        import_s = time.monotonic() - imported
        # Sources come one operator at a time (`kernels OP --source`).
        kernels = [
            listed
            for current in daemon.json("kernels")["kernels"]
            if current["current"]
            for listed in daemon.json("kernels", current["operator"], "--source")["kernels"]
            if listed["hash"] == current["hash"] and listed["current"]
        ]
        count = library_files(kernels, library)
        print(
            f"library: {count} current kernels from {len(args.sets)} sets (import took {import_s:.1f} s)"
        )
        if count < 50:
            print(f"note: fewer than 50 distinct operator kernels ({count}); issue 19 asks for 50")

        started = time.monotonic()
        subprocess.run(
            [
                args.python,
                "-m",
                "opforge_worker",
                "validate",
                str(library),
                "--device",
                args.device,
                "--dtypes",
                DTYPES,
                "--json",
                str(work / "sweep.json"),
            ],
            check=False,
            capture_output=True,
            cwd=ROOT / "worker",
        )
        sweep_s = time.monotonic() - started
        sweep = json.loads((work / "sweep.json").read_text())
        swept = sweep if isinstance(sweep, list) else sweep.get("results", [])

        started = time.monotonic()
        owed = daemon.json("revalidate", "--fingerprint", fingerprint, "--device", args.device)
        daemon.wait(
            "re-validation did not finish",
            lambda: (lambda t: t and t["owed"] == 0 and t["running"] == 0)(
                revalidation(daemon.json("status"), fingerprint)
            ),
            3600,
        )
        revalidate_s = time.monotonic() - started
        done = revalidation(daemon.json("status"), fingerprint)
        numbers = {
            "device": args.device,
            "device_name": worker.get("device_name", ""),
            "toolchain": worker.get("toolchain", {}),
            "fingerprint": fingerprint,
            "slots": args.slots,
            "sets": args.sets,
            "kernels": count,
            "import_s": round(import_s, 2),
            "sweep_s": round(sweep_s, 2),
            "sweep_results": len(swept),
            "revalidate_s": round(revalidate_s, 2),
            "revalidate_owed": owed["toolchains"][0]["owed"],
            "revalidate_passed": done["passed"],
            "revalidate_failed": done["failed"],
            "ratio": round(revalidate_s / sweep_s, 3),
        }
        print(
            f"validate sweep: {sweep_s:.1f} s for {len(swept)} results; revalidate: "
            f"{revalidate_s:.1f} s for {numbers['revalidate_owed']} kernels "
            f"({done['passed']} passed, {done['failed']} failed); ratio {numbers['ratio']:.2f}x"
        )
        if args.json:
            args.json.write_text(json.dumps(numbers, indent=1) + "\n")
        return 0
    finally:
        daemon.stop()
        if args.keep:
            print(f"data kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
