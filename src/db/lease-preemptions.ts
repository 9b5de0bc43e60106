/**
 * Preempted leases whose workflow is owed the news (028_lease_preemptions.sql, issue 43). Written
 * by the regular admission that cut the lease's bookings, in its transaction; read by whoever tells
 * workflows (the admitting API right after its commit, the leases it cut only, and the sweeps of
 * every API and worker), each try claimed and committed before the workflow is told.
 */
import type { PoolClient } from 'pg';
import type { Pool } from './pool';

export interface OwedPreemption {
  leaseId: string;
  /** The lease's new end (its bookings end there), and when the host is needed by the other lease. */
  endMs: number;
  neededFromMs: number;
  /** Why: a regular lease's admission (the default), or the lender taking its host back (a lending's reclaim). */
  kind?: 'preempted' | 'reclaimed';
}

/** An owed preemption as claimed: `sequence` orders its cut among the lease's (the row's time, ms). */
export interface ClaimedPreemption extends OwedPreemption {
  sequence: number;
}

/**
 * What the meter (db/leases.ts, the usage report's and policy's reads) and the calendar page
 * (host-allocations.ts) read of this table beside a lease: the end its latest cut put its
 * bookings at, while the row lasts. The lease's own end
 * moves there once its workflow is told; a booking anew by the workflow deletes the row.
 * `leases` is aliased `l`.
 */
export const CUT_END_JOIN = 'LEFT JOIN lease_preemptions cut ON cut.lease_id = l.id';
export const CUT_END_COLUMN = '(extract(epoch FROM cut.end_at) * 1000)::float8 AS cut_end_ms';

/**
 * The lease was cut to end at `endMs`: owed to its workflow. A later cut always replaces the row's
 * (the lease's bookings end where the latest cut put them, whether or not the earlier was told),
 * with a new sequence (created_at), so that the workflow ignores the earlier one should it come late.
 */
export async function addOwedPreemption(client: PoolClient, preemption: OwedPreemption): Promise<void> {
  await client.query(
    `INSERT INTO lease_preemptions (lease_id, end_at, needed_from, created_at, kind) VALUES ($1, to_timestamp($2 / 1000.0), to_timestamp($3 / 1000.0), clock_timestamp(), $4)
     ON CONFLICT (lease_id) DO UPDATE
       SET end_at = excluded.end_at, needed_from = excluded.needed_from, kind = excluded.kind,
           told_at = NULL, created_at = greatest(clock_timestamp(), lease_preemptions.created_at + interval '1 microsecond'), next_attempt_at = now(),
           attempts = 0`,
    [preemption.leaseId, preemption.endMs, preemption.neededFromMs, preemption.kind ?? 'preempted'],
  );
}

/**
 * The lease's hosts are booked anew (the workflow's booking, e.g. an update that moved it): a cut
 * owed or told before is moot. Its row is locked (an admission's addOwedPreemption waits for this
 * transaction) and deleted; answers its sequence, so the workflow ignores that cut should its tell
 * still come, or undefined when the lease had none. `liftedTo` (an active lease's bookings moved,
 * not made anew): only a cut that ends before it is moot; one its bookings still end at stands (a
 * booking of the cut lease itself, or a move that left the end alone), told and applied as owed.
 * `othersStillCut` (given the cut's end): whether another booking of the lease still ends by it
 * (one its update has not moved yet, or could not): the cut then stands for the whole lease (one
 * lease, one end), for its workflow to apply.
 */
export async function settlePreemptionOnRebooking(client: PoolClient, leaseId: string, liftedTo?: number, othersStillCut?: (cutEndMs: number) => Promise<boolean>): Promise<number | undefined> {
  const { rows } = await client.query<{ sequence: number; end_ms: number }>(
    'SELECT (extract(epoch FROM created_at) * 1000)::float8 AS sequence, (extract(epoch FROM end_at) * 1000)::float8 AS end_ms FROM lease_preemptions WHERE lease_id = $1 FOR UPDATE',
    [leaseId],
  );
  if (rows.length === 0 || (liftedTo !== undefined && rows[0].end_ms >= liftedTo)) return undefined;
  if (othersStillCut && (await othersStillCut(rows[0].end_ms))) return undefined;
  await client.query('DELETE FROM lease_preemptions WHERE lease_id = $1', [leaseId]);
  return rows[0].sequence;
}

/**
 * The first retry of a row not told waits this long, each next one twice as long, never longer than
 * the last; a row is never given up (a lease left running on another's host): it is retried until
 * told, or until its lease is gone, ended, or past its end (the outbox marks it done then).
 */
const FIRST_RETRY_MS = 5_000;
const LONGEST_RETRY_MS = 10 * 60_000;
/** Told rows are kept until their end passed this long ago (a successor's start asks preemptedAmong). */
const TOLD_KEPT_MS = 7 * 86_400_000;

