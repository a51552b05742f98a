"""Standalone validation: how a directory of candidates is read."""

from __future__ import annotations

import pytest

from opforge_worker import validate


def test_file_name_is_the_op_and_the_wrapper_follows_the_convention(tmp_path):
    (tmp_path / "nn.functional.relu.py").write_text("def nn_functional_relu_wrapper(x): ...\n")
    (tmp_path / "exp.py").write_text("def exp_wrapper(x): ...\n")
    (tmp_path / "notes.txt").write_text("not a candidate")
    found = validate.discover(tmp_path)
    assert [(c.op, c.variant, c.wrapper) for c in found] == [
        ("exp", "", "exp_wrapper"),
        ("nn.functional.relu", "", "nn_functional_relu_wrapper"),
    ]
    assert found[0].source == "def exp_wrapper(x): ...\n"


def test_markers_name_the_wrapper_and_variant(tmp_path):
    (tmp_path / "softmax.py").write_text(
        "# opforge: wrapper=my_softmax\n#opforge:variant = with_dtype\ndef my_softmax(x): ...\n"
    )
    (candidate,) = validate.discover(tmp_path)
    assert (candidate.op, candidate.variant, candidate.wrapper) == (
        "softmax",
        "with_dtype",
        "my_softmax",
    )


def test_empty_or_missing_directories_are_named(tmp_path):
    with pytest.raises(ValueError, match="no candidate files"):
        validate.discover(tmp_path)
    with pytest.raises(ValueError, match="not a directory"):
        validate.discover(tmp_path / "absent")


def test_wrapper_falls_back_to_the_op_name_then_the_only_plain_function(tmp_path):
    kernel = "@triton.jit\ndef k(x_ptr):\n    pass\n\n\n"
    (tmp_path / "cat.py").write_text(kernel + "def helper(): ...\n\n\ndef cat(tensors): ...\n")
    (tmp_path / "clone.py").write_text(kernel + "def copy_everything(input): ...\n")
    (tmp_path / "exp.py").write_text("def exp(:\n")  # unparsable: the harness will say so
    found = {c.op: c.wrapper for c in validate.discover(tmp_path)}
    assert found == {"cat": "cat", "clone": "copy_everything", "exp": "exp_wrapper"}
