"""Generates both sides of the daemon-worker contract from messages/contract.yaml.

    gen_contract.py contract.yaml --cpp-header H --cpp-source S --python P

C++: the enums (with their wire names, for to_string/from_string), the structs (with CAF
`inspect` where every field is inspectable) and their msgpack codecs, over the templates of
messages/contract_codec.hpp. Python: StrEnums and a tuple of the values of each enum, dataclasses
with `from_dict` (validates, raising ContractError) and `to_dict`, and the frame tables that
opforge_worker.protocol decodes with. Every file is rewritten only when its text changes, so that
a build that changed nothing rebuilds nothing. Needs the standard library and PyYAML only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import yaml

SCALARS = ("str", "int", "float", "bool", "map")
CPP_KEYWORDS = {"bool", "int", "float", "double", "char", "default", "delete", "new", "and", "or"}
CPP_KEYWORDS |= {"static", "const", "class", "struct", "enum", "return", "switch", "case", "this"}
FIELD_OPTIONS = {"type", "doc", "optional", "default", "min", "nonempty", "max_len", "charset"}
FIELD_OPTIONS |= {"skip_unknown", "positive", "lenient"}


class SchemaError(ValueError):
    pass


# -- the schema ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Type:
    kind: str  # a scalar, "list", "dict", "optional", "enum" or "struct"
    name: str = ""  # of the enum or struct
    item: Type | None = None


@dataclass
class Field:
    name: str
    type: Type
    doc: str
    optional: bool
    default: object
    min: int | None
    nonempty: bool
    positive: bool
    max_len: int | None
    charset: str | None
    skip_unknown: bool
    lenient: bool


@dataclass
class Struct:
    name: str
    doc: str
    fields: list[Field]
    frame_type: str | None = None  # the `type` of a frame
    sides: tuple[str, ...] = ()  # who sends the frame: worker, daemon


@dataclass
class Enum:
    name: str
    doc: str
    values: list[str]
    base: str | None = None  # the enum whose values come first, in its order


@dataclass
class Schema:
    version: int
    enums: dict[str, Enum]
    frames: list[Struct]
    structs: list[Struct]
    device_kinds: list[str]  # the worker registry's kinds


def parse_type(text: str, enums, structs) -> Type:
    text = text.strip()
    if text.endswith("?"):
        return Type("optional", item=parse_type(text[:-1], enums, structs))
    if text.startswith("[") and text.endswith("]"):
        return Type("list", item=parse_type(text[1:-1], enums, structs))
    if text.startswith("{") and text.endswith("}"):
        return Type("dict", item=parse_type(text[1:-1], enums, structs))
    if text in SCALARS:
        return Type(text)
    if text in enums:
        return Type("enum", name=text)
    if text in structs:
        return Type("struct", name=text)
    raise SchemaError(f"unknown type {text!r}")


def _fields(owner: str, spec: dict, enums, structs) -> list[Field]:
    fields = []
    for name, options in (spec or {}).items():
        unknown = set(options) - FIELD_OPTIONS
        if unknown:
            raise SchemaError(f"{owner}.{name}: unknown options {sorted(unknown)}")
        type_ = parse_type(str(options["type"]), enums, structs)
        raw = type_.item if type_.kind == "optional" else type_
        if raw.kind == "map" and type_.kind not in ("map", "optional"):
            raise SchemaError(f"{owner}.{name}: map is a field's type, not an item's")
        if "skip_unknown" in options and not (type_.kind == "list" and type_.item.kind == "enum"):
            raise SchemaError(f"{owner}.{name}: skip_unknown needs an array of an enum")
        if options.get("lenient") and type_.kind != "optional":
            raise SchemaError(f"{owner}.{name}: lenient needs a T? type, read as nil when not a T")
        default = options.get("default")
        if default is not None and type_.kind == "enum" and default not in enums[type_.name]:
            raise SchemaError(f"{owner}.{name}: default {default!r} is not a {type_.name}")
        fields.append(
            Field(
                name=name,
                type=type_,
                doc=str(options.get("doc", "")),
                optional=bool(options.get("optional", False)),
                default=default,
                min=options.get("min"),
                nonempty=bool(options.get("nonempty", False)),
                positive=bool(options.get("positive", False)),
                max_len=options.get("max_len"),
                charset=options.get("charset"),
                skip_unknown=bool(options.get("skip_unknown", False)),
                lenient=bool(options.get("lenient", False)),
            )
        )
    return fields


def load(path: Path) -> Schema:
    raw = yaml.safe_load(path.read_text())
    enums: dict[str, Enum] = {}
    for name, spec in raw["enums"].items():
        base = spec.get("extends")
        if base is not None and base not in enums:
            raise SchemaError(f"{name}: extends {base!r}, which is not an enum defined before it")
        values = (enums[base].values if base else []) + [str(v) for v in spec["values"]]
        if len(set(values)) != len(values):
            raise SchemaError(f"{name}: a value is listed twice")
        enums[name] = Enum(name, str(spec.get("doc", "")), values, base)
    enum_values = {name: enum.values for name, enum in enums.items()}
    struct_names = set(raw["structs"])
    structs = []
    for name, spec in raw["structs"].items():
        fields = _fields(name, spec["fields"], enum_values, struct_names)
        structs.append(Struct(name, str(spec.get("doc", "")), fields))
    frames = []
    for name, spec in raw["frames"].items():
        sides = ("worker", "daemon") if spec["from"] == "both" else (spec["from"],)
        # A frame may carry a struct (hello's conformance report); the structs come first in
        # the generated code, so every frame can name any of them.
        fields = _fields(name, spec["fields"], enum_values, struct_names)
        frames.append(Struct(name, str(spec.get("doc", "")), fields, spec.get("type", name), sides))
    device_kinds = [str(kind) for kind in raw["device_kinds"]]
    rule = raw["device_kind"]
    for kind in device_kinds:
        if len(kind) > rule["max_len"] or not re.fullmatch(f"[{rule['charset']}]+", kind):
            raise SchemaError(f"device_kinds: {kind!r} breaks the device_kind bound")
    return Schema(int(raw["version"]), enums, frames, structs, device_kinds)


# -- C++ ----------------------------------------------------------------------------------------


def cpp_enumerator(value: str) -> str:
    name = re.sub(r"[^0-9a-zA-Z_]", "_", value).lower()
    return name + "_" if name in CPP_KEYWORDS else name


def cpp_type(t: Type, ns: str = "") -> str:
    match t.kind:
        case "str" | "map":
            return "std::string"
        case "int":
            return "int64_t"
        case "float":
            return "double"
        case "bool":
            return "bool"
        case "list":
            return f"std::vector<{cpp_type(t.item, ns)}>"
        case "dict":
            return f"std::map<std::string, {cpp_type(t.item, ns)}>"
        case "optional":
            return f"std::optional<{cpp_type(t.item, ns)}>"
    return ns + t.name


def inspectable(t: Type, structs: dict[str, Struct]) -> bool:
    """Whether CAF 0.17 can inspect the type (a std::optional through inspect_optional)."""
    if t.kind in ("list", "dict", "optional"):
        return inspectable(t.item, structs)
    if t.kind == "struct":
        return all(inspectable(f.type, structs) for f in structs[t.name].fields)
    return True


def cpp_initializer(f: Field) -> str:
    if f.default is not None and f.type.kind == "enum":
        return f" = contract::{f.type.name}::{cpp_enumerator(f.default)}"
    if f.default is not None:
        return f" = {f.default!r}".replace("'", '"')
    if f.type.kind == "int":
        return " = 0"
    if f.type.kind == "float":
        return " = 0.0"
    if f.type.kind == "bool":
        return " = false"
    return "{}"


def cpp_comment(text: str, indent: str = "") -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(indent) + 3 + len(line) + 1 + len(word) > 100:
            lines.append(f"{indent}// {line}")
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(f"{indent}// {line}")
    return lines


def cpp_struct(s: Struct, ns: str, structs: dict[str, Struct]) -> list[str]:
    out = cpp_comment(s.doc)
    out.append(f"struct {s.name} {{")
    for f in s.fields:
        out += cpp_comment(f.doc, "  ")
        out.append(f"  {cpp_type(f.type, ns)} {f.name}{cpp_initializer(f)};")
    if s.fields:
        out.append("")
    out.append(f"  bool operator==(const {s.name}&) const = default;")
    out.append("};")
    out.append("")
    if all(inspectable(f.type, structs) for f in s.fields):
        members = "".join(
            f", inspect_optional(x.{f.name})" if f.type.kind == "optional" else f", x.{f.name}"
            for f in s.fields
        )
        out += [
            "template <class Inspector>",
            f"typename Inspector::result_type inspect(Inspector& f, {s.name}& x) {{",
            f'  return f(caf::meta::type_name("{s.name}"){members});',
            "}",
            "",
        ]
    out += [
        f"void pack_value(codec::packer& p, const {s.name}& x);",
        f"codec::read_result read_value(const msgpack::object& o, {s.name}& x);",
        "",
    ]
    return out


def cpp_checks(f: Field) -> list[str]:
    out = []
    if f.min is not None:
        out.append(f'  r.at_least("{f.name}", x.{f.name}, {f.min});')
    if f.nonempty:
        out.append(f'  r.nonempty("{f.name}", x.{f.name});')
    if f.positive:
        out.append(f'  r.positive("{f.name}", x.{f.name});')
    if f.max_len is not None or f.charset is not None:
        out.append(f'  r.bounded("{f.name}", x.{f.name}, {f.max_len or 0}, "{f.charset or ""}");')
    return out


def cpp_codec(s: Struct) -> list[str]:
    """pack_value writes every field, but an optional one that is nil; read_value checks them."""
    skippable = [f for f in s.fields if f.optional and f.type.kind == "optional"]
    header = len(s.fields) + (2 if s.frame_type else 0)
    size = f"{header}" + "".join(f" - !x.{f.name}" for f in skippable)
    out = [f"void pack_value(codec::packer& p, const {s.name}& {'x' if s.fields else ''}) {{"]
    out.append(f"  p.pack_map({size});")
    if s.frame_type:
        out.append(f'  codec::pack_header(p, protocol_version, "{s.frame_type}");')
    for f in s.fields:
        raw = f.type.kind == "map" or f.type.item == Type("map")
        key = f'codec::pack_key(p, "{f.name}");'
        value = f"{'codec::pack_raw_map' if raw else 'pack_value'}(p, x.{f.name});"
        if f in skippable:
            out.append(f"  if (x.{f.name}) {{")
            out.append(f"    {key}")
            out.append(f"    {value}")
            out.append("  }")
        else:
            out.append(f"  {key}")
            out.append(f"  {value}")
    out += ["}", ""]
    param = "x" if s.fields else ""
    out.append(f"codec::read_result read_value(const msgpack::object& o, {s.name}& {param}) {{")
    out.append("  codec::struct_reader r{o};")
    for f in s.fields:
        raw = f.type.kind == "map" or f.type.item == Type("map")
        how = "optional" if f.optional else "required"
        if raw:
            out.append(f'  r.{how}_raw_map("{f.name}", x.{f.name});')
        elif f.skip_unknown:
            out.append(f'  r.{how}_known("{f.name}", x.{f.name});')
        elif f.lenient:
            out.append(f'  r.{how}_lenient("{f.name}", x.{f.name});')
        else:
            out.append(f'  r.{how}("{f.name}", x.{f.name});')
    for f in s.fields:
        out += cpp_checks(f)
    out += ["  return r.result();", "}", ""]
    return out


def render_cpp(schema: Schema, header_name: str) -> tuple[str, str]:
    structs = {s.name: s for s in schema.structs}
    banner = "// Generated by messages/gen_contract.py from messages/contract.yaml: do not edit."
    h = [
        "#pragma once",
        "",
        banner,
        "",
        "#include <array>",
        "#include <cstdint>",
        "#include <map>",
        "#include <optional>",
        "#include <string>",
        "#include <variant>",
        "#include <vector>",
        "",
        "#include <caf/meta/type_name.hpp>",
        "",
        '#include "messages/contract_codec.hpp"',
        '#include "messages/optional_inspect.hpp"',
        "",
        "namespace opforge::contract {",
        "",
        f"inline constexpr int64_t version = {schema.version};",
        "",
    ]
    for enum in schema.enums.values():
        h += cpp_comment(enum.doc)
        members = ", ".join(cpp_enumerator(v) for v in enum.values)
        h.append(f"enum class {enum.name} : uint8_t {{ {members} }};")
        h.append("")
        names = ", ".join(f'"{v}"' for v in enum.values)
        h += [
            "template <>",
            f"struct enum_traits<{enum.name}> {{",
            f'  static constexpr std::string_view label = "{enum.name}";',
            f"  static constexpr std::array<std::string_view, {len(enum.values)}> names{{",
            f"      {names}}};",
            "};",
            "",
        ]
        if enum.base:
            h += [
                f"/// A {enum.base} as the {enum.name} of the same name: its values come first.",
                f"constexpr {enum.name} to_{enum.name}({enum.base} value) {{",
                f"  return static_cast<{enum.name}>(value);",
                "}",
                "",
            ]
    for s in schema.structs:  # qualified: a field may be named like its type
        h += cpp_struct(s, "contract::", structs)
    h += ["} // namespace opforge::contract", "", "namespace opforge::wire {", ""]
    h.append("namespace codec = contract::codec;")
    h.append("")
    h.append("inline constexpr int64_t protocol_version = contract::version;")
    h.append("")
    for s in schema.frames:
        h += cpp_struct(s, "contract::", structs)
    for side in ("worker", "daemon"):
        names = ", ".join(s.name for s in schema.frames if side in s.sides)
        h.append(f"/// What a {side} sends.")
        h.append(f"using {side}_message = std::variant<{names}>;")
        h.append(f"/// The frame `type` of each {side}_message alternative, in order.")
        types = [s.frame_type for s in schema.frames if side in s.sides]
        quoted = ", ".join(f'"{t}"' for t in types)
        h.append(f"inline constexpr std::array<std::string_view, {len(types)}>")
        h.append(f"    {side}_frame_types{{{quoted}}};")
        h.append("")
    for s in schema.frames:
        h.append(f"std::string encode(const {s.name}& msg);")
    h += ["", "} // namespace opforge::wire", ""]

    # device_kind.hpp declares registered_device_kinds(): including it checks the definition below.
    c = [f'#include "{header_name}"', '#include "messages/device_kind.hpp"', "", banner, ""]
    c += ["namespace opforge::contract {", ""]
    for s in schema.structs:
        c += cpp_codec(s)
    # Defined here, declared in messages/device_kind.hpp: a new kind rebuilds this file only.
    kinds = ", ".join(f'"{k}"' for k in schema.device_kinds)
    c += [
        "const std::vector<std::string>& registered_device_kinds() {",
        f"  static const std::vector<std::string> kinds{{{kinds}}};",
        "  return kinds;",
        "}",
        "",
    ]
    c += ["} // namespace opforge::contract", "", "namespace opforge::wire {", ""]
    for s in schema.frames:
        c += cpp_codec(s)
        c += [
            f"std::string encode(const {s.name}& msg) {{",
            "  return codec::to_bytes(msg);",
            "}",
            "",
        ]
    c += ["} // namespace opforge::wire", ""]
    return "\n".join(h), "\n".join(c)


# -- Python -------------------------------------------------------------------------------------


def py_class(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def py_plural(name: str) -> str:
    upper = name.upper()
    return upper + ("ES" if upper.endswith("S") else "S")


def py_spec(t: Type) -> str:
    """The type as the validator's nested tuples: ("list", item), ("enum", NAME), ..."""
    match t.kind:
        case "list" | "dict" | "optional":
            return f'("{t.kind}", {py_spec(t.item)})'
        case "enum":
            return f'("enum", {py_plural(t.name)})'
        case "struct":
            return f'("struct", "{t.name}")'
    return f'("{t.kind}",)'


