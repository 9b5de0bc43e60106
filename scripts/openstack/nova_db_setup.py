"""Create Nova's databases in one process (saves three nova-manage start-ups).

Equivalent to:
    nova-manage api_db sync
    nova-manage cell_v2 map_cell0 --database_connection $NOVA_CELL0_DB
    nova-manage cell_v2 create_cell --name cell1
    nova-manage db sync

    NOVA_CELL0_DB=mysql+pymysql://.../nova_cell0 /usr/bin/python3 \
        nova_db_setup.py --config-file nova.conf --config-file nova-db.conf
"""
import os
import sys

from oslo_log import log as logging

from nova.cmd import manage
from nova import config
from nova import objects


def main():
    manage.CONF.register_cli_opts([manage.category_opt, manage.post_mortem_opt])
    config.parse_args(["nova-manage"] + sys.argv[1:] + ["db", "version"])
    logging.setup(manage.CONF, "nova")
    objects.register_all()
    steps = [
        ("api_db sync", lambda: manage.ApiDbCommands().sync()),
        ("cell_v2 map_cell0", lambda: manage.CellV2Commands().map_cell0(
            database_connection=os.environ["NOVA_CELL0_DB"])),
        ("cell_v2 create_cell --name cell1",
         lambda: manage.CellV2Commands().create_cell(name="cell1")),
        ("db sync", lambda: manage.DbCommands().sync()),
    ]
    for name, step in steps:
        ret = step()
        if ret not in (None, 0):
            print("nova_db_setup: %s failed (%s)" % (name, ret), file=sys.stderr)
            return 1
        print("nova_db_setup: %s done" % name, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
