"""Harness settings: tolerances, check exemptions and sandbox limits from data/tolerances.yaml."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

import yaml

from opforge_worker.package_data import data_path

#: The shipped settings file, used when the caller names none.
DEFAULT_SETTINGS_PATH = data_path("tolerances.yaml")


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    #: Whether a zero must have the reference's sign: not where the operator picks one of two
    #: tied zeros (``zero_sign_free_ops``).
    zero_signs: bool = True


class SignedZeros(Enum):
    """How strictly a zero's sign is compared (the ``signed_zeros`` setting)."""

    #: A zero must have the sign of the reference's exact zero, as IEEE 754 computes it.
    IEEE = "ieee"
    #: -0.0 equals +0.0, as torch.testing.assert_close compares.
    PYTORCH = "pytorch"

    def rule(self) -> str:
        """The setting as a verdict names it."""
        if self is SignedZeros.IEEE:
            return "signed_zeros: ieee (a zero must have the reference's sign)"
        return "signed_zeros: pytorch (-0.0 equals +0.0, as torch.testing compares)"


@dataclass(frozen=True)
class Settings:
    tolerances: dict[str, Tolerance]
    op_tolerances: dict[str, dict[str, Tolerance]]
    launch_exempt_ops: frozenset[str]
    host_read_ops: frozenset[str]
    zero_sign_free_ops: frozenset[str]
    compile_grace_s: float
    startup_timeout_s: float
    #: Per device kind, overriding the kind's own limit (device_kinds.DeviceKind.memory_limit_mb).
    memory_limit_mb: dict[str, int]
    max_processes: int
    max_file_mb: int
    output_cap_bytes: int
    extra_read_paths: tuple[str, ...] = field(default=())
    signed_zeros: SignedZeros = SignedZeros.IEEE

    def tolerance(self, op: str, dtype: str) -> Tolerance | None:
        """atol/rtol for ``op``'s outputs of ``dtype``; None means exact comparison."""
        found = self.op_tolerances.get(op, {}).get(dtype) or self.tolerances.get(dtype)
        if found is not None and op in self.zero_sign_free_ops:
            return replace(found, zero_signs=False)
        return found


def _tolerance_table(raw: dict, where: str) -> dict[str, Tolerance]:
    table = {}
    for dtype, entry in (raw or {}).items():
        try:
            tolerance = Tolerance(atol=float(entry["atol"]), rtol=float(entry["rtol"]))
        except (TypeError, KeyError, ValueError) as error:
            raise ValueError(f"{where}.{dtype}: needs numeric atol and rtol ({error})") from None
        # A negative bound would fail even equal values, which compare.tensor_diff passes early.
        if not (tolerance.atol >= 0 and tolerance.rtol >= 0):
            raise ValueError(f"{where}.{dtype}: atol and rtol must not be negative ({entry})")
        table[dtype] = tolerance
    return table


def _signed_zeros(value, path: Path) -> SignedZeros:
    try:
        return SignedZeros(value)
    except ValueError:
        known = ", ".join(mode.value for mode in SignedZeros)
        raise ValueError(f"{path}: signed_zeros is {value!r}, expected one of {known}") from None


def load_settings(path: str | Path | None = None) -> Settings:
    """Parse the settings file; ValueError naming the file and key when something is wrong."""
    path = Path(path) if path else DEFAULT_SETTINGS_PATH
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"cannot read harness settings {path}: {error}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    try:
        return Settings(
            tolerances=_tolerance_table(raw["tolerances"], "tolerances"),
            op_tolerances={
                op: _tolerance_table(table, f"op_tolerances.{op}")
                for op, table in (raw.get("op_tolerances") or {}).items()
            },
            launch_exempt_ops=frozenset(raw.get("launch_exempt_ops") or ()),
            host_read_ops=frozenset(raw.get("host_read_ops") or ()),
            zero_sign_free_ops=frozenset(raw.get("zero_sign_free_ops") or ()),
            compile_grace_s=float(raw["compile_grace_s"]),
            startup_timeout_s=float(raw["startup_timeout_s"]),
            memory_limit_mb={k: int(v) for k, v in (raw.get("memory_limit_mb") or {}).items()},
            max_processes=int(raw["max_processes"]),
            max_file_mb=int(raw["max_file_mb"]),
            output_cap_bytes=int(raw["output_cap_bytes"]),
            extra_read_paths=tuple(raw.get("extra_read_paths") or ()),
            signed_zeros=_signed_zeros(raw.get("signed_zeros", SignedZeros.IEEE.value), path),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise ValueError(f"{path}: missing or malformed setting: {error}") from None
