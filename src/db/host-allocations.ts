/**
 * The host calendar's bookings (table `host_allocations`): one row per host of a reservation over
 * its window `during`, and `blocks`, the window plus the cleaning gap (unbounded for a booking that
 * keeps its host for good). The exclusion constraint `host_allocations_no_double_booking` keeps
 * two bookings of one host from overlapping; instance slots book their hosts as `shared` rows, which
 * overlap one another but never a whole-host booking (`host_allocations_shared_only_with_shared`).
 * Instants cross this boundary as epoch milliseconds.
 * Read here for the host calendar, the instance slots' shared rows, the host inventory, maintenance,
 * the calendar page and the allocations API.
 */
import type { PoolClient } from 'pg';
import type { Lease } from '../domain/lease';
import type { HostNeedRow } from '../domain/power-plan';
import { CUT_END_JOIN } from './lease-preemptions';
import { maintenanceBlocks, UNUSABLE_BOOKING_SQL } from './maintenance';
import { anyOpenLending, LENDER_ROW_LENT_UNTIL, type LenderRow } from './host-lendings';
import type { Pool } from './pool';
import { BOOKING_LEASE_COLUMNS, cutPreemptibleBookings, HELD_BOOKING_JOIN, WINDOW_PARAMS_RANGE, wholeResourceBookings, type BookingLeaseColumns, type CutBookingKey, type NewRangeBooking } from './range-bookings';

type Queryable = Pool | PoolClient;

/** The statements the host calendar shares with the floating IP calendar (./range-bookings.ts), on this table: whole-host rows are the calendar's, `shared` ones instance slots'. */
export const hostBookings = wholeResourceBookings({
  table: 'host_allocations',
  resourceColumn: 'host_id',
  idType: 'bigint',
  resources: 'hosts',
  name: 'r.hypervisor_hostname',
  ownRows: 'NOT a.shared',
});

/** Every row of the reservation (its instance slots' shared rows too), dropped, or ended at `atMs` (blocked `cleaningMs` more; a booking blocked for good stays so). */
export const { deleteReservation: deleteReservationHostBookings, endReservationAt: endReservationHostBookingsAt } = hostBookings;

/** Every row under a lease id, the instance slots' shared rows too (an offer hold's, ended: src/db/offer-holds.ts). */
export async function deleteLeaseHostRows(db: Queryable, leaseId: string): Promise<void> {
  await db.query('DELETE FROM host_allocations WHERE lease_id = $1', [leaseId]);
}

/** A host's blocked interval [start_ms, end_ms) (end_ms Infinity: blocked for good). */
export interface BlockedRow {
  host_id: string;
  start_ms: number;
  end_ms: number;
}

/** A new booking of one host: from `fromMs` to `endMs`, blocking from `leadMs` before to `cleaningMs` after (or for good: `unbounded`). */
export interface NewHostBooking extends NewRangeBooking {
  hostId: string;
  cleaningMs: number;
  unbounded: boolean;
  /** Instance slots: the host is shared with other instance reservations, never with a whole-host lease. */
  shared?: boolean;
  /** A preemptible booking (issue 43): a regular lease's admission may cut it (cutPreemptibleHostBookings). */
  preemptible?: boolean;
  /** A preemptible booking inside a lending (host_lendings row `id`, its exact range `during`): exempt from the no-double-booking constraint, held inside the lending. */
  lentBy?: { id: string; during: string };
}

/** The hosts a reservation's booking holds, by host id. */
export async function hostsOfReservation(db: Queryable, reservationId: string): Promise<Array<{ id: string; hypervisor_hostname: string }>> {
  const { rows } = await db.query<{ id: string; hypervisor_hostname: string }>(
    'SELECT a.host_id::text AS id, h.hypervisor_hostname FROM host_allocations a JOIN hosts h ON h.id = a.host_id WHERE a.reservation_id = $1 ORDER BY a.host_id',
    [reservationId],
  );
  return rows;
}

/**
 * The hosts a reservation's booking holds: id and compute host name (Nova's service host), by that
 * name. `inLeaseAggregate` (issue 43): without the hosts it lends (open lendings: not back yet),
 * which are in the free pool or a borrower's aggregate, not the lease's. `borrowed`: a preemptible
 * lease holds the host inside another lease's lending (other projects' servers there are not its own).
 */
