/**
 * Hosts' last boots (host_boots, migration 042): the one store of that table. The power planner
 * records a boot once it sees a woken host's compute service up; a host's boot time is learned
 * from its last `keep` boots (learnedBootMs in src/domain/power-plan.ts).
 */
import type { PoolClient } from 'pg';
import type { Pool } from './pool';

type Queryable = Pool | PoolClient;

/** Records the boot woken at `wokenAtMs` and up at `upAtMs` (again: nothing), and keeps only the host's last `keep` boots. */
export async function recordBoot(db: Queryable, hostId: string, wokenAtMs: number, upAtMs: number, keep: number): Promise<void> {
  await db.query(
    `INSERT INTO host_boots (host_id, woken_at, up_at) VALUES ($1, to_timestamp($2::float8 / 1000), to_timestamp($3::float8 / 1000))
     ON CONFLICT (host_id, woken_at) DO NOTHING`,
    [hostId, wokenAtMs, Math.max(upAtMs, wokenAtMs)],
  );
  await db.query(
    `DELETE FROM host_boots WHERE host_id = $1 AND woken_at NOT IN (SELECT woken_at FROM host_boots WHERE host_id = $1 ORDER BY woken_at DESC LIMIT $2)`,
    [hostId, keep],
  );
}

/** Each host's boot durations (ms), the last `keep` (newest first), by host id; hosts without boots are absent. */
export async function bootDurations(db: Queryable, hostIds: readonly string[], keep: number): Promise<Map<string, number[]>> {
  const { rows } = await db.query<{ host_id: string; boot_ms: number }>(
    `SELECT host_id::text, boot_ms FROM (
       SELECT host_id, (extract(epoch FROM up_at - woken_at) * 1000)::float8 AS boot_ms,
              row_number() OVER (PARTITION BY host_id ORDER BY woken_at DESC) AS n
       FROM host_boots WHERE host_id = ANY($1::bigint[])
     ) b WHERE n <= $2 ORDER BY host_id, n`,
    [hostIds, keep],
  );
  const boots = new Map<string, number[]>();
  for (const row of rows) boots.set(row.host_id, [...(boots.get(row.host_id) ?? []), row.boot_ms]);
  return boots;
}
