"""The rules engine: one pass over a candidate's AST, driven by a Profile.

The walk is iterative (a hostile candidate can nest expressions deeper than Python's recursion
limit) and carries, for every node, its parent and whether it runs in a kernel or on the host.
Decorators run on the host, whatever they decorate.

Rules judge what a name refers to, not how it is spelled: a pass before the walk (``_Scopes``)
resolves every name the way Python does (functions, lambdas and comprehensions bind their own
names), so a local that happens to be called ``os`` or ``F`` is a local, while a module name
stays refused wherever it is not rebound by an assignment in a function. A method whose name a
tensor shares (``add``, ``sort``) is allowed only on a receiver known to be a builtin value of
the right type (``typed_methods``): a literal, a builtin constructor's result, a local bound to
nothing else, or a name narrowed by ``isinstance(name, T) and ...``.

Imports are judged by what they bind: a module of the profile under its own name (torch,
``triton.language as tl``, math) or names the profile allows from one (``from typing import
Optional``), wherever the statement stands. A called torch function outside the allowed names
is a ``fallback`` (it computes with torch instead of a kernel), not a mistake of form. No rule
judges names.

Two kinds of module-level statement are never walked, because they never run or do nothing: an
``if __name__ == "__main__":`` block without ``else`` (the harness loads a candidate under
another module name, candidate.py) and ``__all__`` bound to a list of strings. Annotations made
only of names (``device: torch.device | None``) are read, never called: any public name of an
allowed module may appear in one.
"""

from __future__ import annotations

import ast
import difflib
import re
import threading
from typing import NamedTuple

from opforge_worker.aten_kinds import FALLBACK_CHECK

from .profile import FORBIDDEN_ATTRIBUTE_RULE, Profile, load_profile

_TEXT_LIMIT = 120
# The line breaks of Python's tokenizer (str.splitlines also splits on \f, \v, \u2028, ...).
_LINE_BREAK = re.compile(r"\r\n?|\n")
# Operator and context nodes carry no names and no children: the walk does not visit them.
_LEAVES = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)


#: CPython keeps the AST constructor's recursion depth per interpreter, not per thread: two
#: threads in ast.parse at once failed with "SystemError: AST constructor recursion depth
#: mismatch" when a worker's harnesses linted side by side (python/cpython#106905 is about the
#: same error). Every parse in this process takes this lock.
_PARSE_LOCK = threading.Lock()


def parse_source(source: str) -> ast.Module:
    """``ast.parse(source)``, safe from several threads."""
    with _PARSE_LOCK:
        return ast.parse(source)


class _Where(NamedTuple):
    scope: str  # "kernel" or "host"
    function: str | None  # the top-level function the node is in, None at module level


def lint_source(source: str, *, op: str, wrapper: str, profile: str | Profile) -> dict:
    """Lint one candidate; the report lists every violation, ordered by position then rule, and
    what the gate decides of them (``gate_outcome``, ``gate_check``: Profile.gate_verdict)."""
    if isinstance(profile, str):
        profile = load_profile(profile)
    if len(source) > profile.max_source_chars:
        hint = profile.hints["source_too_large"].format(limit=profile.max_source_chars)
        violation = {"rule": "source_too_large", "line": 1, "col": 1, "text": "", "hint": hint}
        return _report(profile, [violation], None)
    try:
        tree = parse_source(source)
    except SyntaxError as error:
        return _syntax_report(profile, error.lineno or 1, error.offset or 1, error.msg)
    except (ValueError, RecursionError, MemoryError) as error:
        # NUL bytes (ValueError before Python 3.12) or nesting the parser cannot hold.
        return _syntax_report(profile, 1, 1, str(error) or type(error).__name__)
    checker = _Checker(source, op, wrapper, profile)
    checker.run(tree)
    violations = sorted(
        checker.violations, key=lambda v: (v["line"], v["col"], v["rule"], v["text"])
    )
    return _report(profile, violations, None)


def _report(profile: Profile, violations: list[dict], syntax_error: dict | None) -> dict:
    classes = [profile.refusal_class(v["rule"]) for v in violations]
    classes += [None] if syntax_error else []
    outcome, check = profile.gate_verdict(classes)
    return {
        "ok": not violations and not syntax_error,
        "violations": violations,
        "syntax_error": syntax_error,
        "gate_outcome": outcome,
        "gate_check": check,
    }


