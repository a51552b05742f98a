"""The harness's candidate corpus through the linter: honest kernels pass, harmful ones and every
cheat a static rule can see are refused (the two layers of ANTI-CHEAT.md overlap on purpose).

The corpus (tests/corpus/, owned by the harness) names each wrapper after its operator.
"""

import ast
from pathlib import Path

import pytest

from opforge_worker.linter import lint_source, load_profile

CORPUS = Path(__file__).parent / "corpus"


def corpus(kind):
    return sorted((CORPUS / kind).glob("*.py"))


def wrapper_of(source):
    """The candidate's wrapper: by the corpus's convention its last top-level non-kernel function
    (helpers, where a candidate has any, come first)."""
    tree = ast.parse(source)
    plain = [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and not node.decorator_list
    ]
    return plain[-1]


def lint_candidate(path, profile):
    source = path.read_text()
    wrapper = wrapper_of(source)
    return lint_source(source, op=wrapper, wrapper=wrapper, profile=profile)


@pytest.mark.parametrize("profile", ["cuda", "interpreter"])
@pytest.mark.parametrize("path", corpus("honest"), ids=lambda path: path.stem)
def test_honest_candidate_passes_lint(path, profile):
    report = lint_candidate(path, profile)
    assert report["ok"], report["violations"]


@pytest.mark.parametrize("path", corpus("harmful"), ids=lambda path: path.stem)
def test_harmful_candidate_is_refused(path):
    for profile in ("cuda", "interpreter"):
        assert not lint_candidate(path, profile)["ok"]


@pytest.mark.parametrize("profile", ["cuda", "interpreter"])
@pytest.mark.parametrize("path", corpus("tamper"), ids=lambda path: path.stem)
def test_tampering_candidate_breaks_a_rule_refused_as_a_cheat(path, profile):
    # The harness refuses these before they run (test_harness_gate.py): they reach the checks,
    # which is an attempt to get around them, not a mistake of form.
    refused = load_profile(profile).refused_as["cheat"]
    assert {v["rule"] for v in lint_candidate(path, profile)["violations"]} & refused


# Cheats that only show at run time: the values are right, the memory behaviour is not.
DYNAMIC_ONLY_CHEATS = {"alias", "in_place", "mutate_input"}


@pytest.mark.parametrize(
    "path",
    [path for path in corpus("cheats") if path.stem not in DYNAMIC_ONLY_CHEATS],
    ids=lambda path: path.stem,
)
def test_statically_visible_cheat_is_refused(path):
    for profile in ("cuda", "interpreter"):
        assert not lint_candidate(path, profile)["ok"]


@pytest.mark.parametrize("name", sorted(DYNAMIC_ONLY_CHEATS))
def test_dynamic_only_cheats_are_still_in_the_corpus(name):
    """A renamed or removed corpus file must not silently shrink the list above."""
    assert (CORPUS / "cheats" / f"{name}.py").is_file()
