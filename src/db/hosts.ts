/**
 * Reservable hosts and their capabilities, as the calendar and the os-hosts API see them: the
 * tables hosts, host_capabilities, capability_settings, and inventory_version (their change counter).
 */
import type { PoolClient } from 'pg';
import { refuseDuplicates, type Pool } from './pool';
import { inTransaction } from './transaction';

/** The hypervisor fields a `hypervisor_properties` query can use. */
export const HYPERVISOR_FIELDS = [
  'hypervisor_hostname', 'hypervisor_type', 'hypervisor_version', 'service_name', 'vcpus', 'memory_mb', 'local_gb', 'cpu_info', 'availability_zone',
] as const;

export interface HostRecord {
  id: string;
  hypervisor_hostname: string;
  nova_hypervisor_id: string;
  hypervisor_type: string | null;
  hypervisor_version: string | null;
  service_name: string | null;
  vcpus: number;
  memory_mb: number;
  local_gb: number;
  cpu_info: string | null;
  availability_zone: string | null;
  reservable: boolean;
  /** What the host monitor last concluded (migration 011): a failed host takes no new bookings. */
  state: HostState;
  state_since: Date | null;
  state_reason: string | null;
  /** The last drift the monitor found (migration 012), and what it did. */
  last_repair: HostRepair | null;
  /** Set when a lease's `release` policy handed the host to the shared cloud. */
  released_at: Date | null;
  released_by_lease: string | null;
  created_at: Date;
  updated_at: Date;
  capabilities: Record<string, string>;
  /** The names among `capabilities` that are private (capability_settings): unknown to non-admins. */
  private_capabilities: string[];
}

type Queryable = Pool | PoolClient;

/**
 * SQL (for a capacity provider aliased `p`) that is true when the provider is on an enrolled host
 * (not released): named by its hypervisor (a compute node's provider) or by its compute host; and
 * when that host is failed. The one definition for the quantity store's failed-host check and the
 * shared hosts the monitor watches (the others it watches as enrolled hosts).
 */
const ENROLLED_HOST_OF_PROVIDER = `h.released_at IS NULL AND (h.hypervisor_hostname = p.name OR COALESCE(h.service_name, h.hypervisor_hostname) = p.host)`;
export const PROVIDER_ON_ENROLLED_HOST_SQL = `EXISTS (SELECT 1 FROM hosts h WHERE ${ENROLLED_HOST_OF_PROVIDER})`;
export const PROVIDER_ON_FAILED_ENROLLED_HOST_SQL = `EXISTS (SELECT 1 FROM hosts h WHERE h.state = 'failed' AND ${ENROLLED_HOST_OF_PROVIDER})`;

export type HostState = 'up' | 'failed';

/** A drift found on a host: where it was, where the calendar wants it, and whether it was moved (LK_DRIFT_REPAIR=report: not). */
export interface HostRepair {
  at: string;
  found: string;
  action: string;
  repaired: boolean;
}

/** The compute host name Nova's services and aggregates use for an enrolled host (its hypervisor name when Nova gave none). */
export function computeHostName(host: { service_name: string | null; hypervisor_hostname: string }): string {
  return host.service_name ?? host.hypervisor_hostname;
}

/** Whether `text` can be a host's id (a positive bigint): anything else is no host, rather than an error of the database. */
export function isHostId(text: string): boolean {
  return /^\d{1,19}$/.test(text) && BigInt(text) <= 9_223_372_036_854_775_807n;
}

/** `reservableOnly`: the hosts new bookings may take (reservable, and not failed). */
export async function listHosts(db: Queryable, filter: { reservableOnly?: boolean; id?: string } = {}): Promise<HostRecord[]> {
  const where: string[] = [];
  const params: unknown[] = [];
  if (filter.reservableOnly) where.push("h.reservable AND h.state = 'up'");
  if (filter.id !== undefined) {
    params.push(filter.id);
    where.push(`h.id = $${params.length}`);
  }
  const { rows } = await db.query<Omit<HostRecord, 'id'> & { id: string }>(
    `SELECT h.id::text AS id, h.hypervisor_hostname, h.nova_hypervisor_id, h.hypervisor_type, h.hypervisor_version, h.service_name,
            h.vcpus, h.memory_mb, h.local_gb, h.cpu_info, h.availability_zone, h.reservable, h.state, h.state_since, h.state_reason, h.last_repair, h.released_at, h.released_by_lease::text, h.created_at, h.updated_at,
            COALESCE(jsonb_object_agg(c.name, c.value) FILTER (WHERE c.name IS NOT NULL), '{}') AS capabilities,
            COALESCE(array_agg(c.name) FILTER (WHERE s.private), '{}') AS private_capabilities
     FROM hosts h LEFT JOIN host_capabilities c ON c.host_id = h.id LEFT JOIN capability_settings s ON s.name = c.name
     ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
     GROUP BY h.id ORDER BY h.id`,
    params,
  );
  return rows;
}

