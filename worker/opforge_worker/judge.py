"""The judge's side of one sample: reference, request, verdict.

The reference runs here, on CPU ATen, on a private copy of the sample; the candidate process only
ever receives the inputs. The verdict puts the candidate process's report (findings, errors) first,
then checks the inputs' state after the call here (so the input-mutation check does not rely on
the candidate's process), then compares the outputs. A reply equal to the byte to the one the
reference implies passes those checks without being decoded (``Judge._reproduces_exactly``).

For float16, bfloat16 and float32, the reference has a precise twin (``Reference.precise``): the
operator run again with the floating inputs of the tested dtype upcast (``PRECISE_DTYPES``), its
results rounded back. ATen's low-precision CPU paths round between operations; a correctly
rounded kernel may miss their result by more than the tolerance. An output that does not match
ATen's result is compared again, each element passing when it matches either (compare.py), so
the twin costs nothing to a matching output and is computed once per prepared sample.

The comparison is strict first: IEEE 754 zero signs, the reference as the CPU computes it. Where
that fails, the judge compares again under what the settings and the device kind's numeric
contract (device_kinds.NumericContract) allow: with zeros of either sign equal where the setting
``signed_zeros`` is ``pytorch``, and against the reference of the sample with its subnormals
flushed to zero where the kind flushes the tested dtype's (``Reference.flushed``). A verdict that
either decides says so: a pass counts under ``Judge.contract_notes`` (the result's ``contract``),
a failure names the rules it was judged under in its message.

The second call of a sample, on fresh values, is judged against the first call's reference too:
a result that misses its own reference but matches the earlier one is stale, reused across
calls (``cheat_detected``, check ``fresh_inputs``); any other miss is an ``accuracy_error``.
"""

from __future__ import annotations

import marshal
from dataclasses import dataclass, field, replace

import torch

from opforge_worker.checks import tensor_leaves
from opforge_worker.compare import bitwise_equal, compare_structure, dtype_name, tensor_diff
from opforge_worker.contract import FailureCheck, Outcome
from opforge_worker.device_kinds import IEEE_754, DeviceKind
from opforge_worker.layout_contract import contract as layout_contract
from opforge_worker.layout_contract import layout_difference
from opforge_worker.results import Failure
from opforge_worker.settings import Settings, SignedZeros, Tolerance
from opforge_worker.transport import (
    TransportError,
    decode_inputs,
    decode_strides,
    decode_tensors,
    encode_tensors,
)


class ReferenceError(Exception):
    """The CPU reference could not be computed: a harness error, never the candidate's."""


class ReplyError(Exception):
    """The candidate process's reply does not decode: the pipe protocol broke."""


@dataclass(frozen=True)
class ExactReply:
    """What the candidate process replies to a call whose outputs and inputs after it are the
    reference's to the byte: the parts of the header the verdict reads, and the blob."""

    #: (structure, tensor descriptions, outputs count) as the reply's header holds them.
    header: tuple
    #: ``header`` in a form where 1, 1.0 and True differ (``_typed``): == takes them for equal.
    typed_header: bytes
    blob: bytes
    #: Dtypes of the compared tensors (outputs, inputs the operator writes) that hold a NaN: equal
    #: bytes match there only under a tolerance (compare.tensor_diff), which the judge knows.
    nan_dtypes: frozenset[torch.dtype]


#: Reference.exact_reply before its first use.
_NOT_COMPUTED = object()


@dataclass
class Precise:
    """The reference computed in a wider dtype and rounded back to the tested one, for a
    low-precision dtype whose CPU path in ATen may be less exact than a correctly rounded
    kernel: ``expected`` and ``inputs_after`` as ``Reference`` holds them, the same structure,
    shapes and dtypes."""

    expected: object
    inputs_after: list[torch.Tensor]


