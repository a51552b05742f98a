#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then the installed opforge, run from outside the
# repository, must find its config data under that prefix, and still after the prefix moves.
#   test_install.sh CMAKE BUILD_DIR VERSION
set -euo pipefail
cmake=$1 build=$2 version=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "test_install: $*" >&2
  exit 1
}
# OPFORGE_CONFIG_DIR would take the place of the installed data; the default configuration, with
# no LLM endpoint, replays the demo cassette.
unset OPFORGE_CONFIG_DIR OPFORGE_CONFIG OPFORGE_LLM_URL

prefix=$work/prefix
"$cmake" --install "$build" --prefix "$prefix" >/dev/null
data=$prefix/share/opforge
for file in bin/opforge share/opforge/opforge.yaml share/opforge/prompts/initial.md \
  share/opforge/examples/exp.py \
  share/opforge/demo/cassette.jsonl share/doc/opforge/README.md; do
  [ -e "$prefix/$file" ] || fail "$file was not installed"
done
for file in CMakeLists.txt config.cpp resources.hpp demo/build_cassette.py; do
  [ ! -e "$data/$file" ] || fail "share/opforge/$file (a build input) was installed"
done

cd "$work"
[ "$("$prefix/bin/opforge" --version)" = "opforge $version" ] || fail "wrong --version"

expect_check() { # prefix: `opforge check` reads every file from <prefix>/share/opforge
  local out
  out=$("$1/bin/opforge" check) || fail "opforge check failed under $1"
  local want="config data: $1/share/opforge
prompt templates: $1/share/opforge/prompts
worked examples: $1/share/opforge/examples
demo cassette: $1/share/opforge/demo/cassette.jsonl (abs, neg, nn.functional.relu, sigmoid)
llm endpoint demo: opforge-demo (hand-written answers) at a replay of $1/share/opforge/demo/cassette.jsonl, concurrency 8
workers: CURVE on tcp://127.0.0.1:5555, server key var/keys/server.key_secret (created at first start), allow-list var/keys/allowed (0 keys)
llm endpoints live: no daemon answers at ipc://var/control.sock (start one with \`opforge serve\`)"
  [ "$out" = "$want" ] || fail "opforge check under $1 printed:
$out
instead of:
$want"
}
expect_check "$prefix"

# The data is found relative to the executable, so a moved prefix still works.
mv "$prefix" "$work/moved"
expect_check "$work/moved"

# A broken installed copy is what check reports: it never falls back to the source tree.
rm "$work/moved/share/opforge/prompts/initial.md"
status=0
err=$("$work/moved/bin/opforge" check 2>&1) || status=$?
[ "$status" -eq 2 ] || fail "check of a broken install exited $status, not 2"
[[ "$err" == *"$work/moved/share/opforge/prompts"* ]] || fail "check did not name the prompts: $err"
echo "installed opforge $version finds its config data under the prefix"
