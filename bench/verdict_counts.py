"""Verdicts of one worker tree on the project's kernel corpora, and what changed between two trees.

    python bench/verdict_counts.py run --worker DIR --device cuda --json OUT [--jobs N]
    python bench/verdict_counts.py compare BEFORE.json AFTER.json [--markdown OUT.md]

``run`` validates every corpus (CORPORA) with `python -m opforge_worker validate` of the worker
tree DIR (e.g. an older commit's `worker/`, from `git archive COMMIT worker | tar -x -C D`),
``--jobs`` validate processes at once: a corpus directory as it is, on every dtype its operators
support; the wrong kernels on the dtypes where their defect shows (their "Must fail" header line)
and the honest twins on the dtypes they claim ("Claims"), each laid out as validate wants it (one
file per operator, named after it). The same candidate files go to either tree, so a change of
verdict is the judge's. ``compare`` counts the outcomes per corpus of the candidates judged on
both sides, lists every one whose verdict (outcome and failure check) changed, and names those
judged on one side only (a run stopped at a time limit).
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
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

sys.path.insert(0, str(ROOT / "worker" / "tests"))

import corpus_headers  # noqa: E402 (the corpus's header lines; it imports no worker)

#: corpus name -> (its directory, its dtypes: None for all, else from each file's header)
CORPORA = {
    "honest": ("worker/tests/corpus/honest", None),
    "wrong": ("worker/tests/corpus/wrong", lambda path: corpus_headers.must_fail(path).dtypes),
    "wrong_twins": ("worker/tests/corpus/wrong_twins", corpus_headers.claims),
    "examples": ("config/examples", None),
    "bench_library": ("bench/library", None),
    "import_candidates": ("tests/fixtures/import/candidates", None),
}


def layout(corpus: str, into: Path, chunk: int) -> list[tuple[Path, str | None, dict[str, str]]]:
    """The validate calls for ``corpus``: (folder, dtypes or None for all, copied name -> the
    corpus file it came from); a corpus of all dtypes in folders of ``chunk`` files, which
    validate processes judge at once (one process judges its files one after another)."""
    source, dtypes_of = CORPORA[corpus]
    files = sorted((ROOT / source).glob("*.py"))
    if dtypes_of is None:
        calls = []
        for start in range(0, len(files), chunk):
            folder = into / corpus / f"all-{start // chunk}"
            folder.mkdir(parents=True)
            for file in files[start : start + chunk]:
                shutil.copy(file, folder / file.name)
            calls.append((folder, None, {f.name: f.name for f in files[start : start + chunk]}))
        return calls
    # One folder per dtype list, and another where an operator has two defects in the corpus.
    calls: dict[tuple[str, int], dict[str, str]] = {}
    for file in files:
        dtypes = ",".join(dtypes_of(file))
        copied = file.stem.rsplit(".", 1)[0] + ".py"  # <op>.<defect>.py: validate reads the op
        rank = 0
        while copied in calls.setdefault((dtypes, rank), {}):
            rank += 1
        calls[dtypes, rank][copied] = file.name
        folder = into / corpus / f"{dtypes}-{rank}"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(file, folder / copied)
    return [(into / corpus / f"{d}-{r}", d, names) for (d, r), names in calls.items()]


def verdict(result: dict) -> dict:
    failure = result.get("failure") or {}
    message = result.get("error") or failure.get("message") or ""
    return {
        "outcome": result["outcome"],
        "check": failure.get("check", ""),
        "dtype": failure.get("dtype", ""),
        "sample_set": failure.get("sample_set", ""),
        "message": message.strip().splitlines()[0][:200] if message.strip() else "",
        "passed": result.get("tests_passed", 0),
        "run": result.get("tests_run", 0),
    }


def run(args) -> int:
    worker = Path(args.worker).resolve()
    scratch = Path(tempfile.mkdtemp(prefix="verdict-counts-"))
    calls = [
        (corpus, *call) for corpus in args.corpora for call in layout(corpus, scratch, args.chunk)
    ]
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(worker), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        ),
    }
    verdicts: dict[str, dict[str, dict]] = {corpus: {} for corpus in args.corpora}
    pending, running = list(enumerate(calls)), {}
    started = time.monotonic()
    while pending or running:
        while pending and len(running) < args.jobs:
            index, (corpus, folder, dtypes, _) = pending.pop(0)
            command = [
                args.python,
                "-m",
                "opforge_worker",
                "validate",
                str(folder),
                "--device",
                args.device,
                "--json",
                str(scratch / f"{index}.json"),
            ]
            command += ["--dtypes", dtypes] if dtypes else []
            # An older worker's validate has no --jobs: passed only when asked for.
            command += ["--jobs", args.validate_jobs] if args.validate_jobs else []
            with open(scratch / f"{index}.log", "w") as log:  # the child holds its own copy
                running[index] = subprocess.Popen(
                    command, cwd=worker, env=environment, stdout=log, stderr=subprocess.STDOUT
                )
        time.sleep(0.5)
        for index, process in list(running.items()):
            if process.poll() is None:
                continue
            del running[index]
            corpus, folder, dtypes, names = calls[index]
            report = scratch / f"{index}.json"
            if report.exists():
                for result in json.loads(report.read_text())["results"]:
                    verdicts[corpus][names.get(result["file"], result["file"])] = verdict(result)
            else:
                tail = (scratch / f"{index}.log").read_text()[-2000:]
                for name in names.values():
                    verdicts[corpus][name] = {"outcome": "no_report", "message": tail}
            write(args, worker, verdicts, time.monotonic() - started)
            print(
                f"{corpus} {dtypes or 'all'}: {len(names)} in {time.monotonic() - started:.0f}s",
                flush=True,
            )
    return 0


def write(args, worker: Path, verdicts: dict, wall_s: float) -> None:
    """The verdicts so far (after each validate call: a run stopped at a time limit keeps them)."""
    Path(args.json).write_text(
        json.dumps(
            {
                "worker": str(worker),
                "device": args.device,
                "wall_s": round(wall_s, 1),
                "verdicts": verdicts,
            },
            indent=1,
        )
    )


def label(entry: dict) -> str:
    return f"{entry['outcome']}/{entry['check']}" if entry.get("check") else entry["outcome"]


def compare(args) -> int:
    before, after = (json.loads(Path(p).read_text())["verdicts"] for p in (args.before, args.after))
    lines = [
        "| corpus | judged on both sides | before | after | judged on one side only |",
        "|---|---|---|---|---|",
    ]
    changes = []
    for corpus in sorted(set(before) | set(after)):
        old, new = before.get(corpus, {}), after.get(corpus, {})
        both = sorted(set(old) & set(new))
        counts = [
            ", ".join(
                f"{k} {n}" for k, n in sorted(Counter(side[n]["outcome"] for n in both).items())
            )
            for side in (old, new)
        ]
        one_side = [f"{name} (before)" for name in sorted(set(old) - set(new))]
        one_side += [f"{name} (after)" for name in sorted(set(new) - set(old))]
        lines.append(
            f"| {corpus} | {len(both)} | {counts[0] or '-'} | {counts[1] or '-'} "
            f"| {len(one_side)}{': ' + ', '.join(one_side) if 0 < len(one_side) <= 6 else ''} |"
        )
        for name in both:
            was, now = old[name], new[name]
            if label(was) != label(now):
                changes.append(
                    f"| {corpus} | {name} | {label(was)} | {label(now)} | "
                    f"{now.get('message', '').replace('|', '/')} |"
                )
    lines += [
        "",
        "Every verdict that changed:",
        "",
        "| corpus | kernel | before | after | after's message |",
        "|---|---|---|---|---|",
        *changes,
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    running = commands.add_parser("run")
    running.add_argument("--worker", required=True, help="the worker tree (holds opforge_worker)")
    running.add_argument("--device", required=True)
    running.add_argument("--json", required=True)
    running.add_argument("--jobs", type=int, default=4)
    running.add_argument("--chunk", type=int, default=12, help="files per validate process")
    running.add_argument("--python", default=sys.executable)
    running.add_argument(
        "--validate-jobs", help="each validate's --jobs (default: none passed, its own default)"
    )
    running.add_argument("--corpora", nargs="+", default=list(CORPORA), choices=list(CORPORA))
    comparing = commands.add_parser("compare")
    comparing.add_argument("before")
    comparing.add_argument("after")
    comparing.add_argument("--markdown")
    args = parser.parse_args()
    return run(args) if args.command == "run" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
