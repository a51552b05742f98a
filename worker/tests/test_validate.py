"""Standalone validation: how candidate files are read and named, and one run over many of them
with the real harness."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from opforge_worker import validate
from opforge_worker.sample_sets import SAMPLE_INPUTS

HONEST_EXP = Path(__file__).resolve().parent / "corpus" / "honest" / "exp.py"
DEVICE = os.environ.get("OPFORGE_TEST_DEVICE", "interpreter")

#: Rounds half to even, at the decimals that round's OpInfo variants pass (none by default),
#: on OpInfo's own samples.
ROUND = """
@triton.jit
def round_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask) * scale
    rounded = tl.floor(x + 0.5)
    odd = (rounded - 2.0 * tl.floor(rounded * 0.5)) != 0.0
    rounded = tl.where(((rounded - x) == 0.5) & odd, rounded - 1.0, rounded)
    # A zero keeps the sign of its input, as round's does (x * 0.0 is a zero of x's sign).
    rounded = tl.where(rounded == 0.0, x * 0.0, rounded)
    tl.store(out_ptr + offsets, rounded / scale, mask=mask)


def round_wrapper(input, decimals=0):
    x = input.contiguous()
    out = torch.empty_like(x)
    round_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), 10.0**decimals, BLOCK=256)
    return out
