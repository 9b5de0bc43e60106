/**
 * The statements the calendars' booking tables have in common: rows per reservation and lease,
 * with their window `during` and `blocks` (the window from its lead on, plus a cleaning gap after,
 * or unbounded for a booking that keeps its resource for good). Each store binds them to its own
 * table (host_allocations, floating_ip_allocations, quantity_allocations): this file names none,
 * and table names reach the SQL only from those stores' constants. Instants cross this boundary as
 * epoch milliseconds.
 */
import type { PoolClient } from 'pg';
import type { LeaseStatus } from '../domain/lease';
import { isExclusionViolation, type Pool } from './pool';

type Queryable = Pool | PoolClient;

/** What the calendar page shows of a booking's lease (a booking aliased `a`, its lease `l`, left-joined). */
export interface BookingLeaseColumns {
  lease_id: string;
  reservation_id: string;
  project_id: string;
  /** Null when the lease row is gone or deleted (a booking being released). */
  lease_name: string | null;
  status: LeaseStatus | null;
  start_ms: number;
  end_ms: number;
  /** A booking of a live offer hold (lease_id is the hold's id): when the hold expires; null otherwise. */
  hold_expires_ms: number | null;
}

export const BOOKING_LEASE_COLUMNS = `a.lease_id::text, a.reservation_id::text, a.project_id, l.name AS lease_name, l.status,
  (extract(epoch FROM lower(a.during)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(a.during)) * 1000)::float8 AS end_ms,
  (extract(epoch FROM h.expires_at) * 1000)::float8 AS hold_expires_ms`;

/** Joined by the queries that read BOOKING_LEASE_COLUMNS: a booking of an offer hold (no lease yet) says until when it is held. */
export const HELD_BOOKING_JOIN = "LEFT JOIN offer_holds h ON h.id = a.lease_id AND h.state = 'held'";

/** The window [$1, $2) of a query about one, in epoch milliseconds. */
export const WINDOW_PARAMS_RANGE = `tstzrange(to_timestamp($1 / 1000.0), to_timestamp($2 / 1000.0))`;

/**
 * Ends the reservation's booking at `atMs` (blocked `cleaningMs` more; a booking blocked for good
 * stays so); a booking that had not begun by then is dropped whole. `keptUntil` (SQL over the row
 * as `a`, from the store's constants; null for a row with nothing to keep): a row ends no sooner,
 * and one not begun is dropped only when it is null (a lender's row keeps its lent host until its
 * lendings end, issue 43).
 */
export async function endReservationBookingsAt(db: Queryable, table: string, reservationId: string, atMs: number, cleaningMs = 0, keptUntil?: string): Promise<void> {
  const at = 'to_timestamp($2 / 1000.0)';
  // GREATEST skips a null: a row with nothing to keep ends at `atMs`.
  const ends = keptUntil === undefined ? at : `GREATEST(${at}, ${keptUntil})`;
  await db.query(
    `UPDATE ${table} a
     SET during = tstzrange(lower(a.during), ${ends}),
         blocks = tstzrange(lower(a.blocks), CASE WHEN upper_inf(a.blocks) THEN NULL ELSE ${ends} + $3 * interval '1 millisecond' END)
     WHERE a.reservation_id = $1 AND upper(a.during) > ${ends} AND lower(a.during) < ${ends}`,
    [reservationId, atMs, cleaningMs],
  );
  await db.query(`DELETE FROM ${table} a WHERE a.reservation_id = $1 AND lower(a.during) >= ${at}${keptUntil === undefined ? '' : ` AND ${keptUntil} IS NULL`}`, [reservationId, atMs]);
}

/** A booking a preemption cuts short, as the key it gets is made from: its row, its key, and its window's start and lead. */
export interface CutBooking {
  id: string;
  bookingKey: string;
  startMs: number;
  leadMs: number;
}

