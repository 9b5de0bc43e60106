/** The PostgreSQL connection pool: creating it, borrowing one connection, and telling an outage from bad data. */
import { DatabaseError, Pool, type PoolClient } from 'pg';
import type { Config } from '../config';
import { alreadyExists } from '../domain/lease';

export type { Pool };

/**
 * Runs `use` on one connection of a pool made by `createPool`. A connection lost meanwhile surfaces
 * as the next query's error, and a broken connection is discarded instead of going back to the pool.
 */
export async function withConnection<T>(pool: Pool, use: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    return await use(client);
  } catch (err) {
    if (isDatabaseUnavailable(err)) broken = err as Error;
    throw err;
  } finally {
    client.release(broken);
  }
}

/** Whether PostgreSQL answers: resolves, or fails as a query would. */
export async function ping(pool: Pool): Promise<void> {
  await pool.query('SELECT 1');
}

/** Connection settings; `connectionTimeoutMs` bounds the wait for a free or new connection (0: no bound), 5 s by default. */
export type PoolSettings = Pick<Config['database'], 'url' | 'poolSize'> & { connectionTimeoutMs?: number };

export function createPool(config: { database: PoolSettings }, applicationName: string, onIdleError?: (err: Error) => void): Pool {
  const pool = new Pool({
    connectionString: config.database.url,
    max: config.database.poolSize,
    application_name: applicationName,
    connectionTimeoutMillis: config.database.connectionTimeoutMs ?? 5_000,
  });
  // An idle connection dropped by the server (restart, failover) must not crash the process:
  // the pool replaces it, and the next query reports any lasting outage.
  pool.on('error', (err) => onIdleError?.(err));
  // A connection cut while lent out would be an unhandled 'error' event, ending the process; a
  // borrower's own listener is no cure, as node-postgres hands a connection over one microtask
  // before the borrower could listen (test/db-pool.test.ts). So each connection keeps one for
  // life; the cut surfaces as the next query's error, and the pool discards the connection.
  pool.on('connect', (client) => client.on('error', () => undefined));
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
  // Duck-typed: socket errors come from Node's own realm, where `instanceof Error` can be false (vm contexts, jest).
  if (typeof err !== 'object' || err === null) return false;
  const { code, message } = err as { code?: unknown; message?: unknown };
  if (typeof code === 'string' && (code.startsWith('08') || UNAVAILABLE_SQLSTATES.has(code) || UNAVAILABLE_ERRNOS.has(code))) return true;
  // node-postgres reports a connection cut mid-query, or a pool that could not connect in time, by message only.
  return typeof message === 'string' && /Connection terminated|timeout exceeded when trying to connect|not queryable|terminating connection/i.test(message);
}

/**
 * Conflicts that callers rely on (the calendar's exclusion constraint, unique names): they are
 * races or answers, handled where they happen, never "bad data".
 */
const EXPECTED_CONFLICTS = new Set(['23505', '23P01']);

/** The calendar's exclusion constraint refused a booking: another one holds the resource for an overlapping time. */
export const isExclusionViolation = (err: unknown): boolean => err instanceof DatabaseError && err.code === '23P01';
/** A CHECK constraint refused a write (the lending containment, issue 43: a range shrunk under what it holds). */
export const isCheckViolation = (err: unknown): boolean => err instanceof DatabaseError && err.code === '23514';
/** A transaction that lost a race to a concurrent one (deadlock, serialization failure): run again, it sees the winner. */
export const isDeadlockOrSerialization = (err: unknown): boolean => err instanceof DatabaseError && ['40P01', '40001'].includes(err.code ?? '');
/** A write referring to a row a concurrent transaction deleted (SQLSTATE 23503): a booking of a resource removed meanwhile. */
export const isForeignKeyViolation = (err: unknown): boolean => err instanceof DatabaseError && err.code === '23503';
/** A booking that lost its race to a concurrent one: either of the above. */
export const isLostRace = (err: unknown): boolean => isDeadlockOrSerialization(err) || isExclusionViolation(err);

/** The unique constraint (or index) a write broke (SQLSTATE 23505), if that is why it failed. */
export function violatedUniqueConstraint(err: unknown): string | undefined {
  return err instanceof DatabaseError && err.code === '23505' ? (err.constraint ?? '') : undefined;
}

/**
 * Runs a store's write; a duplicate refused by one of `duplicates`' unique constraints (keyed by
 * name) becomes the domain's AlreadyExists (Blazar's 409) with its sentence, which says what is
 * duplicated and never the SQL. Two requests making the same record at once (two enrolments of
 * one host) both pass the callers' look-ups; only the constraint sees the second.
 */
export async function refuseDuplicates<T>(write: () => Promise<T>, duplicates: Record<string, string>): Promise<T> {
  try {
    return await write();
  } catch (err) {
    const constraint = violatedUniqueConstraint(err);
    const message = constraint === undefined ? undefined : duplicates[constraint];
    if (message === undefined) throw err;
    throw alreadyExists(message, err as Error);
  }
}
const DATA_ERROR_DESCRIPTIONS: Record<string, string> = {
  '22001': 'a text is too long',
  '22003': 'a number is out of range',
  '22007': 'a date is not valid',
  '22008': 'a date is out of range',
  '22021': 'a text contains a character that cannot be stored (NUL or invalid Unicode)',
  '22P02': 'a value has the wrong form (invalid text, number or JSON)',
  '22P05': 'a text contains a character that cannot be stored (NUL or invalid Unicode)',
  '23502': 'a required value is missing',
  '23503': 'it refers to something that no longer exists',
  '23514': 'a value breaks a rule of the database',
  '54000': 'a value is too large',
};

/**
 * When PostgreSQL refused a query because of the values in it (SQLSTATE class 22 data exceptions,
 * class 23 integrity violations other than the expected conflicts, class 54 limits): trying again
 * cannot succeed. Answers a short description for callers (no SQL, no values), else undefined.
 */
export function databaseDataError(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const { code, severity } = err as { code?: unknown; severity?: unknown };
  // `severity` tells a PostgreSQL error from a Node error with a code (ECONNRESET…).
  if (typeof code !== 'string' || typeof severity !== 'string' || !/^(22|23|54)/.test(code) || EXPECTED_CONFLICTS.has(code)) return undefined;
  return DATA_ERROR_DESCRIPTIONS[code] ?? 'a value is not valid';
}
