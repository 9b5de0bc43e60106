/** Reads of the host calendar for the allocations and availability APIs. */
import type { Pool } from './pool';

export interface AllocationEntry {
  host_id: string;
  hypervisor_hostname: string;
  reservation_id: string;
  lease_id: string;
  project_id: string;
  start_ms: number;
  end_ms: number;
  blocked_until_ms: number;
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

export async function listAllocations(pool: Pool, filter: AllocationFilter): Promise<AllocationEntry[]> {
  const where: string[] = [];
  const params: unknown[] = [];
  const add = (sql: (p: string) => string, value: unknown) => {
    params.push(value);
    where.push(sql(`$${params.length}`));
  };
  if (filter.hostId !== undefined) add((p) => `a.host_id = ${p}::bigint`, filter.hostId);
  if (filter.leaseId !== undefined) add((p) => `a.lease_id = ${p}::uuid`, filter.leaseId);
  if (filter.reservationId !== undefined) add((p) => `a.reservation_id = ${p}::uuid`, filter.reservationId);
  if (filter.projectId !== undefined) add((p) => `a.project_id = ${p}`, filter.projectId);
  if (filter.from !== undefined) add((p) => `upper(a.during) > to_timestamp(${p} / 1000.0)`, filter.from);
  if (filter.to !== undefined) add((p) => `lower(a.during) < to_timestamp(${p} / 1000.0)`, filter.to);
  const { rows } = await pool.query<AllocationEntry>(
    `SELECT a.host_id::text, h.hypervisor_hostname, a.reservation_id::text, a.lease_id::text, a.project_id,
            (extract(epoch FROM lower(a.during)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(a.during)) * 1000)::float8 AS end_ms,
            (extract(epoch FROM upper(a.blocks)) * 1000)::float8 AS blocked_until_ms
     FROM host_allocations a JOIN hosts h ON h.id = a.host_id
     ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
     ORDER BY a.host_id, lower(a.during)`,
    params,
  );
  return rows;
}
