#!/bin/bash
# Run `opforge_worker validate` on the corpus of wrong kernels and their honest twins
# (worker/tests/corpus/wrong*, read by worker/tests/wrong_corpus.py), laid out as validate wants
# it: one file per operator, named after it, in one folder per dtype list (a wrong kernel's
# dtypes from its "Must fail" header line, a twin's from its "Claims" line).
#
#   bench/wrong_corpus_validate.sh OUT_DIR [VALIDATE_ARGS...]
#
# VALIDATE_ARGS go to every validate call (e.g. --sets extremal). The JSON reports land in
# OUT_DIR/<folder>.json, the tables on stdout.
set -euo pipefail
out=$(realpath -m "$1")
shift
cd "$(dirname "$0")/../worker"
python=${PYTHON:-/work/main/.venv/bin/python}
rm -rf "$out"
for kind in wrong wrong_twins; do
  for file in tests/corpus/$kind/*.py; do
    name=$(basename "$file" .py)
    if [ "$kind" = wrong ]; then
      dtypes=$(sed -n 's/^# Must fail: .* (\(.*\))$/\1/p' "$file" | tr -d ' ')
    else
      dtypes=$(sed -n 's/^# Claims: \(.*\)$/\1/p' "$file" | tr -d ' ')
    fi
    mkdir -p "$out/$kind-$dtypes"
    cp "$file" "$out/$kind-$dtypes/${name%.*}.py"
  done
done
for folder in "$out"/*/; do
  folder=${folder%/}
  dtypes=${folder##*/}
  echo "### ${dtypes%%-*} (${dtypes#*-})"
  "$python" -m opforge_worker validate "$folder" --device interpreter --dtypes "${dtypes#*-}" \
    --json "$folder.json" "$@" 2>&1 | grep -v Warning || true
done