def py_annotation(t: Type) -> str:
    match t.kind:
        case "str" | "enum":
            return "str"
        case "int" | "float" | "bool":
            return t.kind
        case "map":
            return "dict"
        case "list":
            return f"list[{py_annotation(t.item)}]"
        case "dict":
            return f"dict[str, {py_annotation(t.item)}]"
        case "optional":
            return f"{py_annotation(t.item)} | None"
    return py_class(t.name)


def py_default(f: Field) -> str:
    if f.default is not None:
        return json.dumps(f.default)
    match f.type.kind:
        case "str" | "enum":
            return '""'
        case "int":
            return "0"
        case "float":
            return "0.0"
        case "bool":
            return "False"
        case "optional":
            return "None"
        case "list":
            return "field(default_factory=list)"
        case "map" | "dict":
            return "field(default_factory=dict)"
    return f"field(default_factory={py_class(f.type.name)})"


def py_field_spec(f: Field) -> str:
    options = [f'"{f.name}"', py_spec(f.type)]
    for key in ("optional", "nonempty", "positive", "skip_unknown", "lenient"):
        if getattr(f, key):
            options.append(f"{key}=True")
    for key in ("min", "max_len", "charset"):
        if getattr(f, key) is not None:
            options.append(f"{key}={json.dumps(getattr(f, key))}")
    return f"_Field({', '.join(options)})"


