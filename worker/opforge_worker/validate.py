"""Standalone validation of candidate files and directories of them, without a daemon.

    python -m opforge_worker validate PATH... --device cuda|interpreter

One file per operator, named after it: `exp.py`, `nn.functional.relu.py`, or per OpInfo variant
of it: `softmax.with_dtype.py`. The file holds what a `test` job's `source` holds
(worker/CANDIDATE.md). Operator names contain dots themselves, so a file name is read against the
OpInfo database: the longest leading part (up to a dot) that names an operator is the operator,
and what follows it, if anything, names its variant. Optional comment markers:

    # opforge: wrapper=my_exp                the wrapper's name
    # opforge: variant=with_dtype            the OpInfo variant (default: the file name's)
    # opforge: variants=default,with_dtype   several variants, one result each

`default` names the operator's default variant (OpInfo's empty `variant_test_name`). A variant
marker overrides the file name's variant, which must then be among the marked ones; when a name
reads as two (operator, variant) pairs, only a marker can tell which is meant. A name that reads
as no OpInfo still gets a result row, `invalid`, naming what it asked for.

Without a wrapper marker, the wrapper is the first top-level function of these that the file
defines: `<op>_wrapper`, then `<op>` (dots as underscores: `nn_functional_relu_wrapper`), then the
only top-level function that is not a `@triton.jit` kernel. The file is parsed, never run, here.

Every candidate runs every sample (`mode: all`) of each dtype: the requested ones, or else every
dtype the operator supports on the device among bfloat16, float16, float32, int32, int64; and of
each sample set: the requested ones, or else all of them (`sample_sets.SETS`).

One harness serves the whole run, so start-up is paid once whatever the number of files and
variants: its candidate process starts before the judge imports torch, and both take their
seconds at once. The operators' metadata and prepared samples come from the sample store
(`sample_store.py`) when it has them, so that a run imports the OpInfo database only to generate
what the store lacks. `StartupClock` times the phases up to the first test.
"""

from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import functools
import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opforge_worker import device_kinds
from opforge_worker.contract import Dtype, Outcome, TestMode

#: The dtypes a run checks by default: the contract's, less the ones a bring-up does not target.
TARGET_DTYPES = tuple(d.value for d in Dtype if d not in (Dtype.FLOAT64, Dtype.BOOL))
_MARKER = re.compile(r"^#\s*opforge:\s*(wrapper|variants?)\s*=\s*([\w.,-]+)\s*$", re.MULTILINE)
#: What a variant marker calls the operator's default variant (OpInfo's empty variant name).
DEFAULT_VARIANT = "default"
#: The start-up phases of a run, in order (``StartupClock``): the process's start to
#: ``validate_paths`` (interpreter, command line); the candidate process's spawn and the judge's
#: imports (torch, the harness); the harness; reading the files against the operators' metadata
#: (from the sample store, else the OpInfo database's import); the wait for the candidate process
#: to be ready, what is left of its start-up then.
STARTUP_PHASES = ("python", "judge_imports", "harness", "op_db", "candidate_process")


@dataclass(frozen=True)
class Candidate:
    path: Path
    op: str
    variant: str
    wrapper: str
    source: str
    #: Why the file names no single (operator, variant) to test; empty when it does.
    problem: str = ""


def _is_kernel(function: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(decorator) for decorator in function.decorator_list)


def default_wrapper(op: str, source: str) -> str:
    """The wrapper by convention (see the module docstring); `<op>_wrapper` when the source
    does not parse or nothing matches, so that the harness names the problem."""
    from opforge_worker.linter import parse_source

    base = op.replace(".", "_")
    conventional = f"{base}_wrapper"
    try:
        tree = parse_source(source)
    except SyntaxError:
        return conventional
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    names = {function.name for function in functions}
    for name in (conventional, base):
        if name in names:
            return name
    plain = [function.name for function in functions if not _is_kernel(function)]
    return plain[0] if len(plain) == 1 else conventional


