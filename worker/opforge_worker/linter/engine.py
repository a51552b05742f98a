"""The rules engine: one pass over a candidate's AST, driven by a Profile.

The walk is iterative (a hostile candidate can nest expressions deeper than Python's recursion
limit) and carries, for every node, its parent and whether it runs in a kernel or on the host.
"""

from __future__ import annotations

import ast
import difflib
import re
import threading
from typing import NamedTuple

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
    """Lint one candidate; the report lists every violation, ordered by position then rule."""
    if isinstance(profile, str):
        profile = load_profile(profile)
    if len(source) > profile.max_source_chars:
        hint = profile.hints["source_too_large"].format(limit=profile.max_source_chars)
        violation = {"rule": "source_too_large", "line": 1, "col": 1, "text": "", "hint": hint}
        return {"ok": False, "violations": [violation], "syntax_error": None}
    try:
        tree = parse_source(source)
    except SyntaxError as error:
        return _syntax_report(error.lineno or 1, error.offset or 1, error.msg)
    except (ValueError, RecursionError, MemoryError) as error:
        # NUL bytes (ValueError before Python 3.12) or nesting the parser cannot hold.
        return _syntax_report(1, 1, str(error) or type(error).__name__)
    checker = _Checker(source, op, wrapper, profile)
    checker.run(tree)
    violations = sorted(
        checker.violations, key=lambda v: (v["line"], v["col"], v["rule"], v["text"])
    )
    return {"ok": not violations, "violations": violations, "syntax_error": None}


def _syntax_report(line: int, col: int, message: str) -> dict:
    return {
        "ok": False,
        "violations": [],
        "syntax_error": {"line": line, "col": col, "message": message},
    }


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
        self.check_contract(tree)
        constructs = self.profile.constructs
        construct_of: dict[type, list[str]] = {}
        for rule, construct in constructs.items():
            for node in construct.nodes:
                construct_of.setdefault(node, []).append(rule)
        visitors = self.visitors
        # Siblings may be visited in any order (the report is sorted); a parent always comes
        # before its children, which the module-chain bookkeeping relies on.
        stack = [(statement, tree, self.where_of_top_level(statement)) for statement in tree.body]
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
                if isinstance(value, list):
                    stack.extend((item, node, where) for item in value if isinstance(item, ast.AST))
                elif isinstance(value, ast.AST) and not isinstance(value, _LEAVES):
                    stack.append((value, node, where))

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
                    if not self.profile.kernel_name_pattern.match(statement.name):
                        pattern = self.profile.kernel_name_pattern.pattern
                        hint = self.hint("kernel_name", name=statement.name, pattern=pattern)
                        self.report("kernel_name", statement, hint)
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
            pattern = self.profile.kernel_name_pattern.pattern
            self.report("kernel_missing", tree, self.hint("kernel_missing", pattern=pattern))

    def is_allowed_module_statement(self, statement: ast.stmt) -> bool:
        constructs = self.profile.constructs.values()
        if any(isinstance(statement, c.nodes) and c.scope != "kernel" for c in constructs):
            return True  # reported by its construct rule
        if isinstance(statement, ast.Expr):
            return isinstance(statement.value, ast.Constant) and isinstance(
                statement.value.value, str
            )
        if isinstance(statement, ast.Assign):
            targets_are_names = all(isinstance(target, ast.Name) for target in statement.targets)
            constant = _is_constant(statement.value) or self.is_kernel_global(statement)
            return targets_are_names and constant
        if isinstance(statement, ast.AnnAssign):
            return isinstance(statement.target, ast.Name) and (
                statement.value is None or _is_constant(statement.value)
            )
        return False

    # --- node checks -------------------------------------------------------------------------

    def visit_function(self, node: ast.FunctionDef, parent: ast.AST, where: _Where) -> None:
        top_level = isinstance(parent, ast.Module)
        for decorator in node.decorator_list:
            if not (top_level and self.is_kernel_decorator(decorator)):
                allowed = ", ".join(f"@{name}" for name in sorted(self.profile.kernel_decorators))
                self.report("decorator", decorator, self.hint("decorator", allowed=allowed))
        for argument in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
            self.check_binding(argument.arg, argument)

    def visit_name(self, node: ast.Name, parent: ast.AST, where: _Where) -> None:
        name, profile = node.id, self.profile
        if name in profile.forbidden_builtins:
            self.report("forbidden_builtin", node, profile.forbidden_builtins[name])
        elif name in profile.forbidden_modules:
            self.report("forbidden_module", node, profile.forbidden_modules[name])
        elif _is_dunder(name):
            self.report("dunder", node, self.hint("dunder", name=name))
        elif name in profile.modules:
            if not isinstance(node.ctx, ast.Load):
                self.check_binding(name, node)
            elif id(node) not in self.chain_roots:
                self.report("module_alias", node, self.hint("module_alias", module=name))
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
        # The only host use of a kernel is `kernel[grid](...)` inside the wrapper.
        launched = isinstance(parent, ast.Subscript) and parent.value is node
        if not launched or where.function != self.wrapper:
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
            self.check_module_path(node, root.id, path)
            return
        if _is_dunder(name):
            self.report("dunder", node, self.hint("dunder", name=name), at_member=True)
        elif name.startswith("_"):
            hint = self.hint("private_attribute", name=name)
            self.report("private_attribute", node, hint, at_member=True)
        elif name in self.forbidden_attributes:
            hint = self.forbidden_attributes[name]
            self.report(FORBIDDEN_ATTRIBUTE_RULE, node, hint, at_member=True)
        elif where.scope == "host" and not (
            isinstance(owner, ast.Name) and owner.id in self.profile.forbidden_modules
        ):
            self.check_host_member(node, name, called)

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

    def check_module_path(self, node: ast.AST, module: str, path: list[str]) -> None:
        dotted = ".".join(path)
        rules = self.profile.modules[module]
        if dotted in rules.allow:
            return
        if any(_is_dunder(part) for part in path):
            self.report("dunder", node, self.hint("dunder", name=f"{module}.{dotted}"))
            return
        hint = self.hint(
            "module_attribute",
            module=module,
            name=f"{module}.{dotted}",
            profile=self.profile.name,
            suggestion=self.suggestion(dotted, rules.allow, f"{module}."),
        )
        self.report("module_attribute", node, hint)

    def check_host_member(self, node: ast.AST, name: str, called: bool) -> None:
        """Host code reads metadata and calls view/allocation methods; anything else computes.
        Reading a method without calling it is checked too, so `f = x.exp; f()` is caught."""
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

    visitors = {
        ast.FunctionDef: visit_function,
        ast.AsyncFunctionDef: visit_function,
        ast.Name: visit_name,
        ast.Attribute: visit_attribute,
        ast.Call: visit_call,
    }