/** The key of a booking cut to end at `endMs` (the calendars' one form of a moved key: src/resources/shared/booking.ts, movedBookingKey). */
export type CutBookingKey = (booking: CutBooking, endMs: number) => string;

/**
 * A preemptible lease's rows in `table` cut to end at `endMs` (issue 43): those running across it end
 * there, blocked `cleaningMs` more, each with the key `cutKey` gives it (what it was made for stays:
 * a booking of the window first asked for is made again, never taken as done); those beginning at
 * or after it go.
 */
export async function cutPreemptibleBookings(client: PoolClient, table: string, leaseId: string, endMs: number, cleaningMs: number, cutKey: CutBookingKey): Promise<void> {
  const { rows } = await client.query<CutBooking>(
    `SELECT id::text, booking_key AS "bookingKey", (extract(epoch FROM lower(during)) * 1000)::float8 AS "startMs",
            (extract(epoch FROM lower(during) - lower(blocks)) * 1000)::float8 AS "leadMs"
     FROM ${table} WHERE lease_id = $1 AND preemptible AND upper(during) > to_timestamp($2 / 1000.0) AND lower(during) < to_timestamp($2 / 1000.0)
     ORDER BY id FOR UPDATE`,
    [leaseId, endMs],
  );
  if (rows.length > 0) {
    await client.query(
      `UPDATE ${table} a
       SET during = tstzrange(lower(a.during), to_timestamp($2 / 1000.0)), blocks = tstzrange(lower(a.blocks), to_timestamp($2 / 1000.0) + $3 * interval '1 millisecond'), booking_key = k.key
       FROM unnest($1::bigint[], $4::text[]) AS k(id, key) WHERE a.id = k.id`,
      [rows.map((r) => r.id), endMs, cleaningMs, rows.map((r) => cutKey(r, endMs))],
    );
  }
  await client.query(`DELETE FROM ${table} WHERE lease_id = $1 AND preemptible AND lower(during) >= to_timestamp($2 / 1000.0)`, [leaseId, endMs]);
}

/** A booking table of whole resources (one row per resource of a reservation), as its store describes it. */
/** What every new booking of a whole resource says: whose it is and its window (from `fromMs` to `endMs`, blocking from `leadMs` before). */
export interface NewRangeBooking {
  reservationId: string;
  leaseId: string;
  projectId: string;
  fromMs: number;
  endMs: number;
  leadMs: number;
  bookingKey: string;
}

export interface WholeResourceTable {
  table: string;
  /** The column naming the booked resource, and its type. */
  resourceColumn: string;
  idType: 'bigint' | 'uuid';
  /** The resources' table, joined as `r` on its `id`, and the SQL of a resource's name over it. */
  resources: string;
  name: string;
  /** The condition (over the bookings as `a`) of the rows the whole-resource calendar owns. */
  ownRows: string;
}

/** One resource of a lease's booking, as the calendar reads it before changing the booking. */
export interface WholeResourceBookingRow {
  reservation_id: string;
  booking_key: string;
  resource_id: string;
  /** The resource's name (a hypervisor host name, an address). */
  name: string;
  start_ms: number;
  end_ms: number;
}

/**
 * Who holds a resource now or later, for a removal that must not pull it from under them: a live
 * lease (named), an offer hold, or a booking with neither (its lease not recorded yet: admitted
 * by its workflow or the external filter; or being deleted).
 */
export interface BookingHolder {
  id: string;
  kind: 'lease' | 'offer hold' | 'booking';
  leaseName: string | null;
}

/** How a removal's refusal names a holder: `<lease name> (<id>)`, `offer hold <id>`, `booking of <id> (no live lease)`. */
export function describeHolder(holder: BookingHolder): string {
  if (holder.kind === 'lease') return `${holder.leaseName ?? ''} (${holder.id})`;
  return holder.kind === 'offer hold' ? `offer hold ${holder.id}` : `booking of ${holder.id} (no live lease)`;
}