@functools.cache
def variants_by_op() -> dict[str, tuple[str, ...]]:
    """Each operator of the OpInfo database with its variants' names, in op_db order."""
    from opforge_worker.samples import SampleCache

    return SampleCache().variants()


def _describe(op: str, variant: str) -> str:
    return f"{op} variant {variant!r}" if variant else f"{op} (default variant)"


def resolve_name(
    stem: str, marked: list[str], variants_of: dict[str, tuple[str, ...]]
) -> tuple[str, list[str], str]:
    """The operator a file name (less `.py`) names, the variants to test and what is wrong
    ("" if nothing), given the marked variants and each operator's variants (module docstring).
    A name that reads as no operator is the operator, for the harness to name as unknown."""
    cuts = [len(stem)] + [index for index in range(len(stem) - 1, 0, -1) if stem[index] == "."]
    ops = [stem[:cut] for cut in cuts if stem[:cut] in variants_of]  # the longest first

    def named_variant(op: str) -> str:
        return stem[len(op) + 1 :]

    if marked:
        agreeing = [op for op in ops if named_variant(op) in marked]
        op = (agreeing or ops or [stem])[0]
        named = named_variant(op)
        if named and named not in marked:
            return (
                op,
                [named],
                f"the file name asks for {_describe(op, named)} but its marker for "
                f"{', '.join(repr(variant or DEFAULT_VARIANT) for variant in marked)}",
            )
        return op, marked, ""
    readings = [op for op in ops if named_variant(op) in variants_of[op]]
    if len(readings) > 1:
        described = " or ".join(_describe(op, named_variant(op)) for op in readings)
        return (
            readings[0],
            [named_variant(readings[0])],
            f"the file name reads as {described}: name the variant with a marker line "
            f"`# opforge: variant=...`",
        )
    op = (readings or ops or [stem])[0]
    return op, [named_variant(op)], ""


def read_candidates(
    path: Path, variants_of: dict[str, tuple[str, ...]] | None = None
) -> list[Candidate]:
    """The tests a candidate file asks for: one Candidate per (operator, variant), against
    each operator's variants (default: op_db's, ``variants_by_op``)."""
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read the candidate: {error}") from None
    wrapper, marked = "", []
    for key, value in _MARKER.findall(source):
        if key == "wrapper":
            wrapper = value
            continue
        for variant in filter(None, value.split(",")):
            variant = "" if variant == DEFAULT_VARIANT else variant
            if variant not in marked:
                marked.append(variant)
    op, variants, problem = resolve_name(
        path.name.removesuffix(".py"), marked, variants_of or variants_by_op()
    )
    wrapper = wrapper or default_wrapper(op, source)
    return [Candidate(path, op, variant, wrapper, source, problem) for variant in variants]


def candidate_files(paths: list[Path]) -> list[Path]:
    """The candidate files of ``paths``: each file named, each directory's `*.py`, in order,
    each once; ValueError naming a path that is neither or a directory without candidates."""
    found: dict[Path, Path] = {}  # by the resolved path
    for path in paths:
        if path.is_dir():
            files = sorted(file for file in path.glob("*.py") if file.is_file())
            if not files:
                raise ValueError(f"{path}: no candidate files (*.py)")
        elif path.is_file():
            if path.suffix != ".py":
                raise ValueError(f"{path}: not a candidate file (*.py)")
            files = [path]
        else:
            raise ValueError(f"{path}: no such file or directory")
        for file in files:
            found.setdefault(file.resolve(), file)
    return list(found.values())


def discover(directory: Path) -> list[Candidate]:
    if not directory.is_dir():
        raise ValueError(f"{directory}: not a directory")
    return [
        candidate for file in candidate_files([directory]) for candidate in read_candidates(file)
    ]


def device_dtypes(opinfo, device_kind: str) -> list[str]:
    """The target dtypes `opinfo` supports on the device kind's OpInfo device."""
    supported = {
        str(dtype).removeprefix("torch.")
        for dtype in opinfo.supported_dtypes(device_kinds.lookup(device_kind).opinfo_device)
    }
    return [dtype for dtype in TARGET_DTYPES if dtype in supported]