export async function computeHostsOfReservation(db: Queryable, reservationId: string, options: { inLeaseAggregate?: boolean } = {}): Promise<Array<{ id: string; host: string; borrowed: boolean }>> {
  const { rows } = await db.query<{ id: string; host: string; borrowed: boolean }>(
    `SELECT h.id::text, COALESCE(h.service_name, h.hypervisor_hostname) AS host, bool_or(a.lent_by IS NOT NULL) AS borrowed
     FROM host_allocations a JOIN hosts h ON h.id = a.host_id LEFT JOIN host_lendings g ON $2 AND g.allocation_id = a.id AND g.returned_at IS NULL
     WHERE a.reservation_id = $1 AND g.id IS NULL GROUP BY h.id ORDER BY 2`,
    [reservationId, options.inLeaseAggregate ?? false],
  );
  return rows;
}

/** Per host of the reservation, when another lease's booking of it next begins (its lead time included); a borrowed host's (issue 43): its lending's end at the latest, when the lender has it back. */
export async function nextBookingsOfOthers(db: Queryable, reservationId: string): Promise<Array<{ host_id: string; next_ms: number }>> {
  const { rows } = await db.query<{ host_id: string; next_ms: number }>(
    `SELECT host_id::text, (extract(epoch FROM min(next)) * 1000)::float8 AS next_ms FROM (
       SELECT mine.host_id, lower(other.blocks) AS next
       FROM host_allocations mine JOIN host_allocations other ON other.host_id = mine.host_id AND other.lease_id <> mine.lease_id
            -- A borrower inside one of mine's lendings is not next: it runs within mine's window, and ends before the host comes back.
            LEFT JOIN host_lendings mine_lent ON mine_lent.id = other.lent_by AND mine_lent.allocation_id = mine.id
       WHERE mine.reservation_id = $1 AND lower(other.blocks) >= lower(mine.during) AND mine_lent.id IS NULL
       UNION ALL
       SELECT mine.host_id, upper(mine.lent_during) FROM host_allocations mine WHERE mine.reservation_id = $1 AND mine.lent_by IS NOT NULL) n
     GROUP BY host_id`,
    [reservationId],
  );
  return rows;
}

/**
 * The blocked intervals overlapping [fromMs, toMs + cleaningMs) (toMs null: from `fromMs` on), of
 * every host, or only of `hostIds` (a query about a few hosts reads only theirs: the window's
 * bookings of 1 000 hosts cost tens of ms): bookings, and maintenance windows (which block shared
 * bookings too; read from their store; left out with `withMaintenance: false`).
 *
 * With `mergeGapsBelowMs`, a host's bookings separated by less than that are answered as one
 * interval (window functions over its bookings by start): no window that long fits between them,
 * so a search for the earliest such window answers the same, from far fewer rows when the fit lies
 * months ahead. Not for the longest fit from a start (that may begin inside a short gap).
 */