/** Whether a host (reservable or released) has this id; `id` must pass `isHostId`. */
export async function hostExists(db: Queryable, id: string): Promise<boolean> {
  const { rowCount } = await db.query('SELECT 1 FROM hosts WHERE id = $1', [id]);
  return (rowCount ?? 0) > 0;
}

/** The host enrolled under this hypervisor name, if any; `released`: handed to the shared cloud at a lease's end. */
export async function findHostByHypervisor(db: Queryable, hypervisorHostname: string): Promise<{ id: string; released: boolean } | undefined> {
  const { rows } = await db.query<{ id: string; released: boolean }>('SELECT id::text, released_at IS NOT NULL AS released FROM hosts WHERE hypervisor_hostname = $1', [
    hypervisorHostname,
  ]);
  return rows[0];
}

/** What Nova tells of a hypervisor, as a new host's row keeps it. */
export type NewHost = Pick<
  HostRecord,
  'hypervisor_hostname' | 'nova_hypervisor_id' | 'hypervisor_type' | 'hypervisor_version' | 'service_name' | 'vcpus' | 'memory_mb' | 'local_gb' | 'cpu_info' | 'availability_zone'
>;

/**
 * Adds a reservable host with its capabilities, in one transaction; answers its id. `id`: the id it
 * must have (a host brought from Blazar keeps its id; it must pass `isHostId` and be free), the
 * id sequence moved past it. A host enrolled meanwhile under the same name (or id) is AlreadyExists (409).
 */
export async function insertHost(pool: Pool, host: NewHost, capabilities: Record<string, string>, id?: string): Promise<string> {
  const duplicates = {
    hosts_hypervisor_hostname_key: `host ${host.hypervisor_hostname} is already reservable`,
    hosts_pkey: `host id ${id ?? '(new)'} is taken by another host`,
  };
  return refuseDuplicates(() => inTransaction(pool, async (client) => {
    const { rows } = await client.query<{ id: string }>(
      `INSERT INTO hosts (id, hypervisor_hostname, nova_hypervisor_id, hypervisor_type, hypervisor_version, service_name, vcpus, memory_mb, local_gb, cpu_info, availability_zone)
       VALUES (COALESCE($11::bigint, nextval(pg_get_serial_sequence('hosts', 'id'))), $1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id::text`,
      [
        host.hypervisor_hostname, host.nova_hypervisor_id, host.hypervisor_type, host.hypervisor_version, host.service_name,
        host.vcpus, host.memory_mb, host.local_gb, host.cpu_info, host.availability_zone, id ?? null,
      ],
    );
    // Past the given id, never back (nextval spends one number: a gap, not a reused id).
    if (id !== undefined) await client.query(`SELECT setval(pg_get_serial_sequence('hosts', 'id'), GREATEST($1::bigint, nextval(pg_get_serial_sequence('hosts', 'id'))))`, [id]);
    for (const [key, value] of Object.entries(capabilities)) {
      await client.query('INSERT INTO host_capabilities (host_id, name, value) VALUES ($1, $2, $3)', [rows[0].id, key, value]);
    }
    return rows[0].id;
  }), duplicates);
}

/** Sets (adds or replaces) some of a host's capabilities, in one transaction; the others stay. */
export async function setHostCapabilities(pool: Pool, id: string, capabilities: Record<string, string>): Promise<void> {
  await inTransaction(pool, async (client) => {
    for (const [key, value] of Object.entries(capabilities)) {
      await client.query(
        'INSERT INTO host_capabilities (host_id, name, value) VALUES ($1, $2, $3) ON CONFLICT (host_id, name) DO UPDATE SET value = EXCLUDED.value',
        [id, key, value],
      );
    }
    await client.query('UPDATE hosts SET updated_at = now() WHERE id = $1', [id]);
  });
}

/** Removes the host and its capabilities; its bookings must be gone first (host_allocations refers to it). */
export async function deleteHost(db: Queryable, id: string): Promise<void> {
  await db.query('DELETE FROM hosts WHERE id = $1', [id]);
}

