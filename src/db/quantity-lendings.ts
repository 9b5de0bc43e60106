/**
 * Lent instance slots (table `quantity_lendings`, 038_quantity_lendings.sql, issue 43): an active
 * regular slot lease lends `slots` of its slots on one provider over `during`, inside the window of
 * its rows there; preemptible slot leases may book there (borrower rows:
 * `quantity_allocations.lent_by`) up to `amounts` at any instant. A lending is open until its slots
 * are back in the lender's hands (`returned_at`); a reclaim shortens it to when its borrowers are
 * out. The keys and CHECKs of the migration hold the rows inside one another; the borrowers' peak
 * within `amounts` is checked here (borrowersOverAmounts) by whoever holds the lending FOR UPDATE.
 * Instants cross this boundary as epoch milliseconds.
 */
import type { PoolClient } from 'pg';
import type { Amounts } from '../domain/quantity-calendar';
import { footprintOfAmounts, type MeteredLending } from '../domain/usage';
import type { Pool } from './pool';
import { meteredLendingOf, type MeteredLendingRow } from './host-lendings';

type Queryable = Pool | PoolClient;

/** One provider's lending as the calendar reads it. */
export interface SlotLending {
  /** The row's id (what borrower rows' `lent_by` name). */
  id: string;
  /** The lend request's id (one per request, several providers). */
  lending_id: string;
  provider_uuid: string;
  allocation_id: string;
  reservation_id: string;
  lease_id: string;
  /** The lender's project. */
  project_id: string;
  slots: number;
  amounts: Amounts;
  start_ms: number;
  end_ms: number;
  /** The exact range, as PostgreSQL's text (what a borrower row copies into `lent_during`). */
  during: string;
  reclaimed_ms: number | null;
  returned_ms: number | null;
}

/** SQL over a lender's quantity_allocations row (as `a`): until when its rows on that provider must stay, its lendings' latest end there (null: never lent). */
export const SLOT_LENDER_ROW_LENT_UNTIL =
  '(SELECT max(upper(g.during)) FROM quantity_lendings g WHERE g.reservation_id = a.reservation_id AND g.provider_uuid = a.provider_uuid AND g.lender_during && a.during)';

const LENDING_COLUMNS = `g.id::text, g.lending_id::text, g.provider_uuid, g.allocation_id::text, g.reservation_id::text, g.lease_id::text, g.project_id, g.slots, g.amounts,
  (extract(epoch FROM lower(g.during)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(g.during)) * 1000)::float8 AS end_ms,
  g.during::text AS during,
  (extract(epoch FROM g.reclaimed_at) * 1000)::float8 AS reclaimed_ms, (extract(epoch FROM g.returned_at) * 1000)::float8 AS returned_ms`;

/** What a lender lends on one provider: one of its rows there (quantity-allocations.ts `lenderSlotRowsOf`), how many slots, of which size. */
export interface LentSlotsOnProvider {
  allocationId: string;
  providerUuid: string;
  /** That row's window as PostgreSQL's text (copied exactly: the key the cascade follows). */
  during: string;
  slots: number;
  slot: Amounts;
}

/**
 * Lends slots of a reservation over [fromMs, untilMs), one row per provider under one `lendingId`.
 * Idempotent by `lendingId`: a retry finds its rows and answers them. The lender's rows must be
 * locked by the caller (lenderSlotRowsOf), who checks that it lends no more than it holds; a lending
 * outside the lender's window fails (23514).
 */
export async function insertSlotLendings(
  client: PoolClient,
  lending: { lendingId: string; reservationId: string; leaseId: string; projectId: string; providers: LentSlotsOnProvider[]; fromMs: number; untilMs: number },
): Promise<SlotLending[]> {
  for (const p of [...lending.providers].sort((a, b) => a.providerUuid.localeCompare(b.providerUuid))) {
    const amounts = Object.fromEntries(Object.entries(p.slot).map(([k, v]) => [k, v * p.slots]));
    await client.query(
      `INSERT INTO quantity_lendings (lending_id, allocation_id, provider_uuid, lender_during, lease_id, reservation_id, project_id, slots, amounts, during)
       VALUES ($1, $2, $3, $4::tstzrange, $5, $6, $7, $8, $9, tstzrange(to_timestamp($10 / 1000.0), to_timestamp($11 / 1000.0)))
       ON CONFLICT (lending_id, provider_uuid) DO NOTHING`,
      [lending.lendingId, p.allocationId, p.providerUuid, p.during, lending.leaseId, lending.reservationId, lending.projectId, p.slots, JSON.stringify(amounts), lending.fromMs, lending.untilMs],
    );
  }
  return slotLendingsOfRequest(client, lending.lendingId);
}

