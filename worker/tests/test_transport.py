"""The judge <-> candidate tensor transport: exact round trips, strict decoding of replies."""

import builtins
import multiprocessing
import pickle
import struct

import pytest
import torch

from opforge_worker.device_kinds import lookup
from opforge_worker.ipc import CandidateProtocolError, recv_message, send_message
from opforge_worker.transport import (
    ReplyStaging,
    TransportError,
    decode_inputs,
    decode_tensors,
    encode_inputs,
    encode_tensors,
    to_device,
)

_DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


@pytest.mark.parametrize("device", _DEVICES)
def test_inputs_arrive_with_their_layout_values_and_sharing(device):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    transposed = base.t()[1:]  # non-contiguous, with a storage offset
    sample = {
        "args": [transposed, base[2], torch.tensor(True), torch.empty(0, 3, dtype=torch.int64)],
        "kwargs": {"dim": (0, -1), "dtype": torch.bfloat16, "out": None, "scale": 0.5},
    }

    decoded = decode_inputs(encode_inputs(sample), torch.device(device))

    for before, after in zip(sample["args"], decoded["args"], strict=True):
        assert after.device.type == device
        assert (after.dtype, after.shape, after.stride()) == (
            before.dtype,
            before.shape,
            before.stride(),
        )
        assert after.storage_offset() == before.storage_offset()
        assert torch.equal(after.cpu(), before)
    assert decoded["kwargs"] == sample["kwargs"]
    # Views of one storage still share one, as they did in the judge ...
    first, second = decoded["args"][:2]
    assert first.untyped_storage().data_ptr() == second.untyped_storage().data_ptr()
    # ... and none is the judge's memory.
    first.fill_(-1)
    assert torch.equal(base, torch.arange(24, dtype=torch.float32).reshape(4, 6))


@pytest.mark.parametrize("device", _DEVICES)
def test_inputs_decoded_from_a_batch_on_the_device_are_fresh_storages_of_their_own(device):
    # As the candidate process decodes a batch: every sample's bytes go to the device at once.
    samples = [{"args": [torch.arange(5.0) * n], "kwargs": {"n": n}} for n in (1, 2)]
    blobs = [encode_inputs(sample) for sample in samples]
    staged = to_device(b"".join(blobs), torch.device(device))

    decoded = [
        decode_inputs(blob, staged=staged[start : start + len(blob)])
        for blob, start in zip(blobs, (0, len(blobs[0])), strict=True)
    ]

    for sample, after in zip(samples, decoded, strict=True):
        (tensor,) = after["args"]
        assert tensor.device.type == device and torch.equal(tensor.cpu(), sample["args"][0])
        assert after["kwargs"] == sample["kwargs"]
        # Its own memory, exactly its size: not a view of the batch.
        assert tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
        tensor.fill_(-1)  # the candidate's to change: the batch's bytes stay the judge's
    again = decode_inputs(blobs[1], staged=staged[len(blobs[0]) :])["args"][0]
    assert torch.equal(again.cpu(), samples[1]["args"][0])


@pytest.mark.parametrize("device", _DEVICES)
def test_inputs_decoded_into_earlier_memory_take_its_addresses_and_the_new_values(device):
    # As a benchmark decodes its value sets A and B into the same input memory in turn.
    value_sets = [
        {"args": [base.t(), base[1]]}
        for base in (torch.arange(12.0).reshape(3, 4), -torch.arange(12.0).reshape(3, 4))
    ]
    blobs = [encode_inputs(sample) for sample in value_sets]
    memory: list[torch.Tensor] = []

    first = decode_inputs(blobs[0], torch.device(device), into=memory)
    first["args"][0].fill_(7)  # as a candidate that writes its input leaves it
    second = decode_inputs(blobs[1], torch.device(device), into=memory)

    assert len(memory) == 1  # one storage, shared by the two views
    for before, after in zip(first["args"], second["args"], strict=True):
        assert after.data_ptr() == before.data_ptr()
    for sample, after in zip(value_sets[1]["args"], second["args"], strict=True):
        assert after.stride() == sample.stride() and torch.equal(after.cpu(), sample)


@pytest.mark.parametrize("device", _DEVICES)
def test_a_group_gathers_each_calls_tensors_as_encode_tensors_encodes_them(device):
    synchronize = lookup("cuda").synchronize if device != "cpu" else None
    staging = ReplyStaging(torch.device(device), synchronize=synchronize)
    small = [torch.arange(6, dtype=torch.int32).reshape(2, 3).t().to(device)]
    large = [torch.linspace(0, 1, 100).to(device), torch.tensor(True, device=device)]

    for group in ([large, small, large], [small]):
        added = [staging.add(tensors) for tensors in group]
        data = bytes(staging.collect())

        expected = [encode_tensors([tensor.cpu() for tensor in tensors]) for tensors in group]
        assert [descriptions for descriptions, _ in added] == [d for d, _ in expected]
        assert [size for _, size in added] == [len(blob) for _, blob in expected]
        assert data == b"".join(blob for _, blob in expected)
        assert staging.used == 0
    gathered = staging.gathered
    staging.add(small)
    assert staging.gathered is gathered  # no allocation for a group that fits


