"""Wait (bounded) until the rig answers and is fully usable.

Checks, repeatedly until all pass or the timeout expires:
  * Keystone, Nova, Placement, Glance and Neutron answer HTTP;
  * an admin token can be had;
  * Nova lists N hypervisors fake-1..N, state up, status enabled;
  * Placement has the N compute providers and, for each host, the fake OVS
    agent's bandwidth provider `<host>:Open vSwitch agent:br-ex` with
    NET_BW_EGR_KILOBIT_PER_SEC / NET_BW_IGR_KILOBIT_PER_SEC inventory;
  * Neutron lists N alive Open vSwitch agents;
  * Neutron lists its ML2 VLAN ranges as network segment ranges (the
    network_segment_range service plugin, which network segment enrolment reads).

    /usr/bin/python3 wait_ready.py   (configuration from the environment:
        KEYSTONE_URL NOVA_URL PLACEMENT_URL GLANCE_URL NEUTRON_URL
        OS_PASSWORD_ALL COMPUTE_HOSTS LK_OS_READY_TIMEOUT)
"""
import os
import sys
import time

import requests

KEYSTONE = os.environ["KEYSTONE_URL"]
NOVA = os.environ["NOVA_URL"]
PLACEMENT = os.environ["PLACEMENT_URL"]
GLANCE = os.environ["GLANCE_URL"]
NEUTRON = os.environ["NEUTRON_URL"]
PASSWORD = os.environ["OS_PASSWORD_ALL"]
HOSTS = os.environ["COMPUTE_HOSTS"].split()
TIMEOUT = float(os.environ.get("LK_OS_READY_TIMEOUT", "180"))
BW = ("NET_BW_EGR_KILOBIT_PER_SEC", "NET_BW_IGR_KILOBIT_PER_SEC")


class NotReady(Exception):
    pass


def token():
    body = {"auth": {
        "identity": {"methods": ["password"], "password": {"user": {
            "name": "admin", "domain": {"id": "default"},
            "password": PASSWORD}}},
        "scope": {"project": {"name": "admin",
                              "domain": {"id": "default"}}}}}
    r = requests.post(KEYSTONE + "/auth/tokens", json=body, timeout=10)
    if r.status_code != 201:
        raise NotReady("keystone token: HTTP %s" % r.status_code)
    return r.headers["X-Subject-Token"]


def get(url, tok, **headers):
    r = requests.get(url, headers=dict(headers, **{"X-Auth-Token": tok}),
                     timeout=10)
    if r.status_code != 200:
        raise NotReady("GET %s: HTTP %s" % (url, r.status_code))
    return r.json()


def check():
    for name, url in (("keystone", KEYSTONE), ("nova", NOVA),
                      ("placement", PLACEMENT), ("glance", GLANCE),
                      ("neutron", NEUTRON)):
        try:
            code = requests.get(url, timeout=5).status_code
        except requests.RequestException as exc:
            raise NotReady("%s not answering (%s)" % (name, type(exc).__name__))
        if code >= 500:
            raise NotReady("%s answers HTTP %s" % (name, code))
    tok = token()

    hyps = get(NOVA + "/os-hypervisors/detail", tok)["hypervisors"]
    ok = {h["hypervisor_hostname"] for h in hyps
          if h.get("state") == "up" and h.get("status") == "enabled"}
    missing = [h for h in HOSTS if h not in ok]
    if missing:
        raise NotReady("hypervisors not up yet: %s" % " ".join(missing))

    pl = {"OpenStack-API-Version": "placement 1.14"}
    rps = get(PLACEMENT + "/resource_providers", tok, **pl)["resource_providers"]
    by_name = {rp["name"]: rp for rp in rps}
    for h in HOSTS:
        if h not in by_name:
            raise NotReady("no compute resource provider for %s" % h)
        bw = by_name.get("%s:Open vSwitch agent:br-ex" % h)
        if bw is None:
            raise NotReady("no bandwidth resource provider for %s" % h)
        inv = get(PLACEMENT + "/resource_providers/%s/inventories" % bw["uuid"],
                  tok, **pl)["inventories"]
        if not all(rc in inv for rc in BW):
            raise NotReady("bandwidth inventory missing for %s" % h)

    agents = get(NEUTRON + "/v2.0/agents?agent_type=Open+vSwitch+agent",
                 tok)["agents"]
    alive = {a["host"] for a in agents if a.get("alive")}
    missing = [h for h in HOSTS if h not in alive]
    if missing:
        raise NotReady("OVS agents not alive: %s" % " ".join(missing))

    ranges = get(NEUTRON + "/v2.0/network_segment_ranges?network_type=vlan",
                 tok)["network_segment_ranges"]
    if not any(r.get("physical_network") == "physnet1" for r in ranges):
        raise NotReady("no VLAN segment range on physnet1 in Neutron")


def main():
    deadline = time.monotonic() + TIMEOUT
    last = None
    while True:
        try:
            check()
            print("wait_ready: all APIs answer; %d hypervisors up; compute and "
                  "bandwidth providers in Placement; agents alive; VLAN segment "
                  "ranges listed" % len(HOSTS))
            return 0
        except (NotReady, requests.RequestException) as exc:
            if str(exc) != last:
                print("wait_ready: %s" % exc, flush=True)
                last = str(exc)
        if time.monotonic() >= deadline:
            print("wait_ready: NOT READY after %.0fs: %s" % (TIMEOUT, last),
                  file=sys.stderr)
            return 1
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