def _invalid(entry: dict[str, Any], error: str) -> dict[str, Any]:
    """A candidate the harness never saw: the file names no operator or no dtype to test."""
    return {
        **entry,
        "dtypes": [],
        "outcome": "invalid",
        "tests_run": 0,
        "tests_passed": 0,
        "elapsed_s": 0.0,
        "error": error,
    }


def validate_one(
    harness,
    candidate: Candidate,
    device_kind: str,
    dtypes: list[str] | None,
    timeout_s: float,
    seed: int,
    sets: tuple[str, ...],
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "file": candidate.path.name,
        "path": str(candidate.path),
        "op": candidate.op,
        "variant": candidate.variant,
        "wrapper": candidate.wrapper,
    }
    if candidate.problem:
        return _invalid(entry, candidate.problem)
    opinfo = harness.samples.find(candidate.op, candidate.variant)
    if opinfo is None:
        variant = f" variant {candidate.variant!r}" if candidate.variant else ""
        known = harness.samples.variants().get(candidate.op)
        variants = (
            f" (its variants: {', '.join(repr(name or DEFAULT_VARIANT) for name in known)})"
            if known
            else ""
        )
        return _invalid(entry, f"no OpInfo named {candidate.op!r}{variant}{variants}")
    supported = device_dtypes(opinfo, device_kind)
    chosen = [dtype for dtype in supported if dtype in (dtypes or supported)]
    if not chosen:
        return _invalid(
            entry,
            f"none of {', '.join(dtypes or TARGET_DTYPES)} is supported on {device_kind} "
            f"(supported: {', '.join(supported) or 'none'})",
        )
    request = {
        "op": candidate.op,
        "variant": candidate.variant,
        "source": candidate.source,
        "wrapper": candidate.wrapper,
        "dtypes": chosen,
        "mode": TestMode.ALL,
        "sample_sets": list(sets),
        "seed": seed,
        "timeout_s": timeout_s,
    }
    started = time.monotonic()
    payload = harness.run_test(request, cancel or threading.Event())
    return {**entry, "dtypes": chosen, "elapsed_s": round(time.monotonic() - started, 3), **payload}


class StartupClock:
    """The seconds each phase of a run's start-up took (``STARTUP_PHASES``), each from the end
    of the one before; the first from ``origin`` (CLOCK_BOOTTIME), by default the clock's
    creation."""

    def __init__(self, origin: float | None = None):
        self.phases: dict[str, float] = {}
        self._last = _now() if origin is None else origin

    @classmethod
    def from_process_start(cls) -> StartupClock:
        """A clock whose first phase counts from this process's start, the interpreter's own
        start-up included (Linux: /proc/self/stat's start time, in clock ticks since boot)."""
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        return cls(int(fields[19]) / os.sysconf("SC_CLK_TCK"))

    def mark(self, phase: str) -> None:
        """End ``phase`` now."""
        now = _now()
        self.phases[phase] = round(now - self._last, 3)
        self._last = now


def _now() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


@dataclass(frozen=True)
class Validation:
    """What one run found: a result row per (file, variant), and how it started."""

    results: list[dict[str, Any]]
    #: The seconds of each of ``STARTUP_PHASES``: the start-up before the first test.
    startup_s: dict[str, float]
    #: Candidate processes the run started: one, and a replacement for each one discarded (a
    #: crash, a timeout, a tampering candidate).
    processes_started: int


