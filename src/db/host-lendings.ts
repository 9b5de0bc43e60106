/**
 * Lent hosts (table `host_lendings`, 037_host_lendings.sql, issue 43): an active regular lease's
 * booking of a host (its `host_allocations` row) lends the host over `during`, inside its window;
 * preemptible leases may book there (borrower rows: `host_allocations.lent_by`). A lending is open
 * until the host is back in the lender's hands (`returned_at`); a reclaim shortens it to when its
 * borrowers are out. The keys and CHECKs of the migration hold the rows inside one another: a
 * statement here that would shrink a lending under a borrower fails (23514) — cut the borrower first.
 * Instants cross this boundary as epoch milliseconds.
 */
import type { PoolClient } from 'pg';
import type { MeteredLending } from '../domain/usage';
import type { Pool } from './pool';

type Queryable = Pool | PoolClient;

/** One host's lending as the calendar reads it. */
export interface HostLending {
  /** The row's id (what borrower rows' `lent_by` name). */
  id: string;
  /** The lend request's id (one per request, several hosts). */
  lending_id: string;
  host_id: string;
  allocation_id: string;
  reservation_id: string;
  lease_id: string;
  /** The lender's project. */
  project_id: string;
  start_ms: number;
  end_ms: number;
  /** The exact range, as PostgreSQL's text (what a borrower row copies into `lent_during`). */
  during: string;
  /** A reclaim took it back (it ends when its borrowers are out): when; null otherwise. */
  reclaimed_ms: number | null;
  returned_ms: number | null;
}

/** SQL over a lender's host_allocations row (as `a`): until when it must keep its host, its lendings' latest end (null: never lent). */
export const LENDER_ROW_LENT_UNTIL = '(SELECT max(upper(g.during)) FROM host_lendings g WHERE g.allocation_id = a.id)';

const LENDING_COLUMNS = `g.id::text, g.lending_id::text, g.host_id::text, g.allocation_id::text, g.reservation_id::text, g.lease_id::text, g.project_id,
  (extract(epoch FROM lower(g.during)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(g.during)) * 1000)::float8 AS end_ms,
  g.during::text AS during,
  (extract(epoch FROM g.reclaimed_at) * 1000)::float8 AS reclaimed_ms, (extract(epoch FROM g.returned_at) * 1000)::float8 AS returned_ms`;

/** A lender's booking of one host, as host-allocations.ts `lenderRowsOf` reads it. */
export interface LenderRow {
  allocationId: string;
  hostId: string;
  /** The booking's window as PostgreSQL's text (copied exactly: the key the cascade follows). */
  during: string;
}

/**
 * Lends these hosts of a reservation over [fromMs, untilMs) (one row each, under one `lendingId`).
 * Idempotent by `lendingId`: a retry finds its rows and answers them. The lender's rows must be
 * locked by the caller (lenderRowsOf); a lending outside the lender's window fails (23514), one
 * overlapping another of its host fails (23P01, `host_lendings_apart`).
 */
export async function insertLendings(
  client: PoolClient,
  lending: { lendingId: string; reservationId: string; leaseId: string; projectId: string; hosts: LenderRow[]; fromMs: number; untilMs: number },
): Promise<HostLending[]> {
  for (const host of [...lending.hosts].sort((a, b) => Number(a.hostId) - Number(b.hostId))) {
    await client.query(
      `INSERT INTO host_lendings (lending_id, allocation_id, host_id, lender_during, lease_id, reservation_id, project_id, during)
       VALUES ($1, $2, $3, $4::tstzrange, $5, $6, $7, tstzrange(to_timestamp($8 / 1000.0), to_timestamp($9 / 1000.0)))
       ON CONFLICT (lending_id, host_id) DO NOTHING`,
      [lending.lendingId, host.allocationId, host.hostId, host.during, lending.leaseId, lending.reservationId, lending.projectId, lending.fromMs, lending.untilMs],
    );
  }
  const { rows } = await client.query<HostLending>(`SELECT ${LENDING_COLUMNS} FROM host_lendings g WHERE g.lending_id = $1 ORDER BY g.host_id`, [lending.lendingId]);
  return rows;
}

