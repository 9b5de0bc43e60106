import { Pool } from 'pg';
import type { Config } from '../config';

export type { Pool };

export function createPool(config: Pick<Config, 'database'>, applicationName: string, onIdleError?: (err: Error) => void): Pool {
  const pool = new Pool({
    connectionString: config.database.url,
    max: config.database.poolSize,
    application_name: applicationName,
    connectionTimeoutMillis: 5_000,
  });
  // An idle connection dropped by the server (restart, failover) must not crash the process:
  // the pool replaces it, and the next query reports any lasting outage.
  pool.on('error', (err) => onIdleError?.(err));
  return pool;
}
