"""The Grafana dashboard and the alert rules against what the daemon really exports.

Grafana has no server package in Debian or PyPI, so the dashboard is checked against Grafana's
own schema types (grafana-foundation-sdk, generated from Grafana's schemas): a field they do not
know is dropped on the round trip, and every query must decode as a Prometheus query. Every metric
a panel or an alert names must be one messages/metrics.cpp registers.
"""

import json
import re
from pathlib import Path

import pytest
import yaml
from grafana_foundation_sdk.cog import plugins
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard, prometheus

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "ops/grafana/dashboards/opforge.json"
PROVISIONING = ROOT / "ops/grafana/provisioning/dashboards/opforge.yaml"

# Histograms are scraped as these three series, counters and gauges under their own name.
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
# PromQL words that look like metric names: functions, aggregations, keywords and label names.
IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def exported_metrics() -> set[str]:
    source = (ROOT / "messages/metrics.cpp").read_text()
    names: set[str] = set()
    registered = r"prometheus::Build(\w+)\(\), \*registry_,\s*\"(opforge_\w+)\""
    for kind, name in re.findall(registered, source):
        names.add(name)
        if kind == "Histogram":
            names.update(name + suffix for suffix in HISTOGRAM_SERIES)
    return names


def metrics_in(expr: str) -> set[str]:
    # Label matchers, strings and templates name no metric.
    bare = re.sub(r"\{[^}]*\}|\"[^\"]*\"|\$\w+", " ", expr)
    return {word for word in IDENTIFIER.findall(bare) if word.startswith("opforge_")}


@pytest.fixture(scope="module")
def board() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_registered_metrics_are_found():
    # The parser must see the families, or the subset checks below would pass on nothing.
    names = exported_metrics()
    assert {"opforge_workers", "opforge_jobs_total", "opforge_campaign_operators"} <= names
    assert "opforge_job_latency_seconds_bucket" in names
    assert "opforge_queue_depth_bucket" not in names


def test_dashboard_survives_grafanas_schema(board):
    plugins.register_default_plugins()
    model = dashboard.Dashboard.from_json(board)
    again = json.loads(JSONEncoder(sort_keys=True).encode(model))
    assert set(board) <= set(again)
    assert again["uid"] == "opforge"
    assert len(again["panels"]) == len(board["panels"])
    for mine, typed, decoded in zip(board["panels"], model.panels, again["panels"], strict=True):
        assert set(mine) <= set(decoded), mine["title"]
        if mine["type"] == "row":
            assert isinstance(typed, dashboard.RowPanel)
            continue
        assert isinstance(typed, dashboard.Panel)
        assert typed.type_val == "timeseries"
        assert all(isinstance(t, prometheus.Dataquery) for t in typed.targets), mine["title"]
        assert [t["expr"] for t in decoded["targets"]] == [t["expr"] for t in mine["targets"]]


def test_dashboard_shows_every_part_of_the_daemon(board):
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows[:5] == ["Campaigns", "Devices", "LLM endpoints", "Store", "Library and regressions"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    # Panels of one row do not overlap: Grafana would push them around on load.
    cells = set()
    for panel in board["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))


def test_dashboard_queries_name_exported_metrics(board):
    exported = exported_metrics()
    used: set[str] = set()
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            names = metrics_in(target["expr"])
            assert names, f"{panel['title']}: {target['expr']}"
            assert names <= exported, f"{panel['title']}: not exported: {names - exported}"
            used |= names
    # Every family the daemon exports has a panel (histograms through their buckets).
    families = {n for n in exported if not n.endswith(HISTOGRAM_SERIES)}
    plain = {n.removesuffix("_bucket") for n in used}
    assert families - plain == set()


def test_alert_rules_name_exported_metrics():
    rules = yaml.safe_load((ROOT / "ops/prometheus/alerts.yml").read_text())
    exported = exported_metrics()
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert {"OpforgeCampaignNoProgress", "OpforgeRegression", "OpforgeRevalidationStuck"} <= {
        rule["alert"] for rule in alerts
    }
    for rule in alerts:
        names = metrics_in(rule["expr"])
        assert names <= exported, f"{rule['alert']}: not exported: {names - exported}"


def test_provisioning_reads_the_dashboard_from_files():
    config = yaml.safe_load(PROVISIONING.read_text())
    assert config["apiVersion"] == 1
    (provider,) = config["providers"]
    assert provider["type"] == "file"
    assert provider["folder"] == "opforge"
    assert Path(provider["options"]["path"]).is_absolute()