/** The rows of one lend request (a retried lend finds what it lent), by host. */
export async function lendingsOfRequest(db: Queryable, lendingId: string): Promise<HostLending[]> {
  const { rows } = await db.query<HostLending>(`SELECT ${LENDING_COLUMNS} FROM host_lendings g WHERE g.lending_id = $1 ORDER BY g.host_id`, [lendingId]);
  return rows;
}

/** The reservation's lendings not returned yet, by host. */
export async function openLendingsOf(db: Queryable, reservationId: string): Promise<HostLending[]> {
  const { rows } = await db.query<HostLending>(`SELECT ${LENDING_COLUMNS} FROM host_lendings g WHERE g.reservation_id = $1 AND g.returned_at IS NULL ORDER BY g.host_id, lower(g.during)`, [reservationId]);
  return rows;
}

/**
 * The open lendings of these hosts that hold [fromMs, toMs) whole (a borrower's blocked range), one
 * per host at most (lendings of a host never overlap), locked FOR SHARE: a reclaim's shortening
 * waits for the borrower's commit, then sees it.
 */
export async function lendingsCovering(client: PoolClient, hostIds: string[], fromMs: number, toMs: number): Promise<HostLending[]> {
  const { rows } = await client.query<HostLending>(
    `SELECT ${LENDING_COLUMNS} FROM host_lendings g
     WHERE g.host_id = ANY($1::bigint[]) AND g.returned_at IS NULL AND g.reclaimed_at IS NULL AND g.during @> tstzrange(to_timestamp($2 / 1000.0), to_timestamp($3 / 1000.0))
     ORDER BY g.host_id FOR SHARE`,
    [hostIds, fromMs, toMs],
  );
  return rows;
}

/** Whether any host is lent now and not being reclaimed (a deployment that never lends reads the calendar as before). */
export async function anyOpenLending(db: Queryable): Promise<boolean> {
  const { rows } = await db.query<{ open: boolean }>('SELECT EXISTS (SELECT 1 FROM host_lendings WHERE returned_at IS NULL AND reclaimed_at IS NULL) AS open');
  return rows[0].open;
}

/** The reservation's open lendings, locked for a reclaim (or the lender's end) until the transaction ends, by host. */
export async function lockLendingsForReclaim(client: PoolClient, reservationId: string): Promise<HostLending[]> {
  const { rows } = await client.query<HostLending>(
    `SELECT ${LENDING_COLUMNS} FROM host_lendings g WHERE g.reservation_id = $1 AND g.returned_at IS NULL ORDER BY g.host_id, lower(g.during) FOR UPDATE`,
    [reservationId],
  );
  return rows;
}

/**
 * A reclaim takes the lending back: it ends at `endMs` when that is sooner (never before it began: a
 * lending reclaimed before or as it began keeps one microsecond, as a range cannot be empty), marked
 * reclaimed. Its borrowers must end inside by then (23514 otherwise: cut them first).
 */
export async function reclaimLending(client: PoolClient, id: string, endMs: number): Promise<void> {
  await client.query(
    `UPDATE host_lendings SET reclaimed_at = COALESCE(reclaimed_at, now()),
       during = tstzrange(lower(during), LEAST(upper(during), GREATEST(to_timestamp($2 / 1000.0), lower(during) + interval '1 microsecond')))
     WHERE id = $1`,
    [id, endMs],
  );
}

/** The hosts of these lendings are back in their lender's hands at `atMs`; `borrowedMs` per lending row id (accounting). */
export async function markReturned(client: PoolClient, returned: Array<{ id: string; borrowedMs: number }>, atMs: number): Promise<void> {
  for (const lending of returned) {
    await client.query('UPDATE host_lendings SET returned_at = to_timestamp($2 / 1000.0), borrowed_ms = $3 WHERE id = $1 AND returned_at IS NULL', [lending.id, atMs, Math.max(0, Math.round(lending.borrowedMs))]);
  }
}

