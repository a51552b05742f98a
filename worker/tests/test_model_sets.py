"""Model sets: what ``Capture`` keeps of an ATen call and the samples ``generate`` makes of it."""

from __future__ import annotations

import torch

from opforge_worker import model_sets
from opforge_worker.opinfo import find_opinfo

#: Only the fields ``operators_of`` and ``save`` read: neg under its own name, and a composite
#: whose samples also reach aten.neg.default but whose signature is not neg's.
CATALOG = [
    {"name": "neg", "variant": "", "aten_overloads": ["aten.neg.default"]},
    {"name": "rsub", "variant": "", "aten_overloads": ["aten.neg.default", "aten.add.Tensor"]},
]


def _captured(tmp_path, run):
    capture = model_sets.Capture()
    with capture:
        run()
    return capture, model_sets.save("toy", capture, CATALOG, tmp_path)


def test_strided_small_inputs_come_back_exactly_and_big_ones_by_recipe(tmp_path, monkeypatch):
    small = torch.randn(4, 16)[:, 8:].t()  # a slice, transposed, at an offset
    big = torch.linspace(-50.0, 70.0, model_sets.VALUE_CAP + 1)

    capture, written = _captured(tmp_path, lambda: (torch.neg(small), torch.neg(big)))

    assert capture.counts == {"aten.neg.default": 2}
    assert written == {"neg": 2}  # rsub takes other arguments: no samples of aten.neg's
    monkeypatch.setenv("OPFORGE_MODEL_SETS_DIR", str(tmp_path))
    neg = find_opinfo("neg")
    first, second = model_sets.generate(neg, "model:toy", torch.float32, seed=0)
    assert (first.input.shape, first.input.stride()) == (small.shape, small.stride())
    assert first.input.storage_offset() == small.storage_offset() == 8
    assert torch.equal(first.input, small)
    assert (second.input.shape, second.input.dtype) == (big.shape, torch.float32)
    assert -50.0 <= float(second.input.min()) < float(second.input.max()) <= 70.0
    assert not torch.equal(second.input, big)  # values too many to keep: a seeded fill
    again = model_sets.generate(neg, "model:toy", torch.float32, seed=0)[1]
    other = model_sets.generate(neg, "model:toy", torch.float32, seed=1)[1]
    assert torch.equal(again.input, second.input) and not torch.equal(other.input, second.input)
    assert model_sets.generate(neg, "model:toy", torch.float64, seed=0) == []
    assert model_sets.generate(find_opinfo("abs"), "model:toy", torch.float32, seed=0) == []


def test_calls_are_kept_per_distinct_layout_up_to_the_cap(tmp_path):
    def run():
        for size in range(model_sets.CALLS_PER_OVERLOAD + 3):
            torch.neg(torch.ones(size + 1))
            torch.neg(torch.ones(size + 1))  # the same layout again: not kept twice

    capture, written = _captured(tmp_path, run)

    assert capture.counts["aten.neg.default"] == 2 * (model_sets.CALLS_PER_OVERLOAD + 3)
    assert written == {"neg": model_sets.CALLS_PER_OVERLOAD}


def test_model_set_names_are_bounded():
    assert model_sets.is_model_set("model:gpt2")
    assert model_sets.is_model_set("model:llama-3.2_1b")
    for name in ("model:", "model:GPT2", "model:a/b", "gpt2", "model:" + "x" * 59):
        assert not model_sets.is_model_set(name), name
