/**
 * Series of recurring leases (023_lease_series.sql): the rule and the lease it repeats, and the
 * occurrences a partial create could not admit. The occurrences themselves are leases (their
 * `series_id`; src/db/leases.ts leasesOfSeries).
 */
import type { PoolClient } from 'pg';
import type { Pool } from './pool';

type Queryable = Pool | PoolClient;

/** An occurrence not admitted (a gap of the series): its place in the series, its window, and why. */
export interface RefusedOccurrence {
  name: string;
  startMs: number;
  endMs: number;
  reason: string;
  message: string;
}

export interface SeriesRow {
  id: string;
  projectId: string;
  name: string;
  recurrence: string;
  /** The create body the occurrences were made from (its recurrence and `partial` aside). */
  template: Record<string, unknown>;
  refused: RefusedOccurrence[];
  createdMs: number;
  /** The hash of the create's body when it came with an Idempotency-Key (026_series_request_hash.sql). */
  requestHash?: string;
  /** Its create's state (030_series_state.sql); only a `created` series is read as a series. */
  state: SeriesState;
  /** The try of the create that wrote the row: its occurrences' lease ids derive from it (030_series_state.sql). */
  attempt?: string;
}

export type SeriesState = 'creating' | 'created' | 'refused';

export async function insertSeries(db: Queryable, series: Omit<SeriesRow, 'createdMs'>): Promise<void> {
  await db.query('INSERT INTO lease_series (id, project_id, name, recurrence, template, refused, request_hash, state, attempt) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)', [
    series.id,
    series.projectId,
    series.name,
    series.recurrence,
    series.template,
    JSON.stringify(series.refused),
    series.requestHash ?? null,
    series.state,
    series.attempt ?? null,
  ]);
}

/** The end of a create: `created` with its gaps, or `refused` with the occurrences refused (a retry answers them again). */
export async function settleSeries(db: Queryable, seriesId: string, state: 'created' | 'refused', refused: RefusedOccurrence[]): Promise<void> {
  await db.query('UPDATE lease_series SET state = $2, refused = $3 WHERE id = $1', [seriesId, state, JSON.stringify(refused)]);
}

/** A new rule (its count or end changed) and the gaps that go with it. */
export async function setSeriesRule(db: Queryable, seriesId: string, recurrence: string, refused: RefusedOccurrence[]): Promise<void> {
  await db.query('UPDATE lease_series SET recurrence = $2, refused = $3 WHERE id = $1', [seriesId, recurrence, JSON.stringify(refused)]);
}

/**
 * Removes a series whose create was refused after its row was written (the saga): no answer ever
 * named it, so a retry with the same Idempotency-Key starts afresh, as a refused lease create's does.
 */
export async function forgetSeries(db: Queryable, id: string): Promise<void> {
  await db.query('DELETE FROM lease_series WHERE id = $1', [id]);
}

/** The series's gaps, as a partial create left them. */
export async function setRefusedOccurrences(db: Queryable, seriesId: string, refused: RefusedOccurrence[]): Promise<void> {
  await db.query('UPDATE lease_series SET refused = $2 WHERE id = $1', [seriesId, JSON.stringify(refused)]);
}

type Row = { id: string; project_id: string; name: string; recurrence: string; template: Record<string, unknown>; refused: RefusedOccurrence[]; created_ms: string; request_hash: string | null; state: SeriesState; attempt: string | null; deleted: boolean };
const toSeries = (row: Row): SeriesRow => ({
  id: row.id,
  projectId: row.project_id,
  name: row.name,
  recurrence: row.recurrence,
  template: row.template,
  refused: row.refused,
  createdMs: Number(row.created_ms),
  ...(row.request_hash !== null ? { requestHash: row.request_hash } : {}),
  state: row.state,
  ...(row.attempt !== null ? { attempt: row.attempt } : {}),
});
const COLUMNS = 'id::text, project_id, name, recurrence, template, refused, (extract(epoch FROM created_at) * 1000)::bigint::text AS created_ms, request_hash, state, attempt::text, deleted_at IS NOT NULL AS deleted';

/** A series created and not deleted. */
export async function findSeries(db: Queryable, id: string): Promise<SeriesRow | undefined> {
  const { rows } = await db.query<Row>(`SELECT ${COLUMNS} FROM lease_series WHERE id = $1 AND deleted_at IS NULL AND state = 'created'`, [id]);
  return rows[0] && toSeries(rows[0]);
}

/** A series whatever its state (an Idempotency-Key's: a deleted one is not made again). */
export async function findSeriesEvenDeleted(db: Queryable, id: string): Promise<(SeriesRow & { deleted: boolean }) | undefined> {
  const { rows } = await db.query<Row>(`SELECT ${COLUMNS} FROM lease_series WHERE id = $1`, [id]);
  return rows[0] && { ...toSeries(rows[0]), deleted: rows[0].deleted };
}

