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

/** Where a batch of the list ended: its last lease's (created_at, id), created_at as PostgreSQL's text (exact to the microsecond). */
interface LeaseListPosition {
  createdAt: string;
  id: string;
}

export async function findLease(pool: Pool, id: string): Promise<Lease | undefined> {
  const { rows } = await pool.query<{ document: Lease }>('SELECT document FROM leases WHERE id = $1 AND deleted_at IS NULL', [id]);
  return rows[0]?.document;
}

/** Whether the lease was deleted (its row stays, marked): an Idempotency-Key must not bring it back. */
export async function isLeaseDeleted(pool: Pool, id: string): Promise<boolean> {
  const { rowCount } = await pool.query('SELECT 1 FROM leases WHERE id = $1 AND deleted_at IS NOT NULL', [id]);
  return (rowCount ?? 0) > 0;
}

/** Oldest first, paged by (created_at, id). Returns one lease more than `limit` when there are more. */
export async function listLeases(pool: Pool, filter: LeaseFilter): Promise<Lease[]> {
  const rows = await queryLeases(pool, filter, filter.limit === undefined ? undefined : filter.limit + 1);
  return rows.map((row) => row.document);
}

/**
 * Every lease the filter matches (its `limit` aside), oldest first, in batches of at most
 * `batchSize`. Each batch is one query resuming after the previous batch's last lease (keyset on
 * (created_at, id), served by the created_at indexes): memory holds one batch whatever the count,
 * and no connection is held between batches, so a slow reader ties up none of the pool. Like
 * paging by marker it is not one snapshot: leases created meanwhile come last.
 */
export async function* leaseBatches(pool: Pool, filter: Omit<LeaseFilter, 'limit'>, batchSize: number): AsyncGenerator<Lease[]> {
  let after: LeaseListPosition | undefined;
  // Ends: every batch starts strictly after the previous one, and a short batch is the last.
  for (;;) {
    const rows = await queryLeases(pool, after ? { ...filter, marker: undefined, after } : filter, batchSize);
    if (rows.length > 0) yield rows.map((row) => row.document);
    if (rows.length < batchSize) return;
    const last = rows[rows.length - 1];
    after = { createdAt: last.position_created_at, id: last.position_id };
  }
}

async function queryLeases(pool: Pool, filter: LeaseFilter & { after?: LeaseListPosition }, rowLimit: number | undefined) {
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
  if (filter.after !== undefined) where.push(`(created_at, id) > (${param(filter.after.createdAt)}::timestamptz, ${param(filter.after.id)}::uuid)`);
  const limit = rowLimit !== undefined ? `LIMIT ${param(rowLimit)}` : '';
  // Aliases unlike the columns: ORDER BY a name would take the output column (text) over the table's.
  const { rows } = await pool.query<{ document: Lease; position_created_at: string; position_id: string }>(
    `SELECT document, created_at::text AS position_created_at, id::text AS position_id FROM leases WHERE ${where.join(' AND ')} ORDER BY created_at, id ${limit}`,
    params,
  );
  return rows;
}
