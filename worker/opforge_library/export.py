"""``python -m opforge_library export``: a library bundle as a pip-installable torch.library
package, or in BackendBench's directory layout.

    python -m opforge_library export --bundle FILE --format torch-library|backendbench --out DIR
        [--name PKG] [--dispatch-key CUDA|PrivateUse1|CPU] [--device-kind K]

FILE is msgpack of the contract's ``library_bundle``. For each kernel, every ATen overload its
OpInfo dispatches to (the bundle's ``aten_overloads``, or traced from the OpInfo's samples as the
catalog does) is planned here, at export time, on the CPU:

- the overload's schema is mapped onto the wrapper's Python signature (the OpInfo's call
  convention: ``_adapter.py``), and the mapping is verified: on every OpInfo sample that
  dispatches to that overload alone, the OpInfo's operator called the mapped way gives exactly
  what the overload gives; the signatures (dtypes, number types) of those samples, for the
  kernel's accepted dtypes, are what the package will serve;
- in-place (``abs_``) and ``out=`` overloads are derived from a verified functional one where
  their schema is the functional's plus the destination;
- what cannot be mapped (a view, a step of the operator's decomposition, a signature the wrapper
  has no place for) is listed in the manifest with the reason;
- each covered overload is routed per dtype and shape class (data/timing.yaml's, carried in the
  manifest) by its kernel's timings (the bundle's ``timings``): to the original kernel where the
  kernel is measured slower than ``--min-speedup`` beyond its noise, else to the kernel. A dtype
  without any timing goes where ``--untimed`` says (default: the kernel, served as proved); a
  shape class without a timing, in a dtype timed in others, where ``--unmeasured`` says (default:
  the original: the benchmark never reached that size). A launch-bound timing (ATen's device time
  under the kind's launch-bound threshold) goes where ``--launch-bound`` says: the original by
  default, because there the device timer measured a launch, and a served call pays the
  wrapper's and the runtime's host path, which ATen's whole call undercuts (TIMING.md,
  "Launch-bound"); ``timed`` routes it by its speedup like any other. The manifest records each
  route with the speedup that decided it.

    [--min-speedup X] [--untimed kernel|original] [--unmeasured kernel|original]
    [--launch-bound original|timed]
    (defaults: data/timing.yaml export_routing)
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import inspect
import json
import re
import shutil
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import torch
import yaml
from torch.utils._python_dispatch import TorchDispatchMode

from opforge_library._adapter import Adapter
from opforge_worker import backend, contract, device_kinds
from opforge_worker.backend import normalize_overload
from opforge_worker.layout_contract import contract as layout_contract
from opforge_worker.opinfo import find_opinfo, samples_for
from opforge_worker.package_data import data_path

HERE = Path(__file__).resolve().parent
#: What a candidate's source is given by the harness and must import itself anywhere else.
PRELUDE = "import torch\nimport triton\nimport triton.language as tl\n\n"
#: The exported package's own modules, copied from here unchanged.
RUNTIME_MODULES = ("_adapter.py", "_launch.py", "_native.py", "_runtime.py")
#: Copied beside them: the dispatcher routing ``_native.py`` builds when the package is enabled.
RUNTIME_SOURCES = ("_dispatch.cpp",)
#: Its build backend (standard library only), copied beside its pyproject.toml.
BUILD_BACKEND = "_opforge_build.py"
SAMPLE_SEED = 0
#: 2: signatures name their dtype, routes per dtype and shape class, shape_classes, routing.
FORMAT_VERSION = 3
#: What a package registers under for a device kind this worker's registry does not know (one a
#: newer worker announced): torch's key for an out-of-tree device.
UNKNOWN_KIND_DISPATCH_KEY = "PrivateUse1"
#: The dtype traced and verified for a kernel none of whose own dtypes the CPU has.
FALLBACK_DTYPE = contract.Dtype.FLOAT32
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# -- overload names -------------------------------------------------------------------------------


def resolve_overload(name: str):
    """The OpOverload of ``aten.abs.default``, or None in this torch."""
    try:
        namespace, op, overload = name.split(".")
        return getattr(getattr(getattr(torch.ops, namespace), op), overload)
    except (ValueError, AttributeError, RuntimeError):
        return None


def folder_of(overload: str) -> str:
    """BackendBench's folder name of an overload (its utils.op_name_to_folder_name):
    ``exp.default`` -> ``exp__default``."""
    return overload.removeprefix("aten.").replace(".", "__")


# -- what the OpInfo's samples dispatch to --------------------------------------------------------


@dataclass
class Call:
    """One sample that reached the dispatcher as exactly one ATen call."""

    overload: str
    args: tuple
    kwargs: dict
    result: object


@dataclass
class Trace:
    alone: list[Call] = field(default_factory=list)
    overloads: set[str] = field(default_factory=set)  # every overload any sample reached


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls: list[Call] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        self.calls.append(Call(str(func), args, dict(kwargs or {}), result))
        return result


def trace(opinfo, dtype: torch.dtype, samples: list | None = None) -> Trace:
    """Which ATen calls the OpInfo's CPU samples of ``dtype`` make (BackendBench's suite and the
    catalog trace them the same way)."""
    found = Trace()
    if samples is None:
        try:
            samples = samples_for(opinfo, "cpu", dtype, SAMPLE_SEED)
        except Exception:  # noqa: BLE001 (OpInfo sample functions raise anything: no samples)
            return found
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # samples probe edge cases on purpose
        for sample in samples:
            recorder = _Recorder()
            try:
                with recorder:
                    opinfo.op(sample.input, *sample.args, **sample.kwargs)
            except Exception:  # noqa: BLE001, S112 (no CPU kernel for a dtype: the sample tells nothing)
                continue
            found.overloads.update(call.overload for call in recorder.calls)
            if len(recorder.calls) == 1:
                found.alone.append(recorder.calls[0])
    return found


def overloads_of(op: str, variant: str) -> list[str]:
    """The ATen overloads (``exp.default``) the OpInfo's samples dispatch to alone on the CPU,
    as BackendBench's OpInfo suite traces them (bfloat16 where the CPU has it)."""
    opinfo = find_opinfo(op, variant)
    dtype = torch.bfloat16 if torch.bfloat16 in opinfo.supported_dtypes("cpu") else torch.float32
    samples = list(opinfo.sample_inputs("cpu", dtype))
    names = [call.overload.removeprefix("aten.") for call in trace(opinfo, dtype, samples).alone]
    return list(dict.fromkeys(names))


