"""`opforge_worker lint FILE --profile cuda`: lint one candidate file and print its report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .engine import lint_source
from .profile import ProfileError, load_profile

_EXIT_CLEAN, _EXIT_VIOLATIONS, _EXIT_USAGE = 0, 1, 2


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when the file is clean, 1 when it has violations or does not parse, 2 on bad usage."""
    parser = argparse.ArgumentParser(prog="opforge_worker lint", description=__doc__)
    parser.add_argument("file", type=Path, help="candidate source: the wrapper and its kernels")
    parser.add_argument(
        "--profile", default="cuda", help="data/linter/<profile>.yaml (a device kind)"
    )
    parser.add_argument("--op", help="operator name (default: the file name without .py)")
    parser.add_argument("--wrapper", help="wrapper function name (default: <op>_wrapper)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    op = args.op or args.file.stem
    wrapper = args.wrapper or f"{op}_wrapper"
    try:
        source = args.file.read_text(encoding="utf-8")
        profile = load_profile(args.profile)
    except (OSError, UnicodeDecodeError) as error:
        parser.error(f"cannot read {args.file}: {error}")
    except ProfileError as error:
        parser.error(str(error))
    report = lint_source(source, op=op, wrapper=wrapper, profile=profile)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(_format(args.file, report))
    return _EXIT_CLEAN if report["ok"] else _EXIT_VIOLATIONS


def _format(path: Path, report: dict) -> str:
    error = report["syntax_error"]
    if error is not None:
        return f"{path}:{error['line']}:{error['col']}: syntax: {error['message']}"
    if report["ok"]:
        return f"{path}: ok"
    return "\n".join(
        f"{path}:{v['line']}:{v['col']}: {v['rule']}: {v['text']}\n    hint: {v['hint']}"
        for v in report["violations"]
    )
