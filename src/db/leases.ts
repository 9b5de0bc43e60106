/** The API's reads of the leases table (the lease workflows are its only writers). */
import type { Lease, LeaseStatus } from '../domain/lease';
import type { Pool } from './pool';

export interface LeaseFilter {
  /** Only this project's leases (non-admins always get their own project). */
  projectId?: string;
  status?: LeaseStatus;
  name?: string;
  /** Leases whose window overlaps [from, to]. */
  from?: number;
  to?: number;
  /** The id of the last lease of the previous page. */
  marker?: string;
  limit?: number;
}

export async function findLease(pool: Pool, id: string): Promise<Lease | undefined> {
  const { rows } = await pool.query<{ document: Lease }>('SELECT document FROM leases WHERE id = $1 AND deleted_at IS NULL', [id]);
  return rows[0]?.document;
}

/** Oldest first, paged by (created_at, id). Returns one lease more than `limit` when there are more. */
export async function listLeases(pool: Pool, filter: LeaseFilter): Promise<Lease[]> {
  const where = ['deleted_at IS NULL'];
  const params: unknown[] = [];
  const param = (value: unknown) => {
    params.push(value);
    return `$${params.length}`;
  };
  if (filter.projectId !== undefined) where.push(`project_id = ${param(filter.projectId)}`);
  if (filter.status !== undefined) where.push(`status = ${param(filter.status)}`);
  if (filter.name !== undefined) where.push(`name = ${param(filter.name)}`);
  if (filter.from !== undefined || filter.to !== undefined) {
    // The same expression as the leases_live_window index; a missing bound is open.
    const bound = (ms: number | undefined) => (ms === undefined ? 'NULL' : `to_timestamp(${param(ms)} / 1000.0)`);
    where.push(`tstzrange(start_at, end_at, '[]') && tstzrange(${bound(filter.from)}, ${bound(filter.to)}, '[]')`);
  }
  if (filter.marker !== undefined) {
    where.push(`(created_at, id) > (SELECT created_at, id FROM leases WHERE id = ${param(filter.marker)})`);
  }
  const limit = filter.limit !== undefined ? `LIMIT ${param(filter.limit + 1)}` : '';
  const { rows } = await pool.query<{ document: Lease }>(
    `SELECT document FROM leases WHERE ${where.join(' AND ')} ORDER BY created_at, id ${limit}`,
    params,
  );
  return rows.map((row) => row.document);
}
