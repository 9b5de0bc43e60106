#!/usr/bin/env bash
# `npm run setup`: installs everything leasekeeper needs, idempotently (safe to run again):
# Debian packages, the Temporal CLI (built with Go), npm packages, the build, and the local database.
set -euo pipefail
cd "$(dirname "$0")/.."

# --- Debian packages -------------------------------------------------------------------------
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "setup: run as root (or with sudo available): Debian packages are needed" >&2; exit 1; }
  SUDO="sudo"
fi
# The OpenStack test rig's packages (MariaDB, RabbitMQ, Nova, Placement, Neutron, Glance, Keystone
# libraries) and the real Blazar client; idempotent.
$SUDO bash scripts/openstack/install.sh
missing=()
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || missing+=(postgresql)
compgen -G "/usr/share/postgresql/*/extension/btree_gist.control" >/dev/null || missing+=(postgresql-contrib)
command -v setpriv >/dev/null || missing+=(util-linux)
# The calendar page's browser tests and screenshot: Debian's Chromium (no browser download), with a font.
command -v chromium >/dev/null || missing+=(chromium)
compgen -G "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf" >/dev/null || missing+=(fonts-dejavu-core)
# The power drivers' tests (issue 48): OpenIPMI's BMC simulator as the peer of the ipmi driver, and ipmitool, the driver's own program.
command -v ipmi_sim >/dev/null || missing+=(openipmi)
command -v ipmitool >/dev/null || missing+=(ipmitool)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  # Keep package scripts from starting system services (e.g. a postgresql@15-main cluster on 5432).
  added_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    added_policy=1
  fi
  # Wait for another apt/dpkg run (e.g. unattended upgrades) instead of failing at once.
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
  [ -n "$added_policy" ] && $SUDO rm -f /usr/sbin/policy-rc.d
fi

# --- Temporal: the CLI (dev server + Web UI) and temporal-server (LK_TEMPORAL=server) --------
if [ -n "${TEMPORAL_ADDRESS:-}" ]; then
  echo "setup: TEMPORAL_ADDRESS is set ($TEMPORAL_ADDRESS): not building Temporal"
else
  bash scripts/build-temporal.sh cli server
fi

# --- npm packages and build ------------------------------------------------------------------
# `npm ci` refuses a lockfile that lacks other platforms' optional binaries (e.g. @swc/core-darwin-*),
# which a registry mirror without those packages cannot record; then install the same locked
# versions without touching the lockfile.
npm_log="$(mktemp)"
if ! npm ci --no-audit --no-fund >"$npm_log" 2>&1; then
  grep -m 3 -E "Missing:|ERR|error code" "$npm_log" | sed 's/^/setup: npm ci: /' || true
  echo "setup: npm ci refused the lockfile; installing the locked versions with npm install --no-save"
  npm install --no-save --no-audit --no-fund
else
  tail -n 2 "$npm_log"
fi
rm -f "$npm_log"
npm run build

# --- database: local cluster (unless DATABASE_URL) and migrations ----------------------------
node dist/scripts/init-db.js
echo "setup: done. Next: npm start (dev stack) or npm test."