# -- the adapter: an overload's schema onto the wrapper's signature -------------------------------


def _is_write(argument) -> bool:
    return argument.alias_info is not None and argument.alias_info.is_write


def _argument_spec(argument) -> dict:
    kind = str(argument.type)
    spec = {
        "name": argument.name,
        "kwarg_only": argument.kwarg_only,
        "tensor": kind in ("Tensor", "Optional[Tensor]"),
        "typed": "Tensor" in kind or "number" in kind,
        "to": "",
    }
    if argument.has_default_value():
        spec["default"] = argument.default_value
    return spec


def adapter_spec(schema, wrapper, destination: str = "") -> dict | str:
    """The adapter spec from ``schema`` onto ``wrapper``'s signature, ``destination`` being the
    ``out=`` argument the runtime writes; or why the wrapper cannot take the schema's calls."""
    try:
        parameters = list(inspect.signature(wrapper).parameters.values())
    except (TypeError, ValueError) as error:
        return f"the wrapper's signature cannot be read: {error}"
    kinds = inspect.Parameter
    positional = [
        p for p in parameters if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
    ]
    any_positional = any(p.kind is kinds.VAR_POSITIONAL for p in parameters)
    any_keyword = any(p.kind is kinds.VAR_KEYWORD for p in parameters)
    by_keyword = {p.name for p in parameters if p.kind is kinds.KEYWORD_ONLY}
    args, passed = [], 0
    for argument in schema.arguments:
        spec = _argument_spec(argument)
        if "default" in spec:
            try:
                json.dumps(spec["default"], allow_nan=True)
            except TypeError:
                return f"the default of {argument.name} ({spec['default']!r}) is not plain data"
        if argument.name == destination:
            spec["to"] = "dest"
        elif (
            not argument.kwarg_only
            and not by_keyword & {argument.name}
            and (passed < len(positional) or any_positional)
        ):
            spec["to"] = "pos"
            passed += 1
        elif (
            argument.name in by_keyword
            or any(
                p.name == argument.name and p.kind is kinds.POSITIONAL_OR_KEYWORD
                for p in positional[passed:]
            )
            or any_keyword
        ):
            spec["to"] = "kw"
        elif "default" in spec:
            spec["to"] = "drop"
        else:
            return f"the wrapper has no place for the schema's required {argument.name}"
        args.append(spec)
    fed = {spec["name"] for spec in args if spec["to"] == "kw"}
    for index, parameter in enumerate(positional):
        if index >= passed and parameter.default is kinds.empty and parameter.name not in fed:
            return f"the wrapper requires {parameter.name}, which the schema does not give"
    for parameter in parameters:
        required = parameter.kind is kinds.KEYWORD_ONLY and parameter.default is kinds.empty
        if required and parameter.name not in fed:
            return f"the wrapper requires {parameter.name}, which the schema does not give"
    return {"args": args}


