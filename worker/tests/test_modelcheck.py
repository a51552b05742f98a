"""``python -m opforge_library modelcheck``: real architectures (tiny configs) on the interpreter
with packages the real exporter (``python -m opforge_library export``) made of a library bundle
serving add, and the model sets (``model:<name>``) it captures, judged by ``validate``."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import msgpack
import pytest
from harness_helpers import CORPUS, DEVICE, FLAT_NEG, source

from opforge_library import modelcheck
from opforge_library.__main__ import main as library_main
from opforge_worker import catalog, contract, model_sets, validate
from opforge_worker.__main__ import main as worker_main
from opforge_worker.device_kinds import lookup

for _name, _value in lookup(DEVICE).triton_environment.items():
    os.environ.setdefault(_name, _value)

#: The operators the tests map captured calls to: a catalog of these only surveys quickly.
CATALOG_OPS = ["add", "mul", "neg", "nn.functional.relu"]
HONEST_ADD = (CORPUS / "export" / "add.py").read_text()
#: add that is off by one wherever a float sum is positive: wrong on the model's activations,
#: exported all the same (the exporter checks its argument mapping, not its values).
WRONG_ADD = HONEST_ADD.replace(
    "        result = x.to(wide) + alpha * y.to(wide)\n",
    "        result = x.to(wide) + alpha * y.to(wide)\n"
    "        result = tl.where(result > 0.0, result + 1.0, result)\n",
)


def _export(root: Path, name: str, add_source: str) -> Path:
    """The package ``name`` exported from a bundle of one add kernel; returns its directory."""
    path = root / name / "add.py"  # the file's name says which OpInfo it is
    path.parent.mkdir()
    path.write_text(add_source)
    (candidate,) = validate.read_candidates(path)
    proof = contract.ToolchainProof(
        fingerprint="0123456789abcdef",
        device_kind=DEVICE,
        toolchain={},
        outcome="pass",
        tests_run=1,
        tests_passed=1,
        validated_at_ms=1,
    )
    kernel = contract.LibraryKernel(
        op=candidate.op,
        wrapper=candidate.wrapper,
        source=candidate.source,
        hash=f"{abs(hash(candidate.source)):016x}"[:16],
        dtypes=["float32"],
        aten_overloads=["aten.add.Tensor"],
        provenance={"origin": "campaign"},
        proofs=[proof],
    )
    bundle = contract.LibraryBundle(
        device_kind=DEVICE, fingerprint="", daemon_version="t", kernels=[kernel]
    )
    (root / f"{name}.msgpack").write_bytes(msgpack.packb(bundle.to_dict()))
    out = root / f"{name}-out"
    arguments = ["--bundle", str(root / f"{name}.msgpack"), "--format", "torch-library"]
    code = library_main(
        ["export", *arguments, "--out", str(out), "--name", name, "--device-kind", DEVICE]
    )
    assert code == 0
    return out / name


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The honest and the wrong package, a small catalog and a model-set directory."""
    root = tmp_path_factory.mktemp("modelcheck")
    _export(root, "honestlib", HONEST_ADD)
    _export(root, "wronglib", WRONG_ADD)
    built = catalog.build(DEVICE, ops=CATALOG_OPS)
    (root / "catalog.json").write_text(json.dumps(built))
    return root


def _package(work, name="honestlib"):
    return modelcheck.load_package(str(work / f"{name}-out" / name))


def _check(work, model, *extra, package="honestlib"):
    out = work / f"{model}-{package}.json"
    code = modelcheck.main(
        ["--model", model, "--package", str(work / f"{package}-out" / package)]
        + ["--device-kind", DEVICE, "--report", str(out), "--forwards", "2", "--timing-calls", "1"]
        + ["--catalog", str(work / "catalog.json"), *extra]
    )
    return code, out


@pytest.fixture(scope="module")
def llama(work):
    """Llama's report with the honest package, its inputs captured under ``work/sets``."""
    code, out = _check(work, "llama", "--capture", str(work / "sets"))
    assert code == 0
    return contract.ModelReport.from_dict(json.loads(out.read_text()))


