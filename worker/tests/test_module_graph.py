"""The worker's modules import one another without cycles, and the candidate process's entry
point loads no torch before it has confined itself."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

WORKER_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = WORKER_ROOT / "opforge_worker"


def module_name(path: Path) -> str:
    parts = path.relative_to(WORKER_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """The package's modules that ``path`` imports anywhere, lazy imports in functions included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "opforge_worker":
            found |= {f"opforge_worker.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("opforge_worker."):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("opforge_worker.")}
    return found


def import_graph() -> dict[str, set[str]]:
    graph = {module_name(path): imported_modules(path) for path in PACKAGE.rglob("*.py")}
    return {module: {d for d in deps if d in graph} for module, deps in graph.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for dependency in sorted(graph[module]):
            if state.get(dependency) == "open":
                return path[path.index(dependency) :] + [dependency]
            if dependency not in state and (cycle := visit(dependency)):
                return cycle
        state[module] = "done"
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert {"opforge_worker.sandbox", "opforge_worker.candidate"} <= graph.keys()
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_a_cycle_would_be_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]


def test_the_sandbox_modules_depend_one_way():
    graph = import_graph()
    # Judge side -> candidate side's entry -> candidate -> checks -> audit; never back.
    assert "opforge_worker.candidate" not in graph["opforge_worker.sandbox"]
    assert graph["opforge_worker.ipc"] == set()
    assert graph["opforge_worker.audit"] == set()
    assert "opforge_worker.sandbox" not in graph["opforge_worker.candidate"]
    assert "opforge_worker.sandbox" not in graph["opforge_worker.checks"]


@pytest.mark.parametrize(
    "module",
    ["device_kinds", "ipc", "audit", "confinement", "sandbox", "checks", "candidate"],
)
def test_each_module_imports_alone_in_a_fresh_interpreter(module):
    probe = (
        f"import sys, opforge_worker.{module}\n"
        "print(' '.join(sorted(m for m in ('torch', 'triton') if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=WORKER_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    # The candidate process confines itself (confinement.py) before torch and triton load, and
    # the judge starts it (sandbox.py) before it imports torch itself.
    if module in ("device_kinds", "ipc", "audit", "confinement", "sandbox"):
        assert loaded == []
