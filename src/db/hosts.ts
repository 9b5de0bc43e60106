/** Reservable hosts and their capabilities, as the calendar and the os-hosts API see them. */
import type { PoolClient } from 'pg';
import type { Pool } from './pool';

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

/** Whether `text` can be a host's id (a positive bigint): anything else is no host, rather than an error of the database. */
export function isHostId(text: string): boolean {
  return /^\d{1,19}$/.test(text) && BigInt(text) <= 9_223_372_036_854_775_807n;
}

export async function listHosts(db: Queryable, filter: { reservableOnly?: boolean; id?: string } = {}): Promise<HostRecord[]> {
  const where: string[] = [];
  const params: unknown[] = [];
  if (filter.reservableOnly) where.push('h.reservable');
  if (filter.id !== undefined) {
    params.push(filter.id);
    where.push(`h.id = $${params.length}`);
  }
  const { rows } = await db.query<Omit<HostRecord, 'id'> & { id: string }>(
    `SELECT h.id::text AS id, h.hypervisor_hostname, h.nova_hypervisor_id, h.hypervisor_type, h.hypervisor_version, h.service_name,
            h.vcpus, h.memory_mb, h.local_gb, h.cpu_info, h.availability_zone, h.reservable, h.released_at, h.released_by_lease::text, h.created_at, h.updated_at,
            COALESCE(jsonb_object_agg(c.name, c.value) FILTER (WHERE c.name IS NOT NULL), '{}') AS capabilities,
            COALESCE(array_agg(c.name) FILTER (WHERE s.private), '{}') AS private_capabilities
     FROM hosts h LEFT JOIN host_capabilities c ON c.host_id = h.id LEFT JOIN capability_settings s ON s.name = c.name
     ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
     GROUP BY h.id ORDER BY h.id`,
    params,
  );
  return rows;
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

/** Flags hosts handed to the shared cloud at a lease's end: no longer reservable. */
export async function markReleased(db: Queryable, hostIds: string[], leaseId: string): Promise<void> {
  await db.query(
    `UPDATE hosts SET reservable = false, released_at = COALESCE(released_at, now()), released_by_lease = $2, updated_at = now()
     WHERE id = ANY($1::bigint[])`,
    [hostIds, leaseId],
  );
}
