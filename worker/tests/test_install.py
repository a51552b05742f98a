"""The worker as a wheel: installed away from the checkout, it finds its data through the package,
and validates and lints a candidate in a directory outside the repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

WORKER_DIR = Path(__file__).resolve().parents[1]
EXAMPLE = WORKER_DIR.parent / "config" / "examples" / "exp.py"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """The wheel built from a copy of the distribution (nothing else of the checkout beside it),
    installed into a target directory of its own."""
    root = tmp_path_factory.mktemp("install")
    source = root / "source"
    source.mkdir()
    shutil.copy(WORKER_DIR / "pyproject.toml", source)
    for package in ("opforge_worker", "opforge_replay"):
        shutil.copytree(
            WORKER_DIR / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", str(source)]
    subprocess.run([*build, "-w", str(root / "wheels")], check=True, timeout=300)
    (wheel,) = (root / "wheels").glob("opforge_worker-*.whl")
    site = root / "site"
    install = [*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)]
    subprocess.run(install, check=True, timeout=300)
    outside = root / "elsewhere"
    outside.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPFORGE_")}
    # The dependencies may come by PYTHONPATH (the GPU check's), the checkout's worker must not.
    inherited = [
        entry
        for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if entry and not (Path(entry) / "opforge_worker").exists()
    ]
    env.update(
        PYTHONPATH=os.pathsep.join([str(site), *inherited]), OPFORGE_CACHE_DIR=str(root / "cache")
    )
    return {"wheel": wheel, "site": site, "cwd": outside, "env": env}


def run_installed(installed: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=installed["cwd"],
        env=installed["env"],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_wheel_carries_the_data_and_both_packages(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for data in ("tolerances.yaml", "sample_sets.yaml", "catalog.yaml", "linter/base.yaml"):
        assert f"opforge_worker/data/{data}" in names
    assert "opforge_worker/data/linter/interpreter.yaml" in names
    assert "opforge_worker/data/linter/cuda.yaml" in names
    assert "opforge_replay/__main__.py" in names


def test_the_installed_worker_reads_its_data_from_the_installation(installed):
    probe = run_installed(
        installed,
        "-c",
        "import opforge_worker, opforge_replay\n"
        "from opforge_worker import linter, settings, sample_sets, catalog\n"
        "for p in (opforge_worker.__file__, opforge_replay.__file__, linter.profiles_dir(),\n"
        "          settings.DEFAULT_SETTINGS_PATH, sample_sets.DEFAULT_CONFIG,\n"
        "          catalog.DEFAULT_CONFIG):\n"
        "    print(p)\n",
    )
    assert probe.returncode == 0, probe.stderr
    paths = probe.stdout.split()
    assert len(paths) == 6
    site = str(installed["site"])
    assert all(path.startswith(site) for path in paths), paths


def test_the_installed_worker_validates_and_lints_outside_the_repository(installed):
    candidate = installed["cwd"] / "exp.py"
    shutil.copy(EXAMPLE, candidate)
    lint = run_installed(installed, "-m", "opforge_worker", "lint", "exp.py", "--profile", "cuda")
    assert lint.returncode == 0, lint.stderr
    assert lint.stdout.strip().endswith(": ok")

    validate = run_installed(
        installed,
        "-m",
        "opforge_worker",
        "validate",
        "exp.py",
        "--device",
        "interpreter",
        "--dtypes",
        "float32",
        "--sets",
        "sample_inputs",
        "--json",
        "results.json",
    )
    assert validate.returncode == 0, validate.stdout + validate.stderr
    (result,) = json.loads((installed["cwd"] / "results.json").read_text())["results"]
    assert (result["op"], result["outcome"]) == ("exp", "pass")
