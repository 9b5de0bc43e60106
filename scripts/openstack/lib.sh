# shellcheck shell=bash
# Common settings for the leasekeeper OpenStack test rig (sourced by up.sh,
# down.sh and wait-ready.sh).  Everything here can be overridden from the
# environment.

LK_OS_SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LK_REPO_DIR="$(cd "$LK_OS_SCRIPT_DIR/../.." && pwd)"

# Run directory: all state, configs, logs and PID files live here.
RUN="${LK_OPENSTACK_DIR:-$LK_REPO_DIR/.data/openstack}"
mkdir -p "$(dirname "$RUN")"
RUN="$(cd "$(dirname "$RUN")" && pwd)/$(basename "$RUN")"
export RUN

# Debian's interpreter: the first python3 on PATH may not see Debian's packages.
PY=/usr/bin/python3

# Every port is LK_OS_PORT_BASE + the service's usual port; all bound to
# 127.0.0.1 only, and all below the kernel's ephemeral range (up.sh checks):
# a port in it may be held by any outgoing connection or its TIME_WAIT.
PORT_BASE="${LK_OS_PORT_BASE:-10000}"
HOST=127.0.0.1
MYSQL_PORT=$((PORT_BASE + 3306))
EPMD_PORT=$((PORT_BASE + 4369))
KEYSTONE_PORT=$((PORT_BASE + 5000))
AMQP_PORT=$((PORT_BASE + 5672))
NOVA_PORT=$((PORT_BASE + 8774))
PLACEMENT_PORT=$((PORT_BASE + 8778))
GLANCE_PORT=$((PORT_BASE + 9292))
NEUTRON_PORT=$((PORT_BASE + 9696))
# Erlang distribution: not RabbitMQ's usual AMQP + 20000 (35672 here), which
# lies in the ephemeral range; RabbitMQ then dies at boot (dist_port_already_used).
RABBIT_DIST_PORT=$((PORT_BASE + 5673))
ALL_PORTS="$MYSQL_PORT $EPMD_PORT $KEYSTONE_PORT $AMQP_PORT $NOVA_PORT $PLACEMENT_PORT $GLANCE_PORT $NEUTRON_PORT $RABBIT_DIST_PORT"

# Fake compute hosts (nova-compute with the fake driver) and their fake
# Open vSwitch agents.
NUM_COMPUTES="${LK_OS_COMPUTES:-3}"
COMPUTE_HOSTS=""
for ((i = 1; i <= NUM_COMPUTES; i++)); do COMPUTE_HOSTS+="fake-$i "; done
COMPUTE_HOSTS="${COMPUTE_HOSTS% }"

# Test-only credentials (loopback rig).
OS_PASSWORD_ALL="${LK_OS_PASSWORD:-lk-secret}"

KEYSTONE_URL="http://$HOST:$KEYSTONE_PORT/v3"
NOVA_URL="http://$HOST:$NOVA_PORT/v2.1"
PLACEMENT_URL="http://$HOST:$PLACEMENT_PORT"
GLANCE_URL="http://$HOST:$GLANCE_PORT"
NEUTRON_URL="http://$HOST:$NEUTRON_PORT"
DB_URL_BASE="mysql+pymysql://root@$HOST:$MYSQL_PORT"
TRANSPORT_URL="rabbit://guest:guest@$HOST:$AMQP_PORT/"

MARKER="$RUN/.lk-openstack-rig"   # proves a directory is ours before rm -rf
# Every rig process carries this variable; down.sh checks it before killing,
# so a recycled PID is never hit.
RIG_TAG="LK_OPENSTACK_RIG=$RUN"

log() { printf '[openstack %5ss] %s\n' "$(( $(date +%s) - ${T0:-$(date +%s)} ))" "$*"; }
die() { printf 'openstack rig: ERROR: %s\n' "$*" >&2; exit 1; }

