"""A fake Neutron Open vSwitch agent for the fake compute hosts.

It only sends the OVS agent's `report_state` heartbeat over RPC for each
host, so that ML2/openvswitch binds ports on those hosts (vif_type ovs) and
Neutron's placement plugin creates the `<host>:Open vSwitch agent:br-ex`
resource providers with NET_BW_EGR/IGR_KILOBIT_PER_SEC inventory.  No
switch is touched.

    /usr/bin/python3 fake_ovs_agent.py --config-file neutron.conf \
        --hosts fake-1,fake-2,fake-3 [--interval 10] [--stopped-file F] \
        [--bridge-mapping physnet1:br-ex] [--bandwidth br-ex:1000000:1000000]
"""
import argparse
import sys
import time

from oslo_config import cfg
from oslo_log import log as logging

from neutron.agent import rpc as agent_rpc
from neutron.api.rpc.callbacks import resources
from neutron.common import config as common_config
from neutron.conf.agent import common as agent_conf
from neutron_lib.agent import topics
from neutron_lib import constants as n_const
from neutron_lib import context as n_context
from neutron_lib.placement import utils as place_utils

LOG = logging.getLogger("fake_ovs_agent")


def agent_state(host, bridge_mappings, bandwidths):
    inventory_defaults = place_utils.parse_rp_inventory_defaults({})
    return {
        "binary": n_const.AGENT_PROCESS_OVS,
        "host": host,
        "topic": n_const.L2_AGENT_TOPIC,
        "agent_type": n_const.AGENT_TYPE_OVS,
        "start_flag": True,
        "resource_versions": resources.LOCAL_RESOURCE_VERSIONS,
        "configurations": {
            "bridge_mappings": bridge_mappings,
            n_const.RP_BANDWIDTHS: place_utils.parse_rp_bandwidths(bandwidths),
            n_const.RP_INVENTORY_DEFAULTS: inventory_defaults,
            n_const.RP_PP_WITHOUT_DIRECTION: {},
            n_const.RP_PP_WITH_DIRECTION: {},
            n_const.RP_PP_INVENTORY_DEFAULTS: inventory_defaults,
            "resource_provider_hypervisors": {
                br: host for br in bridge_mappings.values()},
            "integration_bridge": "br-int",
            "tunnel_types": [],
            "tunneling_ip": None,
            "l2_population": False,
            "arp_responder_enabled": False,
            "enable_distributed_routing": False,
            "log_agent_heartbeats": False,
            "extensions": ["qos"],
            "datapath_type": "system",
            "ovs_capabilities": {"datapath_types": ["system"],
                                 "iface_types": ["internal", "system"]},
            "vhostuser_socket_dir": "/var/run/openvswitch",
            "ovs_hybrid_plug": False,
            "baremetal_smartnic": False,
            "devices": 0,
            "in_distributed_mode": False,
        },
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-file", required=True)
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--bridge-mapping", default="physnet1:br-ex")
    parser.add_argument("--bandwidth", action="append",
                        help="DEVICE:EGRESS_KBPS:INGRESS_KBPS")
    parser.add_argument("--stopped-file",
                        help="hosts listed in this file (one per line) get no "
                             "reports, as if their agent were stopped")
    args = parser.parse_args()

    common_config.register_common_config_options()
    agent_conf.register_agent_state_opts_helper(cfg.CONF)
    common_config.init(["--config-file", args.config_file])
    cfg.CONF.set_override("report_interval", args.interval, "AGENT")
    logging.setup(cfg.CONF, "fake-ovs-agent")

    physnet, bridge = args.bridge_mapping.split(":", 1)
    mappings = {physnet: bridge}
    bandwidths = args.bandwidth or ["%s:1000000:1000000" % bridge]
    hosts = [h for h in args.hosts.split(",") if h]
    states = {h: agent_state(h, mappings, bandwidths) for h in hosts}
    rpc = agent_rpc.PluginReportStateAPI(topics.REPORTS)
    ctx = n_context.get_admin_context_without_session()

    def stopped_hosts():
        try:
            with open(args.stopped_file) as f:
                return {line.strip() for line in f if line.strip()}
        except (TypeError, OSError):
            return set()

    while True:
        stopped = stopped_hosts()
        for host in hosts:
            if host in stopped:
                # Started again later like a real agent: with start_flag.
                states[host] = agent_state(host, mappings, bandwidths)
                continue
            state = states[host]
            try:
                rpc.report_state(ctx, state, use_call=True)
            except Exception as exc:  # server not up yet, RabbitMQ blip...
                LOG.warning("report_state for %s failed: %s", host, exc)
                continue
            # Like the real agent: resource_versions and start_flag are sent
            # until the first report succeeds.
            state.pop("resource_versions", None)
            state.pop("start_flag", None)
        sys.stdout.flush()
        time.sleep(args.interval)


if __name__ == "__main__":
    main()