def _argument_shapes(arguments) -> list[tuple]:
    return [(a.name, str(a.type), a.kwarg_only) for a in arguments if not _is_write(a)]


def derived_overloads(name: str) -> list[tuple[str, str, str]]:
    """The in-place and ``out=`` overloads of the functional ``name`` whose schema is its own
    plus the destination: (overload, kind, destination name), or (overload, "", reason) for one
    of that shape that cannot be derived."""
    functional = resolve_overload(name)._schema
    namespace, op, overload = name.split(".")
    found = []
    inplace = resolve_overload(f"{namespace}.{op}_.{overload}")
    if inplace is not None:
        schema = inplace._schema
        writes = [a.name for a in schema.arguments if _is_write(a)]
        plain = [(a.name, str(a.type), a.kwarg_only) for a in schema.arguments]
        if writes == ["self"] and plain == _argument_shapes(functional.arguments):
            found.append((str(inplace), "inplace", "self"))
    packet = getattr(getattr(torch.ops, namespace), op)
    for candidate in packet.overloads():
        schema = getattr(packet, candidate)._schema
        writes = [a for a in schema.arguments if _is_write(a)]
        if not writes or not all(a.kwarg_only for a in writes):
            continue
        if _argument_shapes(schema.arguments) != _argument_shapes(functional.arguments):
            continue
        full = f"{namespace}.{op}.{candidate}"
        if len(writes) > 1 or len(functional.returns) != 1:
            found.append((full, "", "several outputs: their out= is not derived"))
        else:
            found.append((full, "out", writes[0].name))
    return found


# -- planning one kernel --------------------------------------------------------------------------


def module_name(kernel: contract.LibraryKernel) -> str:
    """The kernel's module in the package: its operator and variant, as an identifier."""
    base = re.sub(r"\W", "_", kernel.op + (f"_{kernel.variant}" if kernel.variant else ""))
    return f"k_{base}_{kernel.hash[:8]}" if kernel.hash else f"k_{base}"


def kernel_source(kernel: contract.LibraryKernel) -> str:
    return PRELUDE + kernel.source.rstrip() + "\n"


def load_wrapper(path: Path, wrapper: str):
    """The wrapper of a kernel file (``@triton.jit`` reads its source from the file)."""
    spec = importlib.util.spec_from_file_location(f"_opforge_export_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, wrapper)


def _substitute(signature: str, base: str, target: str) -> str:
    return re.sub(rf"(?<![\w:]){base}(?!\w)", target, signature)


def _results_equal(actual, expected) -> bool:
    try:
        torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)
    except (AssertionError, TypeError, ValueError, RuntimeError):
        return False
    return True


@dataclass
class Plan:
    """What the package serves of one kernel, and what it cannot, by overload."""

    covered: dict[str, dict] = field(default_factory=dict)
    unmapped: dict[str, str] = field(default_factory=dict)
    problem: str = ""  # why the kernel serves nothing, where no overload can say it


