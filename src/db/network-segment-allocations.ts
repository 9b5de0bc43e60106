/**
 * The network segment calendar (table `network_segment_allocations`, issue 45): one row per
 * reservation holding a segment over its window `during`, and `blocks`, the window from the
 * provisioning lead on. The exclusion constraint `network_segment_allocations_no_double_booking`
 * keeps two bookings of one segment from overlapping. Instants cross this boundary as epoch milliseconds.
 */
import type { PoolClient } from 'pg';
import type { Pool } from './pool';
import { BOOKING_LEASE_COLUMNS, HELD_BOOKING_JOIN, WINDOW_PARAMS_RANGE, wholeResourceBookings, type BookingLeaseColumns } from './range-bookings';
import type { NetworkSegmentRecord } from './network-segments';

type Queryable = Pool | PoolClient;

/** The statements the segment calendar shares with the host and floating IP calendars (./range-bookings.ts), on this table. */
export const networkSegmentBookings = wholeResourceBookings({
  table: 'network_segment_allocations',
  resourceColumn: 'network_segment_id',
  idType: 'uuid',
  resources: 'network_segments',
  name: "r.network_type || ':' || COALESCE(r.physical_network || ':', '') || r.segment_id",
  ownRows: 'true',
});

/** The segment a reservation's booking holds (the segment's row), undefined when it holds none. */
export async function segmentOfReservation(db: Queryable, reservationId: string): Promise<NetworkSegmentRecord | undefined> {
  const { rows } = await db.query<NetworkSegmentRecord>(
    `SELECT s.id::text, s.network_type, s.physical_network, s.segment_id, s.capabilities, s.created_at, s.updated_at
     FROM network_segment_allocations a JOIN network_segments s ON s.id = a.network_segment_id WHERE a.reservation_id = $1 ORDER BY a.id LIMIT 1`,
    [reservationId],
  );
  return rows[0];
}

/** Blazar's allocations: per segment, the reservations holding it from now on (optionally of one lease, reservation, segment or project). */
export interface NetworkSegmentAllocationRow {
  network_segment_id: string;
  reservation_id: string;
  lease_id: string;
  project_id: string;
  start_ms: number;
  end_ms: number;
}

export async function networkSegmentAllocations(
  db: Queryable,
  filter: { leaseId?: string; reservationId?: string; networkSegmentId?: string; projectId?: string },
): Promise<NetworkSegmentAllocationRow[]> {
  const { rows } = await db.query<NetworkSegmentAllocationRow>(
    `SELECT a.network_segment_id::text, a.reservation_id::text, a.lease_id::text, a.project_id,
            (extract(epoch FROM lower(a.during)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(a.during)) * 1000)::float8 AS end_ms
     FROM network_segment_allocations a JOIN leases l ON l.id = a.lease_id
     WHERE upper(a.during) > now() AND l.deleted_at IS NULL
       AND ($1::uuid IS NULL OR a.lease_id = $1) AND ($2::uuid IS NULL OR a.reservation_id = $2)
       AND ($3::uuid IS NULL OR a.network_segment_id = $3) AND ($4::text IS NULL OR a.project_id = $4)
     ORDER BY lower(a.during), a.id LIMIT 10000`,
    [filter.leaseId ?? null, filter.reservationId ?? null, filter.networkSegmentId ?? null, filter.projectId ?? null],
  );
  return rows;
}

/** A segment's booking in a calendar window, with what the page may show of its lease. */
export interface NetworkSegmentBookingInWindow extends BookingLeaseColumns {
  network_segment_id: string;
}

/** The bookings overlapping [fromMs, toMs), at most `limit`, per segment in time order. */
export async function networkSegmentBookingsInWindow(pool: Pool, window: { fromMs: number; toMs: number; limit: number }): Promise<NetworkSegmentBookingInWindow[]> {
  const { rows } = await pool.query<NetworkSegmentBookingInWindow>(
    `SELECT a.network_segment_id::text, ${BOOKING_LEASE_COLUMNS}
     FROM network_segment_allocations a LEFT JOIN leases l ON l.id = a.lease_id AND l.deleted_at IS NULL ${HELD_BOOKING_JOIN}
     WHERE a.blocks && ${WINDOW_PARAMS_RANGE} AND a.during && ${WINDOW_PARAMS_RANGE}
     ORDER BY a.network_segment_id, lower(a.during), a.id LIMIT $3`,
    [window.fromMs, window.toMs, window.limit],
  );
  return rows;
}
