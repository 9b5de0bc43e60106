/**
 * The instance-slot calendar's rows: a `virtual:instance` reservation books one row per slot in
 * `quantity_allocations` (on the host's compute provider, the slot's VCPU / MEMORY_MB / DISK_GB) and
 * one `shared` row per host in `host_allocations` (which keeps whole-host leases off the host,
 * cleaning gap included). An active reservation that changes ends its rows now and books anew from
 * now: the rows live at an instant are the reservation's slots then.
 */
import type { PoolClient } from 'pg';
import type { Pool } from './pool';

type Queryable = Pool | PoolClient;

/** The reservation's slots on one host at an instant. */
export interface LiveSlots {
  /** The enrolled host (its id in `hosts`), and Nova's compute service host for it. */
  hostId: string;
  computeHost: string;
  providerUuid: string;
  /** The provider's name: the hypervisor host name. */
  name: string;
  /** Nova's compute service host. */
  host: string;
  slots: number;
  bookingKey: string;
}

/** The reservation's slots live at `atMs` (those whose window ends after it), per host, by name. */
export async function liveSlots(db: Queryable, reservationId: string, atMs: number): Promise<LiveSlots[]> {
  const { rows } = await db.query<LiveSlots>(
    `SELECT h.id::text AS "hostId", COALESCE(h.service_name, p.host) AS "computeHost", a.provider_uuid AS "providerUuid", p.name, p.host,
            count(*)::int AS slots, min(a.booking_key) AS "bookingKey"
     FROM quantity_allocations a JOIN capacity_providers p ON p.uuid = a.provider_uuid JOIN hosts h ON h.hypervisor_hostname = p.name
     WHERE a.reservation_id = $1 AND upper(a.during) > to_timestamp($2 / 1000.0)
     GROUP BY h.id, a.provider_uuid, p.name, p.host ORDER BY p.name`,
    [reservationId, atMs],
  );
  return rows;
}

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

/** Every host the reservation ever had slots on (an end cleans them all), by name. */
export async function slotHostsEver(db: Queryable, reservationId: string): Promise<Array<{ providerUuid: string; name: string; host: string }>> {
  const { rows } = await db.query<{ providerUuid: string; name: string; host: string }>(
    `SELECT DISTINCT a.provider_uuid AS "providerUuid", p.name, p.host
     FROM quantity_allocations a JOIN capacity_providers p ON p.uuid = a.provider_uuid WHERE a.reservation_id = $1 ORDER BY p.name`,
    [reservationId],
  );
  return rows;
}

/** The reservations of `resourceType` whose leases are ACTIVE (not starting, changing or ending): those whose slots must be in Nova and Placement now. */
export async function activeReservationsOfType(db: Queryable, resourceType: string): Promise<Array<{ reservationId: string; leaseId: string; projectId: string }>> {
  const { rows } = await db.query<{ reservationId: string; leaseId: string; projectId: string }>(
    `SELECT r->>'id' AS "reservationId", l.id::text AS "leaseId", l.project_id AS "projectId"
     FROM leases l CROSS JOIN LATERAL jsonb_array_elements(l.document->'reservations') r
     WHERE l.status = 'ACTIVE' AND l.deleted_at IS NULL AND r->>'resource_type' = $1
     ORDER BY 1`,
    [resourceType],
  );
  return rows;
}
