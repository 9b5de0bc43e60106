#!/usr/bin/env bash
# Wait (bounded by LK_OS_READY_TIMEOUT, default 180 s) until the rig started
# by up.sh is usable: every API answers, the fake hypervisors are up in Nova,
# their compute and bandwidth resource providers exist in Placement and the
# fake OVS agents are alive.  Exit 0 when ready, 1 on timeout.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export KEYSTONE_URL NOVA_URL PLACEMENT_URL GLANCE_URL NEUTRON_URL OS_PASSWORD_ALL COMPUTE_HOSTS
exec "$PY" "$LK_OS_SCRIPT_DIR/wait_ready.py"
