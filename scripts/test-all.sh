#!/usr/bin/env bash
# `npm test`: build once, then lint and every test in three runs side by side, each with its own
# throw-away PostgreSQL and Temporal (test/global-setup.ts picks free ports):
#   rig     the tests against the loopback OpenStack (one file at a time: they share its hosts);
#   core    the core tests on the Temporal dev server;
#   server  the production-topology pass: the lifecycle, admission, crash and replay tests once
#           more, against temporal-server on PostgreSQL (as `npm run test:temporal-server`).
# The rig's tests mostly wait on Nova and on their leases' times, so the others fill the idle CPU. Each line is prefixed with its run's name; each run's summary and time close the output.
# Arguments go to every jest run (e.g. `npm test -- --testNamePattern foo`).
set -uo pipefail
cd "$(dirname "$0")/.."

started=$(date +%s)
npm run --silent build || exit 1
echo "test: build took $(( $(date +%s) - started )) s"

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
declare -A pids=()

# run NAME COMMAND...: runs the command with its output prefixed, its status and time kept.
run() {
  local name=$1; shift
  (
    local t0; t0=$(date +%s)
    "$@" 2>&1 | sed -u "s/^/[$name] /"
    local status=${PIPESTATUS[0]}
    echo "$status $(( $(date +%s) - t0 ))" > "$logs/$name.status"
  ) &
  pids[$name]=$!
}

# The build already type-checked src and test; lint adds eslint and the web page's own types.
run lint bash -c 'npx eslint . && npx tsc -p web/tsconfig.json'
run rig npx jest --selectProjects openstack "$@"
run core npx jest --selectProjects core "$@"
run server env LK_TEMPORAL=server npx jest --selectProjects core --testPathPattern "$(node -p "require('./package.json').config.temporalServerTests")" "$@"

failed=0
for name in lint rig core server; do
  wait "${pids[$name]}"
  read -r status seconds < "$logs/$name.status" || { status=1; seconds='?'; }
  echo "test: $name took $seconds s, exit $status"
  [ "$status" = 0 ] || failed=1
done
echo "test: $(( $(date +%s) - started )) s in all"
exit $failed