def validate_paths(
    paths: list[Path],
    device_kind: str,
    dtypes: list[str] | None = None,
    timeout_s: float = 60.0,
    seed: int = 0,
    clock: StartupClock | None = None,
    sets: list[str] | None = None,
    cache_dir: Path | None = None,
    sample_store: bool = True,
    jobs: int = 1,
) -> Validation:
    """Validate the candidates of ``paths`` (files, directories of them) with ``jobs``
    harnesses, each with its own candidate process, taking the candidates in turn; the results
    come in the candidates' order whatever order they end in.

    The first candidate process starts first, before the judge imports torch: both imports then
    take their seconds at once. With ``sample_store``, the operators' metadata and prepared samples
    come from the store under ``cache_dir`` (``sample_store.py``; default: the worker's cache)
    and the OpInfo database is imported only to generate what it lacks."""
    from opforge_worker import compile_cache
    from opforge_worker.sandbox import CandidateProcess, SandboxStartError, candidate_options
    from opforge_worker.settings import load_settings

    clock = clock or StartupClock()
    clock.mark("python")
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    unknown = set(dtypes or ()) - set(TARGET_DTYPES)
    if unknown:
        raise ValueError(
            f"unknown dtypes {', '.join(sorted(unknown))} (known: {', '.join(TARGET_DTYPES)})"
        )
    files = candidate_files(paths)
    settings = load_settings()
    compile_root = compile_cache.default_root()
    compile_root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="opforge-validate-")).resolve()
    early: CandidateProcess | None = CandidateProcess(
        scratch / "process-1", candidate_options(settings, device_kind, compile_root)
    )
    harnesses: list = []
    try:
        try:
            early.spawn()
        except SandboxStartError:  # the harness starts another; the first test reports it
            early = None
        from opforge_worker import sample_sets
        from opforge_worker import sample_store as store_module
        from opforge_worker.harness import Harness
        from opforge_worker.samples import SampleCache

        chosen_sets = sample_sets.check_names(sets or sample_sets.SETS)
        clock.mark("judge_imports")
        store = None
        if sample_store:
            store = store_module.SampleStore(cache_dir / "samples" if cache_dir else None)
        samples = SampleCache(store=store)
        harnesses.append(
            Harness(
                device_kind=device_kind, scratch_root=scratch, sample_cache=samples, standby=early
            )
        )
        clock.mark("harness")
        variants_of = samples.variants()
        candidates = [c for path in files for c in read_candidates(path, variants_of)]
        clock.mark("op_db")
        with contextlib.suppress(SandboxStartError):  # the first test reports it
            harnesses[0].process()
        clock.mark("candidate_process")
        # The other slots start their candidate processes with their first tests, at once.
        harnesses += [
            Harness(
                device_kind=device_kind, scratch_root=scratch / f"slot-{slot}", sample_cache=samples
            )
            for slot in range(1, min(jobs, len(candidates)))
        ]
        results = _judge_in_slots(
            harnesses,
            candidates,
            lambda harness, candidate: validate_one(
                harness, candidate, device_kind, dtypes, timeout_s, seed, chosen_sets
            ),
        )
        return Validation(
            results, clock.phases, sum(harness.processes_started for harness in harnesses)
        )
    finally:
        for harness in harnesses:
            harness.close()
        if not harnesses and early is not None:
            early.kill()
        shutil.rmtree(scratch, ignore_errors=True)


def _judge_in_slots(
    harnesses: list, candidates: list[Candidate], judge, cancel: threading.Event | None = None
) -> list[dict[str, Any]]:
    """``judge(harness, candidate)`` of every candidate, each harness judging one at a time
    and taking the next candidate not yet taken as it ends; the results in ``candidates``'
    order. A harness is one candidate process: never two tests at once in one. Once ``cancel``
    is set no candidate is taken (the result of one not judged is ``{}``)."""
    results: list[dict[str, Any]] = [{}] * len(candidates)
    taken = iter(range(len(candidates)))
    lock = threading.Lock()
    failed = threading.Event()  # a slot's exception stops the others taking more
    cancel = cancel or threading.Event()

    def slot(harness) -> None:
        while not failed.is_set() and not cancel.is_set():
            with lock:
                index = next(taken, None)
            if index is None:
                return
            try:
                results[index] = judge(harness, candidates[index])
            except BaseException:
                failed.set()
                raise

    with concurrent.futures.ThreadPoolExecutor(len(harnesses)) as pool:
        for finished in [pool.submit(slot, harness) for harness in harnesses]:
            finished.result()  # a slot's exception is the run's
    return results


