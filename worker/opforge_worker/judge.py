"""The judge's side of one sample: reference, request, verdict.

The reference runs here, on CPU ATen, on a private copy of the sample; the candidate process only
ever receives the inputs. The verdict puts the candidate process's report (findings, errors) first,
then checks the inputs' state after the call here (so the input-mutation check does not rely on
the candidate's process), then compares the outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from opforge_worker.checks import tensor_leaves
from opforge_worker.compare import bitwise_equal, compare_structure, dtype_name, tensor_diff
from opforge_worker.results import Failure
from opforge_worker.settings import Settings, Tolerance
from opforge_worker.transport import TransportError, decode_tensors


class ReferenceError(Exception):
    """The CPU reference could not be computed: a harness error, never the candidate's."""


class ReplyError(Exception):
    """The candidate process's reply does not decode: the pipe protocol broke."""


@dataclass
class Reference:
    expected: object
    inputs_before: list[torch.Tensor]
    inputs_after: list[torch.Tensor]
    #: Per input, whether the reference changed it (not bitwise equal after the call): known
    #: once per sample, not worked out again for each call judged against it.
    inputs_written: tuple[bool, ...]
    aliases_input: bool


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
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
    "compile_error": ("compile", "compile_log"),
    "runtime_error": ("runtime", "backtrace"),
}


def report_verdict(reply: dict) -> Failure | None:
    """The verdict the candidate process's own report implies (load or call), or None for ok.

    A crash comes first (the process must be replaced), then any dynamic-check finding (even when
    the candidate's code raised afterwards, for instance on a refused action it then caught).
    """
    findings = [f"{check}: {message}" for check, message in reply.get("findings", ())]
    status = reply.get("status")
    if status == "crash":
        return Failure(
            "crash",
            "crash",
            reply.get("message", ""),
            findings=findings,
            backtrace=reply.get("backtrace", ""),
            cuda_error=reply.get("cuda_error", ""),
        )
    if findings:
        return Failure("cheat_detected", reply["findings"][0][0], findings[0], findings=findings)
    if status == "harness_error":
        return Failure(
            "harness_error",
            "harness",
            reply.get("message", ""),
            backtrace=reply.get("backtrace", ""),
        )
    if status in _DETAIL_OF_STATUS:
        check, detail = _DETAIL_OF_STATUS[status]
        return Failure(status, check, reply.get("message", ""), **{detail: reply.get(detail, "")})
    if status != "ok":
        raise ReplyError(f"unknown reply status {status!r}")
    return None


def compute_reference(opinfo, sample) -> Reference:
    """The CPU ATen reference of ``sample``, computed on copies of its inputs."""
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
    )


class Judge:
    """Everything the judge knows about one operator."""

    def __init__(self, opinfo, settings: Settings):
        self.opinfo = opinfo
        self.settings = settings
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
        self._tolerances: dict[torch.dtype, Tolerance | None] = {}

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

    def tolerance_for(self, dtype: torch.dtype) -> Tolerance | None:
        if dtype not in self._tolerances:  # looked up for every tensor of every call
            self._tolerances[dtype] = self.settings.tolerance(self.opinfo.name, dtype_name(dtype))
        return self._tolerances[dtype]

    def verdict(self, reply: dict, blob: bytes, reference: Reference) -> Failure | None:
        """None for a pass, else the failure (without its dtype/sample fields)."""
        failure = report_verdict(reply)
        if failure:
            return failure
        outputs, inputs_after = self._decode(reply, blob, reference)
        failure = self._input_state(inputs_after, reference)
        if failure:
            return failure
        found = compare_structure(
            reply.get("structure", {}), outputs, reference.expected, self.tolerance_for
        )
        if found:
            message, diff = found
            return Failure("accuracy_error", "accuracy", message, diff=diff)
        return None

    def _decode(self, reply: dict, blob: bytes, reference: Reference):
        try:
            tensors = decode_tensors(reply.get("tensors"), blob)
        except TransportError as error:
            raise ReplyError(f"cannot decode the candidate process's reply: {error}") from None
        outputs = reply.get("outputs")
        if type(outputs) is not int or len(tensors) - outputs != len(reference.inputs_before):
            raise ReplyError("the candidate process's reply has the wrong layout")
        return tensors[:outputs], tensors[outputs:]

    def _input_state(self, inputs_after, reference: Reference) -> Failure | None:
        for index, (before, expected_after, written, actual_after) in enumerate(
            zip(
                reference.inputs_before,
                reference.inputs_after,
                reference.inputs_written,
                inputs_after,
                strict=True,
            )
        ):
            if not written:
                if not bitwise_equal(actual_after, before):
                    return Failure(
                        "cheat_detected",
                        "mutation",
                        f"mutation: wrapper modified input {index} "
                        f"({_describe_value(before)}); {self.opinfo.name} does not "
                        "write its inputs",
                    )
                continue
            diff = tensor_diff(actual_after, expected_after, self.tolerance_for(before.dtype))
            if diff:
                return Failure(
                    "accuracy_error",
                    "accuracy",
                    f"input {index} after the call (the operator writes it): {diff['reason']}",
                    diff=diff,
                )
        return None
