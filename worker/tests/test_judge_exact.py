"""The judge's exact-reply fast path gives the verdict its full checks give, on real samples."""

import copy
import dataclasses
import json

import pytest
import torch
from harness_helpers import DEVICE, request
from torch.testing._internal.opinfo.core import SampleInput

from opforge_worker import judge as judge_module
from opforge_worker import opinfo as opinfo_db
from opforge_worker.checks import Findings, output_structure, tensor_leaves
from opforge_worker.harness import Harness
from opforge_worker.judge import Judge, Reference
from opforge_worker.sample_sets import SAMPLE_INPUTS
from opforge_worker.samples import SampleCache, prepare
from opforge_worker.settings import load_settings
from opforge_worker.transport import decode_inputs, encode_tensors

#: std and var_mean warn on the samples that make them NaN, which are here for that NaN.
pytestmark = pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0:UserWarning")
CACHE = SampleCache()
F32 = torch.float32

#: (op, variant, dtype): in-place, tuple results, NaN-producing floats, bool and integer outputs.
OPS = [
    ("exp", "", torch.float32),
    ("std", "", torch.bfloat16),  # NaN with too few degrees of freedom
    ("sqrt", "", torch.bfloat16),
    ("isnan", "", torch.float16),  # bool output
    ("eq", "", torch.int64),  # bool output
    ("max", "reduction_with_dim", torch.float32),  # (values, indices)
    ("sort", "", torch.int32),
    ("frexp", "", torch.float64),  # (mantissa, exponent)
    ("var_mean", "", torch.float32),  # (var, mean), NaN as std
    ("aminmax", "", torch.bool),
    ("native_batch_norm", "", torch.float32),  # writes running_mean and running_var
    ("index_add", "", torch.int64),
    ("nonzero", "", torch.float32),
    ("cumsum", "", torch.float16),
]
#: A dtype of each item size other than the one a description names.
OTHER_DTYPE_OF_SIZE = {
    "float32": "int32",
    "int32": "float32",
    "float64": "int64",
    "int64": "float64",
    "float16": "bfloat16",
    "bfloat16": "float16",
    "bool": "uint8",
}


#: Ops given one more sample, a one-element input: NaN (no degrees of freedom left) whatever
#: the installed torch's own samples hold (torch 2.11's give none).
NAN_SAMPLE_OPS = {"std", "var_mean"}


def samples_of(op: str, variant: str, dtype: torch.dtype):
    opinfo = opinfo_db.find_opinfo(op, variant)
    chosen = [s for s in CACHE.samples(opinfo, dtype, 0, SAMPLE_INPUTS) if s.reference is not None]
    if op in NAN_SAMPLE_OPS:
        one = SampleInput(torch.ones(1, dtype=dtype))
        chosen.append(prepare(opinfo, one, SAMPLE_INPUTS, len(chosen), dtype))
    return opinfo, chosen


def honest_reply(opinfo, prepared) -> tuple[dict, bytes]:
    """What the candidate process replies to a call of a wrapper computing what ATen computes:
    the inputs as it receives them, the result described and encoded as it does
    (candidate.CandidateServer._describe, then its staging)."""
    inputs = decode_inputs(prepared.inputs)
    result = opinfo.op(*inputs["args"], **inputs["kwargs"])
    leaves: list[torch.Tensor] = []
    structure = output_structure(result, leaves, Findings(), torch.device("cpu"), {}, True)
    after = tensor_leaves((inputs["args"], inputs["kwargs"]))
    descriptions, blob = encode_tensors([*leaves, *after])
    reply = {"status": "ok", "findings": [], "structure": structure, "tensors": descriptions}
    return {**reply, "outputs": len(leaves)}, blob


@pytest.fixture
def decodes(monkeypatch):
    """The tensor descriptions of the replies the judge decoded: those past the fast path."""
    decoded = []
    original = judge_module.decode_tensors

    def counted(descriptions, blob):
        decoded.append(descriptions)
        return original(descriptions, blob)

    monkeypatch.setattr(judge_module, "decode_tensors", counted)
    return decoded


def verdict_of(judge: Judge, reply: dict, blob: bytes, reference: Reference) -> tuple:
    """The verdict as comparable values; for a reply that breaks the judge, what it raised."""
    try:
        failure = judge.verdict(reply, blob, reference)
    except Exception as error:  # noqa: BLE001 (ReplyError, or a TypeError the harness reports)
        return (type(error).__name__, str(error))
    if failure is None:
        return ("pass",)
    return (failure.outcome, failure.check, failure.message, failure.diff)


