"""Profiles load once and merge by `extends`; a malformed one is refused with file, key, reason."""

import shutil
from pathlib import Path

import pytest

from opforge_worker.linter import Profile, ProfileError, load_profile, profiles_dir

REAL_PROFILES = profiles_dir()


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    """A profiles dir holding the real base profile; tests add a broken profile next to it."""
    shutil.copy(REAL_PROFILES / "base.yaml", tmp_path / "base.yaml")
    monkeypatch.setenv("OPFORGE_LINTER_DIR", str(tmp_path))

    def write(name, text):
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        return path

    return write


def test_real_profiles_load_and_are_cached():
    cuda, interpreter = load_profile("cuda"), load_profile("interpreter")
    assert isinstance(cuda, Profile) and cuda.name == "cuda"
    assert load_profile("cuda") is cuda
    # cuda adds to the shared tl dialect; the interpreter runs exactly the shared part.
    assert interpreter.modules["tl"].allow < cuda.modules["tl"].allow
    assert "extra.cuda.libdevice.erfinv" in cuda.modules["tl"].allow
    assert cuda.modules["torch"].allow == interpreter.modules["torch"].allow
    # The host functions of data/aten_kinds.yaml are torch's allowed names and host methods.
    assert {"broadcast_tensors", "view_as_real", "as_strided", "empty_strided"} <= (
        cuda.modules["torch"].allow & cuda.host_methods
    )
    assert cuda.modules["tl"].import_path == "triton.language"


def test_a_child_adds_to_its_parent(profiles):
    profiles("extra", "extends: base\nhost_methods: [clone]\nmax_source_chars: 5000\n")
    profile = load_profile("extra")
    assert {"clone", "view"} <= profile.host_methods
    assert profile.max_source_chars == 5000


def test_a_child_refuses_its_own_construct_before_test_besides_its_parents_rules(profiles):
    profiles(
        "extra",
        "extends: base\n"
        "constructs: {while_loop: {nodes: [While], hint: no loops}}\n"
        "refused_before_test: {lint: [while_loop]}\n",
    )
    profile = load_profile("extra")
    assert {"while_loop", "dunder", "import"} <= profile.refused_before_test
    assert "try_except" not in profile.refused_before_test
    assert profile.refusal_class("while_loop") == "lint"
    assert profile.refusal_class("dunder") == "cheat"
    assert profile.refusal_class("try_except") is None


def test_every_rule_refused_before_test_has_one_class():
    profile = load_profile("cuda")
    assert profile.refused_as["cheat"].isdisjoint(profile.refused_as["lint"])
    # An attempt to get around the checks versus a mistake of form.
    assert {"dunder", "forbidden_builtin", "forbidden_module", "attribute_assignment"} <= (
        profile.refused_as["cheat"]
    )
    assert {"import", "module_attribute", "unavailable_module", "autotune_configs"} <= (
        profile.refused_as["lint"]
    )


MALFORMED = {
    "unknown key": ("extends: base\nfrobnicate: 1\n", "frobnicate", "unknown key"),
    "wrong type": (
        "extends: base\nmax_source_chars: many\n",
        "max_source_chars",
        "expected an integer",
    ),
    "bool for an integer": (
        "extends: base\nmax_source_chars: yes\n",
        "max_source_chars",
        "got bool",
    ),
    "bad import path": (
        "extends: base\nmodules:\n  math:\n    import: 'not a path'\n",
        "modules.math.import",
        "not a dotted name",
    ),
    "list item type": (
        "extends: base\nhost_methods: [view, 3]\n",
        "host_methods[1]",
        "expected an identifier",
    ),
    "bad scope": (
        "extends: base\nmodules: {tl: {scope: gpu}}\n",
        "modules.tl.scope",
        "one of kernel",
    ),
    "unknown module key": (
        "extends: base\nmodules: {tl: {allowed: [load]}}\n",
        "modules.tl.allowed",
        "unknown key",
    ),
    "unknown ast node": (
        "extends: base\nconstructs: {loops: {nodes: [Loop], hint: no loops}}\n",
        "constructs.loops.nodes[0]",
        "not an ast node",
    ),
    "bad construct scope": (
        "extends: base\nconstructs: {loops: {nodes: [While], hint: h, scope: gpu}}\n",
        "constructs.loops.scope",
        "one of kernel",
    ),
    "construct takes a built-in rule id": (
        "extends: base\nconstructs: {dunder: {nodes: [While], hint: h}}\n",
        "constructs.dunder",
        "built-in check",
    ),
    "hint for no rule": (
        "extends: base\nhints: {no_such_rule: text}\n",
        "hints.no_such_rule",
        "no built-in rule",
    ),
    "hint with an unknown field": (
        "extends: base\nhints: {dunder: 'bad {attribute}'}\n",
        "hints.dunder",
        "unknown field {attribute}",
    ),
    "hint with a broken template": (
        "extends: base\nhints: {dunder: 'bad {name'}\n",
        "hints.dunder",
        "bad template",
    ),
    "rule refused before test that no check reports": (
        "extends: base\nrefused_before_test: {cheat: [dunder, no_such_rule]}\n",
        "refused_before_test.cheat",
        "no rule has the id no_such_rule",
    ),
    "rule refused before test that is not an identifier": (
        "extends: base\nrefused_before_test: {lint: [import, 3]}\n",
        "refused_before_test.lint[1]",
        "expected an identifier",
    ),
    "rule refused before test without a class": (
        "extends: base\nrefused_before_test: [dunder]\n",
        "refused_before_test",
        "expected a mapping of cheat and fallback and lint",
    ),
    "unknown class of refusal": (
        "extends: base\nrefused_before_test: {style: [import]}\n",
        "refused_before_test.style",
        "unknown class of refusal",
    ),
    "rule refused as both": (
        "extends: base\nrefused_before_test: {lint: [dunder]}\n",
        "refused_before_test",
        "dunder cannot be both cheat and lint",
    ),
    "tuning decorator arguments not a list": (
        "extends: base\ntuning_decorators: {triton.autotune: configs}\n",
        "tuning_decorators.triton.autotune",
        "expected a list",
    ),
    "constant name of no module": (
        "extends: base\nconstant_names: [numpy.float32]\n",
        "constant_names",
        "numpy.float32 is not a name of a module",
    ),
    "not a mapping": ("- a\n- b\n", "<file>", "a profile is a mapping"),
    "not YAML": ("extends: [base\n", "<file>", "not valid YAML"),
    "missing required key": ("description: alone\n", "kernel_decorators", "missing"),
    "missing parent": ("extends: nowhere\n", "<file>", "cannot read"),
    "bad parent name": ("extends: ../base\n", "extends", "not an identifier"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_profile_is_refused_with_file_key_and_reason(profiles, case):
    text, key, reason = MALFORMED[case]
    path = profiles("broken", text)
    with pytest.raises(ProfileError) as raised:
        load_profile("broken")
    error = raised.value
    assert error.key == key
    assert reason in error.reason
    expected_file = path.parent / "nowhere.yaml" if case == "missing parent" else path
    assert Path(error.file) == expected_file
    assert str(error) == f"{error.file}: {key}: {error.reason}"


def test_extends_cycle_is_refused(profiles):
    profiles("first", "extends: second\n")
    profiles("second", "extends: first\n")
    with pytest.raises(ProfileError, match="cycle through first -> second -> first"):
        load_profile("first")


def test_profile_names_cannot_leave_the_config_dir(profiles):
    with pytest.raises(ProfileError, match="profile names are identifiers"):
        load_profile("../linter/base")
