"""msgpack frames of the workers socket (messages/PROTOCOL.md).

The frames, their fields and the vocabulary are generated from messages/contract.yaml into
`opforge_worker.contract`; this module re-exports them and adds what the socket needs. `decode`
bounds everything before it allocates (frame size, msgpack container and string sizes, no ext
types) and checks the nesting depth and every field of the message's type. Whatever is wrong
raises `MalformedFrame` with a `reason` (the daemon's `opforge_malformed_frames_total` labels)
and a message naming what was wrong; callers log and drop it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from opforge_worker.contract import (  # noqa: F401 (re-exported for the worker's modules)
    DTYPES,
    FRAMES_FROM_DAEMON,
    FRAMES_FROM_WORKER,
    JOB_KINDS,
    JOB_STATUSES,
    OUTCOMES,
    SAMPLE_SETS,
    TEST_MODES,
    VERSION,
    WORKER_ROLES,
    ContractError,
    type_word,
)

DEFAULT_MAX_FRAME_BYTES = 16 << 20
MAX_CONTAINER_ENTRIES = 65536
MAX_DEPTH = 32

#: The frame types each side sends, and the contract's dataclass that checks each.
DAEMON_TO_WORKER: dict[str, type] = FRAMES_FROM_DAEMON
WORKER_TO_DAEMON: dict[str, type] = FRAMES_FROM_WORKER


class MalformedFrame(ValueError):
    """A frame that must be dropped. `reason` is one of: oversized, multipart, not_msgpack,
    too_deep, not_map, version_mismatch, unknown_type, missing_key, bad_key."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Message:
    type: str
    fields: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.fields[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


def encode(type_: str, **fields: Any) -> bytes:
    return msgpack.packb({"v": VERSION, "type": type_, **fields}, use_bin_type=True)


def _depth(value: Any) -> int:
    """Nesting depth of containers, iteratively (a recursive walk is what the limit guards)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in node)
    return deepest


def decode(
    frame: bytes,
    schema: dict[str, type] = DAEMON_TO_WORKER,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> Message:
    """Decodes and checks one frame against `schema` (one of the two directions above)."""
    if len(frame) > max_frame_bytes:
        raise MalformedFrame("oversized", f"frame of {len(frame)} bytes exceeds {max_frame_bytes}")
    try:
        value = msgpack.unpackb(
            frame,
            raw=False,
            strict_map_key=True,
            max_str_len=max_frame_bytes,
            max_bin_len=max_frame_bytes,
            max_array_len=MAX_CONTAINER_ENTRIES,
            max_map_len=MAX_CONTAINER_ENTRIES,
            max_ext_len=0,
        )
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        # ExtraData, FormatError, StackError, and size limits all derive from ValueError.
        raise MalformedFrame(
            "not_msgpack", f"not one msgpack value: {type(error).__name__}: {error}"
        ) from None
    if not isinstance(value, dict):
        raise MalformedFrame("not_map", f"expected a map, got {type_word(value)}")
    if _depth(value) > MAX_DEPTH:
        raise MalformedFrame("too_deep", f"nesting deeper than {MAX_DEPTH}")
    version = value.get("v")
    if type(version) is not int:
        raise MalformedFrame("missing_key", "key 'v': expected an int")
    if version != VERSION:
        raise MalformedFrame("version_mismatch", f"protocol version {version}, expected {VERSION}")
    type_ = value.get("type")
    if not isinstance(type_, str):
        raise MalformedFrame("missing_key", "key 'type': expected a str")
    checked = schema.get(type_)
    if checked is None:
        raise MalformedFrame("unknown_type", f"unknown message type {type_!r}")
    try:
        checked.from_dict(value, type_)
    except ContractError as error:
        raise MalformedFrame(error.reason, str(error)) from None
    fields = {key: item for key, item in value.items() if key not in ("v", "type")}
    return Message(type_, fields)


def decode_multipart(
    parts: list[bytes],
    schema: dict[str, type] = DAEMON_TO_WORKER,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> Message:
    """A DEALER receives exactly one part per message; more parts are malformed."""
    if len(parts) != 1:
        raise MalformedFrame("multipart", f"expected one frame, got {len(parts)}")
    return decode(parts[0], schema, max_frame_bytes)
