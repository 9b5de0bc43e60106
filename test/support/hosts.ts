/** Hosts for tests: put straight into the inventory or enrolled through the API, and the checks on their bookings. */
import type { Pool } from 'pg';
import type { apiClient } from './stack';

export interface TestHost {
  name: string;
  vcpus?: number;
  memory_mb?: number;
  local_gb?: number;
  /** As the hosts table keeps it: text (none when absent). */
  hypervisor_version?: string;
  capabilities?: Record<string, string>;
}

/** Puts a host straight into the inventory (the os-hosts API does this after asking Nova). */
export async function insertHost(pool: Pool, host: TestHost): Promise<string> {
  const { rows } = await pool.query<{ id: string }>(
    `INSERT INTO hosts (hypervisor_hostname, nova_hypervisor_id, hypervisor_type, vcpus, memory_mb, local_gb, hypervisor_version)
     VALUES ($1, $1, 'fake', $2, $3, $4, $5) RETURNING id::text`,
    [host.name, host.vcpus ?? 8, host.memory_mb ?? 16_384, host.local_gb ?? 100, host.hypervisor_version ?? null],
  );
  for (const [name, value] of Object.entries(host.capabilities ?? {})) {
    await pool.query('INSERT INTO host_capabilities (host_id, name, value) VALUES ($1, $2, $3)', [rows[0].id, name, value]);
  }
  return rows[0].id;
}

/** Enrols the hypervisor `name` through the API (os-hosts, which asks Nova) and gives the host's id. */
export async function enrolHost(api: ReturnType<typeof apiClient>, name: string): Promise<string> {
  const enrolled = await api('POST', '/v1/os-hosts', { name });
  // Thrown rather than expected, so that benchmarks (no jest) enrol with it too.
  if (enrolled.status !== 201) throw new Error(`enrolling ${name}: ${enrolled.status} ${JSON.stringify(enrolled.body)}`);
  return enrolled.body.host.id;
}

/** Pairs of bookings of one host whose blocked ranges overlap: must always be empty. */
export async function doubleBookings(pool: Pool): Promise<Array<{ host_id: string; a: string; b: string }>> {
  const { rows } = await pool.query<{ host_id: string; a: string; b: string }>(
    `SELECT x.host_id::text, x.reservation_id::text AS a, y.reservation_id::text AS b
     FROM host_allocations x JOIN host_allocations y ON x.host_id = y.host_id AND x.id < y.id AND x.blocks && y.blocks AND NOT (x.shared AND y.shared)`,
  );
  return rows;
}

/**
 * Bookings that still block time ahead but belong to no lease holding resources (deleted, ended,
 * failed, or never recorded): must be empty once leases have settled. A host released at a
 * lease's end stays blocked on purpose (an unbounded booking of a TERMINATED lease).
 */
export async function orphanBookings(pool: Pool): Promise<Array<{ reservation_id: string; lease_id: string; status: string | null }>> {
  const { rows } = await pool.query<{ reservation_id: string; lease_id: string; status: string | null }>(
    `SELECT a.reservation_id::text, a.lease_id::text, l.status
     FROM host_allocations a LEFT JOIN leases l ON l.id = a.lease_id AND l.deleted_at IS NULL
     WHERE (upper_inf(a.blocks) OR upper(a.blocks) > now())
       AND (l.id IS NULL OR l.status NOT IN ('PENDING', 'STARTING', 'ACTIVE'))
       AND NOT (upper_inf(a.blocks) AND l.status = 'TERMINATED')`,
  );
  return rows;
}
