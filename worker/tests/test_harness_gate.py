"""The harness's static gate: a source that could reach the dynamic checks never runs.

The dynamic checks share the candidate's interpreter; the candidates of corpus/tamper erase what
they found (through a dispatch mode, a traceback's frames, a hook's globals, the reply channel),
so each would pass with a torch fallback behind one trivial kernel launch if it ran. The honest
corpus and the worked examples pass with the gate on (test_harness_honest.py, test_examples.py).
"""

import copy
import shutil
import threading

import pytest
from harness_helpers import CORPUS, DEVICE, request, source

from opforge_worker import harness as harness_module
from opforge_worker.harness import Harness
from opforge_worker.jobs import handlers_for
from opforge_worker.linter import lint_source, load_profile
from opforge_worker.validate import validate_directory


@pytest.fixture(scope="module")
def harness():
    with Harness(DEVICE) as harness:
        yield harness


#: Each tamper candidate, with the violation through which it reaches the checks, or changes
#: the process for the sources after it (test_harness_isolation.py).
TAMPERING = [
    ("tamper/dispatch_findings", "private_attribute", "torch.utils._python_dispatch."),
    ("tamper/frame_walk", "dunder", ".__traceback__"),
    ("tamper/hook_globals", "dunder", "torch.Tensor.numpy.__globals__"),
    ("tamper/reply_filter", "forbidden_module", "torch.sys.modules"),
    ("tamper/patch_torch_exp", "attribute_assignment", ".exp"),
    ("tamper/patch_tensor_method", "attribute_assignment", ".exp"),
    ("tamper/patch_triton_language", "attribute_assignment", ".log"),
    ("tamper/register_aten_kernel", "forbidden_module", "torch.library.Library"),
]


def test_every_tamper_candidate_is_listed():
    listed = {name for name, _, _ in TAMPERING}
    assert {f"tamper/{path.stem}" for path in (CORPUS / "tamper").glob("*.py")} == listed


def refused_before_running(result, outcome="cheat_detected", check="static") -> dict:
    """The failure of a test the static gate refused, checked for what every such one has."""
    assert result["outcome"] == outcome, result["failure"]
    failure = result["failure"]
    assert failure["check"] == check
    assert failure["dtype"] == "" and failure["sample_index"] == -1
    assert result["tests_run"] == 0 and result["sandbox"] == {}
    findings = failure["findings"]
    assert findings and all(finding.startswith(f"{check}: ") for finding in findings)
    # The message names the first violation, and counts the others.
    first = findings[0].removeprefix(f"{check}: ")
    more = f" ({len(findings) - 1} more in findings)" if len(findings) > 1 else ""
    assert failure["message"] == f"{check}: refused before running: {first}{more}"
    return failure


@pytest.mark.parametrize(("name", "rule", "text"), TAMPERING, ids=[t[0] for t in TAMPERING])
def test_tampering_candidate_is_refused_before_it_runs(harness, name, rule, text):
    started = harness._processes_started

    failure = refused_before_running(harness.run_test(request(name, "exp")))

    assert any(
        finding.startswith(f"static: {rule} at line ") and f"`{text}" in finding
        for finding in failure["findings"]
    ), failure["findings"]
    assert harness._processes_started == started  # no candidate process was even needed


def test_every_violation_of_a_refused_rule_is_a_finding_with_line_text_and_hint(harness):
    failure = refused_before_running(harness.run_test(request("tamper/hook_globals", "exp")))

    assert failure["findings"] == [
        "static: dunder at line 14 `torch.Tensor.numpy.__globals__`: "
        "`torch.Tensor.numpy.__globals__`: dunder names and attributes are not allowed; "
        "use the public API.",
        "static: attribute_assignment at line 14 `.add`: Assigning `.add` is not allowed: "
        "never patch modules or tensors; bind a local name instead.",
        "static: fallback at line 16 `torch.exp`: `torch.exp` computes with torch on the host: "
        "that is a fallback, not a kernel. Compute it in a Triton kernel; the wrapper may call "
        "torch only to allocate, fill, view, copy and read metadata.",
    ]


