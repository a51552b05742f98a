#!/usr/bin/env bash
# The worker's check on a GPU host, run by the coordinator through the device tool from the
# repository root (python 3.12, torch 2.11, triton 3.6 there; no registry access):
#   1. here, once: ops/fetch-gpu-wheels.sh            (wheels the host lacks, into .whl/)
#   2. device run, carry [".whl"], command:  bash ops/gpu-check.sh
# It installs the carried wheels into /tmp/site, then runs its steps:
#   pytest-harness  the harness suites (tests/test_harness_*.py) on cuda
#   pytest-rest     the rest of the worker's suite with OPFORGE_TEST_DEVICE=cuda, the slow
#                   reference sweeps (pytest -m slow) that CI leaves out included
#   validate        `validate config/examples --device cuda`
#   bench           bench/worker_bench.py (its table is in bench.log, its numbers in the JSON)
#   trust           the suites that say a PASS means a right kernel: the wrong-kernel corpus and
#                   its twins, verdicts, isolation, the honest corpus (trust.log)
#   catalog         the catalog on cuda, and its samples per operator by set (catalog.txt)
#   startup         `validate` of the examples and the honest corpus with --timings, twice: the
#                   first run fills the sample store, the second is what later runs pay
#                   (startup.log)
#   export          tests/test_export.py and test_launch.py on cuda alone (also inside pytest-rest): an exported package
#                   registered for dispatch key CUDA serves torch's API on CUDA tensors (export.log)
#   backendbench    bench/backendbench_compare.py: the library judged by BackendBench's OpInfo
#                   suite and by one `validate` run, wall and tests of each (backendbench.json).
#                   Needs OPFORGE_BACKENDBENCH, a BackendBench checkout's path (relative to the
#                   repository root on the device: copy it into an ignored folder and carry it,
#                   e.g. .backendbench); OPFORGE_BACKENDBENCH_ARGS adds arguments (--kernels ...)
#   library         bench/library_on_device.py: the demo's recorded final answers, config/examples,
#                   the honest corpus and tests/fixtures/import/candidates validated on cuda; what
#                   passed exported as a package for dispatch key CUDA under /tmp/opforge-library
#                   (library-verdicts.json); the modelcheck step uses it when it ran first
#   modelcheck      python -m opforge_library modelcheck --model all --size small on cuda, with
#                   the exported package OPFORGE_MODELCHECK_PACKAGE names (a directory carried
#                   like the BackendBench checkout; without it, no library: every overload
#                   missing): the share of aten calls served, the deviation and both wall times
#                   per model (modelcheck.json, for bench/results/), the model sets captured
#   dispatch        what the exported runtime adds per call and per model forward (issue 28):
#                   bench/dispatch_overhead.py on cuda (abs, sigmoid, neg of 1 and 1M elements
#                   with the package and without, a float64 call falling through, Python's
#                   floor; dispatch.json, the table in dispatch.log), then the three models
#                   (--size small) with the library step's package and without it, with the time
#                   per covered overload (dispatch-models.json); builds that package as the
#                   library step does where it did not run first. About 2 minutes on an H100
#                   with the library built here.
#   benchlib        `validate bench/library --device cuda` over the campaigns' default dtypes: the
#                   hand-written bench library, each kernel's verdict on cuda (benchlib.json)
#   revalidate      bench/revalidate_bench.py on cuda: the daemon, packed here with
#                   `ops/pack-daemon.sh` and carried as .daemon (carry [".whl", ".daemon"]), with
#                   one cuda worker of 1 slot imports config/examples, the honest corpus, the
#                   import fixtures and bench/library, then times `opforge revalidate` of them on
#                   the worker's fingerprint (warm, right after the import; cold, from a restart
#                   with empty caches) against one `validate` sweep in a fresh process with an
#                   empty cache (revalidate.json, for bench/results/; issue 19's goal: at most
#                   1.1x, cold against the sweep); OPFORGE_REVALIDATE_ARGS adds arguments
#                   (--import-slots 8, the sets). With the whole bench library it outlasts one
#                   10-minute command on an H100; bench/results/revalidate-h100.md has the
#                   command that times a 53-kernel library (8.6 min)
#   timing          bench/timing_check.py on cuda (worker/opforge_worker/TIMING.md): the benchmark
#                   job's event timer against ncu's gpu__time_duration for a Triton and an ATen exp
#                   and add on 16M elements (within 5%), the noise (one kernel timed twice in one
#                   benchmark, within 3%), the persisting-L2 set-aside (0), and bench/library's
#                   kernels against ATen in float32 and bfloat16: geomean per dtype, worst ratios,
#                   launch-bound shapes labelled (timing.json); OPFORGE_TIMING_ARGS adds arguments
#                   (--ops all --budget-s 500 times the whole library in one 10-minute call)
#   timing-cheats   tests/test_benchmark_cheats.py on cuda: the timing-cheat corpus and its twins,
#                   the side stream and the persisting-L2 window included (timing-cheats.log)
# Everything it saw lands in $OUT (at most 8 files: the device tool's limit), each step's exit
# status in $OUT/summary.txt. Exit status: non-zero if any step failed.
# One device command may run 10 minutes and the whole check takes longer: name the steps of each
# call, and split the harness suites (9 min on an H100 in November 2026) with
# OPFORGE_GPU_HARNESS_FILES (paths relative to worker/), four calls in all on an H100:
#   OPFORGE_GPU_STEPS=pytest-harness OPFORGE_GPU_HARNESS_FILES="tests/test_harness_batch.py
#     tests/test_harness_pool.py tests/test_harness_gate.py tests/test_harness_cheats.py"
#     bash ops/gpu-check.sh                                                  (4.5 min)
#   OPFORGE_GPU_STEPS=pytest-harness OPFORGE_GPU_HARNESS_FILES="tests/test_harness_compare.py
#     tests/test_harness_harmful.py tests/test_harness_honest.py tests/test_harness_outcomes.py
#     tests/test_harness_sandbox.py" bash ops/gpu-check.sh                   (4.5 min)
#   OPFORGE_GPU_STEPS=pytest-rest bash ops/gpu-check.sh                      (8.5 min)
#   OPFORGE_GPU_STEPS="validate bench" bash ops/gpu-check.sh                 (3.5 min)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/opforge-gpu-check}
mkdir -p "$out"
# The harness suites read OPFORGE_HARNESS_DEVICE, the worker's own OPFORGE_TEST_DEVICE.
export PYTHONUNBUFFERED=1 OPFORGE_TEST_DEVICE=cuda OPFORGE_HARNESS_DEVICE=cuda
export OPFORGE_CACHE_DIR=/tmp/opforge-cache

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || { echo "gpu-check: installing .whl/ failed" >&2; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/worker

steps=" ${OPFORGE_GPU_STEPS:-pytest-harness pytest-rest validate bench} "
status=0
step() { # step NAME LOG COMMAND...: runs COMMAND, output to $out/LOG, records its exit status
  local name=$1 log=$2
  shift 2
  [[ $steps == *" $name "* ]] || return 0
  local started=$SECONDS
  "$@" >"$out/$log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - started)) s" | tee -a "$out/summary.txt"
  ((rc == 0)) || status=1
}

{
  nvidia-smi
  python3 -m opforge_worker fingerprint --device cuda
} >"$out/environment.txt" 2>&1

pytest=(python3 -m pytest -q -p no:cacheprovider -rfEs)
step pytest-harness pytest-harness.log bash -c \
  "cd worker && ${pytest[*]} ${OPFORGE_GPU_HARNESS_FILES:-tests/test_harness_*.py}"
step pytest-rest pytest-rest.log bash -c \
  "cd worker && ${pytest[*]} \$(ls tests/test_*.py | grep -v '^tests/test_harness_')"
step validate validate.log python3 -m opforge_worker validate config/examples --device cuda \
  --json "$out/validate.json"
step bench bench.log python3 bench/worker_bench.py --device cuda --json "$out/bench-cuda.json" \
  ${OPFORGE_GPU_BENCH_ARGS:-}
step trust trust.log bash -c "cd worker && ${pytest[*]} tests/test_harness_wrong.py \
  tests/test_harness_verdicts.py tests/test_harness_isolation.py tests/test_harness_honest.py"
step catalog catalog.txt bash -c "python3 -m opforge_worker catalog --device cuda \
  --json /tmp/catalog-cuda.json >/dev/null && python3 bench/catalog_totals.py /tmp/catalog-cuda.json"
step startup startup.log bash -c "for run in first again; do echo \"== \$run run\"; \
  python3 -m opforge_worker validate config/examples worker/tests/corpus/honest --device cuda \
  --timings; done"
step export export.log bash -c "cd worker && ${pytest[*]} tests/test_export.py tests/test_launch.py"
step backendbench backendbench.log bash -c "[ -d \"\${OPFORGE_BACKENDBENCH:-}\" ] || \
  { echo 'backendbench: set OPFORGE_BACKENDBENCH to a BackendBench checkout'; exit 2; }; \
  python3 bench/backendbench_compare.py --backendbench \"\$OPFORGE_BACKENDBENCH\" \
  --device cuda --json '$out/backendbench.json' ${OPFORGE_BACKENDBENCH_ARGS:-}"
library_package=/tmp/opforge-library/package/opforge_kernels
build_library="python3 bench/library_on_device.py --device cuda --out /tmp/opforge-library \
  --demo config/demo/answers config/examples worker/tests/corpus/honest \
  tests/fixtures/import/candidates"
step library library.log bash -c "$build_library && \
  cp /tmp/opforge-library/verdicts.json '$out/library-verdicts.json'"
[ -d $library_package ] &&
  OPFORGE_MODELCHECK_PACKAGE=${OPFORGE_MODELCHECK_PACKAGE:-$library_package}
step modelcheck modelcheck.log python3 -m opforge_library modelcheck --model all --size small \
  --device-kind cuda --report "$out/modelcheck.json" --capture /tmp/opforge-model-sets \
  ${OPFORGE_MODELCHECK_PACKAGE:+--package "$OPFORGE_MODELCHECK_PACKAGE"}
step dispatch dispatch.log bash -c "python3 bench/dispatch_overhead.py --device cuda \
  --json '$out/dispatch.json' && { [ -d $library_package ] || $build_library; } && \
  python3 -m opforge_library modelcheck --model all --size small --device-kind cuda \
  --package $library_package --report '$out/dispatch-models.json'"
step benchlib benchlib.log python3 -m opforge_worker validate bench/library --device cuda \
  --dtypes bfloat16,float16,float32,int32,int64 --json "$out/benchlib.json"
step revalidate revalidate.log python3 bench/revalidate_bench.py --device cuda \
  --opforge .daemon/opforge --python python3 --json "$out/revalidate.json" \
  ${OPFORGE_REVALIDATE_ARGS:-}
step timing timing.log python3 bench/timing_check.py --device cuda --json "$out/timing.json" \
  ${OPFORGE_TIMING_ARGS:-}
step timing-cheats timing-cheats.log bash -c "cd worker && ${pytest[*]} tests/test_benchmark_cheats.py"
cat "$out/summary.txt"
exit $status
