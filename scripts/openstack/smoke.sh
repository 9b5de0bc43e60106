#!/usr/bin/env bash
# Smoke test of a running rig (after up.sh), with the real scheduler:
#  1. project-a boots a server with no network (2.37 `--nic none`) -> ACTIVE;
#  2. a port bound to fake-2 by admin gets vif_type ovs;
#  2b. network segments: Neutron's segment ranges list physnet1's tenant VLANs
#     (100..199); an admin creates a VLAN provider network with tag 200 (outside
#     them) owned by project-b, and a project-b server boots attached to it
#     (its port bound with vif_type ovs through the fake agent's physnet1);
#  3. lease isolation with Nova's built-in mechanisms: aggregate lease-test
#     (AZ lease-test-az) holding fake-1 with filter_tenant_id=<project-a>:
#     project-a lands on fake-1 via the AZ, project-b never lands on fake-1 and
#     cannot use the AZ.
#  4. optional (LK_SMOKE_TRAIT=1): isolated-aggregate trait variant.
# Cleans up everything it creates.  Exit 0 when every check passes.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export OS_CLIENT_CONFIG_FILE="$RUN/clouds.yaml"
unset OS_CLOUD OS_USERNAME OS_PROJECT_NAME OS_PASSWORD
O=/usr/bin/openstack
AD=("$O" --os-cloud leasekeeper-admin)
PA=("$O" --os-cloud leasekeeper-project-a --os-compute-api-version 2.74)
PB=("$O" --os-cloud leasekeeper-project-b --os-compute-api-version 2.74)
PB_COUNT="${LK_SMOKE_PB_SERVERS:-4}"
pass=0 fail=0
ok()  { echo "PASS: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

cleanup() {
  set +e
  "${PA[@]}" server list -f value -c ID | xargs -r "${PA[@]}" server delete --wait >/dev/null 2>&1
  "${PB[@]}" server list -f value -c ID | xargs -r "${PB[@]}" server delete --wait >/dev/null 2>&1
  "${AD[@]}" port delete smoke-port >/dev/null 2>&1
  "${AD[@]}" network delete smoke-seg-net >/dev/null 2>&1
  "${PA[@]}" network delete smoke-net >/dev/null 2>&1
  if "${AD[@]}" aggregate show lease-test >/dev/null 2>&1; then
    "${AD[@]}" aggregate remove host lease-test fake-1 >/dev/null 2>&1
    "${AD[@]}" aggregate delete lease-test >/dev/null 2>&1
  fi
  "${AD[@]}" flavor delete lease-test.tiny >/dev/null 2>&1
  if [ -n "${FAKE1_RP:-}" ]; then  # put fake-1's own traits back
    # shellcheck disable=SC2086
    "${AD[@]}" --os-placement-api-version 1.6 resource provider trait set $FAKE1_TRAITS "$FAKE1_RP" >/dev/null 2>&1
  fi
  "${AD[@]}" --os-placement-api-version 1.6 trait delete CUSTOM_LEASE_TEST >/dev/null 2>&1
}
trap cleanup EXIT

# host_of a|b NAME: the compute host of project-a's / project-b's server NAME.
host_of() {
  local -n cli="P${1^^}"
  local id
  id=$("${cli[@]}" server show "$2" -f value -c id 2>/dev/null) || { echo none; return; }
  "${AD[@]}" server show "$id" -f value -c OS-EXT-SRV-ATTR:host
}
# wait_built a|b: wait (bounded) until none of the project's servers is BUILD.
wait_built() {
  local -n cli="P${1^^}"
  local t=$(( $(date +%s) + 120 ))
  while "${cli[@]}" server list -f value -c Status | grep -q BUILD; do
    [ "$(date +%s)" -lt "$t" ] || { echo "servers still BUILD after 120s"; return 1; }
    sleep 1
  done
}
# hosts_of_b: compute host of each project-b server, one per line.
hosts_of_b() {
  "${AD[@]}" server list --all-projects --project project-b --long -f json |
    "$PY" -c 'import json,sys; [print(s["Host"] or "-") for s in json.load(sys.stdin)]'
}
status_of() { local -n cli="P${1^^}"; "${cli[@]}" server show "$2" -f value -c status 2>/dev/null || echo none; }

# 1. server with no network
"${PA[@]}" server create --flavor m1.tiny --image fake-image --nic none smoke-a0 >/dev/null
wait_built a
st=$(status_of a smoke-a0)
[ "$st" = ACTIVE ] && ok "project-a server (--nic none) ACTIVE on $(host_of a smoke-a0)" || bad "project-a server status $st"

# 2. port binding on fake-2
"${PA[@]}" network create smoke-net -f value -c id >/dev/null
"${PA[@]}" subnet create --network smoke-net --subnet-range 10.99.0.0/24 smoke-sub -f value -c id >/dev/null
"${AD[@]}" port create --project project-a --network smoke-net smoke-port -f value -c id >/dev/null
"${AD[@]}" port set --host fake-2 smoke-port
vif=$("${AD[@]}" port show smoke-port -f value -c binding_vif_type)
[ "$vif" = ovs ] && ok "port bound to fake-2: vif_type ovs" || bad "port binding vif_type=$vif"

# 2b. a reservable VLAN segment: a provider network outside the tenant range
ranges=$("${AD[@]}" network segment range list -f value -c "Network Type" -c "Physical Network" -c "Minimum ID" -c "Maximum ID" | xargs)
[ "$ranges" = "vlan physnet1 100 199" ] && ok "segment ranges: $ranges" || bad "segment ranges: '$ranges'"
PB_ID=$("${AD[@]}" project show project-b -f value -c id)
"${AD[@]}" network create --project "$PB_ID" --provider-network-type vlan \
  --provider-physical-network physnet1 --provider-segment 200 smoke-seg-net -f value -c id >/dev/null
"${AD[@]}" subnet create --project "$PB_ID" --network smoke-seg-net --subnet-range 10.98.0.0/24 smoke-seg-sub -f value -c id >/dev/null
"${PB[@]}" server create --flavor m1.tiny --image fake-image --network smoke-seg-net smoke-b-seg >/dev/null
wait_built b
st=$(status_of b smoke-b-seg)
seg_port=$("${AD[@]}" port list --network smoke-seg-net --device-owner compute:nova -f value -c ID)
vif=$("${AD[@]}" port show "$seg_port" -f value -c binding_vif_type 2>/dev/null || echo none)
[ "$st" = ACTIVE ] && [ "$vif" = ovs ] && ok "project-b server on VLAN 200 network ACTIVE, port vif_type ovs" ||
  bad "project-b server on VLAN 200 network: status $st, vif_type $vif"
"${PB[@]}" server delete --wait smoke-b-seg >/dev/null
"${AD[@]}" network delete smoke-seg-net >/dev/null

# 3. isolation: aggregate + AZ + filter_tenant_id
PA_ID=$("${AD[@]}" project show project-a -f value -c id)
"${AD[@]}" aggregate create --zone lease-test-az lease-test -f value -c id >/dev/null
"${AD[@]}" aggregate add host lease-test fake-1 >/dev/null
"${AD[@]}" aggregate set --property "filter_tenant_id=$PA_ID" lease-test

"${PA[@]}" server create --flavor m1.tiny --image fake-image --nic none \
  --availability-zone lease-test-az smoke-a-az >/dev/null
wait_built a
h=$(host_of a smoke-a-az)
[ "$h" = fake-1 ] && ok "project-a with AZ lease-test-az -> fake-1" || bad "project-a with AZ landed on '$h'"

"${PB[@]}" server create --flavor m1.tiny --image fake-image --nic none \
  --min "$PB_COUNT" --max "$PB_COUNT" smoke-b >/dev/null
wait_built b
hosts=$(hosts_of_b | sort | uniq -c | xargs)
if hosts_of_b | grep -qx fake-1; then
  bad "a project-b server landed on fake-1 ($hosts)"
else
  ok "$PB_COUNT project-b servers without AZ avoided fake-1 ($hosts)"
fi

"${PB[@]}" server create --flavor m1.tiny --image fake-image --nic none \
  --availability-zone lease-test-az smoke-b-az >/dev/null
wait_built b
st=$(status_of b smoke-b-az)
[ "$st" = ERROR ] && ok "project-b with AZ lease-test-az -> ERROR (no valid host)" || bad "project-b with AZ: status $st"

# Where does project-a go WITHOUT the AZ?  With
# limit_tenants_to_placement_aggregate=true it is confined to its aggregate.
"${PA[@]}" server create --flavor m1.tiny --image fake-image --nic none smoke-a-noaz >/dev/null
wait_built a
echo "INFO: project-a without AZ -> $(host_of a smoke-a-noaz) (limit_tenants_to_placement_aggregate=$(grep -m1 '^limit_tenants_to_placement_aggregate' "$RUN/etc/nova/nova.conf" | cut -d= -f2 | tr -d ' '))"

# 4. optional: isolated aggregate by required trait (flavor-based access)
if [ "${LK_SMOKE_TRAIT:-0}" = 1 ]; then
  "${PB[@]}" server list -f value -c ID | xargs -r "${PB[@]}" server delete --wait >/dev/null
  "${AD[@]}" aggregate unset --property filter_tenant_id lease-test
  "${AD[@]}" aggregate set --property trait:CUSTOM_LEASE_TEST=required lease-test
  FAKE1_RP=$("${AD[@]}" resource provider list --name fake-1 -f value -c uuid)
  "${AD[@]}" --os-placement-api-version 1.6 trait create CUSTOM_LEASE_TEST
  FAKE1_TRAITS=$("${AD[@]}" --os-placement-api-version 1.6 resource provider trait list "$FAKE1_RP" -f value | sed 's/^/--trait /' | tr '\n' ' ')
  # shellcheck disable=SC2086
  "${AD[@]}" --os-placement-api-version 1.6 resource provider trait set $FAKE1_TRAITS --trait CUSTOM_LEASE_TEST "$FAKE1_RP" >/dev/null
  "${AD[@]}" flavor create --private --project project-a --vcpus 1 --ram 512 --disk 1 \
    --property trait:CUSTOM_LEASE_TEST=required lease-test.tiny >/dev/null
  "${PB[@]}" server create --flavor m1.tiny --image fake-image --nic none \
    --min "$PB_COUNT" --max "$PB_COUNT" smoke-t-b >/dev/null
  wait_built b
  hosts=$(hosts_of_b | sort | uniq -c | xargs)
  if hosts_of_b | grep -qx fake-1; then
    bad "trait variant: a project-b server landed on fake-1 ($hosts)"
  else
    ok "trait variant: $PB_COUNT project-b servers avoided fake-1 ($hosts)"
  fi
  "${PA[@]}" server create --flavor lease-test.tiny --image fake-image --nic none smoke-t-a >/dev/null
  wait_built a
  h=$(host_of a smoke-t-a)
  [ "$h" = fake-1 ] && ok "trait variant: project-a with flavor lease-test.tiny -> fake-1" || bad "trait variant: project-a landed on '$h'"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
