#!/usr/bin/env bash
# The README's first command: sets up (ops/setup.sh), starts `opforge serve` with its embedded
# defaults (data in ./var, local workers supervised by the daemon), waits until its local workers
# have connected, shows what the daemon sees, and shuts it down cleanly.
#   OPFORGE_BUILD_DIR   build directory (default: build)
#   DEMO_WORKER_WAIT_S  how long to wait for the local workers (default: 180; the first start
#                       imports torch and triton)
set -euo pipefail
cd "$(dirname "$0")/.."
ops/setup.sh

opforge=${OPFORGE_BUILD_DIR:-$PWD/build}/opforge
mkdir -p var
log=var/demo-serve.log
"$opforge" serve >"$log" 2>&1 &
daemon=$!
trap 'kill "$daemon" 2>/dev/null || true' EXIT

fail() {
  echo "demo: $*; the daemon's log ($log) ends with:" >&2
  tail -n 20 "$log" >&2
  exit 1
}

# The daemon answers within a second or two; it exits at once on a bad configuration.
for ((i = 0; i < 150; i++)); do
  "$opforge" status >/dev/null 2>&1 && break
  kill -0 "$daemon" 2>/dev/null || fail "opforge serve exited"
  sleep 0.2
done
"$opforge" status >/dev/null || fail "the daemon does not answer"

# The embedded defaults supervise two local workers, a device worker (cuda when a GPU is present,
# else the interpreter) and a lint worker; each is one "worker_id" in `opforge workers --json`.
expected_workers=2
wait_s=${DEMO_WORKER_WAIT_S:-180}
echo "demo: waiting for the $expected_workers local workers to connect (at most $wait_s s)"
deadline=$((SECONDS + wait_s))
until (($("$opforge" workers --json | grep -o '"worker_id"' | wc -l) >= expected_workers)); do
  ((SECONDS < deadline)) || fail "the local workers did not all connect within $wait_s s"
  kill -0 "$daemon" 2>/dev/null || fail "opforge serve exited"
  sleep 0.5
done

echo
echo "\$ opforge status"
"$opforge" status
echo
echo "\$ opforge workers"
"$opforge" workers
metrics=$("$opforge" status --json | sed -n 's/.*"metrics": "\(.*\)".*/\1/p')
if [[ -n $metrics ]]; then
  echo
  echo "\$ curl -s http://$metrics/metrics | grep '^opforge_' | head -n 12"
  curl -s "http://$metrics/metrics" | grep '^opforge_' | head -n 12 || true
fi
echo
echo "\$ opforge shutdown"
"$opforge" shutdown
wait "$daemon" || fail "opforge serve did not exit cleanly (exit code $?)"
trap - EXIT
echo "demo: the daemon stopped cleanly; its log is in $log"
