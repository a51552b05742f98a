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
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

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
    "kernel_launch": frozenset({"kernel", "wrapper"}),
    "kernel_name": frozenset({"name", "pattern"}),
    "wrapper_missing": frozenset({"wrapper", "op"}),
    "wrapper_duplicate": frozenset({"wrapper"}),
    "wrapper_signature": frozenset({"wrapper", "op"}),
    "kernel_missing": frozenset({"pattern"}),
    "source_too_large": frozenset({"limit"}),
}

FORBIDDEN_ATTRIBUTE_RULE = "forbidden_attribute"
# Rule ids that profile data may not take for its own constructs.
RESERVED_RULES = frozenset(HINT_FIELDS) | {
    "forbidden_builtin",
    "forbidden_module",
    FORBIDDEN_ATTRIBUTE_RULE,
}

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


@dataclass(frozen=True)
class Construct:
    nodes: tuple[type, ...]
    hint: str
    scope: str  # where the construct is refused: kernel, host or any


@dataclass(frozen=True)
class Profile:
    """Every rule of one device kind, merged and validated; immutable so it can be cached."""

    name: str
    kernel_name_pattern: re.Pattern[str]
    kernel_decorators: frozenset[str]
    kernel_globals: frozenset[str]
    modules: MappingProxyType[str, ModuleRules]
    forbidden_builtins: MappingProxyType[str, str]
    forbidden_modules: MappingProxyType[str, str]
    forbidden_attributes: MappingProxyType[str, str]
    host_methods: frozenset[str]
    launch_exempt_ops: frozenset[str]
    host_read_ops: frozenset[str]
    host_read_attributes: frozenset[str]
    host_attributes: frozenset[str]
    constructs: MappingProxyType[str, Construct]
    hints: MappingProxyType[str, str]
    max_source_chars: int
    #: Rule ids whose violations the harness refuses before running a candidate (harness.py).
    refused_before_test: frozenset[str]


_REPO_CONFIG_DIR = Path(__file__).resolve().parents[3] / "config"


def config_dir() -> Path:
    """The repository's config/ (OPFORGE_CONFIG_DIR overrides, e.g. for an installed worker)."""
    override = os.environ.get("OPFORGE_CONFIG_DIR")
    return Path(override) if override else _REPO_CONFIG_DIR


def load_profile(name: str) -> Profile:
    """The profile `config/linter/<name>.yaml`, loaded once per process and config dir."""
    return _load_cached(name, config_dir() / "linter")


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
        "kernel_name_pattern": _check_regex,
        "kernel_decorators": _check_dotted_list,
        "kernel_globals": _check_dotted_list,
        "modules": _check_modules,
        "forbidden_builtins": _check_hint_map,
        "forbidden_modules": _check_hint_map,
        "forbidden_attributes": _check_hint_map,
        "host_methods": _check_identifier_list,
        "launch_exempt_ops": _check_dotted_list,
        "host_read_ops": _check_dotted_list,
        "host_read_attributes": _check_identifier_list,
        "host_attributes": _check_identifier_list,
        "constructs": _check_constructs,
        "hints": _check_hints,
        "max_source_chars": _check_positive_int,
        "refused_before_test": _check_identifier_list,
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


def _check_positive_int(path: Path, key: str, value: Any) -> None:
    _expect(path, key, value, int, "an integer")
    if value <= 0:
        raise ProfileError(path, key, f"must be positive, got {value}")


def _check_regex(path: Path, key: str, value: Any) -> None:
    _expect(path, key, value, str, "a regular expression")
    try:
        re.compile(value)
    except re.error as error:
        raise ProfileError(path, key, f"bad regular expression: {error}") from error


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


def _check_modules(path: Path, key: str, value: Any) -> None:
    for _, where, rules in _identifier_items(path, key, value, "module name"):
        _expect(path, where, rules, dict, "a mapping with scope and allow")
        for field, field_value in rules.items():
            if field == "scope":
                if field_value not in SCOPES:
                    raise ProfileError(path, f"{where}.scope", f"one of {', '.join(SCOPES)}")
            elif field == "allow":
                _check_dotted_list(path, f"{where}.allow", field_value)
            else:
                raise ProfileError(path, f"{where}.{field}", "unknown key (known: allow, scope)")


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
    "kernel_name_pattern",
    "kernel_decorators",
    "kernel_globals",
    "modules",
    "forbidden_builtins",
    "forbidden_modules",
    "forbidden_attributes",
    "host_methods",
    "launch_exempt_ops",
    "host_read_ops",
    "host_read_attributes",
    "host_attributes",
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
    unknown_rules = [rule for rule in data["refused_before_test"] if rule not in known_rules]
    if unknown_rules:
        raise ProfileError(
            leaf,
            "refused_before_test",
            f"no rule has the id {', '.join(unknown_rules)} "
            f"(known: {', '.join(sorted(known_rules))})",
        )
    return Profile(
        name=name,
        kernel_name_pattern=re.compile(data["kernel_name_pattern"]),
        kernel_decorators=frozenset(data["kernel_decorators"]),
        kernel_globals=frozenset(data["kernel_globals"]),
        modules=MappingProxyType(
            {
                module: ModuleRules(rules["scope"], frozenset(rules.get("allow", ())))
                for module, rules in data["modules"].items()
            }
        ),
        forbidden_builtins=MappingProxyType(dict(data["forbidden_builtins"])),
        forbidden_modules=MappingProxyType(dict(data["forbidden_modules"])),
        forbidden_attributes=MappingProxyType(dict(data["forbidden_attributes"])),
        host_methods=frozenset(data["host_methods"]),
        launch_exempt_ops=frozenset(data["launch_exempt_ops"]),
        host_read_ops=frozenset(data["host_read_ops"]),
        host_read_attributes=frozenset(data["host_read_attributes"]),
        host_attributes=frozenset(data["host_attributes"]),
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
        refused_before_test=frozenset(data["refused_before_test"]),
    )