/** The names (hypervisor and compute service) of hosts enrolled and not released: whole-host leases' hosts, not shared. */
export async function enrolledHostNames(db: Queryable): Promise<Set<string>> {
  const { rows } = await db.query<{ name: string }>(
    `SELECT hypervisor_hostname AS name FROM hosts WHERE released_at IS NULL UNION SELECT service_name FROM hosts WHERE released_at IS NULL AND service_name IS NOT NULL`,
  );
  return new Set(rows.map((r) => r.name));
}

/** The counter that every change of hosts or capabilities bumps (migration 007), as text; undefined if missing. */
export async function inventoryVersion(db: Queryable): Promise<string | undefined> {
  const { rows } = await db.query<{ version: string }>('SELECT version::text FROM inventory_version');
  return rows[0]?.version;
}

/** Blazar's resource properties: each capability name, whether it is private, and the values hosts give it. */
export async function capabilityProperties(db: Queryable): Promise<Array<{ property: string; private: boolean; values: string[] }>> {
  const { rows } = await db.query<{ property: string; private: boolean; values: string[] }>(
    `SELECT c.name AS property, COALESCE(s.private, false) AS private, array_agg(DISTINCT c.value ORDER BY c.value) AS values
     FROM host_capabilities c LEFT JOIN capability_settings s ON s.name = c.name
     GROUP BY c.name, s.private ORDER BY c.name`,
  );
  return rows;
}

/** Whether some host has a capability of this name. */
export async function capabilityExists(db: Queryable, name: string): Promise<boolean> {
  const { rowCount } = await db.query('SELECT 1 FROM host_capabilities WHERE name = $1 LIMIT 1', [name]);
  return (rowCount ?? 0) > 0;
}

/** The capability names of reservable hosts, public and private (capability_settings): what a non-admin's query may name. */
export async function reservableCapabilityNames(db: Queryable): Promise<{ public: Set<string>; private: Set<string> }> {
  const { rows } = await db.query<{ name: string; private: boolean }>(
    `SELECT DISTINCT c.name, COALESCE(s.private, false) AS private
     FROM host_capabilities c JOIN hosts h ON h.id = c.host_id AND h.reservable LEFT JOIN capability_settings s ON s.name = c.name`,
  );
  return { public: new Set(rows.filter((r) => !r.private).map((r) => r.name)), private: new Set(rows.filter((r) => r.private).map((r) => r.name)) };
}

/** Marks a capability private or public; bumps the inventory version, so that cached host lists are read again. */
export async function setCapabilityPrivate(db: Queryable, name: string, isPrivate: boolean): Promise<void> {
  await db.query(
    `WITH setting AS (
       INSERT INTO capability_settings (name, private) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET private = EXCLUDED.private RETURNING 1
     )
     UPDATE inventory_version SET version = version + 1 WHERE EXISTS (SELECT 1 FROM setting)`,
    [name, isPrivate],
  );
}

/** The values a `hypervisor_properties` query compares against. */
export function hypervisorProperties(host: HostRecord): Record<string, string> {
  return Object.fromEntries(HYPERVISOR_FIELDS.flatMap((field) => (host[field] === null ? [] : [[field, String(host[field])]])));
}

/** A released host made reservable again (its release flags cleared). */
export async function markReservableAgain(db: Queryable, id: string): Promise<void> {
  await db.query('UPDATE hosts SET reservable = true, released_at = NULL, released_by_lease = NULL, updated_at = now() WHERE id = $1', [id]);
}

/** Flags hosts handed to the shared cloud at a lease's end: no longer reservable. */
export async function markReleased(db: Queryable, hostIds: string[], leaseId: string): Promise<void> {
  await db.query(
    `UPDATE hosts SET reservable = false, released_at = COALESCE(released_at, now()), released_by_lease = $2, updated_at = now()
     WHERE id = ANY($1::bigint[])`,
    [hostIds, leaseId],
  );
}

/** An enrolled host as the host monitor watches it: its names in Nova, and what was last concluded. */
export interface MonitoredHost {
  id: string;
  hypervisor_hostname: string;
  /** Nova's compute service host (the name aggregates and services use). */
  service_name: string | null;
  state: HostState;
  /** A maintenance window is in force now (the host may wait in the failed aggregate meanwhile). */
  in_maintenance: boolean;
  /** The window in force disabled the compute service: a disabled service is expected, not a failure. */
  compute_disabled_for_maintenance: boolean;
  /**
   * Its compute service down or disabled is expected, not a failure (issue 48): the host was powered
   * off on purpose (or is being), or a wake of it is awaited and its boot deadline not passed
   * (host_power). Past the deadline, a host not up is failed, whatever its BMC says.
   */
  power_down_expected: boolean;
}

