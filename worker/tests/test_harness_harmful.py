"""Harmful candidates are contained and reported, and the harness keeps serving the next one.

The harness runs without its static gate, which refuses nearly all of them before they run
(test_harness_gate.py): containment must hold on its own."""

import os
import time
from pathlib import Path

import pytest
from harness_helpers import DEVICE, request

from opforge_worker.harness import Harness

SECRET = "opforge-test-secret-7f3a9c"


@pytest.fixture(scope="module")
def harness():
    previous = os.environ.get("OPFORGE_TEST_SECRET")
    os.environ["OPFORGE_TEST_SECRET"] = SECRET
    try:
        with Harness(DEVICE, static_gate=False) as harness:
            yield harness
    finally:
        if previous is None:
            del os.environ["OPFORGE_TEST_SECRET"]
        else:
            os.environ["OPFORGE_TEST_SECRET"] = previous


def run_then_honest(harness, name, **overrides):
    """Run a harmful candidate, then prove the harness still passes an honest one."""
    result = harness.run_test(request(name, "exp", **overrides))
    assert harness.run_test(request("honest/exp", "exp"))["outcome"] == "pass"
    return result


def test_segfault_through_ctypes_is_refused(harness):
    result = run_then_honest(harness, "harmful/segfault_ctypes")

    assert result["outcome"] == "cheat_detected"
    assert "ctypes.string_at from candidate code refused" in result["failure"]["message"]


def test_exit_is_a_crash_with_its_status(harness):
    result = run_then_honest(harness, "harmful/exit")

    assert result["outcome"] == "crash"
    assert result["failure"]["exit_code"] == 3


def test_infinite_loop_times_out(harness):
    result = run_then_honest(harness, "outcomes/timeout", timeout_s=2)

    assert result["outcome"] == "timeout"


def test_fork_bomb_is_refused(harness):
    result = run_then_honest(harness, "harmful/fork_bomb")

    assert result["outcome"] == "cheat_detected"
    assert "os.fork refused" in result["failure"]["message"]


def test_process_start_below_subprocess_is_refused(harness):
    result = run_then_honest(harness, "harmful/fork_exec")

    assert result["outcome"] == "cheat_detected"
    assert "fork_exec refused" in result["failure"]["message"]


def test_thread_bomb_is_refused(harness):
    result = run_then_honest(harness, "harmful/thread_bomb")

    assert result["outcome"] == "cheat_detected"
    assert result["failure"]["check"] == "thread"


def test_huge_allocation_fails_inside_the_candidate(harness):
    result = run_then_honest(harness, "harmful/huge_allocation")

    assert result["outcome"] == "runtime_error"
    assert any(
        text in result["failure"]["message"] for text in ("can't allocate memory", "out of memory")
    )


def test_socket_connect_is_refused(harness):
    result = run_then_honest(harness, "harmful/socket_connect")

    assert result["outcome"] == "cheat_detected"
    assert "network access refused" in result["failure"]["message"]


@pytest.mark.parametrize("name", ["harmful/write_outside", "harmful/write_outside_hidden"])
def test_writes_outside_scratch_are_refused_even_when_the_refusal_is_swallowed(harness, name):
    targets = [Path("/tmp/opforge-escape.txt"), Path("/tmp/opforge-escape-hidden.txt")]
    for target in targets:
        target.unlink(missing_ok=True)

    result = run_then_honest(harness, name)

    assert result["outcome"] == "cheat_detected"
    assert "write outside the scratch directory refused" in result["failure"]["message"]
    assert not any(target.exists() for target in targets)


def test_environment_secrets_are_out_of_reach(harness):
    assert os.environ["OPFORGE_TEST_SECRET"] == SECRET

    result = run_then_honest(harness, "harmful/env_secret")

    assert result["outcome"] == "runtime_error"
    assert result["failure"]["message"] == "RuntimeError: secrets seen: {}"
    assert SECRET not in repr(result)


@pytest.mark.parametrize(
    "name", ["harmful/thread_bomb", "harmful/write_outside", "harmful/socket_connect"]
)
def test_a_refusal_costs_seconds_and_the_next_candidate_keeps_the_process(harness, name):
    # The refused action did not happen and the process's state is verified after the test
    # (checks.ProcessState): neither the verdict nor the next test waits for a new process.
    harness.run_test(request("honest/exp", "exp"))
    started = harness._processes_started
    began = time.monotonic()

    result = harness.run_test(request(name, "exp"))
    honest = harness.run_test(request("honest/exp", "exp"))

    assert time.monotonic() - began < 5
    assert result["outcome"] == "cheat_detected", result["failure"]
    assert honest["outcome"] == "pass", honest["failure"]
    assert harness._processes_started == started