/** The leases that lend the hosts a borrower lease books (those it must not wait for: they hold the host around it). */
export async function lendersOfBorrower(db: Queryable, borrowerLeaseId: string): Promise<string[]> {
  const { rows } = await db.query<{ lease_id: string }>(
    'SELECT DISTINCT g.lease_id::text FROM host_lendings g JOIN host_allocations a ON a.lent_by = g.id WHERE a.lease_id = $1 ORDER BY 1',
    [borrowerLeaseId],
  );
  return rows.map((r) => r.lease_id);
}

/** The lendings of `hostIds` overlapping [fromMs, toMs), by host then start; at most `limit` (the calendar page). */
export async function lendingsInWindow(db: Queryable, window: { fromMs: number; toMs: number; hostIds: string[]; limit: number }): Promise<HostLending[]> {
  const { rows } = await db.query<HostLending>(
    `SELECT ${LENDING_COLUMNS} FROM host_lendings g
     WHERE g.host_id = ANY($3::bigint[]) AND g.during && tstzrange(to_timestamp($1 / 1000.0), to_timestamp($2 / 1000.0))
     ORDER BY g.host_id, lower(g.during), g.id LIMIT $4`,
    [window.fromMs, window.toMs, window.hostIds, window.limit],
  );
  return rows;
}

/** The columns of a lending row both lending stores' meters select (quantity-lendings.ts reads its own table into it). */
export interface MeteredLendingRow {
  id: string;
  project_id: string;
  start_ms: number;
  until_ms: number;
  returned_ms: number | null;
  /** Text (a bigint sum); null until returned. */
  borrowed_ms: string | null;
}

/** The usage meter's view of a lending row: what hosts' and slots' lendings share (a slot lending adds what it lends). */
export const meteredLendingOf = (r: MeteredLendingRow): MeteredLending => ({
  id: r.id,
  projectId: r.project_id,
  startMs: r.start_ms,
  untilMs: r.until_ms,
  returnedMs: r.returned_ms,
  borrowedMs: r.borrowed_ms === null ? null : Number(r.borrowed_ms),
});

/**
 * The lendings (of `projectId`'s leases, or all) that were lent during `span` or returned within it,
 * `batchSize` at a time by id (a report over every lending never holds them all at once).
 */
export async function* meteredLendingBatches(db: Queryable, filter: { projectId?: string; span: { startMs: number; endMs: number } }, batchSize = 500): AsyncGenerator<MeteredLending[]> {
  let after = '0';
  for (;;) {
    const { rows } = await db.query<MeteredLendingRow>(
      `SELECT g.id::text, g.project_id, (extract(epoch FROM lower(g.during)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(g.during)) * 1000)::float8 AS until_ms,
              (extract(epoch FROM g.returned_at) * 1000)::float8 AS returned_ms,
              CASE WHEN g.returned_at IS NOT NULL THEN COALESCE(g.borrowed_ms,
                COALESCE(sum(round(extract(epoch FROM upper(a.during) - lower(a.during)) * 1000)), 0))::bigint::text END AS borrowed_ms
       FROM host_lendings g LEFT JOIN host_allocations a ON a.lent_by = g.id
       WHERE ($1::text IS NULL OR g.project_id = $1) AND g.id > $4::bigint
         AND lower(g.during) < to_timestamp($3 / 1000.0) AND GREATEST(upper(g.during), COALESCE(g.returned_at, upper(g.during))) > to_timestamp($2 / 1000.0)
       GROUP BY g.id ORDER BY g.id LIMIT $5`,
      [filter.projectId ?? null, filter.span.startMs, filter.span.endMs, after, batchSize],
    );
    if (rows.length === 0) return;
    yield rows.map(meteredLendingOf);
    if (rows.length < batchSize) return;
    after = rows[rows.length - 1].id;
  }
}
