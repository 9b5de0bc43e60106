import type { PoolClient } from 'pg';
import { withConnection, type Pool } from './pool';

export interface TransactionOptions {
  /** Errors after which the whole transaction runs again (a lost race: it then sees the winner's rows). */
  retryOn?: (err: unknown) => boolean;
  /** At most this many runs (default 20). */
  attempts?: number;
  /**
   * Runs after the first take this advisory lock before anything else, so that the losers of a
   * race run again one at a time, each seeing the one before. Without it, a herd that chose the
   * same first free host lost to one another round after round (40 bookings: 146–180 runs, against
   * 77 with it; test/booking-retries.test.ts).
   */
  retriesOneAtATime?: string;
}

/**
 * Runs `work` in one transaction on one connection: committed if it returns, rolled back if it
 * throws. Retried errors get a random pause that grows with each attempt, so the losers of a race
 * do not collide again at once.
 */
export async function inTransaction<T>(pool: Pool, work: (client: PoolClient) => Promise<T>, options: TransactionOptions = {}): Promise<T> {
  const attempts = options.attempts ?? 20;
  for (let attempt = 1; ; attempt++) {
    const outcome = await withConnection(pool, async (client): Promise<{ done: true; result: T } | { done: false }> => {
      try {
        await client.query('BEGIN');
        if (attempt > 1 && options.retriesOneAtATime !== undefined) {
          await client.query("SELECT pg_advisory_xact_lock(hashtext('leasekeeper:retries'), hashtext($1))", [options.retriesOneAtATime]);
        }
        const result = await work(client);
        await client.query('COMMIT');
        return { done: true, result };
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        if (options.retryOn?.(err) && attempt < attempts) return { done: false };
        throw err;
      }
    });
    if (outcome.done) return outcome.result;
    await new Promise((resolve) => setTimeout(resolve, Math.random() * 20 * attempt));
  }
}

/**
 * Ends the transaction as a lost race (SQLSTATE 40001, serialization_failure): a booking whose
 * reads disagree (the calendar changed between them) runs again on what committed meanwhile, as
 * after a deadlock, instead of answering from a view no single moment had.
 */
export async function runTransactionAgain(client: PoolClient): Promise<never> {
  await client.query("DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = 'serialization_failure', MESSAGE = 'the calendar changed between the reads of one booking: it runs again'; END $$");
  throw new Error('unreachable: the statement above always fails');
}
