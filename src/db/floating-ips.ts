/**
 * Floating IP addresses enrolled for reservation (table `floating_ips`, Blazar's floatingips) and
 * their calendar (table `floating_ip_allocations`): one row per address of a reservation over its
 * window `during`, and `blocks`, the window from the provisioning lead on. The exclusion constraint
 * `floating_ip_allocations_no_double_booking` keeps two bookings of one address from overlapping.
 * Instants cross this boundary as epoch milliseconds.
 */
import type { PoolClient } from 'pg';
import type { Pool } from './pool';
import { wholeResourceBookings, type BookingHolder } from './range-bookings';

type Queryable = Pool | PoolClient;

/** The statements the floating IP calendar shares with the host calendar (./range-bookings.ts), on this table. */
export const floatingIpBookings = wholeResourceBookings({
  table: 'floating_ip_allocations',
  resourceColumn: 'floating_ip_id',
  idType: 'uuid',
  resources: 'floating_ips',
  name: 'host(r.floating_ip_address)',
  ownRows: 'true',
});

export interface FloatingIpRecord {
  id: string;
  floating_network_id: string;
  subnet_id: string;
  floating_ip_address: string;
  reservable: boolean;
  created_at: Date;
  updated_at: Date | null;
}

/** The columns of `floating_ips` as FloatingIpRecord, of the table under the alias `f`. */
const COLUMNS = 'f.id::text, f.floating_network_id, f.subnet_id, host(f.floating_ip_address) AS floating_ip_address, f.reservable, f.created_at, f.updated_at';

/** Enrols an address; false when the network already has it enrolled. */
export async function insertFloatingIp(db: Queryable, ip: { id: string; networkId: string; subnetId: string; address: string }): Promise<FloatingIpRecord | undefined> {
  const { rows } = await db.query<FloatingIpRecord>(
    `INSERT INTO floating_ips AS f (id, floating_network_id, subnet_id, floating_ip_address) VALUES ($1, $2, $3, $4)
     ON CONFLICT ON CONSTRAINT floating_ips_one_per_address DO NOTHING RETURNING ${COLUMNS}`,
    [ip.id, ip.networkId, ip.subnetId, ip.address],
  );
  return rows[0];
}

export async function listFloatingIps(db: Queryable, filter: { networkId?: string; reservableOnly?: boolean } = {}): Promise<FloatingIpRecord[]> {
  const { rows } = await db.query<FloatingIpRecord>(
    `SELECT ${COLUMNS} FROM floating_ips f WHERE ($1::text IS NULL OR floating_network_id = $1) AND (NOT $2 OR reservable)
     ORDER BY floating_network_id, floating_ip_address`,
    [filter.networkId ?? null, filter.reservableOnly ?? false],
  );
  return rows;
}

export async function getFloatingIp(db: Queryable, id: string): Promise<FloatingIpRecord | undefined> {
  const { rows } = await db.query<FloatingIpRecord>(`SELECT ${COLUMNS} FROM floating_ips f WHERE f.id = $1`, [id]);
  return rows[0];
}

/**
 * Removes an enrolled address and its past bookings, in one transaction, unless a booking holds it
 * now or later (a lease's, an offer hold's, or one whose lease is not recorded yet): then nothing
 * is removed and the holders are returned.
 */
export async function deleteFloatingIpUnlessBooked(client: PoolClient, id: string): Promise<{ deleted: boolean; heldBy: BookingHolder[] }> {
  await client.query('SELECT 1 FROM floating_ips WHERE id = $1 FOR UPDATE', [id]);
  const heldBy = await floatingIpBookings.holdersOf(client, id);
  if (heldBy.length > 0) return { deleted: false, heldBy };
  await floatingIpBookings.deleteResource(client, id);
  const { rowCount } = await client.query('DELETE FROM floating_ips WHERE id = $1', [id]);
  return { deleted: (rowCount ?? 0) > 0, heldBy: [] };
}

/** The addresses a reservation's booking holds. */
export async function floatingIpsOfReservation(db: Queryable, reservationId: string): Promise<FloatingIpRecord[]> {
  const { rows } = await db.query<FloatingIpRecord>(
    `SELECT ${COLUMNS}
     FROM floating_ip_allocations a JOIN floating_ips f ON f.id = a.floating_ip_id WHERE a.reservation_id = $1 ORDER BY f.floating_ip_address`,
    [reservationId],
  );
  return rows;
}

/** Frees some addresses of a reservation (an active lease shrinking). */
export async function deleteFloatingIpBookings(client: PoolClient, reservationId: string, floatingIpIds: string[]): Promise<void> {
  await client.query('DELETE FROM floating_ip_allocations WHERE reservation_id = $1 AND floating_ip_id = ANY($2::uuid[])', [reservationId, floatingIpIds]);
}

/** Blazar's floating IP allocations: per enrolled address, the reservations holding it from now on (optionally of one lease or reservation). */
export interface FloatingIpAllocationRow {
  floating_ip_id: string;
  reservation_id: string;
  lease_id: string;
  project_id: string;
  lease_name: string;
  start_ms: number;
  end_ms: number;
}

export async function floatingIpAllocations(
  db: Queryable,
  filter: { leaseId?: string; reservationId?: string; floatingIpId?: string; projectId?: string },
): Promise<FloatingIpAllocationRow[]> {
  const { rows } = await db.query<FloatingIpAllocationRow>(
    `SELECT a.floating_ip_id::text, a.reservation_id::text, a.lease_id::text, a.project_id, l.document->>'name' AS lease_name,
            (extract(epoch FROM lower(a.during)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(a.during)) * 1000)::float8 AS end_ms
     FROM floating_ip_allocations a JOIN leases l ON l.id = a.lease_id
     WHERE upper(a.during) > now() AND l.deleted_at IS NULL
       AND ($1::uuid IS NULL OR a.lease_id = $1) AND ($2::uuid IS NULL OR a.reservation_id = $2)
       AND ($3::uuid IS NULL OR a.floating_ip_id = $3) AND ($4::text IS NULL OR a.project_id = $4)
     ORDER BY lower(a.during), a.id LIMIT 10000`,
    [filter.leaseId ?? null, filter.reservationId ?? null, filter.floatingIpId ?? null, filter.projectId ?? null],
  );
  return rows;
}
