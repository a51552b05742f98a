"""Each outcome class, produced by a purpose-built candidate, reported with its detail."""

import json
import threading

import pytest
from harness_helpers import DEVICE, OPINFO_SAMPLES_ONLY, opinfo_counts, request, source

from opforge_worker import harness as harness_module
from opforge_worker import sandbox
from opforge_worker.harness import Harness, JobCancelled
from opforge_worker.results import OUTCOMES
from opforge_worker.settings import DEFAULT_SETTINGS_PATH


@pytest.fixture(scope="module")
def harness():
    with Harness(DEVICE) as harness:
        yield harness


def failure_of(result, outcome):
    assert result["outcome"] == outcome, result["failure"]
    assert result["per_dtype"]["float32"]["outcome"] in (outcome, "skipped")
    return result["failure"]


def test_compile_error_carries_the_compile_log(harness):
    broken = source("honest/exp").replace("):\n", ")\n", 1)  # the kernel's def loses its colon
    failure = failure_of(
        harness.run_test({**request("honest/exp", "exp"), "source": broken}), "compile_error"
    )

    assert "SyntaxError" in failure["compile_log"]
    assert "line 5" in failure["message"]
    assert failure["sample_index"] == -1  # the source never loaded: no sample ran
    assert harness.run_test(request("honest/exp", "exp"))["outcome"] == "pass"


def test_runtime_error_carries_the_candidates_traceback(harness):
    failure = failure_of(
        harness.run_test(request("outcomes/runtime_error", "exp")), "runtime_error"
    )

    assert failure["message"] == "ValueError: unsupported layout in exp wrapper"
    assert 'candidate.py", line 5, in exp' in failure["backtrace"]
    assert "opforge_worker" not in failure["backtrace"]
    assert failure["dtype"] == "float32" and failure["sample_index"] == 0
    assert failure["sample_set"] == "sample_inputs"
    assert failure["sample"].startswith("sample_inputs #0: (Tensor[float32](20,)")


@pytest.mark.parametrize(
    ("ending", "outcome", "message"),
    [
        (
            'raise RuntimeError("bad \\udc80 byte")',
            "runtime_error",
            "RuntimeError: bad \udc80 byte",
        ),
        ("return 2**100", "accuracy_error", "output should be a tensor, got scalar"),
        (
            "return (float('nan'), -(2**63))",
            "accuracy_error",
            "output should be a tensor, got tuple",
        ),
    ],
    ids=["lone surrogate in the message", "int beyond 64 bits", "nan and the least int64"],
)
def test_what_a_wrapper_says_or_returns_reaches_the_judge_as_it_is(
    harness, ending, outcome, message
):
    # Values the reply's header must carry (msgpack) without the candidate process failing.
    text = source("honest/exp").replace("    return out\n", f"    {ending}\n")

    failure = failure_of(
        harness.run_test({**request("honest/exp", "exp"), "source": text}), outcome
    )

    assert failure["message"] == message


def test_candidate_output_is_captured_and_capped(harness):
    failure = harness.run_test(request("outcomes/runtime_error", "exp"))["failure"]

    assert failure["stdout"].startswith("checking layout xxx")
    assert failure["stdout"].endswith("[... output capped]")
    assert len(failure["stdout"]) < 70_000


def test_crash_reports_the_signal_and_the_next_candidate_runs(harness):
    failure = failure_of(harness.run_test(request("outcomes/crash", "exp")), "crash")

    if DEVICE == "cuda":
        assert "illegal memory access" in failure["cuda_error"] or failure["signal"]
        assert 'candidate.py", line 13' in failure["backtrace"]
    else:
        assert failure["signal"] == "SIGSEGV"
        assert "SIGSEGV" in failure["message"]
        # faulthandler's stack at the fault: the kernel's load, then the wrapper's launch.
        heading = "The candidate's frames (most recent call first):\n"
        frames = failure["backtrace"].split(heading)[1].split("\n\n")[0].splitlines()
        assert [frame.split('candidate.py", ')[1] for frame in frames] == [
            "line 7 in exp_kernel",
            "line 13 in exp",
        ]
        assert "opforge_worker" not in failure["backtrace"]
    assert harness.run_test(request("honest/exp", "exp"))["outcome"] == "pass"


