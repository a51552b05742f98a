"""Linter profiles: YAML rule data per device kind, validated at load.

A profile file may name another in `extends`; the child's mappings merge into the parent's key by
key and its lists add to the parent's, so `cuda.yaml` holds only what the CUDA dialect adds to the
rules every device shares (`base.yaml`). Each file is checked on its own (unknown keys, wrong types,
bad patterns and hint templates name the file and key); the merged result must define every rule.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import string
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from opforge_worker import aten_kinds
from opforge_worker.contract import FailureCheck, Outcome
from opforge_worker.package_data import data_path

# The scopes a module's names may appear in: `kernel` is the body of a @triton.jit function,
# `host` everything else (the wrapper, helpers, module level).
SCOPES = ("kernel", "host", "any")

# Rules whose checks are code; their hints are data. Each hint template may use these fields.
HINT_FIELDS: dict[str, frozenset[str]] = {
    "dynamic_getattr": frozenset(),
    "dunder": frozenset({"name"}),
    "private_attribute": frozenset({"name"}),
    "module_attribute": frozenset({"module", "name", "profile", "suggestion"}),
    "module_alias": frozenset({"module"}),
    "module_scope": frozenset({"module", "scope"}),
    "host_method": frozenset({"name", "suggestion"}),
    "host_attribute": frozenset({"name", "suggestion"}),
    "host_transfer": frozenset(),
    "attribute_assignment": frozenset({"name"}),
    "module_state": frozenset(),
    "decorator": frozenset({"allowed"}),
    "tuning_argument": frozenset({"name", "call", "allowed"}),
    "autotune_configs": frozenset({"config", "limit"}),
    "kernel_launch": frozenset({"kernel", "wrapper"}),
    "wrapper_missing": frozenset({"wrapper", "op"}),
    "wrapper_duplicate": frozenset({"wrapper"}),
    "wrapper_signature": frozenset({"wrapper", "op"}),
    "kernel_missing": frozenset(),
    "fallback": frozenset({"name", "suggestion"}),
    "source_too_large": frozenset({"limit"}),
    "import": frozenset({"module"}),
}

FORBIDDEN_ATTRIBUTE_RULE = "forbidden_attribute"
#: The check of a refusal by the static gate that is not a fallback.
STATIC_CHECK = FailureCheck.STATIC
# Rule ids that profile data may not take for its own constructs.
RESERVED_RULES = frozenset(HINT_FIELDS) | {
    "forbidden_builtin",
    "forbidden_module",
    "unavailable_module",
    FORBIDDEN_ATTRIBUTE_RULE,
}
#: The classes of refusal before a test (``refused_before_test``): breaking a ``cheat`` rule is an
#: attempt to get around the checks (reflection, patching, forbidden modules and builtins), breaking
#: a ``fallback`` rule computing with torch instead of a kernel, breaking a ``lint`` rule a mistake
#: of dialect or form (``Profile.gate_verdict`` turns them into outcomes and checks).
REFUSAL_CLASSES = ("cheat", "fallback", "lint")

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class ProfileError(ValueError):
    """A profile that cannot be used: names the file, the key path and what is wrong."""

    def __init__(self, file: Path | str, key: str, reason: str):
        super().__init__(f"{file}: {key}: {reason}")
        self.file = str(file)
        self.key = key
        self.reason = reason


@dataclass(frozen=True)
class ModuleRules:
    scope: str
    allow: frozenset[str]
    #: The dotted path `import` statements name the module by (`triton.language` for tl).
    import_path: str


@dataclass(frozen=True)
class Construct:
    nodes: tuple[type, ...]
    hint: str
    scope: str  # where the construct is refused: kernel, host or any


@dataclass(frozen=True)
class Profile:
    """Every rule of one device kind, merged and validated; immutable so it can be cached."""

    name: str
    kernel_decorators: frozenset[str]
    #: Decorators a kernel may carry above its kernel decorator, each with the arguments it may
    #: take (the first may also be passed positionally).
    tuning_decorators: MappingProxyType[str, tuple[str, ...]]
    autotune_config: str
    autotune_config_arguments: frozenset[str]
    max_autotune_configs: int
    kernel_globals: frozenset[str]
    modules: MappingProxyType[str, ModuleRules]
    #: Modules whose names outside their allow list, called on the host, compute: a fallback.
    aten_kind_modules: frozenset[str]
    #: Namespaces of those modules whose called names compute too (torch.nn.functional.relu).
    fallback_namespaces: frozenset[str]
    forbidden_builtins: MappingProxyType[str, str]
    forbidden_modules: MappingProxyType[str, str]
    unavailable_modules: MappingProxyType[str, str]
    forbidden_attributes: MappingProxyType[str, str]
    host_methods: frozenset[str]
    #: Methods allowed on a receiver the linter knows to be a builtin value (a set, a list, a
    #: float, ...), by the builtin type's name.
    typed_methods: MappingProxyType[str, frozenset[str]]
    launch_exempt_ops: frozenset[str]
    host_read_ops: frozenset[str]
    host_read_attributes: frozenset[str]
    host_attributes: frozenset[str]
    constructs: MappingProxyType[str, Construct]
    hints: MappingProxyType[str, str]
    #: Module names that are values (dtypes): allowed wherever their module is, and in
    #: module-level constants.
    constant_names: frozenset[str]
    max_source_chars: int
    #: Rule ids whose violations the harness refuses before running a candidate (harness.py), by
    #: class of refusal (REFUSAL_CLASSES).
    refused_as: MappingProxyType[str, frozenset[str]]

    @property
    def refused_before_test(self) -> frozenset[str]:
        return frozenset().union(*self.refused_as.values())

    def refusal_class(self, rule: str) -> str | None:
        """The class of refusal (REFUSAL_CLASSES) of a rule refused before a test, else None."""
        return next((kind for kind, rules in self.refused_as.items() if rule in rules), None)

    def gate_verdict(self, classes: Iterable[str | None]) -> tuple[str, str]:
        """(outcome, check) of a source whose violations have these classes of refusal (None for
        a rule outside refused_before_test): the most serious class decides. A cheat is
        cheat_detected (check static), a fallback cheat_detected (check fallback), anything else
        lint_violation (check static); no violation at all passes."""
        classes = list(classes)
        if "cheat" in classes:
            return Outcome.CHEAT_DETECTED, STATIC_CHECK
        if "fallback" in classes:
            return Outcome.CHEAT_DETECTED, aten_kinds.FALLBACK_CHECK
        if classes:
            return Outcome.LINT_VIOLATION, STATIC_CHECK
        return Outcome.PASS, ""


def profiles_dir() -> Path:
    """The shipped profiles, opforge_worker/data/linter/ (OPFORGE_LINTER_DIR overrides)."""
    override = os.environ.get("OPFORGE_LINTER_DIR")
    return Path(override) if override else data_path("linter")


def load_profile(name: str) -> Profile:
    """The profile `<name>.yaml` of profiles_dir(), loaded once per process and directory."""
    return _load_cached(name, profiles_dir())


@functools.lru_cache(maxsize=16)
def _load_cached(name: str, directory: Path) -> Profile:
    if not _IDENTIFIER.match(name):
        raise ProfileError(directory / f"{name}.yaml", "<name>", "profile names are identifiers")
    merged, leaf = _read_chain(name, directory, ())
    return _build(name, merged, leaf)


def _read_chain(name: str, directory: Path, seen: tuple[str, ...]) -> tuple[dict, Path]:
    path = directory / f"{name}.yaml"
    if name in seen:
        raise ProfileError(path, "extends", f"cycle through {' -> '.join((*seen, name))}")
    data = _read_file(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data, path
    base, _ = _read_chain(parent, directory, (*seen, name))
    return _merge(base, data), path


def _read_file(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ProfileError(path, "<file>", f"cannot read: {error.strerror or error}") from error
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ProfileError(path, "<file>", f"not valid YAML: {error}") from error
    if not isinstance(data, dict):
        raise ProfileError(path, "<file>", "a profile is a mapping of keys to rule data")
    _check_file(path, data)
    return data


def _merge(base: dict, child: dict) -> dict:
    merged = dict(base)
    for key, value in child.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        elif isinstance(value, list) and isinstance(merged.get(key), list):
            merged[key] = [*merged[key], *(item for item in value if item not in merged[key])]
        else:
            merged[key] = value
    return merged


# --- per-file validation: every key known, every value of the right shape -----------------------


def _check_file(path: Path, data: dict) -> None:
    checks = {
        "extends": _check_identifier,
        "description": _check_string,
        "kernel_decorators": _check_dotted_list,
        "kernel_globals": _check_dotted_list,
        "tuning_decorators": _check_tuning_decorators,
        "autotune_config": _check_dotted,
        "autotune_config_arguments": _check_identifier_list,
        "max_autotune_configs": _check_positive_int,
        "modules": _check_modules,
        "aten_kind_modules": _check_identifier_list,
        "fallback_namespaces": _check_dotted_list,
        "forbidden_builtins": _check_hint_map,
        "forbidden_modules": _check_hint_map,
        "unavailable_modules": _check_hint_map,
        "forbidden_attributes": _check_hint_map,
        "host_methods": _check_identifier_list,
        "typed_methods": _check_typed_methods,
        "launch_exempt_ops": _check_dotted_list,
        "host_read_ops": _check_dotted_list,
        "host_read_attributes": _check_identifier_list,
        "host_attributes": _check_identifier_list,
        "constant_names": _check_dotted_list,
        "constructs": _check_constructs,
        "hints": _check_hints,
        "max_source_chars": _check_positive_int,
        "refused_before_test": _check_refusals,
    }
    for key, value in data.items():
        if key not in checks:
            raise ProfileError(path, str(key), f"unknown key (known: {', '.join(sorted(checks))})")
        checks[key](path, key, value)


def _expect(path: Path, key: str, value: Any, kind: type, what: str) -> None:
    # bool is an int subclass; a YAML `yes` must not pass for a number.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ProfileError(path, key, f"expected {what}, got {type(value).__name__}")


def _check_string(path: Path, key: str, value: Any) -> None:
    _expect(path, key, value, str, "a string")


def _check_identifier(path: Path, key: str, value: Any) -> None:
    _expect(path, key, value, str, "a profile name")
    if not _IDENTIFIER.match(value):
        raise ProfileError(path, key, f"{value!r} is not an identifier")


def _check_dotted(path: Path, key: str, value: Any) -> None:
    _expect(path, key, value, str, "a dotted name")
    if not _DOTTED.match(value):
        raise ProfileError(path, key, f"{value!r} is not a dotted name")


def _check_positive_int(path: Path, key: str, value: Any) -> None:
    _expect(path, key, value, int, "an integer")
    if value <= 0:
        raise ProfileError(path, key, f"must be positive, got {value}")


def _check_names(path: Path, key: str, value: Any, pattern: re.Pattern[str], what: str) -> None:
    """`what` comes with its article: "an identifier"."""
    _expect(path, key, value, list, f"a list of {what.split(' ', 1)[1]}s")
    for index, item in enumerate(value):
        _expect(path, f"{key}[{index}]", item, str, what)
        if not pattern.match(item):
            raise ProfileError(path, f"{key}[{index}]", f"{item!r} is not {what}")


def _check_identifier_list(path: Path, key: str, value: Any) -> None:
    _check_names(path, key, value, _IDENTIFIER, "an identifier")


def _check_dotted_list(path: Path, key: str, value: Any) -> None:
    _check_names(path, key, value, _DOTTED, "a dotted name")


def _identifier_items(path: Path, key: str, value: Any, what: str):
    """(name, key path, item) of a mapping keyed by identifiers, e.g. module names or rule ids."""
    _expect(path, key, value, dict, f"a mapping of {what}s")
    for name, item in value.items():
        where = f"{key}.{name}"
        if not isinstance(name, str) or not _IDENTIFIER.match(name):
            raise ProfileError(path, where, f"{what}s are identifiers")
        yield name, where, item


def _check_hint_map(path: Path, key: str, value: Any) -> None:
    for _, where, hint in _identifier_items(path, key, value, "name"):
        _check_string(path, where, hint)


def _check_tuning_decorators(path: Path, key: str, value: Any) -> None:
    _expect(path, key, value, dict, "a mapping of decorators to the arguments they may take")
    for decorator, arguments in value.items():
        _check_dotted(path, f"{key}.<name>", decorator)
        _check_identifier_list(path, f"{key}.{decorator}", arguments)


def _check_typed_methods(path: Path, key: str, value: Any) -> None:
    for _, where, methods in _identifier_items(path, key, value, "type name"):
        _check_identifier_list(path, where, methods)


def _check_refusals(path: Path, key: str, value: Any) -> None:
    _expect(path, key, value, dict, f"a mapping of {' and '.join(REFUSAL_CLASSES)} to rule ids")
    for kind, rules in value.items():
        if kind not in REFUSAL_CLASSES:
            known = ", ".join(REFUSAL_CLASSES)
            raise ProfileError(path, f"{key}.{kind}", f"unknown class of refusal (known: {known})")
        _check_identifier_list(path, f"{key}.{kind}", rules)


def _check_modules(path: Path, key: str, value: Any) -> None:
    for _, where, rules in _identifier_items(path, key, value, "module name"):
        _expect(path, where, rules, dict, "a mapping with scope and allow")
        for field, field_value in rules.items():
            if field == "scope":
                if field_value not in SCOPES:
                    raise ProfileError(path, f"{where}.scope", f"one of {', '.join(SCOPES)}")
            elif field == "allow":
                _check_dotted_list(path, f"{where}.allow", field_value)
            elif field == "import":
                _check_dotted(path, f"{where}.import", field_value)
            else:
                raise ProfileError(
                    path, f"{where}.{field}", "unknown key (known: allow, import, scope)"
                )


def _check_constructs(path: Path, key: str, value: Any) -> None:
    for rule, where, construct in _identifier_items(path, key, value, "rule id"):
        if rule in RESERVED_RULES:
            raise ProfileError(path, where, "this rule id belongs to a built-in check")
        _expect(path, where, construct, dict, "a mapping with nodes, hint and scope")
        unknown = set(construct) - {"nodes", "hint", "scope"}
        if unknown:
            raise ProfileError(
                path, f"{where}.{sorted(unknown)[0]}", "unknown key (known: hint, nodes, scope)"
            )
        if construct.get("scope", "any") not in SCOPES:
            raise ProfileError(path, f"{where}.scope", f"one of {', '.join(SCOPES)}")
        _check_identifier_list(path, f"{where}.nodes", construct.get("nodes"))
        for index, node in enumerate(construct["nodes"]):
            if not isinstance(getattr(ast, node, None), type) or not issubclass(
                getattr(ast, node), ast.AST
            ):
                raise ProfileError(path, f"{where}.nodes[{index}]", f"{node!r} is not an ast node")
        _check_string(path, f"{where}.hint", construct.get("hint"))


def _check_hints(path: Path, key: str, value: Any) -> None:
    for rule, where, template in _identifier_items(path, key, value, "rule id"):
        if rule not in HINT_FIELDS:
            raise ProfileError(
                path, where, f"no built-in rule has this id (known: {', '.join(HINT_FIELDS)})"
            )
        _check_string(path, where, template)
        try:
            fields = {field for _, field, _, _ in string.Formatter().parse(template) if field}
        except ValueError as error:
            raise ProfileError(path, where, f"bad template: {error}") from error
        unknown = fields - HINT_FIELDS[rule]
        if unknown:
            known = ", ".join(sorted(HINT_FIELDS[rule])) or "none"
            raise ProfileError(
                path, where, f"unknown field {{{sorted(unknown)[0]}}} (known: {known})"
            )


# --- the merged profile ---------------------------------------------------------------------------

_REQUIRED = (
    "kernel_decorators",
    "kernel_globals",
    "tuning_decorators",
    "autotune_config",
    "autotune_config_arguments",
    "max_autotune_configs",
    "modules",
    "aten_kind_modules",
    "fallback_namespaces",
    "forbidden_builtins",
    "forbidden_modules",
    "unavailable_modules",
    "forbidden_attributes",
    "host_methods",
    "typed_methods",
    "launch_exempt_ops",
    "host_read_ops",
    "host_read_attributes",
    "host_attributes",
    "constant_names",
    "constructs",
    "hints",
    "max_source_chars",
    "refused_before_test",
)


def _build(name: str, data: dict, leaf: Path) -> Profile:
    for key in _REQUIRED:
        if key not in data:
            raise ProfileError(leaf, key, "missing (neither this file nor what it extends sets it)")
    missing_hints = sorted(set(HINT_FIELDS) - set(data["hints"]))
    if missing_hints:
        raise ProfileError(leaf, f"hints.{missing_hints[0]}", "every built-in rule needs a hint")
    for module, rules in data["modules"].items():
        if "scope" not in rules:
            raise ProfileError(leaf, f"modules.{module}.scope", "missing")
    known_rules = RESERVED_RULES | set(data["constructs"])
    refusals = data["refused_before_test"]
    for kind in REFUSAL_CLASSES:
        unknown_rules = [rule for rule in refusals.get(kind, ()) if rule not in known_rules]
        if unknown_rules:
            raise ProfileError(
                leaf,
                f"refused_before_test.{kind}",
                f"no rule has the id {', '.join(unknown_rules)} "
                f"(known: {', '.join(sorted(known_rules))})",
            )
    both = sorted(set(refusals.get("cheat", ())) & set(refusals.get("lint", ())))
    if both:
        raise ProfileError(
            leaf, "refused_before_test", f"{', '.join(both)} cannot be both cheat and lint"
        )
    for index, module in enumerate(data["aten_kind_modules"]):
        if module not in data["modules"]:
            raise ProfileError(leaf, f"aten_kind_modules[{index}]", f"{module} is not a module")
    host_names = aten_kinds.host_names()
    constant_names = frozenset(data["constant_names"])
    for constant in constant_names:
        if constant.split(".", 1)[0] not in data["modules"] or "." not in constant:
            raise ProfileError(leaf, "constant_names", f"{constant} is not a name of a module")
    return Profile(
        name=name,
        kernel_decorators=frozenset(data["kernel_decorators"]),
        kernel_globals=frozenset(data["kernel_globals"]),
        tuning_decorators=MappingProxyType(
            {decorator: tuple(args) for decorator, args in data["tuning_decorators"].items()}
        ),
        autotune_config=data["autotune_config"],
        autotune_config_arguments=frozenset(data["autotune_config_arguments"]),
        max_autotune_configs=data["max_autotune_configs"],
        modules=MappingProxyType(
            {
                module: ModuleRules(
                    rules["scope"],
                    frozenset(rules.get("allow", ()))
                    | {c.split(".", 1)[1] for c in constant_names if c.startswith(f"{module}.")}
                    | (host_names if module in data["aten_kind_modules"] else frozenset()),
                    rules.get("import", module),
                )
                for module, rules in data["modules"].items()
            }
        ),
        aten_kind_modules=frozenset(data["aten_kind_modules"]),
        fallback_namespaces=frozenset(data["fallback_namespaces"]),
        forbidden_builtins=MappingProxyType(dict(data["forbidden_builtins"])),
        forbidden_modules=MappingProxyType(dict(data["forbidden_modules"])),
        unavailable_modules=MappingProxyType(dict(data["unavailable_modules"])),
        forbidden_attributes=MappingProxyType(dict(data["forbidden_attributes"])),
        host_methods=frozenset(data["host_methods"]) | host_names,
        typed_methods=MappingProxyType(
            {kind: frozenset(methods) for kind, methods in data["typed_methods"].items()}
        ),
        launch_exempt_ops=frozenset(data["launch_exempt_ops"]),
        host_read_ops=frozenset(data["host_read_ops"]),
        host_read_attributes=frozenset(data["host_read_attributes"]),
        host_attributes=frozenset(data["host_attributes"]) | aten_kinds.view_names(),
        constant_names=constant_names,
        constructs=MappingProxyType(
            {
                rule: Construct(
                    tuple(getattr(ast, node) for node in spec["nodes"]),
                    spec["hint"],
                    spec.get("scope", "any"),
                )
                for rule, spec in data["constructs"].items()
            }
        ),
        hints=MappingProxyType(dict(data["hints"])),
        max_source_chars=data["max_source_chars"],
        refused_as=MappingProxyType(
            {kind: frozenset(refusals.get(kind, ())) for kind in REFUSAL_CLASSES}
        ),
    )
