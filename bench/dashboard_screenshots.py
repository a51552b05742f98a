"""Screenshots of the Grafana dashboard's queries, graphed by a real Prometheus scraping a real daemon.

    python bench/dashboard_screenshots.py [--opforge build/opforge] [--scrape-s 5] [--out DIR]

Grafana has no package in Debian or PyPI, so it cannot be installed here to show the dashboard
itself. This shows the next best thing: the dashboard's own queries (ops/grafana/dashboards/
opforge.json, with its variables and intervals filled in as Grafana fills them) graphed by a real
Prometheus that scraped a real `opforge serve` while it worked. The stack is tests/
dashboard_stack.py's, the one the dashboard's test (tests/test_dashboard_prometheus.py) uses; this
runs it longer:

  1. the demo campaign (abs, neg, relu, sigmoid on every default dtype, 7 recorded LLM answers);
  2. `opforge import` of config/examples and worker/tests/corpus/honest (the library grows);
  3. `opforge revalidate` of the library on the worker's toolchain (validations owed, then paid);
  4. an idle tail, so that the rates fall back.

Then every panel target is evaluated over the run; for each row of the dashboard, Prometheus's own
graph page (/classic/graph, the UI Debian's package ships) draws the row's panels that have data,
one graph per target, and headless Chromium screenshots it to DIR/dashboard-<row>.png (default
DIR: bench/results). A target that stayed at 0 throughout is left out of the pictures: the graph
page draws that line on its bottom edge, where it cannot be told from an empty graph.
DIR/dashboard.md says what each picture shows, and which targets were flat at 0 or empty.
Run it with PYTHONPATH=worker, so that the local workers import this checkout's worker.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from dashboard_stack import (
    Daemon,
    Prometheus,
    StackError,
    dashboard,
    evaluate,
    opforge_binary,
    prometheus_binary,
    wait_until,
)

IMPORTS = ["config/examples", "worker/tests/corpus/honest"]
# Classic graph page: the query form and controls above a graph, then one legend line per series.
GRAPH_PX, LEGEND_LINE_PX, PAGE_PX = 720, 27, 100


def rows(board: dict) -> list[tuple[str, list[str]]]:
    """The dashboard's rows in order, each with the titles of the panels under it."""
    out: list[tuple[str, list[str]]] = []
    for panel in board["panels"]:
        if panel["type"] == "row":
            out.append((panel["title"], []))
        else:
            out[-1][1].append(panel["title"])
    return out


def moved(answer) -> bool:
    """Whether a series of `answer` has a number other than 0."""
    return any(
        math.isfinite(float(v)) and float(v) != 0 for s in answer.series for _, v in s["values"]
    )


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def screenshot(url: str, shot: Path, height: int) -> None:
    chromium = os.environ.get("OPFORGE_CHROMIUM", "chromium")
    # The page fetches its data and draws with JavaScript: virtual time lets that finish first.
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size=1400,{height}", "--virtual-time-budget=20000",
         f"--screenshot={shot}", url],
        check=True,
        capture_output=True,
        timeout=180,
    )  # fmt: skip
    if not shot.exists() or shot.stat().st_size < 1000:
        raise StackError(f"chromium wrote no screenshot of {url}")