def plan_kernel(kernel: contract.LibraryKernel, wrapper) -> Plan:
    plan = Plan()
    opinfo = find_opinfo(kernel.op, kernel.variant)
    listed = [normalize_overload(name) for name in kernel.aten_overloads]
    if opinfo is None:
        plan.problem = (
            f"no OpInfo {kernel.op!r} variant {kernel.variant!r} in torch {torch.__version__}"
        )
        plan.unmapped.update(dict.fromkeys(listed, plan.problem))
        return plan
    cpu = {str(d).removeprefix("torch.") for d in opinfo.supported_dtypes("cpu")}
    traced = [d for d in kernel.dtypes if d in cpu] or (
        [FALLBACK_DTYPE] if FALLBACK_DTYPE in cpu else []
    )
    traces = {dtype: trace(opinfo, getattr(torch, dtype)) for dtype in traced}
    if not listed:  # an older library: the catalog's overloads, as the catalog finds them
        listed = sorted(set().union(*(t.overloads for t in traces.values())))
        if not listed:
            plan.problem = "its OpInfo's samples reach no ATen overload on the CPU"
    functional = []
    for name in listed:
        overload = resolve_overload(name)
        if overload is None:
            plan.unmapped[name] = f"not an ATen overload of torch {torch.__version__}"
        elif any(_is_write(a) for a in overload._schema.arguments):
            plan.unmapped[name] = (
                "writes into its arguments: served only as derived from a functional overload"
            )
        elif any(r.alias_info is not None for r in overload._schema.returns):
            plan.unmapped[name] = "a view of its input: a kernel's new tensor cannot alias it"
        else:
            functional.append(name)
    for name in functional:
        entry = _plan_functional(name, kernel, wrapper, traces, opinfo)
        if isinstance(entry, str):
            plan.unmapped[name] = entry
            continue
        plan.covered[name] = entry
        for derived, kind, destination in derived_overloads(name):
            if not kind:
                plan.unmapped.setdefault(derived, destination)
                continue
            written = destination if kind == "out" else ""  # in place: self is an input too
            spec = adapter_spec(resolve_overload(derived)._schema, wrapper, written)
            if isinstance(spec, str):
                plan.unmapped.setdefault(derived, spec)
                continue
            plan.unmapped.pop(derived, None)
            plan.covered[derived] = {
                **entry,
                "kind": kind,
                "functional": name,
                "destination": destination,
                "adapter": spec,
            }
    return plan


def aten_names(opinfo) -> set[str]:
    """The names the OpInfo's own ATen operator may have: ``softplus`` for
    ``nn.functional.softplus``, ``linalg_norm`` for ``linalg.norm``."""
    name = opinfo.aten_name or opinfo.name
    return {name, name.replace(".", "_"), name.rsplit(".", 1)[-1]}


def _plan_functional(name, kernel, wrapper, traces, opinfo) -> dict | str:
    if name.split(".")[1] not in aten_names(opinfo):
        # diag reaches diag_embed for 1-d inputs only: its samples would verify an adapter
        # that is wrong for the 2-d inputs diag_embed also takes.
        return f"another operator than {opinfo.name}'s own, which reaches it for some inputs"
    spec = adapter_spec(resolve_overload(name)._schema, wrapper)
    if isinstance(spec, str):
        return spec
    adapter = Adapter(spec)
    signatures: dict[str, set[str]] = {}
    samples = 0
    for dtype, found in traces.items():
        for call in found.alone:
            if call.overload != name:
                continue
            samples += 1
            bound = adapter.bind(call.args, call.kwargs)
            if bound is None:
                return f"a sample's call does not fit the schema: {call.args!r} {call.kwargs!r}"
            wrapped = adapter.wrapper_call(bound)
            if isinstance(wrapped, str):
                continue  # the runtime falls through for such calls
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    mapped = opinfo.op(*wrapped[0], **wrapped[1])
            except Exception as error:  # noqa: BLE001 (a wrong mapping raises anything)
                refused = f"{type(error).__name__}: {error}"
                return f"the OpInfo's operator refuses the adapted call: {refused}"[:300]
            if not _results_equal(mapped, call.result):
                return "the adapted call gives another result than the overload on an OpInfo sample"
            signatures.setdefault(dtype, set()).add(adapter.signature(bound))
    if not samples:
        return "no OpInfo sample dispatches to it alone: a step of the operator's decomposition"
    if not signatures:
        return "every OpInfo sample needs an argument the wrapper has no place for"
    base = FALLBACK_DTYPE if FALLBACK_DTYPE in signatures else next(iter(signatures))
    accepted: dict[str, str] = {}  # signature -> the dtype whose samples it stands for
    for dtype in kernel.dtypes:
        tested = signatures.get(dtype) or {_substitute(s, base, dtype) for s in signatures[base]}
        for signature in sorted(tested):
            accepted.setdefault(signature, dtype)
    return {
        "kind": "functional",
        "kernel": module_name(kernel),
        "dtypes": list(kernel.dtypes),
        "signatures": dict(sorted(accepted.items())),
        "verified_samples": samples,
        "adapter": spec,
        # _runtime.py serves a call of an operator whose layout is contract only where it knows
        # ATen's result layout, and only a result of that layout (opforge_worker's
        # data/layout_contract.yaml).
        "layout": "contract" if layout_contract().preserves(opinfo) else "free",
    }


