"""A real toolchain drop (issue 19): the same kernel on two worker environments that differ only
in Triton. Triton 3.6 added tl.mul and tl.sub to triton.language, so a kernel written on 3.6 that
calls tl.mul passes there and fails on 3.5.1, while its repair (`x * x`) passes on both. The 3.5.1
environment is built by ops/toolchain-venv.sh from a cached wheel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER_DIR = Path(__file__).resolve().parents[1]
REPO = WORKER_DIR.parent
OLD_TRITON = "3.5.1"

USES_TL_MUL = """
@triton.jit
def square_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.mul(x, x), mask=mask)


def square(input):
    x = input.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        square_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out.view(input.shape)
"""
REPAIRED = USES_TL_MUL.replace("tl.mul(x, x)", "x * x")


@pytest.fixture(scope="module")
def old_python() -> Path:
    venv = Path(os.environ.get("OPFORGE_OLD_TOOLCHAIN_VENV", REPO / ".venv-old"))
    subprocess.run(
        [REPO / "ops" / "toolchain-venv.sh", venv, OLD_TRITON],
        check=True,
        env={**os.environ, "OPFORGE_VENV": sys.prefix},
        timeout=900,
    )
    return venv / "bin" / "python"


def validate(python: Path, tmp_path: Path, name: str, source: str) -> dict:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "square.py").write_text(source)
    out = tmp_path / f"{name}.json"
    subprocess.run(
        [python, "-m", "opforge_worker", "validate", folder, "--device", "interpreter"]
        + ["--dtypes", "float32", "--sets", "sample_inputs", "--json", out],
        cwd=WORKER_DIR,
        env={**os.environ, "PYTHONPATH": str(WORKER_DIR)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    return json.loads(out.read_text())


def test_a_kernel_using_tl_mul_regresses_on_triton_3_5_and_its_repair_passes_on_both(
    tmp_path, old_python
):
    new = validate(Path(sys.executable), tmp_path, "new", USES_TL_MUL)
    old = validate(old_python, tmp_path, "old", USES_TL_MUL)
    assert new["toolchain"]["triton"] == "3.6.0"
    assert old["toolchain"]["triton"] == OLD_TRITON
    assert new["toolchain"]["torch"] == old["toolchain"]["torch"]
    assert new["fingerprint"] != old["fingerprint"]

    (passed,) = new["results"]
    assert passed["outcome"] == "pass" and passed["tests_passed"] == passed["tests_run"] == 3
    (failed,) = old["results"]
    assert failed["outcome"] == "runtime_error"
    assert "module 'triton.language' has no attribute 'mul'" in failed["failure"]["message"]

    for python, name in ((Path(sys.executable), "new-repaired"), (old_python, "old-repaired")):
        (repaired,) = validate(python, tmp_path, name, REPAIRED)["results"]
        assert repaired["outcome"] == "pass", (name, repaired["failure"])
        assert repaired["tests_passed"] == repaired["tests_run"] == 3
