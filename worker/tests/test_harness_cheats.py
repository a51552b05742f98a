"""Every dynamic family of ANTI-CHEAT.md is caught without the linter, and each cheat's honest
twin passes in the same harness (a false positive is a failure too).

The harness runs without its static gate here: most of these cheats break a rule it refuses
before running (test_harness_gate.py), and this suite tests the dynamic layer on its own."""

import os

import pytest
from harness_helpers import DEVICE, request

from opforge_worker.harness import Harness


@pytest.fixture(scope="module")
def harness():
    with Harness(DEVICE, static_gate=False) as harness:
        yield harness


CHEATS = [
    # (cheat, op, check that must catch it, honest twin)
    ("cheats/torch_fallback", "exp", "fallback", "honest/exp"),
    ("cheats/aten_ops", "exp", "fallback", "honest/exp"),
    ("cheats/trivial_kernel", "exp", "fallback", "honest/exp_upcast"),
    ("cheats/no_launch", "exp", "no_launch", "honest/exp"),
    ("cheats/subclass", "exp", "output_type", "honest/exp"),
    ("cheats/alias", "clone", "aliasing", "honest/clone"),
    ("cheats/mutate_input", "exp", "mutation", "honest/exp"),
    ("cheats/in_place", "exp", "aliasing", "honest/exp"),
    ("cheats/host_numpy", "exp", "host_read", "honest/exp"),
    ("cheats/host_tolist", "exp", "host_read", "honest/exp"),
    ("cheats/thread", "exp", "thread", "honest/exp"),
    ("cheats/cache", "exp", "fresh_inputs", "honest/exp"),
    ("cheats/judge_memory", "exp", "sandbox", "honest/exp"),
    ("cheats/tamper_launcher", "exp", "integrity", "honest/exp"),
    ("cheats/tamper_recorder", "exp", "dispatch_escape", "honest/exp"),
    ("cheats/torch_compile", "exp", "integrity", "honest/exp"),
]
if DEVICE == "interpreter":  # on a GPU this kernel does not compile
    CHEATS.append(("cheats/kernel_torch", "exp", "fallback", "honest/exp"))
    CHEATS.append(("cheats/kernel_method", "exp", "fallback", "honest/exp"))


@pytest.mark.parametrize(("cheat", "op", "check", "twin"), CHEATS, ids=[c[0] for c in CHEATS])
def test_cheat_is_caught_and_its_twin_passes(harness, cheat, op, check, twin):
    caught = harness.run_test(request(cheat, op))

    assert caught["outcome"] == "cheat_detected", caught["failure"]
    assert caught["failure"]["check"] == check
    assert caught["failure"]["message"].startswith(check)
    assert caught["tests_passed"] == 0
    honest = harness.run_test(request(twin, op))
    assert honest["outcome"] == "pass", honest["failure"]


def test_fallback_names_the_op_even_for_an_op_of_the_allowed_copy_kind(harness):
    source = (
        "@triton.jit\ndef noop(x_ptr):\n    pass\n\n\n"
        "def clone(input):\n    noop[(1,)](input)\n"
        "    return torch.empty_like(input).copy_(input)\n"
    )
    caught = harness.run_test({**request("honest/clone", "clone"), "source": source})

    assert caught["outcome"] == "cheat_detected"
    assert "aten::copy_" in caught["failure"]["message"]


def test_expected_values_are_nowhere_in_reach_of_the_candidate(harness):
    # The candidate searches /proc and the judge's directories; nothing is readable, so all it
    # can return is its input, which is wrong.
    result = harness.run_test(request("cheats/judge_files", "exp"))

    assert result["outcome"] == "accuracy_error", result["failure"]


def test_tampering_recycles_the_candidate_process(harness):
    harness.run_test(request("honest/exp", "exp"))
    started = harness._processes_started

    harness.run_test(request("cheats/tamper_recorder", "exp"))
    assert harness.run_test(request("honest/exp", "exp"))["outcome"] == "pass"

    assert harness._processes_started == started + 1


@pytest.mark.skipif(DEVICE != "cuda", reason="streams exist only on CUDA")
def test_side_stream_is_caught_on_cuda(harness):
    caught = harness.run_test(request("cheats/stream", "exp"))

    assert caught["outcome"] == "cheat_detected"
    assert caught["failure"]["check"] == "stream"
    assert harness.run_test(request("honest/exp", "exp"))["outcome"] == "pass"


def test_a_forged_reply_never_runs_code_in_the_judge(harness):
    # The candidate swaps the bytes of its reply for a pickle that sets OPFORGE_FORGED_REPLY when
    # unpickled: the judge reads replies as described raw bytes, so all it sees is bad bytes.
    result = harness.run_test(request("cheats/forged_reply", "exp"))

    assert "OPFORGE_FORGED_REPLY" not in os.environ
    assert result["outcome"] == "harness_error", result["failure"]
    assert "replies do not account for the bytes" in result["failure"]["message"]
    assert harness.run_test(request("honest/exp", "exp"))["outcome"] == "pass"
