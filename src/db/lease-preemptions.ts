/**
 * Preempted leases whose workflow is owed the news (028_lease_preemptions.sql, issue 43). Written
 * by the regular admission that cut the lease's bookings, in its transaction; read by whoever tells
 * workflows (the admitting API right after its commit, and the sweeps of every API and worker).
 */
import type { PoolClient } from 'pg';
import type { Pool } from './pool';
import { inTransaction } from './transaction';

export interface OwedPreemption {
  leaseId: string;
  /** The lease's new end (its bookings end there), and when the host is needed by the other lease. */
  endMs: number;
  neededFromMs: number;
}

/**
 * The lease was cut to end at `endMs`: owed to its workflow. A second cut before the first was told
 * keeps the earlier end (its bookings end there); one after it was told is news of its own (the
 * lease may have moved and booked again since), so its end replaces the told one.
 */
export async function addOwedPreemption(client: PoolClient, preemption: OwedPreemption): Promise<void> {
  await client.query(
    `INSERT INTO lease_preemptions (lease_id, end_at, needed_from) VALUES ($1, to_timestamp($2 / 1000.0), to_timestamp($3 / 1000.0))
     ON CONFLICT (lease_id) DO UPDATE
       SET end_at = CASE WHEN lease_preemptions.told_at IS NULL THEN least(lease_preemptions.end_at, excluded.end_at) ELSE excluded.end_at END,
           needed_from = CASE WHEN lease_preemptions.told_at IS NULL THEN least(lease_preemptions.needed_from, excluded.needed_from) ELSE excluded.needed_from END,
           told_at = NULL, created_at = now()`,
    [preemption.leaseId, preemption.endMs, preemption.neededFromMs],
  );
}

/**
 * Takes up to `limit` owed preemptions (older than `olderThanMs`: younger ones are being told by the
 * API that admitted them), least tried first, and runs `tell` on each while holding their rows
 * (SKIP LOCKED: no other sweep takes them meanwhile). `tell` answers whether the workflow has it;
 * a failure is kept on the row, tried again at the next sweep.
 */
export async function sweepOwedPreemptions(
  pool: Pool,
  options: { limit: number; olderThanMs: number },
  tell: (owed: OwedPreemption) => Promise<{ told: true } | { told: false; error: string }>,
): Promise<{ told: number; failed: number }> {
  return inTransaction(pool, async (client) => {
    const { rows } = await client.query<{ lease_id: string; end_ms: number; needed_ms: number }>(
      `SELECT lease_id::text, (extract(epoch FROM end_at) * 1000)::float8 AS end_ms, (extract(epoch FROM needed_from) * 1000)::float8 AS needed_ms
       FROM lease_preemptions WHERE told_at IS NULL AND created_at <= now() - make_interval(secs => $1 / 1000.0)
       ORDER BY attempts, created_at LIMIT $2 FOR UPDATE SKIP LOCKED`,
      [options.olderThanMs, options.limit],
    );
    let told = 0;
    for (const row of rows) {
      const result = await tell({ leaseId: row.lease_id, endMs: row.end_ms, neededFromMs: row.needed_ms });
      if (result.told) {
        told++;
        await client.query('UPDATE lease_preemptions SET told_at = now(), attempts = attempts + 1, last_error = NULL WHERE lease_id = $1', [row.lease_id]);
      } else {
        await client.query('UPDATE lease_preemptions SET attempts = attempts + 1, last_error = left($2, 1024) WHERE lease_id = $1', [row.lease_id, result.error]);
      }
    }
    return { told, failed: rows.length - told };
  });
}

/** Of these leases, those a regular lease's admission preempted (whatever became of the news). */
export async function preemptedAmong(pool: Pool, leaseIds: string[]): Promise<string[]> {
  if (leaseIds.length === 0) return [];
  const { rows } = await pool.query<{ lease_id: string }>('SELECT lease_id::text FROM lease_preemptions WHERE lease_id = ANY($1::uuid[])', [leaseIds]);
  return rows.map((row) => row.lease_id);
}
