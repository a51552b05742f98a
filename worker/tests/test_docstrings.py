"""Docstring references: parsing, and a DAG that ends on cycles and at its depth limit."""

from __future__ import annotations

from opforge_worker import docstrings


def fake(docs: dict[str, str]):
    return docs.get


def test_references_parse_roles_and_backticked_names():
    text = (
        "See :func:`torch.nn.functional.softmax` and :class:`~torch.nn.ReLU`, "
        ":meth:`Tensor.mT`, :func:`the sum <torch.sum>`, `torch.special.exp2`, ``torch.abs()``, "
        ":func:`softmax`, but not :attr:`input` nor :math:`x`. Again :func:`torch.sum`."
    )
    assert docstrings.references(text) == [
        "torch.nn.functional.softmax",
        "torch.nn.ReLU",
        "torch.Tensor.mT",
        "torch.sum",
        "torch.softmax",
        "torch.special.exp2",
        "torch.abs",
    ]


def test_cycles_end_and_each_docstring_appears_once():
    docs = {
        "torch.a": "a uses :func:`torch.b`",
        "torch.b": "b uses :func:`torch.a` and :func:`torch.b` and `torch.c`",
        "torch.c": "c uses `torch.a`",
    }
    dag = docstrings.resolve("torch.a", max_depth=10, lookup=fake(docs))
    assert [(node["name"], node["depth"], node["references"]) for node in dag["nodes"]] == [
        ("torch.a", 0, ["torch.b"]),
        ("torch.b", 1, ["torch.a", "torch.c"]),
        ("torch.c", 2, ["torch.a"]),
    ]
    assert not any(node["truncated"] for node in dag["nodes"])


def test_depth_limit_marks_the_cut_and_skips_unresolvable_names():
    docs = {f"torch.n{i}": f"next :func:`torch.n{i + 1}`, arg :func:`nowhere`" for i in range(6)}
    dag = docstrings.resolve("torch.n0", max_depth=2, lookup=fake(docs))
    assert [node["name"] for node in dag["nodes"]] == ["torch.n0", "torch.n1", "torch.n2"]
    assert [node["truncated"] for node in dag["nodes"]] == [False, False, True]
    assert dag["nodes"][2]["references"] == []


def test_node_limit_bounds_a_wide_fan_out():
    docs = {"torch.root": " ".join(f"`torch.leaf{i}`" for i in range(10))}
    docs.update({f"torch.leaf{i}": f"leaf {i}" for i in range(10)})
    dag = docstrings.resolve("torch.root", max_nodes=4, lookup=fake(docs))
    assert [node["name"] for node in dag["nodes"]] == [
        "torch.root",
        "torch.leaf0",
        "torch.leaf1",
        "torch.leaf2",
    ]
    assert dag["nodes"][0]["truncated"]


def test_real_torch_docstrings_resolve_their_references():
    dag = docstrings.for_operator("softmax")
    names = [node["name"] for node in dag["nodes"]]
    assert names[0] == "torch.softmax"
    assert "torch.nn.functional.softmax" in names
    assert "Softmax" in dag["nodes"][names.index("torch.nn.functional.softmax")]["text"]
    # Method-only operators fall back to the Tensor attribute.
    assert docstrings.for_operator("mT")["root"] == "torch.Tensor.mT"
    assert docstrings.for_operator("no_such_operator_anywhere") is None
