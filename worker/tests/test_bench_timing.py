"""The logic of bench/timing_check.py (ops/gpu-check.sh step ``timing``): ncu's CSV, the
calibration and noise verdicts, the library's summary per dtype."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "timing_check.py"
spec = importlib.util.spec_from_file_location("timing_check", SCRIPT)
timing_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(timing_check)

HEADER = ["ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]
ROWS = [
    [
        "0",
        "exp_kernel",
        "Command line profiler metrics",
        "gpu__time_duration.sum",
        "usecond",
        "28.90",
    ],
    [
        "1",
        "exp_kernel",
        "Command line profiler metrics",
        "gpu__time_duration.sum",
        "nsecond",
        "29,100",
    ],
    [
        "2",
        "void at::native::vectorized_elementwise_kernel<4>",
        "x",
        "gpu__time_duration.sum",
        "usecond",
        "27.50",
    ],
    ["3", "exp_kernel", "x", "sm__cycles_elapsed.avg", "cycle", "1"],
]
NCU_CSV = "\n".join(
    ["==PROF== Connected to process 1234"]
    + [",".join(f'"{cell}"' for cell in row) for row in [HEADER, *ROWS]]
    + ["==PROF== Disconnected from process 1234"]
)


def test_ncu_durations_are_read_per_kernel_in_microseconds():
    durations = timing_check.ncu_durations_us(NCU_CSV)

    assert durations["exp_kernel"] == pytest.approx([28.9, 29.1])
    assert durations["void at::native::vectorized_elementwise_kernel<4>"] == [27.5]


def test_calibration_is_within_five_percent_or_not():
    assert timing_check.calibration_verdict(30.0, 29.0)["within"]
    assert not timing_check.calibration_verdict(31.0, 29.0)["within"]
    assert timing_check.calibration_verdict(29.0, 29.0)["deviation"] == 0.0


def shape(source, speedup, launch_bound=False, dtype="float32"):
    return {
        "source": source,
        "dtype": dtype,
        "shape_class": "n<=16M",
        "speedup": speedup,
        "candidate_us": 10.0,
        "baseline_us": 10.0 * speedup,
        "launch_bound": launch_bound,
    }


def test_noise_looks_only_at_shapes_that_are_not_launch_bound():
    result = {
        "outcome": "pass",
        "timings": [shape("ladder:1", 0.5, True), shape("ladder:16777216", 1.02)],
        "noise": 0.01,
    }
    verdict = timing_check.noise_verdict(result)

    assert (verdict["within"], verdict["shapes"]) == (True, 1)
    result["timings"].append(shape("ladder:1048576", 0.96))
    assert not timing_check.noise_verdict(result)["within"]


def test_the_library_summary_gives_geomean_worst_and_launch_bound_per_dtype():
    results = [
        {
            "op": "add",
            "dtypes": ["float32"],
            "result": {
                "outcome": "pass",
                "timings": [shape("ladder:1", 0.3, True), shape("ladder:16777216", 2.0)],
            },
        },
        {
            "op": "lerp",
            "dtypes": ["float32"],
            "result": {"outcome": "pass", "timings": [shape("ladder:16777216", 0.5)]},
        },
        {"op": "div", "dtypes": ["float32"], "result": {"outcome": "timeout", "timings": []}},
    ]
    summary = timing_check.summarize_library(results)["float32"]

    assert summary["geomean_speedup"] == pytest.approx(1.0)
    assert summary["below_0.8"] == ["lerp"]
    assert [row["op"] for row in summary["worst"]] == ["lerp", "add"]
    assert [row["op"] for row in summary["launch_bound"]] == ["add"]
    assert summary["failed"] == [{"op": "div", "outcome": "timeout"}]


def test_the_whole_check_runs_on_the_interpreter(tmp_path):
    # No ncu and no speed verdict here: the report's shape, from real benchmarks.
    report_path = tmp_path / "timing.json"
    timing_check.main(
        ["--device", "interpreter", "--no-ncu", "--ops", "add", "--dtypes", "float32"]
        + ["--json", str(report_path)]
    )
    report = json.loads(report_path.read_text())

    assert report["timer"] == "perf_counter"
    assert [row["op"] for row in report["calibration"]] == ["exp", "add"]
    assert all(row["outcome"] == "pass" for row in report["calibration"])
    assert report["noise"]["outcome"] == "pass" and report["noise"]["shapes"] > 0
    float32 = report["library"]["per_dtype"]["float32"]
    assert float32["failed"] == [] and float32["shapes"] > 0
    assert report["library"]["skipped_for_time"] == []
