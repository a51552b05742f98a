"""Conformance probes of a toolchain: known-answer tests of the primitives kernels are built from.

``data/conformance.yaml`` lists the probes. ``probe_toolchain`` runs them for a device kind in a
process of their own, with the kind's environment (the interpreter is chosen when triton is
imported), once per toolchain fingerprint: the report is kept under the worker's cache, and the
worker sends it to the daemon in its ``hello`` (contract ``conformance_report``). A defect with a
patch (toolchain_patches.py) is probed again with the patch applied; only a patch that makes the
probe answer right is reported, and only such a defect can explain a candidate's failure
(harness.py, outcome ``device_defect``).

    python -m opforge_worker.conformance --device-kind interpreter   # the report as JSON
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from opforge_worker import device_kinds, toolchain_patches
from opforge_worker.cache_root import cache_dir
from opforge_worker.contract import ConformanceReport, ToolchainDefect
from opforge_worker.package_data import data_path

log = logging.getLogger("opforge_worker.conformance")

PROBES_PATH = data_path("conformance.yaml")
#: How long a probe run may take: importing torch and triton, then a few dozen tiny kernels.
PROBE_TIMEOUT_S = 600.0

_KERNEL = """import triton
import triton.language as tl


@triton.jit
def probe(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, {expression}, mask=mask)
"""


@dataclass(frozen=True)
class Probe:
    name: str
    primitive: str
    dtype: str
    y_dtype: str
    out_dtype: str
    expression: str
    x: tuple
    y: tuple
    expected: tuple
    #: The answer on a kind that flushes ``dtype``'s subnormals; None where it is ``expected``.
    flushed: tuple | None
    workaround: str
    patch: str

    @property
    def kernel_source(self) -> str:
        return _KERNEL.format(expression=self.expression)

    def expected_on(self, kind: device_kinds.DeviceKind) -> tuple:
        if self.flushed is not None and self.dtype in kind.numerics.flushes_subnormals:
            return self.flushed
        return self.expected

    def reproducer(self, device: str) -> str:
        """A script that shows what the probe checks, on ``device``."""
        return (
            f"{self.kernel_source}\n\nimport torch\n"
            f"x = torch.tensor({list(self.x)!r}, dtype=torch.{self.dtype}, device={device!r})\n"
            f"y = torch.tensor({list(self.y)!r}, dtype=torch.{self.y_dtype}, device={device!r})\n"
            f"out = torch.empty({len(self.x)}, dtype=torch.{self.out_dtype}, device={device!r})\n"
            f"probe[(1,)](x, y, out, {len(self.x)}, BLOCK={_block(len(self.x))})\n"
            f"print(out.tolist())  # expected {list(self.expected)!r}\n"
        )


def _block(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def _values(raw, where: str) -> tuple:
    if not isinstance(raw, list) or not raw or not all(isinstance(v, int | float) for v in raw):
        raise ValueError(f"{where}: expected a non-empty list of numbers, got {raw!r}")
    return tuple(raw)


def load_probes(path: Path | None = None) -> dict[str, Probe]:
    """The probes of ``path`` (default the shipped file); ValueError naming the probe and key
    that is wrong."""
    path = path or PROBES_PATH
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"cannot read conformance probes {path}: {error}") from None
    probes = {}
    for name, entry in ((raw or {}).get("probes") or {}).items():
        where = f"{path}: probe {name}"
        try:
            dtype = entry["dtype"]
            x = _values(entry["x"], f"{where}.x")
            y = _values(entry["y"], f"{where}.y") if "y" in entry else x
            expected = _values(entry["expected"], f"{where}.expected")
            flushed = _values(entry["flushed"], f"{where}.flushed") if "flushed" in entry else None
            probe = Probe(
                name=name,
                primitive=str(entry["primitive"]),
                dtype=dtype,
                y_dtype=entry.get("y_dtype", dtype),
                out_dtype=entry.get("out_dtype", dtype),
                expression=str(entry["expression"]),
                x=x,
                y=y,
                expected=expected,
                flushed=flushed,
                workaround=str(entry.get("workaround", "")),
                patch=str(entry.get("patch", "")),
            )
        except (KeyError, TypeError) as error:
            raise ValueError(f"{where}: missing or malformed key {error}") from None
        if not (len(probe.y) == len(probe.expected) == len(probe.x)):
            raise ValueError(f"{where}: x, y and expected must have the same length")
        if probe.patch and probe.patch not in toolchain_patches.PATCHES:
            raise ValueError(f"{where}: unknown patch {probe.patch!r}")
        probes[name] = probe
    return probes


def _same(actual, expected) -> bool:
    """Equal values elementwise, NaN equal to NaN, zeros of the same sign."""
    import torch

    if actual.dtype.is_floating_point:
        same = (actual == expected) & (actual.signbit() == expected.signbit())
        return bool((same | (actual.isnan() & expected.isnan())).all())
    return bool(torch.equal(actual, expected))


def _run(probe: Probe, kind: device_kinds.DeviceKind, scratch: Path) -> str | None:
    """None when the probe answers as expected on this process's device, else what it gave."""
    import torch

    path = scratch / f"probe_{probe.name}.py"
    path.write_text(probe.kernel_source)
    spec = importlib.util.spec_from_file_location(f"opforge_probe_{probe.name}", path)
    module = importlib.util.module_from_spec(spec)
    device = kind.torch_device
    try:
        spec.loader.exec_module(module)
        x = torch.tensor(probe.x, dtype=getattr(torch, probe.dtype), device=device)
        y = torch.tensor(probe.y, dtype=getattr(torch, probe.y_dtype), device=device)
        out = torch.empty(len(probe.x), dtype=getattr(torch, probe.out_dtype), device=device)
        module.probe[(1,)](x, y, out, len(probe.x), BLOCK=_block(len(probe.x)))
        if kind.synchronize is not None:
            kind.synchronize()
    except Exception as error:  # noqa: BLE001 (a probe that fails to run is a defect too)
        return f"raised {type(error).__name__}: {error}"
    expected = torch.tensor(probe.expected_on(kind), dtype=out.dtype)
    actual = out.cpu()
    return None if _same(actual, expected) else repr(actual.tolist())