def _syntax_report(profile: Profile, line: int, col: int, message: str) -> dict:
    return _report(profile, [], {"line": line, "col": col, "message": message})


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a chain of attributes on a name (a decorator, a callee), else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _literal_getattr(node: ast.AST) -> tuple[ast.AST, str] | None:
    """getattr(obj, "name"[, default]) with a literal name reads like obj.name; None otherwise."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and 2 <= len(node.args) <= 3
        and not node.keywords
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        return node.args[0], node.args[1].value
    return None


def _is_constant(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        return _is_constant(node.operand)
    if isinstance(node, ast.Tuple):
        return all(_is_constant(element) for element in node.elts)
    return False


def _is_main_guard(statement: ast.stmt) -> bool:
    """`if __name__ == "__main__":` with no else: its body never runs in the harness."""
    if not isinstance(statement, ast.If) or statement.orelse:
        return False
    test = statement.test
    if not isinstance(test, ast.Compare) or [type(op) for op in test.ops] != [ast.Eq]:
        return False
    sides = [test.left, test.comparators[0]]
    names = [side for side in sides if isinstance(side, ast.Name) and side.id == "__name__"]
    mains = [side for side in sides if isinstance(side, ast.Constant) and side.value == "__main__"]
    return len(names) == 1 and len(mains) == 1


def _is_export_list(statement: ast.stmt) -> bool:
    """`__all__ = ["exp"]`: only `from module import *` reads it, and nothing here does."""
    return (
        isinstance(statement, ast.Assign)
        and len(statement.targets) == 1
        and isinstance(statement.targets[0], ast.Name)
        and statement.targets[0].id == "__all__"
        and isinstance(statement.value, ast.List | ast.Tuple)
        and all(
            isinstance(item, ast.Constant) and isinstance(item.value, str)
            for item in statement.value.elts
        )
    )


def _is_type_expression(node: ast.AST) -> bool:
    """An annotation made only of names: `torch.Tensor`, `torch.device | None`, `list[int]`.
    Iterative: `a | b | ...` nests as deep as it is long."""
    pending = [node]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Constant):
            if not (node.value is None or isinstance(node.value, str)):
                return False
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            pending += [node.left, node.right]
        elif isinstance(node, ast.Subscript):
            pending.append(node.value)
            pending += node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        elif _dotted(node) is None:
            return False
    return True


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# Builtin callables whose result's type is known, when the name is not rebound anywhere.
_CONSTRUCTORS = {
    "list": "list",
    "sorted": "list",
    "set": "set",
    "dict": "dict",
    "float": "float",
    "int": "int",
    "len": "int",
}
_LITERALS = {
    ast.List: "list",
    ast.ListComp: "list",
    ast.Set: "set",
    ast.SetComp: "set",
    ast.Dict: "dict",
    ast.DictComp: "dict",
}
_NARROWABLE = frozenset({"list", "set", "dict", "float", "int"})
_UNKNOWN = None  # a binding whose value the resolver does not follow (a parameter, a loop, ...)
_TYPE_DEPTH = 8  # how many assignments deep a local's type is followed


class _Scopes:
    """Python's name resolution over one module, computed before the rules run.

    For every name read or written in a function, lambda or comprehension it records the scopes
    around it; for every such scope, the names it binds and, for a plain `name = value`, the
    value. `global` and `nonlocal` names, and names bound by imports, are never treated as
    locals: an import binds the module itself.
    """

    def __init__(self, tree: ast.Module):
        self.chain_of: dict[int, tuple[ast.AST, ...]] = {}
        self.bindings: dict[int, dict[str, list[ast.AST | None]]] = {}
        self.module_names: set[str] = set()
        self.declared: set[str] = set()  # global or nonlocal anywhere
        self.imported: set[str] = set()
        self.narrowed: dict[int, str] = {}
        value_of: dict[int, ast.AST] = {}
        walrus: set[int] = set()
        conjunctions: list[ast.BoolOp] = []
        stack: list[tuple[ast.AST, tuple[ast.AST, ...]]] = [(tree, ())]
        while stack:
            node, chain = stack.pop()
            if isinstance(node, _FUNCTIONS):
                stack.extend(self.enclosing_parts(node, chain))
                inner = (*chain, node)
                self.bindings[id(node)] = {}
                arguments = node.args
                for argument in (
                    *arguments.posonlyargs,
                    *arguments.args,
                    *arguments.kwonlyargs,
                    *filter(None, (arguments.vararg, arguments.kwarg)),
                ):
                    self.bind(argument.arg, inner, _UNKNOWN)
                body = node.body if isinstance(node.body, list) else [node.body]
                stack.extend((statement, inner) for statement in body)
                if not isinstance(node, ast.Lambda):
                    self.bind(node.name, chain, _UNKNOWN)
                continue
            if isinstance(node, _COMPREHENSIONS):
                stack.append((node.generators[0].iter, chain))
                inner = (*chain, node)
                self.bindings[id(node)] = {}
                for index, generator in enumerate(node.generators):
                    stack.append((generator.target, inner))
                    stack.extend((condition, inner) for condition in generator.ifs)
                    if index:
                        stack.append((generator.iter, inner))
                parts = (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)
                stack.extend((part, inner) for part in parts)
                continue
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        value_of[id(target)] = node.value
            elif isinstance(node, ast.NamedExpr):
                walrus.add(id(node.target))
            elif isinstance(node, ast.Global | ast.Nonlocal):
                self.declared.update(node.names)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                for alias in node.names:
                    self.imported.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
                conjunctions.append(node)
            elif isinstance(node, ast.Name):
                self.chain_of[id(node)] = chain
                if not isinstance(node.ctx, ast.Load):
                    scopes = chain
                    if id(node) in walrus:  # binds in the nearest function, not a comprehension
                        while scopes and isinstance(scopes[-1], _COMPREHENSIONS):
                            scopes = scopes[:-1]
                    self.bind(node.id, scopes, value_of.get(id(node), _UNKNOWN))
            elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
                self.bind(node.name, chain, _UNKNOWN)
            elif isinstance(node, ast.ClassDef):
                # A class body's names are its own; refused anyway (class_definition).
                stack.extend((part, chain) for part in (*node.decorator_list, *node.bases))
                self.bindings[id(node)] = {}
                stack.extend((statement, (*chain, node)) for statement in node.body)
                self.bind(node.name, chain, _UNKNOWN)
                continue
            for field in node._fields:
                value = getattr(node, field, None)
                if isinstance(value, list):
                    stack.extend((item, chain) for item in value if isinstance(item, ast.AST))
                elif isinstance(value, ast.AST) and not isinstance(value, _LEAVES):
                    stack.append((value, chain))
        for conjunction in conjunctions:
            self.narrow(conjunction)

    @staticmethod
    def enclosing_parts(node: ast.AST, chain: tuple) -> list[tuple[ast.AST, tuple]]:
        """What a function evaluates in the scope around it: decorators, defaults, annotations."""
        arguments = node.args
        parts = [*arguments.defaults, *filter(None, arguments.kw_defaults)]
        if not isinstance(node, ast.Lambda):
            parts += node.decorator_list
            every = (
                *arguments.posonlyargs,
                *arguments.args,
                *arguments.kwonlyargs,
                *filter(None, (arguments.vararg, arguments.kwarg)),
            )
            parts += [a.annotation for a in every if a.annotation is not None]
            parts += [node.returns] if node.returns is not None else []
        return [(part, chain) for part in parts]

    def bind(self, name: str, chain: tuple, value: ast.AST | None) -> None:
        if not chain:
            self.module_names.add(name)
        else:
            self.bindings[id(chain[-1])].setdefault(name, []).append(value)

    def scope_of(self, node: ast.Name) -> ast.AST | None:
        """The function, lambda or comprehension whose local ``node`` is; None for a module
        global, a builtin, or a name a global, nonlocal or import statement touches."""
        if node.id in self.declared or node.id in self.imported:
            return None
        for scope in reversed(self.chain_of.get(id(node), ())):
            if not isinstance(scope, ast.ClassDef) and node.id in self.bindings[id(scope)]:
                return scope
        return None

    def is_local(self, node: ast.Name) -> bool:
        return self.scope_of(node) is not None

    def is_builtin(self, node: ast.Name) -> bool:
        return (
            self.scope_of(node) is None
            and node.id not in self.module_names
            and node.id not in self.declared
            and node.id not in self.imported
        )

    def type_of(self, node: ast.AST, depth: int = 0) -> str | None:
        """The builtin type of the value of ``node`` where it is certain, else None."""
        if depth > _TYPE_DEPTH:
            return None
        if type(node) in _LITERALS:
            return _LITERALS[type(node)]
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return type(node.value).__name__
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            constructed = _CONSTRUCTORS.get(node.func.id)
            return constructed if constructed and self.is_builtin(node.func) else None
        if not isinstance(node, ast.Name):
            return None
        if id(node) in self.narrowed:
            return self.narrowed[id(node)]
        scope = self.scope_of(node)
        if scope is None:
            return None
        values = self.bindings[id(scope)][node.id]
        if any(value is _UNKNOWN for value in values):
            return None
        types = {self.type_of(value, depth + 1) for value in values}
        return types.pop() if len(types) == 1 else None

    def narrow(self, conjunction: ast.BoolOp) -> None:
        """In `isinstance(x, float) and x.is_integer()`, x is a float after the isinstance."""
        if any(isinstance(node, ast.NamedExpr) for node in ast.walk(conjunction)):
            return
        for index, operand in enumerate(conjunction.values):
            checked = self.isinstance_of(operand)
            if checked is None:
                continue
            name, kind = checked
            scope = self.scope_of(name)
            for later in conjunction.values[index + 1 :]:
                for node in ast.walk(later):
                    if (
                        isinstance(node, ast.Name)
                        and node.id == name.id
                        and isinstance(node.ctx, ast.Load)
                        and self.scope_of(node) is scope
                        and self.chain_of.get(id(node)) == self.chain_of.get(id(name))
                    ):
                        self.narrowed[id(node)] = kind

    def isinstance_of(self, node: ast.AST) -> tuple[ast.Name, str] | None:
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and self.is_builtin(node.func)
            and len(node.args) == 2
            and not node.keywords
            and isinstance(node.args[0], ast.Name)
            and isinstance(node.args[1], ast.Name)
            and node.args[1].id in _NARROWABLE
            and self.is_builtin(node.args[1])
        ):
            return None
        return node.args[0], node.args[1].id


class _Checker:
    def __init__(self, source: str, op: str, wrapper: str, profile: Profile):
        self.lines = _LINE_BREAK.split(source)
        self.op = op
        self.wrapper = wrapper
        self.profile = profile
        self.violations: list[dict] = []
        self.reported: set[tuple] = set()
        # Per-operator relaxations: a pure view op needs no kernel and may call view methods; an
        # op whose output size depends on values may read them on the host.
        self.kernel_required = op not in profile.launch_exempt_ops
        self.host_methods = profile.host_methods
        if not self.kernel_required:
            self.host_methods = self.host_methods | profile.launch_exempt_ops
        self.host_readable = profile.host_attributes | self.host_methods
        self.forbidden_attributes = dict(profile.forbidden_attributes)
        if op in profile.host_read_ops:
            for name in profile.host_read_attributes:
                self.forbidden_attributes.pop(name, None)
        self.kernels: set[str] = set()
        # Nodes already judged as part of a module attribute chain, and the chains' root names.
        self.chain_inner: set[int] = set()
        self.chain_roots: set[int] = set()
        # Module attribute chains judged where they stand: tuning decorators and their configs
        # (checked by check_tuning), names in annotations.
        self.tuning_names: set[int] = set()
        self.annotation_names: set[int] = set()
        # Module constants of autotune configs, by name, and their values' nodes.
        self.config_lists: dict[str, ast.expr] = {}
        self.config_lists_values: set[int] = set()
        # Roots of module chains that name a value of constant_names (tl.float32 on the host).
        self.constant_roots: set[int] = set()
        self.scopes: _Scopes | None = None

    # --- reporting ---------------------------------------------------------------------------

    def report(self, rule: str, node: ast.AST, hint: str, *, at_member: bool = False) -> None:
        line = getattr(node, "lineno", 1)
        # Whole-file violations (a missing wrapper) point at 1:1 and quote nothing.
        whole_file = isinstance(node, ast.Module)
        text = (
            self.lines[line - 1].encode() if 0 < line <= len(self.lines) and not whole_file else b""
        )
        start = getattr(node, "col_offset", 0)
        end = (
            getattr(node, "end_col_offset", None)
            if getattr(node, "end_lineno", 0) == line
            else None
        )
        if at_member and isinstance(node, ast.Attribute) and end is not None:
            # Point at `.name`, not at the whole expression it is read from.
            start = max(start, end - len(node.attr.encode()) - 1)
        # ast columns count UTF-8 bytes; the report counts characters, 1-based like SyntaxError.
        col = len(text[:start].decode(errors="ignore")) + 1
        snippet = text[start:end].decode(errors="ignore")
        snippet = snippet.strip() if end is None else snippet
        if len(snippet) > _TEXT_LIMIT:
            snippet = snippet[: _TEXT_LIMIT - 3] + "..."
        key = (rule, line, col, snippet)
        if key not in self.reported:
            self.reported.add(key)
            self.violations.append(
                {"rule": rule, "line": line, "col": col, "text": snippet, "hint": hint}
            )

    def hint(self, rule: str, **fields: str) -> str:
        return self.profile.hints[rule].format(**fields)

    @staticmethod
    def suggestion(name: str, candidates: frozenset[str], prefix: str) -> str:
        """The allowed name the model most likely meant: same last part (tl.tanh is
        tl.extra.cuda.libdevice.tanh on cuda), else the closest spelling; "" when none is close."""
        last = name.rsplit(".", 1)[-1]
        same_last = sorted(c for c in candidates if c.rsplit(".", 1)[-1] == last)
        close = same_last or difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.75)
        return f" Did you mean {prefix}{close[0]}?" if close else ""

    # --- the walk ----------------------------------------------------------------------------

    def run(self, tree: ast.Module) -> None:
        self.scopes = _Scopes(tree)
        self.find_config_lists(tree)
        self.check_contract(tree)
        constructs = self.profile.constructs
        construct_of: dict[type, list[str]] = {}
        for rule, construct in constructs.items():
            for node in construct.nodes:
                construct_of.setdefault(node, []).append(rule)
        visitors = self.visitors
        # Siblings may be visited in any order (the report is sorted); a parent always comes
        # before its children, which the module-chain bookkeeping relies on.
        stack = [
            (statement, tree, self.where_of_top_level(statement))
            for statement in tree.body
            if not (_is_main_guard(statement) or _is_export_list(statement))
        ]
        while stack:
            node, parent, where = stack.pop()
            kind = type(node)
            for rule in construct_of.get(kind, ()):
                if constructs[rule].scope in ("any", where.scope):
                    self.report(rule, node, constructs[rule].hint)
            visit = visitors.get(kind)
            if visit is not None:
                visit(self, node, parent, where)
            for field in kind._fields:
                value = getattr(node, field, None)
                # Decorators run on the host when their function is defined, kernels' included.
                inner = _Where("host", where.function) if field == "decorator_list" else where
                if isinstance(value, list):
                    stack.extend((item, node, inner) for item in value if isinstance(item, ast.AST))
                elif isinstance(value, ast.AST) and not isinstance(value, _LEAVES):
                    stack.append((value, node, inner))

    def where_of_top_level(self, statement: ast.stmt) -> _Where:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            scope = "kernel" if statement.name in self.kernels else "host"
            return _Where(scope, statement.name)
        if self.is_kernel_global(statement):
            return _Where("kernel", None)
        return _Where("host", None)

    def is_kernel_global(self, statement: ast.stmt) -> bool:
        """NAME = tl.constexpr(1024): the one way a kernel may read a module-level constant."""
        value = statement.value if isinstance(statement, ast.Assign) else None
        return (
            isinstance(value, ast.Call)
            and _dotted(value.func) in self.profile.kernel_globals
            and len(value.args) == 1
            and not value.keywords
            and _is_constant(value.args[0])
        )

    def is_kernel_decorator(self, decorator: ast.expr) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return _dotted(target) in self.profile.kernel_decorators

    # --- the output contract -----------------------------------------------------------------

    def check_contract(self, tree: ast.Module) -> None:
        wrappers = []
        for statement in tree.body:
            if isinstance(statement, ast.FunctionDef):
                if any(self.is_kernel_decorator(d) for d in statement.decorator_list):
                    self.kernels.add(statement.name)
                if statement.name == self.wrapper:
                    wrappers.append(statement)
            elif not self.is_allowed_module_statement(statement):
                self.report("module_state", statement, self.hint("module_state"))
        if not wrappers:
            self.report(
                "wrapper_missing",
                tree,
                self.hint("wrapper_missing", wrapper=self.wrapper, op=self.op),
            )
        for duplicate in wrappers[1:]:
            self.report(
                "wrapper_duplicate", duplicate, self.hint("wrapper_duplicate", wrapper=self.wrapper)
            )
        if wrappers:
            arguments = wrappers[0].args
            takes_input = arguments.posonlyargs or arguments.args or arguments.vararg
            if self.wrapper in self.kernels or not takes_input:
                hint = self.hint("wrapper_signature", wrapper=self.wrapper, op=self.op)
                self.report("wrapper_signature", wrappers[0], hint)
        if not self.kernels and self.kernel_required:
            self.report("kernel_missing", tree, self.hint("kernel_missing"))

    def is_allowed_module_statement(self, statement: ast.stmt) -> bool:
        if _is_main_guard(statement) or _is_export_list(statement):
            return True
        if isinstance(statement, ast.Import | ast.ImportFrom):
            return True  # refused by the import rule where it is not accepted
        constructs = self.profile.constructs.values()
        if any(isinstance(statement, c.nodes) and c.scope != "kernel" for c in constructs):
            return True  # reported by its construct rule
        if isinstance(statement, ast.Expr):
            return isinstance(statement.value, ast.Constant) and isinstance(
                statement.value.value, str
            )
        if isinstance(statement, ast.Assign):
            targets_are_names = all(isinstance(target, ast.Name) for target in statement.targets)
            constant = self.is_host_constant(statement.value) or self.is_kernel_global(statement)
            return targets_are_names and constant
        if isinstance(statement, ast.AnnAssign):
            return isinstance(statement.target, ast.Name) and (
                statement.value is None or self.is_host_constant(statement.value)
            )
        return False

    def is_host_constant(self, node: ast.AST) -> bool:
        """A constant, a name of constant_names (a dtype), a config of autotune_config, a tuple
        of them, or a list, set or dict of them that is not empty (an empty one at module level
        has one use, being filled at run time: state kept across calls)."""
        if isinstance(node, ast.Tuple):
            return all(self.is_host_constant(element) for element in node.elts)
        if isinstance(node, ast.List | ast.Set):
            return bool(node.elts) and all(self.is_host_constant(item) for item in node.elts)
        if isinstance(node, ast.Dict):
            return bool(node.keys) and all(
                key is not None and self.is_host_constant(key) and self.is_host_constant(value)
                for key, value in zip(node.keys, node.values, strict=True)
            )
        if isinstance(node, ast.Call) and _dotted(node.func) == self.profile.autotune_config:
            return all(self.is_host_constant(a) for a in node.args) and all(
                k.arg is not None and self.is_host_constant(k.value) for k in node.keywords
            )
        return (
            _is_constant(node)
            or _dotted(node) in self.profile.constant_names
            or id(node) in self.config_lists_values
        )

    def find_config_lists(self, tree: ast.Module) -> None:
        """Module constants holding autotune configs (CONFIGS = [triton.Config(...), ...], or a
        comprehension of them over literal tuples): @triton.autotune(configs=CONFIGS) reads
        them, and they are checked with the decorator. A name bound more than once is none."""
        bound: dict[str, list[ast.expr]] = {}
        for statement in tree.body:
            if isinstance(statement, ast.Assign):
                for target in statement.targets:
                    if isinstance(target, ast.Name):
                        bound.setdefault(target.id, []).append(statement.value)
        for name, values in bound.items():
            if len(values) == 1 and self.config_count(values[0]) is not None:
                self.config_lists[name] = values[0]
                self.config_lists_values.add(id(values[0]))

    def config_count(self, node: ast.expr) -> int | None:
        """How many configs a literal list or a comprehension over literal tuples makes; None
        for anything else."""
        config = self.profile.autotune_config
        if isinstance(node, ast.List | ast.Tuple):
            calls = all(
                isinstance(item, ast.Call) and _dotted(item.func) == config for item in node.elts
            )
            return len(node.elts) if calls else None
        if (
            isinstance(node, ast.ListComp)
            and isinstance(node.elt, ast.Call)
            and _dotted(node.elt.func) == config
        ):
            count = 1
            for generator in node.generators:
                if not isinstance(generator.iter, ast.List | ast.Tuple) or not all(
                    _is_constant(item) for item in generator.iter.elts
                ):
                    return None
                count *= len(generator.iter.elts)
            return count
        return None

    # --- node checks -------------------------------------------------------------------------

    def visit_function(self, node: ast.FunctionDef, parent: ast.AST, where: _Where) -> None:
        decorators = node.decorator_list
        # A top-level kernel: its kernel decorator innermost, tuning decorators above it.
        kernel = (
            isinstance(parent, ast.Module)
            and bool(decorators)
            and self.is_kernel_decorator(decorators[-1])
        )
        for index, decorator in enumerate(decorators):
            tuning = self.tuning_decorator(decorator)
            if kernel and tuning is not None and index < len(decorators) - 1:
                self.check_tuning(decorator, tuning)
            elif not (kernel and index == len(decorators) - 1):
                self.report("decorator", decorator, self.hint("decorator", allowed=self.allowed))
        arguments = node.args
        every = (
            *arguments.posonlyargs,
            *arguments.args,
            *arguments.kwonlyargs,
            *filter(None, (arguments.vararg, arguments.kwarg)),
        )
        for argument in every:
            self.check_binding(argument.arg, argument)
        for annotation in (*(a.annotation for a in every), node.returns):
            if annotation is not None and _is_type_expression(annotation):
                self.annotation_names.update(id(part) for part in ast.walk(annotation))

    @property
    def allowed(self) -> str:
        """The decorators a kernel may carry, for hints."""
        kernel = ", ".join(f"@{name}" for name in sorted(self.profile.kernel_decorators))
        tuning = ", ".join(f"@{name}" for name in sorted(self.profile.tuning_decorators))
        return f"{kernel} (innermost) and {tuning} above it" if tuning else kernel

    def tuning_decorator(self, decorator: ast.expr) -> str | None:
        if not isinstance(decorator, ast.Call):
            return None
        name = _dotted(decorator.func)
        return name if name in self.profile.tuning_decorators else None

    def check_tuning(self, decorator: ast.Call, name: str) -> None:
        """@triton.autotune / @triton.heuristics with only the arguments the profile allows,
        and autotune's configs written out and bounded."""
        self.tuning_names.add(id(decorator.func))
        allowed = self.profile.tuning_decorators[name]
        passed = self.check_arguments(decorator, f"@{name}", allowed)
        configs = passed.get("configs")
        if configs is not None and allowed and allowed[0] == "configs":
            self.check_configs(configs)

    def check_arguments(self, call: ast.Call, label: str, allowed: tuple[str, ...]) -> dict:
        """The arguments of ``call`` by name; those the profile does not allow are reported."""
        passed = {}
        listed = ", ".join(allowed)
        for index, argument in enumerate(call.args):
            if index == 0 and allowed and not isinstance(argument, ast.Starred):
                passed[allowed[0]] = argument
            else:
                text = ast.unparse(argument)[:40]
                hint = self.hint("tuning_argument", name=text, call=label, allowed=listed)
                self.report("tuning_argument", argument, hint)
        for keyword in call.keywords:
            if keyword.arg in allowed and keyword.arg not in passed:
                passed[keyword.arg] = keyword.value
            else:
                name = keyword.arg or "**"
                hint = self.hint("tuning_argument", name=name, call=label, allowed=listed)
                self.report("tuning_argument", keyword.value, hint)
        return passed

    def check_configs(self, configs: ast.expr) -> None:
        profile = self.profile
        config = profile.autotune_config
        if isinstance(configs, ast.Name) and configs.id in self.config_lists:
            configs = self.config_lists[configs.id]
        count = self.config_count(configs)
        for item in ast.walk(configs):  # reported once, as the list, when it is refused
            if isinstance(item, ast.Call) and _dotted(item.func) == config:
                self.tuning_names.add(id(item.func))
        if count is None or count > profile.max_autotune_configs:
            hint = self.hint(
                "autotune_configs", config=config, limit=str(profile.max_autotune_configs)
            )
            self.report("autotune_configs", configs, hint)
            return
        arguments = tuple(sorted(profile.autotune_config_arguments, key=lambda a: a != "kwargs"))
        items = configs.elts if isinstance(configs, ast.List | ast.Tuple) else [configs.elt]
        for item in items:
            self.check_arguments(item, config, arguments)

    def visit_name(self, node: ast.Name, parent: ast.AST, where: _Where) -> None:
        name, profile = node.id, self.profile
        # A local of a function, lambda or comprehension (`for os in ...`) is not the builtin
        # or module it is named like: its value comes from code the rules have seen.
        local = self.scopes.is_local(node)
        if name in profile.forbidden_builtins and not local:
            self.report("forbidden_builtin", node, profile.forbidden_builtins[name])
        elif name in profile.forbidden_modules and not local:
            self.report("forbidden_module", node, profile.forbidden_modules[name])
        elif name in profile.unavailable_modules and not local:
            self.report("unavailable_module", node, profile.unavailable_modules[name])
        elif _is_dunder(name):
            self.report("dunder", node, self.hint("dunder", name=name))
        elif name in profile.modules:
            if not isinstance(node.ctx, ast.Load):
                self.check_binding(name, node)
            elif id(node) not in self.chain_roots:
                self.report("module_alias", node, self.hint("module_alias", module=name))
            # A dtype is a value the host may read (a table from torch to tl dtypes); a kernel
            # still reads only its own module. An annotation is never evaluated here.
            value_on_host = id(node) in self.constant_roots and where.scope == "host"
            if not value_on_host and id(node) not in self.annotation_names:
                self.check_module_scope(name, node, where)
        elif name in self.kernels and where.scope == "host":
            self.check_launch(node, parent, where)

    def check_binding(self, name: str, node: ast.AST) -> None:
        if name in self.profile.modules:
            self.report("module_alias", node, self.hint("module_alias", module=name))

    def check_module_scope(self, module: str, node: ast.AST, where: _Where) -> None:
        scope = self.profile.modules[module].scope
        if scope != "any" and scope != where.scope:
            self.report("module_scope", node, self.hint("module_scope", module=module, scope=scope))

    def check_launch(self, node: ast.Name, parent: ast.AST, where: _Where) -> None:
        # The only host use of a kernel is `kernel[grid](...)` inside a function (the wrapper or
        # a helper it calls): never at import, never passed on or inspected.
        launched = isinstance(parent, ast.Subscript) and parent.value is node
        if not launched or where.function is None:
            hint = self.hint("kernel_launch", kernel=node.id, wrapper=self.wrapper)
            self.report("kernel_launch", node, hint)

    def visit_attribute(self, node: ast.Attribute, parent: ast.AST, where: _Where) -> None:
        if not isinstance(node.ctx, ast.Load):
            # Patching a module (torch.empty = ...) or a tensor's internals; the chain below it
            # is only read, so it is still checked.
            hint = self.hint("attribute_assignment", name=node.attr)
            self.report("attribute_assignment", node, hint, at_member=True)
            return
        called = isinstance(parent, ast.Call) and parent.func is node
        self.check_member(node, node.value, node.attr, where, called=called)

    def visit_call(self, node: ast.Call, parent: ast.AST, where: _Where) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "getattr":
            literal = _literal_getattr(node)
            if literal is None:
                self.report("dynamic_getattr", node, self.hint("dynamic_getattr"))
            else:
                self.check_member(node, *literal, where, called=False)
        if where.scope == "host":
            self.check_host_transfer(node)

    def check_member(
        self, node: ast.AST, owner: ast.AST, name: str, where: _Where, *, called: bool
    ) -> None:
        """An attribute read, written `owner.name` or `getattr(owner, "name")`."""
        if id(node) in self.chain_inner:
            return
        chain = self.module_chain(node)
        if chain is not None:
            root, path, inner = chain
            self.chain_inner.update(inner)
            self.chain_roots.add(id(root))
            self.check_module_path(node, root, path, called)
            return
        if _is_dunder(name):
            self.report("dunder", node, self.hint("dunder", name=name), at_member=True)
        elif name.startswith("_"):
            hint = self.hint("private_attribute", name=name)
            self.report("private_attribute", node, hint, at_member=True)
        elif name in self.forbidden_attributes:
            hint = self.forbidden_attributes[name]
            self.report(FORBIDDEN_ATTRIBUTE_RULE, node, hint, at_member=True)
        elif where.scope == "host" and not self.is_module_name(owner):
            self.check_host_member(node, owner, name, called)

    def is_module_name(self, node: ast.AST) -> bool:
        """A forbidden or unavailable module, reported where the name is read."""
        profile = self.profile
        return (
            isinstance(node, ast.Name)
            and (node.id in profile.forbidden_modules or node.id in profile.unavailable_modules)
            and not self.scopes.is_local(node)
        )

    def module_chain(self, node: ast.AST) -> tuple[ast.Name, list[str], list[int]] | None:
        """For `torch.a.b` or nested literal getattrs on a module: root, path and inner nodes."""
        path, inner = [], []
        while True:
            if isinstance(node, ast.Attribute):
                path.append(node.attr)
                inner.append(id(node))
                node = node.value
                continue
            literal = _literal_getattr(node)
            if literal is None:
                break
            path.append(literal[1])
            inner.append(id(node))
            node = literal[0]
        if isinstance(node, ast.Name) and node.id in self.profile.modules and path:
            return node, list(reversed(path)), inner
        return None

    def check_module_path(
        self, node: ast.AST, root: ast.Name, path: list[str], called: bool
    ) -> None:
        module = root.id
        dotted = ".".join(path)
        rules = self.profile.modules[module]
        name = f"{module}.{dotted}"
        if dotted in rules.allow:
            if name in self.profile.constant_names:
                self.constant_roots.add(id(root))
            return
        if any(_is_dunder(part) for part in path):
            self.report("dunder", node, self.hint("dunder", name=name))
            return
        private = next((part for part in path if part.startswith("_")), None)
        if private is not None:
            self.report("private_attribute", node, self.hint("private_attribute", name=name))
            return
        forbidden = next((part for part in path if part in self.profile.forbidden_modules), None)
        if forbidden is not None:  # torch.sys, torch.os: the module through another's namespace
            self.report("forbidden_module", node, self.profile.forbidden_modules[forbidden])
            return
        if id(node) in self.annotation_names:
            return  # read as a type, never called
        if id(node) in self.tuning_names or self.in_config_list(node):
            return  # checked with its decorator
        if name in self.profile.tuning_decorators:
            self.report("decorator", node, self.hint("decorator", allowed=self.allowed))
            return
        if name == self.profile.autotune_config:
            limit = str(self.profile.max_autotune_configs)
            hint = self.hint("autotune_configs", config=name, limit=limit)
            self.report("autotune_configs", node, hint)
            return
        suggestion = self.suggestion(dotted, rules.allow, f"{module}.")
        if called and self.is_fallback(module, path):
            hint = self.hint(FALLBACK_CHECK, name=name, suggestion=suggestion)
            self.report(FALLBACK_CHECK, node, hint)
            return
        hint = self.hint(
            "module_attribute",
            module=module,
            name=f"{module}.{dotted}",
            profile=self.profile.name,
            suggestion=suggestion,
        )
        self.report("module_attribute", node, hint)

    def is_fallback(self, module: str, path: list[str]) -> bool:
        """Whether calling module.path computes with torch instead of a kernel."""
        profile = self.profile
        if module not in profile.aten_kind_modules:
            return False
        name = ".".join((module, *path))
        return len(path) == 1 or any(
            name.startswith(f"{namespace}.") for namespace in profile.fallback_namespaces
        )

    def in_config_list(self, node: ast.AST) -> bool:
        return any(
            node is item.func
            for value in self.config_lists.values()
            for item in ast.walk(value)
            if isinstance(item, ast.Call)
        )

    def check_host_member(self, node: ast.AST, owner: ast.AST, name: str, called: bool) -> None:
        """Host code reads metadata and calls view/allocation methods; anything else computes.
        Reading a method without calling it is checked too, so `f = x.exp; f()` is caught.
        A receiver known to be a builtin value may use that type's methods (typed_methods)."""
        kind = self.scopes.type_of(owner)
        if kind is not None and name in self.profile.typed_methods.get(kind, ()):
            return
        if called and name not in self.host_methods:
            suggestion = self.suggestion(name, self.host_methods, ".")
            hint = self.hint("host_method", name=name, suggestion=suggestion)
            self.report("host_method", node, hint, at_member=True)
        elif not called and name not in self.host_readable:
            suggestion = self.suggestion(name, self.profile.host_attributes, ".")
            hint = self.hint("host_attribute", name=name, suggestion=suggestion)
            self.report("host_attribute", node, hint, at_member=True)

    def check_host_transfer(self, node: ast.Call) -> None:
        for keyword in node.keywords:
            if keyword.arg == "device" and isinstance(keyword.value, ast.Constant):
                self.report("host_transfer", keyword.value, self.hint("host_transfer"))
        method = node.func
        if (
            isinstance(method, ast.Attribute)
            and method.attr == "to"
            and any(isinstance(arg, ast.Constant) for arg in node.args)
        ):
            self.report("host_transfer", node, self.hint("host_transfer"))

    def visit_import(
        self, node: ast.Import | ast.ImportFrom, parent: ast.AST, where: _Where
    ) -> None:
        """An import is accepted where it binds a module of the profile under its own name
        (``import torch``, ``import triton.language as tl``, ``import math``) or takes names the
        profile allows from one (``from typing import Optional``); any other is refused as a
        mistake of form (``import``), and importing a forbidden or private module is also the
        attempt it names."""
        profile = self.profile
        for module, accepted in self.imports_of(node):
            root = module.lstrip(".").split(".", 1)[0]
            if root in profile.forbidden_modules:
                self.report("forbidden_module", node, profile.forbidden_modules[root])
            elif root.startswith("_") and root not in profile.modules:
                self.report("private_attribute", node, self.hint("private_attribute", name=root))
            elif not accepted:
                self.report("import", node, self.hint("import", module=module))

    def imports_of(self, node: ast.Import | ast.ImportFrom) -> list[tuple[str, bool]]:
        """(the module or name imported, whether the import is accepted) for each of the
        statement's names."""
        modules = self.profile.modules
        paths = {rules.import_path for rules in modules.values()}
        out = []
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".", 1)[0]
                rules = modules.get(bound)
                if alias.asname:
                    accepted = rules is not None and rules.import_path == alias.name
                else:  # `import triton.language` binds triton
                    accepted = rules is not None and rules.import_path == bound
                    accepted = accepted and (alias.name == bound or alias.name in paths)
                out.append((alias.name, accepted))
            return out
        source = "." * node.level + (node.module or "")
        owner = next(
            (rules for rules in modules.values() if rules.import_path == source and not node.level),
            None,
        )
        for alias in node.names:
            bound = alias.asname or alias.name
            rules = modules.get(bound)
            whole_module = rules is not None and rules.import_path == f"{source}.{alias.name}"
            allowed_name = owner is not None and alias.name in owner.allow and bound == alias.name
            out.append((f"{source}.{alias.name}", whole_module or allowed_name))
        return out

    def visit_annotated(self, node: ast.AnnAssign, parent: ast.AST, where: _Where) -> None:
        if _is_type_expression(node.annotation):
            self.annotation_names.update(id(part) for part in ast.walk(node.annotation))

    visitors = {
        ast.AnnAssign: visit_annotated,
        ast.Import: visit_import,
        ast.ImportFrom: visit_import,
        ast.FunctionDef: visit_function,
        ast.AsyncFunctionDef: visit_function,
        ast.Name: visit_name,
        ast.Attribute: visit_attribute,
        ast.Call: visit_call,
    }
