#!/usr/bin/env bash
# Installs the Debian packages the OpenStack test rig needs (Debian 12 ships
# OpenStack Zed).  Only python3-* library packages plus mariadb/rabbitmq are
# installed -- never the daemon packages (nova-api, keystone, ...), which pull
# libvirt/qemu/uwsgi and start services.  Idempotent: does nothing when every
# package is already installed.  Must run as root.
set -euo pipefail

PKGS=(procps rabbitmq-server mariadb-server python3-nova python3-placement python3-glance
      python3-neutron python3-keystone python3-waitress python3-openstackclient
      python3-osc-placement python3-blazarclient)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install.sh: must run as root to install: ${missing[*]}" >&2
  exit 1
fi

# No postinst may start a service (our policy file is removed again afterwards).
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
elif ! grep -q 'exit 101' /usr/sbin/policy-rc.d; then
  echo "install.sh: /usr/sbin/policy-rc.d exists and may let packages start services; continuing" >&2
fi

t0=$(date +%s)
echo "install.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
echo "install.sh: installed in $(( $(date +%s) - t0 )) s"
