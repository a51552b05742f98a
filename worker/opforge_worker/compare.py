"""Comparing a candidate's outputs with the CPU ATen reference, in the judge process.

Floating outputs match elementwise when ``|actual - expected| <= atol + rtol * |expected|`` with
the tolerance of the output's dtype; NaN, +inf and -inf must sit at exactly the same positions,
and where the reference is an exact zero, a zero must have its sign (``0 - x`` is not ``-x``).
Integer and bool outputs, and Python scalars other than floats, must match exactly. A mismatch
comes with a tensor-diff summary that a person or a model can act on: the contract's
``tensor_diff``, its element values written as Python's repr of them (compare ``_scalar``).

A reference may come with a ``precise`` twin (judge.py, ``Reference.precise``): the operator
computed in a wider dtype and rounded to the output's. An element then matches when it matches
either, so that a correctly rounded output is never rejected because ATen's low-precision CPU
path is less exact; a zero's sign is required where both references agree on it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from opforge_worker.contract import ElementMismatch, TensorDiff
from opforge_worker.settings import Tolerance

_SHOWN_MISMATCHES = 5


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


#: The integer dtype of each item size: a float tensor viewed as it compares bit for bit.
_BITS_OF_ITEM_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and bytes (NaN payloads included): the test for "left untouched"."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        return torch.equal(a, b)  # integers: equal values are equal bytes (bools by value)
    bits = _BITS_OF_ITEM_SIZE.get(a.dtype.itemsize)
    if bits is not None:  # a view of the same item size: no copy, whatever the strides
        return torch.equal(a.view(bits), b.view(bits))
    return torch.equal(
        a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)
    )


def _scalar(value: torch.Tensor) -> str:
    """An element as the model reads it in Python: repr keeps every digit of a float (the
    shortest text that reads back the same), the sign of a zero, nan and inf, and writes bools,
    ints and complex values (which msgpack has no type for) as their literals."""
    return repr(value.item())


def _wrong_zero_signs(actual: torch.Tensor, expected: torch.Tensor, precise) -> torch.Tensor:
    """Where ``actual`` is a zero of the other sign than the exact zero the reference holds
    (and ``precise``, when given, holds the same zero)."""
    zeros = expected == 0
    if not bool(zeros.any()):  # the common case, in two ops on a passing output
        return zeros
    wrong = zeros & (actual == 0) & (actual.signbit() != expected.signbit())
    if precise is not None:
        wrong &= (precise == 0) & (precise.signbit() == expected.signbit())
    return wrong


def _special_mismatches(a: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """Where one of the two is NaN, +inf or -inf and the other is not the same."""
    nan = a.isnan() != e.isnan()
    return nan | (a.isposinf() != e.isposinf()) | (a.isneginf() != e.isneginf())


def _finite_errors(a: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """|a - e| where both are finite, NaN (no error measured) elsewhere."""
    return (a - e).abs().where(a.isfinite() & e.isfinite(), torch.full_like(a, torch.nan))


def tensor_diff(
    actual: torch.Tensor,
    expected: torch.Tensor,
    tolerance: Tolerance | None,
    precise: torch.Tensor | None = None,
) -> TensorDiff | None:
    """None when ``actual`` matches ``expected``, or where a ``precise`` twin of it (same shape
    and dtype) is given, when each element matches one of them; otherwise a summary of how it
    differs."""
    tolerant = expected.dtype.is_floating_point and tolerance is not None
    holds_nan = expected.dtype.is_floating_point or expected.dtype.is_complex
    # Equal bytes match by either rule, except NaN by the exact one (there NaN != NaN): most
    # outputs of a passing candidate are equal to the byte, and checking that costs one pass.
    if (tolerant or not holds_nan) and bitwise_equal(actual, expected):
        return None
    summary = TensorDiff(
        reason="values differ",
        actual_shape=list(actual.shape),
        expected_shape=list(expected.shape),
        actual_dtype=dtype_name(actual.dtype),
        expected_dtype=dtype_name(expected.dtype),
    )
    if actual.shape != expected.shape:
        summary.reason = "shape differs"
        return summary
    if actual.dtype != expected.dtype:
        summary.reason = "dtype differs"
        return summary
    if precise is not None and not tolerant:
        precise = None  # exact rules take ATen's result alone
    if tolerant:
        a, e = actual.double(), expected.double()
        p = precise.double() if precise is not None else None
        # ATen's isclose passes an element when |a - e| <= atol + |rtol * e| with that error
        # finite (the float64 operations below), or when the two are equal, NaN equal to NaN,
        # inf to inf of the same sign. A passing output, the common case, costs a few ops
        # instead of the dozen that describe a mismatch (about 150 us even for a few elements).
        close = torch.isclose(a, e, rtol=tolerance.rtol, atol=tolerance.atol, equal_nan=True)
        if p is not None and not bool(close.all()):
            close |= torch.isclose(a, p, rtol=tolerance.rtol, atol=tolerance.atol, equal_nan=True)
        wrong_zeros = (
            _wrong_zero_signs(actual, expected, precise)
            if tolerance.zero_signs
            else torch.zeros_like(close)
        )
        if bool(close.all()) and not bool(wrong_zeros.any()):
            return None
        mismatch = ~close | wrong_zeros
        special = _special_mismatches(a, e)
        finite = a.isfinite() & e.isfinite()
        error = _finite_errors(a, e)
        if p is not None:  # measured from the nearer reference, as each element is judged
            special &= _special_mismatches(a, p)
            error = torch.fmin(error, _finite_errors(a, p))
        error = error.where(~error.isnan(), torch.zeros_like(a))
        relative = error / e.abs().clamp_min(torch.finfo(torch.float64).tiny)
        summary.atol = float(tolerance.atol)
        summary.rtol = float(tolerance.rtol)
        summary.max_abs_error = float(error.max()) if error.numel() else 0.0
        summary.max_rel_error = (
            float(relative.where(finite, torch.zeros_like(a)).max()) if error.numel() else 0.0
        )
        summary.nan_inf_mismatches = int(special.sum())
        if bool(wrong_zeros.any()):
            summary.signed_zero_mismatches = int(wrong_zeros.sum())
        if precise is not None:
            summary.accepted = (
                f"within tolerance of expected (ATen's {dtype_name(expected.dtype)} CPU result) "
                f"or of precise (the operator in a wider dtype, rounded to "
                f"{dtype_name(expected.dtype)})"
            )
    else:
        mismatch = actual != expected
        if expected.dtype.is_floating_point:
            mismatch |= _wrong_zero_signs(actual, expected, None)
    count = int(mismatch.sum())
    if count == 0:
        return None
    positions = mismatch.nonzero()[:_SHOWN_MISMATCHES]
    summary.mismatched = count
    summary.total = expected.numel()
    summary.first_mismatches = [
        _mismatch_at(position.tolist(), actual, expected, precise) for position in positions
    ]
    return summary


def _mismatch_at(index: list[int], actual, expected, precise) -> ElementMismatch:
    """One mismatching element, its values side by side."""
    at = tuple(index)
    return ElementMismatch(
        index=index,
        actual=_scalar(actual[at]),
        expected=_scalar(expected[at]),
        precise=_scalar(precise[at]) if precise is not None else None,
    )


def compare_structure(
    structure: dict,
    leaves: list[torch.Tensor],
    expected,
    tolerance_for: Callable[[torch.dtype], Tolerance | None],
    where: str = "output",
    precise=None,
):
    """The first difference between the candidate's result and the reference, or None;
    ``precise``, when given, is the reference's precise twin, of the same structure.

    Returns ``(message, diff)``: ``diff`` is a tensor-diff summary or None for a structural
    difference (wrong kind of value, wrong length).
    """
    kind = structure.get("type")
    if isinstance(expected, torch.Tensor):
        if kind != "tensor":
            return f"{where} should be a tensor, got {kind}", None
        actual = leaves[structure["index"]]
        diff = tensor_diff(actual, expected, tolerance_for(expected.dtype), precise)
        return (f"{where}: {diff.reason}", diff) if diff else None
    if isinstance(expected, tuple | list):
        if kind not in ("tuple", "list") or len(structure["items"]) != len(expected):
            count = len(structure.get("items", ()))
            return f"{where} should be a sequence of {len(expected)}, got {kind} of {count}", None
        twins = precise if precise is not None else [None] * len(expected)
        for index, (item, reference, twin) in enumerate(
            zip(structure["items"], expected, twins, strict=True)
        ):
            found = compare_structure(
                item, leaves, reference, tolerance_for, f"{where}[{index}]", twin
            )
            if found:
                return found
        return None
    if kind != "scalar":
        return f"{where} should be the Python value {expected!r}, got {kind}", None
    actual = structure["value"]
    if isinstance(expected, float) and isinstance(actual, int | float):
        tolerance = tolerance_for(torch.float64)
        close = actual == expected or (
            tolerance is not None
            and abs(actual - expected) <= tolerance.atol + tolerance.rtol * abs(expected)
        )
        if close or (actual != actual and expected != expected):
            return None
    elif type(actual) is type(expected) and actual == expected:
        return None
    return f"{where} is {actual!r}, expected {expected!r}", None