def full_checks_verdict(judge: Judge, reply: dict, blob: bytes, reference: Reference) -> tuple:
    """``verdict_of`` with the judge knowing no exact reply: every check runs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Reference, "exact_reply", lambda self: None)
        return verdict_of(judge, reply, blob, reference)


@pytest.mark.parametrize(("op", "variant", "dtype"), OPS, ids=str)
def test_an_exact_reply_passes_undecoded_as_the_full_checks_pass_it(op, variant, dtype, decodes):
    opinfo, samples = samples_of(op, variant, dtype)
    judge = Judge(opinfo, load_settings())

    for prepared in samples:
        reply, blob = honest_reply(opinfo, prepared)
        assert full_checks_verdict(judge, reply, blob, prepared.reference) == ("pass",)
        decodes.clear()
        assert verdict_of(judge, reply, blob, prepared.reference) == ("pass",)
        assert decodes == [], f"{op}{prepared.description} went past the fast path"


def test_the_samples_hold_what_the_fast_path_must_get_right():
    def expected_leaves(op, variant, dtype):
        return [
            leaf
            for sample in samples_of(op, variant, dtype)[1]
            for leaf in tensor_leaves(sample.reference.expected)
        ]

    assert any(leaf.isnan().any() for leaf in expected_leaves("std", "", torch.bfloat16))
    assert any(leaf.isnan().any() for leaf in expected_leaves("var_mean", "", torch.float32))
    assert all(leaf.dtype == torch.bool for leaf in expected_leaves("isnan", "", torch.float16))
    assert all(
        isinstance(s.reference.expected, tuple) for s in samples_of("sort", "", torch.int32)[1]
    )
    written = [s.reference.inputs_written for s in samples_of("native_batch_norm", "", F32)[1]]
    assert (False, False, False, True, True) in written


def perturbed(reply: dict, blob: bytes, reference: Reference) -> dict[str, tuple[dict, bytes]]:
    """Replies that differ from the exact ``reply, blob`` in one respect each, by name."""
    outputs_size = sum(leaf.nbytes for leaf in tensor_leaves(reference.expected))
    first = reply["tensors"][0]

    def flipped(position: int) -> tuple[dict, bytes]:
        changed = bytearray(blob)
        changed[position] ^= 0x41
        return reply, bytes(changed)

    def header(**changes) -> tuple[dict, bytes]:
        return {**copy.deepcopy(reply), **changes}, blob

    def first_tensor(**changes) -> tuple[dict, bytes]:
        return header(tensors=[{**first, **changes}, *copy.deepcopy(reply["tensors"][1:])])

    structure = reply["structure"]
    replies = {
        "first output byte": flipped(0),
        "last output byte": flipped(outputs_size - 1),
        "first input byte": flipped(outputs_size),
        "last input byte": flipped(len(blob) - 1),
        "shape with a leading 1": first_tensor(shape=[1, *first["shape"]]),
        "shape of floats": first_tensor(shape=[float(size) for size in first["shape"]]),
        "dtype of the same size": first_tensor(dtype=OTHER_DTYPE_OF_SIZE[first["dtype"]]),
        "one more output": header(outputs=reply["outputs"] + 1),
        "outputs a float": header(outputs=float(reply["outputs"])),
        "outputs a bool": header(outputs=bool(reply["outputs"])),
        "a scalar": header(structure={"type": "scalar", "value": 0}),
    }
    if structure["type"] == "tensor":
        replies["a list of the tensor"] = header(structure={"type": "list", "items": [structure]})
        replies["index a float"] = header(structure={**structure, "index": 0.0})
    else:
        other = "list" if structure["type"] == "tuple" else "tuple"
        replies["the other sequence"] = header(structure={**structure, "type": other})
        replies["items swapped"] = header(
            structure={**structure, "items": structure["items"][::-1]}
        )
    return replies


def test_each_perturbation_changes_the_reply():
    opinfo, samples = samples_of("max", "reduction_with_dim", torch.float32)
    prepared = next(s for s in samples if s.reference.expected[0].dim())
    reply, blob = honest_reply(opinfo, prepared)

    for name, (changed, changed_blob) in perturbed(reply, blob, prepared.reference).items():
        # As JSON text: Python's == takes 5, 5.0 and True for equal.
        assert (json.dumps(changed), changed_blob) != (json.dumps(reply), blob), name


@pytest.mark.parametrize(("op", "variant", "dtype"), OPS, ids=str)
def test_a_reply_differing_in_one_respect_gets_the_full_checks_verdict(op, variant, dtype):
    opinfo, samples = samples_of(op, variant, dtype)
    judge = Judge(opinfo, load_settings())
    # Samples whose first output and inputs have bytes to change.
    chosen = [
        s
        for s in samples
        if tensor_leaves(s.reference.expected)[0].numel() and s.reference.inputs_after[-1].numel()
    ][:3]
    assert chosen

    for prepared in chosen:
        reply, blob = honest_reply(opinfo, prepared)
        for name, (changed, changed_blob) in perturbed(reply, blob, prepared.reference).items():
            assert verdict_of(judge, changed, changed_blob, prepared.reference) == (
                full_checks_verdict(judge, changed, changed_blob, prepared.reference)
            ), f"{op}{prepared.description}: {name}"


def test_the_fast_path_checks_the_inputs_bytes_and_the_outputs():
    opinfo, samples = samples_of("index_add", "", torch.int64)
    judge = Judge(opinfo, load_settings())
    prepared = next(s for s in samples if s.reference.expected.numel() > 1)
    replies = perturbed(*honest_reply(opinfo, prepared), prepared.reference)

    def verdict(name):
        return verdict_of(judge, *replies[name], prepared.reference)[:2]

    assert not any(prepared.reference.inputs_written)
    assert verdict("first input byte") == ("cheat_detected", "mutation")
    assert verdict("last input byte") == ("cheat_detected", "mutation")
    assert verdict("first output byte") == ("accuracy_error", "accuracy")
    assert verdict("last output byte") == ("accuracy_error", "accuracy")
    assert verdict_of(judge, *replies["shape with a leading 1"], prepared.reference)[2] == (
        "output: shape differs"
    )
    assert verdict_of(judge, *replies["dtype of the same size"], prepared.reference)[2] == (
        "output: dtype differs"
    )
    assert verdict("a scalar") == ("accuracy_error", "accuracy")
    assert verdict("a list of the tensor") == ("accuracy_error", "accuracy")
    for name in ("shape of floats", "one more output", "outputs a float", "outputs a bool"):
        assert verdict(name)[0] == "ReplyError", name


def test_a_written_input_must_be_the_references_after_the_call():
    opinfo, samples = samples_of("native_batch_norm", "", torch.float32)
    judge = Judge(opinfo, load_settings())
    prepared = next(s for s in samples if s.reference.inputs_written[-1])
    exact_reply = honest_reply(opinfo, prepared)
    reply, blob = perturbed(*exact_reply, prepared.reference)["last input byte"]

    failure = judge.verdict(reply, blob, prepared.reference)

    assert judge.verdict(*exact_reply, prepared.reference) is None
    assert (failure.outcome, failure.check) == ("accuracy_error", "accuracy")
    assert failure.message == "input 4 after the call (the operator writes it): values differ"


def test_a_sequence_result_is_judged_item_by_item():
    opinfo, samples = samples_of("max", "reduction_with_dim", torch.float32)
    judge = Judge(opinfo, load_settings())
    prepared = next(s for s in samples if s.reference.expected[0].numel())
    replies = perturbed(*honest_reply(opinfo, prepared), prepared.reference)

    assert verdict_of(judge, *replies["the other sequence"], prepared.reference) == ("pass",)
    assert verdict_of(judge, *replies["items swapped"], prepared.reference)[2] == (
        "output[0]: dtype differs"
    )


def test_nan_without_a_tolerance_fails_exact_bytes_as_the_full_checks_do(decodes):
    # Without a tolerance floats compare by value, and NaN is not equal to itself.
    settings = dataclasses.replace(load_settings(), tolerances={})
    opinfo, samples = samples_of("var_mean", "", torch.float32)
    judge = Judge(opinfo, settings)
    with_nan = [s for s in samples if s.reference.expected[0].isnan().any()]
    assert with_nan

    for prepared in with_nan:
        reply, blob = honest_reply(opinfo, prepared)
        expected = full_checks_verdict(judge, reply, blob, prepared.reference)
        assert expected[:2] == ("accuracy_error", "accuracy")
        assert verdict_of(judge, reply, blob, prepared.reference) == expected


def test_a_python_value_in_the_result_leaves_the_verdict_to_the_full_checks(decodes):
    opinfo, samples = samples_of("equal", "", torch.float32)  # returns a bool
    judge = Judge(opinfo, load_settings())

    for prepared in samples:
        assert prepared.reference.exact_reply() is None
        assert prepared.reference.exact_reply_nbytes == 0
        assert verdict_of(judge, *honest_reply(opinfo, prepared), prepared.reference) == ("pass",)
    assert len(decodes) == len(samples)


def test_a_prepared_sample_accounts_for_its_exact_reply():
    for op, variant, dtype in OPS:
        for prepared in samples_of(op, variant, dtype)[1]:
            reference = prepared.reference
            twin = reference.precise  # the precise reference, where there is one
            held = tensor_leaves(
                (reference.expected, reference.inputs_after, twin and [*vars(twin).values()])
            )
            exact = reference.exact_reply()

            assert reference.exact_reply_nbytes == len(exact.blob)
            assert prepared.nbytes == (
                2 * len(prepared.inputs) + sum(t.nbytes for t in held) + len(exact.blob)
            )


#: Honest candidates that move data: every call reproduces the reference to the byte.
EXACT_CANDIDATES = [
    ("honest/index_select", "index_select", ["float32", "int64"]),
    ("honest/clone", "clone", ["int32"]),
    ("honest/t", "t", ["float32"]),
]


def test_the_candidate_process_replies_exactly_as_the_judge_expects(decodes):
    with Harness(DEVICE) as harness:
        for name, op, dtypes in EXACT_CANDIDATES:
            result = harness.run_test(request(name, op, dtypes))

            assert result["outcome"] == "pass", result["failure"]
            assert result["tests_passed"] > 0
    assert decodes == []