/**
 * Claims owed preemptions for one try each, and commits: up to `limit` due ones (not told, their
 * next try due, older than `olderThanMs`: younger ones are being told by the API that
 * admitted them), or, with `leaseIds`, those of these leases (an admission telling what it cut).
 * A claim counts the try and sets the next one after the backoff, so that no other teller takes
 * the row meanwhile and a teller that dies leaves it to a later sweep. No lock is held while telling.
 */
export async function claimOwedPreemptions(pool: Pool, options: { limit: number; olderThanMs: number; leaseIds?: string[] }): Promise<ClaimedPreemption[]> {
  const { rows } = await pool.query<{ lease_id: string; end_ms: number; needed_ms: number; sequence: number; kind: 'preempted' | 'reclaimed' }>(
    `UPDATE lease_preemptions p
        SET attempts = p.attempts + 1,
            next_attempt_at = now() + make_interval(secs => least($5::float8, $4::float8 * power(2, least(p.attempts, 20))) / 1000.0)
      WHERE p.lease_id IN (
        SELECT lease_id FROM lease_preemptions
         WHERE told_at IS NULL
           AND ($3::uuid[] IS NULL AND next_attempt_at <= now() AND created_at <= now() - make_interval(secs => $1 / 1000.0) OR lease_id = ANY($3::uuid[]))
         ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED)
      RETURNING p.lease_id::text, (extract(epoch FROM p.end_at) * 1000)::float8 AS end_ms, (extract(epoch FROM p.needed_from) * 1000)::float8 AS needed_ms,
                (extract(epoch FROM p.created_at) * 1000)::float8 AS sequence, p.kind`,
    [options.olderThanMs, options.limit, options.leaseIds ?? null, FIRST_RETRY_MS, LONGEST_RETRY_MS],
  );
  return rows.map((row) => ({ leaseId: row.lease_id, endMs: row.end_ms, neededFromMs: row.needed_ms, sequence: row.sequence, kind: row.kind }));
}

/** The claimed row was told: marked so unless a later cut replaced it meanwhile (that one is owed anew). */
export async function markPreemptionTold(pool: Pool, sent: ClaimedPreemption): Promise<void> {
  await pool.query(
    'UPDATE lease_preemptions SET told_at = now(), last_error = NULL WHERE lease_id = $1 AND told_at IS NULL AND (extract(epoch FROM created_at) * 1000)::float8 = $2::float8',
    [sent.leaseId, sent.sequence],
  );
}

/** The claimed row's try failed: the error is kept; its next try is the claim's backoff. */
export async function markPreemptionFailed(pool: Pool, leaseId: string, error: string): Promise<void> {
  await pool.query('UPDATE lease_preemptions SET last_error = left($2, 1024) WHERE lease_id = $1 AND told_at IS NULL', [leaseId, error]);
}

/** Deletes up to `limit` told rows whose end passed days ago; answers how many. */
export async function purgeToldPreemptions(pool: Pool, limit: number): Promise<number> {
  const { rowCount } = await pool.query(
    `DELETE FROM lease_preemptions WHERE lease_id IN (
       SELECT lease_id FROM lease_preemptions WHERE told_at IS NOT NULL AND end_at < now() - make_interval(secs => $1 / 1000.0) LIMIT $2)`,
    [TOLD_KEPT_MS, limit],
  );
  return rowCount ?? 0;
}

/** The lease's latest cut, told or not (undefined: none, or settled by a booking anew), as a teller would send it. */
export async function latestCutOf(db: Pool | PoolClient, leaseId: string): Promise<ClaimedPreemption | undefined> {
  const { rows } = await db.query<{ end_ms: number; needed_ms: number; sequence: number; kind: 'preempted' | 'reclaimed' }>(
    `SELECT (extract(epoch FROM end_at) * 1000)::float8 AS end_ms, (extract(epoch FROM needed_from) * 1000)::float8 AS needed_ms,
            (extract(epoch FROM created_at) * 1000)::float8 AS sequence, kind
     FROM lease_preemptions WHERE lease_id = $1`,
    [leaseId],
  );
  return rows.map((row) => ({ leaseId, endMs: row.end_ms, neededFromMs: row.needed_ms, sequence: row.sequence, kind: row.kind }))[0];
}

/** Of these leases, those a regular lease's admission preempted (whatever became of the news). */
export async function preemptedAmong(pool: Pool, leaseIds: string[]): Promise<string[]> {
  if (leaseIds.length === 0) return [];
  const { rows } = await pool.query<{ lease_id: string }>('SELECT lease_id::text FROM lease_preemptions WHERE lease_id = ANY($1::uuid[])', [leaseIds]);
  return rows.map((row) => row.lease_id);
}
