"""Tensors between the judge and the candidate process: raw bytes, no torch.save.

A sample's inputs go to the candidate process as a pickle of their structure (numbers, dtypes,
tuples...) whose tensors travel out of band: each storage's bytes once, each tensor as its storage,
dtype, shape, stride and offset, so that non-contiguous and overlapping inputs arrive as OpInfo
made them. Only the candidate process unpickles it, and it holds the judge's own data.

Outputs and inputs after a call come back as contiguous raw bytes described in the reply's
header (dtype, shape and the strides the tensor had in the candidate process, per tensor: the
values travel in logical order, the layout as the strides, which judge.py checks where the
operator's layout is contract, layout_contract.py). The judge reads them with
``torch.frombuffer`` after checking that the description matches the bytes exactly; it never
unpickles anything the candidate process sent: a pickle from the candidate would run the
candidate's code in the judge.
"""

from __future__ import annotations

import io
import math
import pickle
import struct
from collections.abc import Callable

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


def to_device(blob, device: torch.device | None = None) -> torch.Tensor:
    """``blob``'s bytes as one uint8 tensor on ``device`` (default CPU), for ``decode_inputs``.

    A batch of samples goes to the device in this one copy, and each call's storages are then
    copied out of it on the device, where the host does not wait for them. Candidate processes
    sharing a GPU each have a context of their own, and on an H100 every wait that finds another
    context's work on the GPU cost about 140 us (bench/gpu_sharing.py): a copy from pageable host
    memory per storage was such a wait.
    """
    if not len(blob):
        return torch.empty(0, dtype=torch.uint8, device=device)
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8).to(device)


def decode_inputs(
    blob,
    device: torch.device | None = None,
    staged: torch.Tensor | None = None,
    into: list[torch.Tensor] | None = None,
):
    """The structure ``encode_inputs`` encoded, every tensor in fresh memory of its own storage,
    on ``device`` (default CPU): each storage is copied there whole, so tensors keep their
    layout and sharing on every device. ``staged``, if given, is ``to_device(blob, device)``
    (or the part of a batch's that holds ``blob``), and the storages are copied from it.
    ``into``, if given, holds one byte buffer per storage from an earlier decode of a blob of
    the same layout (empty the first time, when it is filled): the storages are copied into
    that memory instead of fresh memory.

    For the candidate process only: it unpickles (the blob is the judge's).
    """
    (length,) = _LENGTH.unpack_from(blob)
    structure, sizes = pickle.loads(blob[_LENGTH.size : _LENGTH.size + length])
    if staged is None:
        staged = to_device(blob, device)
    buffers, position = [], _LENGTH.size + length
    for index, size in enumerate(sizes):
        source = staged[position : position + size]
        buffers.append(into[index].copy_(source) if into else source.clone())
        position += size
    if into is not None and not into:
        into.extend(buffers)
    storages = [buffer.untyped_storage() for buffer in buffers]

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


