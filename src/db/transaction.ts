import type { PoolClient } from 'pg';
import type { Pool } from './pool';

export interface TransactionOptions {
  /** Errors after which the whole transaction runs again (a lost race: it then sees the winner's rows). */
  retryOn?: (err: unknown) => boolean;
  /** At most this many runs (default 20). */
  attempts?: number;
}

/**
 * Runs `work` in one transaction on one connection: committed if it returns, rolled back if it
 * throws. Retried errors get a random pause that grows with each attempt, so the losers of a race
 * do not collide again at once.
 */
export async function inTransaction<T>(pool: Pool, work: (client: PoolClient) => Promise<T>, options: TransactionOptions = {}): Promise<T> {
  const attempts = options.attempts ?? 20;
  for (let attempt = 1; ; attempt++) {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const result = await work(client);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      if (options.retryOn?.(err) && attempt < attempts) {
        await new Promise((resolve) => setTimeout(resolve, Math.random() * 20 * attempt));
        continue;
      }
      throw err;
    } finally {
      client.release();
    }
  }
}
