"""A test job that carries a model set (``model_samples``, the daemon's copy) runs that set on a
worker that never captured it, in place of any set of that name the worker holds itself."""

import pytest
import torch
from harness_helpers import DEVICE, FLAT_NEG, request, source

from opforge_worker import model_sets
from opforge_worker.harness import Harness
from opforge_worker.sample_sets import SAMPLE_INPUTS
from opforge_worker.samples import SampleCache

HONEST = source("honest/neg")
CATALOG = [{"name": "neg", "variant": "", "aten_overloads": ["aten.neg.default"]}]


@pytest.fixture(scope="module")
def daemon_copy(tmp_path_factory):
    """The set model:toy as a report carries it: one strided neg call, captured elsewhere."""
    elsewhere = tmp_path_factory.mktemp("capturing-host")
    capture = model_sets.Capture()
    with capture:
        torch.neg(torch.randn(6, 8)[:, ::2])
    model_sets.save("toy", capture, CATALOG, elsewhere)
    return model_sets.encoded("toy", elsewhere)


@pytest.fixture
def harness(tmp_path, monkeypatch):
    monkeypatch.setenv("OPFORGE_MODEL_SETS_DIR", str(tmp_path / "worker-sets"))
    with Harness(DEVICE, sample_cache=SampleCache()) as harness:
        yield harness


def _test(harness, source, model_samples):
    return harness.run_test(
        request(
            "honest/neg",
            "neg",
            source=source,
            sample_sets=[SAMPLE_INPUTS, "model:toy"],
            model_samples=model_samples,
        )
    )


def test_the_carried_set_fails_a_kernel_that_passes_opinfo(harness, daemon_copy, tmp_path):
    assert list(daemon_copy) == ["neg"]

    flat = _test(harness, FLAT_NEG, {"model:toy": daemon_copy["neg"]})
    honest = _test(harness, HONEST, {"model:toy": daemon_copy["neg"]})

    assert flat["outcome"] == "accuracy_error", flat["failure"]
    assert flat["failure"]["sample_set"] == "model:toy"
    assert "aten.neg.default call #0" in flat["failure"]["sample"]
    sets = flat["per_dtype"]["float32"]["sets"]
    assert sets[SAMPLE_INPUTS]["passed"] == sets[SAMPLE_INPUTS]["run"] > 0
    assert honest["outcome"] == "pass", honest["failure"]
    assert honest["per_dtype"]["float32"]["sets"]["model:toy"] == {"run": 1, "passed": 1}
    # The worker keeps the daemon's copy where its own captures go, byte for byte.
    stored = tmp_path / "worker-sets" / "toy" / "neg.pt"
    assert model_sets.encoded("toy", tmp_path / "worker-sets") == daemon_copy
    assert stored.is_file()


def test_an_empty_file_means_the_model_never_called_the_operator(harness, daemon_copy, tmp_path):
    _test(harness, HONEST, {"model:toy": daemon_copy["neg"]})

    result = _test(harness, FLAT_NEG, {"model:toy": ""})

    assert result["outcome"] == "pass", result["failure"]
    assert result["per_dtype"]["float32"]["sets"]["model:toy"] == {"run": 0, "passed": 0}
    assert not (tmp_path / "worker-sets" / "toy" / "neg.pt").exists()


def test_a_file_that_is_not_base64_is_the_requests_fault(harness):
    result = _test(harness, HONEST, {"model:toy": "not base64!"})

    assert result["outcome"] == "harness_error"
    assert result["failure"]["message"].startswith(
        "bad test request: key 'model_samples': model:toy for neg: not base64"
    )