export async function blockedIntervals(
  db: Queryable,
  window: { fromMs: number; toMs: number | null; cleaningMs: number; hostIds?: string[]; wholeHostOnly?: boolean; withMaintenance?: boolean; mergeGapsBelowMs?: number; withoutPreemptible?: boolean; lentAsFree?: boolean },
): Promise<BlockedRow[]> {
  // `withoutPreemptible`: a regular lease's view (issue 43), where preemptible bookings are free.
  const inWindow = `a.blocks && tstzrange(to_timestamp($1 / 1000.0), to_timestamp($2::numeric / 1000.0) + $3 * interval '1 millisecond')
       AND ($4::bigint[] IS NULL OR a.host_id = ANY($4::bigint[])) AND NOT ($5 AND a.shared) AND NOT ($6 AND a.preemptible)`;
  // The lent-time view only when a lending is open at all: it costs every row a multirange (about 10× the plain read).
  const lentAsFree = window.lentAsFree === true && (await anyOpenLending(db));
  const overlapping = lentAsFree
    ? // A preemptible ask's view (issue 43): a lender's row blocks only outside its open lendings, and
      // each lending's bounds block as instants, so that a fit lies inside one lending or outside all
      // (never from lent time on into the lender's: its blocked range must lie in the lending).
      `SELECT r.host_id, x.starts, x.ends FROM (
         SELECT a.host_id, a.blocks, range_agg(g.during) AS lent, array_agg(lower(g.during)) || array_agg(upper(g.during)) AS edges
         FROM host_allocations a LEFT JOIN host_lendings g ON g.allocation_id = a.id AND g.returned_at IS NULL AND g.reclaimed_at IS NULL
         WHERE ${inWindow} GROUP BY a.id) r
       CROSS JOIN LATERAL (
         SELECT lower(piece) AS starts, COALESCE(upper(piece), 'infinity') AS ends FROM unnest(COALESCE(tstzmultirange(r.blocks) - r.lent, tstzmultirange(r.blocks))) piece
         UNION ALL SELECT edge, edge FROM unnest(r.edges) edge WHERE r.lent IS NOT NULL) x`
    : `SELECT a.host_id, lower(a.blocks) AS starts, COALESCE(upper(a.blocks), 'infinity') AS ends FROM host_allocations a WHERE ${inWindow}`;
  const params = [window.fromMs, window.toMs, window.cleaningMs, window.hostIds ?? null, window.wholeHostOnly ?? false, window.withoutPreemptible ?? false];
  const asMs = (column: string) => `CASE WHEN isfinite(${column}) THEN (extract(epoch FROM ${column}) * 1000)::float8 ELSE 'Infinity' END`;
  const { rows } =
    window.mergeGapsBelowMs === undefined
      ? await db.query<BlockedRow>(`SELECT host_id::text, ${asMs('starts')} AS start_ms, ${asMs('ends')} AS end_ms FROM (${overlapping}) b`, params)
      : await db.query<BlockedRow>(
          // A group begins where a booking starts at least the gap after every earlier one of its host ended.
          `WITH b AS (${overlapping}),
                ended AS (SELECT host_id, starts, ends, max(ends) OVER (PARTITION BY host_id ORDER BY starts, ends ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS ended_before FROM b),
                grouped AS (SELECT host_id, starts, ends, count(*) FILTER (WHERE ended_before IS NULL OR starts - ended_before >= $7 * interval '1 millisecond') OVER (PARTITION BY host_id ORDER BY starts, ends ROWS UNBOUNDED PRECEDING) AS grp FROM ended)
           SELECT host_id::text, ${asMs('min(starts)')} AS start_ms, ${asMs('max(ends)')} AS end_ms FROM grouped GROUP BY host_id, grp`,
          [...params, window.mergeGapsBelowMs],
        );
  return window.withMaintenance === false ? rows : [...rows, ...(await maintenanceBlocks(db, window))];
}

/**
 * Per host (of `hostIds`, or all), its bookings of any kind not ended at `atMs` (whole hosts,
 * instance slots' shared rows, preemptible, lenders' and borrowers' rows; lead and cleaning times
 * included): the earliest start among them, and, when some have begun, the latest end of those (the
 * power planner's next need: src/domain/power-plan.ts). A host with none has no row.
 */
export async function nextHostNeeds(db: Queryable, atMs: number, hostIds?: string[]): Promise<HostNeedRow[]> {
  const { rows } = await db.query<HostNeedRow>(
    `SELECT host_id::text, (extract(epoch FROM min(lower(blocks))) * 1000)::float8 AS start_ms,
            max(CASE WHEN upper_inf(blocks) THEN 'Infinity'::float8 ELSE (extract(epoch FROM upper(blocks)) * 1000)::float8 END)
              FILTER (WHERE lower(blocks) <= to_timestamp($1::float8 / 1000)) AS busy_until_ms
     FROM host_allocations
     WHERE (upper_inf(blocks) OR upper(blocks) > to_timestamp($1::float8 / 1000)) AND ($2::bigint[] IS NULL OR host_id = ANY($2::bigint[]))
     GROUP BY host_id`,
    [atMs, hostIds ?? null],
  );
  return rows;
}

/** Books one host; the exclusion constraint refuses it (23P01) when another booking took the host meanwhile. */
export async function insertHostBooking(client: PoolClient, booking: NewHostBooking): Promise<void> {
  await client.query(
    `INSERT INTO host_allocations (host_id, reservation_id, lease_id, project_id, during, blocks, booking_key, shared, preemptible, lent_by, lent_during)
     VALUES ($1, $2, $3, $4, tstzrange(to_timestamp($5 / 1000.0), to_timestamp($6 / 1000.0)),
             tstzrange(to_timestamp($5 / 1000.0) - $9 * interval '1 millisecond',
                       CASE WHEN $10 THEN NULL ELSE to_timestamp($6 / 1000.0) + $7 * interval '1 millisecond' END), $8, $11, $12, $13, $14::tstzrange)`,
    [booking.hostId, booking.reservationId, booking.leaseId, booking.projectId, booking.fromMs, booking.endMs, booking.cleaningMs, booking.bookingKey, booking.leadMs, booking.unbounded, booking.shared ?? false, booking.preemptible ?? false, booking.lentBy?.id ?? null, booking.lentBy?.during ?? null],
  );
}

// ─── Lending (issue 43; the lendings themselves: ./host-lendings.ts) ──────────────────────────

