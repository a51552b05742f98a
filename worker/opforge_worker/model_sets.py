"""Sample sets of a model's real inputs (``model:<name>``, TritorX's MIS).

OpInfo's samples are what torch's authors thought of; a model calls the same operator on its own
shapes, strides and values (a slice of the last dim for rotary embeddings, 4-D attention scores,
activations far from [-9, 9]). ``Capture`` is a ``__torch_dispatch__`` mode that records the
inputs of every ATen call during a model run; ``save`` writes them per catalog operator under
``directory() / <model>``, where ``generate`` finds them when a test asks for ``model:<model>``.

A captured tensor keeps its dtype, shape, strides and (capped) storage offset. Its values are kept
exactly when the storage it spans holds at most ``VALUE_CAP`` elements; a bigger one keeps a
recipe instead: a seeded uniform fill between the values' minimum and maximum, so that the sample
still has the model's layout and range. Calls without a tensor (factories) and calls with
arguments a sample cannot carry (devices, layouts) are not captured: they are no operator's
sample. At most ``CALLS_PER_OVERLOAD`` calls of distinct layouts are kept per overload.

A captured call becomes a sample of the catalog operators whose ATen overloads include it and
whose name (last dotted part) is the overload's: those take the overload's arguments in its
schema's order (``torch.add`` for ``aten.add.Tensor``), where ``softmax`` does not take
``aten._softmax``'s.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tempfile
from pathlib import Path

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from opforge_worker.cache_root import cache_dir

PREFIX = "model:"
NAME = re.compile(r"[a-z0-9_.-]{1,58}")
#: Elements of storage a captured tensor keeps exactly; beyond, a seeded fill in its range.
VALUE_CAP = 1 << 16
CALLS_PER_OVERLOAD = 8
#: A captured view's storage offset, at most: enough to misalign, no copy of a whole weight.
OFFSET_CAP = 64
FORMAT = 1
#: The key of a captured tensor's record, which no keyword argument is named.
TENSOR = "__tensor__"


def directory() -> Path:
    """Where model sets live: ``$OPFORGE_MODEL_SETS_DIR``, else the worker's cache."""
    named = os.environ.get("OPFORGE_MODEL_SETS_DIR")
    return Path(named) if named else cache_dir() / "model_sets"


def is_model_set(name: str) -> bool:
    return name.startswith(PREFIX) and NAME.fullmatch(name[len(PREFIX) :]) is not None


def _file(model: str, op: str, variant: str, root: Path | None = None) -> Path:
    return (root or directory()) / model / (f"{op}@{variant}.pt" if variant else f"{op}.pt")


# -- capture ----------------------------------------------------------------------------------


class _Unsupported(Exception):
    pass


def _extent(tensor: torch.Tensor) -> int:
    """Elements of storage from the tensor's first element to its last."""
    if tensor.numel() == 0:
        return 0
    spans = zip(tensor.shape, tensor.stride(), strict=True)
    return 1 + sum((size - 1) * stride for size, stride in spans)


def _encode_tensor(tensor: torch.Tensor) -> dict:
    if tensor.layout != torch.strided or tensor.is_quantized or tensor.dtype.is_complex:
        raise _Unsupported
    extent = _extent(tensor)
    record = {
        "dtype": tensor.dtype,
        "shape": list(tensor.shape),
        "stride": list(tensor.stride()),
        "offset": min(tensor.storage_offset(), OFFSET_CAP),
        "extent": extent,
        "values": None,
        "low": 0.0,
        "high": 0.0,
    }
    span = tensor.detach().as_strided((extent,), (1,)).to("cpu")
    if extent <= VALUE_CAP:
        record["values"] = span.clone()
    elif extent:
        numbers = tensor.detach().float()
        finite = numbers[torch.isfinite(numbers)]
        if finite.numel():
            record["low"], record["high"] = float(finite.min()), float(finite.max())
    return record


def _encode(value):
    if isinstance(value, torch.Tensor):
        return {TENSOR: _encode_tensor(value)}
    if isinstance(value, bool | int | float | str | torch.dtype) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_encode(item) for item in value]
    raise _Unsupported  # a device, layout, memory format, generator: no operator's sample


