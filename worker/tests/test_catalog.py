"""The catalog on a handful of operators, built for real from the installed torch's OpInfos."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml

from opforge_worker import catalog, sample_sets
from opforge_worker.opinfo import find_opinfo

OPS = [
    "exp",
    "add",
    "sum",
    "nn.functional.relu",
    "cat",
    "linalg.svd",
    "gather",
    "bernoulli",
    "fft.fft",
    "view_as_real",
    "isnan",
]
ALL_DTYPES = ["bfloat16", "float16", "float32", "int32", "int64"]
# ops/gpu-check.sh sets cuda: the catalog is then built for the GPU (dtypesIfCUDA).
DEVICE = os.environ.get("OPFORGE_TEST_DEVICE", "interpreter")


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("catalog-cache")


@pytest.fixture(scope="module")
def built(cache):
    return catalog.build(DEVICE, ops=OPS, cache_directory=cache)


def by_name(result, name, variant=""):
    return next(op for op in result["operators"] if (op["name"], op["variant"]) == (name, variant))


def test_categories(built):
    categories = {op["name"]: op["category"] for op in built["operators"] if not op["variant"]}
    assert categories == {
        "exp": "elementwise",
        "add": "elementwise",
        "isnan": "elementwise",
        "sum": "reduction",
        "nn.functional.relu": "deep learning",
        "cat": "shape manipulation",
        "linalg.svd": "linear algebra",
        "gather": "indexing & selection",
    }
    order = [catalog.CATEGORIES.index(op["category"]) for op in built["operators"]]
    assert order == sorted(order)


def test_dtypes_and_seeded_sample_counts(built):
    exp = by_name(built, "exp")
    assert exp["dtypes"] == ALL_DTYPES
    assert set(exp["sample_counts"]) == set(ALL_DTYPES)
    assert all(count > 0 for count in exp["sample_counts"].values())
    # svd supports float32 and float64 (and complex) only, on the CPU and on CUDA.
    assert by_name(built, "linalg.svd")["dtypes"] == ["float32"]


def test_sample_counts_are_per_set_and_over_every_set(monkeypatch):
    """The hand-made sets stand for the generated ones: exp gains two extremal samples in every
    dtype, and the layouts set fails for int32, which the harness then cannot test."""
    original = sample_sets.generate

    def hand_made(opinfo, name, dtype, seed):
        if name == sample_sets.EXTREMAL:
            return original(opinfo, sample_sets.SAMPLE_INPUTS, dtype, seed)[:2]
        if name == sample_sets.LAYOUTS and dtype == torch.int32:
            raise ValueError("no strided int32 here")
        return original(opinfo, name, dtype, seed) if name == sample_sets.SAMPLE_INPUTS else []

    monkeypatch.setattr(sample_sets, "generate", hand_made)

    config = catalog.CatalogConfig.load()
    surveyed = catalog.survey(find_opinfo("exp"), config)
    exp = catalog.describe(surveyed, DEVICE, config)

    assert exp["dtypes"] == ["bfloat16", "float16", "float32", "int64"]
    for dtype in exp["dtypes"]:
        by_set = exp["sample_counts_by_set"][dtype]
        assert list(by_set) == list(sample_sets.SETS)
        assert by_set[sample_sets.EXTREMAL] == 2 and by_set[sample_sets.SAMPLE_INPUTS] > 2
        assert exp["sample_counts"][dtype] == sum(by_set.values())
    assert surveyed["sample_errors"] == {"int32": "layouts: ValueError: no strided int32 here"}


def test_aten_overloads_come_from_dispatch(built):
    assert by_name(built, "exp")["aten_overloads"] == ["aten.exp.default"]
    assert "aten.add.Tensor" in by_name(built, "add")["aten_overloads"]
    assert "aten.cat.default" in by_name(built, "cat")["aten_overloads"]


def test_docstring_dag_is_attached(built):
    doc = by_name(built, "nn.functional.relu")["docstring"]
    assert doc["root"] == "torch.nn.functional.relu"
    assert [node["name"] for node in doc["nodes"]][:2] == [
        "torch.nn.functional.relu",
        "torch.nn.ReLU",
    ]


def test_every_exclusion_has_its_reason(built):
    reasons = {op["name"]: op["reason"] for op in built["excluded"]}
    assert reasons["bernoulli"].startswith("random: dispatches to aten.bernoulli")
    assert reasons["fft.fft"] == "FFT operator"
    assert reasons["view_as_real"].startswith("complex-only: supports only complex")
    assert reasons["view_as_real"].endswith(f"on {DEVICE}")
    listed = {op["name"] for op in built["operators"]}
    assert listed.isdisjoint(reasons)
    assert listed | set(reasons) == set(OPS)


def test_cuda_dtypes_come_from_dtypes_if_cuda(built, cache):
    surveys = json.loads(next(cache.glob("catalog-*.json")).read_text())["surveys"]
    config = catalog.CatalogConfig.load()
    svd = surveys["linalg.svd"]
    assert "float32" in svd["supported_dtypes"]["cuda"]
    entry = {
        **svd,
        "supported_dtypes": {"cpu": ["float32"], "cuda": ["float16", "float32"]},
        "sample_counts": {"float16": 3, "float32": 3},
        "sample_counts_by_set": {"float16": {"sample_inputs": 3}, "float32": {"sample_inputs": 3}},
    }
    assert catalog.describe(entry, "cuda", config)["dtypes"] == ["float16", "float32"]
    assert catalog.describe(entry, "interpreter", config)["dtypes"] == ["float32"]


def test_second_build_reads_the_cache(built, cache):
    again = catalog.build(DEVICE, ops=OPS, cache_directory=cache)
    assert again["stats"] == {"computed": 0, "cached": built["stats"]["computed"]}
    assert again["operators"] == built["operators"]
    assert again["excluded"] == built["excluded"]


def test_unreadable_cache_is_rebuilt(tmp_path):
    config = catalog.CatalogConfig.load()
    path = catalog.cache_path(
        catalog.toolchain.fingerprint(catalog.toolchain.collect(DEVICE)), config, tmp_path
    )
    path.write_text("{not json")
    rebuilt = catalog.build(DEVICE, ops=["exp"], cache_directory=tmp_path)
    assert rebuilt["stats"] == {"computed": 1, "cached": 0}
    assert "exp" in json.loads(path.read_text())["surveys"]


def test_config_overrides_categories_and_exclusions(tmp_path, cache):
    raw = yaml.safe_load(catalog.DEFAULT_CONFIG.read_text())
    raw["categories"]["exp"] = "other"
    raw["exclude"]["names"] = {"add": "not wanted in this campaign"}
    raw["exclude"]["random"] = False
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(raw))
    config = catalog.CatalogConfig.load(path)
    result = catalog.build(DEVICE, ops=OPS, config=config, cache_directory=cache)
    assert by_name(result, "exp")["category"] == "other"
    assert {"name": "add", "variant": "", "reason": "not wanted in this campaign"} in result[
        "excluded"
    ]
    assert by_name(result, "bernoulli")["category"] == "other"


def test_bad_config_and_unknown_ops_are_named(tmp_path):
    raw = yaml.safe_load(catalog.DEFAULT_CONFIG.read_text())
    raw["categories"]["exp"] = "magic"
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match="exp: 'magic' is not one of"):
        catalog.CatalogConfig.load(path)
    raw["dtypes"] = ["float32", "float8"]
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match="'float8' is not a torch dtype"):
        catalog.CatalogConfig.load(path)
    # A catalog job answers for what it was asked; the command lines refuse what is unknown.
    answered = catalog.build("interpreter", ops=["exp", "not_an_op"], cache_directory=tmp_path)
    assert answered["unknown"] == ["not_an_op"]
    assert [op["name"] for op in answered["operators"]] == ["exp"]
    with pytest.raises(ValueError, match="no OpInfo named not_an_op"):
        catalog.require_known(answered)


def test_parallel_survey_matches_the_serial_one(built, tmp_path, monkeypatch):
    monkeypatch.setattr(catalog, "_OPS_PER_PROCESS_AT_LEAST", 1)
    monkeypatch.setattr(catalog, "_SURVEY_CHUNK", 4)
    monkeypatch.setenv("OPFORGE_CATALOG_PROCESSES", "2")
    parallel = catalog.build(DEVICE, ops=OPS, cache_directory=tmp_path)
    assert parallel["stats"]["computed"] == built["stats"]["computed"]
    assert parallel["operators"] == built["operators"]
    assert parallel["excluded"] == built["excluded"]


def test_a_complete_cache_answers_without_importing_op_db(built, cache, tmp_path, monkeypatch):
    (path,) = cache.glob("catalog-*.json")
    stored = json.loads(path.read_text())
    assert stored["all_keys"] is None  # only some operators were surveyed
    # As a full build leaves it (its op list is fixed for the fingerprint):
    stored["all_keys"] = list(stored["surveys"])
    copy = tmp_path / path.name
    copy.write_text(json.dumps(stored))

    def no_op_db():
        raise AssertionError("op_db imported although the cache is complete")

    monkeypatch.setattr(catalog.opinfo_db, "load_op_db", no_op_db)
    again = catalog.build(DEVICE, ops=["exp", "bernoulli"], cache_directory=tmp_path)
    assert [op["name"] for op in again["operators"]] == ["exp"]
    assert [op["name"] for op in again["excluded"]] == ["bernoulli"]
    everything = catalog.build(DEVICE, cache_directory=tmp_path)
    assert everything["operators"] == built["operators"]
    nothing = catalog.build(DEVICE, ops=["nope"], cache_directory=tmp_path)
    assert (nothing["unknown"], nothing["operators"], nothing["excluded"]) == (["nope"], [], [])