/** The reservation's whole-host bookings of these hosts, locked, as a lending copies them (its key into the row). */
export async function lenderRowsOf(client: PoolClient, reservationId: string, hostIds: string[]): Promise<LenderRow[]> {
  const { rows } = await client.query<LenderRow>(
    `SELECT id::text AS "allocationId", host_id::text AS "hostId", during::text AS during FROM host_allocations
     WHERE reservation_id = $1 AND host_id = ANY($2::bigint[]) AND NOT shared AND NOT preemptible ORDER BY host_id FOR UPDATE`,
    [reservationId, hostIds],
  );
  return rows;
}

/** A borrower's booking inside a lending: its lease, when its window begins and its blocked range ends, and whether it began. */
export interface BorrowerRow {
  lending_row_id: string;
  lease_id: string;
  host_id: string;
  start_ms: number;
  end_ms: number;
  blocked_until_ms: number;
  begun: boolean;
}

/** The borrower rows inside these lendings (host_lendings row ids), by host then start; `lock`: until the transaction ends (a reclaim about to cut them). */
export async function borrowersOfLendings(db: Queryable, lendingRowIds: string[], lock: boolean): Promise<BorrowerRow[]> {
  const { rows } = await db.query<BorrowerRow>(
    `SELECT lent_by::text AS lending_row_id, lease_id::text, host_id::text, (extract(epoch FROM lower(during)) * 1000)::float8 AS start_ms,
            (extract(epoch FROM upper(during)) * 1000)::float8 AS end_ms, (extract(epoch FROM upper(blocks)) * 1000)::float8 AS blocked_until_ms, lower(during) <= now() AS begun
     FROM host_allocations WHERE lent_by = ANY($1::bigint[]) ORDER BY host_id, lower(during), id${lock ? ' FOR UPDATE' : ''}`,
    [lendingRowIds],
  );
  return rows;
}

/**
 * Of the borrower leases inside these lendings, those that began there and have not ended (their
 * end still to run: their servers may still be on the host). A join describing the row's lease.
 */
export async function borrowersStillRunning(db: Queryable, lendingRowIds: string[]): Promise<string[]> {
  const { rows } = await db.query<{ lease_id: string }>(
    `SELECT DISTINCT a.lease_id::text FROM host_allocations a JOIN leases l ON l.id = a.lease_id
     WHERE a.lent_by = ANY($1::bigint[]) AND lower(a.during) <= now() AND l.deleted_at IS NULL AND l.status NOT IN ('TERMINATED', 'ERROR') ORDER BY 1`,
    [lendingRowIds],
  );
  return rows.map((r) => r.lease_id);
}

/**
 * A lender's booking ended at `atMs` (its end, early end or deletion): as endReservationBookingsAt,
 * except that a row whose host is lent keeps it until its lendings end (a borrower cannot be set free
 * in place: its past overlaps the lender's row). Reclaim first (the lendings shortened to when the
 * borrowers are out).
 */
export async function endLenderBookingsAt(client: PoolClient, reservationId: string, atMs: number, cleaningMs: number): Promise<void> {
  await hostBookings.endReservationAt(client, reservationId, atMs, cleaningMs, LENDER_ROW_LENT_UNTIL);
}

/** Per lease, the latest end of its lendings (returned ones too: their range still lies in the lender's window), by reservation. */
export async function lentUntilOfLease(db: Queryable, leaseId: string): Promise<Array<{ reservation_id: string; lent_until_ms: number }>> {
  const { rows } = await db.query<{ reservation_id: string; lent_until_ms: number }>(
    `SELECT a.reservation_id::text, (extract(epoch FROM max(upper(g.during))) * 1000)::float8 AS lent_until_ms
     FROM host_allocations a JOIN host_lendings g ON g.allocation_id = a.id WHERE a.lease_id = $1 GROUP BY a.reservation_id ORDER BY 1`,
    [leaseId],
  );
  return rows;
}

/** A borrower lease's bookings: the earliest end of the lendings that hold them (Infinity: it borrows nothing). */
export async function borrowedUntil(db: Queryable, leaseId: string): Promise<number> {
  const { rows } = await db.query<{ until_ms: number | null }>(
    'SELECT (extract(epoch FROM min(upper(lent_during))) * 1000)::float8 AS until_ms FROM host_allocations WHERE lease_id = $1 AND lent_by IS NOT NULL',
    [leaseId],
  );
  return rows[0]?.until_ms ?? Infinity;
}

