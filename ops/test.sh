#!/usr/bin/env bash
# Sets up (ops/setup.sh) and runs every test: the style checks (clang-format, ruff), the alert
# rules with promtool, the C++ suites with ctest, the worker with pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
ops/setup.sh
build=${OPFORGE_BUILD_DIR:-$PWD/build}
venv=${OPFORGE_VENV:-$PWD/.venv}
status=0
# Style first, in seconds: clang-format on the tracked C++, ruff on every Python file.
git ls-files '*.cpp' '*.hpp' | xargs clang-format --dry-run --Werror || { echo "test: run clang-format -i on the files above" >&2; status=1; }
"$venv/bin/ruff" check worker bench config/demo tests || status=1
"$venv/bin/ruff" format --check worker bench config/demo tests || { echo "test: run ruff format" >&2; status=1; }
(cd ops/prometheus && promtool test rules alerts_test.yml) || status=1
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" || status=1
# One pytest process per core; tests that cannot share a process pool name an xdist_group. The
# slow reference sweeps run in the GPU check (ops/gpu-check.sh) instead.
(cd worker && "$venv/bin/python" -m pytest -q -n auto --dist loadgroup -m "not slow") || status=1
exit $status
