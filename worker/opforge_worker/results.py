"""The result payload of a ``test`` job (messages/PROTOCOL.md, "test"), and how it is built.

Shape (every key always present; msgpack-able: str, int, float, bool, None, lists, maps)::

    {
      "outcome": str,            # pass | compile_error | runtime_error | crash | timeout |
                                 # accuracy_error | cheat_detected | harness_error
      "tests_run": int,          # samples run to a verdict, over all dtypes
      "tests_passed": int,
      "per_dtype": {             # one entry per requested dtype, in request order
        "<dtype>": {"run": int, "passed": int,
                    "outcome": str},   # an outcome above, or "skipped" (not run: the test stopped
                                       # at an earlier failure, or before any sample could run)
      },
      "failure": None | {        # the first failure (mode first_failure stops there)
        "dtype": str,            # "" when the failure is not tied to a dtype (loading the source)
        "sample_index": int,     # index into the OpInfo's samples for that dtype; -1 when none
        "sample": str,           # shapes, dtypes, strides and arguments of that sample
        "message": str,          # one paragraph saying what was wrong
        "check": str,            # which check failed: compile, runtime, crash, timeout, accuracy,
                                 # harness, static (the source was refused before it ran), or a
                                 # dynamic check: fallback, no_launch, host_read, thread, stream,
                                 # output_type, output_device, aliasing, mutation, fresh_inputs,
                                 # integrity, dispatch_escape, sandbox
        "findings": [str],       # every dynamic-check finding of that call ("check: message");
                                 # for static, every violation that refused the source ("static:
                                 # <rule> at line <n> `<text>`: <hint>")
        "compile_log": str,      # compile_error: the Triton/Python compiler's message
        "backtrace": str,        # runtime_error and crash: the Python traceback (a crash by a
                                 # fatal signal: the stack at the fault, the candidate's frames
                                 # first); every text names the candidate's file "candidate.py"
                                 # and no scratch path
        "cuda_error": str,       # crash on a device fault: the CUDA error text
        "signal": str,           # crash: the signal that ended the process, e.g. "SIGSEGV"
        "exit_code": int | None, # crash: the exit status when the process exited by itself
        "diff": None | {...},    # accuracy_error: compare.tensor_diff (shapes, dtypes, atol,
                                 # rtol, max_abs_error, max_rel_error, nan_inf_mismatches,
                                 # mismatched, total, first_mismatches [{index, actual, expected}])
        "stdout": str, "stderr": str,   # what the candidate printed during that call (capped)
      },
      "compile_s": float,        # time spent compiling kernels (0 on the interpreter)
      "run_s": float,            # time spent in wrapper calls, compile excluded
      "sandbox": {str: str},     # which containment layers were in force (namespaces, network,
                                 # landlock, limits, environment); {} when no process started
    }
"""

from __future__ import annotations

from dataclasses import dataclass, field

OUTCOMES = (
    "pass",
    "compile_error",
    "runtime_error",
    "crash",
    "timeout",
    "accuracy_error",
    "cheat_detected",
    "harness_error",
)
SKIPPED = "skipped"


@dataclass
class Failure:
    outcome: str
    check: str
    message: str
    dtype: str = ""
    sample_index: int = -1
    sample: str = ""
    findings: list[str] = field(default_factory=list)
    compile_log: str = ""
    backtrace: str = ""
    cuda_error: str = ""
    signal: str = ""
    exit_code: int | None = None
    diff: dict | None = None
    stdout: str = ""
    stderr: str = ""

    def to_payload(self) -> dict:
        payload = dict(self.__dict__)
        del payload["outcome"]
        return payload


@dataclass
class ResultBuilder:
    """Accumulates verdicts while a test runs; ``payload()`` gives the documented map."""

    dtypes: list[str]
    run: dict[str, int] = field(default_factory=dict)
    passed: dict[str, int] = field(default_factory=dict)
    dtype_outcome: dict[str, str] = field(default_factory=dict)
    failure: Failure | None = None
    compile_s: float = 0.0
    run_s: float = 0.0
    sandbox: dict = field(default_factory=dict)

    def record_pass(self, dtype: str) -> None:
        self.run[dtype] = self.run.get(dtype, 0) + 1
        self.passed[dtype] = self.passed.get(dtype, 0) + 1

    def record_failure(self, failure: Failure) -> None:
        """A sample's failure (counted as run), or one tied to no sample (dtype "" or index -1)."""
        if failure.dtype and failure.sample_index >= 0:
            self.run[failure.dtype] = self.run.get(failure.dtype, 0) + 1
        if failure.dtype:
            self.dtype_outcome.setdefault(failure.dtype, failure.outcome)
        if self.failure is None:
            self.failure = failure

    def payload(self) -> dict:
        per_dtype = {}
        for dtype in self.dtypes:
            run, passed = self.run.get(dtype, 0), self.passed.get(dtype, 0)
            outcome = self.dtype_outcome.get(dtype) or (
                "pass" if run and run == passed else SKIPPED
            )
            per_dtype[dtype] = {"run": run, "passed": passed, "outcome": outcome}
        return {
            "outcome": self.failure.outcome if self.failure else "pass",
            "tests_run": sum(self.run.values()),
            "tests_passed": sum(self.passed.values()),
            "per_dtype": per_dtype,
            "failure": self.failure.to_payload() if self.failure else None,
            "compile_s": round(self.compile_s, 6),
            "run_s": round(self.run_s, 6),
            "sandbox": self.sandbox,
        }
