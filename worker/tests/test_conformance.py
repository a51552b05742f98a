"""Conformance probes run on the real interpreter find the toolchain's defects, with a verified
patch where one exists, and are kept per toolchain fingerprint."""

from __future__ import annotations

import pytest

from opforge_worker import conformance
from opforge_worker.conformance import load_probes, probe_toolchain
from opforge_worker.device_kinds import lookup


@pytest.fixture(scope="module")
def interpreter_report(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPFORGE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield probe_toolchain("interpreter", "f" * 16)


def test_the_probes_cover_the_primitives_kernels_are_built_from():
    probes = load_probes()
    assert {probe.primitive for probe in probes.values()} >= {
        "negation",
        "conversion",
        "min_max",
        "division",
        "rounding",
        "integer_overflow",
        "flush_to_zero",
    }
    assert {"negate_bfloat16", "negate_float16", "negate_float32"} <= set(probes)


def test_the_interpreter_negates_bfloat16_wrongly_and_the_probe_says_how(interpreter_report):
    assert interpreter_report.error == ""
    assert interpreter_report.fingerprint == "f" * 16
    assert interpreter_report.probes_run == len(load_probes())
    defects = {defect.probe: defect for defect in interpreter_report.defects}
    negate = defects["negate_bfloat16"]
    assert negate.actual == "[-8.0, 16.0, -4.0, 1.5]"  # for 0.5, -0.25, 1.0, -3.0
    assert negate.expected == "[-0.5, 0.25, -1.0, 3.0]"
    assert negate.known and negate.patch == "negation_sign_flip"
    assert defects["add_bfloat16"].patch == "bfloat16_arithmetic"
    assert negate.workaround == "(-x.to(tl.float32)).to(tl.bfloat16)"
    assert "tl.store(out_ptr + offsets, -x, mask=mask)" in negate.reproducer
    # float16 and float32 negate right; the report lists only what is wrong.
    assert "negate_float16" not in defects and "negate_float32" not in defects
    assert "flush_to_zero_float32" not in defects  # the interpreter keeps subnormals
    # Every defect the registry lists is found; a defect found is known or new, not both.
    assert lookup("interpreter").numerics.known_defects <= set(defects)


def test_a_report_is_kept_per_fingerprint(interpreter_report, monkeypatch):
    def no_run(*args, **kwargs):
        raise AssertionError("probed again")

    monkeypatch.setattr(conformance.subprocess, "run", no_run)
    again = probe_toolchain("interpreter", "f" * 16)
    assert again == interpreter_report


def test_a_flushing_kind_expects_the_flushed_answer():
    probe = load_probes()["flush_to_zero_float32"]
    assert probe.expected_on(lookup("cuda")) == (0.0, -0.0, 0.0)
    assert probe.expected_on(lookup("interpreter")) == probe.expected


def test_a_malformed_probe_is_refused_naming_it(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text(
        "probes:\n  p: {primitive: negation, dtype: float32, expression: -x, x: [1.0]}\n"
    )
    with pytest.raises(ValueError, match=r"probe p: missing or malformed key 'expected'"):
        load_probes(bad)
    bad.write_text(
        "probes:\n  p: {primitive: negation, dtype: float32, expression: -x, x: [1.0], "
        "expected: [-1.0], patch: magic}\n"
    )
    with pytest.raises(ValueError, match=r"probe p: unknown patch 'magic'"):
        load_probes(bad)
