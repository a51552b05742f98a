"""The Grafana dashboard's queries against a real Prometheus scraping a real daemon.

`opforge serve` (with its interpreter device worker and lint worker) runs two small demo campaigns
while a real Prometheus scrapes it every second with ops/prometheus/alerts.yml loaded. Every
panel target is then sent to Prometheus as Grafana would send it (dashboard_stack.py): each must
evaluate, the panels of the parts that worked must draw series with the values the campaign left,
and the panels of failures must stay empty in a run where nothing failed. test_grafana_dashboard.py
checks the JSON against Grafana's schema; this checks that the queries mean what the panels say.
"""

import math
import sys
import time

import pytest
import yaml
from dashboard_stack import (
    ALERTS,
    JOB,
    Daemon,
    Prometheus,
    dashboard,
    evaluate,
    opforge_binary,
    prometheus_binary,
    regex_escape,
    targets,
    variable_values,
    wait_until,
)
from opforge_worker.contract import JOB_KINDS

# Two campaigns of one demo operator each, on one dtype, keep the run short: `neg` passes at once,
# `abs` fails at run time first. A scrape between them gives every rate and latency panel a second
# point to draw from, however fast the machine runs one campaign.
OPERATORS = ["neg", "abs"]
SCRAPE_S = 1

# Panels of failures, flat at 0 or empty in a run where nothing fails, and why nothing fails here.
QUIET = {
    "Malformed frames": "only the daemon's own workers talk to its workers port",
    "Retries per second": "the demo endpoint answers every request",
    "Store errors per hour": "the store's disk is healthy",
    "Regressions by device kind": "one toolchain only",
    "Speed regressions by device kind": "one toolchain only",
    "Workers refused by CURVE": "no CURVE allow-list is configured",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    # Before a daemon is started for nothing: the test fails, naming it, without Prometheus.
    prometheus_binary()
    work = tmp_path_factory.mktemp("dashboard")
    daemon = Daemon(work, opforge_binary(), sys.executable)
    try:
        prometheus = Prometheus(work, daemon.metrics, SCRAPE_S)
        try:
            workers = daemon.wait_for_workers()
            for operator in OPERATORS:
                ran = daemon.client("run", operator, "--dtypes", "float32")
                assert ran.returncode == 0, ran.stdout + ran.stderr
                # The campaign's last state, and the library's as maintenance polls it, must be
                # scraped.
                ended = time.time()
                wait_until(
                    "a scrape after the campaign",
                    lambda ended=ended: prometheus.scraped_after(ended + SCRAPE_S),
                    30,
                    prometheus.process,
                    prometheus.log,
                )
            board = dashboard()
            yield {
                "daemon": daemon,
                "prometheus": prometheus,
                "workers": workers,
                "board": board,
                "answers": evaluate(board, prometheus, prometheus.started, time.time()),
            }
        finally:
            prometheus.stop()
    finally:
        daemon.stop()


def by_panel(answers) -> dict[str, list]:
    panels: dict[str, list] = {}
    for answer in answers:
        panels.setdefault(answer.target.panel, []).append(answer)
    return panels


def last(answer, **labels) -> float:
    """The last value of the one series of `answer` whose labels include `labels`."""
    (series,) = [s for s in answer.series if labels.items() <= s["metric"].items()]
    return float(series["values"][-1][1])


def test_the_instance_variable_selects_the_scraped_daemon(stack):
    values = variable_values(stack["board"], stack["prometheus"])
    assert values == {"instance": regex_escape(stack["daemon"].metrics)}
    # Grafana's escaping: the dots of the address match dots only.
    assert values["instance"] == stack["daemon"].metrics.replace(".", "\\\\.")


def test_every_panel_query_evaluates(stack):
    answers = stack["answers"]
    assert len(answers) == len(targets(stack["board"]))
    assert {a.target.panel: a.error for a in answers if a.error} == {}
    # Every variable and Grafana interval was replaced before Prometheus saw the query.
    assert [a.query for a in answers if "$" in a.query] == []


def test_panels_of_the_parts_that_worked_draw_series(stack):
    panels = by_panel(stack["answers"])
    assert set(QUIET) <= set(panels)
    blank = [
        f"{a.target.panel} {a.target.ref}: {a.query}"
        for title, answers in panels.items()
        if title not in QUIET
        for a in answers
        if not a.finite()
    ]
    assert blank == []
    drawn = {
        title: [a.moved() for a in answers] for title, answers in panels.items() if title in QUIET
    }
    assert drawn == {title: [[]] for title in QUIET}


def test_the_panels_show_what_the_campaign_did(stack):
    panels = {title: answers[0] for title, answers in by_panel(stack["answers"]).items()}
    operators = len(OPERATORS)
    campaigns = {s["metric"]["campaign"] for s in panels["Operators per campaign"].series}
    assert len(campaigns) == operators
    for campaign in campaigns:
        assert last(panels["Operators per campaign"], campaign=campaign, state="succeeded") == 1
        assert last(panels["Operators per campaign"], campaign=campaign, state="failed") == 0
    assert last(panels["Kernels by device kind"], device_kind="interpreter") == operators
    (device,) = [w for w in stack["workers"] if w["role"] == "device"]
    passing = panels["Kernels passing per toolchain"]
    assert last(passing, device_kind="interpreter", fingerprint=device["fingerprint"]) == operators
    assert last(panels["Validations pending per toolchain"], device_kind="interpreter") == 0
    assert last(panels["Workers"], kind="interpreter", state="idle") == 1
    assert last(panels["Workers"], kind="none", state="idle") == 1
    assert last(panels["Sessions ended per hour"], outcome="SUCCESS") > 0
    jobs = {s["metric"]["kind"] for s in panels["Jobs per second"].series}
    assert jobs == set(JOB_KINDS)  # every kind's series starts at 0, the unused ones too
    assert {s["metric"]["kind"] for s in panels["Job latency p95"].finite()} >= {"lint", "test"}
    requests = panels["Requests per second"]
    assert requests.moved() == [{"endpoint": "demo", "outcome": "ok"}]
    # Every outcome's series was there from the endpoint's start, at 0.
    assert len(requests.series) > 1
    assert last(panels["LLM endpoints down"], endpoint="demo") == 0
    assert 0 < last(panels["Write latency p99"]) < 10
    (build,) = panels["Build"].series
    assert build["metric"]["version"] == stack["daemon"].version
    assert build["metric"]["instance"] == stack["daemon"].metrics
    assert build["metric"]["job"] == JOB
    uptime = panels["Uptime"].series[0]["values"]
    assert float(uptime[-1][1]) > float(uptime[0][1])
    assert all(math.isfinite(float(v)) for _, v in uptime)


def test_the_alert_rules_are_loaded_healthy_and_quiet(stack):
    written = yaml.safe_load(ALERTS.read_text())
    names = [rule["alert"] for group in written["groups"] for rule in group["rules"]]
    groups = stack["prometheus"].api("rules", type="alert")["groups"]
    assert {g["file"] for g in groups} == {str(ALERTS)}
    loaded = [rule for group in groups for rule in group["rules"]]
    assert [rule["name"] for rule in loaded] == names
    # Evaluated, without error, and none fires for a daemon where nothing went wrong.
    assert {r["name"]: (r["health"], r.get("lastError", "")) for r in loaded} == {
        name: ("ok", "") for name in names
    }
    assert {r["name"]: r["state"] for r in loaded} == {name: "inactive" for name in names}
