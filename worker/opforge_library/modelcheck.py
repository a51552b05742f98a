"""``python -m opforge_library modelcheck``: run real model architectures with an exported library.

    python -m opforge_library modelcheck --model resnet18|gpt2|llama|all [--package NAME_OR_DIR]
        --device-kind interpreter|cuda --report OUT.json [--size tiny|small] [--dtype float32]
        [--capture [DIR]] [--catalog CATALOG.json] [--forwards N] [--timing-calls N]

Each model is built from code with seeded random weights (torchvision's resnet18; GPT-2 and Llama
from transformers configs, nothing downloaded) and run in eager mode, once with the package
disabled and once enabled. The report (``contract.ModelReport``, one per model; a JSON list for
``all``) gives every ATen overload called with its count, the calls the library served, the
overloads it does not cover and the catalog operators behind them (``opforge run --from-model
OUT.json`` starts a campaign over exactly those), the output's deviation from eager ATen, the
wall time of each run, and the covered overloads whose kernel disagrees with ATen on the model's
own inputs: a kernel that passed OpInfo's samples and fails the model. Wall times are medians
over ``--forwards`` forward passes of each, interleaved, and ``slowdown`` is the median (with its
interquartile range) of each interleaved pair's ratio, with the library over without.
``overload_times`` says which kernels cost what: per covered overload the model calls, its
captured calls replayed on the device with the package enabled and without (rounds of
``--timing-calls`` calls, synchronised; the median round per call), and how many of them the
package served.

``--capture`` also writes the model's inputs per operator as the sample set ``model:<name>``
(``opforge_worker.model_sets``) where the judge finds them: ``validate --sets model:gpt2``; the
report then carries the set too (``captured_inputs``), which ``opforge run --from-model OUT.json``
imports into the daemon, whose test jobs send it to whichever worker runs them.

The device kind (``opforge_worker.device_kinds``) is the exported package's: the model runs on
its torch device, and ``--device-kind interpreter`` runs Triton kernels on the interpreter
(TRITON_INTERPRET=1, dispatch key CPU, the model on the CPU), with tiny inputs by default: what CI
runs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

from opforge_worker import device_kinds, timing
from opforge_worker.device_kinds import DeviceKind

MODELS = ("resnet18", "gpt2", "llama")
SIZES = ("tiny", "small")
#: What a missing model dependency is named as, to install it.
_DEPENDENCIES = {"resnet18": "torchvision", "gpt2": "transformers", "llama": "transformers"}
#: Elements whose expected magnitude is below this share of the largest are compared absolutely:
#: a relative error against a logit that happens to be near zero says nothing.
_REL_FLOOR = 1e-3
#: A deviation that is not a number (NaN or inf where eager has a value): JSON has no infinity.
NOT_COMPARABLE = sys.float_info.max


class MissingDependency(RuntimeError):
    """A model whose package is not installed here: names it."""


def _require(model: str):
    package = _DEPENDENCIES[model]
    try:
        return importlib.import_module(package)
    except ImportError as error:
        raise MissingDependency(
            f"model {model} needs the package {package}, which does not import here: {error}"
        ) from None


def build(model: str, size: str, dtype, torch_device: str):
    """``(module, inputs)``: the model with seeded random weights, eval mode, on ``torch_device``,
    and the keyword arguments (or one tensor) of one forward pass."""
    import torch

    torch.manual_seed(0)
    tiny = size == "tiny"
    if model == "resnet18":
        torchvision = _require(model)
        module = torchvision.models.resnet18(weights=None, num_classes=10 if tiny else 1000)
        side = 32 if tiny else 224
        inputs = torch.randn(1, 3, side, side)
    else:
        transformers = _require(model)
        tokens = 8 if tiny else 128
        if model == "gpt2":
            config = (
                transformers.GPT2Config(
                    n_layer=1,
                    n_embd=32,
                    n_head=2,
                    vocab_size=64,
                    n_positions=16,
                    bos_token_id=0,
                    eos_token_id=0,
                )  # fmt: skip
                if tiny
                else transformers.GPT2Config()
            )
        else:
            config = (
                transformers.LlamaConfig(
                    num_hidden_layers=1,
                    hidden_size=32,
                    intermediate_size=64,
                    num_attention_heads=2,
                    num_key_value_heads=1,
                    vocab_size=64,
                    max_position_embeddings=16,
                    bos_token_id=0,
                    eos_token_id=0,
                )  # fmt: skip
                if tiny
                else transformers.LlamaConfig(
                    num_hidden_layers=12,
                    hidden_size=768,
                    intermediate_size=2048,
                    num_attention_heads=12,
                    num_key_value_heads=4,
                    vocab_size=32000,
                    max_position_embeddings=512,
                )  # fmt: skip
            )
        # Eager attention: the module's own matmuls and softmax, as the model is written.
        config._attn_implementation = "eager"
        module = (
            transformers.GPT2LMHeadModel if model == "gpt2" else transformers.LlamaForCausalLM
        )(config)
        inputs = {"input_ids": torch.randint(0, config.vocab_size, (1, tokens))}
    module = module.to(device=torch_device, dtype=dtype).eval()
    if isinstance(inputs, dict):
        inputs = {key: value.to(torch_device) for key, value in inputs.items()}
    else:
        inputs = inputs.to(device=torch_device, dtype=dtype)
    return module, inputs


def _forward(module, inputs):
    import torch

    output = module(**inputs) if isinstance(inputs, dict) else module(inputs)
    return output if isinstance(output, torch.Tensor) else output["logits"]


def _timed(module, inputs, kind: DeviceKind):
    """The output of one forward pass and its wall time, its queued device work included. Where
    a first pass compiles (Triton; cuBLAS picks its kernels), it is not timed: call ``_warm``
    before."""
    start = time.perf_counter()
    output = _forward(module, inputs)
    if kind.synchronize is not None:
        kind.synchronize()
    return output, time.perf_counter() - start


def _warm(module, inputs, kind: DeviceKind) -> None:
    if kind.compiles_on_first_launch:
        _forward(module, inputs)


def deviation(actual, expected) -> tuple[float, float]:
    """Max abs and max rel deviation of ``actual`` from ``expected`` (relative to each element's
    expected magnitude, floored at ``_REL_FLOOR`` of the largest); ``NOT_COMPARABLE`` where
    either is not finite."""
    import torch

    actual, expected = actual.double().cpu(), expected.double().cpu()
    if actual.shape != expected.shape:
        return NOT_COMPARABLE, NOT_COMPARABLE
    difference = (actual - expected).abs()
    # Equal non-finite values (eager's own inf) are no deviation.
    difference[(actual == expected) | (actual.isnan() & expected.isnan())] = 0
    if difference.numel() == 0:
        return 0.0, 0.0
    absolute = float(difference.max())
    scale = expected.abs()
    floor = _REL_FLOOR * float(scale[scale.isfinite()].max()) if scale.isfinite().any() else 0.0
    relative = float(
        (difference / scale.clamp_min(max(floor, torch.finfo(torch.float64).tiny))).max()
    )
    return tuple(
        value if math.isfinite(value) else NOT_COMPARABLE for value in (absolute, relative)
    )


def load_package(name_or_dir: str):
    """The exported package: a directory, either the package's own (the one holding
    ``manifest.json``, imported by its name from its parent) or the one ``opforge export --out``
    wrote (holding pyproject.toml and that package), or a module name."""
    path = Path(name_or_dir)
    if not path.is_dir():
        return importlib.import_module(name_or_dir)
    path = path.resolve()
    if not (path / "manifest.json").is_file():
        found = sorted(path.glob("*/manifest.json"))
        if len(found) != 1:
            raise ValueError(
                f"--package {name_or_dir}: expected an exported package (a directory holding "
                "manifest.json) or the directory `opforge export --out` wrote (holding one such "
                f"package); it holds {len(found)} packages"
            )
        path = found[0].parent
    sys.path.insert(0, str(path.parent))
    return importlib.import_module(path.name)


class _NoLibrary:
    """Stands in for a package when none is given: serves nothing, so every overload is missing."""

    def enable(self):
        pass

    def disable(self):
        pass

    def covered(self):
        return []

    def call_counts(self):
        return {}

    def reset_counts(self):
        pass


def missing_operators(overloads, catalog_operators) -> list:
    """The catalog operators to generate for ``overloads``: per overload those named like it
    (``model_sets.operators_of``), else every operator whose samples dispatch to it."""
    from opforge_worker import contract, model_sets

    found: dict[tuple[str, str], None] = {}
    for overload in overloads:
        named = model_sets.operators_of(overload, catalog_operators)
        for key in named or [
            (op["name"], op["variant"])
            for op in catalog_operators
            if overload in op["aten_overloads"]
        ]:
            found[key] = None
    return [contract.ModelOperator(op=name, variant=variant) for name, variant in found]


def _replays(capture, covered: set[str]):
    """(overload, its OpOverload, its captured calls) for each covered overload the model called."""
    import torch

    for overload, calls in sorted(capture.calls.items()):
        if overload in covered:
            namespace, name, overload_name = overload.split(".")
            func = getattr(getattr(getattr(torch.ops, namespace), name), overload_name)
            yield overload, func, calls


def _replayed(call, torch_device: str):
    """A captured call's (args, kwargs) on ``torch_device``: the package serves only its device's
    dispatch key, so a call replayed on CPU tensors would never reach a CUDA kernel."""
    import torch
    from torch.utils._pytree import tree_map

    from opforge_worker import model_sets

    def on_device(value):
        return value.to(torch_device) if isinstance(value, torch.Tensor) else value

    return tree_map(on_device, model_sets.decode_call(call, seed=0))


def _failing_overloads(package, capture, covered: set[str], torch_device: str) -> list[str]:
    """The covered overloads whose kernel disagrees with ATen on a captured call of the model,
    each call replayed on ``torch_device``."""
    import torch

    failing = []
    for overload, func, calls in _replays(capture, covered):
        for call in calls:
            results = []
            for enabled in (False, True):
                args, kwargs = _replayed(call, torch_device)
                (package.enable if enabled else package.disable)()
                try:
                    results.append(func(*args, **kwargs))
                except Exception as error:  # noqa: BLE001 (the kernel's failure is the finding)
                    results.append(error)
                finally:
                    package.disable()
            expected, actual = results
            if isinstance(expected, Exception):
                continue  # ATen refuses the call replayed: nothing to compare with
            try:
                torch.testing.assert_close(actual, expected, equal_nan=True)
            except (AssertionError, TypeError, ValueError, RuntimeError):
                failing.append(overload)
                break
    return failing


#: Rounds of timed calls per captured call and side: the median round counts.
TIMING_ROUNDS = 5


def _time_calls(func, args, kwargs, calls: int, kind: DeviceKind) -> float:
    """Seconds per call of ``calls`` calls in a row, their device work included."""
    start = time.perf_counter()
    for _ in range(calls):
        func(*args, **kwargs)
    if kind.synchronize is not None:
        kind.synchronize()
    return (time.perf_counter() - start) / calls


def overload_times(package, capture, covered, kind: DeviceKind, calls: int) -> list:
    """``contract.OverloadTime`` of each covered overload the model calls: its captured calls
    replayed with the package enabled and disabled, interleaved round by round."""
    from opforge_worker import contract

    found = []
    for overload, func, captured in _replays(capture, covered):
        library, aten, served = [], [], 0
        for call in captured:
            args, kwargs = _replayed(call, kind.torch_device)
            rounds = {True: [], False: []}
            try:
                func(*args, **kwargs)  # warm, as the library's first call below
                package.enable()
                package.reset_counts()
                func(*args, **kwargs)  # compiles, autotunes
                served += package.call_counts().get(overload, 0) > 0
                for _ in range(TIMING_ROUNDS):
                    for enabled in (False, True):
                        (package.enable if enabled else package.disable)()
                        rounds[enabled].append(_time_calls(func, args, kwargs, calls, kind))
            except Exception:  # noqa: BLE001, S112 (ATen refuses the call replayed: nothing timed)
                continue
            finally:
                package.disable()
            library.append(statistics.median(rounds[True]))
            aten.append(statistics.median(rounds[False]))
        if library:
            found.append(
                contract.OverloadTime(
                    overload=overload,
                    calls=capture.counts.get(overload, 0),
                    replayed=len(library),
                    served=served,
                    library_us=statistics.fmean(library) * 1e6,
                    aten_us=statistics.fmean(aten) * 1e6,
                )
            )
    return found


def check(model: str, package, args, catalog_operators):
    """One model's ``contract.ModelReport``; writes its model set where ``--capture`` says."""
    import torch

    from opforge_worker import contract, model_sets

    dtype = getattr(torch, args.dtype)
    kind = device_kinds.lookup(args.device_kind)
    module, inputs = build(model, args.size, dtype, kind.torch_device)
    package.disable()
    capture = model_sets.Capture()
    with torch.no_grad():
        with capture:
            _forward(module, inputs)
        _warm(module, inputs, kind)
        covered = set(package.covered())
        failing = _failing_overloads(package, capture, covered, kind.torch_device)
        package.enable()
        try:
            _warm(module, inputs, kind)
        finally:
            package.disable()
        times = overload_times(package, capture, covered, kind, args.timing_calls)
        withouts, withs, served = [], [], {}
        for _ in range(args.forwards):
            output, seconds = _timed(module, inputs, kind)
            withouts.append(seconds)
            package.enable()
            try:
                package.reset_counts()
                result, seconds = _timed(module, inputs, kind)
                withs.append(seconds)
                served = package.call_counts()
            finally:
                package.disable()
            if len(withs) == 1:
                expected, actual = output, result
    captured = None
    if args.capture is not None:
        root = Path(args.capture) if args.capture else None
        written = model_sets.save(model, capture, catalog_operators, root)
        calls = sum(written.values())
        print(f"{model}: model:{model} holds {calls} calls of {len(written)} operators")
        captured = model_sets.encoded(model, root)
    missing = sorted(set(capture.counts) - covered)
    max_abs, max_rel = deviation(actual, expected)
    slowdown = timing.summarize([w / wo for w, wo in zip(withs, withouts, strict=True)])
    return contract.ModelReport(
        model=model,
        aten_calls=dict(sorted(capture.counts.items())),
        served_calls=sum(served.values()),
        missing_overloads=missing,
        missing_operators=missing_operators(missing, catalog_operators),
        max_abs_deviation=max_abs,
        max_rel_deviation=max_rel,
        seconds_with_library=statistics.median(withs),
        seconds_without_library=statistics.median(withouts),
        slowdown=slowdown.median,
        slowdown_iqr=slowdown.iqr,
        failing_overloads=failing,
        overload_times=times,
        captured_inputs=captured,
    )


