/**
 * Telling preempted leases (issue 43) against the real PostgreSQL, Temporal faked: an admission
 * tells only the leases it cut (nothing, not even a query, when it cut none); the sweeps claim and
 * commit before telling (no row lock held across the Temporal call), back off a failing row, never
 * giving it up until its lease is gone or past its end; a row is marked told only for the cut sent;
 * told rows long past their end are purged.
 */
import { randomUUID } from 'node:crypto';
import type { Client } from '@temporalio/client';
import type { Logger } from 'pino';
import { LeaseOutbox } from '../src/outbox';
import { addOwedPreemption } from '../src/db/lease-preemptions';
import { EVENT_TYPES, type Lease } from '../src/domain/lease';
import { insertLeaseRows } from '../dev-stack/fixtures/lease-rows';
import { withConnection, type Pool } from '../src/db/pool';
import { useMigratedTestDatabase } from '../dev-stack/db';

const H = 3_600_000;
const T0 = Date.UTC(2099, 5, 1);
const quiet = { info: () => undefined, warn: () => undefined } as unknown as Logger;

interface Signalled {
  leaseId: string;
  endMs: number;
  sequence?: number;
  /** Whether another connection could lock the lease's row while it was being told. */
  rowFree: boolean;
}

/** A Temporal client whose signals are recorded (or fail, or run `during` first). */
function fakeTemporal(pool: Pool, behaviour: { fail?: boolean; during?: (leaseId: string) => Promise<void> } = {}) {
  const signalled: Signalled[] = [];
  const client = {
    workflow: {
      getHandle: (workflowId: string) => ({
        signal: async (_signal: unknown, args: { endMs: number; sequence?: number }) => {
          const leaseId = workflowId.replace(/^lease-/, '');
          let rowFree = true;
          await pool.query('SELECT 1 FROM lease_preemptions WHERE lease_id = $1 FOR UPDATE NOWAIT', [leaseId]).catch(() => (rowFree = false));
          await behaviour.during?.(leaseId);
          signalled.push({ leaseId, endMs: args.endMs, sequence: args.sequence, rowFree });
          if (behaviour.fail) throw new Error('Temporal said no');
        },
      }),
    },
  } as unknown as Client;
  return { client, signalled };
}

/** A running lease's row, ending at `endMs` (what the outbox reads of it). */
function leaseRow(id: string, endMs: number): Lease {
  const now = Date.now();
  return {
    id,
    name: `lent-${id.slice(0, 8)}`,
    projectId: 'project-a',
    userId: 'alice',
    startMs: now - H,
    endMs,
    status: 'ACTIVE',
    reservations: [],
    events: EVENT_TYPES.map((type) => ({ id: `${id}:${type}`, event_type: type, time: 0, status: 'UNDONE' as const })),
    createdMs: now,
    updatedMs: now,
    version: 1,
  };
}

