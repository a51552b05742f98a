#!/usr/bin/env bash
# Sets up (ops/setup.sh) and runs every test: the C++ suites with ctest, the worker with pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
ops/setup.sh
build=${OPFORGE_BUILD_DIR:-$PWD/build}
venv=${OPFORGE_VENV:-$PWD/.venv}
status=0
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" || status=1
(cd worker && "$venv/bin/python" -m pytest -q) || status=1
exit $status
