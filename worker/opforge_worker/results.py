"""The result payload of a ``test`` job (messages/PROTOCOL.md, "test"), and how it is built.

Shape (every key always present; msgpack-able: str, int, float, bool, None, lists, maps)::

    {
      "outcome": str,            # pass | compile_error | runtime_error | crash | timeout |
                                 # accuracy_error | cheat_detected | lint_violation |
                                 # harness_error | device_defect. device_defect: an accuracy
                                 # failure that a recorded defect of the toolchain explains (the
                                 # test passes with the defect corrected: harness.py); never a
                                 # pass. lint_violation: the static gate refused the
                                 # source for a mistake of dialect or form only (check static);
                                 # cheat_detected: a check found a forbidden action; pass when
                                 # every dtype tested passed (skipped ones, each with its
                                 # reason, are not tested); harness_error when none could be
      "tests_run": int,          # samples run to a verdict, over all dtypes
      "tests_passed": int,
      "per_dtype": {             # one entry per requested dtype, in request order
        "<dtype>": {"run": int, "passed": int,
                    "outcome": str,    # an outcome above, or "skipped" (not run: the test stopped
                                       # at an earlier failure, or before any sample could run,
                                       # or the dtype cannot be tested here)
                    "sets": {          # one entry per requested sample set, in sample_sets.SETS
                      "<set>": {"run": int, "passed": int},  # order; {} for a bad request
                    },                                      # (outcome harness_error)
                    "reason": str},    # only for a dtype that cannot be tested here (no CPU
                                       # reference for it in this torch): why it was skipped
      },
      "failure": None | {        # the first failure (mode first_failure stops there)
        "dtype": str,            # "" when the failure is not tied to a dtype (loading the source)
        "sample_set": str,       # the set of the failing sample (sample_sets.SETS); "" when none
        "sample_index": int,     # its index within that set for that dtype; -1 when none
        "sample": str,           # the set, the index and the sample's name when it has one, then
                                 # shapes, dtypes, strides and arguments: "extremal #2 (nan/inf
                                 # mix): (Tensor...)", "extremal #2 (nan/inf mix), fresh values:
                                 # (Tensor...)" for its replay (seed + 1); "" when no sample
        "message": str,          # one paragraph saying what was wrong
        "check": str,            # which check failed, a contract.FailureCheck: compile, runtime,
                                 # crash, timeout, accuracy, layout (outputs whose values match
                                 # but whose strides are not ATen's, where the operator's layout
                                 # is contract: data/layout_contract.yaml), harness, static (the
                                 # source was refused before it ran), or a dynamic check:
                                 # fallback, no_launch, host_read, thread, stream, output_type,
                                 # output_device, aliasing, mutation, fresh_inputs, integrity,
                                 # dispatch_escape, sandbox
        "findings": [str],       # every dynamic-check finding of that call ("check: message");
                                 # for static, every violation that refused the source ("static:
                                 # <rule> at line <n> `<text>`: <hint>"), those of the outcome's
                                 # class first
        "compile_log": str,      # compile_error: the Triton/Python compiler's message
        "backtrace": str,        # runtime_error and crash: the Python traceback (a crash by a
                                 # fatal signal: the stack at the fault, the candidate's frames
                                 # first); every text names the candidate's file "candidate.py"
                                 # and no scratch path
        "cuda_error": str,       # crash on a device fault: the CUDA error text
        "signal": str,           # crash: the signal that ended the process, e.g. "SIGSEGV"
        "exit_code": int | None, # crash: the exit status when the process exited by itself
        "diff": None | {...},    # accuracy_error, and cheat_detected of check fresh_inputs:
                                 # the contract's tensor_diff (compare.tensor_diff): reason,
                                 # shapes, dtypes; atol, rtol, max_abs_error, max_rel_error,
                                 # nan_inf_mismatches, signed_zero_mismatches (only when some)
                                 # under a tolerance; mismatched, total, first_mismatches
                                 # [{index, actual, expected, precise}] when values differ, the
                                 # values as repr text; precise, and "accepted" saying what
                                 # passes, only where the dtype has a precise reference
                                 # (judge.Reference.precise)
        "defects": [{...}],      # device_defect: the toolchain defects (the contract's
                                 # toolchain_defect: probe, reproducer, workaround, patch) that
                                 # explain the failure; absent otherwise
        "stdout": str, "stderr": str,   # what the candidate printed during that call (capped)
      },
      "compile_s": float,        # time spent compiling kernels (0 on the interpreter)
      "run_s": float,            # time spent in wrapper calls, compile excluded
      "sandbox": {str: str},     # which containment layers were in force (namespaces, network,
                                 # landlock, limits, environment); {} when no process started
      "contract": [str],         # the rules of the settings (signed_zeros) and of the device
                                 # kind's numeric contract (flush-to-zero) that passed samples
                                 # the strict comparison failed, each with how many: "subnormal
                                 # input: this device (cuda) flushes bfloat16, float32 subnormals
                                 # to zero: 2 samples"; [] when none did (judge.Judge)
      "backend_calls": {str: int},  # validate --backend only: calls of the enabled backend's
                                 # kernels by overload (aten.abs.default), those called
    }
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opforge_worker.contract import OUTCOMES, DtypeOutcome, FailureCheck, Outcome, TensorDiff

__all__ = ["OUTCOMES", "SKIPPED", "Failure", "ResultBuilder"]

SKIPPED = DtypeOutcome.SKIPPED.value


@dataclass
class Failure:
    outcome: str
    check: FailureCheck
    message: str
    dtype: str = ""
    sample_set: str = ""
    sample_index: int = -1
    sample: str = ""
    findings: list[str] = field(default_factory=list)
    compile_log: str = ""
    backtrace: str = ""
    cuda_error: str = ""
    signal: str = ""
    exit_code: int | None = None
    diff: TensorDiff | None = None
    stdout: str = ""
    stderr: str = ""

    def to_payload(self) -> dict:
        payload = dict(self.__dict__)
        del payload["outcome"]
        payload["diff"] = self.diff.to_dict() if self.diff else None
        return payload


@dataclass
class ResultBuilder:
    """Accumulates verdicts while a test runs; ``payload()`` gives the documented map."""

    dtypes: list[str]
    #: The sample sets the test draws, known once its request is checked.
    sample_sets: tuple[str, ...] = ()
    #: Samples run and passed by (dtype, set).
    run: dict[tuple[str, str], int] = field(default_factory=dict)
    passed: dict[tuple[str, str], int] = field(default_factory=dict)
    dtype_outcome: dict[str, str] = field(default_factory=dict)
    #: Why each dtype that cannot be tested here was skipped.
    skip_reasons: dict[str, str] = field(default_factory=dict)
    failure: Failure | None = None
    compile_s: float = 0.0
    run_s: float = 0.0
    sandbox: dict = field(default_factory=dict)
    #: The judge's ``contract_notes``: rule -> samples it passed.
    contract_notes: dict[str, int] = field(default_factory=dict)
    #: Calls of an enabled backend's kernels by overload (``validate --backend``), else None.
    backend_calls: dict[str, int] | None = None

    def count_backend_calls(self, calls) -> None:
        """Add one reply's ``backend_calls`` (from the candidate process: checked here)."""
        if self.backend_calls is None or not isinstance(calls, dict):
            return
        for name, count in calls.items():
            if isinstance(name, str) and type(count) is int and count > 0:
                self.backend_calls[name] = self.backend_calls.get(name, 0) + count

    def record_pass(self, dtype: str, sample_set: str) -> None:
        key = (dtype, sample_set)
        self.run[key] = self.run.get(key, 0) + 1
        self.passed[key] = self.passed.get(key, 0) + 1

    def record_failure(self, failure: Failure) -> None:
        """A sample's failure (counted as run), or one tied to no sample (dtype "" or index -1)."""
        if failure.dtype and failure.sample_index >= 0:
            key = (failure.dtype, failure.sample_set)
            self.run[key] = self.run.get(key, 0) + 1
        if failure.dtype:
            self.dtype_outcome.setdefault(failure.dtype, failure.outcome)
        if self.failure is None:
            self.failure = failure

    def record_skipped(self, dtype: str, reason: str) -> None:
        """``dtype`` cannot be tested here: it is skipped with ``reason``, the others run."""
        self.skip_reasons[dtype] = reason

    @property
    def tested(self) -> list[str]:
        """The dtypes that were not skipped for a reason of their own."""
        return [dtype for dtype in self.dtypes if dtype not in self.skip_reasons]

    def payload(self) -> dict:
        per_dtype = {}
        for dtype in self.dtypes:
            sets = {
                name: {
                    "run": self.run.get((dtype, name), 0),
                    "passed": self.passed.get((dtype, name), 0),
                }
                for name in self.sample_sets
            }
            run = sum(count for (of, _), count in self.run.items() if of == dtype)
            passed = sum(count for (of, _), count in self.passed.items() if of == dtype)
            outcome = self.dtype_outcome.get(dtype) or (
                DtypeOutcome.PASS.value if run and run == passed else SKIPPED
            )
            per_dtype[dtype] = {"run": run, "passed": passed, "outcome": outcome, "sets": sets}
            if dtype in self.skip_reasons:
                per_dtype[dtype]["reason"] = self.skip_reasons[dtype]
        payload = {
            "outcome": self.failure.outcome if self.failure else Outcome.PASS.value,
            "tests_run": sum(self.run.values()),
            "tests_passed": sum(self.passed.values()),
            "per_dtype": per_dtype,
            "failure": self.failure.to_payload() if self.failure else None,
            "compile_s": round(self.compile_s, 6),
            "run_s": round(self.run_s, 6),
            "sandbox": self.sandbox,
            "contract": [
                f"{rule}: {count} sample{'s' if count != 1 else ''}"
                for rule, count in self.contract_notes.items()
            ],
        }
        if self.backend_calls is not None:
            payload["backend_calls"] = dict(sorted(self.backend_calls.items()))
        return payload