# -- routing by the kernels' timings --------------------------------------------------------------

#: Where a call of one dtype and shape class goes: the library's kernel or the original one.
TO_KERNEL, TO_ORIGINAL = "kernel", "original"
#: A launch-bound timing routed by its speedup, as a timing that is not.
BY_TIMING = "timed"


@dataclass(frozen=True)
class Routing:
    """When a timed kernel serves a shape class (``min_speedup``), and where calls go: of a
    dtype without any timing (``untimed``: TO_KERNEL or TO_ORIGINAL), of a shape class without
    one in a dtype timed in others (``unmeasured``: the same), of a launch-bound one
    (``launch_bound``: TO_ORIGINAL or BY_TIMING)."""

    min_speedup: float
    untimed: str
    launch_bound: str
    unmeasured: str


@functools.cache
def _timing_data() -> dict:
    return yaml.safe_load(data_path("timing.yaml").read_text(encoding="utf-8"))


def shape_classes() -> list[dict]:
    """The shape classes a timing is kept per (data/timing.yaml), as the manifest carries them:
    the exported runtime cannot import the worker."""
    return [
        {"name": entry["name"], "max_elements": entry["max_elements"]}
        for entry in _timing_data()["shape_classes"]
    ]


def default_routing() -> Routing:
    routing = _timing_data()["export_routing"]
    return Routing(
        float(routing["min_speedup"]),
        routing["untimed"],
        routing["launch_bound"],
        routing["unmeasured"],
    )


def chosen_timings(kernel: contract.LibraryKernel, bundle: contract.LibraryBundle) -> dict:
    """(dtype, shape class) -> the timing that routes it: of the bundle's device kind, of its
    fingerprint where it names one, else the newest measured."""
    found: dict[tuple[str, str], contract.KernelTiming] = {}
    for timing in kernel.timings or []:
        if timing.device_kind != bundle.device_kind:
            continue
        if bundle.fingerprint and timing.fingerprint != bundle.fingerprint:
            continue
        key = (timing.dtype, timing.shape_class)
        if key not in found or timing.measured_at_ms > found[key].measured_at_ms:
            found[key] = timing
    return found


def route(timing: contract.KernelTiming | None, routing: Routing, dtype_timed: bool) -> dict:
    """Where one dtype's calls of one shape class go, with the measurement that decided it;
    ``dtype_timed``: whether the dtype has a timing in another class."""
    if timing is None and dtype_timed:
        return {"to": routing.unmeasured, "speedup": None, "unmeasured": True}
    if timing is None:
        return {"to": routing.untimed, "speedup": None}
    # Slower than the threshold even at the favourable end of its noise: the original serves.
    kept = timing.speedup * (1.0 + timing.noise) >= routing.min_speedup
    if timing.launch_bound and routing.launch_bound == TO_ORIGINAL:
        kept = False
    return {
        "to": TO_KERNEL if kept else TO_ORIGINAL,
        "speedup": timing.speedup,
        "noise": timing.noise,
        "kernel_us": timing.kernel_us,
        "baseline_us": timing.baseline_us,
        "baseline": timing.baseline,
        "launch_bound": timing.launch_bound,
        "fingerprint": timing.fingerprint,
    }


def routes_of(kernel: contract.LibraryKernel, bundle, routing: Routing) -> dict:
    """dtype -> shape class -> ``route``, for every dtype the kernel passed."""
    timings = chosen_timings(kernel, bundle)
    timed_dtypes = {dtype for dtype, _ in timings}
    return {
        dtype: {
            shape_class["name"]: route(
                timings.get((dtype, shape_class["name"])), routing, dtype in timed_dtypes
            )
            for shape_class in shape_classes()
        }
        for dtype in kernel.dtypes
    }


# -- writing --------------------------------------------------------------------------------------


def default_dispatch_key(device_kind: str) -> str:
    """The key a package of ``device_kind`` registers under unless ``--dispatch-key`` says."""
    kind = device_kinds.KINDS.get(device_kind)
    return kind.dispatch_key if kind else UNKNOWN_KIND_DISPATCH_KEY