def describe(report) -> str:
    calls = sum(report.aten_calls.values())
    share = report.served_calls / calls if calls else 0.0
    lines = [
        f"{report.model}: {calls} aten calls of {len(report.aten_calls)} overloads, "
        f"{report.served_calls} served by the library ({share:.1%})",
        f"  deviation from eager: max abs {report.max_abs_deviation:.3g}, "
        f"max rel {report.max_rel_deviation:.3g}",
        f"  wall time: {report.seconds_with_library:.3f}s with the library, "
        f"{report.seconds_without_library:.3f}s without (x{report.slowdown:.3f}, IQR "
        f"{report.slowdown_iqr:.3f}, pair by pair)",
        f"  missing: {len(report.missing_overloads)} overloads -> "
        f"{len(report.missing_operators)} operators",
    ]
    for overload in report.failing_overloads:
        lines.append(f"  {overload}: the library's kernel fails the model's own inputs")
    for cost in report.overload_times:
        lines.append(
            f"  {cost.overload}: {cost.calls} calls, {cost.library_us:.1f} us each with the "
            f"library, {cost.aten_us:.1f} us without ({cost.served} of {cost.replayed} replayed "
            "calls served)"
        )
    return "\n".join(lines)


def _catalog_operators(args) -> list[dict]:
    if args.catalog:
        return json.loads(Path(args.catalog).read_text())["operators"]
    from opforge_worker import catalog

    return catalog.build(args.device_kind)["operators"]


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: at least 1")
    return value


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="python -m opforge_library modelcheck",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    root.add_argument("--model", required=True, choices=[*MODELS, "all"])
    root.add_argument("--package", help="the exported package: a directory or a module name")
    root.add_argument(
        "--device-kind", required=True, choices=device_kinds.KINDS, help="the package's"
    )
    root.add_argument("--report", required=True, help="write the report(s) here, as JSON")
    root.add_argument("--size", default="tiny", choices=SIZES, help="tiny: CI's; small: real")
    root.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    root.add_argument(
        "--capture",
        nargs="?",
        const="",
        metavar="DIR",
        help="write the model's inputs as sample sets model:<name> "
        "(default DIR: $OPFORGE_MODEL_SETS_DIR, else the worker's cache)",
    )
    root.add_argument(
        "--catalog", help="a catalog JSON (python -m opforge_worker catalog --json); default: built"
    )
    root.add_argument(
        "--forwards", type=_positive, default=5, help="timed forward passes of each (median)"
    )
    root.add_argument(
        "--timing-calls",
        type=_positive,
        default=20,
        help="calls per timed round of a covered overload's captured call (overload_times)",
    )
    return root


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    # Before triton is imported (by the package): the interpreter is chosen at import.
    for name, value in device_kinds.lookup(args.device_kind).triton_environment.items():
        os.environ.setdefault(name, value)
    models = MODELS if args.model == "all" else (args.model,)
    reports, failed = [], False
    try:
        package = load_package(args.package) if args.package else _NoLibrary()
        catalog_operators = _catalog_operators(args)
        for model in models:
            try:
                reports.append(check(model, package, args, catalog_operators))
            except MissingDependency as error:
                # The other models still run; the missing package is named and fails the run.
                print(f"opforge_library modelcheck: {error}", file=sys.stderr)
                failed = True
                continue
            print(describe(reports[-1]))
    except (ImportError, OSError, ValueError) as error:
        print(f"opforge_library modelcheck: {error}", file=sys.stderr)
        return 2
    if not reports:
        return 2
    documents = [report.to_dict() for report in reports]
    Path(args.report).write_text(
        json.dumps(documents if args.model == "all" else documents[0], indent=1, allow_nan=False)
        + "\n"
    )
    return 2 if failed else 0