describe('telling preempted leases', () => {
  const database = useMigratedTestDatabase();
  const outboxWith = (client: Client, pool: Pool = database().pool) => new LeaseOutbox({ pool, client, taskQueue: 'unused', log: quiet, sweepMs: 60_000, graceMs: 0 });
  const owe = (leaseId: string, endMs: number) => withConnection(database().pool, (client) => addOwedPreemption(client, { leaseId, endMs, neededFromMs: endMs }));
  const rowOf = async (leaseId: string) =>
    (await database().pool.query<{ told: boolean; attempts: number; end_ms: number; due: boolean; last_error: string | null }>(
      'SELECT told_at IS NOT NULL AS told, attempts, (extract(epoch FROM end_at) * 1000)::float8 AS end_ms, next_attempt_at <= now() AS due, last_error FROM lease_preemptions WHERE lease_id = $1',
      [leaseId],
    )).rows[0];

  beforeEach(async () => {
    await database().pool.query('TRUNCATE lease_preemptions, lease_outbox');
  });

  it('an admission that cut nothing asks nothing of the database', async () => {
    const query = jest.fn();
    const connect = jest.fn();
    const outbox = outboxWith(fakeTemporal(database().pool).client, { query, connect } as unknown as Pool);
    outbox.tellPreemptedSoon([]);
    await outbox.stop();
    expect({ queries: query.mock.calls.length, connections: connect.mock.calls.length }).toEqual({ queries: 0, connections: 0 });
  });

  it('an admission tells the leases it cut, only', async () => {
    const [cut, other] = [randomUUID(), randomUUID()];
    await owe(cut, T0 + H);
    await owe(other, T0 + 2 * H);
    const { client, signalled } = fakeTemporal(database().pool);
    const outbox = outboxWith(client);
    outbox.tellPreemptedSoon([cut]);
    await outbox.stop();
    expect(signalled.map((s) => [s.leaseId, s.endMs])).toEqual([[cut, T0 + H]]);
    expect((await rowOf(cut)).told).toBe(true);
    expect((await rowOf(other)).told).toBe(false);
  });

  it('leases cut while the admission path is telling others are told right after, not left to the sweeps', async () => {
    const [first, meanwhile] = [randomUUID(), randomUUID()];
    await owe(first, T0 + H);
    await owe(meanwhile, T0 + 2 * H);
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let firstTelling!: () => void;
    const telling = new Promise<void>((resolve) => (firstTelling = resolve));
    const { client, signalled } = fakeTemporal(database().pool, {
      during: async (leaseId) => {
        if (leaseId !== first) return;
        firstTelling();
        await held;
      },
    });
    const outbox = outboxWith(client);
    outbox.tellPreemptedSoon([first]);
    await telling;
    outbox.tellPreemptedSoon([meanwhile]);
    release();
    await outbox.stop();
    expect(signalled.map((s) => s.leaseId)).toEqual([first, meanwhile]);
    expect((await rowOf(meanwhile)).told).toBe(true);
  });

  it('a sweep holds no row lock while telling, and marks the row told', async () => {
    const leaseId = randomUUID();
    await owe(leaseId, T0 + H);
    const { client, signalled } = fakeTemporal(database().pool);
    await outboxWith(client).sweep();
    expect(signalled).toEqual([{ leaseId, endMs: T0 + H, sequence: expect.any(Number), rowFree: true }]);
    expect(await rowOf(leaseId)).toMatchObject({ told: true, attempts: 1, last_error: null });
  });

  it('a failing row waits for its next try, later each time up to the longest, never given up while its lease may run; done once the lease\'s end passed', async () => {
    const leaseId = randomUUID();
    await insertLeaseRows(database().pool, [leaseRow(leaseId, T0 + 2 * H)]);
    await owe(leaseId, T0 + H);
    const { client, signalled } = fakeTemporal(database().pool, { fail: true });
    const outbox = outboxWith(client);
    await outbox.sweep();
    expect(await rowOf(leaseId)).toMatchObject({ told: false, attempts: 1, due: false, last_error: 'Temporal said no' });
    await outbox.sweep(); // not due yet: not tried
    expect(signalled).toHaveLength(1);
    const delays = async () =>
      (await database().pool.query<{ ms: number }>('SELECT (extract(epoch FROM next_attempt_at - now()) * 1000)::float8 AS ms FROM lease_preemptions WHERE lease_id = $1', [leaseId])).rows[0].ms;
    const first = await delays();
    await database().pool.query('UPDATE lease_preemptions SET next_attempt_at = now() WHERE lease_id = $1', [leaseId]);
    await outbox.sweep();
    expect(signalled).toHaveLength(2);
    expect(await delays()).toBeGreaterThan(first);
    // Many tries later (the old cap was 50): still tried, at the longest backoff (ten minutes).
    await database().pool.query('UPDATE lease_preemptions SET next_attempt_at = now(), attempts = 500 WHERE lease_id = $1', [leaseId]);
    await outbox.sweep();
    expect(signalled).toHaveLength(3);
    expect(await rowOf(leaseId)).toMatchObject({ told: false, last_error: 'Temporal said no' });
    expect(await delays()).toBeGreaterThan(9 * 60_000);
    expect(await delays()).toBeLessThanOrEqual(10 * 60_000);
    // The lease's end has passed: nothing left to cut, the row is done (and purged in its time).
    await database().pool.query("UPDATE leases SET end_at = now() - interval '1 minute' WHERE id = $1", [leaseId]);
    await database().pool.query('UPDATE lease_preemptions SET next_attempt_at = now() WHERE lease_id = $1', [leaseId]);
    await outbox.sweep();
    expect(signalled).toHaveLength(4);
    expect((await rowOf(leaseId)).told).toBe(true);
  });

  it('a cut while the row is being told keeps it owed, with the new end told next', async () => {
    const leaseId = randomUUID();
    await owe(leaseId, T0 + 2 * H);
    const { client, signalled } = fakeTemporal(database().pool, { during: async () => (signalled.length === 0 ? owe(leaseId, T0 + H) : undefined) });
    const outbox = outboxWith(client);
    await outbox.sweep();
    expect(await rowOf(leaseId)).toMatchObject({ told: false, end_ms: T0 + H });
    await outbox.sweep();
    expect(signalled.map((s) => s.endMs)).toEqual([T0 + 2 * H, T0 + H]);
    expect((await rowOf(leaseId)).told).toBe(true);
  });

  it('a second cut while the first is being told replaces it, even with the same or a later end, and is told next with a later sequence', async () => {
    const leaseId = randomUUID();
    await owe(leaseId, T0 + H);
    const { client, signalled } = fakeTemporal(database().pool, { during: async () => (signalled.length === 0 ? owe(leaseId, T0 + 2 * H) : undefined) });
    const outbox = outboxWith(client);
    await outbox.sweep();
    expect(await rowOf(leaseId)).toMatchObject({ told: false, end_ms: T0 + 2 * H });
    await outbox.sweep();
    expect(signalled.map((s) => s.endMs)).toEqual([T0 + H, T0 + 2 * H]);
    expect(signalled[1].sequence).toBeGreaterThan(signalled[0].sequence!);
    expect((await rowOf(leaseId)).told).toBe(true);
  });

  it("a new row's sequence is the time of its insert, not of its transaction's start (as a replacing cut's is)", async () => {
    const leaseId = randomUUID();
    const { started, sequence } = await withConnection(database().pool, async (client) => {
      await client.query('BEGIN');
      try {
        const began = await client.query<{ ms: number }>('SELECT (extract(epoch FROM now()) * 1000)::float8 AS ms');
        await addOwedPreemption(client, { leaseId, endMs: T0 + H, neededFromMs: T0 + H });
        const row = await client.query<{ ms: number }>('SELECT (extract(epoch FROM created_at) * 1000)::float8 AS ms FROM lease_preemptions WHERE lease_id = $1', [leaseId]);
        return { started: began.rows[0].ms, sequence: row.rows[0].ms };
      } finally {
        await client.query('COMMIT');
      }
    });
    expect(sequence).toBeGreaterThan(started);
  });

  it('purges told rows whose end passed days ago, keeping the others', async () => {
    const [old, recent, owed] = [randomUUID(), randomUUID(), randomUUID()];
    const longAgo = Date.now() - 8 * 86_400_000;
    for (const id of [old, recent, owed]) await owe(id, id === recent ? Date.now() - H : longAgo);
    await database().pool.query('UPDATE lease_preemptions SET told_at = now() WHERE lease_id = ANY($1::uuid[])', [[old, recent]]);
    await insertLeaseRows(database().pool, [leaseRow(owed, Date.now() + H)]);
    await database().pool.query("UPDATE lease_preemptions SET next_attempt_at = now() + interval '1 hour' WHERE lease_id = $1", [owed]); // not told, not due
    await outboxWith(fakeTemporal(database().pool).client).sweep();
    const left = (await database().pool.query<{ lease_id: string }>('SELECT lease_id::text FROM lease_preemptions ORDER BY lease_id')).rows.map((r) => r.lease_id);
    expect(left).toEqual([recent, owed].sort());
  });
});
