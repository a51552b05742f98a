"""The command line as the daemon's supervisor and users run it: real processes."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from opforge_worker import protocol, toolchain

WORKER_DIR = Path(__file__).resolve().parents[1]


def worker_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "opforge_worker", *args]


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        worker_command(*args),
        cwd=WORKER_DIR,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def test_serve_says_hello_and_sigterm_says_goodbye_and_exits_zero(daemon):
    process = subprocess.Popen(
        worker_command(
            "serve",
            "--connect",
            daemon.endpoint,
            "--device",
            "none",
            "--slots",
            "2",
            "--role",
            "lint",
        ),
        cwd=WORKER_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        identity, hello = daemon.receive_type("hello", timeout_s=120)
        assert hello["role"] == "lint"
        assert hello["device_kind"] == "none"
        assert hello["jobs"] == ["lint"]
        assert hello["slots"] == 2
        assert hello["pid"] == process.pid
        assert hello["toolchain"] == toolchain.collect("none")
        assert hello["fingerprint"] == toolchain.fingerprint(hello["toolchain"])
        daemon.send(identity, "welcome", heartbeat_ms=50, liveness=1000)
        # On a loaded host the worker may give up waiting for the welcome and say hello again.
        while (reply := daemon.receive())[1].type != "heartbeat":
            if reply[1].type == "hello":
                daemon.send(reply[0], "welcome", heartbeat_ms=50, liveness=1000)
        process.send_signal(signal.SIGTERM)
        _, goodbye = daemon.receive_type("goodbye")
        assert goodbye["reason"] == "Terminated"
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_serve_refuses_a_device_role_without_a_device():
    done = run_cli(
        "serve",
        "--connect",
        "tcp://127.0.0.1:1",
        "--device",
        "none",
        "--slots",
        "1",
        "--role",
        "device",
    )
    assert done.returncode == 2
    assert "role 'device' needs a device kind" in done.stderr


def test_serve_slots_default_to_auto_which_is_eight_on_cuda_and_one_elsewhere():
    from opforge_worker.__main__ import parser, resolve_slots

    def slots(*given: str, device: str = "none") -> int:
        args = parser().parse_args(
            ["serve", "--connect", "tcp://127.0.0.1:1", "--device", device, "--role", "lint"]
            + list(given)
        )
        return resolve_slots(args.slots, args.device)

    assert slots() == 1
    assert slots(device="interpreter") == 1
    assert slots(device="cuda") == 8
    assert slots("--slots", "auto", device="cuda") == 8
    assert slots("--slots", "3", device="cuda") == 3


def test_serve_refuses_slots_that_are_no_count():
    for bad in ("0", "-2", "many"):
        done = run_cli(
            "serve", "--connect", "tcp://127.0.0.1:1", "--device", "none", "--role", "lint",
            "--slots", bad,
        )  # fmt: skip
        assert done.returncode == 2
        assert f"argument --slots: must be an integer >= 1 or auto, got '{bad}'" in done.stderr


def test_serve_names_a_bad_endpoint():
    done = run_cli(
        "serve", "--connect", "tcp://nowhere", "--device", "none", "--slots", "1", "--role", "lint"
    )
    assert done.returncode == 2
    assert "endpoint 'tcp://nowhere'" in done.stderr


def test_catalog_prints_by_category_and_writes_json(tmp_path):
    out = tmp_path / "catalog.json"
    done = run_cli(
        "catalog",
        "--ops",
        "exp,fft.fft",
        "--json",
        str(out),
        env={"OPFORGE_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert done.returncode == 0, done.stderr
    assert "elementwise (1)" in done.stdout
    assert "fft.fft: FFT operator" in done.stdout
    written = json.loads(out.read_text())
    assert [op["name"] for op in written["operators"]] == ["exp"]
    assert written["excluded"] == [{"name": "fft.fft", "variant": "", "reason": "FFT operator"}]


def test_fingerprint_prints_the_protocol_fingerprint():
    done = run_cli("fingerprint", "--device", "interpreter")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["fingerprint"] == toolchain.fingerprint(printed["toolchain"])
    assert len(printed["fingerprint"]) == 16


def test_hello_fields_satisfy_the_daemon_schema(daemon):
    # Decoding with the daemon-side schema already happened in receive_type; this pins the keys.
    assert {field.name for field in dataclasses.fields(protocol.WORKER_TO_DAEMON["hello"])} == {
        "worker_id",
        "role",
        "device_kind",
        "device_name",
        "slots",
        "jobs",
        "toolchain",
        "fingerprint",
        "host",
        "pid",
        "conformance",
    }


def test_a_device_worker_says_hello_with_its_conformance_report(daemon, tmp_path):
    # The real probes on the interpreter, in a fresh cache: the report the daemon keeps and lists.
    process = subprocess.Popen(
        worker_command(
            "serve", "--connect", daemon.endpoint, "--device", "interpreter", "--role", "device"
        ),
        cwd=WORKER_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OPFORGE_CACHE_DIR": str(tmp_path)},
    )
    try:
        _, hello = daemon.receive_type("hello", timeout_s=300)
        report = hello["conformance"]
        assert report["fingerprint"] == hello["fingerprint"]
        assert report["device_kind"] == "interpreter"
        assert report["error"] == ""
        kept = json.loads((tmp_path / "conformance" / f"{hello['fingerprint']}.json").read_text())
        assert report == kept  # what the worker found is what it sent
        assert report["probes_run"] >= len(report["defects"]) > 0
        negate = {d["probe"]: d for d in report["defects"]}["negate_bfloat16"]
        assert negate["expression"] == "-x" and negate["dtype"] == "bfloat16"
        assert negate["workaround"] == "(-x.to(tl.float32)).to(tl.bfloat16)"
    finally:
        process.kill()
        process.wait()


def test_lint_subcommand_reports_violations_and_exit_codes(tmp_path):
    example = WORKER_DIR.parent / "config" / "examples" / "exp.py"
    clean = run_cli("lint", str(example), "--profile", "cuda")
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.strip().endswith(": ok")

    cheat = tmp_path / "exp.py"
    cheat.write_text('def exp_wrapper(x):\n    return eval("torch.exp")(x)\n')
    caught = run_cli("lint", str(cheat), "--profile", "interpreter", "--json")
    assert caught.returncode == 1
    rules = [violation["rule"] for violation in json.loads(caught.stdout)["violations"]]
    assert "forbidden_builtin" in rules
