"""Create the rig's public flavors, a tiny image and an external network
(idempotent).

Flavors m1.tiny (1 vCPU, 512 MiB, 1 GiB), m1.small (1, 2048, 20) and
m1.medium (2, 4096, 40); image `fake-image` (a few bytes, raw/bare: the fake
virt driver never reads it); external network `public` (flat, physical
network `public`) with subnet 203.0.113.0/24 whose allocation pool
(.10-.99) leaves .100-.254 for addresses enrolled for floating IP leases.

    /usr/bin/python3 seed.py  (configuration from the environment)
"""
import os
import sys

from keystoneauth1 import session as ks_session
from keystoneauth1.identity import v3

FLAVORS = [("m1.tiny", 1, 512, 1), ("m1.small", 1, 2048, 20),
           ("m1.medium", 2, 4096, 40)]
IMAGE = "fake-image"
PUBLIC_NETWORK = "public"
PUBLIC_SUBNET = {"name": "public-v4", "ip_version": 4,
                 "cidr": "203.0.113.0/24", "gateway_ip": "203.0.113.1",
                 "enable_dhcp": False,
                 "allocation_pools": [{"start": "203.0.113.10",
                                       "end": "203.0.113.99"}]}


def main():
    auth = v3.Password(auth_url=os.environ["KEYSTONE_URL"], username="admin",
                       password=os.environ["OS_PASSWORD_ALL"],
                       project_name="admin", user_domain_id="default",
                       project_domain_id="default")
    sess = ks_session.Session(auth=auth)
    nova = os.environ["NOVA_URL"]
    glance = os.environ["GLANCE_URL"]

    have = {f["name"] for f in sess.get(nova + "/flavors?is_public=None")
            .json()["flavors"]}
    for name, vcpus, ram, disk in FLAVORS:
        if name not in have:
            sess.post(nova + "/flavors", json={"flavor": {
                "name": name, "vcpus": vcpus, "ram": ram, "disk": disk,
                "os-flavor-access:is_public": True}})

    images = sess.get(glance + "/v2/images?name=" + IMAGE).json()["images"]
    if not images:
        img = sess.post(glance + "/v2/images", json={
            "name": IMAGE, "disk_format": "raw", "container_format": "bare",
            "visibility": "public"}).json()
        sess.put(glance + "/v2/images/%s/file" % img["id"],
                 data=b"leasekeeper fake image\n",
                 headers={"Content-Type": "application/octet-stream"})
    neutron = os.environ["NEUTRON_URL"] + "/v2.0"
    nets = sess.get(neutron + "/networks?name=" + PUBLIC_NETWORK).json()[
        "networks"]
    net = nets[0] if nets else sess.post(neutron + "/networks", json={
        "network": {"name": PUBLIC_NETWORK, "router:external": True,
                    "provider:network_type": "flat",
                    "provider:physical_network": PUBLIC_NETWORK}}).json()[
        "network"]
    if not net["subnets"]:
        sess.post(neutron + "/subnets", json={"subnet": dict(
            PUBLIC_SUBNET, network_id=net["id"])})

    print("seed: flavors %s, image %s and external network %s ready"
          % (", ".join(f[0] for f in FLAVORS), IMAGE, PUBLIC_NETWORK))
    return 0


if __name__ == "__main__":
    sys.exit(main())
