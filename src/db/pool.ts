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

/** Connection-level SQLSTATEs: the server went away or is not accepting connections (yet). */
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300']);
const UNAVAILABLE_ERRNOS = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ENOTFOUND', 'EAI_AGAIN']);

/**
 * True when a query failed because PostgreSQL could not be reached or dropped the connection
 * (restart, failover, too many clients), as opposed to a wrong query or a violated constraint:
 * the request may be tried again later.
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && (code.startsWith('08') || UNAVAILABLE_SQLSTATES.has(code) || UNAVAILABLE_ERRNOS.has(code))) return true;
  // node-postgres reports a connection cut mid-query, or a pool that could not connect in time, by message only.
  return /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error/i.test(err.message);
}
