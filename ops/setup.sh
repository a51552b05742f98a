#!/usr/bin/env bash
# Installs everything opforge needs (Debian packages, the worker's venv) and builds the daemon with
# ccache. Idempotent, and quick when everything is already in place.
#   OPFORGE_VENV       venv location (default: .venv in the repository)
#   OPFORGE_BUILD_DIR  build directory (default: build)
#   OPFORGE_BUILD_TYPE CMake build type (default: Release)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

apt_packages=(
  build-essential cmake ninja-build ccache clang-format pkg-config
  libcaf-dev libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libboost-dev librocksdb-dev
  prometheus-cpp-dev libgtest-dev libgmock-dev libcurl4-openssl-dev nlohmann-json3-dev
  libyaml-cpp-dev libspdlog-dev libcli11-dev
  python3-venv
  prometheus # promtool tests the alert rules (ops/test.sh); the server runs the dashboard's queries
  zlib1g-dev # test_report decodes Chromium's screenshot of the report
  chromium   # test_report renders the report's HTML headless (about a minute to install)
)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

venv=${OPFORGE_VENV:-$root/.venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
reqs=worker/requirements.txt
stamp="$venv/.opforge-requirements"
# The editable install maps the packages pyproject.toml names: a new one needs a reinstall too.
if ! cat "$reqs" worker/pyproject.toml | cmp -s - "$stamp"; then
  echo "setup: installing Python requirements into $venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$reqs" 2>&1 | grep -v "^WARNING: Location" || true
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e worker 2>&1 | grep -v "^WARNING: Location" || true
  "$venv/bin/python" -c "import torch, triton, zmq, msgpack, yaml, expecttest, xdist, grafana_foundation_sdk" \
    || { echo "setup: the Python environment in $venv is incomplete" >&2; exit 1; }
  cat "$reqs" worker/pyproject.toml >"$stamp"
fi

# Paths under the repository are hashed relative to it, so clones share ccache hits.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
build=${OPFORGE_BUILD_DIR:-$root/build}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${OPFORGE_BUILD_TYPE:-Release}" \
    -DOPFORGE_PYTHON="$venv/bin/python" >/dev/null
fi
cmake --build "$build" -j "$(nproc)"
