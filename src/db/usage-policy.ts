/**
 * What the usage policy keeps in PostgreSQL: the per-project rules admins set (table
 * project_policies). Checks of one project take its advisory lock, so that two admissions cannot
 * both take the last of a limit; the project's leases they count are read from the leases store.
 */
import type { PoolClient } from 'pg';
import type { Pool } from './pool';

type Queryable = Pool | PoolClient;

/** Serialises the policy checks of one project until the transaction ends. */
export async function lockProjectPolicy(client: PoolClient, projectId: string): Promise<void> {
  await client.query("SELECT pg_advisory_xact_lock(hashtext('leasekeeper:usage-policy'), hashtext($1))", [projectId]);
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
