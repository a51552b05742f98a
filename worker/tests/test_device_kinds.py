"""The device-kind registry: the one place the worker's code tells accelerators apart."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from opforge_worker import contract, device_kinds, toolchain
from opforge_worker.device_kinds import KINDS, MemoryPolicy, lookup
from opforge_worker.linter import load_profile

WORKER = Path(__file__).resolve().parents[1]
#: The daemon's bound on the names workers announce (messages/device_kind.hpp).
DAEMON_RULE = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def test_every_kind_is_a_name_the_daemon_accepts():
    # The schema lists the registry's kinds for the daemon, which refuses a campaign of another.
    assert tuple(KINDS) == contract.DEVICE_KINDS == ("interpreter", "cuda")
    for name, kind in KINDS.items():
        assert kind.name == name
        assert DAEMON_RULE.fullmatch(name), name
    assert DAEMON_RULE.fullmatch(device_kinds.NO_DEVICE)
    assert device_kinds.NO_DEVICE not in KINDS


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_kind_has_a_linter_profile(name):
    profile = load_profile(lookup(name).lint_profile)
    assert profile.name == lookup(name).lint_profile


def test_an_unknown_kind_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"device kind 'tpu': expected one of interpreter, cuda"):
        lookup("tpu")


def test_the_kinds_differ_where_their_runtimes_do():
    interpreter, cuda = lookup("interpreter"), lookup("cuda")
    assert interpreter.environment["TRITON_INTERPRET"] == "1"
    assert (interpreter.torch_device, interpreter.opinfo_device) == ("cpu", "cpu")
    assert interpreter.memory_policy is MemoryPolicy.ADDRESS_SPACE and interpreter.pid_namespace
    assert interpreter.synchronize is None and interpreter.launch_stream is None
    assert (interpreter.default_slots, cuda.default_slots) == (1, 8)
    assert cuda.memory_policy is MemoryPolicy.RESIDENT and not cuda.pid_namespace
    assert cuda.runtime_writable == ("/proc/self/task",)
    assert device_kinds.OPINFO_DEVICES == ("cpu", "cuda")
    assert (interpreter.dispatch_key, cuda.dispatch_key) == ("CPU", "CUDA")
    assert interpreter.triton_environment == {"TRITON_INTERPRET": "1"}
    assert cuda.triton_environment == {}
    assert cuda.compiles_on_first_launch and not interpreter.compiles_on_first_launch


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_candidate_gets_what_triton_needs_for_its_kind(name):
    kind = lookup(name)
    assert kind.triton_environment.items() <= kind.environment.items()


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_kind_supplies_exactly_the_device_entries_of_the_toolchain(name):
    kind = lookup(name)
    if kind.torch_device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    assert tuple(sorted(kind.toolchain())) == tuple(sorted(toolchain.DEVICE_KEYS))


def kind_comparisons(path: Path) -> list[str]:
    """``x == "cuda"``-style comparisons with a kind's name in ``path``, as file:line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        for operand in (node.left, *node.comparators):
            values = (
                operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set) else [operand]
            )
            if any(isinstance(v, ast.Constant) and v.value in KINDS for v in values):
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_module_but_the_registry_compares_kind_names():
    # The library's exporter, model check and exported runtime included.
    scanned = [p for p in WORKER.glob("opforge_*/**/*.py") if p.name != "device_kinds.py"]
    assert {p.parent.name for p in scanned} >= {"opforge_worker", "opforge_library", "linter"}
    assert len(scanned) > 20
    assert [hit for path in scanned for hit in kind_comparisons(path)] == []


def test_a_comparison_with_a_kind_name_would_be_found(tmp_path):
    source = tmp_path / "branchy.py"
    source.write_text('def f(kind):\n    return kind == "cuda" or kind in ("interpreter",)\n')
    assert kind_comparisons(source) == ["branchy.py:2", "branchy.py:2"]


def device_runtime_calls(path: Path) -> list[str]:
    """Calls into a device runtime's torch module (``torch.cuda.synchronize()``,
    ``torch._C._cuda_synchronize()``) in ``path``, as file:line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name.startswith(("torch.cuda.", "torch._C._cuda")):
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_module_but_the_registry_and_the_device_clock_calls_a_device_runtime():
    # timing.py is the clock a kind names (DeviceKind.timer); everything else asks the kind.
    scanned = [
        p
        for p in WORKER.glob("opforge_*/**/*.py")
        if p.name not in ("device_kinds.py", "timing.py")
    ]
    assert [hit for path in scanned for hit in device_runtime_calls(path)] == []


def test_the_device_types_samples_record_dtypes_for_are_the_kinds():
    from opforge_worker.sample_store import DEVICE_TYPES

    assert set(DEVICE_TYPES) == {"cpu", *(kind.opinfo_device for kind in KINDS.values())}


def test_each_kind_states_its_numeric_contract():
    interpreter, cuda = lookup("interpreter").numerics, lookup("cuda").numerics
    assert interpreter.flushes_subnormals == frozenset()
    assert cuda.flushes_subnormals == {"float32", "bfloat16"}
    assert interpreter.keeps_zero_signs and cuda.keeps_zero_signs
    assert "negate_bfloat16" in interpreter.known_defects


@pytest.mark.parametrize("name", sorted(KINDS))
def test_the_known_defects_of_a_kind_are_conformance_probes(name):
    from opforge_worker.conformance import load_probes

    assert lookup(name).numerics.known_defects <= set(load_probes())