/**
 * The preemptible bookings of these hosts whose blocked interval overlaps [fromMs, toMs) (a regular
 * booking's, its lead and cleaning gap included; `shared`: a preemptible instance reservation's row), each with its lease, when its window begins, and
 * whether a cut of its lease at `cutAtMs` would drop a booking already begun (its servers would
 * then be on no booking the end could clean). `lock` (in a transaction about to cut): the rows stay
 * locked until it ends, so that a concurrent cut waits; a view (an admin's would_book) reads only.
 */
export async function preemptibleBookingsOverlapping(
  db: Queryable,
  window: { hostIds: string[]; fromMs: number; toMs: number; cutAtMs: number; lock: boolean },
): Promise<Array<{ lease_id: string; host_id: string; start_ms: number; drops_begun: boolean; shared: boolean }>> {
  const { rows } = await db.query<{ lease_id: string; host_id: string; start_ms: number; drops_begun: boolean; shared: boolean }>(
    `SELECT a.lease_id::text, a.host_id::text, (extract(epoch FROM lower(a.during)) * 1000)::float8 AS start_ms, a.shared,
            EXISTS (SELECT 1 FROM host_allocations o WHERE o.lease_id = a.lease_id AND o.preemptible
                      AND lower(o.during) <= now() AND lower(o.during) >= to_timestamp($4 / 1000.0)) AS drops_begun
     FROM host_allocations a
     WHERE a.preemptible AND a.host_id = ANY($1::bigint[]) AND a.blocks && tstzrange(to_timestamp($2 / 1000.0), to_timestamp($3 / 1000.0))
     ORDER BY a.host_id, lower(a.during)${window.lock ? ' FOR UPDATE OF a' : ''}`,
    [window.hostIds, window.fromMs, window.toMs, window.cutAtMs],
  );
  return rows;
}

/**
 * A preemptible lease cut to end at `endMs` (issue 43): every booking of the lease on a host (one
 * lease, one end; an instance reservation's shared rows too) ends there, blocked `cleaningMs` more,
 * with the key `cutKey` gives it; those beginning at or after it go (cutPreemptibleBookings).
 * Answers whether any booking of the lease is left.
 */
export async function cutPreemptibleHostBookings(client: PoolClient, leaseId: string, endMs: number, cleaningMs: number, cutKey: CutBookingKey): Promise<boolean> {
  await cutPreemptibleBookings(client, 'host_allocations', leaseId, endMs, cleaningMs, cutKey);
  const { rows } = await client.query('SELECT 1 FROM host_allocations WHERE lease_id = $1 LIMIT 1', [leaseId]);
  return rows.length > 0;
}

/** Of these reservations, those with a host row (whole or shared) that ends after `afterMs`. */
export async function reservationsHostBookedAfter(db: Queryable, reservationIds: string[], afterMs: number): Promise<Set<string>> {
  const { rows } = await db.query<{ reservation_id: string }>('SELECT DISTINCT reservation_id::text FROM host_allocations WHERE reservation_id = ANY($1::uuid[]) AND upper(during) > to_timestamp($2 / 1000.0)', [reservationIds, afterMs]);
  return new Set(rows.map((r) => r.reservation_id));
}

/** One host taken out of a reservation's booking (a failed host replaced by another). */
export async function deleteHostBookingOfReservation(client: PoolClient, reservationId: string, hostId: string): Promise<void> {
  await client.query('DELETE FROM host_allocations WHERE reservation_id = $1 AND host_id = $2', [reservationId, hostId]);
}

/** Leases (not deleted) whose booking holds the host now or later, with the reservation that books it. */
export async function liveBookingsOfHost(db: Queryable, hostId: string): Promise<Array<{ lease: Lease; reservationId: string }>> {
  const { rows } = await db.query<{ document: Lease; reservation_id: string }>(
    `SELECT DISTINCT a.reservation_id::text, l.document FROM host_allocations a JOIN leases l ON l.id = a.lease_id
     WHERE a.host_id = $1 AND upper(a.during) > now() AND l.deleted_at IS NULL`,
    [hostId],
  );
  return rows.map((r) => ({ lease: r.document, reservationId: r.reservation_id }));
}

/** A host enrolled again after a lease released it: the booking that blocked it for good ends with its lease. */
export async function endBlockedForGood(db: Queryable, hostId: string): Promise<void> {
  await db.query('UPDATE host_allocations SET blocks = tstzrange(lower(blocks), upper(during)) WHERE host_id = $1 AND upper_inf(blocks)', [hostId]);
}

/** A host leaving the pool takes its past bookings with it. */
export async function deleteHostBookings(db: Queryable, hostId: string): Promise<void> {
  await db.query('DELETE FROM host_allocations WHERE host_id = $1', [hostId]);
}

