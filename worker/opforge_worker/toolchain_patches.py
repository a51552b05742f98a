"""Corrections of toolchain defects that the conformance probes find (data/conformance.yaml).

A patch is applied in a process that runs kernels (the probe run, a candidate process re-running
a failed test) before any kernel runs. It exists so that a failure can be shown to be the
device's: a candidate that fails as it is and passes every sample with the defect corrected is
judged ``device_defect`` (harness.py); a patch never makes a verdict ``pass``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType


def _bfloat16_arithmetic() -> None:
    """Triton 3.6's interpreter holds bfloat16 values as their uint16 bits and applies numpy's
    float operators to those bits: ``-x`` is 0 - bits (0.5 -> -8.0), ``x + y`` adds bits, ``x < y``
    orders negative values backwards. Corrected: the bits read as float32 (exact), the operator
    applied there, the result rounded to the nearest even bfloat16."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    original = builder.binary_op
    bitwise = {np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.left_shift, np.right_shift}

    def widened(bits):
        return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)

    def rounded(values):
        bits = np.asarray(values, dtype=np.float32).view(np.uint32)
        nan = np.isnan(values)
        # Round to nearest even: add 0x7FFF plus the lowest kept bit, then drop 16 bits.
        kept = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        return np.where(nan, np.uint16(0x7FC0), kept).astype(np.uint16)

    def binary_op(self, lhs, rhs, op):
        if lhs.dtype.scalar != tl.bfloat16 or op in bitwise:
            return original(self, lhs, rhs, op)
        with np.errstate(all="ignore"):
            output = op(widened(lhs.data), widened(rhs.data))
        if output.dtype == np.bool_:  # a comparison: its bools held as the interpreter holds them
            return original(self, interpreter.TensorHandle(output, lhs.dtype), rhs, lambda a, _: a)
        return interpreter.TensorHandle(rounded(output), tl.bfloat16)

    builder.binary_op = binary_op


def _negation_sign_flip() -> None:
    """Triton builds ``-x`` as ``0 - x`` (language/semantic.py, ``minus``): +0.0 for +0.0, where
    IEEE 754 negation, and ATen's neg, flip the sign bit; on the interpreter a bfloat16's
    ``0 - x`` also subtracts its bits. Corrected: a float's ``-x`` flips its sign bit."""
    import triton.language as tl
    from triton.language.semantic import TritonSemantic

    original = TritonSemantic.minus
    bits_of_width = {16: tl.int16, 32: tl.int32, 64: tl.int64}

    def minus(self, input):
        scalar = input.type.scalar
        bits = bits_of_width.get(scalar.primitive_bitwidth) if scalar.is_floating() else None
        if bits is None:
            return original(self, input)
        width = scalar.primitive_bitwidth
        sign = self.tensor(getattr(self.builder, f"get_int{width}")(-(1 << (width - 1))), bits)
        return self.bitcast(self.xor_(self.bitcast(input, bits), sign), scalar)

    TritonSemantic.minus = minus


#: Patches by name, as data/conformance.yaml's ``patch`` keys name them.
PATCHES: Mapping[str, Callable[[], None]] = MappingProxyType(
    {"bfloat16_arithmetic": _bfloat16_arithmetic, "negation_sign_flip": _negation_sign_flip}
)


def apply(names: Iterable[str]) -> None:
    """Apply the named patches, each once; ValueError naming an unknown one."""
    for name in sorted(set(names)):
        if name not in PATCHES:
            raise ValueError(f"toolchain patch {name!r}: expected one of {', '.join(PATCHES)}")
        PATCHES[name]()