def _is_tensor(node) -> bool:
    return isinstance(node, dict) and TENSOR in node


def _tensor_records(value) -> list[dict]:
    return [
        leaf[TENSOR] for leaf in pytree.tree_leaves(value, is_leaf=_is_tensor) if _is_tensor(leaf)
    ]


def _layout(value) -> tuple:
    return tuple(
        (leaf[TENSOR]["dtype"], tuple(leaf[TENSOR]["shape"]), tuple(leaf[TENSOR]["stride"]))
        if _is_tensor(leaf)
        else type(leaf).__name__
        for leaf in pytree.tree_leaves(value, is_leaf=_is_tensor)
    )


class Capture(TorchDispatchMode):
    """Counts every ATen overload a run calls and keeps the inputs of up to
    ``CALLS_PER_OVERLOAD`` calls of distinct layouts each (``calls[overload]``)."""

    def __init__(self, capture: bool = True):
        super().__init__()
        self.capture = capture
        self.counts: dict[str, int] = {}
        self.calls: dict[str, list[dict]] = {}
        self._layouts: dict[str, set] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        self.counts[name] = self.counts.get(name, 0) + 1
        if self.capture:
            self._keep(name, args, kwargs)
        return func(*args, **kwargs)

    def _keep(self, name: str, args, kwargs) -> None:
        kept = self.calls.setdefault(name, [])
        if len(kept) >= CALLS_PER_OVERLOAD:
            return
        if not any(isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves((args, kwargs))):
            return
        try:
            record = {
                "args": _encode(list(args)),
                "kwargs": {k: _encode(v) for k, v in kwargs.items()},
            }
        except _Unsupported:
            return
        layout = _layout((record["args"], record["kwargs"]))
        seen = self._layouts.setdefault(name, set())
        if layout not in seen:
            seen.add(layout)
            kept.append(record)


def operators_of(overload: str, catalog_operators) -> list[tuple[str, str]]:
    """(name, variant) of the catalog operators whose samples a call of ``overload`` can be."""
    packet = overload.split(".")[1]
    return [
        (op["name"], op["variant"])
        for op in catalog_operators
        if overload in op["aten_overloads"] and op["name"].split(".")[-1] == packet
    ]


def save(model: str, capture: Capture, catalog_operators, root: Path | None = None) -> dict:
    """Write ``capture``'s calls as the set ``model:<model>`` of each operator they map to;
    returns {operator key ("name" or "name.variant"): calls}. Replaces the model's older set."""
    if NAME.fullmatch(model) is None:
        raise ValueError(f"model set name {model!r}: want {NAME.pattern}")
    by_operator: dict[tuple[str, str], list[dict]] = {}
    for overload, calls in sorted(capture.calls.items()):
        for key in operators_of(overload, catalog_operators):
            by_operator.setdefault(key, []).extend({**call, "overload": overload} for call in calls)
    folder = (root or directory()) / model
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.pt"):
        old.unlink()
    for (op, variant), calls in by_operator.items():
        body = io.BytesIO()
        torch.save({"format": FORMAT, "model": model, "calls": calls}, body)
        path = _file(model, op, variant, root)
        # Whole or not at all: a judge reading it meanwhile sees the old file or the new one.
        with tempfile.NamedTemporaryFile(dir=folder, delete=False, suffix=".tmp") as out:
            out.write(body.getvalue())
        os.replace(out.name, path)
    return {
        f"{op}.{variant}" if variant else op: len(calls)
        for (op, variant), calls in by_operator.items()
    }


# -- the daemon's copy -------------------------------------------------------------------------
# The daemon owns the sets its campaigns require (``opforge run --from-model`` imports a report's
# ``captured_inputs``) and sends each test job its operator's file, so that a worker on another
# host runs the set it never captured.


def operator_id(op: str, variant: str) -> str:
    """How the daemon names an operator: ``name``, or ``name/variant``."""
    return f"{op}/{variant}" if variant else op