# Process bookkeeping.  pids/NAME.pid holds "PID STARTTIME" (STARTTIME =
# field 22 of /proc/PID/stat), so a recycled PID is never mistaken for ours.
# Each service is started with setsid, so it leads its own process group;
# nova-api, neutron-server and RabbitMQ have children (RabbitMQ's
# erl_child_setup even starts its own session), so a service's processes are
# its group plus its descendants.

proc_field() {  # proc_field PID N: field N of /proc/PID/stat (N >= 3)
  local st n=$2
  st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  st=${st##*) }
  # shellcheck disable=SC2086
  set -- $st
  shift $(( n - 3 ))
  echo "$1"
}
proc_start() { proc_field "$1" 22; }

# record_pid NAME PID
record_pid() { echo "$2 $(proc_start "$2" || echo 0)" > "$RUN/pids/$1.pid"; }

# recorded_alive FILE: print the PID of a pid file if that very process lives.
recorded_alive() {
  local pid start
  read -r pid start < "$1" 2>/dev/null || return 1
  [ -n "$pid" ] && [ "$(proc_start "$pid" 2>/dev/null)" = "$start" ] && echo "$pid"
}

# tagged PID: process carries this rig's marker (env tag or run dir in its
# command line); used only for leftovers of a leader that is already gone.
tagged() {
  local pid=$1
  { tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null | grep -qxF "$RIG_TAG" && return 0
  { tr '\0' ' ' < "/proc/$pid/cmdline"; } 2>/dev/null | grep -qF "$RUN/"
}

# all_rig_pids [PIDFILE...]: "PID STARTTIME" for every live process of the
# recorded services (default: all) -- leader, its process group, descendants.
all_rig_pids() {
  local f pid start leader files=("$@")
  [ -d "$RUN/pids" ] || return 0
  [ "${#files[@]}" -gt 0 ] || files=("$RUN"/pids/*.pid)
  declare -A ppid_of pgid_of keep
  while read -r pid pp pg; do ppid_of[$pid]=$pp; pgid_of[$pid]=$pg; done \
    < <(ps -eo pid=,ppid=,pgid= 2>/dev/null)
  for f in "${files[@]}"; do
    [ -e "$f" ] || continue
    read -r leader start < "$f" 2>/dev/null || continue
    [ -n "$leader" ] || continue
    if [ "$(proc_start "$leader" 2>/dev/null)" = "$start" ]; then
      keep[$leader]=1
      for pid in "${!pgid_of[@]}"; do
        [ "${pgid_of[$pid]}" = "$leader" ] && keep[$pid]=1
      done
    else  # leader gone: its group's tagged leftovers
      for pid in "${!pgid_of[@]}"; do
        [ "${pgid_of[$pid]}" = "$leader" ] && tagged "$pid" && keep[$pid]=1
      done
    fi
  done
  # descendants of everything kept so far
  local changed=1
  while [ "$changed" = 1 ]; do
    changed=0
    for pid in "${!ppid_of[@]}"; do
      if [ -z "${keep[$pid]:-}" ] && [ -n "${keep[${ppid_of[$pid]}]:-}" ]; then
        keep[$pid]=1; changed=1
      fi
    done
  done
  for pid in "${!keep[@]}"; do
    start=$(proc_start "$pid" 2>/dev/null) && echo "$pid $start"
  done | sort -n
}

# tcp_open PORT: something accepts connections on 127.0.0.1:PORT.
tcp_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# http_ok URL: the server answers with any HTTP status below 500 (300/401
# count: the API is serving).  Pure bash, no curl needed.
http_ok() {
  local rest=${1#http://} hostport path host port line
  hostport=${rest%%/*}; path=/${rest#"$hostport"}; path=${path/#\/\//\/}
  host=${hostport%:*}; port=${hostport##*:}
  line=$(
    exec 2>/dev/null
    exec 3<>"/dev/tcp/$host/$port" || exit 1
    printf 'GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n' "$path" "$hostport" >&3
    IFS= read -r -t 5 line <&3 && printf '%s' "$line"
  ) || return 1
  [[ "$line" =~ ^HTTP/[0-9.]+\ ([0-9]{3}) ]] && [ "${BASH_REMATCH[1]}" -lt 500 ]
}
