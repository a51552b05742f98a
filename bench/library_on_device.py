"""Prove a kernel set on one device and export what passed as a package, without a daemon.

    python bench/library_on_device.py --device cuda --out DIR [--name PKG] [--demo DIR] PATH...

The GPU host has no C++ toolchain for the daemon, so this does on it what `opforge import` and
`opforge export` do: every candidate (worker/CANDIDATE.md; files or directories) goes through
`validate` on the device, and the kernels that pass every sample of every dtype they were tested
in become a `library_bundle` whose proofs are those verdicts on this host's toolchain. The
bundle is exported with `python -m opforge_library export` (dispatch key CUDA on cuda). `--demo`
names config/demo/answers: each operator's last recorded answer (hand-written, not from a model)
joins the set, as the demo campaign accepts it. The bundle and the verdicts are written beside
the package (bundle.msgpack, verdicts.json) for bench/results/.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import msgpack
from opforge_library import export
from opforge_worker import contract, toolchain, validate

_CODE = re.compile(r"```py(?:thon)?\n(.*?)```", re.S)


def demo_kernels(answers: Path, into: Path) -> list[Path]:
    """Each operator's last recorded answer, as a candidate file named after the operator."""
    files = []
    for op_dir in sorted(path for path in answers.iterdir() if path.is_dir()):
        last = max(op_dir.glob("*.md"), key=lambda path: int(path.stem))
        blocks = _CODE.findall(last.read_text(encoding="utf-8"))
        target = into / f"{op_dir.name}.py"
        # The answer's code is the block with the kernel; a usage snippet may follow it.
        code = next(block for block in reversed(blocks) if "@triton.jit" in block)
        target.write_text(code, encoding="utf-8")
        files.append(target)
    return files


def proved(result: dict) -> bool:
    return result.get("outcome") == "pass" and result.get("tests_passed") == result.get("tests_run")


def bundle_of(results: list[dict], device: str, origin_of) -> contract.LibraryBundle:
    tools = toolchain.collect(device)
    fingerprint = toolchain.fingerprint(tools)
    kernels, seen = [], set()
    for result in filter(proved, results):
        if (result["op"], result["variant"]) in seen:
            continue  # one kernel per operator variant, as the daemon's bundle holds: the first
        seen.add((result["op"], result["variant"]))
        source = Path(result["path"]).read_text(encoding="utf-8")
        proof = contract.ToolchainProof(
            fingerprint=fingerprint,
            device_kind=device,
            toolchain=tools,
            outcome=contract.Outcome.PASS,
            tests_run=result["tests_run"],
            tests_passed=result["tests_passed"],
            validated_at_ms=int(time.time() * 1000),
        )
        kernels.append(
            contract.LibraryKernel(
                op=result["op"],
                variant=result["variant"],
                wrapper=result["wrapper"],
                source=source,
                hash=hashlib.sha256(source.encode()).hexdigest()[:16],
                dtypes=result["dtypes"],
                aten_overloads=[],
                provenance={"origin": origin_of(Path(result["path"]))},
                proofs=[proof],
            )
        )
    return contract.LibraryBundle(
        device_kind=device, fingerprint=fingerprint, daemon_version="", kernels=kernels
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--device", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--name", default="opforge_kernels")
    parser.add_argument("--demo", type=Path, help="config/demo/answers")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        demo = demo_kernels(args.demo, Path(scratch)) if args.demo else []
        paths = demo + list(args.paths)
        started = time.monotonic()
        results = validate.validate_paths(paths, args.device).results
        elapsed = time.monotonic() - started

        def origin_of(path: Path) -> str:
            if path in demo:
                return "campaign:demo (recorded answers, hand-written)"
            imported = next((p for p in args.paths if p == path or p in path.parents), path)
            return f"imported:{imported}"

        bundle = bundle_of(results, args.device, origin_of)
    bundle_path = args.out / "bundle.msgpack"
    bundle_path.write_bytes(msgpack.packb(bundle.to_dict()))
    verdicts = [
        {key: result.get(key) for key in ("file", "op", "variant", "outcome", "tests_run",
                                           "tests_passed", "dtypes")}
        for result in results
    ]  # fmt: skip
    (args.out / "verdicts.json").write_text(
        json.dumps({"validate_s": round(elapsed, 1), "verdicts": verdicts}, indent=1)
    )
    print(f"{len(bundle.kernels)} of {len(results)} candidates proved on {args.device}")
    key = {"cuda": "CUDA", "interpreter": "CPU"}.get(args.device, "PrivateUse1")
    return export.main(
        ["--bundle", str(bundle_path), "--format", "torch-library", "--out",
         str(args.out / "package"), "--name", args.name, "--dispatch-key", key]
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