def validate_directory(
    directory: Path,
    device_kind: str,
    dtypes: list[str] | None = None,
    timeout_s: float = 60.0,
    seed: int = 0,
    sets: list[str] | None = None,
) -> list[dict[str, Any]]:
    if not directory.is_dir():
        raise ValueError(f"{directory}: not a directory")
    return validate_paths([directory], device_kind, dtypes, timeout_s, seed, sets=sets).results


def format_table(results: list[dict[str, Any]]) -> str:
    header = ("op", "dtypes", "passed/run", "outcome", "time")
    rows = [
        (
            f"{r['op']}.{r['variant']}" if r["variant"] else r["op"],
            ",".join(r["dtypes"]) or "-",
            f"{r['tests_passed']}/{r['tests_run']}",
            r["outcome"],
            f"{r['elapsed_s']:.2f}s",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *rows]
    ]
    passed = sum(r["outcome"] == Outcome.PASS for r in results)
    lines.append(f"{passed}/{len(results)} candidates passed")
    for result in results:
        problem = result.get("error") or (result.get("failure") or {}).get("message")
        variant = f" [{result['variant']}]" if result["variant"] else ""
        if result["outcome"] != Outcome.PASS and problem:
            lines.append(f"  {result['file']}{variant}: {str(problem).splitlines()[0][:200]}")
        only = model_set_only_failure(result)
        if only:
            lines.append(
                f"  {result['file']}{variant}: passes OpInfo's sets but fails {only}, "
                "the model's own inputs"
            )
    return "\n".join(lines)


def model_set_only_failure(result: dict[str, Any]) -> str:
    """The model set (``model:<name>``) a result fails while passing every other set it ran,
    else ""."""
    from opforge_worker.model_sets import PREFIX  # torch: the results hold its verdicts anyway

    failed = ""
    for counts in (result.get("per_dtype") or {}).values():
        for name, count in (counts.get("sets") or {}).items():
            if count["passed"] == count["run"]:
                continue
            if not name.startswith(PREFIX):
                return ""
            failed = failed or name
    return failed


# -- an installed backend (validate --backend) -----------------------------------------------------

#: The wrapper of the source that calls an operator through torch, with the backend enabled.
BACKEND_WRAPPER = "backend_call"
#: A registered overload's outcome when its kernel ran in none of the tests that dispatch to it.
NEVER_REACHED = "never_reached"
#: A registered overload's outcome when no OpInfo of the catalog dispatches to it.
UNJUDGED = "unjudged"


@dataclass(frozen=True)
class BackendValidation:
    """What ``validate_backend`` found: what enabling the backend registered, a verdict per
    registered overload (``overload_verdicts``) and the OpInfos' results behind them."""

    backend: dict[str, Any]
    #: Overload -> {dispatch key: where the dispatcher says its kernel was registered}.
    registered: dict[str, dict[str, str]]
    overloads: list[dict[str, Any]]
    results: list[dict[str, Any]]


def operator_path(opinfo) -> str:
    """The torch name that calls ``opinfo``'s operator (``torch.nn.functional.relu``), "" when
    it has none (a lambda, a method)."""
    import torch

    op = opinfo.op
    found = [f"torch.{opinfo.name}"]
    if getattr(op, "__module__", None) and getattr(op, "__name__", None):
        found.append(f"{op.__module__}.{op.__name__}")
    for path in found:
        value: Any = torch
        for part in path.split(".")[1:] if path.startswith("torch.") else ():
            value = getattr(value, part, None)
        if value is op:
            return path
    return ""