// ─── The allocations API (Blazar's os-hosts allocations) ─────────────────────────────────────

export interface AllocationEntry {
  host_id: string;
  hypervisor_hostname: string;
  reservation_id: string;
  lease_id: string;
  project_id: string;
  start_ms: number;
  end_ms: number;
  blocked_until_ms: number;
  preemptible: boolean;
}

export interface AllocationFilter {
  hostId?: string;
  leaseId?: string;
  reservationId?: string;
  projectId?: string;
  /** Bookings overlapping [from, to]. */
  from?: number;
  to?: number;
}

/** Where a batch ended: its last booking's (host_id, start, id), the start as PostgreSQL's text (exact to the microsecond). */
interface AllocationPosition {
  hostId: string;
  start: string;
  id: string;
}

/** Ordered by host, then start. */
export async function listAllocations(pool: Pool, filter: AllocationFilter): Promise<AllocationEntry[]> {
  const rows = await queryAllocations(pool, filter, undefined);
  return rows.map(({ position_start: _start, position_id: _id, ...entry }) => entry);
}

/**
 * Every booking the filter matches, ordered by host then start, in batches of at most
 * `batchSize`: each batch one query resuming after the previous batch's last booking (keyset), so
 * memory holds one batch whatever the count and no connection is held between batches.
 */
export async function* allocationBatches(pool: Pool, filter: AllocationFilter, batchSize: number): AsyncGenerator<AllocationEntry[]> {
  let after: AllocationPosition | undefined;
  // Ends: every batch starts strictly after the previous one, and a short batch is the last.
  for (;;) {
    const rows = await queryAllocations(pool, { ...filter, after }, batchSize);
    if (rows.length > 0) yield rows.map(({ position_start: _start, position_id: _id, ...entry }) => entry);
    if (rows.length < batchSize) return;
    const last = rows[rows.length - 1];
    after = { hostId: last.host_id, start: last.position_start, id: last.position_id };
  }
}

/** One batch (or all, `rowLimit` null) of the bookings the filter matches, ordered by host, then start, then id, from after `after`. */
async function queryAllocations(pool: Pool, filter: AllocationFilter & { after?: AllocationPosition }, rowLimit: number | undefined) {
  const { after } = filter;
  const { rows } = await pool.query<AllocationEntry & { position_start: string; position_id: string }>(
    `SELECT a.host_id::text, h.hypervisor_hostname, a.reservation_id::text, a.lease_id::text, a.project_id,
            (extract(epoch FROM lower(a.during)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(a.during)) * 1000)::float8 AS end_ms,
            (extract(epoch FROM upper(a.blocks)) * 1000)::float8 AS blocked_until_ms,
            a.preemptible,
            lower(a.during)::text AS position_start, a.id::text AS position_id
     FROM host_allocations a JOIN hosts h ON h.id = a.host_id
     WHERE ($1::bigint IS NULL OR a.host_id = $1::bigint)
       AND ($2::uuid IS NULL OR a.lease_id = $2::uuid)
       AND ($3::uuid IS NULL OR a.reservation_id = $3::uuid)
       AND ($4::text IS NULL OR a.project_id = $4::text)
       AND ($5::numeric IS NULL OR upper(a.during) > to_timestamp($5::numeric / 1000.0))
       AND ($6::numeric IS NULL OR lower(a.during) < to_timestamp($6::numeric / 1000.0))
       AND ($7::bigint IS NULL OR (a.host_id, lower(a.during), a.id) > ($7::bigint, $8::timestamptz, $9::bigint))
     ORDER BY a.host_id, lower(a.during), a.id
     LIMIT $10::bigint`,
    [
      filter.hostId ?? null, filter.leaseId ?? null, filter.reservationId ?? null, filter.projectId ?? null, filter.from ?? null, filter.to ?? null,
      after?.hostId ?? null, after?.start ?? null, after?.id ?? null, rowLimit ?? null,
    ],
  );
  return rows;
}

/**
 * The leases whose bookings hold any of these hosts at some time from now on (shared instance
 * slots too), that begin before `untilMs` when given: the leases a host's failure or recovery concerns.
 */
export async function leasesHoldingHosts(db: Queryable, hostIds: string[], untilMs?: number): Promise<string[]> {
  if (hostIds.length === 0) return [];
  const { rows } = await db.query<{ lease_id: string }>(
    `SELECT DISTINCT lease_id::text FROM host_allocations
     WHERE host_id = ANY($1::bigint[]) AND upper(during) > now() AND ($2::float8 IS NULL OR lower(during) < to_timestamp($2::float8 / 1000))
     ORDER BY 1`,
    [hostIds, untilMs ?? null],
  );
  return rows.map((r) => r.lease_id);
}

