#!/usr/bin/env bash
# A second worker environment whose only difference is its Triton: a venv that reuses the main
# venv's packages (torch, the worker's requirements) through a .pth file and holds its own Triton,
# which shadows the main one because a venv's site-packages comes first on sys.path. Re-validation
# on a new toolchain is tested against it (issue 19): Triton 3.6 added tl.mul and tl.sub to
# triton.language, so a kernel written on 3.6 that calls them fails on 3.5.1.
#   ops/toolchain-venv.sh DEST [TRITON_VERSION]   (default 3.5.1)
#   OPFORGE_VENV       the main venv (default: .venv in the repository)
#   OPFORGE_WHEEL_DIR  where the wheel is cached (default: .cache/wheels in the repository)
# Idempotent: a DEST that already has that Triton is left as it is; the wheel is downloaded once.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dest=${1:?usage: ops/toolchain-venv.sh DEST [TRITON_VERSION]}
version=${2:-3.5.1}
base=${OPFORGE_VENV:-$root/.venv}
wheels=${OPFORGE_WHEEL_DIR:-$root/.cache/wheels}

installed() { "$dest/bin/python" -c "import triton; assert triton.__version__ == '$version'" 2>/dev/null; }
installed && exit 0

mkdir -p "$wheels"
wheel=$(ls "$wheels"/triton-"$version"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ]; then
  "$base/bin/python" -m pip download -q --disable-pip-version-check --no-deps \
    "triton==$version" -d "$wheels"
  wheel=$(ls "$wheels"/triton-"$version"-*.whl | head -1)
fi
# The same interpreter as the main venv, so the shared packages' compiled parts load.
"$base/bin/python" -m venv --without-pip "$dest"
site=$("$dest/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"$base/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" >"$site/opforge-base.pth"
# The main venv's pip installs into DEST's site-packages: --target keeps DEST's Triton apart.
"$base/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-compile \
  --target "$site" "$wheel"
installed || { echo "toolchain-venv: triton $version did not install into $dest" >&2; exit 1; }
