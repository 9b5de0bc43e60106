/**
 * How the activities' wrapper (activities/index.ts) classifies failures: values PostgreSQL refuses
 * are final (an invalid lease, 400), an outage stays retryable, and a record of a lease's state that
 * keeps failing for any other reason gives up after a bounded number of attempts, so that no
 * workflow step retries for ever while it holds the lease's lock.
 */
import { randomUUID } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import type { Pool } from 'pg';
import { createActivities } from '../activities';
import { newLease, type Lease } from '../src/domain/lease';
import { pluginRegistry } from '../src/domain/resource-plugin';
import { useMigratedTestDatabase } from '../dev-stack/db';

function lease(name: string): Lease {
  const now = Date.now();
  return newLease({ id: randomUUID(), name, projectId: 'p', userId: 'u', start: now + 3_600_000, end: now + 7_200_000, reservations: [], requestedMs: now });
}

async function failureOf(attempt: number, run: () => Promise<unknown>): Promise<unknown> {
  return new MockActivityEnvironment({ attempt }).run(run).then(
    () => undefined,
    (err: unknown) => err,
  );
}

describe('activity failures: final, retryable, or bounded', () => {
  const database = useMigratedTestDatabase();

  it('makes values PostgreSQL refuses (NUL, a lone surrogate) a final invalid lease, with no SQL in the message', async () => {
    const activities = createActivities({ pool: database().pool, plugins: pluginRegistry([]) });
    const recordLease = (l: Lease) => activities.recordLease(l);
    for (const name of ['z\u0000', '\udc00']) {
      const failure = await failureOf(1, () => recordLease(lease(name)));
      expect(failure).toBeInstanceOf(ApplicationFailure);
      const { type, nonRetryable, message } = failure as ApplicationFailure;
      expect({ name, type, nonRetryable, message }).toEqual({
        name,
        type: 'InvalidLease',
        nonRetryable: true,
        message: expect.stringMatching(/^the database refused a value: a (text contains a character that cannot be stored \(NUL or invalid Unicode\)|value has the wrong form \(invalid text, number or JSON\))$/),
      });
    }
    // A storable lease still is.
    await expect(failureOf(1, () => recordLease(lease('fine')))).resolves.toBeUndefined();
  });

  it("refuses for good to record a lease that was deleted (a deleted lease's Idempotency-Key reused during a database outage)", async () => {
    const activities = createActivities({ pool: database().pool, plugins: pluginRegistry([]) });
    const gone = { ...lease('gone'), id: randomUUID() };
    await activities.recordLease(gone);
    await activities.recordLeaseDeleted({ ...gone, version: gone.version + 1 });
    // The same id admitted again by a new workflow: its first record must not pass silently (no row, bookings orphaned).
    const failure = await failureOf(1, () => activities.recordLease({ ...gone, version: 1 }));
    expect(failure).toBeInstanceOf(ApplicationFailure);
    expect({ type: (failure as ApplicationFailure).type, nonRetryable: (failure as ApplicationFailure).nonRetryable }).toEqual({ type: 'LeaseDeleted', nonRetryable: true });
    // A stale retry of a live lease's record still changes nothing, quietly.
    const live = { ...lease('live'), id: randomUUID(), version: 2 };
    await activities.recordLease(live);
    await expect(failureOf(1, () => activities.recordLease({ ...live, version: 1 }))).resolves.toBeUndefined();
  });

  it('gives up a record that keeps failing for another reason than an outage after 10 attempts; an outage stays retryable', async () => {
    const broken = { query: () => Promise.reject(Object.assign(new Error('column "nope" does not exist'), { code: '42703', severity: 'ERROR' })) } as unknown as Pool;
    const activities = createActivities({ pool: broken, plugins: pluginRegistry([]) });
    const recordLease = (l: Lease) => activities.recordLease(l);
    const early = await failureOf(9, () => recordLease(lease('x')));
    expect(early).not.toBeInstanceOf(ApplicationFailure); // left to the workflow's retry policy
    expect((early as Error).message).toBe('column "nope" does not exist');
    const late = await failureOf(10, () => recordLease(lease('x')));
    expect(late).toBeInstanceOf(ApplicationFailure);
    expect({ type: (late as ApplicationFailure).type, nonRetryable: (late as ApplicationFailure).nonRetryable }).toEqual({ type: 'RecordFailed', nonRetryable: true });

    const down = { query: () => Promise.reject(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })) } as unknown as Pool;
    const outage = await failureOf(50, () => createActivities({ pool: down, plugins: pluginRegistry([]) }).recordLease(lease('x')));
    expect(outage).toBeInstanceOf(ApplicationFailure);
    expect({ type: (outage as ApplicationFailure).type, nonRetryable: (outage as ApplicationFailure).nonRetryable, message: (outage as ApplicationFailure).message }).toEqual({
      type: 'DatabaseUnavailable',
      nonRetryable: false,
      message: 'the database is unavailable: try again shortly',
    });
  });
});
