"""Populate the rig's Keystone (after `keystone-manage bootstrap`).

Creates, if missing: the `service` project with service users nova,
placement, neutron, glance (role admin); projects project-a / project-b with
users user-a / user-b (role member; role reader exists from bootstrap); an
admin role for user admin inherited by every project of the domain (what
leasekeeper's service user needs to act in lessee projects); the
compute, placement, image and network services with public, internal and
admin endpoints in RegionOne.  Idempotent.

    /usr/bin/python3 keystone_setup.py  (configuration from the environment)
"""
import os
import sys

from keystoneauth1 import session as ks_session
from keystoneauth1.identity import v3

AUTH_URL = os.environ["KEYSTONE_URL"]
PASSWORD = os.environ["OS_PASSWORD_ALL"]
REGION = "RegionOne"

ENDPOINTS = {
    # type: (name, url)
    "compute": ("nova", os.environ["NOVA_URL"]),
    "placement": ("placement", os.environ["PLACEMENT_URL"]),
    "image": ("glance", os.environ["GLANCE_URL"]),
    "network": ("neutron", os.environ["NEUTRON_URL"]),
}
SERVICE_USERS = ["nova", "placement", "neutron", "glance"]
TENANTS = {"project-a": "user-a", "project-b": "user-b"}


def main():
    auth = v3.Password(auth_url=AUTH_URL, username="admin", password=PASSWORD,
                       project_name="admin", user_domain_id="default",
                       project_domain_id="default")
    sess = ks_session.Session(auth=auth)
    ep = {"endpoint_filter": {"interface": "public"},
          "endpoint_override": AUTH_URL}

    def get(path, key, **params):
        return sess.get(path, params=params, **ep).json()[key]

    def post(path, key, body):
        return sess.post(path, json={key: body}, **ep).json()[key]

    def get_or_create(path, key, name, body, **extra_filters):
        found = get(path, key + "s", name=name, **extra_filters)
        if found:
            return found[0]["id"]
        return post(path, key, dict(body, name=name))["id"]

    def assign(project_id, user_id, role_id):
        sess.put("/projects/%s/users/%s/roles/%s" % (project_id, user_id,
                                                     role_id), **ep)

    roles = {r["name"]: r["id"] for r in get("/roles", "roles")}
    for name in ("admin", "member", "reader"):
        if name not in roles:
            roles[name] = post("/roles", "role", {"name": name})["id"]

    dom = {"domain_id": "default"}
    service_pid = get_or_create("/projects", "project", "service",
                                dict(dom, description="Service project"))
    for name in SERVICE_USERS:
        uid = get_or_create("/users", "user", name,
                            dict(dom, password=PASSWORD,
                                 default_project_id=service_pid))
        assign(service_pid, uid, roles["admin"])

    for project, user in TENANTS.items():
        pid = get_or_create("/projects", "project", project, dom)
        uid = get_or_create("/users", "user", user,
                            dict(dom, password=PASSWORD,
                                 default_project_id=pid))
        assign(pid, uid, roles["member"])

    # leasekeeper's service user (admin here) acts in lessee projects, e.g. to create a leased
    # server on its reserved host: an admin role inherited by every project of the domain.
    admin_uid = get("/users", "users", name="admin")[0]["id"]
    sess.put("/OS-INHERIT/domains/default/users/%s/roles/%s/inherited_to_projects"
             % (admin_uid, roles["admin"]), **ep)

    existing = get("/endpoints", "endpoints")
    for stype, (sname, url) in ENDPOINTS.items():
        services = get("/services", "services", type=stype)
        if services:
            sid = services[0]["id"]
        else:
            sid = post("/services", "service",
                       {"type": stype, "name": sname, "enabled": True})["id"]
        for iface in ("public", "internal", "admin"):
            if any(e["service_id"] == sid and e["interface"] == iface
                   for e in existing):
                continue
            post("/endpoints", "endpoint",
                 {"service_id": sid, "interface": iface, "url": url,
                  "region_id": REGION, "enabled": True})
    print("keystone_setup: projects, users and endpoints ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