class ReplyStaging:
    """Where the replies of a group of calls gather: each call's tensors (its outputs, then its
    inputs as the call left them), contiguous, one after another, in a buffer on their device,
    and at the group's end all of them to the host in one copy behind one wait.

    Candidate processes sharing a GPU each have a context of their own. On an H100 shared by
    eight of them (bench/gpu_sharing.py), a copy into host memory cost a context switch (about
    140 us) whether or not anything waited on it, and so did every wait, while copies on the
    device and kernel launches did not: calls that copied their tensors to the host and waited
    each ran 7,091 times a second in all, the same calls gathering them on the device for one
    copy and one wait per 8 calls 23,962 times.
    On the CPU (the interpreter) the buffer is the host's, and collecting copies nothing.
    """

    def __init__(
        self,
        device: torch.device,
        synchronize: Callable[[], None] | None = None,
        kept_bytes: int = 64 << 20,
    ):
        self.device = device
        #: The largest buffer kept between groups, on the device and on the host. A larger group
        #: gets buffers of its own, freed after it: pinned host memory stays with torch's host
        #: cache even when freed, and would sit in the candidate process's resident memory, which
        #: the memory limit counts, under every later candidate.
        self.kept_bytes = kept_bytes
        self.gathered = torch.empty(0, dtype=torch.uint8, device=device)
        self.used = 0
        self._host = torch.empty(0, dtype=torch.uint8)
        #: Waits for the device's queued work (device_kinds.DeviceKind.synchronize); given, the
        #: host copies are pinned and asynchronous, and collecting waits for them with it.
        self._synchronize = synchronize

    def add(self, tensors: list[torch.Tensor]) -> tuple[list[dict], int]:
        """Gather ``tensors`` (on the staging's device) after the group's earlier ones without
        waiting for them; (descriptions for a reply's header, how many bytes they take)."""
        resolved = [tensor.detach().resolve_conj().resolve_neg() for tensor in tensors]
        dense = [tensor.contiguous() for tensor in resolved]
        sizes = [tensor.numel() * tensor.element_size() for tensor in dense]
        position = start = self.used
        end = start + sum(sizes)
        if end > self.gathered.numel():
            grown = torch.empty(
                max(end, min(2 * self.gathered.numel(), self.kept_bytes)),
                dtype=torch.uint8,
                device=self.device,
            )
            grown[:start].copy_(self.gathered[:start])
            self.gathered = grown
        for tensor, size in zip(dense, sizes, strict=True):
            if size:
                self.gathered[position : position + size].copy_(
                    tensor.reshape(-1).view(torch.uint8)
                )
            position += size
        self.used = end
        descriptions = [
            {
                "dtype": _dtype_name(tensor.dtype),
                "shape": list(tensor.shape),
                "stride": list(tensor.stride()),
            }
            for tensor in resolved
        ]
        return descriptions, end - start

    def clear(self) -> None:
        """Drop what the group gathered (after a device fault, when it cannot be copied)."""
        self.used = 0

    def collect(self) -> memoryview:
        """The group's bytes on the host, in the order they were added, once the device has
        produced them (this waits: a device fault surfaces here); a view that the next group
        overwrites. The staging is empty again."""
        used, self.used = self.used, 0
        if self._synchronize is None:
            view = self.gathered.numpy().data[:used]
        else:
            host, pinned = self._host, True
            if used > self.kept_bytes:
                host, pinned = torch.empty(used, dtype=torch.uint8), False
            elif used > host.numel():
                size = min(max(used, 2 * host.numel()), self.kept_bytes)
                host = self._host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
            if used:
                host[:used].copy_(self.gathered[:used], non_blocking=pinned)
            # The whole device, so that work a call left on another stream is waited for too.
            self._synchronize()
            view = host.numpy().data[:used]
        if self.gathered.numel() > self.kept_bytes:
            self.gathered = torch.empty(0, dtype=torch.uint8, device=self.device)
        return view


def encode_tensors(tensors: list[torch.Tensor]) -> tuple[list[dict], bytes]:
    """What a candidate process replies with for ``tensors`` (``ReplyStaging``), the bytes the
    caller's own."""
    staging = ReplyStaging(torch.device("cpu"))
    descriptions, _ = staging.add(tensors)
    return descriptions, bytes(staging.collect())


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


def decode_strides(descriptions) -> list[tuple[int, ...]]:
    """The strides each tensor of ``descriptions`` had in the candidate process (well-formed
    descriptions: ``decode_tensors`` accepted them); TransportError unless each is a list of one
    int per dim."""
    strides = []
    for description in descriptions:
        stride = description.get("stride")
        if (
            not isinstance(stride, list)
            or len(stride) != len(description["shape"])
            or not all(type(step) is int for step in stride)
        ):
            raise TransportError(f"bad strides in {description!r}")
        strides.append(tuple(stride))
    return strides