def kind_requirements(device_kind: str) -> dict[str, dict[str, str]]:
    """What the package needs of its kind, from the registry, as the manifest carries it:
    ``triton_environment`` (set before triton is imported, checked by ``enable()``) and
    ``direct_launch`` (the torch functions _launch.py asks for the device and stream); empty
    for a kind the registry lacks."""
    kind = device_kinds.KINDS.get(device_kind)
    return {
        "triton_environment": dict(kind.triton_environment) if kind else {},
        "direct_launch": dict(kind.direct_launch) if kind else {},
    }


def read_bundle(path: Path) -> contract.LibraryBundle:
    return contract.LibraryBundle.from_dict(
        msgpack.unpackb(path.read_bytes(), raw=False, strict_map_key=False)
    )


def plan_bundle(
    bundle: contract.LibraryBundle, kernels_dir: Path, routing: Routing
) -> tuple[dict, dict, dict]:
    """Write each kernel's module into ``kernels_dir`` and plan it: (kernels, covered, unmapped)
    for the manifest, each covered overload routed by its kernel's timings. An overload two
    kernels could serve goes to the first."""
    kernels, covered, unmapped = {}, {}, {}
    kernels_dir.mkdir(parents=True, exist_ok=True)
    for kernel in bundle.kernels:
        module = module_name(kernel)
        path = kernels_dir / f"{module}.py"
        path.write_text(kernel_source(kernel), encoding="utf-8")
        kernels[module] = {
            "op": kernel.op,
            "variant": kernel.variant,
            "wrapper": kernel.wrapper,
            "hash": kernel.hash,
            "dtypes": list(kernel.dtypes),
            "provenance": dict(kernel.provenance),
            "toolchains": [proof.to_dict() for proof in kernel.proofs],
        }
        try:
            wrapper = load_wrapper(path, kernel.wrapper)
        except Exception as error:  # noqa: BLE001 (a kernel source may raise anything)
            reason = f"the kernel does not load here: {type(error).__name__}: {error}"[:300]
            kernels[module]["problem"] = reason
            for name in kernel.aten_overloads:
                unmapped.setdefault(normalize_overload(name), {"kernel": module, "reason": reason})
            continue
        plan = plan_kernel(kernel, wrapper)
        if plan.problem:
            kernels[module]["problem"] = plan.problem
        routes = routes_of(kernel, bundle, routing)
        for name, entry in plan.covered.items():
            entry = {**entry, "routes": routes}
            if name in covered:
                first = covered[name]["kernel"]
                unmapped.setdefault(name, {"kernel": module, "reason": f"served by {first}"})
            else:
                covered[name] = entry
                unmapped.pop(name, None)
        for name, reason in plan.unmapped.items():
            if name not in covered:
                unmapped.setdefault(name, {"kernel": module, "reason": reason})
    return kernels, covered, unmapped


def manifest_of(bundle, name, dispatch_key, routing, kernels, covered, unmapped) -> dict:
    import triton

    fingerprint = re.sub(r"[^0-9a-zA-Z]", "", bundle.fingerprint)
    return {
        "format": FORMAT_VERSION,
        "name": name,
        "version": "0.1.0" + (f"+{fingerprint}" if fingerprint else ""),
        "device_kind": bundle.device_kind,
        **kind_requirements(bundle.device_kind),
        "routing_environment": backend.ROUTING_ENVIRONMENT,
        "fingerprint": bundle.fingerprint,
        "daemon_version": bundle.daemon_version,
        "dispatch_key": dispatch_key,
        "exported_with": {"torch": torch.__version__, "triton": triton.__version__},
        "shape_classes": shape_classes(),
        "routing": {
            "min_speedup": routing.min_speedup,
            "untimed": routing.untimed,
            "unmeasured": routing.unmeasured,
            "launch_bound": routing.launch_bound,
        },
        "kernels": kernels,
        "covered": covered,
        "unmapped": unmapped,
    }


