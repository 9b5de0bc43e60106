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

async function queryAllocations(pool: Pool, filter: AllocationFilter & { after?: AllocationPosition }, rowLimit: number | undefined) {
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
  const { after } = filter;
  if (after !== undefined) {
    params.push(after.hostId, after.start, after.id);
    const n = params.length;
    where.push(`(a.host_id, lower(a.during), a.id) > ($${n - 2}::bigint, $${n - 1}::timestamptz, $${n}::bigint)`);
  }
  if (rowLimit !== undefined) params.push(rowLimit);
  const { rows } = await pool.query<AllocationEntry & { position_start: string; position_id: string }>(
    `SELECT a.host_id::text, h.hypervisor_hostname, a.reservation_id::text, a.lease_id::text, a.project_id,
            (extract(epoch FROM lower(a.during)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(a.during)) * 1000)::float8 AS end_ms,
            (extract(epoch FROM upper(a.blocks)) * 1000)::float8 AS blocked_until_ms,
            lower(a.during)::text AS position_start, a.id::text AS position_id
     FROM host_allocations a JOIN hosts h ON h.id = a.host_id
     ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
     ORDER BY a.host_id, lower(a.during), a.id
     ${rowLimit !== undefined ? `LIMIT $${params.length}` : ''}`,
    params,
  );
  return rows;
}