/**
 * The leases that may still have something to heal: booked from now on on a host they cannot count
 * on (UNUSABLE_BOOKING_SQL; pending ones only if they begin before `untilMs`, when given).
 */
export async function leasesOnUnusableHosts(db: Queryable, untilMs?: number): Promise<string[]> {
  const { rows } = await db.query<{ lease_id: string }>(
    `SELECT DISTINCT a.lease_id::text FROM host_allocations a JOIN hosts h ON h.id = a.host_id
     WHERE upper(a.during) > now()
       AND ($1::float8 IS NULL OR lower(a.during) < to_timestamp($1::float8 / 1000))
       AND ${UNUSABLE_BOOKING_SQL}
     ORDER BY 1`,
    [untilMs ?? null],
  );
  return rows.map((r) => r.lease_id);
}

/**
 * The hosts booked from now on that cannot be counted on (UNUSABLE_BOOKING_SQL), by host id: of a
 * lease's whole-host bookings, or of all a reservation's (an instance reservation's shared rows too).
 */
export async function unusableHostsOf(db: Queryable, owner: { leaseId: string } | { reservationId: string }): Promise<Set<string>> {
  // A lease's hosts it lends (issue 43) are left to their borrowers until back: its heal skips them.
  const [filter, id] = 'leaseId' in owner ? ['a.lease_id = $1 AND NOT a.shared AND g.id IS NULL', owner.leaseId] : ['a.reservation_id = $1', owner.reservationId];
  const { rows } = await db.query<{ host_id: string }>(
    `SELECT DISTINCT a.host_id::text FROM host_allocations a JOIN hosts h ON h.id = a.host_id LEFT JOIN host_lendings g ON g.allocation_id = a.id AND g.returned_at IS NULL
     WHERE ${filter} AND upper(a.during) > now() AND ${UNUSABLE_BOOKING_SQL}`,
    [id],
  );
  return new Set(rows.map((r) => r.host_id));
}

/** A booking in force now: its host, reservation and lease, and how far the lease got. */
export interface CurrentBooking {
  host_id: string;
  reservation_id: string;
  lease_id: string;
  shared: boolean;
  lease_status: string;
  project_id: string;
  /** The reservation's aggregate and zone as the lease records them (host reservations). */
  aggregate: string | null;
  availability_zone: string | null;
  /**
   * A lender's booking of a host it lends (issue 43): 'now' while a lending not returned still runs
   * (the host is its borrower's or the pool's), 'returning' once every such lending ended but the host
   * is not back yet (a take-back in flight); null for any other booking.
   */
  lent: 'now' | 'returning' | null;
}

/** Every booking whose window contains now, with its lease's status, the reservation's aggregate and whether it lends the host. */
export async function currentBookings(db: Queryable): Promise<CurrentBooking[]> {
  const { rows } = await db.query<CurrentBooking>(
    `SELECT a.host_id::text, a.reservation_id::text, a.lease_id::text, a.shared, l.status AS lease_status, l.project_id,
            r.allocation->>'aggregate' AS aggregate, r.allocation->>'availability_zone' AS availability_zone,
            CASE WHEN count(g.id) = 0 THEN NULL WHEN bool_or(upper(g.during) <= now()) THEN 'returning' ELSE 'now' END AS lent
     FROM host_allocations a JOIN leases l ON l.id = a.lease_id
     LEFT JOIN LATERAL (SELECT x->'allocation' AS allocation FROM jsonb_array_elements(l.document->'reservations') x WHERE x->>'id' = a.reservation_id::text LIMIT 1) r ON true
     LEFT JOIN host_lendings g ON g.allocation_id = a.id AND g.returned_at IS NULL
     WHERE a.during @> now() AND l.deleted_at IS NULL
     GROUP BY a.id, l.id, r.allocation`,
  );
  return rows;
}

// ─── Instance slots' shared rows ────────────────────────────────────────────────────────────

/** Moves the end of the reservation's shared host rows that are live at `atMs` to `endMs` (blocked `cleaningMs` more). */
export async function moveSharedHostRowsEnd(client: PoolClient, reservationId: string, atMs: number, endMs: number, cleaningMs: number): Promise<void> {
  await client.query(
    `UPDATE host_allocations
     SET during = tstzrange(lower(during), to_timestamp($3 / 1000.0)), blocks = tstzrange(lower(blocks), to_timestamp($3 / 1000.0) + $4 * interval '1 millisecond')
     WHERE reservation_id = $1 AND shared AND upper(during) > to_timestamp($2 / 1000.0)`,
    [reservationId, atMs, endMs, cleaningMs],
  );
}