def test_gpt2_report_counts_calls_served_and_missing(work):
    package = _package(work)
    code, out = _check(work, "gpt2")

    assert code == 0
    report = contract.ModelReport.from_dict(json.loads(out.read_text()))
    assert report.model == "gpt2"
    # One layer: embeddings, the block's two layer norms and the final one, the residual adds.
    assert report.aten_calls["aten.native_layer_norm.default"] == 3
    assert report.aten_calls["aten.add.Tensor"] >= 2
    # The calls served are those the package counted in the run with it enabled, of the
    # overloads it covers, and some of the model's.
    served = package.call_counts()
    assert report.served_calls == sum(served.values()) > 0
    assert 0 < served["aten.add.Tensor"] <= report.aten_calls["aten.add.Tensor"]
    assert "aten.add.Tensor" in package.covered()
    assert report.missing_overloads == sorted(set(report.aten_calls) - set(package.covered()))
    assert "aten.mul.Tensor" in report.missing_overloads
    assert contract.ModelOperator(op="mul") in report.missing_operators
    assert all(op.op in CATALOG_OPS for op in report.missing_operators)
    assert report.max_abs_deviation < 1e-5 and report.max_rel_deviation < 1e-4
    assert report.seconds_with_library > 0 and report.seconds_without_library > 0
    assert report.slowdown > 0 and report.slowdown_iqr >= 0  # pair by pair, with its noise
    assert report.failing_overloads == []
    # What each covered overload the model called costs, its captured calls replayed: add's
    # float32 tensor calls are the package's to serve.
    (cost,) = report.overload_times
    assert cost.overload == "aten.add.Tensor"
    assert cost.calls == report.aten_calls["aten.add.Tensor"]
    assert 0 < cost.served <= cost.replayed
    assert cost.library_us > 0 and cost.aten_us > 0


def test_a_wrong_kernel_shows_as_deviation_and_failing_overload(work, llama):
    code, out = _check(work, "llama", package="wronglib")

    assert code == 0
    report = contract.ModelReport.from_dict(json.loads(out.read_text()))
    assert report.served_calls == llama.served_calls > 0
    assert report.failing_overloads == ["aten.add.Tensor"]
    assert report.max_abs_deviation > 0.1
    assert llama.failing_overloads == [] and llama.max_abs_deviation < 1e-5


def test_resnet18_runs_where_torchvision_imports_else_names_it(work, capsys):
    code, out = _check(work, "resnet18")

    if importlib.util.find_spec("torchvision") is None:
        assert code == 2
        assert "needs the package torchvision" in capsys.readouterr().err
        return
    assert code == 0
    report = contract.ModelReport.from_dict(json.loads(out.read_text()))
    assert report.aten_calls["aten.convolution.default"] == 20
    assert report.max_abs_deviation < 1e-4


def test_captured_llama_set_passes_an_honest_kernel_and_fails_a_flat_one(
    work, llama, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("OPFORGE_MODEL_SETS_DIR", str(work / "sets"))
    assert sorted(path.name for path in (work / "sets" / "llama").iterdir()) == [
        "add.pt",
        "mul.pt",
        "neg.pt",
    ]
    # The report carries the set, as `opforge run --from-model` imports it into the daemon.
    assert llama.captured_inputs == model_sets.encoded("llama", work / "sets")
    assert sorted(llama.captured_inputs) == ["add", "mul", "neg"]
    (tmp_path / "honest").mkdir()
    (tmp_path / "honest" / "neg.py").write_text(source("honest/neg"))
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "neg.py").write_text(FLAT_NEG)
    sets = ["--dtypes", "float32", "--sets", "sample_inputs,model:llama", "--no-sample-store"]

    honest = worker_main(["validate", str(tmp_path / "honest"), "--device", DEVICE, *sets])
    flat_json = tmp_path / "flat.json"
    flat = worker_main(
        ["validate", str(tmp_path / "flat"), "--device", DEVICE, *sets, "--json", str(flat_json)]
    )

    assert honest == 0
    assert flat == 1
    (result,) = json.loads(flat_json.read_text())["results"]
    counts = result["per_dtype"]["float32"]["sets"]
    assert counts["sample_inputs"]["passed"] == counts["sample_inputs"]["run"] > 0
    assert counts["model:llama"]["passed"] == 0 < counts["model:llama"]["run"]
    assert result["failure"]["sample_set"] == "model:llama"
    assert "aten.neg.default" in result["failure"]["sample"]
    assert "passes OpInfo's sets but fails model:llama" in capsys.readouterr().out


def test_unknown_model_set_names_are_refused(tmp_path, capsys):
    (tmp_path / "neg.py").write_text(source("honest/neg"))

    code = worker_main(
        ["validate", str(tmp_path), "--device", DEVICE, "--sets", "model:Bad Name,model:"]
    )

    assert code == 2
    assert "unknown sample sets ['model:Bad Name', 'model:']" in capsys.readouterr().err


def test_package_may_be_the_directory_export_wrote(work, tmp_path, capsys):
    # `opforge export --out DIR` writes DIR/pyproject.toml beside DIR/<name>/manifest.json.
    out = work / "honestlib-out"
    assert (out / "pyproject.toml").is_file()
    assert modelcheck.load_package(str(out)) is _package(work)
    # A directory that holds no exported package is refused with what was expected.
    code = modelcheck.main(
        ["--model", "gpt2", "--package", str(tmp_path), "--device-kind", DEVICE]
        + ["--report", str(tmp_path / "r.json"), "--catalog", str(work / "catalog.json")]
    )
    assert code == 2
    assert capsys.readouterr().err == (
        f"opforge_library modelcheck: --package {tmp_path}: expected an exported package (a "
        "directory holding manifest.json) or the directory `opforge export --out` wrote "
        "(holding one such package); it holds 0 packages\n"
    )