@dataclass
class Reference:
    expected: object
    inputs_before: list[torch.Tensor]
    inputs_after: list[torch.Tensor]
    #: Per input, whether the reference changed it (not bitwise equal after the call): known
    #: once per sample, not worked out again for each call judged against it.
    inputs_written: tuple[bool, ...]
    aliases_input: bool
    #: The precise twin an output may match instead (compare.py), where it was computed and
    #: differs from ATen's own result; compared with only when ATen's result does not match.
    precise: Precise | None = None
    #: The factor on the tolerance's atol: a numerics sample's values are scaled, and an honest
    #: kernel's rounding error with them (sample_sets.numerics_of).
    atol_scale: float = 1.0
    #: Whether a zero must have the reference's sign (compare.py). Not in a numerics sample:
    #: its zeros are results that underflowed, whose sign is the path's (ATen's logsigmoid of
    #: x + 100 in float16 is +0.0 for -3.7e-44); the extremal set tests signed zeros.
    zero_signs: bool = True
    _exact_reply: object = field(default=_NOT_COMPUTED, init=False, repr=False, compare=False)
    _flushed: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def flushed(self, opinfo, inputs: bytes, dtype: torch.dtype, flushes: frozenset[torch.dtype]):
        """The reference of this sample (``inputs``, as samples.prepare encoded them) on a device
        that flushes the subnormals of ``flushes`` to zero: those of its inputs read as zeros of
        their sign, those of its results written so; None where no input or result holds one,
        or the operator fails on the flushed inputs. Computed once per set of dtypes."""
        if flushes not in self._flushed:
            self._flushed[flushes] = _flushed_reference(self, opinfo, inputs, dtype, flushes)
        return self._flushed[flushes]

    def exact_reply(self) -> ExactReply | None:
        """The reply to a call that reproduces the reference exactly; None where ``expected``
        holds a Python value, which the comparison takes with rules of its own (types, a float's
        tolerance) that equal header values do not decide (1 == 1.0 == True). Computed on first use:
        most samples of a failing candidate are never called. Slots sharing the reference may
        both compute it: they compute the same."""
        if self._exact_reply is _NOT_COMPUTED:
            self._exact_reply = _exact_reply_of(self)
        return self._exact_reply

    @property
    def exact_reply_nbytes(self) -> int:
        """The bytes ``exact_reply`` holds, known before it is computed: a cache of references
        accounts for them from the start."""
        if _exact_structure(self.expected, []) is None:
            return 0
        return sum(t.nbytes for t in (*tensor_leaves(self.expected), *self.inputs_after))


def _exact_structure(value, leaves: list[torch.Tensor]):
    """``value`` described as checks.output_structure describes a result, its tensors appended
    to ``leaves``; None when it holds anything but tensors, tuples and lists."""
    if isinstance(value, torch.Tensor):
        leaves.append(value)
        return {"type": "tensor", "index": len(leaves) - 1}
    if isinstance(value, tuple | list):
        items = [_exact_structure(item, leaves) for item in value]
        if any(item is None for item in items):
            return None
        return {"type": "tuple" if isinstance(value, tuple) else "list", "items": items}
    return None


def _typed(header: tuple) -> bytes:
    """``header`` (msgpack's values) as bytes that tell 1, 1.0 and True apart: marshal writes each
    value with its type, and its format 0 neither shares nor interns objects, so equal values of
    equal types give equal bytes (two dicts in different orders differ: a miss, never a false
    match, since marshal's bytes decode back to the value)."""
    return marshal.dumps(header, 0)


def _exact_reply_of(reference: Reference) -> ExactReply | None:
    leaves: list[torch.Tensor] = []
    structure = _exact_structure(reference.expected, leaves)
    if structure is None:
        return None
    # transport.encode_tensors is what the candidate process encodes its reply with.
    descriptions, blob = encode_tensors([*leaves, *reference.inputs_after])
    header = (structure, descriptions, len(leaves))
    written = (
        after
        for after, writes in zip(reference.inputs_after, reference.inputs_written, strict=True)
        if writes
    )
    return ExactReply(
        header=header,
        typed_header=_typed(header),
        blob=blob,
        nan_dtypes=frozenset(
            tensor.dtype
            for tensor in (*leaves, *written)
            if (tensor.dtype.is_floating_point or tensor.dtype.is_complex)
            and bool(tensor.isnan().any())
        ),
    )


