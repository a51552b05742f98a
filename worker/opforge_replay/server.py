"""Replay server: serves recorded chat completions over the OpenAI HTTP API.

The daemon's real HTTP client talks to it exactly as it talks to vLLM or a hosted API, so tests and
benchmarks exercise the real client. Answers come from a cassette (JSON Lines written by an
llm_endpoint's recording: one exchange per line with ``operator``, ``index``, ``response``,
``status``...), matched by the ``X-Opforge-Operator`` header and served in file order per operator.
Every served answer is labelled as recorded: ``system_fingerprint`` is
``opforge-replay:<cassette>`` and the response carries ``X-Opforge-Recorded: true``.

Faults for tests, chosen per request by the ``X-Opforge-Fault`` header (which consumes no cassette
entry) or by a cassette entry's ``fault`` field (which does):

``429[:seconds]``   429 with Retry-After (default 1 second)
``500``             500 with an OpenAI-style error body
``hang``            never answers (until the client gives up or the server stops)
``slow[:ms]``       answers after an extra delay (default 2000 ms)
``truncated``       200 with a complete HTTP body holding half of the JSON answer
``drop``            announces the whole body, sends half, closes the connection
``garbage``         200 with an HTML page instead of JSON
``context[:kind]``  400 context-length error as worded by openai, vllm, sglang, llamacpp, ollama

An entry with status 0 (a recorded transport failure) is replayed by closing the connection.

With ``--by-answer-index`` the server keeps no position: it serves the answer the
``X-Opforge-Answer`` header asks for (how many answers the session already has), counting only the
operator's answer entries (status 200, no fault). A daemon restarted after a crash then gets
exactly the answer its resumed session was waiting for, and a request for an answer already served
shows in the hit log as the same index twice.

With ``--parent-pid PID`` (Linux) the server stops when that process dies, even by SIGKILL: a
daemon killed mid-campaign leaves no server behind holding a port and appending to the hit log
that its restarted self uses.

Usage: ``python -m opforge_replay --cassette F --port 0 [--latency-ms N]
[--log HITS.jsonl] [--cycle] [--by-answer-index] [--parent-pid PID]``; the first line on stdout is
the bound port.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FAULT_HEADER = "X-Opforge-Fault"
OPERATOR_HEADER = "X-Opforge-Operator"
REQUEST_HEADER = "X-Opforge-Request"
ANSWER_HEADER = "X-Opforge-Answer"
MAX_REQUEST_BYTES = 64 << 20
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

CONTEXT_ERRORS: dict[str, dict[str, Any]] = {
    "openai": {
        "error": {
            "message": "This model's maximum context length is 8192 tokens. However, your "
            "messages resulted in 9120 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    },
    "vllm": {
        "object": "error",
        "message": "This model's maximum context length is 32768 tokens. However, you requested "
        "33100 tokens (30100 in the messages, 3000 in the completion). Please reduce the length "
        "of the messages or completion.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
    "sglang": {
        "object": "error",
        "message": "The input (40210 tokens) is longer than the model's context length "
        "(32768 tokens).",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
    "llamacpp": {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 9120,
            "n_ctx": 8192,
        }
    },
    "ollama": {"error": "the input length exceeds the context length"},
}

GARBAGE = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>\n"


class CassetteError(ValueError):
    """A cassette line that cannot be served; the message names the line."""


class Cassette:
    """Answers per operator, in file order. Thread-safe."""

    def __init__(self, path: Path, cycle: bool = False) -> None:
        self.name = path.name
        self.cycle = cycle
        self._entries: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._next: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError as e:
                    raise CassetteError(f"{path}:{number}: not JSON: {e}") from e
                if not isinstance(entry, dict) or not isinstance(entry.get("operator", ""), str):
                    raise CassetteError(f"{path}:{number}: expected an object with an operator")
                self._entries[entry.get("operator", "")].append(entry)

    def answer(self, operator: str, index: int) -> dict[str, Any] | None:
        """The operator's answer entry at ``index`` (faults and failures not counted), if any."""
        answers = [
            entry
            for entry in self._entries.get(operator, [])
            if not entry.get("fault") and int(entry.get("status", 200)) == 200
        ]
        return answers[index] if 0 <= index < len(answers) else None

    def next(self, operator: str) -> tuple[int, dict[str, Any] | None]:
        """The position served and the next entry for this operator (None when exhausted)."""
        with self._lock:
            entries = self._entries.get(operator, [])
            position = self._next[operator]
            if position >= len(entries):
                if not self.cycle or not entries:
                    return position, None
                position = 0
            self._next[operator] = position + 1
            return position, entries[position]


