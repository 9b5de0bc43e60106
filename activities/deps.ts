import type { Pool } from '../src/db/pool';

/** What activities are given by the worker that hosts them. */
export interface ActivityDeps {
  pool: Pool;
}
