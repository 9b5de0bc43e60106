/**
 * Who may preempt (issue 43): only a booking whose policy check and record commit in its own
 * transaction (the API's create path). The workflow's booking (its admission, updates of pending
 * leases, heals) and offer holds see preemptible bookings as taken; a create path rolled back (a
 * policy refusal) leaves the preemptible lease as it was, nothing owed.
 */
import { randomUUID } from 'node:crypto';
import { HostCalendar } from '../src/resources/physical-host/calendar';
import { bookInTransaction } from '../src/resources/shared/booking';
import type { ReservationContext } from '../src/domain/resource-plugin';
import { pendingReservation, reservationContext } from '../dev-stack/fixtures/builders';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { claimOwedPreemptions, markPreemptionTold, type OwedPreemption } from '../src/db/lease-preemptions';

const H = 3_600_000;
const T0 = Date.UTC(2099, 3, 1);

function context(preemptible: boolean, startMs: number, endMs: number): ReservationContext<never> {
  const reservation = pendingReservation('physical:host', { min: 1, max: 1, hypervisor_properties: '', resource_properties: '', before_end: 'default', preemptible });
  return reservationContext({ leaseId: randomUUID(), reservation, leaseReservations: [reservation], startMs, endMs });
}

class PolicyRefused extends Error {}

