"""A real `opforge serve` scraped by a real Prometheus, and the Grafana dashboard's queries sent
there the way Grafana would send them.

Grafana itself has no package in Debian or PyPI, so what Grafana adds to a query is done here: its
template variables are resolved ($instance from the variable's own label_values() query, $datasource
is the one Prometheus), its built-in intervals are computed as Grafana computes them for a data
source whose scrape interval is set to the Prometheus's, and each target runs as the range query a
time-series panel sends. test_dashboard_prometheus.py (ctest runs it with pytest) asserts on the
answers; bench/dashboard_screenshots.py runs the same stack longer and photographs Prometheus's own
graphs.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "ops/grafana/dashboards/opforge.json"
ALERTS = ROOT / "ops/prometheus/alerts.yml"
# The job name the alert rules select (up{job="opforge"}), as in ops/prometheus/prometheus.yml.
JOB = "opforge"

# Starting the local workers imports torch and triton; on a busy machine that takes a while. The
# bounds only keep a hang from stalling CI.
START_BOUND_S = 180.0
READY_BOUND_S = 30.0


class StackError(RuntimeError):
    """A part of the stack did not start or answer; the message says which and where its log is."""


def opforge_binary() -> Path:
    """The daemon under test: OPFORGE_BINARY (ctest sets its build's), else build/opforge."""
    binary = Path(os.environ.get("OPFORGE_BINARY", ROOT / "build/opforge"))
    if not os.access(binary, os.X_OK):
        raise StackError(
            f"no opforge binary at {binary}: build it (ops/setup.sh) or set OPFORGE_BINARY"
        )
    return binary


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        raise StackError(
            "the prometheus binary is not on PATH (ops/setup.sh installs Debian's prometheus)"
        )
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(what: str, ready, bound_s: float, process: subprocess.Popen, log: Path):
    """Polls `ready` until it gives something true; that value. Fails when `process` exits first."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise StackError(f"{what}: the process exited ({process.returncode}); see {log}")
        value = ready()
        if value:
            return value
        time.sleep(0.2)
    raise StackError(f"{what}: not within {bound_s:.0f} s; see {log}")


class Daemon:
    """`opforge serve` on a fresh data directory with one interpreter device worker and one lint
    worker of `python`, and the demo's recorded answers as its LLM endpoint."""

    def __init__(self, work: Path, binary: Path, python: str) -> None:
        self.binary = binary
        self.data = work / "data"
        self.data.mkdir(parents=True)
        self.config = work / "opforge.yaml"
        # No LLM endpoint configured: campaigns replay config/demo's answers. Private sockets, so
        # that stacks run side by side; the interpreter even where a GPU is, so that the series
        # are the same everywhere. Maintenance meters the kernels passing per toolchain when it
        # polls: every 200 ms, not 5 s, so a scrape a second after a campaign sees its kernels.
        self.config.write_text(
            f"control: {{listen: ''}}\nworkers: {{listen: 'tcp://127.0.0.1:*'}}\n"
            "local_workers:\n  - {role: device, kind: interpreter}\n  - {role: lint, kind: none}\n"
            f"python: {python}\nmaintenance: {{poll_ms: 200}}\n"
        )
        self.log = work / "serve.log"
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [
                    str(self.binary),
                    "serve",
                    "--config",
                    str(self.config),
                    "--data-dir",
                    str(self.data),
                    "--metrics-listen",
                    "127.0.0.1:0",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        status = wait_until(
            "opforge serve answering", self.status, READY_BOUND_S, self.process, self.log
        )
        self.metrics = status["metrics"]
        self.version = status["version"]

    def client(self, *args: str, timeout: float = START_BOUND_S) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.binary), *args, "--config", str(self.config), "--data-dir", str(self.data)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def status(self) -> dict | None:
        done = self.client("status", "--json", timeout=READY_BOUND_S)
        return json.loads(done.stdout) if done.returncode == 0 else None

    def wait_for_workers(self) -> list[dict]:
        def connected():
            workers = json.loads(self.client("workers", "--json").stdout or "{}").get("workers", [])
            roles = {w["role"] for w in workers if w["state"] != "dead"}
            return workers if roles >= {"device", "lint"} else None

        return wait_until(
            "the local workers connecting", connected, START_BOUND_S, self.process, self.log
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.client("shutdown", timeout=READY_BOUND_S)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class PrometheusError(RuntimeError):
    """Prometheus answered with an error (a query that does not parse or evaluate)."""


class Prometheus:
    """A Prometheus scraping one target every `scrape_s` seconds, with the alert rules loaded."""

    def __init__(self, work: Path, target: str, scrape_s: int) -> None:
        self.scrape_s = scrape_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = work / "prometheus.yml"
        config.write_text(
            f"global: {{scrape_interval: {scrape_s}s, evaluation_interval: {scrape_s}s}}\n"
            f"rule_files: [{json.dumps(str(ALERTS))}]\n"
            f"scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n"
            f"      - targets: [{json.dumps(target)}]\n"
        )
        self.log = work / "prometheus.log"
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [
                    prometheus_binary(),
                    f"--config.file={config}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    f"--storage.tsdb.path={work / 'tsdb'}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_until("prometheus ready", self.ready, READY_BOUND_S, self.process, self.log)
        self.started = time.time()

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> dict:
        """The `data` of an HTTP API answer; else PrometheusError in Prometheus's own words."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as refused:
            body = json.load(refused)
        if body.get("status") != "success":
            raise PrometheusError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def scraped_after(self, moment: float) -> bool:
        """Whether a scrape of the target started after `moment` (time.time()) has been stored."""
        result = self.api("query", query=f'timestamp(up{{job="{JOB}"}})')["result"]
        return bool(result) and float(result[0]["value"][1]) > moment

    def graph_url(self, exprs: list[str], range_s: int) -> str:
        """The classic graph page (the UI Debian's package ships) with one graph per expression."""
        params = {}
        for i, expr in enumerate(exprs):
            params |= {f"g{i}.expr": expr, f"g{i}.tab": "0", f"g{i}.range_input": f"{range_s}s"}
        return f"{self.url}/classic/graph?{urllib.parse.urlencode(params)}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# Grafana's side of a query.


def rate_interval_s(interval_s: int, scrape_s: int) -> int:
    """Grafana's $__rate_interval: max($__interval + scrape interval, 4 x scrape interval)."""
    return max(interval_s + scrape_s, 4 * scrape_s)


def interval_s(range_s: float, scrape_s: int, max_data_points: int) -> int:
    """Grafana's $__interval: the range over the panel's data points, no finer than the data
    source's scrape interval (its minimum interval), in whole seconds."""
    return max(scrape_s, math.ceil(range_s / max_data_points))


def regex_escape(value: str) -> str:
    """What Grafana's Prometheus data source does to a multi-value variable's value inside =~"..."
    (prometheusSpecialRegexEscape): regex metacharacters escaped for PromQL's string literal."""
    value = value.replace("\\", "\\\\\\\\")
    return re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m.group(0), value)


def multi_value(values: list[str]) -> str:
    """A multi-value or include-All variable with `values` selected (All with no custom allValue
    selects every option), as Grafana writes it into a Prometheus query."""
    escaped = [regex_escape(v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)|\[\[(\w+)\]\]")


def substitute(expr: str, values: dict[str, str]) -> str:
    """`expr` with every variable replaced; a variable `values` does not know is an error, since
    Grafana would leave it in and Prometheus would refuse the query for a less helpful reason."""

    def one(match: re.Match) -> str:
        name = next(group for group in match.groups() if group)
        if name not in values:
            raise KeyError(f"unknown template variable ${name} in {expr}")
        return values[name]

    return VARIABLE.sub(one, expr)


@dataclass(frozen=True)
class Target:
    panel: str
    ref: str
    expr: str
    legend: str


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def targets(board: dict) -> list[Target]:
    return [
        Target(panel["title"], target["refId"], target["expr"], target.get("legendFormat", ""))
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]


def variable_values(board: dict, prometheus: Prometheus) -> dict[str, str]:
    """The dashboard's own variables, resolved against `prometheus` as Grafana resolves them."""
    values = {}
    for variable in board["templating"]["list"]:
        if variable["type"] == "datasource" and variable["query"] == "prometheus":
            # Any Prometheus data source: this one. Panels name it only by the variable.
            continue
        label_values = re.fullmatch(r"label_values\((\w+), *(\w+)\)", variable["query"]["query"])
        if variable["type"] != "query" or not label_values or not variable["multi"]:
            raise StackError(f"a variable Grafana would resolve otherwise: {variable}")
        metric, label = label_values.groups()
        options = prometheus.api(f"label/{label}/values", **{"match[]": metric})
        if not options:
            raise StackError(f"${variable['name']} has no options: nothing scraped has {metric}")
        values[variable["name"]] = multi_value(options)
    return values


@dataclass
class Answer:
    target: Target
    query: str
    # Prometheus's matrix, [{"metric": {...}, "values": [[t, "v"], ...]}], or its error.
    series: list[dict]
    error: str | None = None

    def finite(self) -> list[dict]:
        """The series Grafana draws something of: those with a number that is not NaN or Inf."""
        return [s for s in self.series if any(math.isfinite(float(v)) for _, v in s["values"])]

    def moved(self) -> list[dict]:
        """The labels of the series that were ever other than 0: the daemon creates its known
        counter series at 0, so a panel of failures holds series that must stay flat."""
        return [s["metric"] for s in self.series if any(float(v) != 0 for _, v in s["values"])]


def evaluate(
    board: dict, prometheus: Prometheus, start: float, end: float, max_data_points: int = 600
) -> list[Answer]:
    """Every target of `board` as the range query a Grafana time-series panel sends over
    [start, end]. 600 data points is a third of a 1920-pixel-wide screen, the panels' width."""
    step = interval_s(end - start, prometheus.scrape_s, max_data_points)
    values = variable_values(board, prometheus) | {
        "__interval": f"{step}s",
        "__rate_interval": f"{rate_interval_s(step, prometheus.scrape_s)}s",
    }
    # Grafana aligns the range to the step, so that a refresh does not shift the points.
    start, end = math.floor(start / step) * step, math.ceil(end / step) * step
    answers = []
    for target in targets(board):
        query = substitute(target.expr, values)
        try:
            data = prometheus.api(
                "query_range", query=query, start=str(start), end=str(end), step=f"{step}s"
            )
        except PrometheusError as refused:
            answers.append(Answer(target, query, [], str(refused)))
            continue
        if data["resultType"] != "matrix":
            answers.append(Answer(target, query, [], f"a {data['resultType']}, not a matrix"))
            continue
        answers.append(Answer(target, query, data["result"]))
    return answers
