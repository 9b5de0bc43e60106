import { Pool } from 'pg';
import type { Config } from '../config';

export type { Pool };

export function createPool(config: Pick<Config, 'database'>, applicationName: string): Pool {
  return new Pool({
    connectionString: config.database.url,
    max: config.database.poolSize,
    application_name: applicationName,
    connectionTimeoutMillis: 5_000,
  });
}