/** Ends the reservation's shared rows of these hosts at `atMs` (still blocked `cleaningMs` after). */
export async function endSharedHostRowsAt(client: PoolClient, reservationId: string, hostIds: string[], atMs: number, cleaningMs: number): Promise<void> {
  await client.query(
    `UPDATE host_allocations
     SET during = tstzrange(lower(during), to_timestamp($3 / 1000.0)), blocks = tstzrange(lower(blocks), to_timestamp($3 / 1000.0) + $4 * interval '1 millisecond')
     WHERE reservation_id = $1 AND shared AND host_id = ANY($2::bigint[]) AND upper(during) > to_timestamp($3 / 1000.0)`,
    [reservationId, hostIds, atMs, cleaningMs],
  );
}

/** The hosts whose shared rows of the reservation are live at `atMs`, by host id. */
export async function liveSharedHosts(db: Queryable, reservationId: string, atMs: number): Promise<string[]> {
  const { rows } = await db.query<{ host_id: string }>(
    'SELECT DISTINCT host_id::text FROM host_allocations WHERE reservation_id = $1 AND shared AND upper(during) > to_timestamp($2 / 1000.0)',
    [reservationId, atMs],
  );
  return rows.map((r) => r.host_id);
}

// ─── What a maintenance window overlaps, and the calendar page ───────────────────────────────

/** A lease's booking that a new window overlaps: pending ones can move; the others (begun) cannot. */
export interface OverlappedBooking {
  lease_id: string;
  lease_name: string;
  lease_status: string;
  start_ms: number;
  end_ms: number;
}

/** The leases (one row each) whose bookings of the host overlap [startMs, endMs), with their status. */
export async function leasesOverlapping(db: Queryable, hostId: string, startMs: number, endMs: number): Promise<OverlappedBooking[]> {
  const { rows } = await db.query<OverlappedBooking>(
    `SELECT a.lease_id::text, l.name AS lease_name, l.status AS lease_status,
            (extract(epoch FROM min(lower(a.during))) * 1000)::float8 AS start_ms, (extract(epoch FROM max(upper(a.during))) * 1000)::float8 AS end_ms
     FROM host_allocations a JOIN leases l ON l.id = a.lease_id AND l.deleted_at IS NULL
     WHERE a.host_id = $1 AND a.during && tstzrange(to_timestamp($2::float8 / 1000), to_timestamp($3::float8 / 1000))
     GROUP BY a.lease_id, l.name, l.status ORDER BY 4, 1`,
    [hostId, startMs, endMs],
  );
  return rows;
}

/** A host's booking the calendar page draws, with its lease's name and status. */
export interface HostBookingInWindow extends BookingLeaseColumns {
  host_id: string;
  /** An instance reservation's slots on the host (shared with other instance reservations). */
  shared: boolean;
  preemptible: boolean;
  /** Booked inside another lease's lending (issue 43). */
  borrowed: boolean;
  /** The lease was preempted: the end its owed cut put it at, while that row lasts (a week past the lease's end); null otherwise. */
  cut_ms: number | null;
}

/** The bookings of `hostIds` whose window overlaps [fromMs, toMs), by host then start; at most `limit`. */
export async function hostBookingsInWindow(pool: Pool, window: { fromMs: number; toMs: number; hostIds: string[]; limit: number }): Promise<HostBookingInWindow[]> {
  // `blocks` covers `during` and carries the GiST index of the exclusion constraint: it narrows, `during` decides.
  const { rows } = await pool.query<HostBookingInWindow>(
    `SELECT a.host_id::text, a.shared, a.preemptible, a.lent_by IS NOT NULL AS borrowed, ${BOOKING_LEASE_COLUMNS},
            (extract(epoch FROM cut.end_at) * 1000)::float8 AS cut_ms
     FROM host_allocations a LEFT JOIN leases l ON l.id = a.lease_id AND l.deleted_at IS NULL ${HELD_BOOKING_JOIN}
          ${CUT_END_JOIN}
     WHERE a.blocks && ${WINDOW_PARAMS_RANGE} AND a.during && ${WINDOW_PARAMS_RANGE} AND a.host_id = ANY($3::bigint[])
     ORDER BY a.host_id, lower(a.during), a.id LIMIT $4`,
    [window.fromMs, window.toMs, window.hostIds, window.limit],
  );
  return rows;
}