/** The rows of one lend request, by provider. */
export async function slotLendingsOfRequest(db: Queryable, lendingId: string): Promise<SlotLending[]> {
  const { rows } = await db.query<SlotLending>(`SELECT ${LENDING_COLUMNS} FROM quantity_lendings g WHERE g.lending_id = $1 ORDER BY g.provider_uuid`, [lendingId]);
  return rows;
}

/** The reservation's lendings not returned yet, by provider then start. */
export async function openSlotLendingsOf(db: Queryable, reservationId: string): Promise<SlotLending[]> {
  const { rows } = await db.query<SlotLending>(
    `SELECT ${LENDING_COLUMNS} FROM quantity_lendings g WHERE g.reservation_id = $1 AND g.returned_at IS NULL ORDER BY g.provider_uuid, lower(g.during), g.id`,
    [reservationId],
  );
  return rows;
}

/**
 * The lendings on these providers a preemptible ask may book into over [fromMs, toMs): open, not
 * being reclaimed, overlapping it. `lock`: FOR UPDATE until the transaction ends (a booking that
 * writes borrower rows holds them while it checks their peak; a reclaim waits for it, then sees them).
 */
export async function borrowableSlotLendings(db: Queryable, window: { providerUuids: string[]; fromMs: number; toMs: number; lock: boolean }): Promise<SlotLending[]> {
  const { rows } = await db.query<SlotLending>(
    `SELECT ${LENDING_COLUMNS} FROM quantity_lendings g
     WHERE g.provider_uuid = ANY($1) AND g.returned_at IS NULL AND g.reclaimed_at IS NULL
       AND g.during && tstzrange(to_timestamp($2 / 1000.0), to_timestamp($3::numeric / 1000.0))
     ORDER BY g.id${window.lock ? ' FOR UPDATE' : ''}`,
    [window.providerUuids, window.fromMs, window.toMs === Infinity ? null : window.toMs],
  );
  return rows;
}

/**
 * Whether some lending on these providers is borrowable after `fromMs` (open, not being reclaimed):
 * a preemptible ask of a deployment that lends nothing there reads the calendar as a regular one.
 */
