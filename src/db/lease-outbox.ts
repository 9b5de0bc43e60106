/**
 * The lease outbox (017_lease_outbox.sql): leases the API admitted in its own transaction, each
 * owing its workflow a start until `started_at` is set. Written in the admission's transaction;
 * read by whoever starts workflows (the API right after its commit, and the sweeps of every API
 * and worker, which take rows with SKIP LOCKED so that two never start the same row at once).
 */
import type { PoolClient } from 'pg';
import type { Pool } from './pool';
import { inTransaction } from './transaction';

type Queryable = Pool | PoolClient;

export interface OwedStart<Input> {
  leaseId: string;
  input: Input;
  attempts: number;
}

/** Adds the row of a lease just admitted, in the admission's transaction. */
export async function addOwedStart(client: PoolClient, leaseId: string, requestHash: string, input: unknown): Promise<void> {
  await client.query('INSERT INTO lease_outbox (lease_id, request_hash, input) VALUES ($1, $2, $3)', [leaseId, requestHash, input]);
}

/** The request hash a lease was admitted with by the API, if it was (an Idempotency-Key's retry compares it). */
export async function admittedRequestHash(db: Queryable, leaseId: string): Promise<string | undefined> {
  const { rows } = await db.query<{ request_hash: string }>('SELECT request_hash FROM lease_outbox WHERE lease_id = $1', [leaseId]);
  return rows[0]?.request_hash;
}

/** The start of a lease the API admitted (`started`: once made), whatever became of it since. */
export async function admittedStart<Input>(db: Queryable, leaseId: string): Promise<(OwedStart<Input> & { started: boolean }) | undefined> {
  const { rows } = await db.query<{ lease_id: string; input: Input; attempts: number; started: boolean }>(
    'SELECT lease_id, input, attempts, started_at IS NOT NULL AS started FROM lease_outbox WHERE lease_id = $1',
    [leaseId],
  );
  return rows[0] ? { leaseId: rows[0].lease_id, input: rows[0].input, attempts: rows[0].attempts, started: rows[0].started } : undefined;
}

/**
 * Takes up to `limit` owed starts older than `olderThanMs` (those younger are being started by the
 * API that admitted them), the least tried first (one that keeps failing does not hold up the rest), and runs `start` on each while holding their rows, so that no other
 * sweep takes them meanwhile. `start` answers whether the workflow now exists; a failure is kept
 * on the row (tried again at the next sweep).
 */
export async function sweepOwedStarts<Input>(
  pool: Pool,
  options: { limit: number; olderThanMs: number; concurrency: number },
  start: (owed: OwedStart<Input>) => Promise<{ started: true } | { started: false; error: string }>,
): Promise<{ started: number; failed: number }> {
  // One transaction holds the rows (FOR UPDATE SKIP LOCKED) until each start's outcome is written.
  return inTransaction(pool, async (client) => {
    const { rows } = await client.query<{ lease_id: string; input: Input; attempts: number }>(
      `SELECT lease_id, input, attempts FROM lease_outbox
       WHERE started_at IS NULL AND created_at < now() - make_interval(secs => $1 / 1000.0)
       ORDER BY attempts, created_at LIMIT $2 FOR UPDATE SKIP LOCKED`,
      [options.olderThanMs, options.limit],
    );
    // The starts run a few at a time; their outcomes are written together.
    const results = new Array<Awaited<ReturnType<typeof start>>>(rows.length);
    let next = 0;
    await Promise.all(
      Array.from({ length: Math.min(options.concurrency, rows.length) }, async () => {
        for (let i = next++; i < rows.length; i = next++) results[i] = await start({ leaseId: rows[i].lease_id, input: rows[i].input, attempts: rows[i].attempts });
      }),
    );
    const started = rows.filter((_, i) => results[i].started).map((row) => row.lease_id);
    if (started.length) await client.query('UPDATE lease_outbox SET started_at = now(), attempts = attempts + 1, last_error = NULL WHERE lease_id = ANY($1::uuid[])', [started]);
    for (const [i, row] of rows.entries()) {
      const result = results[i];
      if (!result.started) await client.query('UPDATE lease_outbox SET attempts = attempts + 1, last_error = left($2, 1024) WHERE lease_id = $1', [row.lease_id, result.error]);
    }
    return { started: started.length, failed: rows.length - started.length };
  });
}

/** Marks the leases' workflows started (a second call changes nothing). */
export async function markStarted(db: Queryable, leaseIds: string[]): Promise<void> {
  await db.query('UPDATE lease_outbox SET started_at = now(), attempts = attempts + 1, last_error = NULL WHERE lease_id = ANY($1::uuid[]) AND started_at IS NULL', [leaseIds]);
}

/** How many starts are owed (for /metrics). */
export async function owedStartsCount(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ count: string }>('SELECT count(*) AS count FROM lease_outbox WHERE started_at IS NULL');
  return Number(rows[0]?.count ?? 0);
}
