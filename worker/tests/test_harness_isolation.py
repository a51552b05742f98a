"""No candidate affects another: a source that changes what later sources in its process rely on
(torch, triton, the harness, the dispatcher) is caught, and its process replaced before the
next source runs (candidate.py, checks.ProcessState).

The harness runs without its static gate, which refuses these sources before they run: each is
followed by an honest candidate, which must pass, and by one that the change would have let
through, which must be caught."""

import signal
import sys

import pytest
import torch
from harness_helpers import DEVICE, OPINFO_SAMPLES_ONLY, request
from torch.overrides import TorchFunctionMode

from opforge_worker.audit import CodeOwners
from opforge_worker.checks import ProcessState
from opforge_worker.harness import Harness

#: A patching source, what its finding names, and a source that its change would have let pass.
PATCHES = {
    "torch function": (
        "tamper/patch_torch_exp",
        "torch.exp was replaced",
        "def exp(input):\n    return torch.exp(input)\n",
        "cheat_detected",
    ),
    "tensor method": (
        "tamper/patch_tensor_method",
        "torch.Tensor.exp was added",
        "def exp(input):\n    return input.exp()\n",
        "cheat_detected",
    ),
    "triton.language function": (
        "tamper/patch_triton_language",
        "triton.language.log was replaced",
        None,  # filled below: the honest kernel computing exp as log
        "accuracy_error",
    ),
    "aten kernel registration": (
        "tamper/register_aten_kernel",
        "a torch.library registration (IMPL aten)",
        "def exp(input):\n    return torch.exp(input)\n",
        "cheat_detected",
    ),
}


@pytest.fixture(scope="module")
def harness():
    with Harness(DEVICE, static_gate=False) as harness:
        yield harness


def test_the_checks_see_no_change_after_honest_sources(harness):
    started = harness._processes_started
    for name, op in (("honest/exp", "exp"), ("honest/cat", "cat"), ("honest/exp", "exp")):
        result = harness.run_test(request(name, op))
        assert result["outcome"] == "pass", result["failure"]

    assert harness._processes_started == max(started, 1)


@pytest.mark.parametrize("patch", PATCHES.values(), ids=PATCHES.keys())
def test_a_source_that_changes_the_process_is_caught_and_runs_alone(harness, patch):
    name, change, later_source, later_outcome = patch
    if later_source is None:
        later_source = request("honest/exp", "exp")["source"].replace("tl.exp(", "tl.log(")

    # OpInfo's samples alone: the patching sources read their inputs flat, which a strided
    # sample of the other sets would fail before the state check at the end of a batch.
    patched = harness.run_test(request(name, "exp", **OPINFO_SAMPLES_ONLY))
    honest = harness.run_test(request("honest/exp", "exp"))
    later = harness.run_test({**request("honest/exp", "exp"), "source": later_source})

    assert patched["outcome"] == "cheat_detected", patched["failure"]
    assert patched["failure"]["check"] == "integrity"
    assert change in patched["failure"]["message"]
    assert honest["outcome"] == "pass", honest["failure"]
    assert later["outcome"] == later_outcome, later["failure"]


def _exclude_python_key(excluded: bool) -> None:
    torch._C._dispatch_tls_set_dispatch_key_excluded(torch._C.DispatchKey.Python, excluded)


#: Process-wide state a source could leave behind, beyond namespaces: (what the finding names,
#: the change, its undoing).
SETTINGS = {
    "torch function mode": (
        "the torch function mode stack changed",
        lambda: torch._C._push_on_torch_function_stack(TorchFunctionMode()),
        torch._C._pop_torch_function_stack,
    ),
    "excluded dispatch key": (
        "the dispatch keys excluded changed",
        lambda: _exclude_python_key(True),
        lambda: _exclude_python_key(False),
    ),
    "interval timer": (
        "the interval timer changed",
        lambda: signal.setitimer(signal.ITIMER_REAL, 3600),
        lambda: signal.setitimer(signal.ITIMER_REAL, 0),
    ),
    "import hook": (
        "sys.meta_path changed",
        lambda: sys.meta_path.insert(0, object()),
        lambda: sys.meta_path.pop(0),
    ),
}


@pytest.mark.parametrize("setting", SETTINGS.values(), ids=SETTINGS.keys())
def test_process_wide_settings_left_changed_are_found(tmp_path, setting):
    finding, change, undo = setting
    state = ProcessState(CodeOwners(tmp_path))
    state.snapshot()
    assert state.changes() == ([], False)

    change()
    try:
        changed, stale = state.changes()
    finally:
        undo()

    assert finding in changed and stale
    assert state.changes() == ([], False)