def _copy(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` over a copy of its storage, with its shape, strides and offset: ATen's output
    layout follows its inputs' strides (layout_contract.py), and ``clone`` would make a strided
    or expanded input contiguous."""
    tensor = tensor.detach().resolve_conj().resolve_neg()
    copy = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
    return copy.set_(
        tensor.untyped_storage().clone(), tensor.storage_offset(), tensor.shape, tensor.stride()
    )


def _clone(value):
    if isinstance(value, torch.Tensor):
        return _copy(value)
    if isinstance(value, tuple | list):
        return type(value)(_clone(item) for item in value)
    if isinstance(value, dict):
        return {key: _clone(item) for key, item in value.items()}
    return value


def _describe_value(value) -> str:
    if isinstance(value, torch.Tensor):
        layout = "" if value.is_contiguous() else f" strides={tuple(value.stride())}"
        text = f"Tensor[{dtype_name(value.dtype)}]{tuple(value.shape)}{layout}"
        if value.numel() <= 8:
            text += f" = {value.tolist()}"
        return text
    if isinstance(value, tuple | list):
        inner = ", ".join(_describe_value(item) for item in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={_describe_value(v)}" for k, v in value.items()) + "}"
    return repr(value)


def describe_sample(sample) -> str:
    """The sample as a person (or a model) would want it in feedback."""
    args = ", ".join(_describe_value(arg) for arg in (sample.input, *sample.args))
    kwargs = ", ".join(f"{key}={_describe_value(value)}" for key, value in sample.kwargs.items())
    return f"({args}{', ' if args and kwargs else ''}{kwargs})"


def _storages(value) -> set[int]:
    return {
        t.untyped_storage().data_ptr() for t in tensor_leaves(value) if t.untyped_storage().nbytes()
    }


#: Failing statuses of a candidate call, with the check name and the detail each carries.
_DETAIL_OF_STATUS = {
    Outcome.COMPILE_ERROR: (FailureCheck.COMPILE, "compile_log"),
    Outcome.RUNTIME_ERROR: (FailureCheck.RUNTIME, "backtrace"),
}


def report_verdict(reply: dict) -> Failure | None:
    """The verdict the candidate process's own report implies (load or call), or None for ok.

    A crash comes first (the process must be replaced), then any dynamic-check finding (even when
    the candidate's code raised afterwards, for instance on a refused action it then caught).
    """
    findings = [f"{check}: {message}" for check, message in reply.get("findings", ())]
    status = reply.get("status")
    if status == Outcome.CRASH:
        return Failure(
            Outcome.CRASH,
            FailureCheck.CRASH,
            reply.get("message", ""),
            findings=findings,
            backtrace=reply.get("backtrace", ""),
            cuda_error=reply.get("cuda_error", ""),
        )
    if findings:
        return Failure(
            Outcome.CHEAT_DETECTED, reply["findings"][0][0], findings[0], findings=findings
        )
    if status == Outcome.HARNESS_ERROR:
        return Failure(
            Outcome.HARNESS_ERROR,
            FailureCheck.HARNESS,
            reply.get("message", ""),
            backtrace=reply.get("backtrace", ""),
        )
    if status in _DETAIL_OF_STATUS:
        check, detail = _DETAIL_OF_STATUS[status]
        return Failure(status, check, reply.get("message", ""), **{detail: reply.get(detail, "")})
    if status != "ok":
        raise ReplyError(f"unknown reply status {status!r}")
    return None


#: The dtype a precise reference of each tested dtype is computed in.
PRECISE_DTYPES = {
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.float32: torch.float64,
}


def compute_reference(
    opinfo,
    sample,
    dtype: torch.dtype | None = None,
    atol_scale: float = 1.0,
    zero_signs: bool = True,
) -> Reference:
    """The CPU ATen reference of ``sample``, computed on copies of its inputs; for a tested
    ``dtype`` of ``PRECISE_DTYPES``, with its precise twin where it can have one; compared
    with the tolerance's atol times ``atol_scale``, zero signs checked where ``zero_signs``."""
    args = _clone([sample.input, *sample.args])
    kwargs = _clone(dict(sample.kwargs))
    try:
        expected = opinfo.op(*args, **kwargs)
    except Exception as error:
        raise ReferenceError(
            f"the CPU reference failed on this sample: {type(error).__name__}: {error}"
        ) from None
    aliases = bool(_storages(expected) & _storages((args, kwargs)))
    expected = _clone(expected)  # detach from the reference's inputs before comparing
    inputs_before = tensor_leaves(([sample.input, *sample.args], dict(sample.kwargs)))
    inputs_after = tensor_leaves((args, kwargs))
    return Reference(
        expected=expected,
        inputs_before=inputs_before,
        inputs_after=inputs_after,
        inputs_written=tuple(
            not bitwise_equal(after, before)
            for before, after in zip(inputs_before, inputs_after, strict=True)
        ),
        aliases_input=aliases,
        precise=_precise(opinfo, sample, dtype, expected, inputs_after),
        atol_scale=atol_scale,
        zero_signs=zero_signs,
    )


def _precise(opinfo, sample, dtype, expected, inputs_after) -> Precise | None:
    """The precise twin of a reference: the floating inputs of the tested ``dtype`` upcast to
    its ``PRECISE_DTYPES`` dtype, the results rounded back. None where there is none to use:
    no wider dtype, the operator fails there, or rounded back its results differ in structure,
    shape or dtype from ATen's (or hold the same values: then it adds nothing)."""
    wide = PRECISE_DTYPES.get(dtype)
    if wide is None:
        return None
    args = upcast([sample.input, *sample.args], dtype, wide)
    kwargs = upcast(dict(sample.kwargs), dtype, wide)
    try:
        result = opinfo.op(*args, **kwargs)
        precise = _rounded_like(result, expected, dtype, wide)
        precise_after = [
            _rounded_like(after, aten_after, dtype, wide)
            for after, aten_after in zip(tensor_leaves((args, kwargs)), inputs_after, strict=True)
        ]
    except Exception:  # noqa: BLE001 (the operator may fail in the wider dtype: ATen's stands)
        return None
    if all(
        _same_values(ours, aten)
        for ours, aten in zip(
            tensor_leaves((precise, precise_after)),
            tensor_leaves((expected, inputs_after)),
            strict=True,
        )
    ):
        return None
    return Precise(expected=precise, inputs_after=precise_after)


def upcast(value, dtype: torch.dtype, wide: torch.dtype):
    """``value`` (arguments, nested) with its tensors of ``dtype`` converted to ``wide``, every
    other tensor copied: the operator may write its inputs."""
    if isinstance(value, torch.Tensor):
        return value.to(wide) if value.dtype == dtype else value.clone()
    if isinstance(value, tuple | list):
        return type(value)(upcast(item, dtype, wide) for item in value)
    if isinstance(value, dict):
        return {key: upcast(item, dtype, wide) for key, item in value.items()}
    return value


def holds_subnormals(tensor: torch.Tensor) -> bool:
    if not tensor.dtype.is_floating_point or not tensor.numel():
        return False
    return bool(((tensor != 0) & (tensor.abs() < torch.finfo(tensor.dtype).tiny)).any())


def flush_subnormals(value, flushes: frozenset[torch.dtype]):
    """``value`` with the subnormals of its tensors of a dtype in ``flushes`` replaced by zeros
    of their sign, in new tensors (Python values kept)."""
    if isinstance(value, torch.Tensor):
        if value.dtype not in flushes:
            return value
        tiny = torch.finfo(value.dtype).tiny
        return value.where(~(value.abs() < tiny), torch.copysign(torch.zeros_like(value), value))
    if isinstance(value, tuple | list):
        return type(value)(flush_subnormals(item, flushes) for item in value)
    if isinstance(value, dict):
        return {key: flush_subnormals(item, flushes) for key, item in value.items()}
    return value


@dataclass(frozen=True)
class _Arguments:
    """A sample's arguments as compute_reference reads them (a SampleInput's attributes)."""

    input: object
    args: tuple
    kwargs: dict


def _flushed_reference(reference, opinfo, inputs, dtype, flushes) -> Reference | None:
    held = (*tensor_leaves(reference.expected), *reference.inputs_before)
    if not any(t.dtype in flushes and holds_subnormals(t) for t in held):
        return None
    arguments = flush_subnormals(decode_inputs(inputs), flushes)
    first, *rest = arguments["args"]
    try:
        flushed = compute_reference(
            opinfo, _Arguments(first, tuple(rest), arguments["kwargs"]), dtype
        )
    except ReferenceError:
        return None
    flushed.expected = flush_subnormals(flushed.expected, flushes)
    if flushed.precise is not None:
        flushed.precise.expected = flush_subnormals(flushed.precise.expected, flushes)
    return flushed


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values, NaN equal to NaN whatever its payload, zeros of the same sign."""
    if not a.dtype.is_floating_point:
        return torch.equal(a, b)
    same = ((a == b) & (a.signbit() == b.signbit())) | (a.isnan() & b.isnan())
    return bool(same.all())


class _Unlike(Exception):
    """A precise result is not shaped like ATen's."""


def _rounded_like(value, aten, dtype: torch.dtype, wide: torch.dtype):
    """``value``, computed in ``wide``, with its tensors rounded back to ``dtype`` where ATen's
    result ``aten`` has ``dtype``; _Unlike when it differs from ``aten`` in structure, shape or
    dtype. Python values are ATen's: only tensors are compared with a twin."""
    if isinstance(aten, torch.Tensor):
        if not isinstance(value, torch.Tensor):
            raise _Unlike
        if value.dtype == wide and aten.dtype == dtype:
            value = value.to(dtype)
        if value.shape != aten.shape or value.dtype != aten.dtype:
            raise _Unlike
        return value.detach().clone()
    if isinstance(aten, tuple | list):
        if type(value) is not type(aten) or len(value) != len(aten):
            raise _Unlike
        return type(aten)(
            _rounded_like(item, twin, dtype, wide) for item, twin in zip(value, aten, strict=True)
        )
    return aten


def _tensor_outputs(structure: dict, expected, where: str = "output"):
    """(where, leaf index, ATen's tensor) for every tensor of a result that compare_structure
    found to match ``expected``."""
    if isinstance(expected, torch.Tensor):
        yield where, structure["index"], expected
    elif isinstance(expected, tuple | list):
        for position, (item, reference) in enumerate(
            zip(structure["items"], expected, strict=True)
        ):
            yield from _tensor_outputs(item, reference, f"{where}[{position}]")


class Judge:
    """Everything the judge knows about one operator."""

    def __init__(self, opinfo, settings: Settings, kind: DeviceKind | None = None):
        """``kind``: the device the candidate runs on, whose numeric contract the comparison
        honours; None judges by IEEE 754 alone, nothing flushed."""
        self.opinfo = opinfo
        self.settings = settings
        numerics = kind.numerics if kind is not None else IEEE_754
        self.device_kind = kind.name if kind is not None else "none"
        #: Whether a zero must have the reference's sign: the setting, on a device that keeps them.
        self.zero_signs_asked = (
            settings.signed_zeros is SignedZeros.IEEE and numerics.keeps_zero_signs
        )
        self.zero_sign_rule = (
            settings.signed_zeros.rule()
            if numerics.keeps_zero_signs
            else f"device kind {self.device_kind} does not keep the sign of zero"
        )
        self.flushes = frozenset(getattr(torch, name) for name in numerics.flushes_subnormals)
        #: The rules of the settings and the device's contract that passed a sample the strict
        #: comparison failed, with how many samples each passed.
        self.contract_notes: dict[str, int] = {}
        aten_name = opinfo.aten_name or opinfo.name
        self.op_names = frozenset({aten_name, opinfo.name.rsplit(".", 1)[-1]})
        names = {opinfo.name, aten_name}
        self.launch_exempt = bool(names & settings.launch_exempt_ops)
        self.host_read_allowed = bool(names & settings.host_read_ops)
        # A view's schema returns Tensor(a); out= and in-place overloads return Tensor(a!), which
        # says nothing about the functional form tested here.
        self.schema_aliases = any(
            any(
                ret.alias_info is not None and not ret.alias_info.is_write for ret in schema.returns
            )
            for schema in torch._C._jit_get_schemas_for_operator(f"aten::{aten_name}")
        )
        self._tolerances: dict[tuple[torch.dtype, bool], Tolerance | None] = {}
        #: Whether ATen's output layout is part of the operator's contract (layout_contract.py).
        self.layout_preserved = layout_contract().preserves(opinfo)

    def batch_request(
        self, references: list[Reference], sizes: list[int], wrapper: str, timeout_s: float
    ) -> dict:
        """The header of a batch of calls; its blob is the samples' encoded inputs one after
        another, ``sizes`` their lengths; ``timeout_s`` is each call's."""
        return {
            "cmd": "call_batch",
            "wrapper": wrapper,
            "timeout_s": timeout_s,
            "op_names": sorted(self.op_names),
            "launch_exempt": self.launch_exempt,
            "host_read_allowed": self.host_read_allowed,
            "sizes": sizes,
            "alias_allowed": [self.schema_aliases or ref.aliases_input for ref in references],
        }

    def tolerance_for(self, dtype: torch.dtype, zero_signs: bool = True) -> Tolerance | None:
        key = (dtype, zero_signs)
        if key not in self._tolerances:  # looked up for every tensor of every call
            found = self.settings.tolerance(self.opinfo.name, dtype_name(dtype))
            if found is not None and not zero_signs:
                found = replace(found, zero_signs=False)
            self._tolerances[key] = found
        return self._tolerances[key]

    def _tolerances_of(self, reference: Reference, zero_signs: bool = True):
        """``tolerance_for`` as it applies to ``reference``: its atol scaled, zero signs
        checked only where the operator, the reference and the caller (``zero_signs``) all ask
        for them."""
        if reference.atol_scale == 1.0 and reference.zero_signs:
            return lambda dtype: self.tolerance_for(dtype, zero_signs)

        def scaled(dtype: torch.dtype) -> Tolerance | None:
            found = self.tolerance_for(dtype, zero_signs)
            return found and replace(
                found,
                atol=found.atol * reference.atol_scale,
                zero_signs=found.zero_signs and reference.zero_signs,
            )

        return scaled

    def verdict(
        self,
        reply: dict,
        blob: bytes,
        reference: Reference,
        earlier: Reference | None = None,
        sample: tuple[bytes, torch.dtype] | None = None,
    ) -> Failure | None:
        """None for a pass, else the failure (without its dtype/sample fields). ``earlier`` is
        the reference of the call before this one on other values of the same shapes: outputs
        that miss ``reference`` but match it are stale, results reused across calls. ``sample``
        (the sample's encoded inputs and the tested dtype) lets the judge compute the sample's
        reference under the device's flush-to-zero contract; without it there is none."""
        failure = report_verdict(reply)
        if failure:
            return failure
        if self._reproduces_exactly(reply, blob, reference):
            return None
        outputs, inputs_after = self._decode(reply, blob, reference)
        failure = self._input_state(inputs_after, reference)
        if failure:
            return failure
        found = self._compare(reply, outputs, reference)
        if found:
            found = self._under_contract(reply, outputs, reference, sample, found)
        if not found:
            return self._layout(reply, reference) if self.layout_preserved else None
        message, diff = found
        if earlier is not None and not self._compare(reply, outputs, earlier):
            return Failure(
                Outcome.CHEAT_DETECTED,
                FailureCheck.FRESH_INPUTS,
                "fresh_inputs: the result for fresh values of a sample that passed is the "
                "earlier call's result: results were reused across calls; " + message,
                diff=diff,
            )
        return Failure(Outcome.ACCURACY_ERROR, FailureCheck.ACCURACY, message, diff=diff)

    def _compare(
        self,
        reply: dict,
        outputs: list[torch.Tensor],
        reference: Reference,
        zero_signs: bool = True,
    ):
        """compare_structure of the outputs with ``reference``'s, and where that fails and
        there is one, with its precise twin elementwise; None when they match."""
        structure = reply.get("structure", {})
        tolerance_for = self._tolerances_of(reference, zero_signs)
        found = compare_structure(structure, outputs, reference.expected, tolerance_for)
        if found and reference.precise is not None:
            found = compare_structure(
                structure,
                outputs,
                reference.expected,
                tolerance_for,
                precise=reference.precise.expected,
            )
        return found

    def _under_contract(self, reply, outputs, reference: Reference, sample, found):
        """The strict comparison's failure ``found`` judged again under the settings and the
        device's contract (module docstring): None, and the rule counted in
        ``contract_notes``, where one passes the outputs; else the failure, its message naming
        the rules it was judged under."""
        message, diff = found
        rules = []
        zero_signs = self.zero_signs_asked
        if diff is not None and diff.signed_zero_mismatches:
            if not zero_signs:
                relaxed = self._compare(reply, outputs, reference, zero_signs=False)
                if relaxed is None:
                    return self._noted(self.zero_sign_rule)
                message, diff = relaxed
            rules.append(self.zero_sign_rule)
        flushed = None
        if sample is not None and self.flushes:
            inputs, dtype = sample
            flushed = reference.flushed(self.opinfo, inputs, dtype, self.flushes)
        if flushed is not None:
            rule = self.flush_rule(reference)
            if self._compare(reply, outputs, flushed, zero_signs) is None:
                return self._noted(rule)
            rules.append(f"{rule}, and the output does not match the flushed reference either")
        if rules:
            message = f"{message} (judged under {'; '.join(rules)})"
        return message, diff

    def flush_rule(self, reference: Reference) -> str:
        """The flush-to-zero rule as a verdict names it: which values were subnormal."""
        held = (
            "input"
            if any(t.dtype in self.flushes and holds_subnormals(t) for t in reference.inputs_before)
            else "result"
        )
        names = ", ".join(sorted(dtype_name(dtype) for dtype in self.flushes))
        return (
            f"subnormal {held}: this device ({self.device_kind}) flushes {names} subnormals to zero"
        )

    def _noted(self, rule: str) -> None:
        self.contract_notes[rule] = self.contract_notes.get(rule, 0) + 1
        return None

    def _reproduces_exactly(self, reply: dict, blob: bytes, reference: Reference) -> bool:
        """Whether the reply is the reference's exact reply, which the checks below pass: most
        replies of a passing candidate are, and comparing bytes costs far less than decoding.

        Why they pass: the descriptions decode, account for the blob and give each tensor the
        shape and dtype of the reference's tensor it stands for (the same encoder made them), with
        the bytes of its contiguous copy. An input the reference does not write is bitwise equal
        to itself before the call (``inputs_written``), so its bytes pass the mutation check; one
        it writes, and each output (the same structure, the same indices), are bitwise equal to
        the reference's tensor, which tensor_diff passes at once, or, without a tolerance, by
        equal values: equal bytes are equal values except NaN, hence ``nan_dtypes``.
        """
        exact = reference.exact_reply()
        if exact is None or blob != exact.blob:
            return False
        header = (reply.get("structure"), reply.get("tensors"), reply.get("outputs"))
        # == first: it rejects most other headers at once and bounds what marshal is given.
        if header != exact.header or _typed(header) != exact.typed_header:
            return False
        return all(
            dtype.is_floating_point and self.tolerance_for(dtype) is not None
            for dtype in exact.nan_dtypes
        )

    def _decode(self, reply: dict, blob: bytes, reference: Reference):
        try:
            tensors = decode_tensors(reply.get("tensors"), blob)
        except TransportError as error:
            raise ReplyError(f"cannot decode the candidate process's reply: {error}") from None
        outputs = reply.get("outputs")
        if type(outputs) is not int or len(tensors) - outputs != len(reference.inputs_before):
            raise ReplyError("the candidate process's reply has the wrong layout")
        return tensors[:outputs], tensors[outputs:]

    def _layout(self, reply: dict, reference: Reference) -> Failure | None:
        """The layout failure of outputs whose values match (their shapes are ATen's): the first
        tensor output whose significant strides are not ATen's
        (layout_contract.layout_difference), or None."""
        try:
            strides = decode_strides(reply["tensors"][: reply["outputs"]])
        except TransportError as error:
            raise ReplyError(f"cannot decode the candidate process's reply: {error}") from None
        for where, index, expected in _tensor_outputs(
            reply.get("structure", {}), reference.expected
        ):
            difference = layout_difference(strides[index], expected)
            if difference:
                return Failure(
                    Outcome.ACCURACY_ERROR,
                    FailureCheck.LAYOUT,
                    f"{where}: {difference}: ATen keeps its inputs' layout for "
                    f"{self.opinfo.name}, and so must the kernel",
                )
        return None

    def _input_state(self, inputs_after, reference: Reference) -> Failure | None:
        precise = reference.precise
        precise_after = precise.inputs_after if precise else [None] * len(inputs_after)
        for index, (before, expected_after, written, actual_after, twin) in enumerate(
            zip(
                reference.inputs_before,
                reference.inputs_after,
                reference.inputs_written,
                inputs_after,
                precise_after,
                strict=True,
            )
        ):
            if not written:
                if not bitwise_equal(actual_after, before):
                    return Failure(
                        Outcome.CHEAT_DETECTED,
                        FailureCheck.MUTATION,
                        f"mutation: wrapper modified input {index} "
                        f"({_describe_value(before)}); {self.opinfo.name} does not "
                        "write its inputs",
                    )
                continue
            tolerance = self._tolerances_of(reference)(before.dtype)
            diff = tensor_diff(actual_after, expected_after, tolerance)
            if diff and twin is not None:
                diff = tensor_diff(actual_after, expected_after, tolerance, twin)
            if diff:
                return Failure(
                    Outcome.ACCURACY_ERROR,
                    FailureCheck.ACCURACY,
                    f"input {index} after the call (the operator writes it): {diff.reason}",
                    diff=diff,
                )
        return None