def test_a_group_grows_its_buffer_and_keeps_none_beyond_the_bound():
    staging = ReplyStaging(torch.device("cpu"), kept_bytes=1024)
    staging.add([torch.ones(64)])  # 256 bytes
    large = [torch.arange(1000, dtype=torch.float32)]  # 4000 bytes, after the 256

    staging.add(large)
    data = bytes(staging.collect())

    assert data == encode_tensors([torch.ones(64)])[1] + encode_tensors(large)[1]
    assert staging.gathered.numel() == 0  # dropped: over the bound
    staging.add([torch.ones(200)])  # 800 bytes: grows, within the bound
    assert 800 <= staging.gathered.numel() <= 1024


def test_a_cleared_group_sends_nothing():
    staging = ReplyStaging(torch.device("cpu"))
    staging.add([torch.ones(8)])

    staging.clear()

    assert staging.used == 0 and bytes(staging.collect()) == b""


@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float16, torch.float32, torch.int32, torch.int64, torch.bool]
)
def test_reply_tensors_round_trip_for_every_dtype(dtype):
    values = torch.arange(-6, 6).reshape(3, 4).to(dtype)
    tensors = [torch.tensor(7).to(dtype), values.t(), values[:, 1:3], values[:0]]

    descriptions, blob = encode_tensors(tensors)
    decoded = decode_tensors(descriptions, blob)

    assert len(decoded) == len(tensors)
    for before, after in zip(tensors, decoded, strict=True):
        assert after.dtype == before.dtype and after.shape == before.shape
        assert torch.equal(after, before)


@pytest.mark.parametrize(
    "devices",
    [(device, device) for device in _DEVICES] + [("cuda", "cpu")] * ("cuda" in _DEVICES),
)
def test_reply_tensors_are_sent_from_the_devices_they_are_on(devices):
    # A wrong output's device (the checks report it) is sent all the same.
    values = [torch.arange(6, dtype=torch.bfloat16).reshape(2, 3).t(), torch.tensor([True, False])]

    decoded = decode_tensors(
        *encode_tensors([value.to(device) for value, device in zip(values, devices, strict=True)])
    )

    for value, after in zip(values, decoded, strict=True):
        assert after.device.type == "cpu" and torch.equal(after, value)


def test_a_negative_view_is_sent_with_its_values():
    values = torch.tensor([1.0, -2.0, 3.0])

    decoded = decode_tensors(*encode_tensors([torch._neg_view(values)]))

    assert torch.equal(decoded[0], -values)


#: A pickle that, unpickled, records that it ran.
class _Runs:
    def __reduce__(self):
        return (exec, ("import builtins; builtins.opforge_transport_ran = True",))


@pytest.mark.parametrize(
    ("descriptions", "blob", "problem"),
    [
        ([{"dtype": "float32", "shape": [2]}], b"\0" * 7, "do not account for the bytes"),
        ([{"dtype": "float32", "shape": [2]}], b"\0" * 9, "do not account for the bytes"),
        ([{"dtype": "os.system", "shape": [1]}], b"\0", "unknown dtype"),
        ([{"dtype": "uint8", "shape": [-1]}], b"", "bad tensor description"),
        ([{"dtype": "uint8", "shape": [True]}], b"\0", "bad tensor description"),
        ([{"dtype": "uint8", "shape": "1"}], b"\0", "bad tensor description"),
        ({"dtype": "uint8", "shape": [1]}, b"\0", "not a list"),
        ([], pickle.dumps(_Runs()), "do not account for the bytes"),
    ],
)
def test_replies_that_do_not_match_their_description_are_refused(descriptions, blob, problem):
    with pytest.raises(TransportError, match=problem):
        decode_tensors(descriptions, blob)
    assert not hasattr(builtins, "opforge_transport_ran")


def test_a_message_arrives_whole_in_one_frame():
    receiving, sending = multiprocessing.Pipe(duplex=False)
    header = {"kind": "reply", "findings": [["sandbox", "bad \udc80 byte"]], "run_s": float("inf")}
    header["structure"] = {"type": "scalar", "value": -(2**63)}

    send_message(sending, header, b"\x00\x01tensor bytes")
    received, blob = recv_message(receiving)

    assert received == header and bytes(blob) == b"\x00\x01tensor bytes"
    send_message(sending, {"kind": "batch_end"})
    assert recv_message(receiving) == ({"kind": "batch_end"}, b"")


@pytest.mark.parametrize(
    ("frame", "words"),
    [
        (b"\x01\x00", "a frame of 2 bytes"),
        (struct.pack("<I", 9) + b"\x80", "a header of 9 bytes in a frame of 5"),
        (struct.pack("<I", 1) + b"\xc1", "malformed message"),
        (struct.pack("<I", 2) + b"\x91\x01", "not a map"),
    ],
    ids=["short", "header past the frame", "not msgpack", "a list"],
)
def test_a_malformed_message_from_the_candidate_process_is_named(frame, words):
    receiving, sending = multiprocessing.Pipe(duplex=False)
    sending.send_bytes(frame)

    with pytest.raises(CandidateProtocolError, match=words):
        recv_message(receiving)
