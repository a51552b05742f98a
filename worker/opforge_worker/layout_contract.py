"""Which operators' output layout is contract (data/layout_contract.yaml, whose header says why),
and the check of a candidate's output layout against ATen's.

A layout is compared by its significant strides, as torch._prims_common.check_significant_strides
compares them: the strides of the dims of size > 1, for a tensor with elements; a size-1 dim's
stride addresses nothing, and an empty tensor has no layout to keep.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from opforge_worker.opinfo import class_names
from opforge_worker.package_data import data_path

DEFAULT_CONFIG = data_path("layout_contract.yaml")
_SECTIONS = ("contract_classes", "contract_ops", "exempt", "free_classes")


def _key(opinfo) -> str:
    return f"{opinfo.name}.{opinfo.variant_test_name}" if opinfo.variant_test_name else opinfo.name


@dataclass(frozen=True)
class LayoutContract:
    """data/layout_contract.yaml: every entry a name with its reason."""

    contract_classes: dict[str, str]
    contract_ops: dict[str, str]
    exempt: dict[str, str]
    free_classes: dict[str, str]

    @classmethod
    def load(cls, path: Path | str | None = None) -> LayoutContract:
        path = Path(path or os.environ.get("OPFORGE_LAYOUT_CONTRACT") or DEFAULT_CONFIG)
        try:
            raw = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as error:
            raise ValueError(f"layout contract {path}: {error}") from None
        unknown = sorted(set(raw) - set(_SECTIONS))
        if unknown:
            raise ValueError(f"layout contract {path}: unknown sections {unknown}")
        sections = {}
        for section in _SECTIONS:
            entries = raw.get(section) or {}
            if not isinstance(entries, dict) or not all(
                isinstance(reason, str) and reason for reason in entries.values()
            ):
                raise ValueError(f"layout contract {path}: {section}: name: reason, each")
            sections[section] = dict(entries)
        both = sorted(set(sections["contract_classes"]) & set(sections["free_classes"]))
        if both:
            raise ValueError(f"layout contract {path}: classes both contract and free: {both}")
        return cls(**sections)

    def preserves(self, opinfo) -> bool:
        """Whether ATen's output layout is part of ``opinfo``'s contract."""
        key = _key(opinfo)
        if key in self.exempt or opinfo.name in self.exempt:
            return False
        if key in self.contract_ops or opinfo.name in self.contract_ops:
            return True
        return bool(class_names(opinfo) & set(self.contract_classes))


_contract: LayoutContract | None = None


def contract() -> LayoutContract:
    """The layout contract, read on first use."""
    global _contract
    if _contract is None:
        _contract = LayoutContract.load()
    return _contract


def layout_difference(strides: tuple[int, ...], expected: torch.Tensor) -> str | None:
    """None when an output of ``expected``'s shape with ``strides`` has ``expected``'s layout,
    else what differs: "layout differs: strides (64, 1), ATen (1, 33)"."""
    if expected.numel() == 0 or len(strides) != expected.dim():
        return None
    for size, actual, aten in zip(expected.shape, strides, expected.stride(), strict=True):
        if size > 1 and actual != aten:
            return f"layout differs: strides {tuple(strides)}, ATen {tuple(expected.stride())}"
    return None
