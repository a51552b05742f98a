"""``validate --backend``: an installed package judged through the dispatcher on the interpreter,
with the real harness: a hand-written torch.library backend (a right kernel, a wrong one, one
registered where CPU tensors never reach it), the round trip of our own export (its verdicts are
validate's on the kernel files it was exported from), and FlagGems where a CUDA device is."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from test_export import KERNELS, PACKAGE, make_bundle, write_bundle

from opforge_library import export
from opforge_worker import validate

WORKER = Path(__file__).resolve().parents[1]
BACKENDS = WORKER / "tests" / "corpus" / "backend"
HANDWRITTEN = "opforge_test_backend"
#: The fields of a result that are its verdict (the rest is timing, paths and names).
VERDICT = ("op", "variant", "dtypes", "outcome", "tests_run", "tests_passed")


@pytest.fixture
def on_path(monkeypatch):
    """Put a directory on the judge's sys.path, as an installed package's would be."""

    def add(directory: Path) -> None:
        monkeypatch.syspath_prepend(str(directory))

    return add


def by_overload(validation: validate.BackendValidation) -> dict[str, dict]:
    return {verdict["overload"]: verdict for verdict in validation.overloads}


def test_a_wrong_kernel_fails_a_right_one_passes_and_an_unreached_one_says_so(on_path, tmp_path):
    on_path(BACKENDS)
    validation = validate.validate_backend(
        HANDWRITTEN,
        "interpreter",
        dtypes=["float32"],
        ops=["abs", "neg", "exp"],
        cache_dir=tmp_path,
    )
    verdicts = by_overload(validation)
    registered = {"aten.abs.default", "aten.neg.default", "aten.exp.default"}
    assert set(validation.registered) == registered
    assert validation.registered["aten.exp.default"].keys() == {"CUDA"}
    assert "opforge_test_backend/__init__.py" in validation.registered["aten.neg.default"]["CPU"]

    neg = verdicts["aten.neg.default"]
    assert (neg["outcome"], neg["opinfos"], neg["dispatch_keys"]) == ("pass", ["neg"], ["CPU"])
    assert neg["tests_run"] == neg["tests_passed"] > 0
    assert neg["reached"] >= neg["tests_run"]  # every sample, and its fresh values

    broken = verdicts["aten.abs.default"]
    assert broken["outcome"] == "accuracy_error" and broken["reached"] > 0
    assert broken["tests_passed"] < broken["tests_run"]
    assert broken["problem"].startswith("abs: ")

    unreached = verdicts["aten.exp.default"]
    assert (unreached["outcome"], unreached["reached"]) == (validate.NEVER_REACHED, 0)
    assert unreached["tests_run"] == unreached["tests_passed"] > 0  # ATen's kernel answered
    assert unreached["problem"].startswith("registered, never reached")
    assert not validate.backend_passed(validation)

    table = validate.format_backend_table(validation)
    assert "3 overloads registered, 3 judged, 1 passed" in table
    assert "aten.exp.default: registered, never reached" in table


def test_the_cli_writes_the_table_and_the_json_and_fails_the_run(tmp_path):
    out = tmp_path / "backend.json"
    environment = {
        **os.environ,
        # the dependencies may come by PYTHONPATH (the GPU check carries expecttest so)
        "PYTHONPATH": os.pathsep.join(
            [
                str(WORKER),
                str(BACKENDS),
                *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)),
            ]
        ),
        "TRITON_INTERPRET": "1",
    }
    command = [sys.executable, "-m", "opforge_worker", "validate", "--backend", HANDWRITTEN]
    command += ["--enable", f"{HANDWRITTEN}.enable", "--ops", "neg,abs", "--device", "interpreter"]
    command += ["--dtypes", "float32", "--sets", "sample_inputs", "--cache-dir", str(tmp_path)]
    # Two slots: neg and abs each in a candidate process of its own that enabled the backend.
    command += ["--jobs", "2"]
    run = subprocess.run(
        [*command, "--json", str(out)], env=environment, capture_output=True, text=True
    )
    assert run.returncode == 1, run.stderr  # abs fails; exp, not judged here, fails nothing
    assert out.exists(), run.stdout + run.stderr
    document = json.loads(out.read_text())
    verdicts = {verdict["overload"]: verdict for verdict in document["overloads"]}
    assert verdicts["aten.neg.default"]["outcome"] == "pass"
    assert verdicts["aten.abs.default"]["outcome"] == "accuracy_error"
    assert verdicts["aten.exp.default"]["outcome"] == validate.UNJUDGED
    assert document["backend"]["enable"] == f"{HANDWRITTEN}.enable"
    (neg,) = [result for result in document["results"] if result["op"] == "neg"]
    assert neg["backend_calls"] == {"aten.neg.default": neg["tests_run"] * 2}  # fresh values too
    assert "aten.neg.default  CPU   neg" in run.stdout

    missing = subprocess.run(
        [*command[:5], "no_such_backend_pkg", "--device", "interpreter"],
        env=environment,
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2
    assert "no_such_backend_pkg" in missing.stderr and "no such package" in missing.stderr


def test_a_device_worker_judges_a_backend_as_a_job_holding_every_slot(on_path, monkeypatch):
    from opforge_worker import contract, jobs
    from opforge_worker.connection import JobCancelled

    on_path(BACKENDS)
    handlers, release = jobs.handlers_for(contract.WorkerRole.DEVICE, "interpreter", 2)
    request = contract.BackendRequest(
        package=HANDWRITTEN, dtypes=["float32"], ops=["abs", "neg"], timeout_s=60.0
    )
    try:
        payload = handlers[contract.JobKind.BACKEND](request.to_dict(), threading.Event())
        result = contract.BackendResult.from_dict(payload)  # the contract's shape, checked
        verdicts = {verdict.overload: verdict for verdict in result.overloads}
        assert (result.package, result.enable) == (HANDWRITTEN, f"{HANDWRITTEN}.enable")
        assert verdicts["aten.neg.default"].outcome == "pass"
        assert verdicts["aten.neg.default"].reached >= verdicts["aten.neg.default"].tests_run > 0
        assert verdicts["aten.abs.default"].outcome == "accuracy_error"
        assert verdicts["aten.abs.default"].problem.startswith("abs: ")
        assert verdicts["aten.exp.default"].outcome == validate.UNJUDGED  # exp not asked for

        cancelled = threading.Event()
        cancelled.set()
        with pytest.raises(JobCancelled):
            handlers[contract.JobKind.BACKEND](request.to_dict(), cancelled)
    finally:
        release()


def test_our_export_judges_as_its_kernel_files_do(tmp_path, on_path):
    kernels = [kernel for kernel in KERNELS if kernel[0].stem in ("abs", "add")]
    bundle = write_bundle(tmp_path / "bundle.msgpack", make_bundle(kernels, "interpreter"))
    out = tmp_path / "out"
    arguments = ["--bundle", str(bundle), "--format", "torch-library", "--out", str(out)]
    assert export.main([*arguments, "--name", PACKAGE, "--device-kind", "interpreter"]) == 0
    on_path(out)
    dtypes = ["float32"]
    exported = validate.validate_backend(
        PACKAGE, "interpreter", dtypes=dtypes, ops=["abs", "add"], cache_dir=tmp_path
    )
    files = validate.validate_paths(
        [path for path, _, _ in kernels], "interpreter", dtypes=dtypes, cache_dir=tmp_path
    )
    assert [{key: result[key] for key in VERDICT} for result in exported.results] == [
        {key: result[key] for key in VERDICT} for result in files.results
    ]
    verdicts = by_overload(exported)
    for overload in ("aten.abs.default", "aten.add.Tensor"):
        assert verdicts[overload]["outcome"] == "pass"
        assert verdicts[overload]["reached"] > 0
    # In place and out= are registered too; no OpInfo sample calls them.
    assert verdicts["aten.abs_.default"]["outcome"] == validate.UNJUDGED
    assert validate.backend_passed(exported)


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="FlagGems needs a CUDA device, and this machine has none"
)
def test_flag_gems_is_judged_on_cuda(tmp_path):
    # on a CUDA host flag-gems is installed (ops/fetch-gpu-wheels.sh): its absence is a failure
    assert importlib.util.find_spec("flag_gems") is not None, "flag-gems is not installed"
    validation = validate.validate_backend(
        "flag_gems", "cuda", dtypes=["float32"], ops=["abs", "exp"], cache_dir=tmp_path
    )
    verdicts = by_overload(validation)
    assert len(validation.registered) > 100
    for overload in ("aten.abs.default", "aten.exp.default"):
        assert verdicts[overload]["reached"] > 0, verdicts[overload]
