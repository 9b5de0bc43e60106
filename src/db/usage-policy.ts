/**
 * What the usage policy reads and keeps in PostgreSQL: the per-project rules admins set, and a
 * project's leases over a span (the ledger the check and the usage report count from). Checks of
 * one project take its advisory lock, so that two admissions cannot both take the last of a limit.
 */
import type { PoolClient } from 'pg';
import type { Lease } from '../domain/lease';
import type { Interval, MeteredLease } from '../domain/usage';
import type { Pool } from './pool';

type Queryable = Pool | PoolClient;

/** Serialises the policy checks of one project until the transaction ends. */
export async function lockProjectPolicy(client: PoolClient, projectId: string): Promise<void> {
  await client.query("SELECT pg_advisory_xact_lock(hashtext('leasekeeper:usage-policy'), hashtext($1))", [projectId]);
}

/**
 * The project's leases other than `exceptLeaseId` whose window overlaps `span`: live ones, and
 * deleted ones deleted within it (they are charged for what they used).
 */
export async function projectLeasesWithin(db: Queryable, projectId: string, span: Interval, exceptLeaseId?: string): Promise<MeteredLease[]> {
  const { rows } = await db.query<{ document: Lease; deleted_ms: string | null }>(
    `SELECT document, (extract(epoch FROM deleted_at) * 1000)::bigint::text AS deleted_ms FROM leases
     WHERE project_id = $1 AND ($2::uuid IS NULL OR id <> $2::uuid)
       AND end_at > to_timestamp($3 / 1000.0) AND start_at < to_timestamp($4 / 1000.0)
       AND (deleted_at IS NULL OR deleted_at > to_timestamp($3 / 1000.0))`,
    [projectId, exceptLeaseId ?? null, span.startMs, span.endMs],
  );
  return rows.map((row) => ({ lease: row.document, ...(row.deleted_ms !== null ? { deletedAtMs: Number(row.deleted_ms) } : {}) }));
}

/** How many of the project's leases (other than `exceptLeaseId`) are live and not ended. */
export async function liveLeaseCount(db: Queryable, projectId: string, exceptLeaseId: string): Promise<number> {
  const { rows } = await db.query<{ n: string }>(
    `SELECT count(*)::text AS n FROM leases WHERE project_id = $1 AND id <> $2::uuid AND deleted_at IS NULL AND status NOT IN ('TERMINATED', 'ERROR')`,
    [projectId, exceptLeaseId],
  );
  return Number(rows[0].n);
}

export interface StoredProjectRules {
  rules: Record<string, unknown>;
  updatedAt: string;
  updatedBy: string;
}

export async function projectRules(db: Queryable, projectId: string): Promise<StoredProjectRules | undefined> {
  const { rows } = await db.query<{ rules: Record<string, unknown>; updated_at: Date; updated_by: string }>(
    'SELECT rules, updated_at, updated_by FROM project_policies WHERE project_id = $1',
    [projectId],
  );
  return rows[0] ? { rules: rows[0].rules, updatedAt: rows[0].updated_at.toISOString(), updatedBy: rows[0].updated_by } : undefined;
}

export async function saveProjectRules(db: Queryable, projectId: string, rules: Record<string, unknown>, updatedBy: string): Promise<void> {
  await db.query(
    `INSERT INTO project_policies (project_id, rules, updated_by) VALUES ($1, $2, $3)
     ON CONFLICT (project_id) DO UPDATE SET rules = EXCLUDED.rules, updated_by = EXCLUDED.updated_by, updated_at = now()`,
    [projectId, rules, updatedBy],
  );
}

export async function deleteProjectRules(db: Queryable, projectId: string): Promise<boolean> {
  const { rowCount } = await db.query('DELETE FROM project_policies WHERE project_id = $1', [projectId]);
  return (rowCount ?? 0) > 0;
}