"""


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


#: Operators and their variants, as op_db has them, for reading names without it; "a.b" and "a"
#: make the name `a.b` ambiguous, which no operator of torch's op_db does today.
VARIANTS_OF = {
    "nn.functional.relu": ("",),
    "softmax": ("", "with_dtype"),
    "div": ("no_rounding_mode", "trunc_rounding"),
    "a.b": ("",),
    "a": ("b",),
}


@pytest.mark.parametrize(
    ("stem", "marked", "resolved"),
    [
        ("nn.functional.relu", [], ("nn.functional.relu", [""])),
        ("softmax.with_dtype", [], ("softmax", ["with_dtype"])),
        ("div.trunc_rounding", [], ("div", ["trunc_rounding"])),
        ("softmax", ["", "with_dtype"], ("softmax", ["", "with_dtype"])),
        ("softmax.with_dtype", ["", "with_dtype"], ("softmax", ["", "with_dtype"])),
        # What op_db lacks goes on as named, for the run to report (an `invalid` row).
        ("softmax.no_such_variant", [], ("softmax", ["no_such_variant"])),
        ("not_an_operator", [], ("not_an_operator", [""])),
        ("not.an.operator", [], ("not.an.operator", [""])),
        # An ambiguous name: the marker decides.
        ("a.b", ["b"], ("a", ["b"])),
        ("a.b", [""], ("a.b", [""])),
    ],
)
def test_a_file_name_reads_as_the_longest_operator_and_a_variant_of_it(stem, marked, resolved):
    assert validate.resolve_name(stem, marked, VARIANTS_OF) == (*resolved, "")


def test_an_ambiguous_name_without_a_marker_or_one_the_marker_contradicts_is_a_problem():
    op, variants, problem = validate.resolve_name("a.b", [], VARIANTS_OF)
    assert "reads as a.b (default variant) or a variant 'b'" in problem
    assert "# opforge: variant=" in problem

    op, variants, problem = validate.resolve_name("softmax.with_dtype", [""], VARIANTS_OF)
    assert (op, variants) == ("softmax", ["with_dtype"])
    assert problem == (
        "the file name asks for softmax variant 'with_dtype' but its marker for 'default'"
    )


def test_a_variants_marker_makes_one_candidate_per_variant(tmp_path):
    (tmp_path / "softmax.py").write_text(
        "# opforge: variants=default,with_dtype\n# opforge: variant=with_dtype\n"
        "def softmax_wrapper(input, dim, dtype=None): ...\n"
    )
    (tmp_path / "softmax.with_dtype.py").write_text("def mine(input, dim, dtype=None): ...\n")
    found = validate.discover(tmp_path)
    assert [(c.path.name, c.op, c.variant, c.wrapper, c.problem) for c in found] == [
        ("softmax.py", "softmax", "", "softmax_wrapper", ""),
        ("softmax.py", "softmax", "with_dtype", "softmax_wrapper", ""),
        ("softmax.with_dtype.py", "softmax", "with_dtype", "mine", ""),
    ]


def test_paths_are_files_and_directories_each_file_once_and_bad_paths_are_named(tmp_path):
    (tmp_path / "exp.py").write_text("")
    (tmp_path / "t.py").write_text("")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "package.py").mkdir()
    assert validate.candidate_files([tmp_path / "t.py", tmp_path, tmp_path / "exp.py"]) == [
        tmp_path / "t.py",
        tmp_path / "exp.py",
    ]
    (tmp_path / "latin1.py").write_bytes(b"# caf\xe9\n")
    with pytest.raises(ValueError, match="latin1.py: cannot read the candidate"):
        validate.read_candidates(tmp_path / "latin1.py")
    with pytest.raises(ValueError, match="notes.txt: not a candidate file"):
        validate.candidate_files([tmp_path / "notes.txt"])
    with pytest.raises(ValueError, match="absent.py: no such file or directory"):
        validate.candidate_files([tmp_path, tmp_path / "absent.py"])


def test_one_run_validates_many_files_and_variants_with_one_candidate_process(tmp_path):
    library = tmp_path / "library"
    library.mkdir()
    shutil.copy(HONEST_EXP, library / "exp.py")
    (library / "round.py").write_text("# opforge: variants=default,decimals_3\n" + ROUND)
    (library / "round.decimals_neg_3.py").write_text(ROUND)
    (library / "exp.no_such_variant.py").write_text(HONEST_EXP.read_text())
    (library / "round.decimals_3.py").write_text("# opforge: variant=default\n" + ROUND)
    alone = tmp_path / "elsewhere" / "round.decimals_0.py"
    alone.parent.mkdir()
    alone.write_text(ROUND)

    # OpInfo's samples alone: the rows and the one process are the point, not round's extremes.
    validation = validate.validate_paths(
        [library, alone], DEVICE, dtypes=["float32"], sets=[SAMPLE_INPUTS]
    )

    rows = [(r["file"], r["op"], r["variant"], r["outcome"]) for r in validation.results]
    assert rows == [
        ("exp.no_such_variant.py", "exp", "no_such_variant", "invalid"),
        ("exp.py", "exp", "", "pass"),
        ("round.decimals_3.py", "round", "decimals_3", "invalid"),
        ("round.decimals_neg_3.py", "round", "decimals_neg_3", "pass"),
        ("round.py", "round", "", "pass"),
        ("round.py", "round", "decimals_3", "pass"),
        ("round.decimals_0.py", "round", "decimals_0", "pass"),
    ]
    assert validation.results[0]["error"] == (
        "no OpInfo named 'exp' variant 'no_such_variant' (its variants: 'default')"
    )
    assert validation.results[2]["error"] == (
        "the file name asks for round variant 'decimals_3' but its marker for 'default'"
    )
    passed = [r for r in validation.results if r["outcome"] == "pass"]
    assert len(passed) == 5
    assert all(r["tests_run"] == r["tests_passed"] > 0 for r in passed)
    assert validation.results[-1]["path"] == str(alone)
    assert validation.processes_started == 1
    assert list(validation.startup_s) == list(validate.STARTUP_PHASES)
    assert all(seconds >= 0 for seconds in validation.startup_s.values())


def test_slots_judge_candidates_at_once_each_in_its_own_process_results_in_file_order(tmp_path):
    library = tmp_path / "library"
    library.mkdir()
    shutil.copy(HONEST_EXP, library / "exp.py")
    (library / "round.py").write_text(ROUND)
    (library / "round.decimals_3.py").write_text(ROUND)

    def rows(validation):
        return [(r["file"], r["variant"], r["outcome"], r["tests_run"]) for r in validation.results]

    one = validate.validate_paths([library], DEVICE, dtypes=["float32"], sets=[SAMPLE_INPUTS])
    slots = validate.validate_paths(
        [library], DEVICE, dtypes=["float32"], sets=[SAMPLE_INPUTS], jobs=3
    )

    assert rows(slots) == rows(one)
    assert [r[2] for r in rows(slots)] == ["pass", "pass", "pass"]
    assert one.processes_started == 1
    assert slots.processes_started == 3  # one per slot: no two tests shared a process
    with pytest.raises(ValueError, match="jobs must be at least 1, got 0"):
        validate.validate_paths([library], DEVICE, jobs=0)