describe('which bookings may preempt', () => {
  const database = useMigratedTestDatabase();
  let calendar: HostCalendar;
  let lent: ReservationContext<never>;

  const endsOf = async (leaseId: string) =>
    (await database().pool.query<{ end_ms: number }>('SELECT (extract(epoch FROM upper(during)) * 1000)::float8 AS end_ms FROM host_allocations WHERE lease_id = $1', [leaseId])).rows.map((r) => r.end_ms);
  const owed = async () => (await database().pool.query<{ lease_id: string }>('SELECT lease_id::text FROM lease_preemptions')).rows.map((r) => r.lease_id);

  beforeEach(async () => {
    const pool = database().pool;
    await pool.query('TRUNCATE host_allocations, host_capabilities, hosts, lease_preemptions RESTART IDENTITY CASCADE');
    await insertHost(pool, { name: 'only' });
    calendar = new HostCalendar(pool, { cleaningMs: 0, randomChoice: false });
    lent = context(true, T0, T0 + 4 * H);
    await calendar.book(lent);
  });

  it('the workflow\'s booking (admission, pending updates) refuses instead of cutting', async () => {
    const needing = context(false, T0 + H, T0 + 2 * H);
    await expect(calendar.book(needing)).rejects.toMatchObject({ type: 'LeaseConflict' });
    expect(await endsOf(lent.leaseId)).toEqual([T0 + 4 * H]);
    expect(await owed()).toEqual([]);
  });

  it('an offer hold (a booking in a transaction that does not ask to preempt) refuses instead of cutting', async () => {
    const needing = context(false, T0 + H, T0 + 2 * H);
    await expect(bookInTransaction(database().pool, (client) => calendar.bookWithin(client, needing, { preempt: false }), { retryExclusion: true })).rejects.toMatchObject({ type: 'LeaseConflict' });
    expect(await endsOf(lent.leaseId)).toEqual([T0 + 4 * H]);
    expect(await owed()).toEqual([]);
  });

  it('the create path cuts, and a refusal after its booking (the policy check) undoes the cut with it', async () => {
    const needing = context(false, T0 + H, T0 + 2 * H);
    const refused = bookInTransaction(database().pool, async (client) => {
      await calendar.bookWithin(client, needing, { preempt: true });
      throw new PolicyRefused('refused by a usage policy rule');
    }, { retryExclusion: true });
    await expect(refused).rejects.toBeInstanceOf(PolicyRefused);
    expect(await endsOf(lent.leaseId)).toEqual([T0 + 4 * H]);
    expect(await owed()).toEqual([]);
    // The same request committed: the preemptible lease ends where the other's block begins.
    await bookInTransaction(database().pool, (client) => calendar.bookWithin(client, needing, { preempt: true }), { retryExclusion: true });
    expect(await endsOf(lent.leaseId)).toEqual([T0 + H]);
    expect(await owed()).toEqual([lent.leaseId]);
  });

  it('a second cut after the first was told is told its own end (the lease moved and booked again meanwhile)', async () => {
    const pool = database().pool;
    const told: OwedPreemption[] = [];
    const tell = async () => {
      for (const owed of await claimOwedPreemptions(pool, { limit: 10, olderThanMs: 0 })) {
        told.push(owed);
        await markPreemptionTold(pool, owed);
      }
    };
    const admit = (ctx: ReservationContext<never>) => bookInTransaction(pool, (client) => calendar.bookWithin(client, ctx, { preempt: true }), { retryExclusion: true });
    await admit(context(false, T0 + H, T0 + 2 * H));
    await tell();
    expect(told.map((o) => [o.leaseId, o.endMs])).toEqual([[lent.leaseId, T0 + H]]);
    // The lease moves later (an update of a pending lease books it again), and another regular lease cuts it there.
    await calendar.book({ ...lent, startMs: T0 + 5 * H, endMs: T0 + 8 * H });
    await admit(context(false, T0 + 6 * H, T0 + 7 * H));
    expect(await endsOf(lent.leaseId)).toEqual([T0 + 6 * H]);
    await tell();
    expect(told.map((o) => [o.leaseId, o.endMs, o.neededFromMs])).toEqual([
      [lent.leaseId, T0 + H, T0 + H],
      [lent.leaseId, T0 + 6 * H, T0 + 6 * H],
    ]);
  });

  it('an admin\'s would_book view takes no row lock: a cut under way elsewhere does not hold it up', async () => {
    const pool = database().pool;
    const needing = context(false, T0 + H, T0 + 2 * H);
    const other = await pool.connect();
    try {
      await other.query('BEGIN');
      await other.query('SELECT 1 FROM host_allocations WHERE lease_id = $1 FOR UPDATE', [lent.leaseId]);
      const viewed = await calendar.wouldBook([needing.reservation], needing.startMs, needing.endMs, 0);
      expect([...(viewed ?? new Map()).values()].flat().map((h) => h.hypervisor_hostname)).toEqual(['only']);
    } finally {
      await other.query('ROLLBACK');
      other.release();
    }
  });

  it('an active preempted lease whose booking the workflow moves past its cut (the host free again) drops the owed cut: the meter and the workflow forget it', async () => {
    const pool = database().pool;
    const cutting = context(false, T0 + H, T0 + 2 * H);
    await bookInTransaction(pool, (client) => calendar.bookWithin(client, cutting, { preempt: true }), { retryExclusion: true });
    expect(await owed()).toEqual([lent.leaseId]);
    // Booked as the cut left it (a denied change put back, an update that leaves its end at the cut): the cut stands, owed.
    const kept: { preemptionSequence?: number } = {};
    await calendar.book({ ...lent, leaseStatus: 'ACTIVE', endMs: T0 + H }, kept);
    expect(kept.preemptionSequence).toBeUndefined();
    expect(await owed()).toEqual([lent.leaseId]);
    await calendar.release(cutting.reservation.id, false);
    // The lease, ACTIVE, asks for its whole window again (an extension from its cut end).
    const settled: { preemptionSequence?: number } = {};
    await calendar.book({ ...lent, leaseStatus: 'ACTIVE', endMs: T0 + 4 * H }, settled);
    expect(await endsOf(lent.leaseId)).toEqual([T0 + 4 * H]);
    expect(await owed()).toEqual([]);
    expect(settled.preemptionSequence).toEqual(expect.any(Number));
  });

  it('a refusal with no preemptible booking in its window reads the calendar once more for the choice, regular bookings only (and once to explain)', async () => {
    const pool = database().pool;
    await pool.query('TRUNCATE host_allocations, host_lendings, lease_preemptions');
    await calendar.book(context(false, T0, T0 + 4 * H));
    const reads = jest.spyOn(calendar, 'snapshot');
    const needing = context(false, T0 + H, T0 + 2 * H);
    await expect(bookInTransaction(pool, (client) => calendar.bookWithin(client, needing, { preempt: true }), { retryExclusion: true })).rejects.toMatchObject({ type: 'LeaseConflict' });
    expect(reads).toHaveBeenCalledTimes(3);
    expect(reads.mock.calls[1][7]).toBe(true); // without preemptible bookings
  });

  it('a host a regular booking took between the reads is not one to cut: the admission cuts where a preemptible row is locked, in one transaction', async () => {
    const pool = database().pool;
    await pool.query('TRUNCATE host_allocations, host_lendings, lease_preemptions');
    await insertHost(pool, { name: 'second' });
    const hostOf = async (leaseId: string) => (await pool.query<{ host_id: string }>('SELECT host_id::text FROM host_allocations WHERE lease_id = $1', [leaseId])).rows.map((r) => r.host_id);
    // 'only' held by a regular lease, so the preemptible one goes to 'second'.
    const leaving = context(false, T0, T0 + 4 * H);
    await calendar.book(leaving);
    const onSecond = context(true, T0, T0 + 4 * H);
    await calendar.book(onSecond);
    expect([await hostOf(leaving.leaseId), await hostOf(onSecond.leaseId)]).toEqual([['1'], ['2']]);
    // Between the admission's reads: 'only' is freed before the read without preemptible bookings, and taken
    // by another regular lease before the last read (after the preemptible rows were locked).
    const arriving = context(false, T0 + H, T0 + 2 * H);
    const read = calendar.snapshot.bind(calendar);
    let step: 'first' | 'freed' | 'taken' = 'first';
    jest.spyOn(calendar, 'snapshot').mockImplementation(async (...args) => {
      if (step === 'first' && args[7] === true) {
        step = 'freed';
        await calendar.release(leaving.reservation.id, false);
      } else if (step === 'freed') {
        step = 'taken';
        await calendar.book(arriving);
      }
      return read(...args);
    });
    const needing = context(false, T0 + H, T0 + 2 * H);
    let attempts = 0;
    await bookInTransaction(pool, (client) => {
      attempts += 1;
      return calendar.bookWithin(client, needing, { preempt: true });
    }, { retryExclusion: true });
    expect(step).toBe('taken');
    expect([await hostOf(arriving.leaseId), await hostOf(needing.leaseId)]).toEqual([['1'], ['2']]);
    expect(await endsOf(onSecond.leaseId)).toEqual([T0 + H]);
    expect(attempts).toBe(1);
  });

  it('a preemptible booking committed between the reads on the only host left is cut after the transaction runs again, never a refusal', async () => {
    const pool = database().pool;
    await pool.query('TRUNCATE host_allocations, host_lendings, lease_preemptions');
    await insertHost(pool, { name: 'spare' });
    const hostOf = async (leaseId: string) => (await pool.query<{ host_id: string }>('SELECT host_id::text FROM host_allocations WHERE lease_id = $1', [leaseId])).rows.map((r) => r.host_id);
    // Both hosts are regular leases' when the admission begins: it fits only by preemption, and there is none.
    const holding = context(false, T0, T0 + 4 * H);
    await calendar.book(holding);
    const leaving = context(false, T0, T0 + 4 * H);
    await calendar.book(leaving);
    expect([await hostOf(holding.leaseId), await hostOf(leaving.leaseId)]).toEqual([['1'], ['2']]);
    const landing = context(true, T0, T0 + 4 * H);
    const read = calendar.snapshot.bind(calendar);
    let step: 'first' | 'freed' | 'landed' = 'first';
    jest.spyOn(calendar, 'snapshot').mockImplementation(async (...args) => {
      if (step === 'first' && args[7] === true) {
        // 'spare' is freed before the read without preemptible bookings ...
        step = 'freed';
        await calendar.release(leaving.reservation.id, false);
      } else if (step === 'freed') {
        // ... and a preemptible lease lands there after the preemptible rows were read (none), before the last read.
        step = 'landed';
        await calendar.book(landing);
      }
      return read(...args);
    });
    const needing = context(false, T0 + H, T0 + 2 * H);
    let attempts = 0;
    await bookInTransaction(pool, (client) => {
      attempts += 1;
      return calendar.bookWithin(client, needing, { preempt: true });
    }, { retryExclusion: true });
    expect(step).toBe('landed');
    expect([await hostOf(landing.leaseId), await hostOf(needing.leaseId)]).toEqual([['2'], ['2']]);
    expect(await endsOf(landing.leaseId)).toEqual([T0 + H]);
    expect(attempts).toBe(2);
  });

  it('a preemptible booking cut by a concurrent admission after the first snapshot saw it is free, not a refusal', async () => {
    const pool = database().pool;
    const firstSnapshot = calendar.snapshot.bind(calendar);
    // Another regular lease cuts the lent one to end at T0 + H, committed between this admission's first snapshot and its choice.
    const cutting = context(false, T0 + H, T0 + 2 * H);
    jest.spyOn(calendar, 'snapshot').mockImplementationOnce(async (...args) => {
      const seen = await firstSnapshot(...args);
      await bookInTransaction(pool, (client) => calendar.bookWithin(client, cutting, { preempt: true }), { retryExclusion: true });
      return seen;
    });
    const needing = context(false, T0 + 2 * H, T0 + 3 * H);
    await bookInTransaction(pool, (client) => calendar.bookWithin(client, needing, { preempt: true }), { retryExclusion: true });
    expect(await endsOf(needing.leaseId)).toEqual([T0 + 3 * H]);
    expect(await endsOf(lent.leaseId)).toEqual([T0 + H]);
    expect(await owed()).toEqual([lent.leaseId]);
  });
});
