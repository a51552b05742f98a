#!/usr/bin/env bash
# The README's first command: sets up (ops/setup.sh), starts `opforge serve` with its embedded
# defaults (local workers supervised by the daemon, no LLM configured, so campaigns replay the
# demo's hand-written answers), waits until its local workers have connected, runs the demo
# campaign and shows its sessions and one dialog, then shuts the daemon down cleanly. A second
# daemon (var/demo-optimize) then shows the optimize stage on its own recorded answers.
# The data directory is var/demo, emptied first: once a campaign has given every demo operator an
# accepted kernel, `opforge run` has nothing left to do on that store, so each demo starts afresh
# (and the daemon's default ./var, which real campaigns use, is left alone).
#   OPFORGE_BUILD_DIR   build directory (default: build)
#   DEMO_WORKER_WAIT_S  how long to wait for the local workers (default: 180; the first start
#                       imports torch and triton)
set -euo pipefail
cd "$(dirname "$0")/.."
ops/setup.sh

opforge=${OPFORGE_BUILD_DIR:-$PWD/build}/opforge

fail() {
  echo "demo: $*; the daemon's log ($log) ends with:" >&2
  tail -n 20 "$log" >&2
  exit 1
}

# Every client command talks to the running daemon through its data directory's control socket.
client() {
  "$opforge" "$@" --data-dir "$data"
}

# start_daemon DATA [SERVE ARGS...]: starts `opforge serve` on a fresh DATA and waits for it and
# its local workers.
start_daemon() {
  data=$1
  shift
  rm -rf "$data"
  mkdir -p "$data"
  log=$data/serve.log
  "$opforge" serve --data-dir "$data" "$@" >"$log" 2>&1 &
  daemon=$!
  trap 'kill "$daemon" 2>/dev/null || true' EXIT
  # The daemon answers within a second or two; it exits at once on a bad configuration.
  for ((i = 0; i < 150; i++)); do
    client status >/dev/null 2>&1 && break
    kill -0 "$daemon" 2>/dev/null || fail "opforge serve exited"
    sleep 0.2
  done
  client status >/dev/null || fail "the daemon does not answer"
  # The embedded defaults supervise two local workers, a device worker (cuda when a GPU is
  # present, else the interpreter) and a lint worker; each is one "worker_id" in `opforge
  # workers --json`.
  local expected_workers=2 wait_s=${DEMO_WORKER_WAIT_S:-180}
  echo "demo: waiting for the $expected_workers local workers to connect (at most $wait_s s)"
  local deadline=$((SECONDS + wait_s))
  until (($(client workers --json | grep -o '"worker_id"' | wc -l) >= expected_workers)); do
    ((SECONDS < deadline)) || fail "the local workers did not all connect within $wait_s s"
    kill -0 "$daemon" 2>/dev/null || fail "opforge serve exited"
    sleep 0.5
  done
}

stop_daemon() {
  echo
  echo "\$ opforge shutdown"
  client shutdown
  wait "$daemon" || fail "opforge serve did not exit cleanly (exit code $?)"
  trap - EXIT
}

start_daemon var/demo
echo
echo "\$ opforge workers"
client workers
echo
echo "\$ opforge run      # no LLM configured: the demo's hand-written answers for 4 operators"
client run || fail "the demo campaign did not pass"
echo
echo "\$ opforge sessions"
client sessions
echo
# The whole dialog is long (prompts quote the worked examples); its outline leaves out the bodies
# of prompts, answers and feedback and keeps the transitions and the accepted kernel.
echo "\$ opforge show sigmoid      # the dialog's outline: prompt, answer and feedback texts left out"
dialog=$(client show sigmoid)
awk '/^accepted kernel:/ { kernel = 1 } kernel || !/^      /' <<<"$dialog" | cat -s
metrics=$(client status --json | sed -n 's/.*"metrics": "\(.*\)".*/\1/p')
if [[ -n $metrics ]]; then
  echo
  echo "\$ curl -s http://$metrics/metrics | grep -E '^opforge_(jobs|llm_requests|llm_tokens)_total'"
  curl -s "http://$metrics/metrics" | grep -E '^opforge_(jobs|llm_requests|llm_tokens)_total' || true
fi
stop_daemon
echo "demo: the daemon stopped cleanly; its data and log are in $data (try \`$opforge show abs" \
  "--data-dir $data\`)"

# The optimize stage, with recorded answers of its own (config/demo/optimize, hand-written, not a
# model): a daemon with campaigns.optimize on and a replay endpoint serving them. `square` first
# squares 32 elements per program, correct but slow; once it passes it is timed against ATen and
# the optimize prompt shows its timings; the second answer squares 4096 per program, is tested on
# every sample again, timed, and the faster proved version is kept (both stay in the library with
# their timings). On the interpreter the timer measures the host, not a kernel: there the demo
# shows the stage's steps, and only a GPU says which version is faster.
echo
echo "demo: the optimize stage (campaigns.optimize: on), from hand-written answers"
config=$(mktemp)
cat >"$config" <<EOF
llm:
  endpoints:
    - {name: optimize-demo, kind: replay, cassette: $PWD/config/demo/optimize/cassette.jsonl,
       model: "opforge-demo (hand-written answers)"}
campaigns: {optimize: on, optimize_calls: 1}
EOF
start_daemon var/demo-optimize --config "$config"
echo
echo "\$ opforge run square --endpoint optimize-demo   # recorded: a slow kernel, then a faster one"
client run square --endpoint optimize-demo || fail "the optimize campaign did not pass"
echo
echo "\$ opforge show square      # the outline: prompt, answer and feedback texts left out"
dialog=$(client show square)
awk '/^accepted kernel:/ { kernel = 1 } kernel || !/^      /' <<<"$dialog" | cat -s
stop_daemon
rm -f "$config"
echo "demo: done; the optimize stage's data and log are in $data"