_INIT = '''"""{name}: {count} Triton kernels for {device_kind} by opforge, for torch.library.

    import {name}
    {name}.enable()          # or: with {name}.enabled(): ...
    {name}.covered()         # the ATen overloads it serves; manifest.json says with what
    {name}.registered()      # those enable() registered: routed to a kernel somewhere
    {name}.call_counts()     # calls its kernels served, per overload
    {name}.routing()         # "native" (routed in the dispatcher), or "python (why)"
    {name}.set_native_routing(False)  # route every call from Python (slower fall-throughs)
    {name}.set_direct_launch(False)  # Triton's own launch path (the same kernels, slower calls)
    {name}.set_direct_call(False)  # every served call through the Python runtime (slower)
    {name}.disable()
"""

from pathlib import Path

from ._runtime import Library

_library = Library(__name__, Path(__file__).resolve().parent)
manifest = _library.manifest
enable = _library.enable
disable = _library.disable
enabled = _library.enabled
is_enabled = _library.is_enabled
covered = _library.covered
registered = _library.registered
call_counts = _library.call_counts
reset_counts = _library.reset_counts
set_direct_launch = _library.set_direct_launch
set_native_routing = _library.set_native_routing
set_direct_call = _library.set_direct_call
routing = _library.routing

__all__ = [
    "manifest", "enable", "disable", "enabled", "is_enabled", "covered", "registered",
    "call_counts", "reset_counts", "set_direct_launch", "set_native_routing", "set_direct_call",
    "routing",
]
'''

# The backend is in the tree and needs nothing: `pip install DIR` fetches no build dependency.
# No dependencies either: torch and triton are the machine's (_opforge_build.py says why).
_PYPROJECT = """[build-system]
requires = []
build-backend = "_opforge_build"
backend-path = ["."]

[project]
name = "{name}"
version = "{version}"
description = "Triton kernels for {device_kind} registered with torch.library (exported by opforge)"
requires-python = ">=3.10"
"""

_README = """# {name}

{count} Triton kernels for `{device_kind}` exported by opforge, serving {covered} ATen overloads
through `torch.library` (dispatch key `{dispatch_key}` by default). `manifest.json` lists each
overload with its kernel, dtypes, toolchains and provenance, and the overloads it does not serve
with the reason. It needs torch (2.9 or later) and triton, nothing of opforge; it declares
neither, so pip leaves the installed ones (and their own requirements) as they are.

    python -m pip install --no-index .      # offline: the build needs nothing but Python
    {environment}python -c "import torch, {name}; {name}.enable(); print({name}.covered())"

Calls of dtypes, devices or argument kinds the kernels were not validated on go to PyTorch's
own kernels, and so do the dtypes and shape classes (`shape_classes`, by the elements of a
call's largest tensor) where a kernel was measured slower than PyTorch's: each overload's
`routes` say where a call goes and with what measured speedup (`routing` says by which rule).
"""