#: A wrapper whose error names a temporary file of its own and a function's repr.
NAMES_ITS_FILES = """
import tempfile


def exp(input):
    with tempfile.NamedTemporaryFile() as scratch_file:
        raise ValueError(f"cannot use {scratch_file.name} for {exp}")
"""


def test_the_same_failures_read_the_same_in_every_harness(tmp_path):
    # Feedback must not depend on the worker's scratch paths: what a model is sent for a failure
    # is byte-identical whichever harness, process and job directory ran the candidate.
    broken = source("honest/exp").replace("):\n", ")\n", 1)
    failing = [
        request("outcomes/runtime_error", "exp"),
        {**request("honest/exp", "exp"), "source": broken},
        {**request("honest/exp", "exp"), "source": NAMES_ITS_FILES},
        request("outcomes/crash", "exp"),
    ]
    results = []
    for name, order in (("first", failing), ("second", [request("honest/exp", "exp"), *failing])):
        with Harness(DEVICE, scratch_root=tmp_path / name, static_gate=False) as harness:
            payloads = [harness.run_test(test) for test in order][-len(failing) :]
        for payload in payloads:
            del payload["compile_s"], payload["run_s"]
        results.append(json.dumps(payloads, sort_keys=True))

    assert results[0] == results[1]
    assert str(tmp_path) not in results[0]
    assert '"outcome": "pass"' not in results[0]
    assert "cannot use <tmp> for <function exp at 0x...>" in results[0]


#: A candidate side, unconfined, whose transfer of the outputs back raises FAULT: on a GPU, a
#: kernel's fault poisons the context, and the transfer is where it may surface first.
FAULTING_TRANSFER = """
import json, sys
from multiprocessing.connection import Connection
from pathlib import Path
import torch
from opforge_worker import candidate
from opforge_worker.device_kinds import lookup

def faulting_transfer(*args, **kwargs):
    raise FAULT

candidate.output_structure = faulting_transfer
arguments = dict(zip(sys.argv[1::2], sys.argv[2::2]))
options = json.loads(arguments["--options"])
scratch = Path(arguments["--scratch"]).resolve()
kind = lookup(options["device_kind"])
candidate.serve(Connection(int(arguments["--fd"])), kind, scratch, {}, options)
"""
ILLEGAL_ACCESS = "CUDA error: an illegal memory access was encountered"


@pytest.mark.parametrize(
    ("fault", "outcome"),
    [(f"torch.AcceleratorError({ILLEGAL_ACCESS!r})", "crash"), ("KeyError(1)", "harness_error")],
)
def test_fault_sending_outputs_back_is_a_crash_only_if_the_device_faulted(
    monkeypatch, fault, outcome
):
    faulting = type(
        "FaultingTransferProcess",
        (sandbox.CandidateProcess,),
        {"entry": ("-c", FAULTING_TRANSFER.replace("FAULT", fault))},
    )
    started = []

    def first_faults(scratch, options):
        started.append((faulting if not started else sandbox.CandidateProcess)(scratch, options))
        return started[-1]

    monkeypatch.setattr(harness_module, "CandidateProcess", first_faults)
    with Harness(DEVICE) as harness:
        failure = failure_of(harness.run_test(request("honest/exp", "exp")), outcome)

        if outcome == "crash":
            assert failure["cuda_error"] == ILLEGAL_ACCESS
        else:
            assert failure["message"] == "candidate process: KeyError(1)"
        assert harness.run_test(request("honest/exp", "exp"))["outcome"] == "pass"
    assert len(started) == 2 and not started[0].alive


def test_timeout_kills_the_process_group_and_the_next_candidate_runs(harness):
    failure = failure_of(
        harness.run_test(request("outcomes/timeout", "exp", timeout_s=3)), "timeout"
    )

    assert "3 s" in failure["message"]
    assert harness.run_test(request("honest/exp", "exp"))["outcome"] == "pass"


def test_accuracy_error_carries_a_tensor_diff(harness):
    failure = failure_of(
        harness.run_test(request("outcomes/accuracy_error", "exp")), "accuracy_error"
    )
    diff = failure["diff"]

    assert diff["actual_shape"] == diff["expected_shape"] == [20]
    assert diff["mismatched"] > 0 and diff["total"] == 20
    assert 0.009 < diff["max_rel_error"] < 0.011
    first = diff["first_mismatches"][0]
    assert float(first["actual"]) == pytest.approx(float(first["expected"]) * 1.01, rel=1e-5)


