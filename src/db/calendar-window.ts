/**
 * What the calendar page draws for one visible window: the hosts' bookings (host_allocations) and
 * the quantities booked on Placement providers (quantity_allocations), each with its lease's name
 * and status. Read only; bounded by a row limit (the caller asks one more to know it cut).
 * Instants cross this boundary as epoch milliseconds.
 */
import type { Amounts } from '../domain/quantity-calendar';
import type { LeaseStatus } from '../domain/lease';
import type { Pool } from './pool';

interface LeaseColumns {
  lease_id: string;
  reservation_id: string;
  project_id: string;
  /** Null when the lease row is gone or deleted (a booking being released). */
  lease_name: string | null;
  status: LeaseStatus | null;
  start_ms: number;
  end_ms: number;
}

export interface HostBookingInWindow extends LeaseColumns {
  host_id: string;
  /** An instance reservation's slots on the host (shared with other instance reservations). */
  shared: boolean;
}

export interface QuantityBookingInWindow extends LeaseColumns {
  provider_uuid: string;
  amounts: Amounts;
}

export interface ProviderInWindow {
  uuid: string;
  name: string;
  host: string;
  kind: string;
  capacity: Amounts;
  usable: boolean;
}

const WINDOW = `tstzrange(to_timestamp($1 / 1000.0), to_timestamp($2 / 1000.0))`;
const LEASE_COLUMNS = `a.lease_id::text, a.reservation_id::text, a.project_id, l.name AS lease_name, l.status,
  (extract(epoch FROM lower(a.during)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(a.during)) * 1000)::float8 AS end_ms`;

/** The bookings of `hostIds` whose window overlaps [fromMs, toMs), by host then start; at most `limit`. */
export async function hostBookingsInWindow(pool: Pool, window: { fromMs: number; toMs: number; hostIds: string[]; limit: number }): Promise<HostBookingInWindow[]> {
  // `blocks` covers `during` and carries the GiST index of the exclusion constraint: it narrows, `during` decides.
  const { rows } = await pool.query<HostBookingInWindow>(
    `SELECT a.host_id::text, a.shared, ${LEASE_COLUMNS}
     FROM host_allocations a LEFT JOIN leases l ON l.id = a.lease_id AND l.deleted_at IS NULL
     WHERE a.blocks && ${WINDOW} AND a.during && ${WINDOW} AND a.host_id = ANY($3::bigint[])
     ORDER BY a.host_id, lower(a.during), a.id LIMIT $4`,
    [window.fromMs, window.toMs, window.hostIds, window.limit],
  );
  return rows;
}

/** The providers (every kind) and the quantities booked on them over [fromMs, toMs), by provider then start; at most `limit` bookings. */
export async function quantityBookingsInWindow(pool: Pool, window: { fromMs: number; toMs: number; limit: number }): Promise<{ providers: ProviderInWindow[]; bookings: QuantityBookingInWindow[] }> {
  const [providers, bookings] = await Promise.all([
    pool.query<ProviderInWindow>('SELECT uuid, name, host, kind, capacity, usable FROM capacity_providers ORDER BY kind, name'),
    pool.query<QuantityBookingInWindow>(
      `SELECT a.provider_uuid, a.amounts, ${LEASE_COLUMNS}
       FROM quantity_allocations a LEFT JOIN leases l ON l.id = a.lease_id AND l.deleted_at IS NULL
       WHERE a.blocks && ${WINDOW} AND a.during && ${WINDOW}
       ORDER BY a.provider_uuid, lower(a.during), a.id LIMIT $3`,
      [window.fromMs, window.toMs, window.limit],
    ),
  ]);
  return { providers: providers.rows, bookings: bookings.rows };
}
