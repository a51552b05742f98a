"""The toolchain map and its fingerprint, exactly as messages/PROTOCOL.md defines them."""

from __future__ import annotations

import hashlib
import platform

import pytest
import torch
import triton

from opforge_worker import toolchain

SAMPLE = {
    "python": "3.12.3",
    "torch": "2.11.0+cu130",
    "triton": "3.6.0",
    "cuda": "13.0",
    "driver": "580.159.04",
    "device": "NVIDIA H100 80GB HBM3",
}


def test_fingerprint_is_sha256_of_canonical_json():
    canonical = (
        '{"cuda":"13.0","device":"NVIDIA H100 80GB HBM3","driver":"580.159.04",'
        '"python":"3.12.3","torch":"2.11.0+cu130","triton":"3.6.0"}'
    )
    assert toolchain.fingerprint(SAMPLE) == hashlib.sha256(canonical.encode()).hexdigest()[:16]


def test_fingerprint_ignores_key_order_and_sees_every_value():
    reordered = dict(reversed(list(SAMPLE.items())))
    assert toolchain.fingerprint(reordered) == toolchain.fingerprint(SAMPLE)
    prints = {toolchain.fingerprint({**SAMPLE, key: value + "x"}) for key, value in SAMPLE.items()}
    assert len(prints) == len(SAMPLE)
    assert toolchain.fingerprint(SAMPLE) not in prints


def test_fingerprint_hashes_utf8_unescaped():
    named = {**SAMPLE, "device": "Gerät"}
    canonical = (
        '{"cuda":"13.0","device":"Gerät","driver":"580.159.04",'
        '"python":"3.12.3","torch":"2.11.0+cu130","triton":"3.6.0"}'
    )
    assert toolchain.fingerprint(named) == hashlib.sha256(canonical.encode()).hexdigest()[:16]


def test_interpreter_toolchain_reports_installed_versions():
    collected = toolchain.collect("interpreter")
    assert collected == {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": "",
        "driver": "",
        "device": "cpu (triton interpreter)",
    }
    assert toolchain.fingerprint(collected) == toolchain.fingerprint(
        toolchain.collect("interpreter")
    )
    assert toolchain.collect("none")["device"] == ""


def test_unknown_device_kind_is_refused():
    with pytest.raises(ValueError, match="device kind 'tpu'"):
        toolchain.collect("tpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_toolchain_names_the_device_and_driver():
    collected = toolchain.collect("cuda")
    assert collected["device"] == torch.cuda.get_device_name(0)
    assert collected["cuda"] == torch.version.cuda
    assert collected["driver"]