def test_cheat_detected_names_the_aten_op():
    # torch.exp is also refused by the static gate (test_harness_gate.py); without it the
    # dispatch recorder names the op.
    with Harness(DEVICE, static_gate=False) as harness:
        result = harness.run_test(request("cheats/torch_fallback", "exp"))
    failure = failure_of(result, "cheat_detected")

    assert failure["check"] == "fallback"
    assert "aten::exp" in failure["message"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"op": "no_such_operator"}, "no OpInfo named 'no_such_operator'"),
        ({"variant": "no_such_variant"}, "variant 'no_such_variant'"),
        ({"dtypes": ["float8"]}, "key 'dtypes': expected bfloat16, float16, float32"),
        ({"timeout_s": None}, "key 'timeout_s': expected float, got nil"),
        ({"timeout_s": 0}, "key 'timeout_s': must be positive"),
    ],
)
def test_harness_error_is_never_the_candidates(harness, overrides, message):
    result = harness.run_test({**request("honest/exp", "exp"), **overrides})

    assert result["outcome"] == "harness_error"
    assert message in result["failure"]["message"]
    assert result["tests_run"] == 0


def test_mode_all_runs_every_sample_for_pass_counts(harness):
    result = harness.run_test(
        request(
            "honest/index_select",
            "index_select",
            ["float32", "int64"],
            mode="all",
            **OPINFO_SAMPLES_ONLY,
        )
    )

    assert result["per_dtype"] == {
        "float32": opinfo_counts(3, 3, "pass"),
        "int64": opinfo_counts(3, 3, "pass"),
    }


def test_first_failure_stops_and_marks_the_rest_skipped(harness):
    result = harness.run_test(
        request("outcomes/accuracy_error", "exp", ["float32", "float16"], **OPINFO_SAMPLES_ONLY)
    )

    assert result["tests_run"] == 1 and result["tests_passed"] == 0
    assert result["per_dtype"]["float16"] == opinfo_counts(0, 0, "skipped")


def test_mode_all_keeps_counting_after_failures(harness):
    result = harness.run_test(
        request("outcomes/accuracy_error", "exp", mode="all", **OPINFO_SAMPLES_ONLY)
    )

    assert result["outcome"] == "accuracy_error"
    # Sample 1 is empty and sample 2 is a 0-dim tensor: nothing to get wrong in the first.
    assert result["per_dtype"]["float32"] == opinfo_counts(3, 1, "accuracy_error")


def test_cancel_stops_a_running_test(harness):
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()

    with pytest.raises(JobCancelled):
        harness.run_test(request("outcomes/timeout", "exp", timeout_s=60), cancel)
    assert harness.run_test(request("honest/exp", "exp"))["outcome"] == "pass"


def test_tolerances_come_from_the_settings_file(tmp_path):
    settings = DEFAULT_SETTINGS_PATH
    loose = tmp_path / "tolerances.yaml"
    loose.write_text(
        settings.read_text().replace(
            "op_tolerances: {}", "op_tolerances: {exp: {float32: {atol: 0, rtol: 0.02}}}"
        )
    )

    with Harness(DEVICE, tolerances_path=loose) as harness:
        result = harness.run_test(request("outcomes/accuracy_error", "exp"))

    assert result["outcome"] == "pass", result["failure"]


def test_a_candidate_process_that_cannot_start_is_a_harness_error(tmp_path):
    settings = DEFAULT_SETTINGS_PATH
    impatient = tmp_path / "tolerances.yaml"
    impatient.write_text(
        settings.read_text().replace("startup_timeout_s: 180", "startup_timeout_s: 0.001")
    )

    with Harness(DEVICE, tolerances_path=impatient) as harness:
        result = harness.run_test(request("honest/exp", "exp"))

    assert result["outcome"] == "harness_error"
    assert "candidate process failed to start" in result["failure"]["message"]


def test_every_outcome_is_documented():
    assert set(OUTCOMES) == {
        "pass",
        "compile_error",
        "runtime_error",
        "crash",
        "timeout",
        "accuracy_error",
        "cheat_detected",
        "lint_violation",
        "harness_error",
        "device_defect",
    }