export async function anyBorrowableSlotLending(db: Queryable, providerUuids: string[], fromMs: number): Promise<boolean> {
  const { rows } = await db.query<{ open: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM quantity_lendings g WHERE g.provider_uuid = ANY($1) AND g.returned_at IS NULL AND g.reclaimed_at IS NULL AND upper(g.during) > to_timestamp($2 / 1000.0)) AS open`,
    [providerUuids, fromMs],
  );
  return rows[0].open;
}

/** These lendings, locked FOR UPDATE (a borrower's move checks their peak again). */
export async function lockSlotLendings(client: PoolClient, ids: string[]): Promise<SlotLending[]> {
  const { rows } = await client.query<SlotLending>(`SELECT ${LENDING_COLUMNS} FROM quantity_lendings g WHERE g.id = ANY($1::bigint[]) ORDER BY g.id FOR UPDATE`, [ids]);
  return rows;
}

/** The reservation's open lendings, locked for a reclaim (or the lender's end) until the transaction ends. */
export async function lockSlotLendingsForReclaim(client: PoolClient, reservationId: string): Promise<SlotLending[]> {
  const { rows } = await client.query<SlotLending>(
    `SELECT ${LENDING_COLUMNS} FROM quantity_lendings g WHERE g.reservation_id = $1 AND g.returned_at IS NULL ORDER BY g.id FOR UPDATE`,
    [reservationId],
  );
  return rows;
}

/**
 * The slots this reservation lends on each provider at some instant of [fromMs, toMs) (open or
 * reclaimed lendings still running then, summed: a bound, not a peak), by provider.
 */
export async function slotsLentOverlapping(db: Queryable, reservationId: string, fromMs: number, toMs: number): Promise<Map<string, number>> {
  const { rows } = await db.query<{ provider_uuid: string; slots: number }>(
    `SELECT g.provider_uuid, sum(g.slots)::int AS slots FROM quantity_lendings g
     WHERE g.reservation_id = $1 AND g.returned_at IS NULL AND g.during && tstzrange(to_timestamp($2 / 1000.0), to_timestamp($3 / 1000.0))
     GROUP BY g.provider_uuid`,
    [reservationId, fromMs, toMs],
  );
  return new Map(rows.map((r) => [r.provider_uuid, r.slots]));
}

/**
 * Until when the lease's reservations lend slots (the latest end of their open lendings still
 * running: one reclaimed, or never returned, whose window has passed lends nothing), per reservation.
 */
export async function slotsLentUntilOfLease(db: Queryable, leaseId: string): Promise<Array<{ reservation_id: string; lent_until_ms: number }>> {
  const { rows } = await db.query<{ reservation_id: string; lent_until_ms: number }>(
    `SELECT g.reservation_id::text, (extract(epoch FROM max(upper(g.during))) * 1000)::float8 AS lent_until_ms
     FROM quantity_lendings g WHERE g.lease_id = $1 AND g.returned_at IS NULL AND upper(g.during) > now() GROUP BY g.reservation_id ORDER BY 1`,
    [leaseId],
  );
  return rows;
}

/**
 * The lendings among `ids` whose borrowers hold more than `amounts` of some resource class at some
 * instant (the peak is at some borrower row's start). Asked by a transaction holding them FOR UPDATE.
 */
export async function lendingsOverAmounts(client: PoolClient, ids: string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  const { rows } = await client.query<{ id: string }>(
    `SELECT DISTINCT g.id::text FROM quantity_lendings g
     JOIN quantity_allocations s ON s.lent_by = g.id
     JOIN quantity_allocations o ON o.lent_by = g.id AND o.blocks @> lower(s.blocks)
     CROSS JOIN LATERAL jsonb_each_text(o.amounts) kv
     WHERE g.id = ANY($1::bigint[])
     GROUP BY g.id, s.id, kv.key
     HAVING sum(kv.value::numeric) > COALESCE((min(g.amounts::text)::jsonb ->> kv.key)::numeric, 0)
     ORDER BY 1`,
    [ids],
  );
  return rows.map((r) => r.id);
}

/**
 * A reclaim takes the lending back: it ends at `endMs` when that is sooner (never before it began:
 * one reclaimed before or as it began keeps one microsecond), marked reclaimed. Its borrowers must
 * end inside by then (23514 otherwise: cut them first).
 */
export async function reclaimSlotLending(client: PoolClient, id: string, endMs: number): Promise<void> {
  await client.query(
    `UPDATE quantity_lendings SET reclaimed_at = COALESCE(reclaimed_at, now()),
       during = tstzrange(lower(during), LEAST(upper(during), GREATEST(to_timestamp($2 / 1000.0), lower(during) + interval '1 microsecond')))
     WHERE id = $1`,
    [id, endMs],
  );
}

/** These lendings' slots are back in their lender's hands at `atMs`; `borrowedMs` per lending row id (accounting). */
export async function markSlotLendingsReturned(client: PoolClient, returned: Array<{ id: string; borrowedMs: number }>, atMs: number): Promise<void> {
  for (const lending of returned) {
    await client.query('UPDATE quantity_lendings SET returned_at = to_timestamp($2 / 1000.0), borrowed_ms = $3 WHERE id = $1 AND returned_at IS NULL', [lending.id, atMs, Math.max(0, Math.round(lending.borrowedMs))]);
  }
}

/**
 * The slot lendings (of `projectId`'s leases, or all) that were lent during `span` or returned
 * within it, as the meter reads them (their slots' amounts lent, one slot's per borrowed slot-ms),
 * `batchSize` at a time by id: host-lendings.ts `meteredLendingBatches` for slots.
 */
export async function* meteredSlotLendingBatches(db: Queryable, filter: { projectId?: string; span: { startMs: number; endMs: number } }, batchSize = 500): AsyncGenerator<MeteredLending[]> {
  let after = '0';
  for (;;) {
    const { rows } = await db.query<MeteredLendingRow & { slots: number; amounts: Amounts }>(
      `SELECT g.id::text, g.project_id, g.slots, g.amounts, (extract(epoch FROM lower(g.during)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(g.during)) * 1000)::float8 AS until_ms,
              (extract(epoch FROM g.returned_at) * 1000)::float8 AS returned_ms, CASE WHEN g.returned_at IS NOT NULL THEN COALESCE(g.borrowed_ms, 0)::text END AS borrowed_ms
       FROM quantity_lendings g
       WHERE ($1::text IS NULL OR g.project_id = $1) AND g.id > $4::bigint
         AND lower(g.during) < to_timestamp($3 / 1000.0) AND GREATEST(upper(g.during), COALESCE(g.returned_at, upper(g.during))) > to_timestamp($2 / 1000.0)
       ORDER BY g.id LIMIT $5`,
      [filter.projectId ?? null, filter.span.startMs, filter.span.endMs, after, batchSize],
    );
    if (rows.length === 0) return;
    yield rows.map((r) => ({
      ...meteredLendingOf(r),
      id: `slots:${r.id}`,
      resourceType: 'virtual:instance',
      footprint: footprintOfAmounts(r.amounts),
      // `amounts` is `slots` slots' worth: each slot's is a whole division.
      borrowedUnit: footprintOfAmounts(Object.fromEntries(Object.entries(r.amounts).map(([key, amount]) => [key, amount / r.slots]))),
    }));
    if (rows.length < batchSize) return;
    after = rows[rows.length - 1].id;
  }
}
