/** The resource types this build of leasekeeper supports, configured from the settings. */
import type { Config } from '../config';
import type { Pool } from '../db/pool';
import type { OpenStackClients } from '../openstack';
import { bandwidthPlugin } from './bandwidth';
import { physicalHostPlugin } from './physical-host';
import { pluginRegistry, type ResourcePlugins } from '../domain/resource-plugin';
import { virtualServerPlugin } from './virtual-server';

export function productionPlugins(deps: {
  pool: Pool;
  config: Pick<Config, 'hosts' | 'inventory' | 'notifyUrl' | 'provisioningLeadMs' | 'servers' | 'bandwidth'>;
  openstack: () => OpenStackClients;
  /** The same credentials in a lessee's project (server leases that create their server). */
  openstackForProject?: (projectId: string) => OpenStackClients;
}): ResourcePlugins {
  const { hosts, inventory, notifyUrl } = deps.config;
  return pluginRegistry([
    physicalHostPlugin({
      pool: deps.pool,
      settings: { ...hosts, provisioningLeadMs: deps.config.provisioningLeadMs },
      cloud: deps.openstack,
      freepool: inventory.freepoolAggregate,
      endAggregates: { recycling: inventory.recyclingAggregate, released: inventory.releasedAggregate, closedProjectId: inventory.freepoolProjectId },
      notices: notifyUrl ? { url: notifyUrl } : undefined,
    }),
    virtualServerPlugin({ pool: deps.pool, cloud: deps.openstack, projectCloud: deps.openstackForProject, settings: deps.config.servers }),
    bandwidthPlugin({ pool: deps.pool, cloud: deps.openstack, settings: deps.config.bandwidth }),
  ]);
}
