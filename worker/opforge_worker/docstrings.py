"""An operator's docstring with the docstrings it references, resolved (for the LLM prompt).

References are Sphinx roles (:func:`torch.nn.functional.softmax`, :class:`~torch.nn.ReLU`,
:meth:`Tensor.mT`, :func:`text <torch.foo>`) and backticked dotted names (`torch.special.exp2`).
Resolution walks the references breadth first: each docstring appears once (so cycles end), and
references are followed no deeper than `max_depth` (a deeper one is marked, not resolved).
"""

from __future__ import annotations

import inspect
import re
from collections import deque
from collections.abc import Callable

import torch

# :role:`~target`, :role:`title <target>`, `torch.name` and ``torch.name``.
_ROLE = re.compile(r":(func|meth|class|attr|obj|data):`(?:[^`<]*<)?~?\.?([\w.]+?)(?:\(\))?>?`")
_BACKTICKED = re.compile(r"``?((?:torch|Tensor)\.[\w.]+?)(?:\(\))?``?")
_ROLES_NAMING_TORCH_CALLABLES = {"func", "meth"}

# Returns the docstring for a dotted name, or None when the name is not a documented callable.
Lookup = Callable[[str], "str | None"]


def references(text: str) -> list[str]:
    """Canonical dotted names `text` refers to, in order of first mention."""
    found: list[str] = []
    for match in _ROLE.finditer(text):
        role, name = match.groups()
        # `:attr:`input`` names an argument; only dotted or function-role names are references.
        if "." in name or role in _ROLES_NAMING_TORCH_CALLABLES:
            found.append(_canonical(name))
    found.extend(_canonical(name) for name in _BACKTICKED.findall(text))
    return list(dict.fromkeys(found))


def _canonical(name: str) -> str:
    if name.startswith("torch."):
        return name
    return f"torch.{name}"  # `Tensor.mT` -> `torch.Tensor.mT`, `softmax` -> `torch.softmax`


def torch_lookup(name: str) -> str | None:
    """The cleaned docstring of the torch callable or class `name` (e.g. `torch.special.exp2`)."""
    parts = name.split(".")
    if parts[0] != "torch":
        return None
    target: object = torch
    for part in parts[1:]:
        try:
            target = getattr(target, part)
        except Exception:  # a lazy torch submodule may raise anything while importing
            return None
    if inspect.ismodule(target) or not (callable(target) or inspect.isdatadescriptor(target)):
        return None
    doc = getattr(target, "__doc__", None)
    return inspect.cleandoc(doc) if isinstance(doc, str) and doc.strip() else None


def resolve(
    root: str, *, max_depth: int = 2, max_nodes: int = 16, lookup: Lookup = torch_lookup
) -> dict | None:
    """The docstring DAG from `root`: `{"root": name, "nodes": [...]}` in breadth-first order,
    each node `{"name", "depth", "text", "references": [names], "truncated": bool}`, where
    `references` name nodes of the DAG and `truncated` says references were left unresolved at
    the depth or node limit. None when `root` has no docstring."""
    text = lookup(root)
    if text is None:
        return None
    nodes: dict[str, dict] = {}
    pending = deque([(root, text, 0)])
    while pending:
        name, text, depth = pending.popleft()
        node = {"name": name, "depth": depth, "text": text, "references": [], "truncated": False}
        nodes[name] = node
        for referenced in references(text):
            if referenced == name:
                continue
            if referenced in nodes or any(referenced == queued[0] for queued in pending):
                node["references"].append(referenced)  # already in the DAG: an edge, no copy
                continue
            referenced_text = lookup(referenced)
            if referenced_text is None:
                continue  # an argument name or something undocumented: not a reference
            if depth + 1 > max_depth or len(nodes) + len(pending) >= max_nodes:
                node["truncated"] = True
                continue
            node["references"].append(referenced)
            pending.append((referenced, referenced_text, depth + 1))
    return {"root": root, "nodes": list(nodes.values())}


def for_operator(name: str, fallback: Callable | None = None, **limits) -> dict | None:
    """The DAG for an OpInfo operator: `torch.<name>`, else `torch.Tensor.<name>` (method-only
    operators), else the docstring of `fallback` (the OpInfo's callable) under the torch name."""
    for root in (f"torch.{name}", f"torch.Tensor.{name}"):
        dag = resolve(root, **limits)
        if dag is not None:
            return dag
    doc = getattr(fallback, "__doc__", None)
    if not isinstance(doc, str) or not doc.strip():
        return None
    fallback_name = f"torch.{name}"
    fallback_text = inspect.cleandoc(doc)

    def lookup(dotted: str) -> str | None:
        return fallback_text if dotted == fallback_name else torch_lookup(dotted)

    return resolve(fallback_name, lookup=lookup, **limits)