def test_imports_of_the_profiles_modules_pass_wherever_they_stand(harness):
    # The habit of every model: importing what the harness provides, after a docstring, with
    # __future__ and the standard library's pure modules beside it.
    imports = (
        '"""exp."""\nfrom __future__ import annotations\nimport math\nfrom typing import Optional\n'
        "import torch\nimport triton\nimport triton.language as tl\n"
    )

    result = harness.run_test(
        {**request("honest/exp", "exp"), "source": imports + source("honest/exp")}
    )

    assert result["outcome"] == "pass", result["failure"]


def test_a_mistake_of_form_alone_is_a_lint_violation_with_instructions(harness):
    imports = "import numpy\nfrom math import *\n"
    started = harness._processes_started

    result = harness.run_test(
        {**request("honest/exp", "exp"), "source": imports + source("honest/exp")}
    )

    failure = refused_before_running(result, "lint_violation")
    hint = load_profile(DEVICE).hints["import"]
    assert failure["findings"] == [
        f"static: import at line 1 `import numpy`: {hint.format(module='numpy')}",
        f"static: import at line 2 `from math import *`: {hint.format(module='math.*')}",
    ]
    assert harness._processes_started == started


def test_a_torch_compute_call_in_the_wrapper_is_a_fallback_refused_before_it_runs(harness):
    started = harness._processes_started

    result = harness.run_test(request("cheats/torch_fallback", "exp"))

    failure = refused_before_running(result, "cheat_detected", "fallback")
    (finding,) = failure["findings"]
    assert finding.startswith("fallback: fallback at line 4 `torch.exp`: ")
    assert "Compute it in a Triton kernel" in finding
    assert harness._processes_started == started


def test_a_cheat_decides_the_outcome_and_comes_first_among_mistakes_of_form(harness):
    tampering = "import numpy\n" + source("tamper/hook_globals")

    failure = refused_before_running(
        harness.run_test({**request("tamper/hook_globals", "exp"), "source": tampering})
    )

    rules = [finding.split(" ")[1] for finding in failure["findings"]]
    assert rules == ["dunder", "attribute_assignment", "fallback", "import"]


def test_an_oversized_source_is_refused_unparsed(harness):
    limit = harness.lint_profile.max_source_chars
    padded = source("honest/exp") + "#" * limit

    failure = refused_before_running(
        harness.run_test({**request("honest/exp", "exp"), "source": padded}), "lint_violation"
    )

    assert failure["findings"] == [
        f"static: source_too_large at line 1: The candidate is longer than {limit} characters; "
        "write a focused wrapper and kernels."
    ]


@pytest.fixture
def linted(monkeypatch) -> list[str]:
    """The sources the static gate lints, in order."""
    sources = []

    def linting(source, **options):
        sources.append(source)
        return lint_source(source, **options)

    monkeypatch.setattr(harness_module, "lint_source", linting)
    return sources


def test_a_refused_source_is_refused_again_alike_without_a_second_lint(harness, linted):
    refused = request("tamper/hook_globals", "exp")
    refused["source"] += "# the test of the gate's memory\n"  # a source no other test gated

    first = harness.run_test(refused)
    expected = copy.deepcopy(first)
    first["failure"]["findings"].clear()  # a caller's payload is its own to change
    again = harness.run_test(refused)

    refused_before_running(again)
    assert again == expected
    assert linted == [refused["source"]]


def test_an_honest_source_passes_again_without_a_second_lint(harness, linted):
    honest = request("honest/exp", "exp")
    honest["source"] += "# the test of the gate's memory\n"

    results = [harness.run_test(honest), harness.run_test(honest)]

    assert [result["outcome"] for result in results] == ["pass", "pass"], results
    assert linted == [honest["source"]]