def backend_candidate(package: str, opinfo) -> Candidate:
    """The candidate of an OpInfo under a backend: its operator called through torch, which
    dispatches to the backend's kernels in a candidate process that enabled it."""
    path = operator_path(opinfo)
    source = (
        "# The operator through torch, the backend enabled in this process (validate --backend).\n"
        f"def {BACKEND_WRAPPER}(*args, **kwargs):\n    return {path}(*args, **kwargs)\n"
    )
    problem = "" if path else f"{opinfo.name}'s OpInfo calls no torch function that can be named"
    return Candidate(
        Path(package), opinfo.name, opinfo.variant_test_name, BACKEND_WRAPPER, source, problem
    )


def validate_backend(
    package: str,
    device_kind: str,
    enable: str | None = None,
    dtypes: list[str] | None = None,
    timeout_s: float = 60.0,
    seed: int = 0,
    sets: list[str] | None = None,
    ops: list[str] | None = None,
    cache_dir: Path | None = None,
    jobs: int = 1,
    toolchain_defects: tuple = (),
    cancel: threading.Event | None = None,
) -> BackendValidation:
    """Judge the installed ``package`` through the dispatcher: enable it (``enable``, default
    ``package.enable``) in the candidate process, and run every OpInfo (of ``ops``, default the
    catalog's) that dispatches to an overload it registered, every sample of each set, with the
    judge's references and tolerances, ``jobs`` OpInfos at once (each slot a candidate process
    of its own that enabled the package). ``toolchain_defects``: what the conformance probes
    found (a failure they explain is device_defect, as in a worker's tests); ``cancel`` stops it
    between tests, the verdicts so far returned. ValueError when the package cannot be found,
    RuntimeError when enabling it fails."""
    from opforge_worker import backend, sample_sets
    from opforge_worker import catalog as catalog_module
    from opforge_worker import sample_store as store_module
    from opforge_worker.harness import Harness
    from opforge_worker.opinfo import find_opinfo
    from opforge_worker.samples import SampleCache
    from opforge_worker.sandbox import SandboxStartError

    unknown = set(dtypes or ()) - set(TARGET_DTYPES)
    if unknown:
        raise ValueError(
            f"unknown dtypes {', '.join(sorted(unknown))} (known: {', '.join(TARGET_DTYPES)})"
        )
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    spec = backend.locate(package, enable)
    chosen_sets = sample_sets.check_names(sets or sample_sets.SETS)
    store = store_module.SampleStore(cache_dir / "samples" if cache_dir else None)
    samples = SampleCache(store=store)

    def slot_harness() -> Harness:
        return Harness(
            device_kind=device_kind,
            sample_cache=samples,
            static_gate=False,  # the source is ours; the backend's code is what is judged
            backend=spec,
            toolchain_defects=toolchain_defects,
        )

    harnesses = [slot_harness()]
    try:
        harness = harnesses[0]
        try:
            enabled = harness.process().backend or {}
        except SandboxStartError as error:
            raise RuntimeError(f"the candidate process did not start: {error}") from None
        if enabled.get("error") or "registered" not in enabled:
            raise RuntimeError(
                f"{spec.enable}() failed in the candidate process:\n"
                f"{enabled.get('error') or 'no report of what it registered'}"
            )
        registered = enabled["registered"]
        catalog = catalog_module.require_known(
            catalog_module.build(device_kind, ops=ops, cache_directory=cache_dir)
        )
        judged = [
            (entry, sorted(set(entry["aten_overloads"]) & set(registered)))
            for entry in catalog["operators"]
        ]
        judged = [(entry, through) for entry, through in judged if through]
        # The OpInfo itself, not the sample store's metadata: its operator is the call.
        candidates = [
            backend_candidate(package, find_opinfo(entry["name"], entry["variant"]))
            for entry, _ in judged
        ]
        harnesses += [slot_harness() for _ in range(1, min(jobs, len(candidates)))]
        verdicts = _judge_in_slots(
            harnesses,
            candidates,
            lambda harness, candidate: validate_one(
                harness, candidate, device_kind, dtypes, timeout_s, seed, chosen_sets, cancel
            ),
            cancel,
        )
        results = [
            {**result, "overloads": through}
            for result, (_, through) in zip(verdicts, judged, strict=True)
            if result  # not judged: cancelled
        ]
    finally:
        for harness in harnesses:
            harness.close()
    return BackendValidation(
        spec.to_dict(),
        registered,
        overload_verdicts(registered, enabled.get("counted", []), results),
        results,
    )


