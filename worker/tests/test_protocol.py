"""Frames of the workers socket: round trips, and every kind of malformed frame named."""

from __future__ import annotations

import msgpack
import pytest

from opforge_worker import protocol


def test_round_trip_keeps_fields_and_ignores_unknown_keys():
    frame = protocol.encode(
        "job",
        job_id="j",
        kind="test",
        attempt=2,
        deadline_ms=5000,
        payload={"op": "exp", "dtypes": ["float32"]},
        future_key=[1],
    )
    message = protocol.decode(frame)
    assert message.type == "job"
    assert message["payload"] == {"op": "exp", "dtypes": ["float32"]}
    assert message["attempt"] == 2
    assert message.get("future_key") == [1]
    assert msgpack.unpackb(frame)["v"] == protocol.VERSION


def test_worker_frames_decode_with_the_daemon_side_schema():
    frame = protocol.encode("result", job_id="j", status="done", payload={}, elapsed_ms=3)
    assert protocol.decode(frame, protocol.WORKER_TO_DAEMON)["status"] == "done"
    with pytest.raises(protocol.MalformedFrame) as raised:
        protocol.decode(frame)  # `result` is not a daemon -> worker type
    assert raised.value.reason == "unknown_type"


def header(type_: str) -> bytes:
    """A map of three entries: v, type, and a third the caller appends."""
    return b"\x83\xa1v\x01\xa4type" + msgpack.packb(type_) + b"\xa1x"


@pytest.mark.parametrize(
    ("frame", "reason", "words"),
    [
        (b"\xc1", "not_msgpack", "not one msgpack value"),
        (b"", "not_msgpack", "not one msgpack value"),
        (msgpack.packb({"v": 1, "type": "heartbeat"}) + b"\x00", "not_msgpack", "extra data"),
        (b"\xdd\xff\xff\xff\xff", "not_msgpack", "max_array_len"),
        (b"\xdf\xff\xff\xff\xff", "not_msgpack", "max_map_len"),
        (b"\xdb\xff\xff\xff\xff", "not_msgpack", "incomplete input"),
        (b"\xc7\x01\x05a", "not_msgpack", "max_ext_len"),
        (msgpack.packb({1: 2}), "not_msgpack", "map key"),
        (msgpack.packb([1]), "not_map", "got array"),
        (msgpack.packb("hi"), "not_map", "got str"),
        (header("heartbeat") + b"\x81\xa1a" * 40 + b"\xc0", "too_deep", "deeper than 32"),
        (header("heartbeat") + b"\x91" * 5000 + b"\xc0", "not_msgpack", "not one msgpack"),
        (msgpack.packb({"type": "heartbeat"}), "missing_key", "'v'"),
        (msgpack.packb({"v": "1", "type": "heartbeat"}), "missing_key", "'v'"),
        (msgpack.packb({"v": 2, "type": "heartbeat"}), "version_mismatch", "version 2"),
        (msgpack.packb({"v": 1}), "missing_key", "'type'"),
        (msgpack.packb({"v": 1, "type": "teleport"}), "unknown_type", "'teleport'"),
        (msgpack.packb({"v": 1, "type": "cancel"}), "missing_key", "cancel: missing key 'job_id'"),
        (
            msgpack.packb({"v": 1, "type": "welcome", "heartbeat_ms": True, "liveness": 3}),
            "bad_key",
            "welcome: key 'heartbeat_ms': expected int, got bool",
        ),
        (
            msgpack.packb(
                {
                    "v": 1,
                    "type": "job",
                    "job_id": "j",
                    "kind": "test",
                    "attempt": 1,
                    "deadline_ms": 1,
                    "payload": [],
                }
            ),
            "bad_key",
            "key 'payload': expected map, got array",
        ),
    ],
)
def test_malformed_frames_name_what_was_wrong(frame, reason, words):
    with pytest.raises(protocol.MalformedFrame) as raised:
        protocol.decode(frame)
    assert raised.value.reason == reason
    assert words in str(raised.value)


def test_oversized_frame_is_refused_before_unpacking():
    frame = protocol.encode("goodbye", reason="x" * 200)
    assert protocol.decode(frame, max_frame_bytes=len(frame))["reason"] == "x" * 200
    with pytest.raises(protocol.MalformedFrame) as raised:
        protocol.decode(frame, max_frame_bytes=len(frame) - 1)
    assert raised.value.reason == "oversized"


def test_multipart_messages_are_malformed():
    one = protocol.encode("heartbeat")
    assert protocol.decode_multipart([one]).type == "heartbeat"
    with pytest.raises(protocol.MalformedFrame) as raised:
        protocol.decode_multipart([one, one])
    assert raised.value.reason == "multipart"