def test_a_source_changed_by_one_character_is_linted_afresh(harness, linted):
    honest = request("honest/exp", "exp")
    refused = request("tamper/hook_globals", "exp")
    harness.run_test(honest)
    harness.run_test(refused)
    linted.clear()
    honest_changed = honest["source"].replace("torch.empty_like(", "torch.emptx_like(")
    refused_changed = refused["source"].replace("torch.exp(", "torch.exq(")
    assert honest_changed != honest["source"], "the change must change the source"

    now_refused = harness.run_test({**honest, "source": honest_changed})
    still_refused = harness.run_test({**refused, "source": refused_changed})

    assert linted == [honest_changed, refused_changed]
    # A torch function the profile does not know, called, is taken for one that computes.
    now_refused = refused_before_running(now_refused, "cheat_detected", "fallback")
    assert any("`torch.emptx_like`" in finding for finding in now_refused["findings"])
    findings = refused_before_running(still_refused)["findings"]
    assert any("`torch.exq`" in finding for finding in findings), findings
    assert not any("`torch.exp`" in finding for finding in findings), findings


def test_the_gate_forgets_the_least_recently_gated_source_first(linted, monkeypatch):
    monkeypatch.setattr(harness_module, "_GATED_SOURCES", 2)
    gate = harness_module._StaticGate(load_profile(DEVICE))
    first, second, third = (source("tamper/hook_globals") + f"# {n}\n" for n in range(3))

    for gated in (first, second, first, third, first, second):
        verdict = gate.refused(gated, "exp", "exp")
        assert [refusal for refusal, _ in verdict] == ["cheat", "cheat", "fallback"]

    assert linted == [first, second, third, second]


HARMFUL = ["env_secret", "exit", "fork_bomb", "segfault_ctypes", "socket_connect", "write_outside"]


@pytest.mark.parametrize("name", HARMFUL)
def test_harmful_candidate_is_refused_before_it_runs(harness, name):
    started = harness._processes_started

    refused_before_running(harness.run_test(request(f"harmful/{name}", "exp")))

    assert harness._processes_started == started


def test_the_daemons_test_job_is_gated():
    handlers, release = handlers_for("device", DEVICE, 1)
    try:
        result = handlers["test"](request("tamper/reply_filter", "exp"), threading.Event())
    finally:
        release()

    refused_before_running(result)


def test_validate_is_gated(tmp_path):
    shutil.copy(CORPUS / "tamper" / "reply_filter.py", tmp_path / "exp.py")

    (result,) = validate_directory(tmp_path, DEVICE, dtypes=["float32"])

    refused_before_running(result)


def test_rules_outside_the_gate_leave_the_verdict_to_the_dynamic_checks(harness):
    # A copy_ into an allocation is within the surface the gate allows: the dispatch recorder
    # catches that the copy is the result, and the honest clone passes with the gate on.
    copying = (
        "@triton.jit\ndef noop(x_ptr):\n    pass\n\n\n"
        "def clone(input):\n    noop[(1,)](input)\n"
        "    return torch.empty_like(input).copy_(input)\n"
    )

    caught = harness.run_test({**request("honest/clone", "clone"), "source": copying})

    assert caught["outcome"] == "cheat_detected", caught["failure"]
    assert caught["failure"]["check"] == "fallback"
    honest = harness.run_test(request("honest/clone", "clone"))
    assert honest["outcome"] == "pass", honest["failure"]


def test_a_source_that_does_not_parse_is_a_compile_error_not_a_refusal(harness):
    broken = "import os\n" + source("honest/exp").replace("):\n", ")\n", 1)

    result = harness.run_test({**request("honest/exp", "exp"), "source": broken})

    assert result["outcome"] == "compile_error", result["failure"]
    assert "SyntaxError" in result["failure"]["compile_log"]


def test_without_the_gate_a_frame_walk_from_a_traceback_is_refused_by_the_sandbox():
    with Harness(DEVICE, static_gate=False) as harness:
        harness.run_test(request("honest/exp", "exp"))
        started = harness._processes_started
        result = harness.run_test(request("tamper/frame_walk", "exp"))
        honest = harness.run_test(request("honest/exp", "exp"))

        assert result["outcome"] == "cheat_detected", result["failure"]
        assert result["failure"]["check"] == "sandbox"
        assert "object.__getattr__ from candidate code refused" in result["failure"]["message"]
        # The process that ran it is no longer trusted: the honest candidate runs in a new one.
        assert honest["outcome"] == "pass", honest["failure"]
        assert harness._processes_started == started + 1