def run_probes(kind: device_kinds.DeviceKind, probes: dict[str, Probe]) -> dict:
    """Run every probe here (this process must have the kind's environment), then the defective
    ones again with their patches applied; the report as ``ConformanceReport`` fields."""
    defects = {}
    with tempfile.TemporaryDirectory(prefix="opforge-probes-") as scratch:
        for probe in probes.values():
            actual = _run(probe, kind, Path(scratch))
            if actual is not None:
                defects[probe.name] = actual
        patches = {probes[name].patch for name in defects if probes[name].patch}
        toolchain_patches.apply(patches)
        corrected = {
            name
            for name in defects
            if probes[name].patch and _run(probes[name], kind, Path(scratch)) is None
        }
    return {
        "device_kind": kind.name,
        "probes_run": len(probes),
        "defects": [
            ToolchainDefect(
                probe=name,
                primitive=probes[name].primitive,
                dtype=probes[name].dtype,
                expression=probes[name].expression,
                inputs=f"x={list(probes[name].x)!r}, y={list(probes[name].y)!r}",
                expected=repr(list(probes[name].expected_on(kind))),
                actual=actual,
                known=name in kind.numerics.known_defects,
                workaround=probes[name].workaround,
                patch=probes[name].patch if name in corrected else "",
                reproducer=probes[name].reproducer(kind.torch_device),
            ).to_dict()
            for name, actual in defects.items()
        ],
        "error": "",
    }


def _report_path(fingerprint: str) -> Path:
    return cache_dir() / "conformance" / f"{fingerprint}.json"


def probe_toolchain(device_kind: str, fingerprint: str) -> ConformanceReport:
    """The conformance report of this host's toolchain for ``device_kind``: the kept one for
    ``fingerprint``, else a fresh run in a process with the kind's environment (kept when it
    ran). A run that fails is a report with its ``error``, never an exception."""
    kept = _report_path(fingerprint)
    try:
        return ConformanceReport.from_dict(json.loads(kept.read_text()))
    except (OSError, ValueError):
        pass
    kind = device_kinds.lookup(device_kind)
    command = [sys.executable, "-m", "opforge_worker.conformance", "--device-kind", device_kind]
    report = {"device_kind": device_kind, "probes_run": 0, "defects": [], "error": ""}
    try:
        done = subprocess.run(
            command,
            env={**os.environ, **kind.environment},
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
        if done.returncode == 0:
            report = json.loads(done.stdout)
        else:
            report["error"] = f"the probe run exited {done.returncode}: {done.stderr[-2000:]}"
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        report["error"] = f"the probe run failed: {error}"
    result = ConformanceReport.from_dict({**report, "fingerprint": fingerprint})
    if not result.error:
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(json.dumps(result.to_dict()))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opforge_worker.conformance")
    parser.add_argument("--device-kind", required=True, choices=sorted(device_kinds.KINDS))
    args = parser.parse_args(argv)
    kind = device_kinds.lookup(args.device_kind)
    json.dump(run_probes(kind, load_probes()), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