def timed(what: str, steps: list[str], started: float, action) -> None:
    begun = time.monotonic()
    action()
    steps.append(
        f"{what}: {time.monotonic() - begun:.0f} s (from {begun - started:.0f} s into the run)"
    )
    print(steps[-1], flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--opforge", type=Path, default=None, help="default: build/opforge")
    parser.add_argument("--python", default=sys.executable, help="the workers' interpreter")
    parser.add_argument("--scrape-s", type=int, default=5, help="Prometheus's scrape interval")
    parser.add_argument("--idle-s", type=int, default=60, help="the quiet tail after the work")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="opforge-dashboard-"))
    daemon = Daemon(work, args.opforge or opforge_binary(), args.python)
    steps: list[str] = []
    try:
        prometheus = Prometheus(work, daemon.metrics, args.scrape_s)
        try:
            started = time.monotonic()

            def client(*command: str) -> None:
                done = daemon.client(*command, timeout=3600)
                if done.returncode != 0:
                    raise StackError(f"opforge {' '.join(command)}: {done.stdout}{done.stderr}")

            timed("local workers connected", steps, started, daemon.wait_for_workers)
            # The daemon's counters start at 0; a scrape of them before the work lets rate() and
            # increase() see every step of it, however fast the campaign runs.
            connected = time.time()
            timed(
                "a scrape of the idle daemon",
                steps,
                started,
                lambda: wait_until(
                    "a scrape of the idle daemon",
                    lambda: prometheus.scraped_after(connected),
                    60,
                    prometheus.process,
                    prometheus.log,
                ),
            )
            timed("demo campaign (4 operators)", steps, started, lambda: client("run"))
            for kernel_set in IMPORTS:
                timed(
                    f"import {kernel_set}",
                    steps,
                    started,
                    lambda s=kernel_set: client(
                        "import", str(ROOT / s), "--layout", "candidates", "--timeout-ms", "3600000"
                    ),
                )

            def revalidated() -> None:
                # The JSON reply: the text table throws on a toolchain version that is null, as
                # some of an interpreter worker's are (print_revalidation in apps/opforge.cpp).
                client("revalidate", "--json")

                def paid() -> bool:
                    toolchains = daemon.status()["maintenance"]["toolchains"]
                    return all(t["owed"] == 0 and t["running"] == 0 for t in toolchains)

                wait_until("re-validation done", paid, 3600, daemon.process, daemon.log)

            timed("revalidate the library", steps, started, revalidated)
            timed("idle tail", steps, started, lambda: time.sleep(args.idle_s))
            end = time.time()
            wait_until(
                "a scrape after the run",
                lambda: prometheus.scraped_after(end),
                60,
                prometheus.process,
                prometheus.log,
            )
            board = dashboard()
            answers = evaluate(board, prometheus, prometheus.started, time.time())
            errors = [f"{a.target.panel}: {a.error}" for a in answers if a.error]
            if errors:
                print("queries Prometheus refused:\n  " + "\n  ".join(errors), file=sys.stderr)
                return 1

            range_s = math.ceil(time.time() - prometheus.started)
            args.out.mkdir(parents=True, exist_ok=True)
            shots = []
            for row, titles in rows(board):
                drawn = [a for a in answers if a.target.panel in titles and moved(a)]
                if not drawn:
                    continue
                shot = args.out / f"dashboard-{slug(row)}.png"
                height = PAGE_PX + sum(GRAPH_PX + LEGEND_LINE_PX * len(a.series) for a in drawn)
                screenshot(prometheus.graph_url([a.query for a in drawn], range_s), shot, height)
                shots.append((row, shot, drawn))
                print(f"wrote {shot}", flush=True)
            flat = [a for a in answers if a.finite() and not moved(a)]
            empty = [a for a in answers if not a.finite()]
            write_report(args, daemon, steps, range_s, shots, flat, empty)
        finally:
            prometheus.stop()
    finally:
        daemon.stop()
    # Kept after a failure: the error names the log in it.
    shutil.rmtree(work, ignore_errors=True)
    return 0


def write_report(args, daemon, steps, range_s, shots, flat, empty) -> None:
    version = subprocess.run(
        [prometheus_binary(), "--version"], capture_output=True, text=True
    ).stdout.splitlines()[0]
    lines = [
        "# The dashboard's queries on a real Prometheus",
        "",
        "Grafana is not installable here (no Debian or PyPI package), so these are not screenshots",
        "of Grafana. They are the dashboard's own queries (ops/grafana/dashboards/opforge.json, its",
        "`$instance` and `$__rate_interval` filled in the way Grafana fills them) graphed by a real",
        "Prometheus (its classic graph page) that scraped a real `opforge serve` every",
        f"{args.scrape_s} s while it worked, photographed by headless Chromium. Each graph is one",
        "panel target; its legend shows Prometheus's label sets, not the panel's legendFormat.",
        f"Prometheus: `{version}`.",
        "Grafana's schema is checked by worker/tests/test_grafana_dashboard.py, and every query by",
        "tests/test_dashboard_prometheus.py (ctest Dashboard.QueriesOnARealPrometheus).",
        "",
        "Reading the graphs: the graph page scales its y axis to the data, so a value that is",
        "constant but for float rounding (Request latency p95: the replayed answers all fall in one",
        "bucket, so the interpolated p95 does not move) is drawn as a zig-zag. The daemon creates",
        "its known counter series at 0 and Prometheus scrapes it once before the work, so rate()",
        "and increase() see every step of it.",
        "",
        "Reproduce (3 minutes on an idle 2-core machine, 10 on a busy one; the interpreter device):",
        "",
        "    ninja -C build opforge",
        "    PYTHONPATH=worker .venv/bin/python bench/dashboard_screenshots.py",
        "",
        f"The run ({range_s} s of scrapes; daemon {daemon.version}, one interpreter device worker,",
        "one lint worker, the demo's recorded answers as the LLM endpoint):",
        "",
        *[f"- {step}" for step in steps],
        "",
    ]
    for row, shot, drawn in shots:
        lines += [
            f"## {row}: `{shot.name}`",
            "",
            "| panel | query (as sent) | series |",
            "|---|---|---|",
        ]
        lines += [
            f"| {a.target.panel} {a.target.ref} | `{a.query.replace('|', chr(92) + '|')}` | {len(a.series)} |"
            for a in drawn
        ]
        lines.append("")
    lines += [
        "## Targets at 0 throughout (left out of the pictures)",
        "",
        "Gauges and rates of things that did not happen at a scrape: the breaker stayed closed, no",
        "request was in flight at a scrape, no log needed summarizing, the store held no write back,",
        "no endpoint went down, no replay server restarted, no job was requeued.",
        "",
        *[f"- {a.target.panel} {a.target.ref}: `{a.query}`" for a in flat],
        "",
        "## Targets with no series in this run",
        "",
        "Failures that did not happen here (nothing retried, refused, malformed or regressed):",
        "",
        *[f"- {a.target.panel} {a.target.ref}: `{a.query}`" for a in empty],
        "",
    ]
    (args.out / "dashboard.md").write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
