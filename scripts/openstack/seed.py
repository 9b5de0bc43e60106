"""Create the rig's public flavors and a tiny image (idempotent).

Flavors m1.tiny (1 vCPU, 512 MiB, 1 GiB), m1.small (1, 2048, 20) and
m1.medium (2, 4096, 40); image `fake-image` (a few bytes, raw/bare: the fake
virt driver never reads it).

    /usr/bin/python3 seed.py  (configuration from the environment)
"""
import os
import sys

from keystoneauth1 import session as ks_session
from keystoneauth1.identity import v3

FLAVORS = [("m1.tiny", 1, 512, 1), ("m1.small", 1, 2048, 20),
           ("m1.medium", 2, 4096, 40)]
IMAGE = "fake-image"


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
    print("seed: flavors %s and image %s ready"
          % (", ".join(f[0] for f in FLAVORS), IMAGE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
