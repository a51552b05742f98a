"""The harness's candidate corpus through the linter: honest kernels pass, harmful ones are refused.

The corpus (tests/corpus/, owned by the harness) names each wrapper after its operator. Cheats are
not asserted here: several (aliasing, input mutation) are only visible to the dynamic checks.
"""

import ast
from pathlib import Path

import pytest

from opforge_worker.linter import lint_source

CORPUS = Path(__file__).parent / "corpus"


def corpus(kind):
    return sorted((CORPUS / kind).glob("*.py")) if (CORPUS / kind).is_dir() else []


def wrapper_of(source):
    """The candidate's wrapper: its one top-level function that is not a kernel."""
    tree = ast.parse(source)
    (wrapper,) = [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and not node.decorator_list
    ]
    return wrapper


def lint_candidate(path, profile):
    source = path.read_text()
    wrapper = wrapper_of(source)
    return lint_source(source, op=wrapper, wrapper=wrapper, profile=profile)


@pytest.mark.skipif(not corpus("honest"), reason="the harness corpus is not in this checkout")
@pytest.mark.parametrize("profile", ["cuda", "interpreter"])
@pytest.mark.parametrize("path", corpus("honest"), ids=lambda path: path.stem)
def test_honest_candidate_passes_lint(path, profile):
    report = lint_candidate(path, profile)
    assert report["ok"], report["violations"]


@pytest.mark.skipif(not corpus("harmful"), reason="the harness corpus is not in this checkout")
@pytest.mark.parametrize("path", corpus("harmful"), ids=lambda path: path.stem)
def test_harmful_candidate_is_refused(path):
    for profile in ("cuda", "interpreter"):
        assert not lint_candidate(path, profile)["ok"]
