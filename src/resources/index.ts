/** The resource types this build of leasekeeper supports, configured from the settings. */
import type { Config } from '../config';
import type { Pool } from '../db/pool';
import type { OpenStackClients } from '../openstack';
import { physicalHostPlugin } from './physical-host';
import { pluginRegistry, type ResourcePlugins } from './plugin';

export function productionPlugins(deps: { pool: Pool; config: Pick<Config, 'hosts' | 'inventory'>; openstack: () => OpenStackClients }): ResourcePlugins {
  return pluginRegistry([
    physicalHostPlugin({
      pool: deps.pool,
      settings: deps.config.hosts,
      cloud: deps.openstack,
      freepool: deps.config.inventory.freepoolAggregate,
      beforeEndDefault: deps.config.hosts.beforeEndDefault,
    }),
  ]);
}
