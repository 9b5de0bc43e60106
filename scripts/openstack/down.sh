#!/usr/bin/env bash
# Stop the OpenStack rig started by up.sh: exactly the processes recorded in
# $RUN/pids/*.pid ("PID STARTTIME", so a recycled PID is never hit) together
# with their process groups and descendants (nova-api, neutron-server and
# RabbitMQ have children).  OpenStack services first, then RabbitMQ, epmd and
# MariaDB (services whose broker is gone spin reconnecting instead of
# exiting).  Each stage: TERM, wait (bounded by LK_OS_STOP_TIMEOUT, default
# 20 s), then KILL.  Idempotent.  Data in the run dir is kept (up.sh starts
# afresh anyway).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TIMEOUT="${LK_OS_STOP_TIMEOUT:-20}"
if [ ! -d "$RUN/pids" ] || ! compgen -G "$RUN/pids/*.pid" >/dev/null; then
  echo "OpenStack rig: nothing to stop in $RUN"
  exit 0
fi

# stop_stage PIDFILE...: TERM the processes of those services, wait, KILL.
stop_stage() {
  local procs e pid start deadline
  mapfile -t procs < <(all_rig_pids "$@")   # snapshot: "PID STARTTIME"
  [ "${#procs[@]}" -gt 0 ] || return 0
  alive() {  # snapshot entries still alive (same PID, same start time)
    for e in "${procs[@]}"; do
      read -r pid start <<<"$e"
      [ "$(proc_start "$pid" 2>/dev/null)" = "$start" ] && echo "$pid"
    done
    return 0
  }
  signal_all() { local p; for p in $(alive); do kill "-$1" "$p" 2>/dev/null || true; done; }
  total=$((total + ${#procs[@]}))
  signal_all TERM
  deadline=$(( $(date +%s) + TIMEOUT ))
  while [ -n "$(alive)" ]; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "OpenStack rig: still running after ${TIMEOUT}s, sending KILL: $(alive | xargs)"
      signal_all KILL
      sleep 1
      break
    fi
    sleep 0.2
  done
  left+=" $(alive | xargs)"
}

services=() broker=() infra=()
for f in "$RUN"/pids/*.pid; do
  case "$(basename "$f" .pid)" in
    rabbitmq) broker+=("$f") ;;
    epmd|mariadb) infra+=("$f") ;;
    *) services+=("$f") ;;
  esac
done
total=0 left=""
[ "${#services[@]}" -eq 0 ] || stop_stage "${services[@]}"
# RabbitMQ's shutdown still talks to epmd: were ours gone, Erlang would start a detached
# `epmd -daemon` on our port and leave it behind. So the broker stops first, on its own.
[ "${#broker[@]}" -eq 0 ] || stop_stage "${broker[@]}"
[ "${#infra[@]}" -eq 0 ] || stop_stage "${infra[@]}"
left=$(echo $left)
if [ -n "$left" ]; then
  echo "OpenStack rig: could not stop: $left" >&2
  exit 1
fi
rm -f "$RUN"/pids/*.pid "$RUN/ready"
echo "OpenStack rig: stopped $total processes."
