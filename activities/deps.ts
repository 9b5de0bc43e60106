import type { Pool } from '../src/db/pool';
import type { ResourcePlugins } from '../src/domain/resource-plugin';

/** What activities are given by the worker that hosts them. */
export interface ActivityDeps {
  pool: Pool;
  /** The resource types this worker can carry out, by resource_type. */
  plugins: ResourcePlugins;
}
