"""How many files of kernel sets the static gate refuses, and by which rules (issue 27).

    python bench/lint_kernel_sets.py DIR [DIR ...] [--profile cuda] [--show RULE]

A directory is read in one of the importer's layouts (actors/library/importer.hpp):
- BackendBench's DirectoryBackend: ``<folder>/<folder>_implementation*.py`` defining
  ``<folder>_kernel_impl``; the torch and triton import lines the importer blanks are blanked
  here too, so that the count is what ``opforge import`` sees.
- candidates: ``<op>.py`` whose wrapper is the last top-level plain function (the corpus's
  convention, worker/tests/test_linter_corpus.py).

Two counts per set: files the lint job refuses (any violation: what a session and an import
refuse on) and files the harness's static gate refuses before a test (rules of
``refused_before_test``), each by the rules that refused them.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "worker"))

from opforge_worker.linter import lint_source, load_profile  # noqa: E402

#: The lines the importer blanks in a BackendBench file (importer.cpp, harness_imports).
_IMPORTER_BLANKED = {
    "import torch",
    "import triton",
    "import triton.language as tl",
    "from triton import language as tl",
}


def backendbench_files(root: Path):
    for path in sorted(root.rglob("*.py")):
        folder = path.parent.name
        if path.name.startswith(f"{folder}_implementation"):
            source = "\n".join(
                "" if line.rstrip(" \t\r") in _IMPORTER_BLANKED else line
                for line in path.read_text().split("\n")
            )
            yield path, source, folder.rstrip("_") or folder, f"{folder}_kernel_impl"


def candidate_files(root: Path):
    for path in sorted(root.glob("*.py")):
        source = path.read_text()
        plain = [
            node.name
            for node in ast.parse(source).body
            if isinstance(node, ast.FunctionDef) and not node.decorator_list
        ]
        if plain:
            yield path, source, path.stem.split(".")[0], plain[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--profile", default="cuda")
    parser.add_argument("--show", action="append", default=[], help="print violations of RULE")
    args = parser.parse_args()
    profile = load_profile(args.profile)
    print("| set | files | refused by lint | refused before test | rules (files) |")
    print("|---|---|---|---|---|")
    for root in args.dirs:
        bb = list(backendbench_files(root))
        files = bb or list(candidate_files(root))
        linted = refused = 0
        rules: Counter[str] = Counter()
        for path, source, op, wrapper in files:
            report = lint_source(source, op=op, wrapper=wrapper, profile=profile)
            broken = {v["rule"] for v in report["violations"]}
            if report["syntax_error"]:
                broken.add("syntax_error")
            linted += bool(broken)
            refused += bool(broken & profile.refused_before_test)
            rules.update(broken)
            for v in report["violations"]:
                if v["rule"] in args.show:
                    where = path.relative_to(root)
                    print(f"  {where}:{v['line']} {v['rule']}: {v['text']}", file=sys.stderr)
        listed = ", ".join(f"{rule} ({n})" for rule, n in rules.most_common())
        print(f"| {root} | {len(files)} | {linted} | {refused} | {listed or '-'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
