#!/usr/bin/env bash
# Bring up a real, small OpenStack (Debian 12 = Zed) on 127.0.0.1 for
# leasekeeper's integration tests: MariaDB, RabbitMQ, Keystone, Placement,
# Glance, Neutron (ML2/openvswitch + a fake OVS agent), Nova api/conductor/
# scheduler and fake compute hosts fake-1..fake-N (fake.MediumFakeDriver).
#
#   bash scripts/openstack/up.sh        # install once, then start (idempotent)
#   bash scripts/openstack/down.sh      # stop exactly what up.sh started
#
# Environment:
#   LK_OPENSTACK_DIR  run dir (default $REPO/.data/openstack): configs, data,
#                     logs/, pids/, clouds.yaml, env.sh
#   LK_OS_PORT_BASE   port offset (default 10000: MariaDB 13306, Keystone
#                     15000, AMQP 15672, Nova 18774, Placement 18778,
#                     Glance 19292, Neutron 19696, epmd 14369, Erlang dist 15673)
#   LK_OS_COMPUTES    number of fake compute hosts (default 3)
#   LK_OS_PASSWORD    password of every rig user (default lk-secret)
#   LK_OS_READY_TIMEOUT  seconds to wait for readiness (default 180)
#   LK_NOVA_LIMIT_TENANTS_TO_AGGREGATE  [scheduler]
#                     limit_tenants_to_placement_aggregate (default false)
set -euo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
D="$LK_OS_SCRIPT_DIR"

[ "$(id -u)" -eq 0 ] || die "must run as root (MariaDB/RabbitMQ run as root here)"

# --- 1. packages (once) ------------------------------------------------------
bash "$D/install.sh"

print_usage() {
  cat <<EOF
OpenStack rig is up (run dir $RUN).
  export OS_CLIENT_CONFIG_FILE=$RUN/clouds.yaml
  openstack --os-cloud leasekeeper-admin hypervisor list
  # clouds: leasekeeper-admin, leasekeeper-project-a, leasekeeper-project-b
  source $RUN/env.sh   # OS_AUTH_URL, LK_NOVA_URL, LK_PLACEMENT_URL, ...
  logs: $RUN/logs/   stop: bash $D/down.sh
EOF
}

