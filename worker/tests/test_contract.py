"""The generated contract: fresh from messages/contract.yaml, and agreeing with the daemon on the
golden frames of tests/fixtures/frames (the GoogleTest tests/test_contract.cpp decodes them too)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import msgpack
import pytest

from opforge_worker import contract, protocol

ROOT = Path(__file__).resolve().parents[2]
FRAMES = ROOT / "tests" / "fixtures" / "frames"


def load_generator(monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "gen_contract", ROOT / "messages" / "gen_contract.py"
    )
    generator = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, generator)  # its dataclasses look themselves up
    spec.loader.exec_module(generator)
    return generator


def test_committed_module_is_what_the_schema_generates(tmp_path, monkeypatch):
    generator = load_generator(monkeypatch)
    fresh = tmp_path / "contract.py"
    assert generator.main([str(ROOT / "messages" / "contract.yaml"), "--python", str(fresh)]) == 0
    committed = Path(contract.__file__).read_text()
    assert committed == fresh.read_text(), (
        "worker/opforge_worker/contract.py is stale: build the daemon, or run "
        "messages/gen_contract.py messages/contract.yaml --python worker/opforge_worker/contract.py"
    )


def test_a_lenient_field_must_be_able_to_read_as_nil(tmp_path, monkeypatch, capsys):
    generator = load_generator(monkeypatch)
    schema = tmp_path / "contract.yaml"
    schema.write_text(
        "version: 1\nenums: {}\nframes: {}\n"
        "structs: {s: {fields: {a: {type: int, lenient: true}}}}\n"
    )
    assert generator.main([str(schema), "--python", str(tmp_path / "c.py")]) == 1
    assert "s.a: lenient needs a T? type, read as nil when not a T" in capsys.readouterr().err


def frame(name: str) -> bytes:
    return (FRAMES / f"{name}.msgpack").read_bytes()


@pytest.mark.parametrize(
    ("name", "schema"),
    [
        ("hello", protocol.WORKER_TO_DAEMON),
        ("worker_heartbeat", protocol.WORKER_TO_DAEMON),
        ("result", protocol.WORKER_TO_DAEMON),
        ("result_diff", protocol.WORKER_TO_DAEMON),
        ("worker_goodbye", protocol.WORKER_TO_DAEMON),
        ("welcome", protocol.DAEMON_TO_WORKER),
        ("daemon_heartbeat", protocol.DAEMON_TO_WORKER),
        ("job", protocol.DAEMON_TO_WORKER),
        ("cancel", protocol.DAEMON_TO_WORKER),
        ("hello_required", protocol.DAEMON_TO_WORKER),
        ("daemon_goodbye", protocol.DAEMON_TO_WORKER),
    ],
)
def test_golden_frames_decode_and_encode_back(name, schema):
    bytes_ = frame(name)
    message = protocol.decode(bytes_, schema)
    typed = schema[message.type].from_dict(message.fields)
    assert typed.to_dict() == message.fields
    assert protocol.encode(message.type, **typed.to_dict()) == bytes_


def test_golden_frames_hold_their_values():
    hello = contract.Hello.from_dict(
        protocol.decode(frame("hello"), protocol.WORKER_TO_DAEMON).fields
    )
    assert (hello.role, hello.device_kind, hello.slots) == ("device", "cuda", 2)
    assert hello.jobs == ["test", "catalog"]
    job = contract.Job.from_dict(protocol.decode(frame("job")).fields)
    assert (job.kind, job.attempt, job.deadline_ms) == (contract.JobKind.TEST, 1, 600000)
    request = contract.TestRequest.from_dict(job.payload)
    assert request.dtypes == ["float32", "bfloat16"]
    assert (request.mode, request.timeout_s, request.sample_sets) == ("first_failure", 30.0, None)
    result = contract.Result.from_dict(
        protocol.decode(frame("result"), protocol.WORKER_TO_DAEMON).fields
    )
    verdict = contract.TestResult.from_dict(result.payload)
    assert verdict.outcome == contract.Outcome.ACCURACY_ERROR
    assert verdict.per_dtype["float32"].sets["sample_inputs"] == contract.SetCount(run=3, passed=2)
    assert verdict.per_dtype["bfloat16"].outcome == "skipped"
    assert verdict.failure.sample_index == 2
    # The open map that workers sent before the diff was typed reads as no diff.
    assert verdict.failure.diff is None


def test_a_typed_diff_reads_from_its_golden_frame():
    result = contract.Result.from_dict(
        protocol.decode(frame("result_diff"), protocol.WORKER_TO_DAEMON).fields
    )
    diff = contract.TestResult.from_dict(result.payload).failure.diff
    assert (diff.reason, diff.actual_shape, diff.expected_dtype) == (
        "values differ",
        [2, 2],
        "float32",
    )
    assert (diff.atol, diff.rtol, diff.max_abs_error, diff.max_rel_error) == (
        1e-5,
        1.3e-6,
        0.5,
        0.25,
    )
    assert (diff.nan_inf_mismatches, diff.signed_zero_mismatches) == (1, 1)
    assert (diff.mismatched, diff.total, diff.accepted) == (3, 4, None)
    assert diff.first_mismatches == [
        contract.ElementMismatch(index=[0, 1], actual="2.5", expected="2.0"),
        contract.ElementMismatch(index=[1, 0], actual="nan", expected="1.0"),
        contract.ElementMismatch(index=[1, 1], actual="-0.0", expected="0.0"),
    ]


def test_a_diff_that_does_not_read_as_typed_is_none_and_the_rest_still_reads():
    untyped = {
        "reason": "values differ",
        "actual_shape": [4],
        "expected_shape": [4],
        "actual_dtype": "float32",
        "expected_dtype": "float32",
        "first_mismatches": [{"index": [1], "actual": 2.5, "expected": 2.0}],
    }
    with pytest.raises(contract.ContractError) as error:
        contract.TensorDiff.from_dict(untyped)
    assert str(error.value) == (
        "tensor_diff: key 'first_mismatches.actual': expected str, got float"
    )
    failure = contract.TestFailure(message="values differ", check=contract.FailureCheck.ACCURACY)
    failure = failure.to_dict() | {"diff": untyped}
    read = contract.TestFailure.from_dict(failure)
    assert (read.message, read.diff) == ("values differ", None)


@pytest.mark.parametrize(
    ("cls", "value", "reason", "message"),
    [
        (
            contract.TestRequest,
            {"op": "exp", "source": "", "wrapper": "w", "dtypes": ["complex64"], "timeout_s": 1},
            "bad_key",
            "test_request: key 'dtypes': expected bfloat16, float16, float32, float64, int32, "
            "int64 or bool, got 'complex64'",
        ),
        (
            contract.TestRequest,
            {"op": "exp", "source": "", "wrapper": "w", "dtypes": [], "timeout_s": 1},
            "bad_key",
            "test_request: key 'dtypes': must not be empty",
        ),
        (
            contract.TestRequest,
            {"op": "exp", "source": "", "wrapper": "w", "dtypes": ["float32"], "timeout_s": 1}
            | {"sample_sets": ["sample_inputs", "model:Llama 3"]},
            "bad_key",
            "test_request: key 'sample_sets': must be of the characters a-z0-9_.:-",
        ),
        (
            contract.TestResult,
            {"outcome": "pass", "tests_run": 1, "tests_passed": 1, "per_dtype": {}},
            "missing_key",
            "test_result: missing key 'failure'",
        ),
        (
            contract.LintResult,
            {"ok": True, "violations": [{"rule": "r", "line": "1"}], "syntax_error": None},
            "bad_key",
            "lint_result: key 'violations.line': expected int, got str",
        ),
        (
            contract.Hello,
            {**msgpack.unpackb(frame("hello")), "device_kind": "CUDA!"},
            "bad_key",
            "hello: key 'device_kind': must be of the characters a-z0-9_-",
        ),
    ],
)
def test_values_that_break_the_contract_are_named(cls, value, reason, message):
    with pytest.raises(contract.ContractError) as raised:
        cls.from_dict(value)
    assert raised.value.reason == reason
    assert str(raised.value) == message


def test_sample_set_names_are_the_generated_sets_and_model_sets():
    fields = {"op": "neg", "source": "", "wrapper": "w", "dtypes": ["float32"], "timeout_s": 1}
    request = contract.TestRequest.from_dict(fields | {"sample_sets": ["layouts", "model:gpt2"]})
    assert request.sample_sets == ["layouts", "model:gpt2"]


def test_a_newer_peers_job_kinds_are_dropped_from_hello():
    fields = {**msgpack.unpackb(frame("hello")), "jobs": ["profile", "lint"]}
    assert contract.Hello.from_dict(fields).jobs == ["lint"]


def test_vocabulary_is_one_tuple_per_enum():
    assert contract.DTYPES == (
        "bfloat16",
        "float16",
        "float32",
        "float64",
        "int32",
        "int64",
        "bool",
    )
    assert contract.JOB_KINDS == ("test", "lint", "catalog", "benchmark", "backend")
    assert "skipped" in contract.DTYPE_OUTCOMES and "skipped" not in contract.OUTCOMES
    assert contract.SESSION_STATES[0] == "PROMPT"


def test_an_enum_that_extends_another_lists_the_base_values_first():
    assert contract.DTYPE_OUTCOMES[:-1] == contract.OUTCOMES
    assert contract.DTYPE_OUTCOMES[-1] == "skipped"
    assert contract.ATTEMPT_OUTCOMES[:-1] == contract.OUTCOMES
    assert contract.ATTEMPT_OUTCOMES[-1] == "format_error"
    assert contract.ATTEMPT_STAGES == ("format", "lint", "test")


def test_an_enum_extends_only_an_enum_defined_before_it(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "gen_contract", ROOT / "messages" / "gen_contract.py"
    )
    generator = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = generator
    try:
        spec.loader.exec_module(generator)
        schema = tmp_path / "contract.yaml"
        for enums, error in (
            ("b: {extends: a, values: [y]}\n  a: {values: [x]}", "extends 'a', which is not"),
            ("a: {values: [x]}\n  b: {extends: a, values: [x]}", "a value is listed twice"),
        ):
            schema.write_text(f"version: 1\nenums:\n  {enums}\nframes: {{}}\nstructs: {{}}\n")
            with pytest.raises(generator.SchemaError, match=error):
                generator.load(schema)
    finally:
        del sys.modules[spec.name]
