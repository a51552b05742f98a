"""Standalone validation of a directory of candidates, without a daemon.

One file per operator, named after it: `exp.py`, `nn.functional.relu.py`. The file holds what a
`test` job's `source` holds (worker/CANDIDATE.md). Two optional comment markers:

    # opforge: wrapper=my_exp      the wrapper's name
    # opforge: variant=with_dtype  the OpInfo variant (default: the operator's default variant)

Without a wrapper marker, the wrapper is the first top-level function of these that the file
defines: `<op>_wrapper`, then `<op>` (dots as underscores: `nn_functional_relu_wrapper`), then the
only top-level function that is not a `@triton.jit` kernel. The file is parsed, never run, here.

Every candidate runs every sample (`mode: all`) of each dtype: the requested ones, or else every
dtype the operator supports on the device among bfloat16, float16, float32, int32, int64; and of
each sample set: the requested ones, or else all of them (`sample_sets.SETS`).
"""

from __future__ import annotations

import ast
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TARGET_DTYPES = ("bfloat16", "float16", "float32", "int32", "int64")
_MARKER = re.compile(r"^#\s*opforge:\s*(wrapper|variant)\s*=\s*([\w.]+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Candidate:
    path: Path
    op: str
    variant: str
    wrapper: str
    source: str


def _is_kernel(function: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(decorator) for decorator in function.decorator_list)


def default_wrapper(op: str, source: str) -> str:
    """The wrapper by convention (see the module docstring); `<op>_wrapper` when the source
    does not parse or nothing matches, so that the harness names the problem."""
    from opforge_worker.linter import parse_source

    base = op.replace(".", "_")
    conventional = f"{base}_wrapper"
    try:
        tree = parse_source(source)
    except SyntaxError:
        return conventional
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    names = {function.name for function in functions}
    for name in (conventional, base):
        if name in names:
            return name
    plain = [function.name for function in functions if not _is_kernel(function)]
    return plain[0] if len(plain) == 1 else conventional


def read_candidate(path: Path) -> Candidate:
    source = path.read_text()
    op = path.name.removesuffix(".py")
    markers = dict(match.groups() for match in _MARKER.finditer(source))
    wrapper = markers.get("wrapper") or default_wrapper(op, source)
    return Candidate(path, op, markers.get("variant", ""), wrapper, source)


def discover(directory: Path) -> list[Candidate]:
    if not directory.is_dir():
        raise ValueError(f"{directory}: not a directory")
    candidates = [read_candidate(path) for path in sorted(directory.glob("*.py"))]
    if not candidates:
        raise ValueError(f"{directory}: no candidate files (*.py)")
    return candidates


def device_dtypes(opinfo, device_kind: str) -> list[str]:
    """The target dtypes `opinfo` supports on the device (the CPU's for the interpreter)."""
    supported = {
        str(dtype).removeprefix("torch.")
        for dtype in opinfo.supported_dtypes("cuda" if device_kind == "cuda" else "cpu")
    }
    return [dtype for dtype in TARGET_DTYPES if dtype in supported]


def _invalid(entry: dict[str, Any], error: str) -> dict[str, Any]:
    """A candidate the harness never saw: the file names no operator or no dtype to test."""
    return {
        **entry,
        "dtypes": [],
        "outcome": "invalid",
        "tests_run": 0,
        "tests_passed": 0,
        "elapsed_s": 0.0,
        "error": error,
    }


def validate_one(
    harness,
    candidate: Candidate,
    device_kind: str,
    dtypes: list[str] | None,
    timeout_s: float,
    seed: int,
    sets: tuple[str, ...],
) -> dict[str, Any]:
    from opforge_worker.opinfo import find_opinfo

    entry: dict[str, Any] = {
        "file": candidate.path.name,
        "op": candidate.op,
        "variant": candidate.variant,
        "wrapper": candidate.wrapper,
    }
    opinfo = find_opinfo(candidate.op, candidate.variant)
    if opinfo is None:
        variant = f" variant {candidate.variant!r}" if candidate.variant else ""
        return _invalid(entry, f"no OpInfo named {candidate.op!r}{variant}")
    supported = device_dtypes(opinfo, device_kind)
    chosen = [dtype for dtype in supported if dtype in (dtypes or supported)]
    if not chosen:
        return _invalid(
            entry,
            f"none of {', '.join(dtypes or TARGET_DTYPES)} is supported on {device_kind} "
            f"(supported: {', '.join(supported) or 'none'})",
        )
    request = {
        "op": candidate.op,
        "variant": candidate.variant,
        "source": candidate.source,
        "wrapper": candidate.wrapper,
        "dtypes": chosen,
        "mode": "all",
        "sample_sets": list(sets),
        "seed": seed,
        "timeout_s": timeout_s,
    }
    started = time.monotonic()
    payload = harness.run_test(request, threading.Event())
    return {**entry, "dtypes": chosen, "elapsed_s": round(time.monotonic() - started, 3), **payload}


def validate_directory(
    directory: Path,
    device_kind: str,
    dtypes: list[str] | None = None,
    timeout_s: float = 60.0,
    seed: int = 0,
    sets: list[str] | None = None,
) -> list[dict[str, Any]]:
    from opforge_worker import sample_sets
    from opforge_worker.harness import Harness

    unknown = set(dtypes or ()) - set(TARGET_DTYPES)
    if unknown:
        raise ValueError(
            f"unknown dtypes {', '.join(sorted(unknown))} (known: {', '.join(TARGET_DTYPES)})"
        )
    chosen_sets = sample_sets.check_names(sets or sample_sets.SETS)
    candidates = discover(directory)
    harness = Harness(device_kind=device_kind)
    try:
        return [
            validate_one(harness, candidate, device_kind, dtypes, timeout_s, seed, chosen_sets)
            for candidate in candidates
        ]
    finally:
        harness.close()


def format_table(results: list[dict[str, Any]]) -> str:
    header = ("op", "dtypes", "passed/run", "outcome", "time")
    rows = [
        (
            f"{r['op']}.{r['variant']}" if r["variant"] else r["op"],
            ",".join(r["dtypes"]) or "-",
            f"{r['tests_passed']}/{r['tests_run']}",
            r["outcome"],
            f"{r['elapsed_s']:.2f}s",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *rows]
    ]
    passed = sum(r["outcome"] == "pass" for r in results)
    lines.append(f"{passed}/{len(results)} candidates passed")
    for result in results:
        problem = result.get("error") or (result.get("failure") or {}).get("message")
        if result["outcome"] != "pass" and problem:
            lines.append(f"  {result['file']}: {str(problem).splitlines()[0][:200]}")
    return "\n".join(lines)