def write_torch_library(bundle, out: Path, name: str, dispatch_key: str, routing) -> dict:
    package = out / name
    if package.exists():
        shutil.rmtree(package)
    package.mkdir(parents=True)
    kernels_dir = package / "kernels"
    kernels, covered, unmapped = plan_bundle(bundle, kernels_dir, routing)
    (kernels_dir / "__init__.py").write_text('"""One module per kernel."""\n', encoding="utf-8")
    for module in (*RUNTIME_MODULES, *RUNTIME_SOURCES):
        shutil.copyfile(HERE / module, package / module)
    shutil.copyfile(HERE / BUILD_BACKEND, out / BUILD_BACKEND)
    manifest = manifest_of(bundle, name, dispatch_key, routing, kernels, covered, unmapped)
    (package / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    facts = {
        "name": name,
        "count": len(kernels),
        "covered": len(covered),
        "device_kind": bundle.device_kind,
        "dispatch_key": dispatch_key,
        "environment": "".join(
            f"{name}={value} " for name, value in manifest["triton_environment"].items()
        ),
    }
    (package / "__init__.py").write_text(_INIT.format(**facts), encoding="utf-8")
    (out / "pyproject.toml").write_text(
        _PYPROJECT.format(**facts, version=manifest["version"]), encoding="utf-8"
    )
    (out / "README.md").write_text(_README.format(**facts), encoding="utf-8")
    return manifest


def _adapter_text() -> str:
    text = (HERE / "_adapter.py").read_text(encoding="utf-8")
    return text.replace("from __future__ import annotations\n", "")


def backendbench_text(folder: str, source: str, wrapper: str, spec: dict) -> str:
    """BackendBench's ``<folder>_implementation_v1.py``: the kernel, the adapter and
    ``<folder>_kernel_impl``, taking the overload's arguments."""
    return (
        "from __future__ import annotations\n\nimport json\n\n"
        + PRELUDE
        + source.rstrip()
        + "\n\n\n# -- opforge's adapter (opforge_library/_adapter.py) --\n"
        + _adapter_text()
        + f"\n\n_ADAPTER = Adapter(json.loads({json.dumps(json.dumps(spec))}))\n\n\n"
        + f"def {folder}_kernel_impl(*args, **kwargs):\n"
        + "    bound = _ADAPTER.bind(args, kwargs)\n"
        + "    call = 'the arguments do not fit the schema' if bound is None"
        + " else _ADAPTER.wrapper_call(bound)\n"
        + "    if isinstance(call, str):\n"
        + "        raise NotImplementedError(call)\n"
        + f"    return {wrapper}(*call[0], **call[1])\n"
    )


def write_backendbench(bundle, out: Path, routing) -> dict:
    """One folder per functional overload served; the manifest beside them."""
    out.mkdir(parents=True, exist_ok=True)
    scratch = out / ".opforge-kernels"
    kernels, covered, unmapped = plan_bundle(bundle, scratch, routing)
    sources = {module_name(k): k for k in bundle.kernels}
    for name, entry in covered.items():
        if entry["kind"] != "functional":
            continue
        folder = folder_of(name)
        kernel = sources[entry["kernel"]]
        path = out / folder / f"{folder}_implementation_v1.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            backendbench_text(folder, kernel.source, kernel.wrapper, entry["adapter"]),
            encoding="utf-8",
        )
    shutil.rmtree(scratch)
    manifest = manifest_of(bundle, "", "", routing, kernels, covered, unmapped)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m opforge_library export", description=__doc__)
    parser.add_argument("--bundle", required=True, type=Path, help="msgpack of library_bundle")
    parser.add_argument("--format", required=True, choices=["torch-library", "backendbench"])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--name", default="opforge_kernels", help="the package's name")
    parser.add_argument("--dispatch-key", choices=["CUDA", "PrivateUse1", "CPU"])
    parser.add_argument("--device-kind", help="refuse a bundle for another device kind")
    defaults = default_routing()
    parser.add_argument(
        "--min-speedup",
        type=float,
        default=defaults.min_speedup,
        help="route a dtype and shape class to the original kernel where the library's kernel "
        "is measured below this speedup beyond its noise (default %(default)s: timing.yaml)",
    )
    parser.add_argument(
        "--untimed",
        choices=[TO_KERNEL, TO_ORIGINAL],
        default=defaults.untimed,
        help="where calls of a dtype and shape class without a timing go (default %(default)s)",
    )
    parser.add_argument(
        "--unmeasured",
        choices=[TO_KERNEL, TO_ORIGINAL],
        default=defaults.unmeasured,
        help="where calls of a shape class without a timing go in a dtype timed in other "
        "classes (default %(default)s)",
    )
    parser.add_argument(
        "--launch-bound",
        choices=[TO_ORIGINAL, BY_TIMING],
        default=defaults.launch_bound,
        help="where calls of a launch-bound dtype and shape class go: the original, or by "
        "their speedup as any other (default %(default)s)",
    )
    args = parser.parse_args(argv)
    routing = Routing(args.min_speedup, args.untimed, args.launch_bound, args.unmeasured)
    if not _NAME.fullmatch(args.name):
        parser.error(f"--name {args.name!r}: not a Python package name")
    try:
        bundle = read_bundle(args.bundle)
    except (OSError, ValueError, contract.ContractError, msgpack.UnpackException) as error:
        print(f"export: {args.bundle}: not a library bundle: {error}", file=sys.stderr)
        return 2
    if args.device_kind and args.device_kind != bundle.device_kind:
        print(
            f"export: the bundle holds kernels for {bundle.device_kind!r}, "
            f"not {args.device_kind!r}",
            file=sys.stderr,
        )
        return 2
    if args.format == "torch-library":
        key = args.dispatch_key or default_dispatch_key(bundle.device_kind)
        manifest = write_torch_library(bundle, args.out, args.name, key, routing)
        where = args.out / args.name
    else:
        manifest = write_backendbench(bundle, args.out, routing)
        where = args.out
    print(
        f"export: {len(manifest['kernels'])} kernels, {len(manifest['covered'])} overloads "
        f"served, {len(manifest['unmapped'])} not ({where / 'manifest.json'})"
    )
    return 0