/** Every enrolled host not handed to the shared cloud: those the monitor watches. */
export async function monitoredHosts(db: Queryable): Promise<MonitoredHost[]> {
  const { rows } = await db.query<MonitoredHost>(
    `SELECT h.id::text, h.hypervisor_hostname, h.service_name, h.state, m.id IS NOT NULL AS in_maintenance,
            COALESCE(m.compute_disabled_at IS NOT NULL, false) AS compute_disabled_for_maintenance,
            COALESCE(CASE WHEN p.wake_requested_at IS NOT NULL THEN p.boot_deadline_at > now() ELSE p.power_state = 'off' OR p.powering_off_at IS NOT NULL END, false) AS power_down_expected
     FROM hosts h LEFT JOIN host_maintenance m ON m.host_id = h.id AND m.during @> now() LEFT JOIN host_power p ON p.host_id = h.id
     WHERE h.released_at IS NULL ORDER BY h.id`,
  );
  return rows;
}

/**
 * Locks the host's row until the caller's transaction ends, against every new booking of it: a
 * booking's row (host_allocations, host_maintenance) references the host, and its insert waits for
 * this lock (FOR UPDATE conflicts with the FOR KEY SHARE of the reference's check). A booking
 * inserted before, not yet committed, makes this wait for its commit, so that the caller's next read
 * sees it. The power-off's claim (issue 48) takes it.
 */
export async function lockHostAgainstBookings(client: PoolClient, hostId: string): Promise<boolean> {
  const { rowCount } = await client.query('SELECT 1 FROM hosts WHERE id = $1 FOR UPDATE', [hostId]);
  return (rowCount ?? 0) > 0;
}

/**
 * Records a host's new state, once: a change already recorded (the same state) is left as it was,
 * so that a retried or repeated record keeps the first `state_since`. Answers whether it changed.
 */
export async function recordHostState(db: Queryable, change: { hostId: string; state: HostState; sinceMs: number; reason: string | null }): Promise<boolean> {
  const { rowCount } = await db.query(
    `UPDATE hosts SET state = $2, state_since = to_timestamp($3::float8 / 1000), state_reason = $4, updated_at = now()
     WHERE id = $1 AND state <> $2`,
    [change.hostId, change.state, change.sinceMs, change.reason?.slice(0, 1024) ?? null],
  );
  return (rowCount ?? 0) > 0;
}

/** The reservable hosts that are failed now (hypervisor names, at most 20): why fewer hosts are up than enrolled. */
export async function failedReservableHosts(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>("SELECT hypervisor_hostname AS name FROM hosts WHERE reservable AND state = 'failed' ORDER BY id LIMIT 20");
  return rows.map((r) => r.name);
}

/** Whether new leases may book the host (an operator's switch; a released host stays as its release left it). */
export async function setReservable(db: Queryable, id: string, reservable: boolean): Promise<void> {
  await db.query('UPDATE hosts SET reservable = $2, updated_at = now() WHERE id = $1 AND released_at IS NULL', [id, reservable]);
}

/** Keeps the last drift found on a host (shown by os-hosts as `last_repair`). */
export async function recordHostRepair(db: Queryable, hostId: string, repair: HostRepair): Promise<void> {
  await db.query('UPDATE hosts SET last_repair = $2 WHERE id = $1', [hostId, JSON.stringify(repair)]);
}

/** The capabilities of these hosts (approval rules naming a host class match them); at most 1000 ids are read. */
export async function hostPropertiesOf(db: Queryable, ids: string[]): Promise<Array<Record<string, string>>> {
  if (ids.length === 0) return [];
  const { rows } = await db.query<{ capabilities: Record<string, string> }>(
    `SELECT COALESCE(jsonb_object_agg(c.name, c.value) FILTER (WHERE c.name IS NOT NULL), '{}') AS capabilities
     FROM hosts h LEFT JOIN host_capabilities c ON c.host_id = h.id WHERE h.id::text = ANY($1::text[]) GROUP BY h.id`,
    [ids.slice(0, 1000)],
  );
  return rows.map((r) => r.capabilities);
}
