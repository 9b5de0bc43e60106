/** The resource types this build of leasekeeper supports, configured from the settings. */
import type { Config } from '../config';
import type { Pool } from '../db/pool';
import type { NovaClient } from '../openstack';
import { physicalHostPlugin } from './physical-host';
import { pluginRegistry, type ResourcePlugins } from './plugin';

export function productionPlugins(deps: { pool: Pool; config: Pick<Config, 'hosts' | 'inventory'>; nova: () => NovaClient }): ResourcePlugins {
  return pluginRegistry([physicalHostPlugin({ pool: deps.pool, settings: deps.config.hosts, nova: deps.nova, freepool: deps.config.inventory.freepoolAggregate })]);
}
