#!/usr/bin/env bash
# Downloads, here, the wheels the GPU hosts lack (python 3.12, x86-64, no registry access there) into
# .whl/ at the repository root, for ops/gpu-check.sh to install. Versions are worker/requirements.txt's
# pins (and the pins of pytest's own needs). Run from anywhere; WHEEL_DIR overrides the target.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${WHEEL_DIR:-.whl}
python=${OPFORGE_VENV:-$PWD/.venv}/bin/python
[ -x "$python" ] || python=python3

pin() { grep -i "^$1==" worker/requirements.txt | cut -d= -f3; }
wheels=(
  "pyzmq==$(pin pyzmq)" "msgpack==$(pin msgpack)" "PyYAML==$(pin PyYAML)"
  "expecttest==$(pin expecttest)" "pytest==$(pin pytest)"
  pluggy==1.7.0 iniconfig==2.3.1 Pygments==2.21.0
  # tests/test_install.py builds the worker's own wheel, without build isolation (no registry).
  # Below 82: torch 2.11 on the GPU hosts requires setuptools<82, and pip refuses the exported
  # package's install beside a newer one.
  setuptools==80.9.0
  # opforge_library modelcheck: transformers and what it imports (pins of its install beside
  # torch 2.13, November 2026), torchvision for torch 2.11's resnet18.
  "transformers==$(pin transformers)" huggingface_hub==2.4.0 tokenizers==0.23.3 safetensors==0.8.0
  regex==2026.11.19 tqdm==4.70.1 packaging==26.4 filelock==4.3.1 fsspec==2026.9.0 hf_xet==1.8.0
  typer==0.29.2 click==8.5.1 rich==15.0.0 markdown_it_py==4.3.0 mdurl==0.1.2 shellingham==1.5.4
  annotated_doc==0.0.7 httpx2==2.16.2 httpcore2==2.16.2 h11==0.16.0 anyio==4.16.0 idna==3.20
  pydantic==2.14.4 pydantic_core==2.50.5 annotated_types==0.8.0 typing_inspection==0.4.5
  typing_extensions==4.16.0 truststore==0.10.5 torchvision==0.26.0
  # validate --backend flag_gems (issue 29): FlagGems and what it imports
  flag_gems==5.0.2 SQLAlchemy==2.0.48 greenlet==3.2.4
)

# Keep the wheels out of git, and out of the working tree's commits.
exclude=$(git rev-parse --git-common-dir)/info/exclude
mkdir -p "$(dirname "$exclude")"
[ "$dest" != .whl ] || grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"

platforms=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_17 manylinux2014 manylinux1; do
  platforms+=(--platform "${tag}_x86_64")
done
mkdir -p "$dest"
"$python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp "${platforms[@]}" -d "$dest" "${wheels[@]}"
ls -1 "$dest"
