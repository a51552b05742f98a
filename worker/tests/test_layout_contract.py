"""Output layout as a check of its own: which operators' layout is contract
(data/layout_contract.yaml), the reply that carries a candidate's strides, and the verdict
`layout` where the values match and the strides are not ATen's."""

import pytest
import torch
from torch.testing._internal.opinfo.core import SampleInput

from opforge_worker.contract import FailureCheck, Outcome
from opforge_worker.judge import Judge, compute_reference
from opforge_worker.layout_contract import LayoutContract, contract, layout_difference
from opforge_worker.opinfo import find_opinfo
from opforge_worker.settings import load_settings
from opforge_worker.transport import TransportError, decode_strides, encode_tensors


@pytest.mark.parametrize(
    ("op", "preserved"),
    [
        ("sigmoid", True),  # UnaryUfuncInfo
        ("add", True),  # BinaryUfuncInfo
        ("clone", True),  # named: preserve_format
        ("nn.functional.gelu", True),  # named: an activation
        ("positive", False),  # exempt: returns its input
        ("amax", False),  # a reduction
        ("mm", False),  # matmul-like
        ("cat", False),
        ("index_select", False),
        ("masked_fill", False),  # ATen clones its input contiguous first
    ],
)
def test_elementwise_and_format_preserving_ops_keep_their_layout_and_others_are_free(op, preserved):
    assert contract().preserves(find_opinfo(op)) is preserved


def test_only_significant_strides_count():
    aten = torch.empty(33, 64).t()  # (64, 33), strides (1, 64)
    assert layout_difference((1, 64), aten) is None
    assert layout_difference((33, 1), aten) == "layout differs: strides (33, 1), ATen (1, 64)"
    # A size-1 dim's stride addresses nothing; an empty tensor has no layout to keep.
    assert layout_difference((1, 7), torch.empty(5, 1)) is None
    assert layout_difference((3, 5), torch.empty(0, 4).t()) is None


def test_a_contract_file_names_every_entry_with_its_reason(tmp_path):
    bad = tmp_path / "layout.yaml"
    bad.write_text("contract_classes:\n  UnaryUfuncInfo: ''\n")
    with pytest.raises(ValueError, match="contract_classes: name: reason"):
        LayoutContract.load(bad)
    bad.write_text("contract_classes: {OpInfo: x}\nfree_classes: {OpInfo: y}\n")
    with pytest.raises(ValueError, match="both contract and free"):
        LayoutContract.load(bad)
    bad.write_text("contracts: {}\n")
    with pytest.raises(ValueError, match="unknown sections"):
        LayoutContract.load(bad)


def test_the_reply_carries_the_strides_each_output_had():
    transposed = torch.arange(12.0).reshape(3, 4).t()
    descriptions, _ = encode_tensors([transposed, transposed.contiguous()])
    assert decode_strides(descriptions) == [(1, 4), (3, 1)]
    with pytest.raises(TransportError, match="bad strides"):
        decode_strides([{**descriptions[0], "stride": [1]}])


def reply_with(output: torch.Tensor, inputs: list[torch.Tensor]) -> tuple[dict, bytes]:
    descriptions, blob = encode_tensors([output, *inputs])
    reply = {"status": "ok", "findings": [], "structure": {"type": "tensor", "index": 0}}
    return {**reply, "tensors": descriptions, "outputs": 1}, blob


def transposed_sample(op: str):
    opinfo = find_opinfo(op)
    base = torch.linspace(-3, 3, 33 * 64).reshape(64, 33)
    sample = SampleInput(base.t())  # (33, 64), strides (1, 33)
    return opinfo, compute_reference(opinfo, sample, torch.float32)


def test_right_values_in_another_layout_fail_with_check_layout():
    opinfo, reference = transposed_sample("sigmoid")
    judge = Judge(opinfo, load_settings())
    assert reference.expected.stride() == (1, 33)  # ATen keeps the input's layout

    assert judge.verdict(*reply_with(reference.expected, reference.inputs_after), reference) is None
    contiguous = reference.expected.contiguous()
    failure = judge.verdict(*reply_with(contiguous, reference.inputs_after), reference)

    assert failure.outcome == Outcome.ACCURACY_ERROR
    assert failure.check == FailureCheck.LAYOUT
    assert failure.message.startswith("output: layout differs: strides (64, 1), ATen (1, 33)")


def test_wrong_values_in_another_layout_are_an_accuracy_failure_first():
    opinfo, reference = transposed_sample("sigmoid")
    judge = Judge(opinfo, load_settings())
    wrong = (reference.expected + 1).contiguous()
    failure = judge.verdict(*reply_with(wrong, reference.inputs_after), reference)
    assert failure.check == FailureCheck.ACCURACY


def test_a_free_operator_may_return_any_layout():
    opinfo = find_opinfo("mm")
    sample = SampleInput(torch.randn(5, 3).t(), args=(torch.randn(5, 4),))
    reference = compute_reference(opinfo, sample, torch.float32)
    judge = Judge(opinfo, load_settings())
    other = reference.expected.t().contiguous().t()  # column-major
    assert judge.verdict(*reply_with(other, reference.inputs_after), reference) is None


def test_the_reference_runs_on_inputs_of_the_samples_own_layout():
    # clone (preserve_format) of a channels_last input is channels_last; were the reference run on
    # a contiguous copy of the input, ATen's result would be contiguous.
    opinfo = find_opinfo("clone")
    channels_last = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    reference = compute_reference(opinfo, SampleInput(channels_last), torch.float32)
    assert reference.expected.stride() == channels_last.stride()
    assert reference.inputs_after[0].stride() == channels_last.stride()
