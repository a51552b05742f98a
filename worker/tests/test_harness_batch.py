"""The calls of a dtype run in batches: a failure on one sample of a batch is that sample's.

exp's float32 samples (OpInfo's own, the only set these tests draw) are, in order: a (20,) tensor,
an empty (1, 0, 3) tensor and a 0-dim tensor.
Each candidate here is honest exp except on one of them, picked by its number of dimensions.
"""

import os
import signal

import pytest
from harness_helpers import DEVICE, OPINFO_SAMPLES_ONLY, opinfo_counts, request, source

from opforge_worker import harness as harness_module
from opforge_worker.harness import Harness

HONEST = source("honest/exp")
#: The honest wrapper's first line, after which each candidate misbehaves on one sample.
WRAPPER = "def exp(input):\n"
CRASH_KERNEL = """
@triton.jit
def far_kernel(x_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets + (1 << 44)))
"""


DEVICE_FAULT = "CUDA error: an illegal memory access was encountered"

#: exp(0) for a 0-dim input, from a kernel: a wrong answer that launches and falls back to nothing.
EXP_OF_ZERO = """out = torch.zeros_like(input)
exp_kernel[(1,)](out, out, 1, BLOCK=16)
return out"""


def misbehaving(dims: int, body: str, kernels: str = "") -> str:
    """honest exp whose wrapper runs ``body`` first when its input has ``dims`` dimensions."""
    assert WRAPPER in HONEST
    guard = f"    if input.dim() == {dims}:\n" + "".join(
        f"        {line}\n" for line in body.splitlines()
    )
    return HONEST.replace(WRAPPER, WRAPPER + guard) + kernels


#: Per-call limit for the tests that end in a failure. After a crash or a timeout the next batch
#: runs in a new process: its first call must fit in it too (compiles have their own grace).
FAILING_CALL_TIMEOUT_S = 5


def run(harness, candidate: str, **overrides) -> dict:
    return harness.run_test(
        {**request("honest/exp", "exp", **OPINFO_SAMPLES_ONLY), "source": candidate, **overrides}
    )


@pytest.fixture(scope="module")
def harness():
    with Harness(DEVICE) as harness:
        yield harness


@pytest.mark.parametrize(
    ("candidate", "outcome", "check"),
    [
        (misbehaving(3, 'raise ValueError("only here")'), "runtime_error", "runtime"),
        (misbehaving(3, "far_kernel[(1,)](input, BLOCK=16)", CRASH_KERNEL), "crash", "crash"),
        (misbehaving(3, "while True:\n    pass"), "timeout", "timeout"),
        # What a device fault raises where it surfaces; one surfacing in a group could be any
        # of its calls' until the judge runs them again one at a time.
        (misbehaving(3, f"raise RuntimeError({DEVICE_FAULT!r})"), "crash", "crash"),
    ],
    ids=["runtime_error", "crash", "timeout", "device_fault"],
)
def test_a_failure_mid_batch_is_reported_on_its_sample(harness, candidate, outcome, check):
    first = run(harness, candidate, timeout_s=FAILING_CALL_TIMEOUT_S)
    every = run(harness, candidate, timeout_s=FAILING_CALL_TIMEOUT_S, mode="all")

    assert first["outcome"] == outcome, first["failure"]
    assert first["failure"]["check"] == check
    assert first["failure"]["sample_index"] == 1
    assert first["failure"]["sample"].startswith("sample_inputs #1: (Tensor[float32](1, 0, 3)")
    assert (first["tests_run"], first["tests_passed"]) == (2, 1)
    # The samples after the failing one still run, in a fresh process after a death.
    assert every["per_dtype"]["float32"] == opinfo_counts(3, 2, outcome)
    assert every["failure"]["sample_index"] == 1
    assert run(harness, HONEST)["outcome"] == "pass"


def test_the_replacement_of_a_crashed_process_starts_before_the_next_test(harness):
    # On the first sample, whose call goes alone: a crash in a group costs a second process.
    crashing = misbehaving(1, "far_kernel[(1,)](input, BLOCK=16)", CRASH_KERNEL)
    run(harness, HONEST)
    started = harness._processes_started

    crashed = run(harness, crashing, timeout_s=FAILING_CALL_TIMEOUT_S)

    assert crashed["outcome"] == "crash", crashed["failure"]
    standby = harness._standby
    assert standby is not None and standby.alive
    assert harness._processes_started == started + 1
    assert run(harness, HONEST)["outcome"] == "pass"
    assert harness._process is standby and harness._standby is None
    assert harness._processes_started == started + 1