# --- 2. already up? stale? ------------------------------------------------------
rig_pids_alive() {
  local f
  compgen -G "$RUN/pids/*.pid" >/dev/null || return 1
  for f in "$RUN"/pids/*.pid; do
    recorded_alive "$f" >/dev/null || return 1
  done
}
if [ -f "$RUN/ready" ] && rig_pids_alive &&
   LK_OS_READY_TIMEOUT=15 bash "$D/wait-ready.sh" >/dev/null 2>&1; then
  echo "OpenStack rig already up and healthy."
  print_usage
  exit 0
fi

T0=$(date +%s)
if [ -e "$RUN" ]; then
  if [ -e "$MARKER" ]; then
    if compgen -G "$RUN/pids/*.pid" >/dev/null; then
      log "stale or unhealthy rig found in $RUN: stopping it and starting afresh"
      bash "$D/down.sh"
    fi
    rm -rf "$RUN"
  elif [ -z "$(ls -A "$RUN")" ]; then
    rmdir "$RUN"
  else
    die "$RUN exists and is not a rig directory (no $(basename "$MARKER")); refusing to delete it"
  fi
fi

# A port in the kernel's ephemeral range may be held by any outgoing connection
# (or its TIME_WAIT) at the moment a service binds it.
read -r EPHEMERAL_LOW _ < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || EPHEMERAL_LOW=32768
for p in $ALL_PORTS; do
  if [ "$p" -ge "$EPHEMERAL_LOW" ]; then
    die "port $p lies in the kernel's ephemeral range (from $EPHEMERAL_LOW), where outgoing connections may hold it; lower LK_OS_PORT_BASE (now $PORT_BASE)"
  fi
  if tcp_open "$p"; then
    die "port $p on this machine is already in use; set LK_OS_PORT_BASE to move the rig (now $PORT_BASE)"
  fi
done

# On any failure: stop the background setup jobs and whatever was started.
on_exit() {
  local rc=$?
  [ "$rc" -eq 0 ] && return 0
  trap - EXIT
  local j
  # The setup subshells first, so none starts a service after down.sh ran.
  for j in "${SETUP_JOBS[@]}"; do kill -TERM "$j" 2>/dev/null || true; done
  for j in "${SETUP_JOBS[@]}"; do wait "$j" 2>/dev/null || true; done
  echo "openstack rig: bring-up failed (exit $rc); stopping what was started. Logs: $RUN/logs/" >&2
  bash "$D/down.sh" >&2 || true
  exit "$rc"
}
SETUP_JOBS=()
trap on_exit EXIT

mkdir -p "$RUN"/{pids,logs/rabbitmq,etc/{nova,keystone,placement,glance,neutron,rabbitmq}} \
         "$RUN"/state/{nova/instances,nova/lock,keystone,glance/{images,staging,tasks,lock},neutron/lock} \
         "$RUN"/rabbitmq "$RUN"/mysql
touch "$MARKER"
# Tag inherited by rig processes; down.sh uses it only to recognise leftovers
# of a service whose recorded leader is already gone.
export "${RIG_TAG?}"

# --- 3. configuration -------------------------------------------------------------
export RUN TRANSPORT_URL KEYSTONE_URL NOVA_URL PLACEMENT_URL GLANCE_URL NEUTRON_URL \
       DB_URL_BASE NOVA_PORT GLANCE_PORT NEUTRON_PORT AMQP_PORT OS_PASSWORD_ALL
export PASSWORD="$OS_PASSWORD_ALL"
export LIMIT_TENANTS="${LK_NOVA_LIMIT_TENANTS_TO_AGGREGATE:-false}"
"$PY" - "$D/templates" "$RUN/etc" <<'PYEOF'
import os, re, sys
src, dst = sys.argv[1], sys.argv[2]
KEYS = ["RUN", "TRANSPORT_URL", "KEYSTONE_URL", "DB_URL_BASE", "NOVA_PORT",
        "GLANCE_PORT", "NEUTRON_PORT", "AMQP_PORT", "PASSWORD", "LIMIT_TENANTS"]
files = {
    "nova.conf": "nova/nova.conf", "nova-db.conf": "nova/nova-db.conf",
    "nova-api-paste.ini": "nova/api-paste.ini",
    "keystone.conf": "keystone/keystone.conf",
    "placement.conf": "placement/placement.conf",
    "glance-api.conf": "glance/glance-api.conf",
    "glance-api-paste.ini": "glance/glance-api-paste.ini",
    "neutron.conf": "neutron/neutron.conf", "ml2_conf.ini": "neutron/ml2_conf.ini",
    "neutron-api-paste.ini": "neutron/api-paste.ini",
    "rabbitmq.conf": "rabbitmq/rabbitmq.conf",
}
for s, d in files.items():
    text = open(os.path.join(src, s)).read()
    text = re.sub(r"@(%s)@" % "|".join(KEYS), lambda m: os.environ[m.group(1)], text)
    left = re.findall(r"@[A-Z_]+@", text)
    if left:
        sys.exit("render %s: unknown placeholders %s" % (s, left))
    open(os.path.join(dst, d), "w").write(text)
PYEOF
for h in $COMPUTE_HOSTS; do
  printf '[DEFAULT]\nhost = %s\n' "$h" > "$RUN/etc/nova/compute-$h.conf"
done
echo '[].' > "$RUN/etc/rabbitmq/enabled_plugins"
: > "$RUN/etc/rabbitmq/rabbitmq-env.conf"
NOVA_CONF=(--config-file "$RUN/etc/nova/nova.conf")
NOVA_DB_CONF=("${NOVA_CONF[@]}" --config-file "$RUN/etc/nova/nova-db.conf")
NEUTRON_CONF=(--config-file "$RUN/etc/neutron/neutron.conf" --config-file "$RUN/etc/neutron/ml2_conf.ini")
GLANCE_CONF=(--config-file "$RUN/etc/glance/glance-api.conf")

# start_bg NAME CMD...: run a service in its own session/process group,
# output to logs/NAME.log, PID to pids/NAME.pid.
start_bg() {
  local name=$1; shift
  setsid "$@" >>"$RUN/logs/$name.log" 2>&1 </dev/null &
  record_pid "$name" $!
}
# step NAME CMD...: a one-shot setup command, output to logs/setup-NAME.log.
step() {
  local name=$1; shift
  if ! "$@" >>"$RUN/logs/setup-$name.log" 2>&1 </dev/null; then
    echo "openstack rig: setup step '$name' failed; last lines of $RUN/logs/setup-$name.log:" >&2
    tail -n 30 "$RUN/logs/setup-$name.log" >&2
    return 1
  fi
}
# An OpenStack console-script entry point: "${ENTRY[@]}" PROG MODULE:FUNC ARGS...
ENTRY=("$PY" "$D/launch.py")
# wait_until [--service NAME] SECONDS DESCRIPTION CMD...: until CMD succeeds. With
# --service, fail at once when that service's process is gone, and show the end
# of its log either way (RabbitMQ, say, names its reason there and exits).
wait_until() {
  local service=""
  if [ "$1" = --service ]; then service=$2; shift 2; fi
  local limit=$1 what=$2 t; shift 2
  t=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$service" ] && ! recorded_alive "$RUN/pids/$service.pid" >/dev/null; then
      service_failed "$service" "$what exited before it was ready"
    fi
    if [ "$(date +%s)" -ge "$t" ]; then
      service_failed "$service" "timed out after ${limit}s waiting for $what"
    fi
    sleep 0.5
  done
}
service_failed() {  # service_failed NAME|"" MESSAGE
  if [ -n "$1" ] && [ -s "$RUN/logs/$1.log" ]; then
    echo "openstack rig: last lines of $RUN/logs/$1.log:" >&2
    tail -n 15 "$RUN/logs/$1.log" | cut -c1-400 >&2
  fi
  die "$2 (logs in $RUN/logs)"
}
mysql_q() { mariadb --no-defaults -S "$RUN/mysql.sock" -uroot -N -B -e "$1"; }

# --- 4. MariaDB, epmd + RabbitMQ --------------------------------------------------
log "starting MariaDB and RabbitMQ"
export ERL_EPMD_ADDRESS=$HOST ERL_EPMD_PORT=$EPMD_PORT
start_bg epmd epmd -address "$HOST" -port "$EPMD_PORT"
(
  export HOME="$RUN/rabbitmq"   # Erlang cookie lives here
  export RABBITMQ_NODENAME=lk-rabbit@localhost RABBITMQ_NODE_IP_ADDRESS=$HOST \
         RABBITMQ_NODE_PORT=$AMQP_PORT RABBITMQ_DIST_PORT=$RABBIT_DIST_PORT \
         RABBITMQ_CONFIG_FILE="$RUN/etc/rabbitmq/rabbitmq.conf" \
         RABBITMQ_CONF_ENV_FILE="$RUN/etc/rabbitmq/rabbitmq-env.conf" \
         RABBITMQ_ENABLED_PLUGINS_FILE="$RUN/etc/rabbitmq/enabled_plugins" \
         RABBITMQ_MNESIA_BASE="$RUN/rabbitmq/mnesia" RABBITMQ_LOG_BASE="$RUN/logs/rabbitmq" \
         RABBITMQ_PID_FILE="$RUN/rabbitmq/rabbit.pid" ERL_CRASH_DUMP="$RUN/logs/rabbitmq/erl_crash.dump" \
         RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
  start_bg rabbitmq /usr/lib/rabbitmq/bin/rabbitmq-server
)
step mariadb-install mariadb-install-db --no-defaults --user=root --datadir="$RUN/mysql" \
  --auth-root-authentication-method=normal --skip-test-db
start_bg mariadb mariadbd --no-defaults --user=root --datadir="$RUN/mysql" \
  --bind-address=$HOST --port="$MYSQL_PORT" --socket="$RUN/mysql.sock" \
  --pid-file="$RUN/mysql/mariadbd.pid" --skip-log-bin --skip-name-resolve \
  --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 \
  --innodb-buffer-pool-size=128M --max-connections=1000 --performance-schema=0
wait_until --service mariadb 60 "MariaDB" mysql_q "SELECT 1"
mysql_q "CREATE DATABASE keystone; CREATE DATABASE placement; CREATE DATABASE glance;
         CREATE DATABASE neutron; CREATE DATABASE nova_api; CREATE DATABASE nova_cell0;
         CREATE DATABASE nova_cell1;"

# --- 5. schemas and the API services (in parallel) --------------------------------
log "creating schemas; starting Keystone, Placement, Glance, Neutron"
jobs_pids=()
( NOVA_CELL0_DB="$DB_URL_BASE/nova_cell0?charset=utf8" \
    step nova-db "$PY" "$D/nova_db_setup.py" "${NOVA_DB_CONF[@]}" ) & nova_db_job=$!; SETUP_JOBS+=($!)
(
  export OS_KEYSTONE_CONFIG_FILES="$RUN/etc/keystone/keystone.conf"
  KM=("$PY" /usr/bin/keystone-manage --config-file "$RUN/etc/keystone/keystone.conf")
  step keystone "${KM[@]}" db_sync
  step keystone "${KM[@]}" fernet_setup --keystone-user root --keystone-group root
  step keystone "${KM[@]}" credential_setup --keystone-user root --keystone-group root
  step keystone "${KM[@]}" bootstrap --bootstrap-password "$OS_PASSWORD_ALL" \
    --bootstrap-username admin --bootstrap-project-name admin \
    --bootstrap-role-name admin --bootstrap-region-id RegionOne \
    --bootstrap-admin-url "$KEYSTONE_URL/" --bootstrap-internal-url "$KEYSTONE_URL/" \
    --bootstrap-public-url "$KEYSTONE_URL/"
  start_bg keystone "$PY" "$D/keystone_wsgi.py" "$KEYSTONE_PORT"
) & keystone_job=$!; SETUP_JOBS+=($!)
(
  export OS_PLACEMENT_CONFIG_DIR="$RUN/etc/placement"
  step placement-db "$PY" /usr/bin/placement-manage \
    --config-file "$RUN/etc/placement/placement.conf" db sync
  start_bg placement \
    "$PY" -m waitress --listen="$HOST:$PLACEMENT_PORT" --threads=4 \
    --ident=placement --call placement.wsgi:init_application
) & placement_job=$!; SETUP_JOBS+=($!)
# Glance and Neutron are needed last: run them at lower CPU priority so the
# critical path (Keystone, Nova) gets the 2 cores; reniced back when ready.
(
  renice -n 10 -p "$BASHPID" >/dev/null
  step glance-db "${ENTRY[@]}" glance-manage glance.cmd.manage:main "${GLANCE_CONF[@]}" db_sync
  start_bg glance "${ENTRY[@]}" glance-api glance.cmd.api:main "${GLANCE_CONF[@]}"
) & jobs_pids+=($!); SETUP_JOBS+=($!)
(
  renice -n 10 -p "$BASHPID" >/dev/null
  step neutron-db "${ENTRY[@]}" neutron-db-manage neutron.db.migration.cli:main \
    "${NEUTRON_CONF[@]}" upgrade heads
  wait_until --service rabbitmq 60 "RabbitMQ" tcp_open "$AMQP_PORT"
  start_bg neutron-server "${ENTRY[@]}" neutron-server neutron.cmd.eventlet.server:main \
    "${NEUTRON_CONF[@]}"
) & jobs_pids+=($!); SETUP_JOBS+=($!)

wait "$keystone_job" || die "Keystone setup failed"
wait_until --service keystone 60 "Keystone" http_ok "$KEYSTONE_URL"
log "Keystone up; registering projects, users and endpoints"
step keystone-setup "$PY" "$D/keystone_setup.py"

# --- 6. Nova --------------------------------------------------------------------------
wait "$nova_db_job" || die "Nova database setup failed"
# Computes must reach Placement at start-up, or their resource providers only
# appear at the next periodic update (60 s).
wait "$placement_job" || die "Placement setup failed"
wait_until --service placement 60 "Placement" http_ok "$PLACEMENT_URL"
wait_until --service rabbitmq 60 "RabbitMQ" tcp_open "$AMQP_PORT"
# Nova's versioned notifications also land in versioned_notifications.<priority>,
# a queue oslo.messaging declares for consumers yet to come and nobody reads
# here (leasekeeper binds queues of its own): keep only the last 100 messages.
step rabbitmq-policy env HOME="$RUN/rabbitmq" \
  RABBITMQ_CONF_ENV_FILE="$RUN/etc/rabbitmq/rabbitmq-env.conf" \
  /usr/lib/rabbitmq/bin/rabbitmqctl -n lk-rabbit@localhost set_policy \
  --apply-to queues lk-unread-notifications '^versioned_notifications\.' \
  '{"max-length": 100}'
log "starting Nova conductor, scheduler, api and computes ($COMPUTE_HOSTS)"
start_bg nova-conductor "${ENTRY[@]}" nova-conductor nova.cmd.conductor:main "${NOVA_DB_CONF[@]}"
start_bg nova-scheduler "${ENTRY[@]}" nova-scheduler nova.cmd.scheduler:main "${NOVA_DB_CONF[@]}"
start_bg nova-api "${ENTRY[@]}" nova-api nova.cmd.api:main "${NOVA_DB_CONF[@]}"
for h in $COMPUTE_HOSTS; do
  start_bg "nova-compute-$h" "${ENTRY[@]}" nova-compute nova.cmd.compute:main \
    "${NOVA_CONF[@]}" --config-file "$RUN/etc/nova/compute-$h.conf"
done

for j in "${jobs_pids[@]}"; do wait "$j" || die "a setup step failed (see $RUN/logs/setup-*.log)"; done

compute_rows() {
  [ "$(mysql_q "SELECT COUNT(*) FROM nova_cell1.compute_nodes WHERE deleted=0")" -ge "$NUM_COMPUTES" ]
}
wait_until 120 "$NUM_COMPUTES compute nodes to register" compute_rows
log "computes registered; starting the fake OVS agent, discovering hosts"
# The agent's bandwidth providers hang off the compute providers, which the
# computes create right after their compute_nodes rows (Neutron retries a
# failed sync at the next heartbeat anyway).
start_bg fake-ovs-agent "$PY" "$D/fake_ovs_agent.py" \
  --config-file "$RUN/etc/neutron/neutron.conf" --hosts "${COMPUTE_HOSTS// /,}" \
  --interval 10 --bridge-mapping physnet1:br-ex --bandwidth br-ex:1000000:1000000 \
  --stopped-file "$RUN/fake-agents-stopped"
step discover-hosts "${ENTRY[@]}" nova-manage nova.cmd.manage:main "${NOVA_DB_CONF[@]}" \
  cell_v2 discover_hosts

# --- 7. client files, readiness ------------------------------------------------------------
cloud() {  # cloud NAME USER PROJECT
  cat <<EOF
  $1:
    auth_type: password
    auth:
      auth_url: $KEYSTONE_URL
      username: $2
      password: $OS_PASSWORD_ALL
      project_name: $3
      user_domain_name: Default
      project_domain_name: Default
    identity_api_version: 3
    region_name: RegionOne
    interface: public
EOF
}
{
  echo "clouds:"
  cloud leasekeeper-admin admin admin
  cloud leasekeeper-project-a user-a project-a
  cloud leasekeeper-project-b user-b project-b
} > "$RUN/clouds.yaml"
cat > "$RUN/env.sh" <<EOF
# Generated by scripts/openstack/up.sh: endpoints of the leasekeeper OpenStack rig.
# Credentials come from clouds.yaml (OS_CLOUD; --os-cloud overrides it).
# OS_USERNAME/OS_PROJECT_NAME are deliberately not exported: they would
# override the user of every --os-cloud choice.
export OS_CLIENT_CONFIG_FILE=$RUN/clouds.yaml
export OS_CLOUD=leasekeeper-admin
export OS_AUTH_URL=$KEYSTONE_URL
export OS_IDENTITY_API_VERSION=3
export OS_REGION_NAME=RegionOne
export OS_INTERFACE=public
export LK_OS_ADMIN_USER=admin
export LK_OS_ADMIN_PROJECT=admin
export LK_OS_USERS="project-a:user-a project-b:user-b"
export LK_KEYSTONE_URL=$KEYSTONE_URL
export LK_NOVA_URL=$NOVA_URL
export LK_PLACEMENT_URL=$PLACEMENT_URL
export LK_GLANCE_URL=$GLANCE_URL
export LK_NEUTRON_URL=$NEUTRON_URL
# Nova's versioned notifications (the host monitor wakes on them): Nova's own transport_url.
export LK_NOVA_NOTIFICATIONS_URL=$TRANSPORT_URL
export LK_OS_PASSWORD=$OS_PASSWORD_ALL
export LK_OS_COMPUTE_HOSTS="$COMPUTE_HOSTS"
export LK_OPENSTACK_DIR=$RUN
EOF

bash "$D/wait-ready.sh"
for f in "$RUN"/pids/*.pid; do  # back to normal priority
  pid=$(recorded_alive "$f") && renice -n 0 -g "$pid" >/dev/null 2>&1 || true
done
step seed "$PY" "$D/seed.py"
elapsed=$(( $(date +%s) - T0 ))
echo "$elapsed" > "$RUN/ready"
log "bring-up took ${elapsed}s"
print_usage