/** Marks the series deleted (its occurrences all gone); a second call changes nothing. */
export async function markSeriesDeleted(db: Queryable, id: string): Promise<void> {
  await db.query('UPDATE lease_series SET deleted_at = now() WHERE id = $1 AND deleted_at IS NULL', [id]);
}

/** The project's series with a gap in [fromMs, toMs), at most `limit`, for the calendar. */
export async function seriesGapsInWindow(db: Queryable, projectId: string | undefined, fromMs: number, toMs: number, limit: number): Promise<Array<{ id: string; name: string; gaps: RefusedOccurrence[] }>> {
  const { rows } = await db.query<{ id: string; name: string; refused: RefusedOccurrence[] }>(
    `SELECT id::text, name, refused FROM lease_series
     WHERE deleted_at IS NULL AND state = 'created' AND ($1::text IS NULL OR project_id = $1) AND refused <> '[]'::jsonb
       AND EXISTS (SELECT 1 FROM jsonb_array_elements(refused) g WHERE (g->>'startMs')::bigint < $3 AND (g->>'endMs')::bigint > $2)
     ORDER BY created_at, id LIMIT $4`,
    [projectId ?? null, fromMs, toMs, limit],
  );
  return rows.map((r) => ({ id: r.id, name: r.name, gaps: r.refused.filter((g) => g.startMs < toMs && g.endMs > fromMs) }));
}

/** Pauses between tries of a series's lock: from the first to the last, doubling. */
const LOCK_RETRY_MS = { first: 20, last: 500 };

/**
 * Series locks one project may hold at once in one pool: a quarter of the pool (at least one).
 * Each holder keeps a connection for its whole create or change and takes more for the work inside:
 * holders without a bound could take every connection, and stop every project's requests.
 */
const lockHoldersPerProject = (pool: Pool) => Math.max(1, Math.floor((pool.options.max ?? 10) / 4));
const holders = new WeakMap<Pool, Map<string, number>>();

/** Counts the project in as a holder if it is under its bound; answers whether it was. */
function enterHolders(pool: Pool, projectId: string): boolean {
  const ofPool = holders.get(pool) ?? new Map<string, number>();
  holders.set(pool, ofPool);
  const now = ofPool.get(projectId) ?? 0;
  if (now >= lockHoldersPerProject(pool)) return false;
  ofPool.set(projectId, now + 1);
  return true;
}

function leaveHolders(pool: Pool, projectId: string): void {
  const ofPool = holders.get(pool)!;
  const now = ofPool.get(projectId)! - 1;
  if (now === 0) ofPool.delete(projectId);
  else ofPool.set(projectId, now);
}

/**
 * Runs `use` holding the series's lock, so that the creates, changes and deletes of one series run
 * one after another (each reads the occurrences, checks them and changes them one by one over
 * seconds, so a transaction's lock cannot span it: a session's advisory lock on one pooled
 * connection, held for `use`). A project holds at most a quarter of the pool's connections so
 * (lockHoldersPerProject). A waiter holds no connection: it tries again, pausing, for at most
 * `waitMs`; then false, without running `use`.
 */
export async function withSeriesLock<T>(pool: Pool, lock: { seriesId: string; projectId: string }, waitMs: number, use: () => Promise<T>): Promise<{ ran: true; value: T } | { ran: false }> {
  const deadline = Date.now() + waitMs;
  for (let pause = LOCK_RETRY_MS.first; ; pause = Math.min(pause * 2, LOCK_RETRY_MS.last)) {
    if (enterHolders(pool, lock.projectId)) {
      try {
        const outcome = await underAdvisoryLock(pool, lock.seriesId, use);
        if (outcome.ran) return outcome;
      } finally {
        leaveHolders(pool, lock.projectId);
      }
    }
    if (Date.now() + pause > deadline) return { ran: false };
    await new Promise((resolve) => setTimeout(resolve, pause));
  }
}

/** One try of the series's advisory lock on a pooled connection: `use` run holding it, or not run. */
async function underAdvisoryLock<T>(pool: Pool, seriesId: string, use: () => Promise<T>): Promise<{ ran: true; value: T } | { ran: false }> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    const { rows } = await client.query<{ held: boolean }>("SELECT pg_try_advisory_lock(hashtext('leasekeeper:series'), hashtext($1)) AS held", [seriesId]);
    if (!rows[0].held) return { ran: false };
    try {
      return { ran: true, value: await use() };
    } finally {
      await client.query("SELECT pg_advisory_unlock(hashtext('leasekeeper:series'), hashtext($1))", [seriesId]).catch((err: Error) => {
        broken = err; // a connection that may still hold the lock never goes back to the pool
      });
    }
  } finally {
    client.release(broken);
  }
}