def encoded(model: str, root: Path | None = None) -> dict[str, str]:
    """The set ``model:<model>`` as a report carries it: operator id -> base64 of its file."""
    files = sorted(((root or directory()) / model).glob("*.pt"))
    return {
        operator_id(*path.stem.partition("@")[::2]): base64.b64encode(path.read_bytes()).decode()
        for path in files
    }


def install(name: str, op: str, variant: str, encoded_file: str) -> None:
    """Puts the daemon's file of set ``name`` for an operator where ``generate`` finds it
    (replacing this host's own capture of that name); "" says the model never called it."""
    if not is_model_set(name):
        raise ValueError(f"{name!r} is not a model set ({PREFIX}<name>)")
    path = _file(name[len(PREFIX) :], op, variant)
    if not encoded_file:
        path.unlink(missing_ok=True)
        return
    try:
        body = base64.b64decode(encoded_file, validate=True)
    except ValueError as error:
        raise ValueError(f"{name} for {op}: not base64: {error}") from None
    try:
        if path.read_bytes() == body:
            return  # rewriting it would change its version and drop the samples cached from it
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as out:
        out.write(body)
    os.replace(out.name, path)


# -- samples ----------------------------------------------------------------------------------


def version(name: str, op: str, variant: str) -> tuple:
    """What identifies the stored set: a capture written again is another set."""
    try:
        stat = _file(name[len(PREFIX) :], op, variant).stat()
    except OSError:
        return ()
    return (stat.st_mtime_ns, stat.st_size)


def _decode_tensor(record: dict, generator: torch.Generator) -> torch.Tensor:
    dtype, extent = record["dtype"], record["extent"]
    values = record["values"]
    if values is None:
        values = torch.empty(extent, dtype=dtype)
        if extent and dtype == torch.bool:
            values.copy_(torch.rand(extent, generator=generator) < 0.5)
        elif extent and dtype.is_floating_point:
            low, high = record["low"], record["high"]
            values.copy_(
                torch.rand(extent, generator=generator, dtype=torch.float64) * (high - low) + low
            )
        elif extent:
            low, high = int(record["low"]), int(record["high"])
            values.copy_(torch.randint(low, high + 1, (extent,), generator=generator))
    storage = torch.zeros(record["offset"] + extent, dtype=dtype)
    storage[record["offset"] :] = values
    return storage.as_strided(record["shape"], record["stride"], record["offset"])


def _decode(value, generator):
    if _is_tensor(value):
        return _decode_tensor(value[TENSOR], generator)
    if isinstance(value, list):
        return [_decode(item, generator) for item in value]
    return value


def generate(opinfo, name: str, dtype: torch.dtype, seed: int) -> list:
    """The samples (``SampleInput``) of the set ``name`` for ``opinfo``: its captured calls whose
    first tensor is of ``dtype``; none when the model never called it."""
    from torch.testing._internal.opinfo.core import SampleInput

    path = _file(name[len(PREFIX) :], opinfo.name, opinfo.variant_test_name)
    try:
        stored = torch.load(path, weights_only=True)
    except FileNotFoundError:
        return []
    except Exception as error:  # noqa: BLE001 (a file the safe loader refuses is no set)
        raise ValueError(f"model set {name}: {path}: {type(error).__name__}: {error}") from None
    samples = []
    for index, call in enumerate(stored["calls"]):
        tensors = _tensor_records(call["args"])
        if not tensors or tensors[0]["dtype"] != dtype:
            continue
        args, kwargs = decode_call(call, seed, f"{name}/{index}")
        samples.append(
            SampleInput(
                args[0],
                args=tuple(args[1:]),
                kwargs=kwargs,
                name=f"{call['overload']} call #{index}",
            )
        )
    return samples


def decode_call(call: dict, seed: int, label: str = "") -> tuple[list, dict]:
    """A captured call's arguments and keyword arguments, as fresh CPU tensors; tensors beyond
    the value cap are filled from ``seed`` and ``label`` (which names the call)."""
    digest = hashlib.sha256(label.encode()).digest()
    generator = torch.Generator().manual_seed(seed * 1_000_003 + int.from_bytes(digest[:4]))
    args = _decode(call["args"], generator)
    return args, {key: _decode(value, generator) for key, value in call["kwargs"].items()}