def test_a_standby_process_lost_while_waiting_is_replaced_by_a_fresh_one(harness):
    crashing = misbehaving(0, "far_kernel[(1,)](input, BLOCK=16)", CRASH_KERNEL)
    assert run(harness, crashing, timeout_s=FAILING_CALL_TIMEOUT_S)["outcome"] == "crash"
    standby = harness._standby
    os.kill(standby._process.pid, signal.SIGKILL)
    standby._process.wait()

    assert run(harness, HONEST)["outcome"] == "pass"
    assert harness._process is not standby and harness._process.alive


def test_a_wrong_answer_on_the_last_sample_is_an_accuracy_error_there(harness):
    wrong = misbehaving(0, EXP_OF_ZERO)

    result = run(harness, wrong, mode="all")

    assert result["outcome"] == "accuracy_error"
    assert result["failure"]["sample_index"] == 2
    assert result["failure"]["sample"].startswith("sample_inputs #2: (Tensor[float32]() = ")
    assert result["per_dtype"]["float32"] == opinfo_counts(3, 2, "accuracy_error")


def test_a_mutation_of_one_samples_input_is_caught_on_it(harness):
    computes_then_overwrites_its_input = """out = torch.empty_like(input)
exp_kernel[(1,)](input, out, 1, BLOCK=16)
input.copy_(out)
return out"""
    mutating = misbehaving(0, computes_then_overwrites_its_input)

    result = run(harness, mutating, mode="all")

    assert result["outcome"] == "cheat_detected", result["failure"]
    assert result["failure"]["check"] == "mutation"
    assert result["failure"]["sample_index"] == 2
    assert result["per_dtype"]["float32"] == opinfo_counts(3, 2, "cheat_detected")
    assert run(harness, HONEST)["outcome"] == "pass"


def test_a_failures_output_is_what_its_own_call_printed(harness):
    failing = misbehaving(0, "raise ValueError('no')")
    printing = failing.replace(WRAPPER, WRAPPER + "    print('called on', input.dim())\n")

    failure = run(harness, printing)["failure"]

    # Sample 2's fresh values may have run and printed too before the judge's stop came.
    assert failure["sample_index"] == 2
    assert failure["stdout"] == "called on 0\n"


def test_each_call_of_a_batch_gets_its_own_time_budget():
    slow = HONEST.replace(WRAPPER, WRAPPER + "    import time\n    time.sleep(1)\n")

    with Harness(DEVICE, static_gate=False) as harness:  # the gate refuses the import of time
        result = run(harness, slow, timeout_s=2.5)
        started = harness._processes_started

    # Six calls of a second each in one batch, none of them over its 2.5 s; a group ends once
    # its calls took a tenth of that, so no group ran past it and none had to be run again.
    assert result["outcome"] == "pass", result["failure"]
    assert started == 1


def test_a_batch_runs_its_first_call_alone_and_the_rest_in_groups(harness, monkeypatch):
    replies_per_message = []
    unpack = harness_module._unpack_replies

    def counting(message, blob, received):
        replies_per_message.append(len(message["replies"]))
        return unpack(message, blob, received)

    monkeypatch.setattr(harness_module, "_unpack_replies", counting)
    monkeypatch.setattr(harness_module, "_GROUP_CALLS", 4)

    result = run(harness, HONEST, dtypes=["float32", "bfloat16"])

    assert result["outcome"] == "pass", result["failure"]
    # Per dtype: three samples, each called twice.
    assert replies_per_message == [1, 4, 1] * 2


def test_batches_split_by_bytes_give_the_same_verdicts(harness, monkeypatch):
    monkeypatch.setattr(harness_module, "_BATCH_BYTES", 1)  # every sample in a batch of its own
    wrong = misbehaving(0, EXP_OF_ZERO)

    result = run(harness, wrong, mode="all")
    honest = harness.run_test(
        request(
            "honest/index_select",
            "index_select",
            ["float32", "int64"],
            mode="all",
            **OPINFO_SAMPLES_ONLY,
        )
    )

    assert result["per_dtype"]["float32"] == opinfo_counts(3, 2, "accuracy_error")
    assert result["failure"]["sample_index"] == 2
    assert honest["outcome"] == "pass" and honest["tests_run"] == 6


def test_calls_run_past_a_failure_do_not_change_its_verdict_even_when_they_crash(harness):
    fails_then_crashes = misbehaving(1, 'raise ValueError("first")').replace(
        WRAPPER, WRAPPER + "    if input.dim() == 3:\n        far_kernel[(1,)](input, BLOCK=16)\n"
    )
    candidate = fails_then_crashes + CRASH_KERNEL

    first = run(harness, candidate)
    every = run(harness, candidate, mode="all")

    assert first["outcome"] == "runtime_error" and first["failure"]["sample_index"] == 0
    assert first["tests_run"] == 1
    assert every["outcome"] == "runtime_error" and every["failure"]["sample_index"] == 0
    assert every["per_dtype"]["float32"] == opinfo_counts(3, 1, "runtime_error")
    assert run(harness, HONEST)["outcome"] == "pass"
