"""A source tested again in the same candidate process runs in the namespace its earlier load
made, unless that namespace holds something that could cost later candidates (a tensor first)."""

from pathlib import Path

import pytest
from harness_helpers import CORPUS, DEVICE, request, source

from opforge_worker.candidate import LoadedNamespaces, load_candidate
from opforge_worker.harness import Harness


def loaded(tmp_path: Path, text: str) -> dict:
    path = tmp_path / f"candidate-{len(list(tmp_path.iterdir()))}.py"
    path.write_text(text)
    return load_candidate(path)


def autotuned(path: Path) -> bool:
    """Whether the source's namespace holds a triton.autotune Autotuner, which keeps its configs'
    timings: never set aside, so each test of it benchmarks its configs again."""
    return "@triton.autotune" in path.read_text()


@pytest.mark.parametrize(
    "path",
    [p for p in sorted((CORPUS / "honest").glob("*.py")) if not autotuned(p)],
    ids=lambda p: p.stem,
)
def test_an_honest_candidates_namespace_is_set_aside_and_taken_back(tmp_path, path):
    namespaces = LoadedNamespaces()
    namespace = loaded(tmp_path, path.read_text())

    namespaces.set_aside("digest", namespace)

    assert namespaces.take("other digest") is None
    assert namespaces.take("digest") is namespace
    assert namespaces.take("digest") is None  # taken: it is the test's until set aside again


def test_an_autotuned_namespace_is_not_set_aside(tmp_path):
    namespaces = LoadedNamespaces()
    found = [p for p in sorted((CORPUS / "honest").glob("*.py")) if autotuned(p)]
    assert found, "the honest corpus holds no autotuned kernel"
    for path in found:
        namespaces.set_aside(path.stem, loaded(tmp_path, path.read_text()))
        assert namespaces.take(path.stem) is None


KERNEL = source("honest/exp")

#: Module-level code that makes the namespace hold something alive, each on its own.
HOLDING = {
    "a tensor": "KEEP = torch.zeros(4)",
    "a tensor in a list in a dict": "KEEP = {'rows': [1, (2, torch.zeros(4))]}",
    "a tensor as a default": "def helper(x, scale=torch.ones(1)):\n    return x",
    "a tensor in a closure": (
        "def make():\n    kept = torch.ones(1)\n    def inner():\n        return kept\n"
        "    return inner\nhelper = make()"
    ),
    "a tensor's method": "ADD = torch.zeros(2).add",
    "a constexpr over a tensor": "WEIGHTS = tl.constexpr(torch.ones(2))",
    "a class of its own": "class Table:\n    rows = []",
    "an object of unknown kind": "ROWS = iter([1, 2])",
}


@pytest.mark.parametrize("code", HOLDING.values(), ids=HOLDING.keys())
def test_a_namespace_holding_something_alive_is_not_set_aside(tmp_path, code):
    namespaces = LoadedNamespaces()

    namespaces.set_aside("digest", loaded(tmp_path, KERNEL + "\n" + code + "\n"))

    assert namespaces.take("digest") is None


def test_constants_and_code_do_not_stop_a_namespace_being_set_aside(tmp_path):
    code = (
        "BLOCK = tl.constexpr(1024)\nDTYPES = {torch.float32: tl.float32}\n"
        "SIZES = (1, 2.5, 'x', None, [True])\nEMPTY = torch.empty\nKIND = torch.Tensor\n"
    )
    namespaces = LoadedNamespaces()
    namespace = loaded(tmp_path, KERNEL + "\n" + code)

    namespaces.set_aside("digest", namespace)

    assert namespaces.take("digest") is namespace


def test_what_a_wrapper_stored_in_its_namespace_is_seen_when_its_test_ends(tmp_path):
    namespaces = LoadedNamespaces()
    namespace = loaded(tmp_path, KERNEL + "\nSEEN = []\n")
    namespace["SEEN"].append(("a call's output", namespace["torch"].zeros(2)))

    namespaces.set_aside("digest", namespace)

    assert namespaces.take("digest") is None


def test_namespaces_beyond_the_bound_are_dropped_least_recently_set_aside_first(tmp_path):
    namespaces = LoadedNamespaces(capacity=2)
    first, second, third = (loaded(tmp_path, KERNEL) for _ in range(3))

    for digest, namespace in (("first", first), ("second", second), ("third", third)):
        namespaces.set_aside(digest, namespace)

    assert namespaces.take("first") is None
    assert namespaces.take("second") is second and namespaces.take("third") is third


#: Honest exp, except that its wrapper counts its calls in a module-level list and refuses a
#: call past ``CALLS_OF_ONE_TEST``: a test that does not start afresh fails on its first call.
COUNTING = (
    KERNEL.replace("def exp(input):", "def exp_once(input):")
    + """
CALLS = []


def exp(input):
    CALLS.append(len(CALLS))
    if len(CALLS) > CALLS_OF_ONE_TEST:
        raise RuntimeError(f"call {len(CALLS)} of this namespace")
    return exp_once(input)
"""
)


def counting(calls_of_one_test: int, extra: str = "") -> dict:
    text = COUNTING.replace("CALLS_OF_ONE_TEST", str(calls_of_one_test)) + extra
    return {**request("honest/exp", "exp"), "source": text}


def test_a_source_tested_again_runs_in_its_earlier_namespace(tmp_path):
    with Harness(DEVICE, scratch_root=tmp_path) as harness:
        calls = 2 * harness.run_test(request("honest/exp", "exp"))["tests_run"]  # and fresh values
        first = harness.run_test(counting(calls))
        between = harness.run_test(request("honest/amax", "amax"))
        again = harness.run_test(counting(calls))

    assert first["outcome"] == between["outcome"] == "pass"
    assert again["outcome"] == "runtime_error"
    assert f"call {calls + 1} of this namespace" in again["failure"]["message"]


def test_a_source_whose_namespace_holds_a_tensor_is_loaded_afresh(tmp_path):
    with Harness(DEVICE, scratch_root=tmp_path) as harness:
        calls = 2 * harness.run_test(request("honest/exp", "exp"))["tests_run"]
        runs = [harness.run_test(counting(calls, "\nKEEP = torch.zeros(4)\n")) for _ in range(2)]

    assert [run["outcome"] for run in runs] == ["pass", "pass"]
