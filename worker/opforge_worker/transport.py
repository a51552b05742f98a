"""Tensors between the judge and the candidate process: raw bytes, no torch.save.

A sample's inputs go to the candidate process as a pickle of their structure (numbers, dtypes,
tuples...) whose tensors travel out of band: each storage's bytes once, each tensor as its storage,
dtype, shape, stride and offset, so that non-contiguous and overlapping inputs arrive as OpInfo
made them. Only the candidate process unpickles it, and it holds the judge's own data.

Outputs and inputs after a call come back as contiguous raw bytes described in the reply's
header (dtype and shape per tensor). The judge reads them with ``torch.frombuffer`` after
checking that the description matches the bytes exactly; it never unpickles anything the
candidate process sent: a pickle from the candidate would run the candidate's code in the judge.
"""

from __future__ import annotations

import io
import math
import pickle
import struct

import torch

#: Every dtype by the name the wire uses (``float32``, not ``torch.float32``).
DTYPES_BY_NAME: dict[str, torch.dtype] = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in vars(torch).values()
    if isinstance(dtype, torch.dtype)
}
_LENGTH = struct.Struct("<Q")


class TransportError(Exception):
    """Bytes that do not decode as what their description says."""


def _raw_bytes(storage: torch.UntypedStorage) -> memoryview:
    return torch.empty(0, dtype=torch.uint8).set_(storage).numpy().data


def _writable_tensor(data) -> torch.Tensor:
    """A uint8 tensor over its own copy of ``data``."""
    if not len(data):
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def encode_inputs(value) -> bytes:
    """``value`` (nested structure with CPU tensors) as bytes for ``decode_inputs``."""
    storages: dict[int, int] = {}
    chunks: list[memoryview] = []

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if type(obj) is not torch.Tensor:
                return None
            storage = obj.untyped_storage()
            index = storages.get(storage._cdata)
            if index is None:
                index = storages[storage._cdata] = len(chunks)
                chunks.append(_raw_bytes(storage))
            layout = (tuple(obj.shape), obj.stride(), obj.storage_offset())
            return (index, _dtype_name(obj.dtype), *layout)

    structure = io.BytesIO()
    Pickler(structure, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    header = pickle.dumps((structure.getvalue(), [len(chunk) for chunk in chunks]))
    return b"".join([_LENGTH.pack(len(header)), header, *chunks])


def decode_inputs(blob: bytes, device: torch.device | None = None):
    """The structure ``encode_inputs`` encoded, every tensor in fresh memory of its own storage,
    on ``device`` (default CPU): each storage is copied there whole, so tensors keep their
    layout and sharing on every device.

    For the candidate process only: it unpickles (the blob is the judge's).
    """
    (length,) = _LENGTH.unpack_from(blob)
    structure, sizes = pickle.loads(blob[_LENGTH.size : _LENGTH.size + length])
    storages, position = [], _LENGTH.size + length
    view = memoryview(blob)
    for size in sizes:
        raw = _writable_tensor(view[position : position + size])
        storages.append((raw if device is None else raw.to(device)).untyped_storage())
        position += size

    return _InputUnpickler(structure, storages).load()


class _InputUnpickler(pickle.Unpickler):
    """Unpickles the structure ``encode_inputs`` pickled, its tensors over ``storages``."""

    def __init__(self, structure: bytes, storages: list[torch.UntypedStorage]):
        super().__init__(io.BytesIO(structure))
        self.storages = storages

    def persistent_load(self, pid):
        index, dtype, shape, stride, offset = pid
        storage = self.storages[index]
        tensor = torch.empty(0, dtype=DTYPES_BY_NAME[dtype], device=storage.device)
        return tensor.set_(storage, offset, shape, stride)


def encode_tensors(tensors: list[torch.Tensor]) -> tuple[list[dict], bytes]:
    """Tensors, on any device, as (descriptions for a reply's header, their contiguous bytes one
    after another).

    Each is copied to the host as it is and made contiguous there. Joining them on the device
    first, for one copy instead of several, was tried: on an H100 it took a call's
    ``_results`` from 69 to 91 us (bench/check_costs.py), every device-side op being a launch.
    """
    descriptions, chunks = [], []
    for tensor in tensors:
        dense = tensor.detach().cpu().resolve_conj().resolve_neg().contiguous()
        descriptions.append({"dtype": _dtype_name(dense.dtype), "shape": list(dense.shape)})
        chunks.append(dense.reshape(-1).view(torch.uint8).numpy().data)
    return descriptions, b"".join(chunks)


def _shape(description) -> list[int]:
    shape = description.get("shape") if isinstance(description, dict) else None
    if not isinstance(shape, list) or not all(type(size) is int and size >= 0 for size in shape):
        raise TransportError(f"bad tensor description {description!r}")
    return shape


def decode_tensors(descriptions, blob: bytes) -> list[torch.Tensor]:
    """The tensors ``encode_tensors`` described; TransportError unless the descriptions (a header
    from an untrusted process) are well-formed and account for every byte of ``blob``."""
    if not isinstance(descriptions, list):
        raise TransportError("tensor descriptions are not a list")
    layouts = []
    for description in descriptions:
        shape = _shape(description)
        dtype = DTYPES_BY_NAME.get(description.get("dtype"))
        if dtype is None:
            raise TransportError(f"unknown dtype in {description!r}")
        layouts.append((dtype, shape, math.prod(shape) * dtype.itemsize))
    if sum(size for _, _, size in layouts) != len(blob):
        raise TransportError("tensor descriptions do not account for the bytes sent")
    view = memoryview(blob)
    tensors, position = [], 0
    for dtype, shape, size in layouts:
        raw = _writable_tensor(view[position : position + size])  # aligned for its dtype
        position += size
        try:
            tensors.append(raw.view(dtype).reshape(shape))
        except RuntimeError as error:
            raise TransportError(f"cannot view bytes as {dtype}{shape}: {error}") from None
    return tensors