class HitLog:
    """One JSON line per request served, so tests can check attempts and their timing."""

    def __init__(self, path: Path | None) -> None:
        self._file = path.open("a", encoding="utf-8") if path else None
        self._lock = threading.Lock()

    def write(self, **fields: Any) -> None:
        if self._file is None:
            return
        line = json.dumps(fields, sort_keys=True)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


class ReplayServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # a burst of connections from a high concurrency limit

    def __init__(
        self,
        address: tuple[str, int],
        cassette: Cassette,
        latency_s: float = 0.0,
        hits: HitLog | None = None,
        by_answer_index: bool = False,
    ) -> None:
        super().__init__(address, ReplayHandler)
        self.cassette = cassette
        self.by_answer_index = by_answer_index
        self.latency_s = latency_s
        self.hits = hits or HitLog(None)
        self.stopping = threading.Event()
        self.fingerprint = f"opforge-replay:{cassette.name}"

    def server_close(self) -> None:
        self.stopping.set()
        super().server_close()


class ReplayHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
    # Headers and body leave in two writes; with Nagle the body waits for the client's delayed
    # ACK of the headers, adding up to 40 ms to every answer.
    disable_nagle_algorithm = True
    server: ReplayServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the hit log says what was served."""

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/health", "/v1/models"):
            self._send_json(200, {"object": "list", "data": []})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        received = time.monotonic()
        length = int(self.headers.get("Content-Length") or -1)
        if length < 0 or length > MAX_REQUEST_BYTES:
            self._send_json(411, {"error": {"message": "a Content-Length is required"}})
            return
        body = self.rfile.read(length)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            request = json.loads(body)
            if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
                raise ValueError("no messages")
        except ValueError as e:
            self._send_json(400, {"error": {"message": f"bad request body: {e}"}})
            return
        operator = self.headers.get(OPERATOR_HEADER, "")
        fault = self.headers.get(FAULT_HEADER, "")
        if fault:
            index, entry = None, None
        elif self.server.by_answer_index:
            try:
                index = int(self.headers.get(ANSWER_HEADER, ""))
            except ValueError:
                self._send_json(400, {"error": {"message": f"{ANSWER_HEADER} must be a number"}})
                return
            entry = self.server.cassette.answer(operator, index)
        else:
            index, entry = self.server.cassette.next(operator)
        if entry is not None:
            fault = str(entry.get("fault", ""))
        self.server.hits.write(
            t=received,
            operator=operator,
            index=index,
            fault=fault,
            request=self.headers.get(REQUEST_HEADER, ""),
            authorized=self.headers.get("Authorization", "").startswith("Bearer "),
        )
        if self.server.latency_s:
            time.sleep(self.server.latency_s)
        if fault:
            self._serve_fault(fault)
        elif entry is None:
            message = (
                f"cassette {self.server.cassette.name} holds no answer #{index} "
                f"for operator '{operator}'"
            )
            self._send_json(404, {"error": {"message": message, "type": "replay_exhausted"}})
        else:
            self._serve_entry(entry)

    def _serve_entry(self, entry: dict[str, Any]) -> None:
        status = int(entry.get("status", 200))
        if status == 0:
            self.close_connection = True
            return
        headers = {}
        if entry.get("retry_after"):
            headers["Retry-After"] = str(entry["retry_after"])
        response = entry.get("response")
        if isinstance(response, dict):
            self._send_json(
                status, {**response, "system_fingerprint": self.server.fingerprint}, headers
            )
        else:
            self._send(status, str(response or "").encode(), "text/plain", headers)

    def _serve_fault(self, fault: str) -> None:
        kind, _, parameter = fault.partition(":")
        if kind == "429":
            body = {"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded"}}
            self._send_json(429, body, {"Retry-After": parameter or "1"})
        elif kind == "500":
            self._send_json(500, {"error": {"message": "Internal server error (replayed)"}})
        elif kind == "hang":
            self.server.stopping.wait()
            self.close_connection = True
        elif kind == "slow":
            time.sleep(float(parameter or 2000) / 1000)
            self._send_json(200, self._placeholder_answer())
        elif kind == "truncated":
            whole = json.dumps(self._placeholder_answer()).encode()
            self._send(200, whole[: len(whole) // 2], "application/json")
        elif kind == "drop":
            whole = json.dumps(self._placeholder_answer()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(whole)))
            self.end_headers()
            self.wfile.write(whole[: len(whole) // 2])
            self.wfile.flush()
            self.close_connection = True
        elif kind == "garbage":
            self._send(200, GARBAGE, "text/html")
        elif kind == "context":
            flavour = parameter or "openai"
            if flavour not in CONTEXT_ERRORS:
                self._send_json(400, {"error": {"message": f"unknown context flavour {flavour}"}})
            else:
                self._send_json(400, CONTEXT_ERRORS[flavour])
        else:
            self._send_json(400, {"error": {"message": f"unknown fault mode '{fault}'"}})

    def _placeholder_answer(self) -> dict[str, Any]:
        """What slow, truncated and drop serve: a well-formed answer that says it is a fault."""
        return {
            "id": "chatcmpl-replay-fault",
            "object": "chat.completion",
            "model": "opforge-replay",
            "system_fingerprint": self.server.fingerprint,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "replayed fault answer"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
        }

    def _send_json(
        self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        self._send(status, json.dumps(body).encode(), "application/json", headers)

    def _send(
        self,
        status: int,
        payload: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("X-Opforge-Recorded", "true")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)


def die_with_parent(parent_pid: int) -> str | None:
    """Asks the kernel for SIGTERM when the parent dies; why that cannot hold, or None.

    The signal is armed before the parent is checked, so a parent that dies in between is seen
    as gone rather than missed. A parent that blocks SIGTERM (a daemon that takes signals in one
    thread) passes its mask on; the signal is unblocked here, or it would never arrive.
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return f"prctl(PR_SET_PDEATHSIG): {os.strerror(ctypes.get_errno())}"
    if os.getppid() != parent_pid:
        return f"parent process {parent_pid} is gone"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opforge_replay")
    parser.add_argument("--cassette", type=Path, required=True, help="JSON Lines cassette")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay before each answer")
    parser.add_argument("--log", type=Path, help="append one JSON line per request served")
    parser.add_argument("--cycle", action="store_true", help="start over when answers run out")
    parser.add_argument(
        "--by-answer-index",
        action="store_true",
        help=f"serve the answer the {ANSWER_HEADER} header names instead of the next one",
    )
    parser.add_argument(
        "--parent-pid", type=int, help="stop when this process (the parent) dies (Linux)"
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if args.parent_pid is not None and (why := die_with_parent(args.parent_pid)):
        print(f"opforge_replay: {why}", file=sys.stderr)
        return 1
    try:
        cassette = Cassette(args.cassette, cycle=args.cycle)
    except (OSError, CassetteError) as e:
        print(f"opforge_replay: {e}", file=sys.stderr)
        return 2
    server = ReplayServer(
        (args.host, args.port),
        cassette,
        args.latency_ms / 1000,
        HitLog(args.log),
        by_answer_index=args.by_answer_index,
    )
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.server_close()
    return 0
