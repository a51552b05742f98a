"""The real worker process serving real jobs (harness, catalog, linter) to a ROUTER daemon."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from fake_daemon import FakeDaemon

WORKER_DIR = Path(__file__).resolve().parents[1]
HONEST_EXP = WORKER_DIR / "tests" / "corpus" / "honest" / "exp.py"
DEVICE = os.environ.get("OPFORGE_TEST_DEVICE", "interpreter")


def exp_request(source: str) -> dict:
    return {
        "op": "exp",
        "variant": "",
        "source": source,
        "wrapper": "exp",
        "dtypes": ["float32"],
        "mode": "all",
        "seed": 0,
        "timeout_s": 120.0,
    }


# The honest exp with a wrapper that never returns.
SLOW_EXP = HONEST_EXP.read_text().replace(
    "def exp(input):", "def exp(input):\n    while True:\n        pass\n"
)


def serving(daemon: FakeDaemon, cache: Path, *args: str):
    process = subprocess.Popen(
        [sys.executable, "-m", "opforge_worker", "serve", "--connect", daemon.endpoint, *args],
        cwd=WORKER_DIR,
        env={**os.environ, "OPFORGE_CACHE_DIR": str(cache)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    identity, hello = daemon.receive_type("hello", timeout_s=300)
    daemon.welcomed_with = {"heartbeat_ms": 200, "liveness": 1000}
    daemon.send(identity, "welcome", **daemon.welcomed_with)
    return process, identity, hello


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_device_worker_runs_test_and_catalog_jobs_and_cancels(daemon, tmp_path):
    process, identity, hello = serving(
        daemon, tmp_path, "--device", DEVICE, "--slots", "1", "--role", "device"
    )
    try:
        assert hello["jobs"] == ["backend", "benchmark", "catalog", "test"]
        request = exp_request(HONEST_EXP.read_text())
        daemon.send_job(identity, "t1", "test", request)
        _, result = daemon.receive_type("result", timeout_s=600)
        assert (result["job_id"], result["status"]) == ("t1", "done")
        assert result["payload"]["outcome"] == "pass"
        assert result["payload"]["tests_passed"] == result["payload"]["tests_run"] > 0

        daemon.send_job(identity, "c1", "catalog", {"filters": {"ops": ["exp", "fft.fft"]}})
        _, result = daemon.receive_type("result", timeout_s=600)
        assert (result["job_id"], result["status"]) == ("c1", "done")
        assert [op["name"] for op in result["payload"]["operators"]] == ["exp"]
        assert result["payload"]["excluded"][0]["reason"] == "FFT operator"

        # A candidate that never returns: cancelled, and the slot serves the next job.
        daemon.send_job(identity, "t2", "test", {**request, "source": SLOW_EXP, "timeout_s": 600.0})
        daemon.receive_type("heartbeat")
        daemon.send(identity, "cancel", job_id="t2")
        _, result = daemon.receive_type("result", timeout_s=600)
        assert (result["job_id"], result["status"]) == ("t2", "cancelled")
        daemon.send_job(identity, "t3", "test", request)
        _, result = daemon.receive_type("result", timeout_s=600)
        assert (result["job_id"], result["status"]) == ("t3", "done")
        assert result["payload"]["outcome"] == "pass"

        daemon.send_job(identity, "bad", "test", {"op": "exp"})
        _, result = daemon.receive_type("result", timeout_s=600)
        assert (result["job_id"], result["status"]) == ("bad", "done")
        assert result["payload"]["outcome"] == "harness_error"
        assert "missing key 'source'" in result["payload"]["failure"]["message"]
    finally:
        stop(process)


def test_device_worker_runs_a_benchmark_job(daemon, tmp_path):
    process, identity, _ = serving(
        daemon, tmp_path, "--device", DEVICE, "--slots", "2", "--role", "device"
    )
    try:
        request = {
            "op": "exp",
            "source": HONEST_EXP.read_text(),
            "wrapper": "exp",
            "dtypes": ["float32"],
            "seed": 0,
            "timeout_s": 120.0,
        }
        daemon.send_job(identity, "b1", "benchmark", request)
        _, result = daemon.receive_type("result", timeout_s=600)
        assert (result["job_id"], result["status"]) == ("b1", "done")
        payload = result["payload"]
        assert (payload["outcome"], payload["baseline"]) == ("pass", "aten")
        sources = [timing["source"] for timing in payload["timings"]]
        assert "ladder:4096" in sources and any(s.startswith("opinfo:") for s in sources)
        assert all(timing["repetitions"] >= 4 for timing in payload["timings"])
        assert payload["geomean_speedup"] > 0

        batched = (WORKER_DIR / "tests" / "corpus" / "timing" / "batched.py").read_text()
        daemon.send_job(identity, "b2", "benchmark", {**request, "source": batched})
        _, result = daemon.receive_type("result", timeout_s=600)
        assert (result["job_id"], result["status"]) == ("b2", "done")
        assert result["payload"]["outcome"] == "cheat_detected"
        assert result["payload"]["timings"] == []
    finally:
        stop(process)


def test_lint_worker_runs_lint_jobs(daemon, tmp_path):
    process, identity, hello = serving(
        daemon, tmp_path, "--device", "none", "--slots", "1", "--role", "lint"
    )
    try:
        assert (hello["role"], hello["jobs"]) == ("lint", ["lint"])
        daemon.send_job(
            identity,
            "l1",
            "lint",
            {
                "source": "import os\n" + HONEST_EXP.read_text(),
                "op": "exp",
                "wrapper": "exp",
                "profile": "interpreter",
            },
        )
        _, result = daemon.receive_type("result", timeout_s=300)
        assert (result["job_id"], result["status"]) == ("l1", "done")
        assert result["payload"]["ok"] is False
        assert result["payload"]["violations"][0]["line"] == 1
        daemon.send_job(identity, "l2", "lint", {"source": "x = 1\n", "op": "exp"})
        _, result = daemon.receive_type("result", timeout_s=300)
        assert (result["status"], result["error"]) == (
            "failed",
            "ContractError: lint_request: missing key 'wrapper'",
        )
    finally:
        stop(process)