def overload_verdicts(
    registered: dict[str, dict[str, str]], counted: list[str], results: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """A verdict per registered overload, from the results of the OpInfos that dispatch to it
    or reached its kernel: the first of theirs that did not pass, else pass; ``never_reached``
    when its kernel is counted (``counted``) and ran in none of them; ``unjudged`` when no
    OpInfo dispatches to it. ``reached`` is its kernel's calls, None where they are not
    counted (registered other than through ``torch.library``)."""
    verdicts = []
    for name, keys in sorted(registered.items()):
        calls = sum((result.get("backend_calls") or {}).get(name, 0) for result in results)
        through = [
            result
            for result in results
            if name in result["overloads"] or (result.get("backend_calls") or {}).get(name)
        ]
        failed = [result for result in through if result["outcome"] != Outcome.PASS]
        reached = calls if name in counted else None
        if not through:
            outcome, problem = UNJUDGED, "no OpInfo of the catalog dispatches to it"
        elif reached == 0:
            outcome = NEVER_REACHED
            problem = (
                f"registered, never reached: its kernel ran in none of the "
                f"{sum(result['tests_run'] for result in through)} tests of "
                f"{', '.join(_label(result) for result in through)}"
            )
        elif failed:
            outcome = failed[0]["outcome"]
            problem = f"{_label(failed[0])}: {_problem(failed[0])}"
        else:
            outcome, problem = Outcome.PASS.value, ""
        verdicts.append(
            {
                "overload": name,
                "dispatch_keys": sorted(keys),
                "registered_at": sorted(set(keys.values())),
                "opinfos": [_label(result) for result in through],
                "reached": reached,
                "outcome": str(outcome),
                "tests_run": sum(result["tests_run"] for result in through),
                "tests_passed": sum(result["tests_passed"] for result in through),
                "problem": problem,
            }
        )
    return verdicts


def _label(result: dict[str, Any]) -> str:
    return f"{result['op']}.{result['variant']}" if result["variant"] else result["op"]


def _problem(result: dict[str, Any]) -> str:
    problem = result.get("error") or (result.get("failure") or {}).get("message") or ""
    return str(problem).splitlines()[0][:200] if problem else ""


def format_backend_table(validation: BackendValidation) -> str:
    """The per-overload verdicts, then the OpInfos' results as ``format_table`` prints them."""
    header = ("overload", "keys", "opinfos", "reached", "passed/run", "outcome")
    rows = [
        (
            verdict["overload"],
            ",".join(verdict["dispatch_keys"]),
            ",".join(verdict["opinfos"]) or "-",
            "?" if verdict["reached"] is None else str(verdict["reached"]),
            f"{verdict['tests_passed']}/{verdict['tests_run']}",
            verdict["outcome"],
        )
        for verdict in validation.overloads
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    verdicts = validation.overloads
    judged = [verdict for verdict in verdicts if verdict["outcome"] != UNJUDGED]
    passed = sum(verdict["outcome"] == Outcome.PASS for verdict in judged)
    lines.append(
        f"{validation.backend['package']}: {len(verdicts)} overloads registered, "
        f"{len(judged)} judged, {passed} passed"
    )
    lines += [f"  {v['overload']}: {v['problem']}" for v in verdicts if v["problem"]]
    if any(verdict["reached"] is None for verdict in verdicts):
        lines.append(
            "  reached ?: registered other than through torch.library, its calls not counted"
        )
    if validation.results:
        lines += ["", format_table(validation.results)]
    return "\n".join(lines)


def backend_passed(validation: BackendValidation) -> bool:
    """Whether every judged overload passed (an unjudged one is no failure of the backend's)."""
    return all(verdict["outcome"] in (Outcome.PASS, UNJUDGED) for verdict in validation.overloads)