def py_call_lines(call: str, indent: str) -> list[str]:
    """One item of a tuple, split as ruff formats a call too long for its line."""
    if len(indent) + len(call) + 1 <= 100:
        return [f"{indent}{call},"]
    name, args = call.split("(", 1)
    args = args[:-1]
    if len(indent) + 4 + len(args) <= 100:
        return [f"{indent}{name}(", f"{indent}    {args}", f"{indent}),"]
    parts = [part.strip() for part in split_arguments(args)]
    return [f"{indent}{name}("] + [f"{indent}    {part}," for part in parts] + [f"{indent}),"]


def split_arguments(args: str) -> list[str]:
    """Top-level comma-separated arguments (the specs nest parentheses, never quote commas)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(args):
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(args[start:i])
            start = i + 1
    return parts + [args[start:]]


def py_docstring(text: str, indent: str) -> list[str]:
    lines = textwrap.wrap(text, 100 - len(indent) - 6)
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    return [f'{indent}"""{lines[0]}'] + [f"{indent}{line}" for line in lines[1:]] + [f'{indent}"""']


def py_dataclass(s: Struct) -> list[str]:
    out = ["", "", "@dataclass", f"class {py_class(s.name)}:"]
    doc = s.doc or s.name
    if s.frame_type:
        doc = f"The `{s.frame_type}` frame" + (f": {s.doc[0].lower()}{s.doc[1:]}" if s.doc else ".")
    out += py_docstring(doc, "    ")
    out.append("")
    out.append(f'    NAME: ClassVar[str] = "{s.frame_type or s.name}"')
    one = (
        f"    FIELDS: ClassVar[tuple[_Field, ...]] = ({py_field_spec(s.fields[0])},)"
        if s.fields
        else ""
    )
    if len(s.fields) == 1 and len(one) <= 100:  # a one-item tuple's comma keeps nothing open
        out += [one, ""]
    elif s.fields:
        out.append("    FIELDS: ClassVar[tuple[_Field, ...]] = (")
        for f in s.fields:
            out += py_call_lines(py_field_spec(f), "        ")
        out.append("    )")
        out.append("")
    else:
        out.append("    FIELDS: ClassVar[tuple[_Field, ...]] = ()")
    for f in s.fields:
        out += textwrap.wrap(f.doc, 100, initial_indent="    #: ", subsequent_indent="    #: ")
        out.append(f"    {f.name}: {py_annotation(f.type)} = {py_default(f)}")
    out += [
        "",
        "    @classmethod",
        '    def from_dict(cls, value: Any, context: str = "") -> Self:',
        '        """Validates `value` (unknown keys ignored); ContractError says what is wrong."""',
        '        return cls(**_read_struct(cls.FIELDS, value, context or cls.NAME, ""))',
        "",
        "    def to_dict(self) -> dict[str, Any]:",
        "        return _write_struct(self)",
    ]
    return out


PY_RUNTIME = '''

class ContractError(ValueError):
    """A value that breaks the contract. `reason` is missing_key or bad_key (the daemon's
    opforge_malformed_frames_total labels); `detail` names the key and what is wrong with it, and
    the message puts the struct's name before it."""

    def __init__(self, reason: str, context: str, detail: str):
        super().__init__(f"{context}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class _Field:
    name: str
    spec: tuple
    optional: bool = False
    nonempty: bool = False
    positive: bool = False
    skip_unknown: bool = False
    lenient: bool = False
    min: int | None = None
    max_len: int | None = None
    charset: str | None = None


_TYPE_WORDS = {
    bool: "bool",
    int: "int",
    float: "float",
    str: "str",
    bytes: "bin",
    dict: "map",
    list: "array",
    type(None): "nil",
}


def type_word(value: Any) -> str:
    """The msgpack type of a decoded value, as error messages name it."""
    return _TYPE_WORDS.get(type(value), type(value).__name__)


def _one_of(values: tuple[str, ...]) -> str:
    return ", ".join(values[:-1]) + " or " + values[-1] if len(values) > 1 else values[0]


class _Bad(Exception):
    def __init__(self, path: str, what: str, reason: str = "bad_key"):
        super().__init__(what)
        self.path, self.what, self.reason = path, what, reason


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _expected(word: str, value: Any, path: str) -> _Bad:
    return _Bad(path, f"expected {word}, got {type_word(value)}")


def _read(spec: tuple, value: Any, path: str, skip_unknown: bool = False) -> Any:
    kind = spec[0]
    if kind == "optional":
        return None if value is None else _read(spec[1], value, path)
    if kind == "int":
        if type(value) is not int:
            raise _expected("int", value, path)
        return value
    if kind == "float":
        if type(value) not in (int, float):
            raise _expected("float", value, path)
        return float(value)
    if kind == "bool":
        if type(value) is not bool:
            raise _expected("bool", value, path)
        return value
    if kind in ("str", "enum"):
        if not isinstance(value, str):
            raise _expected("str", value, path)
        if kind == "enum" and value not in spec[1]:
            raise _Bad(path, f"expected {_one_of(spec[1])}, got {value!r}")
        return value
    if kind == "map":
        if not isinstance(value, dict):
            raise _expected("map", value, path)
        return value
    if kind == "list":
        if not isinstance(value, list):
            raise _expected("array", value, path)
        if skip_unknown:
            value = [item for item in value if not isinstance(item, str) or item in spec[1][1]]
        return [_read(spec[1], item, path) for item in value]
    if kind == "dict":
        if not isinstance(value, dict):
            raise _expected("map", value, path)
        return {key: _read(spec[1], item, _join(path, str(key))) for key, item in value.items()}
    cls = STRUCTS[spec[1]]
    return cls(**_read_struct(cls.FIELDS, value, "", path))


def _read_struct(fields: tuple[_Field, ...], value: Any, context: str, path: str) -> dict:
    try:
        if not isinstance(value, dict):
            raise _expected("map", value, path)
        out = {}
        for f in fields:
            where = _join(path, f.name)
            if f.name not in value:
                if f.optional:
                    continue
                raise _Bad(where, "missing", "missing_key")
            try:
                item = out[f.name] = _read(f.spec, value[f.name], where, f.skip_unknown)
            except _Bad:
                if not f.lenient:
                    raise
                item = out[f.name] = None
            if f.min is not None and item < f.min:
                raise _Bad(where, f"must be at least {f.min}")
            if f.nonempty and item is not None and not item:
                raise _Bad(where, "must not be empty")
            if f.positive and item <= 0:
                raise _Bad(where, "must be positive")
            # An array's bounds are its strings' bounds.
            for text in item if isinstance(item, list) else () if item is None else (item,):
                if f.max_len is not None and len(text) > f.max_len:
                    raise _Bad(where, f"longer than {f.max_len} characters")
                if f.charset is not None and not re.fullmatch(f"[{f.charset}]*", text):
                    raise _Bad(where, f"must be of the characters {f.charset}")
        return out
    except _Bad as bad:
        if not context:  # a nested struct's: the outermost names the key path
            raise
        if bad.reason == "missing_key":
            raise ContractError(bad.reason, context, f"missing key {bad.path!r}") from None
        key = f"key {bad.path!r}: " if bad.path else ""
        raise ContractError(bad.reason, context, f"{key}{bad.what}") from None


def _write(value: Any) -> Any:
    if hasattr(value, "FIELDS"):
        return _write_struct(value)
    if isinstance(value, list):
        return [_write(item) for item in value]
    if isinstance(value, dict):
        return {key: _write(item) for key, item in value.items()}
    return value


def _write_struct(value: Any) -> dict[str, Any]:
    """Every field, but an optional one that is None."""
    out = {}
    for f in value.FIELDS:
        item = getattr(value, f.name)
        if not (f.optional and item is None):
            out[f.name] = _write(item)
    return out
'''


def render_python(schema: Schema) -> str:
    out = [
        '"""The daemon-worker contract (messages/contract.yaml), generated by',
        "messages/gen_contract.py: do not edit; the C++ build regenerates it, and",
        'worker/tests/test_contract.py checks that it is fresh."""',
        "",
        "from __future__ import annotations",
        "",
        "import enum",
        "import re",
        "from dataclasses import dataclass, field",
        "from typing import Any, ClassVar, Self",
        "",
        f"VERSION = {schema.version}",
    ]
    for e in schema.enums.values():
        out += ["", "", f"class {py_class(e.name)}(enum.StrEnum):"]
        out += py_docstring(e.doc, "    ")
        out.append("")
        for value in e.values:
            out.append(f'    {re.sub(r"[^0-9A-Za-z_]", "_", value).upper()} = "{value}"')
    out.append("")
    out.append("")
    for e in schema.enums.values():
        values = f"tuple(m.value for m in {py_class(e.name)})"  # plain str, as they print
        out.append(f"{py_plural(e.name)}: tuple[str, ...] = {values}")
    # Written as ruff formats a tuple (double quotes; a trailing comma only for one item), so
    # that the committed module stays formatted.
    kinds = ", ".join(f'"{k}"' for k in schema.device_kinds) + "," * (len(schema.device_kinds) == 1)
    out.append("#: The kinds the worker's registry defines (device_kinds.KINDS), in schema order.")
    out.append(f"DEVICE_KINDS: tuple[str, ...] = ({kinds})")
    out.append(PY_RUNTIME.rstrip("\n"))
    for s in schema.structs + schema.frames:
        out += py_dataclass(s)
    out += ["", "", "STRUCTS: dict[str, type] = {"]
    out += [f'    "{s.name}": {py_class(s.name)},' for s in schema.structs]
    out.append("}")
    for side, name in (("worker", "FRAMES_FROM_WORKER"), ("daemon", "FRAMES_FROM_DAEMON")):
        out.append(f"#: The frames a {side} sends, by their `type`.")
        out.append(f"{name}: dict[str, type] = {{")
        out += [
            f'    "{s.frame_type}": {py_class(s.name)},' for s in schema.frames if side in s.sides
        ]
        out.append("}")
    return "\n".join(out) + "\n"


# -- main ---------------------------------------------------------------------------------------


def write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("schema", type=Path)
    parser.add_argument("--cpp-header", type=Path)
    parser.add_argument("--cpp-source", type=Path)
    parser.add_argument("--python", type=Path)
    args = parser.parse_args(argv)
    try:
        schema = load(args.schema)
    except (SchemaError, KeyError, yaml.YAMLError) as error:
        print(f"{args.schema}: {error}", file=sys.stderr)
        return 1
    if args.cpp_header or args.cpp_source:
        header, source = render_cpp(schema, "messages/contract.hpp")
        if args.cpp_header:
            write_if_changed(args.cpp_header, header)
        if args.cpp_source:
            write_if_changed(args.cpp_source, source)
    if args.python:
        write_if_changed(args.python, render_python(schema))
    return 0


if __name__ == "__main__":
    sys.exit(main())