/** The statements of a whole-resource calendar over its table. */
export function wholeResourceBookings(t: WholeResourceTable) {
  const leaseRows = async (db: Queryable, leaseId: string, lock: '' | 'FOR UPDATE OF a'): Promise<WholeResourceBookingRow[]> => {
    const { rows } = await db.query<WholeResourceBookingRow>(
      `SELECT a.reservation_id::text, a.booking_key, a.${t.resourceColumn}::text AS resource_id, ${t.name} AS name,
              (extract(epoch FROM lower(a.during)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(a.during)) * 1000)::float8 AS end_ms
       FROM ${t.table} a JOIN ${t.resources} r ON r.id = a.${t.resourceColumn} WHERE a.lease_id = $1 AND ${t.ownRows}
       ORDER BY a.id ${lock}`,
      [leaseId],
    );
    return rows;
  };
  return {
    /** The blocked intervals [start_ms, end_ms) overlapping [fromMs, toMs) (toMs null: from `fromMs` on) of the given resources. */
    blocked: async (db: Queryable, window: { fromMs: number; toMs: number | null; ids: string[] }): Promise<{ resource_id: string; start_ms: number; end_ms: number }[]> => {
      const { rows } = await db.query<{ resource_id: string; start_ms: number; end_ms: number }>(
        `SELECT ${t.resourceColumn}::text AS resource_id, (extract(epoch FROM lower(blocks)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(blocks)) * 1000)::float8 AS end_ms
         FROM ${t.table}
         WHERE blocks && tstzrange(to_timestamp($1 / 1000.0), to_timestamp($2::numeric / 1000.0)) AND ${t.resourceColumn} = ANY($3::${t.idType}[])`,
        [window.fromMs, window.toMs, window.ids],
      );
      return rows;
    },

    /** Books one resource; the exclusion constraint refuses it (23P01) when another booking took it meanwhile. */
    insert: async (client: PoolClient, booking: NewRangeBooking & { resourceId: string }): Promise<void> => {
      await client.query(
        `INSERT INTO ${t.table} (${t.resourceColumn}, reservation_id, lease_id, project_id, during, blocks, booking_key)
         VALUES ($1, $2, $3, $4, tstzrange(to_timestamp($5 / 1000.0), to_timestamp($6 / 1000.0)),
                 tstzrange(to_timestamp($5 / 1000.0) - $7 * interval '1 millisecond', to_timestamp($6 / 1000.0)), $8)`,
        [booking.resourceId, booking.reservationId, booking.leaseId, booking.projectId, booking.fromMs, booking.endMs, booking.leadMs, booking.bookingKey],
      );
    },

    /** The lease's bookings, locked for the rest of the transaction, in the order they were made. */
    lockLease: (client: PoolClient, leaseId: string): Promise<WholeResourceBookingRow[]> => leaseRows(client, leaseId, 'FOR UPDATE OF a'),

    /** The lease's bookings as they stand, unlocked (a preview: extension offers). */
    ofLease: (db: Queryable, leaseId: string): Promise<WholeResourceBookingRow[]> => leaseRows(db, leaseId, ''),

    /**
     * Moves the end of every booking of the lease to `endMs` (blocked `cleaningMs` after; a booking
     * blocked for good stays so). False, with nothing changed and the transaction still usable, when
     * that would overlap another booking.
     */
    moveLeaseEnd: async (client: PoolClient, leaseId: string, endMs: number, cleaningMs: number): Promise<boolean> => {
      await client.query('SAVEPOINT move_end');
      try {
        await client.query(
          `UPDATE ${t.table} a
           SET during = tstzrange(lower(during), to_timestamp($2 / 1000.0)),
               blocks = tstzrange(lower(blocks), CASE WHEN upper_inf(blocks) THEN NULL ELSE to_timestamp($2 / 1000.0) + $3 * interval '1 millisecond' END)
           WHERE a.lease_id = $1 AND ${t.ownRows}`,
          [leaseId, endMs, cleaningMs],
        );
        return true;
      } catch (err) {
        if (!isExclusionViolation(err)) throw err;
        await client.query('ROLLBACK TO SAVEPOINT move_end');
        return false;
      }
    },

    /** Among the resources, the first booking of another lease blocking from `fromMs` on (undefined: none). */
    firstOtherFrom: async (db: Queryable, ids: string[], leaseId: string, fromMs: number): Promise<{ name: string; next_ms: number } | undefined> => {
      const { rows } = await db.query<{ name: string; next_ms: number }>(
        `SELECT ${t.name} AS name, (extract(epoch FROM min(lower(a.blocks))) * 1000)::float8 AS next_ms
         FROM ${t.table} a JOIN ${t.resources} r ON r.id = a.${t.resourceColumn}
         WHERE a.${t.resourceColumn} = ANY($1::${t.idType}[]) AND a.lease_id <> $2 AND lower(a.blocks) >= to_timestamp($3 / 1000.0)
         GROUP BY 1 ORDER BY next_ms LIMIT 1`,
        [ids, leaseId, fromMs],
      );
      return rows[0];
    },

    /**
     * Every holder of a booking of the resource still blocking (now or later, or for good), whether
     * or not a lease row exists: a removal is refused while there is any (call under the resource's row lock).
     */
    holdersOf: async (client: PoolClient, resourceId: string): Promise<BookingHolder[]> => {
      const { rows } = await client.query<{ id: string; lease_name: string | null; is_lease: boolean; is_hold: boolean }>(
        `SELECT DISTINCT a.lease_id::text AS id, l.name AS lease_name, l.id IS NOT NULL AS is_lease, h.id IS NOT NULL AS is_hold
         FROM ${t.table} a LEFT JOIN leases l ON l.id = a.lease_id AND l.deleted_at IS NULL LEFT JOIN offer_holds h ON h.id = a.lease_id
         WHERE a.${t.resourceColumn} = $1 AND (upper_inf(a.blocks) OR upper(a.blocks) > now())
         ORDER BY 1`,
        [resourceId],
      );
      return rows.map((r) => ({ id: r.id, kind: r.is_lease ? 'lease' : r.is_hold ? 'offer hold' : 'booking', leaseName: r.lease_name }));
    },

    /** Forgets every booking of the resource (past ones, before its removal). */
    deleteResource: async (client: PoolClient, resourceId: string): Promise<void> => {
      await client.query(`DELETE FROM ${t.table} a WHERE a.${t.resourceColumn} = $1`, [resourceId]);
    },

    setLeaseKey: async (client: PoolClient, leaseId: string, bookingKey: string): Promise<void> => {
      await client.query(`UPDATE ${t.table} a SET booking_key = $2 WHERE a.lease_id = $1 AND ${t.ownRows}`, [leaseId, bookingKey]);
    },

    deleteLease: async (client: PoolClient, leaseId: string): Promise<void> => {
      await client.query(`DELETE FROM ${t.table} a WHERE a.lease_id = $1 AND ${t.ownRows}`, [leaseId]);
    },

    /** Every row of the reservation (whichever calendar's). */
    deleteReservation: async (db: Queryable, reservationId: string): Promise<void> => {
      await db.query(`DELETE FROM ${t.table} WHERE reservation_id = $1`, [reservationId]);
    },

    /** Ends every row of the reservation at `atMs`, or kept until `keptUntil` (endReservationBookingsAt). */
    endReservationAt: (db: Queryable, reservationId: string, atMs: number, cleaningMs = 0, keptUntil?: string) => endReservationBookingsAt(db, t.table, reservationId, atMs, cleaningMs, keptUntil),
  };
}

export type WholeResourceBookings = ReturnType<typeof wholeResourceBookings>;
