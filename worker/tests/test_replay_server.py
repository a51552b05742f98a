"""The replay server over real HTTP on loopback: matching, labels, and every fault mode."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from opforge_replay.server import (
    CONTEXT_ERRORS,
    Cassette,
    CassetteError,
    HitLog,
    ReplayServer,
)

WORKER_DIR = Path(__file__).resolve().parents[1]


def answer(text: str) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2},
    }


def write_cassette(path: Path, entries: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


@pytest.fixture
def serve(tmp_path: Path) -> Iterator:
    servers: list[ReplayServer] = []

    def start(
        entries: list[dict], cycle: bool = False, by_answer_index: bool = False
    ) -> ReplayServer:
        cassette = Cassette(write_cassette(tmp_path / "tape.jsonl", entries), cycle=cycle)
        server = ReplayServer(
            ("127.0.0.1", 0),
            cassette,
            hits=HitLog(tmp_path / "hits.jsonl"),
            by_answer_index=by_answer_index,
        )
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def post(
    server: ReplayServer,
    operator: str = "add",
    fault: str = "",
    timeout: float = 10,
    answer_index: str = "",
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=timeout)
    headers = {"Content-Type": "application/json", "X-Opforge-Operator": operator}
    if fault:
        headers["X-Opforge-Fault"] = fault
    if answer_index:
        headers["X-Opforge-Answer"] = answer_index
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    connection.request("POST", "/v1/chat/completions", body, headers)
    response = connection.getresponse()
    payload = response.read()
    connection.close()
    return response.status, dict(response.getheaders()), payload


def test_answers_are_served_per_operator_in_order_and_labelled(serve) -> None:
    server = serve(
        [
            {"operator": "add", "index": 0, "response": answer("first add")},
            {"operator": "mul", "index": 0, "response": answer("first mul")},
            {"operator": "add", "index": 1, "response": answer("second add")},
        ]
    )
    texts = []
    for operator in ("add", "mul", "add"):
        status, headers, payload = post(server, operator)
        assert status == 200
        assert headers["X-Opforge-Recorded"] == "true"
        body = json.loads(payload)
        assert body["system_fingerprint"] == "opforge-replay:tape.jsonl"
        texts.append(body["choices"][0]["message"]["content"])
    assert texts == ["first add", "first mul", "second add"]

    status, _, payload = post(server, "add")
    assert status == 404
    assert "no answer #2 for operator 'add'" in json.loads(payload)["error"]["message"]


def test_by_answer_index_serves_the_answer_asked_for_and_skips_faults(serve, tmp_path) -> None:
    server = serve(
        [
            {"operator": "add", "response": answer("first")},
            {"operator": "add", "fault": "500"},
            {"operator": "add", "status": 0},
            {"operator": "add", "response": answer("second")},
        ],
        by_answer_index=True,
    )

    def text(index: str) -> str:
        status, _, payload = post(server, "add", answer_index=index)
        assert status == 200, payload
        return json.loads(payload)["choices"][0]["message"]["content"]

    # A resumed session asks again for the answer it was waiting for, and gets that one.
    assert [text("1"), text("0"), text("1")] == ["second", "first", "second"]
    status, _, payload = post(server, "add", answer_index="2")
    assert status == 404 and b"no answer #2" in payload
    assert post(server, "add", answer_index="x")[0] == 400
    hits = [json.loads(line) for line in (tmp_path / "hits.jsonl").read_text().splitlines()]
    assert [h["index"] for h in hits] == [1, 0, 1, 2]


def test_cycle_starts_over(serve) -> None:
    server = serve([{"operator": "x", "response": answer("only")}], cycle=True)
    for _ in range(3):
        status, _, payload = post(server, "x")
        assert status == 200 and b"only" in payload


def test_header_faults_consume_no_entry(serve) -> None:
    server = serve([{"operator": "add", "response": answer("kept")}])
    status, headers, _ = post(server, "add", fault="429:3")
    assert status == 429
    assert headers["Retry-After"] == "3"
    status, _, _ = post(server, "add", fault="500")
    assert status == 500
    status, _, payload = post(server, "add")
    assert status == 200 and b"kept" in payload


def test_cassette_entry_faults_script_a_sequence(serve, tmp_path: Path) -> None:
    server = serve(
        [
            {"operator": "add", "fault": "429:0"},
            {"operator": "add", "status": 503, "response": {"error": {"message": "down"}}},
            {"operator": "add", "response": answer("finally")},
        ]
    )
    assert post(server, "add")[0] == 429
    assert post(server, "add")[0] == 503
    status, _, payload = post(server, "add")
    assert status == 200 and b"finally" in payload
    hits = [json.loads(line) for line in (tmp_path / "hits.jsonl").read_text().splitlines()]
    assert [(h["index"], h["fault"]) for h in hits] == [(0, "429:0"), (1, ""), (2, "")]
    assert all(h["operator"] == "add" for h in hits)
    assert hits[0]["t"] <= hits[1]["t"] <= hits[2]["t"]


def test_garbage_and_truncated_are_not_json(serve) -> None:
    server = serve([])
    status, headers, payload = post(server, fault="garbage")
    assert status == 200 and headers["Content-Type"] == "text/html"
    with pytest.raises(json.JSONDecodeError):
        json.loads(payload)
    status, headers, payload = post(server, fault="truncated")
    assert status == 200 and int(headers["Content-Length"]) == len(payload)
    with pytest.raises(json.JSONDecodeError):
        json.loads(payload)


def test_drop_announces_more_than_it_sends(serve) -> None:
    server = serve([])
    with pytest.raises(http.client.IncompleteRead):
        post(server, fault="drop")


def test_recorded_transport_failure_closes_the_connection(serve) -> None:
    server = serve([{"operator": "add", "status": 0, "transport_error": "timeout"}])
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        post(server, "add")


@pytest.mark.parametrize("flavour", sorted(CONTEXT_ERRORS))
def test_context_errors_speak_each_servers_words(serve, flavour: str) -> None:
    server = serve([])
    status, _, payload = post(server, fault=f"context:{flavour}")
    assert status == 400
    assert payload == json.dumps(CONTEXT_ERRORS[flavour]).encode()


def test_slow_delays_and_hang_never_answers(serve) -> None:
    server = serve([])
    started = time.monotonic()
    status, _, _ = post(server, fault="slow:300")
    assert status == 200
    assert time.monotonic() - started >= 0.3
    with pytest.raises(socket.timeout):
        post(server, fault="hang", timeout=0.5)


def test_unknown_fault_and_bad_body_are_client_errors(serve) -> None:
    server = serve([])
    status, _, payload = post(server, fault="meteor")
    assert status == 400 and b"unknown fault mode 'meteor'" in payload
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
    connection.request("POST", "/v1/chat/completions", b"{not json", {})
    response = connection.getresponse()
    assert response.status == 400 and b"bad request body" in response.read()


def test_a_bad_cassette_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"operator": "add"}) + "\n{oops\n")
    with pytest.raises(CassetteError, match="bad.jsonl:2: not JSON"):
        Cassette(path)


def test_command_line_prints_the_port_first(tmp_path: Path) -> None:
    tape = write_cassette(tmp_path / "t.jsonl", [{"operator": "add", "response": answer("cli")}])
    process = subprocess.Popen(
        [sys.executable, "-m", "opforge_replay", "--cassette", str(tape)],
        cwd=WORKER_DIR,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(process.stdout.readline())
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request(
            "POST",
            "/v1/chat/completions",
            json.dumps({"messages": []}),
            {"X-Opforge-Operator": "add"},
        )
        assert b"cli" in connection.getresponse().read()
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0


def gone(pid: int) -> bool:
    """True once `pid` has exited (a zombie waiting for a non-reaping init counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_a_parent_killed_by_sigkill_takes_the_server_with_it(tmp_path: Path) -> None:
    tape = write_cassette(tmp_path / "t.jsonl", [{"operator": "add", "response": answer("x")}])
    # The parent starts the server with its own pid, reports the server's pid and port, and
    # waits to be killed, as a daemon that dies mid-campaign does; like the daemon, it blocks
    # SIGTERM, and its children inherit the mask.
    parent_script = (
        "import os, signal, subprocess, sys, time\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
        "server = subprocess.Popen([sys.executable, '-m', 'opforge_replay',"
        f" '--cassette', {str(tape)!r}, '--parent-pid', str(os.getpid())],"
        " stdout=subprocess.PIPE, text=True)\n"
        "print(server.pid, server.stdout.readline().strip(), flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_script], cwd=WORKER_DIR, stdout=subprocess.PIPE, text=True
    )
    try:
        server_pid, port = map(int, parent.stdout.readline().split())
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass
        assert not gone(server_pid)
    finally:
        parent.kill()
        parent.wait(timeout=10)
    deadline = time.monotonic() + 30
    while not gone(server_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    outlived = not gone(server_pid)
    if outlived:
        os.kill(server_pid, signal.SIGKILL)
    assert not outlived, "the replay server outlived its parent"


def test_a_parent_pid_that_is_not_the_parent_stops_it_at_once(tmp_path: Path) -> None:
    tape = write_cassette(tmp_path / "t.jsonl", [{"operator": "add", "response": answer("x")}])
    # This test process is the server's parent; its own parent is not.
    result = subprocess.run(
        [sys.executable, "-m", "opforge_replay", "--cassette", str(tape)]
        + ["--parent-pid", str(os.getppid())],
        cwd=WORKER_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == f"opforge_replay: parent process {os.getppid()} is gone\n"
