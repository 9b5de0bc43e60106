/**
 * Preemptible instance slots (issue 43) in the slot and host calendars, against the real
 * PostgreSQL: a preemptible slot booking takes only capacity no regular booking holds; a regular
 * one that does not fit otherwise cuts the preemptible leases it needs (free capacity first, then
 * leases not started), in the create path's transaction only (the workflow's booking and offer
 * holds refuse); a regular host lease cuts the preemptible slots on its host; a cut committed
 * since the admission's first read is capacity, not a refusal.
 */
import { randomUUID } from 'node:crypto';
import { placePreempting, type PreemptibleSlotLease, type SlotCalendar } from '../src/domain/instance-slots';
import type { Reservation } from '../src/domain/lease';
import type { ReservationContext } from '../src/domain/resource-plugin';
import { syncCapacityProviders } from '../src/db/quantity-allocations';
import * as hostAllocations from '../src/db/host-allocations';
import { findLease, findPredecessors } from '../src/db/leases';
import { HostCalendar } from '../src/resources/physical-host/calendar';
import { physicalHostParams } from '../src/resources/physical-host/params';
import { bookInTransaction } from '../src/resources/shared/booking';
import { COMPUTE_KIND } from '../src/resources/shared/compute-providers';
import { InstanceSlotCalendar, VIRTUAL_INSTANCE } from '../src/resources/virtual-instance/calendar';
import { virtualInstanceParams } from '../src/resources/virtual-instance/params';
import { virtualInstance, virtualInstancePlugin, virtualInstanceType } from '../src/resources/virtual-instance';
import { OpenStackConfigError } from '../src/openstack';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { formatRequestDate } from '../src/domain/dates';
import { activityScheduledTimes, apiClient, eventually, inSeconds, useTestStack } from '../dev-stack/stack';
import { pendingReservation, reservationContext } from '../dev-stack/fixtures/builders';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';

const H = 3_600_000;
const T0 = Date.UTC(2099, 6, 1);
// Each host takes 4 slots of 2 vCPU.
const CAPACITY = { VCPU: 8, MEMORY_MB: 16_384, DISK_GB: 100 };

const instances = (params: Record<string, unknown>): Reservation =>
  pendingReservation(VIRTUAL_INSTANCE, virtualInstanceParams.parse({ vcpus: 2, memory_mb: 1024, disk_gb: 10, amount: 1, affinity: 'None', resource_properties: '', ...params }));
const ctxFor = (reservation: Reservation, startMs: number, endMs: number): ReservationContext<never> => reservationContext({ reservation, startMs, endMs });

class PolicyRefused extends Error {}

describe('preemptible instance slots', () => {
  const database = useMigratedTestDatabase();
  let slots: InstanceSlotCalendar;
  let hosts: HostCalendar;
  const specOf = async (ctx: ReservationContext<never>) => (await virtualInstance.describe(ctx.reservation, ctx.projectId)).spec;
  /** The workflow's booking (never preempts). */
  const book = async (ctx: ReservationContext<never>) => slots.book(ctx, await specOf(ctx));
  /** The API's create path (or, `preempt: false`, an offer hold): booked in the caller's transaction. */
  const admit = async (ctx: ReservationContext<never>, preempt = true, cut: string[] = []) => {
    const spec = await specOf(ctx);
    return bookInTransaction(database().pool, (client) => slots.bookWithin(client, ctx, spec, { preempt, cut }), { retryExclusion: true });
  };
  const slotEnds = async (leaseId: string) =>
    (await database().pool.query<{ end_ms: number; preemptible: boolean }>('SELECT (extract(epoch FROM upper(during)) * 1000)::float8 AS end_ms, preemptible FROM quantity_allocations WHERE lease_id = $1 ORDER BY id', [leaseId])).rows;
  const hostRowEnds = async (leaseId: string) =>
    (await database().pool.query<{ end_ms: number; preemptible: boolean }>('SELECT (extract(epoch FROM upper(during)) * 1000)::float8 AS end_ms, preemptible FROM host_allocations WHERE lease_id = $1 ORDER BY id', [leaseId])).rows;
  const owed = async () => (await database().pool.query<{ lease_id: string; end_ms: number }>('SELECT lease_id::text, (extract(epoch FROM end_at) * 1000)::float8 AS end_ms FROM lease_preemptions ORDER BY lease_id')).rows;

  beforeAll(() => {
    slots = new InstanceSlotCalendar(database().pool, { cleaningMs: 0 });
    hosts = new HostCalendar(database().pool, { cleaningMs: 0, randomChoice: false });
  });
  beforeEach(async () => {
    const { pool } = database();
    await pool.query('TRUNCATE host_allocations, quantity_allocations, capacity_providers, host_capabilities, hosts, lease_preemptions RESTART IDENTITY CASCADE');
    await insertHost(pool, { name: 'node-1' });
    await insertHost(pool, { name: 'node-2' });
    await syncCapacityProviders(pool, COMPUTE_KIND, ['node-1', 'node-2'].map((name) => ({ uuid: `uuid-${name}`, name, host: name, capacity: CAPACITY, traits: [] })));
  });
  afterEach(async () => {
    expect(await doubleBookings(database().pool)).toEqual([]);
  });

  it('a lease never cuts itself: its preemptible reservation, booked first in the same transaction, stays taken for its regular one', async () => {
    const leaseId = randomUUID();
    const lent = instances({ amount: 2, preemptible: true });
    // Slots: 8 in all, 2 of them the lease's own preemptible ones; its regular reservation asks 7.
    const regularSlots = instances({ amount: 7 });
    const both = [lent, regularSlots];
    const ofLease = (reservation: Reservation) => reservationContext({ reservation, leaseReservations: both, leaseId, startMs: T0, endMs: T0 + H });
    const cut: string[] = [];
    const [lentSpec, regularSpec] = [await specOf(ofLease(lent)), await specOf(ofLease(regularSlots))];
    await expect(
      bookInTransaction(database().pool, async (client) => {
        await slots.bookWithin(client, ofLease(lent), lentSpec, { preempt: false });
        return slots.bookWithin(client, ofLease(regularSlots), regularSpec, { preempt: true, cut });
      }, { retryExclusion: true }),
    ).rejects.toMatchObject({ type: 'LeaseConflict' });
    // A regular host reservation of a lease whose preemptible slots sit on both hosts: refused, not cut either.
    const wholeHosts = pendingReservation('physical:host', physicalHostParams.parse({ min: 2, max: 2, hypervisor_properties: '', resource_properties: '' }));
    const mixed = [instances({ amount: 5, preemptible: true }), wholeHosts];
    const mixedCtx = (reservation: Reservation) => reservationContext({ reservation, leaseReservations: mixed, leaseId, startMs: T0, endMs: T0 + H });
    const mixedSpec = await specOf(mixedCtx(mixed[0]));
    await expect(
      bookInTransaction(database().pool, async (client) => {
        await slots.bookWithin(client, mixedCtx(mixed[0]), mixedSpec, { preempt: false });
        return hosts.bookWithin(client, mixedCtx(wholeHosts), { preempt: true, cut });
      }, { retryExclusion: true }),
    ).rejects.toMatchObject({ type: 'LeaseConflict' });
    expect(cut).toEqual([]);
    expect(await owed()).toEqual([]);
  });

  it('a preemptible booking takes only capacity no booking holds, and its rows are flagged', async () => {
    await book(ctxFor(instances({ amount: 7 }), T0, T0 + 2 * H));
    await expect(admit(ctxFor(instances({ amount: 2, preemptible: true }), T0 + H, T0 + 3 * H))).rejects.toMatchObject({ type: 'LeaseConflict' });
    const lent = ctxFor(instances({ amount: 1, preemptible: true }), T0 + H, T0 + 3 * H);
    expect(await admit(lent)).toEqual([expect.objectContaining({ hostId: '2', slots: 1 })]);
    expect(await slotEnds(lent.leaseId)).toEqual([{ end_ms: T0 + 3 * H, preemptible: true }]);
    expect(await hostRowEnds(lent.leaseId)).toEqual([{ end_ms: T0 + 3 * H, preemptible: true }]);
    // A preemptible booking never displaces one: the whole pool is taken now, preemptible or not.
    await expect(admit(ctxFor(instances({ amount: 1, preemptible: true }), T0 + H, T0 + 2 * H))).rejects.toMatchObject({ type: 'LeaseConflict' });
    expect(await owed()).toEqual([]);
  });

  it('a regular booking takes free capacity first, then cuts the lease not started before the running one, no more than it needs', async () => {
    const now = Date.now();
    // Running since an hour ago: 2 slots on node-1; not started: 2 slots on node-1 too (packing).
    const running = ctxFor(instances({ amount: 2, preemptible: true }), now - H, T0 + 4 * H);
    const waiting = ctxFor(instances({ amount: 2, preemptible: true }), T0, T0 + 4 * H);
    await book(running);
    await book(waiting);
    // Free capacity first (node-2): nothing is cut.
    const cut: string[] = [];
    const free = ctxFor(instances({ amount: 4 }), T0 + H, T0 + 2 * H);
    expect(await admit(free, true, cut)).toEqual([expect.objectContaining({ hostId: '2', slots: 4 })]);
    expect([cut, await owed()]).toEqual([[], []]);
    // Two more: the lease not started is cut (all of it: its window begins after the cut), the running one kept.
    const needing = ctxFor(instances({ amount: 2 }), T0 + H, T0 + 2 * H);
    expect(await admit(needing, true, cut)).toEqual([expect.objectContaining({ hostId: '1', slots: 2 })]);
    expect(cut).toEqual([waiting.leaseId]);
    expect(await slotEnds(waiting.leaseId)).toEqual([{ end_ms: T0 + H, preemptible: true }, { end_ms: T0 + H, preemptible: true }]);
    expect(await hostRowEnds(waiting.leaseId)).toEqual([{ end_ms: T0 + H, preemptible: true }]);
    expect((await slotEnds(running.leaseId)).map((r) => r.end_ms)).toEqual([T0 + 4 * H, T0 + 4 * H]);
    expect(await owed()).toEqual([{ lease_id: waiting.leaseId, end_ms: T0 + H }]);
    // Two more again: now the running one is cut, to end where the regular block begins (one lease, one end).
    await admit(ctxFor(instances({ amount: 2 }), T0 + H, T0 + 2 * H), true, cut);
    expect(cut).toEqual([waiting.leaseId, running.leaseId]);
    expect((await slotEnds(running.leaseId)).map((r) => r.end_ms)).toEqual([T0 + H, T0 + H]);
    expect((await hostRowEnds(running.leaseId)).map((r) => r.end_ms)).toEqual([T0 + H]);
    // Nothing preemptible left in the way: a regular booking that still does not fit is refused, nothing cut.
    await expect(admit(ctxFor(instances({ amount: 1 }), T0 + H, T0 + 2 * H))).rejects.toMatchObject({ type: 'LeaseConflict' });
  });

  it('only the create path cuts: the workflow\'s booking and an offer hold refuse, and a refusal after the booking undoes the cut', async () => {
    const lent = ctxFor(instances({ amount: 8, preemptible: true }), T0, T0 + 4 * H);
    await book(lent);
    const needing = ctxFor(instances({ amount: 1 }), T0 + H, T0 + 2 * H);
    await expect(book(needing)).rejects.toMatchObject({ type: 'LeaseConflict' });
    await expect(admit(needing, false)).rejects.toMatchObject({ type: 'LeaseConflict' });
    const spec = await specOf(needing);
    const refused = bookInTransaction(database().pool, async (client) => {
      await slots.bookWithin(client, needing, spec, { preempt: true });
      throw new PolicyRefused('refused by a usage policy rule');
    }, { retryExclusion: true });
    await expect(refused).rejects.toBeInstanceOf(PolicyRefused);
    expect((await slotEnds(lent.leaseId)).every((r) => r.end_ms === T0 + 4 * H)).toBe(true);
    expect(await owed()).toEqual([]);
  });

  it('a regular host lease cuts the preemptible slots on its host, slots and shared rows alike; regular slots keep it off', async () => {
    const lent = ctxFor(instances({ amount: 4, preemptible: true }), T0, T0 + 4 * H);
    await book(lent);
    const regularSlots = ctxFor(instances({ amount: 4 }), T0, T0 + 4 * H);
    await book(regularSlots);
    const hostLease = (min: number) => {
      const reservation = pendingReservation('physical:host', physicalHostParams.parse({ min, max: min, hypervisor_properties: '', resource_properties: '' }));
      return reservationContext({ reservation, leaseReservations: [reservation], startMs: T0 + H, endMs: T0 + 2 * H });
    };
    const admitHost = (ctx: ReservationContext<never>) => bookInTransaction(database().pool, (client) => hosts.bookWithin(client, ctx, { preempt: true }), { retryExclusion: true });
    // Both hosts: one holds regular slots, never cut.
    await expect(admitHost(hostLease(2))).rejects.toMatchObject({ type: 'LeaseConflict' });
    expect(await owed()).toEqual([]);
    const taken = await admitHost(hostLease(1));
    expect(taken.map((h) => h.hypervisor_hostname)).toEqual(['node-1']);
    expect((await slotEnds(lent.leaseId)).map((r) => r.end_ms)).toEqual([T0 + H, T0 + H, T0 + H, T0 + H]);
    expect(await hostRowEnds(lent.leaseId)).toEqual([{ end_ms: T0 + H, preemptible: true }]);
    expect(await owed()).toEqual([{ lease_id: lent.leaseId, end_ms: T0 + H }]);
  });

  it('a cut slot lease booked again for the window it first asked for is booked, not taken as done, and its owed cut is settled', async () => {
    const lent = ctxFor(instances({ amount: 8, preemptible: true }), T0, T0 + 4 * H);
    await book(lent);
    const needing = ctxFor(instances({ amount: 1 }), T0 + H, T0 + 2 * H);
    await admit(needing);
    expect((await slotEnds(lent.leaseId)).map((r) => r.end_ms)).toEqual(Array(8).fill(T0 + H));
    // The regular lease goes; the lent one is booked again as it first asked (an update by its workflow).
    await slots.release(needing.reservation.id, false);
    const settled: { preemptionSequence?: number } = {};
    await slots.book(lent, await specOf(lent), { settled });
    expect((await slotEnds(lent.leaseId)).map((r) => r.end_ms)).toEqual(Array(8).fill(T0 + 4 * H));
    expect(settled.preemptionSequence).toEqual(expect.any(Number));
    expect(await owed()).toEqual([]);
  });

  it('a cut slot lease booked anew to end at its cut (an update\'s second try on the lease as cut) still owes the cut', async () => {
    const lent = ctxFor(instances({ amount: 8, preemptible: true }), T0, T0 + 4 * H);
    await book(lent);
    await admit(ctxFor(instances({ amount: 1 }), T0 + H, T0 + 2 * H));
    // Its start moved, its end the cut: booked anew, and ending where the cut put it.
    const asCut = { ...lent, startMs: T0 + 60_000, endMs: T0 + H };
    const settled: { preemptionSequence?: number } = {};
    await slots.book(asCut, await specOf(asCut), { settled });
    expect((await slotEnds(lent.leaseId)).map((r) => r.end_ms)).toEqual(Array(8).fill(T0 + H));
    expect([settled.preemptionSequence, await owed()]).toEqual([undefined, [{ lease_id: lent.leaseId, end_ms: T0 + H }]]);
  });

  it('a running slot lease cut and moved back past its cut once free (an extension) keeps its slots there, its owed cut settled', async () => {
    const now = Date.now();
    const lent = ctxFor(instances({ amount: 4, preemptible: true }), now - H, T0 + 4 * H);
    await book(lent);
    await book(ctxFor(instances({ amount: 4 }), now - H, T0 + 4 * H));
    const needing = ctxFor(instances({ amount: 1 }), T0 + H, T0 + 2 * H);
    await admit(needing);
    expect((await slotEnds(lent.leaseId)).map((r) => r.end_ms)).toEqual(Array(4).fill(T0 + H));
    await slots.release(needing.reservation.id, false);
    const settled: { preemptionSequence?: number } = {};
    expect(await slots.moveWindow({ ...lent, leaseStatus: 'ACTIVE' }, settled)).toBe(true);
    expect((await slotEnds(lent.leaseId)).filter((r) => r.end_ms === T0 + 4 * H)).toHaveLength(4);
    expect(settled.preemptionSequence).toEqual(expect.any(Number));
    expect(await owed()).toEqual([]);
  });

  it('reads Placement before an API admission, keeping its copy when Placement does not answer; without a cloud configured, refuses', async () => {
    const withCloud = (cloud: () => never) => virtualInstanceType({ pool: database().pool, settings: { cleaningMs: 0, capacityRefreshMs: 0 }, cloud });
    const down = withCloud(() => {
      throw new Error('503 Service Unavailable (placement)');
    });
    await expect(down.beforeAdmission!()).resolves.toBeUndefined();
    const unconfigured = withCloud(() => {
      throw new OpenStackConfigError('no OS_CLOUD');
    });
    await expect(unconfigured.beforeAdmission!()).rejects.toBeInstanceOf(OpenStackConfigError);
    await database().pool.query('TRUNCATE quantity_allocations, capacity_providers CASCADE');
    await expect(down.beforeAdmission!()).rejects.toThrow(/Service Unavailable/);
  });

  it('an API admission with a cloud asks for the hold, and says its start makes the same resources (a failed hold leaves the lease PENDING)', async () => {
    const type = virtualInstanceType({ pool: database().pool, settings: { cleaningMs: 0 }, cloud: () => { throw new Error('no cloud call at admission'); } });
    const ctx = ctxFor(instances({ amount: 1 }), T0, T0 + H);
    const booked = await bookInTransaction(database().pool, (client) => type.bookAtAdmission!(client, ctx as never), { retryExclusion: true });
    expect(booked).toMatchObject({ holdUntilStart: true, holdRedoneAtStart: true });
  });

  it('a regular ask\'s search (offers, the 409\'s later fit) counts preemptible slots as free where its booking may cut, as its admission does; a preemptible ask\'s does not', async () => {
    // Every slot of both hosts is a preemptible lease's until T0 + 4 h.
    await book(ctxFor(instances({ amount: 8, preemptible: true }), T0, T0 + 4 * H));
    const searchFor = async (reservation: Reservation) => {
      const ctx = ctxFor(reservation, T0 + H, T0 + 2 * H);
      return slots.search([{ reservation, spec: await specOf(ctx) }], T0 + H, H, 0, { mayPreempt: true });
    };
    expect(await searchFor(instances({ amount: 2 }))).toMatchObject({ earliest: T0 + H });
    expect(await searchFor(instances({ amount: 2, preemptible: true }))).toMatchObject({ earliest: T0 + 4 * H });
    // Searched for a booking that never cuts (an update, an offer hold), they count as taken.
    const regular = instances({ amount: 2 });
    expect(await slots.search([{ reservation: regular, spec: await specOf(ctxFor(regular, T0 + H, T0 + 2 * H)) }], T0 + H, H, 0)).toMatchObject({ earliest: T0 + 4 * H });
    // The admission agrees: the regular ask fits there by a cut.
    const cut: string[] = [];
    expect(await admit(ctxFor(instances({ amount: 2 }), T0 + H, T0 + 2 * H), true, cut)).toEqual([expect.objectContaining({ slots: 2 })]);
    expect(cut).toHaveLength(1);
  });

  it('a regular ask refused though it may cut is told a later fit that counts preemptible slots as free, only then', async () => {
    // Every slot is a regular lease's until T0 + 4 h, then a preemptible lease's until T0 + 6 h.
    await book(ctxFor(instances({ amount: 8 }), T0, T0 + 4 * H));
    await book(ctxFor(instances({ amount: 8, preemptible: true }), T0 + 4 * H, T0 + 6 * H));
    const fitsFrom = (ms: number) => ({ type: 'LeaseConflict', message: expect.stringContaining(`fits from ${formatRequestDate(ms)}`) });
    await expect(admit(ctxFor(instances({ amount: 2 }), T0 + H, T0 + 2 * H))).rejects.toMatchObject(fitsFrom(T0 + 4 * H));
    // The workflow's booking never cuts: its later fit is after the preemptible lease.
    await expect(book(ctxFor(instances({ amount: 2 }), T0 + H, T0 + 2 * H))).rejects.toMatchObject(fitsFrom(T0 + 6 * H));
  });

  describe('a whole host booked while a regular slot admission reads (the reads that disagree, as mended for hosts)', () => {
    const hostOf = async (leaseId: string) => (await database().pool.query<{ host_id: string }>('SELECT DISTINCT host_id::text FROM host_allocations WHERE lease_id = $1', [leaseId])).rows.map((r) => r.host_id);
    const wholeHost = (preemptible: boolean, startMs: number, endMs: number) => {
      const reservation = pendingReservation('physical:host', physicalHostParams.parse({ min: 1, max: 1, hypervisor_properties: '', resource_properties: '', preemptible }));
      return reservationContext({ reservation, leaseReservations: [reservation], startMs, endMs });
    };
    /**
     * node-1 full of regular slots; node-2 of a regular lease that leaves just before the choice's
     * read without preemptible bookings (the admission needs a cut at its first read, and fits in
     * free room at that one); `meanwhile` books a whole host at the step named.
     */
    const racing = async (at: 'before the locked reads' | 'after the locked reads', meanwhile: () => Promise<unknown>) => {
      await book(ctxFor(instances({ amount: 4 }), T0, T0 + 4 * H));
      const leaving = ctxFor(instances({ amount: 4 }), T0, T0 + 4 * H);
      await book(leaving);
      // The race is at the preempting choice's one read of the regular calendar: the first snapshot read while it runs.
      const choosing = slots as unknown as { placePreempting: (...args: unknown[]) => Promise<unknown> };
      const choose = choosing.placePreempting.bind(slots);
      let choiceReads = 0;
      let inChoice = false;
      const choice = jest.spyOn(choosing, 'placePreempting').mockImplementation(async (...args) => {
        inChoice = true;
        try {
          return await choose(...args);
        } finally {
          inChoice = false;
        }
      });
      const read = slots.snapshot.bind(slots);
      const snapshots = jest.spyOn(slots, 'snapshot').mockImplementation(async (...args) => {
        if (!inChoice || choiceReads++ > 0) return read(...args);
        await slots.release(leaving.reservation.id, false);
        const seen = await read(...args);
        if (at === 'before the locked reads') await meanwhile();
        return seen;
      });
      const lockedRead = hostAllocations.preemptibleBookingsOverlapping;
      const lockedReads = jest.spyOn(hostAllocations, 'preemptibleBookingsOverlapping').mockImplementation(async (...args) => {
        const rows = await lockedRead(...args);
        if (at === 'after the locked reads') await meanwhile();
        return rows;
      });
      let attempts = 0;
      const cut: string[] = [];
      const needing = ctxFor(instances({ amount: 2 }), T0 + H, T0 + 2 * H);
      try {
        const spec = await specOf(needing);
        const placed = await bookInTransaction(database().pool, (client) => {
          attempts += 1;
          // Once: the race is the first attempt's.
          if (attempts > 1) [snapshots, lockedReads, choice].forEach((spy) => spy.mockRestore());
          return slots.bookWithin(client, needing, spec, { preempt: true, cut });
        }, { retryExclusion: true });
        return { placed, attempts, cut, needing };
      } finally {
        snapshots.mockRestore();
        lockedReads.mockRestore();
        choice.mockRestore();
      }
    };

    it('a preemptible one committed between the reads is cut, after the transaction runs again if it came after the locked reads, never a refusal', async () => {
      for (const at of ['before the locked reads', 'after the locked reads'] as const) {
        await database().pool.query('TRUNCATE host_allocations, quantity_allocations, lease_preemptions RESTART IDENTITY CASCADE');
        const landing = wholeHost(true, T0, T0 + 4 * H);
        const { placed, attempts, cut, needing } = await racing(at, () => hosts.book(landing));
        expect([at, placed, attempts, cut]).toEqual([at, [expect.objectContaining({ hostId: '2', slots: 2 })], at === 'before the locked reads' ? 1 : 2, [landing.leaseId]]);
        expect([await hostOf(landing.leaseId), await hostOf(needing.leaseId)]).toEqual([['2'], ['2']]);
        expect(await hostRowEnds(landing.leaseId)).toEqual([{ end_ms: T0 + H, preemptible: true }]);
        expect(await owed()).toEqual([{ lease_id: landing.leaseId, end_ms: T0 + H }]);
      }
    });

    it('a regular one committed between the reads on the only room left is a refusal on what committed, nothing cut', async () => {
      const arriving = wholeHost(false, T0, T0 + 4 * H);
      await expect(racing('after the locked reads', () => hosts.book(arriving))).rejects.toMatchObject({ type: 'LeaseConflict' });
      expect(await hostOf(arriving.leaseId)).toEqual(['2']);
      expect(await owed()).toEqual([]);
    });
  });

  it('a lease cut in all its bookings and booked again before the tell keeps the cut while one of its reservations cannot move back (one lease, one end)', async () => {
    const pool = database().pool;
    await pool.query('TRUNCATE host_allocations, quantity_allocations, capacity_providers, host_capabilities, hosts, lease_preemptions RESTART IDENTITY CASCADE');
    await insertHost(pool, { name: 'node-1', capabilities: { pool: 'whole' } });
    await insertHost(pool, { name: 'node-2', capabilities: { pool: 'slots' } });
    await syncCapacityProviders(pool, COMPUTE_KIND, ['node-1', 'node-2'].map((name) => ({ uuid: `uuid-${name}`, name, host: name, capacity: CAPACITY, traits: [] })));
    const inPool = (name: string) => JSON.stringify(['==', '$pool', name]);
    const leaseId = randomUUID();
    const wholeHost = pendingReservation('physical:host', physicalHostParams.parse({ min: 1, max: 1, hypervisor_properties: '', resource_properties: inPool('whole'), preemptible: true }));
    const lentSlots = instances({ amount: 4, preemptible: true, resource_properties: inPool('slots') });
    const ofLease = (reservation: Reservation) => reservationContext({ reservation, leaseReservations: [wholeHost, lentSlots], leaseId, startMs: T0, endMs: T0 + 4 * H });
    const slotSpec = await specOf(ofLease(lentSlots));
    await hosts.book(ofLease(wholeHost));
    await slots.book(ofLease(lentSlots), slotSpec);
    // A regular lease takes slots on node-2 from T0 + 1 h: every booking of the lease is cut there, its whole host too.
    const cut: string[] = [];
    await admit(ctxFor(instances({ amount: 2, resource_properties: inPool('slots') }), T0 + H, T0 + 2 * H), true, cut);
    expect(cut).toEqual([leaseId]);
    expect((await hostRowEnds(leaseId)).map((r) => r.end_ms)).toEqual([T0 + H, T0 + H]);
    // Its workflow books it again for the window it still records (an update before the tell): the host is free until T0 + 4 h, the slots are not.
    const hostSettled: { preemptionSequence?: number } = {};
    await hosts.book(ofLease(wholeHost), hostSettled);
    await expect(slots.book(ofLease(lentSlots), slotSpec, { settled: {} })).rejects.toMatchObject({ type: 'LeaseConflict' });
    // The cut stands for the whole lease: still owed (the workflow applies it, and its update's rollback books the host back to it), never settled by the host's move alone.
    expect(hostSettled.preemptionSequence).toBeUndefined();
    expect(await owed()).toEqual([{ lease_id: leaseId, end_ms: T0 + H }]);
    // Once every reservation is booked past the cut (the slots freed), the last one's booking settles it.
    await pool.query('DELETE FROM quantity_allocations WHERE lease_id <> $1', [leaseId]);
    await pool.query('DELETE FROM host_allocations WHERE lease_id <> $1', [leaseId]);
    const slotsSettled: { preemptionSequence?: number } = {};
    await slots.book(ofLease(lentSlots), slotSpec, { settled: slotsSettled });
    expect([slotsSettled.preemptionSequence, await owed()]).toEqual([expect.any(Number), []]);
  });

  it('a preemptible slot lease cut by a concurrent admission after the first read is capacity, not a refusal', async () => {
    const lent = ctxFor(instances({ amount: 4, preemptible: true }), T0, T0 + 4 * H);
    await book(lent);
    await book(ctxFor(instances({ amount: 4 }), T0, T0 + 4 * H));
    // A host lease cuts the lent slots (node-1) to end at T0 + H, committed between this admission's first read and its choice.
    const reservation = pendingReservation('physical:host', physicalHostParams.parse({ min: 1, max: 1, hypervisor_properties: '', resource_properties: '' }));
    const hostLease = reservationContext({ reservation, leaseReservations: [reservation], startMs: T0 + H, endMs: T0 + 2 * H });
    const firstRead = slots.snapshot.bind(slots);
    jest.spyOn(slots, 'snapshot').mockImplementationOnce(async (...args) => {
      const seen = await firstRead(...args);
      await bookInTransaction(database().pool, (client) => hosts.bookWithin(client, hostLease, { preempt: true }), { retryExclusion: true });
      return seen;
    });
    const cut: string[] = [];
    const needing = ctxFor(instances({ amount: 4 }), T0 + 2 * H, T0 + 3 * H);
    expect(await admit(needing, true, cut)).toEqual([expect.objectContaining({ hostId: '1', slots: 4 })]);
    expect(cut).toEqual([]);
    expect(await owed()).toEqual([{ lease_id: lent.leaseId, end_ms: T0 + H }]);
  });
});

describe('preemptible instance leases through the API and the worker', () => {
  const stack = useTestStack({
    env: { LK_NOTIFY_BEFORE_END: 'none', LK_PREEMPT_EVICTION_SECONDS: '3' },
    withPool: (pool) => [
      virtualInstancePlugin({ pool, settings: { cleaningMs: 0 }, cloud: 'calendar-only' }),
      physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' }),
    ],
  });
  const asA = apiClient(() => stack().url, { 'x-project-id': 'project-a', 'x-user-id': 'alice', 'x-roles': 'member' });
  const asB = apiClient(() => stack().url, { 'x-project-id': 'project-b', 'x-user-id': 'bob', 'x-roles': 'member' });
  const TODAY = Math.ceil(Date.now() / H) * H;
  const at = (days: number, hours: number) => formatRequestDate(TODAY + days * 86_400_000 + hours * H);
  /** 4 slots of 2 vCPU per host of the pool. */
  const slotsIn = (pool: string, fields: Record<string, unknown>) => ({ resource_type: 'virtual:instance', vcpus: 2, memory_mb: 1024, disk_gb: 10, affinity: 'None', resource_properties: JSON.stringify(['==', '$pool', pool]), ...fields });
  const leaseOf = async (id: string) => (await asA('GET', `/v1/leases/${id}`)).body.lease;
  const endOf = (lease: { end_date: string }) => Date.parse(`${String(lease.end_date).slice(0, 19)}Z`);

  beforeAll(async () => {
    const { pool } = stack().db;
    const names = ['api-run', 'api-gone', 'api-host', 'api-none', 'api-wait', 'api-cross', 'api-both-host', 'api-both-slots'];
    for (const name of names) await insertHost(pool, { name, capabilities: { pool: name } });
    await syncCapacityProviders(pool, COMPUTE_KIND, names.map((name) => ({ uuid: `uuid-${name}`, name, host: name, capacity: CAPACITY, traits: [] })));
  });
  afterEach(async () => {
    expect(await doubleBookings(stack().db.pool)).toEqual([]);
  });

  it('takes "preemptible" as a boolean or text, and the resource_type virtual:instance:preemptible; refuses other values with Blazar\'s 400', async () => {
    const lease = (name: string, fields: Record<string, unknown>) => asA('POST', '/v1/leases', { name, start_date: at(10, 0), end_date: at(10, 1), reservations: [slotsIn('api-none', { amount: 1, ...fields })] });
    expect((await lease('text', { preemptible: 'True' })).body.lease.reservations[0]).toMatchObject({ resource_type: 'virtual:instance', preemptible: true });
    expect((await lease('alias', { resource_type: 'virtual:instance:preemptible' })).body.lease.reservations[0]).toMatchObject({ resource_type: 'virtual:instance', preemptible: true });
    expect((await lease('regular', {})).body.lease.reservations[0]).toMatchObject({ preemptible: false });
    expect(await lease('contradicted', { resource_type: 'preemptible:instance', preemptible: false })).toEqual({
      status: 400,
      body: { error_code: 400, error_name: 400, error_message: 'reservations[0].preemptible: must be true (or left out) with resource_type preemptible:instance' },
    });
    expect(await lease('bad', { preemptible: 'maybe' })).toEqual({ status: 400, body: { error_code: 400, error_name: 400, error_message: 'reservations[0].preemptible: expected true or false' } });
  });

  it('a regular instance lease cuts a running preemptible one: its slots end where the other begins, and its workflow moves its end and says why', async () => {
    const lent = await asA('POST', '/v1/leases', { name: 'lent-run', start_date: 'now', end_date: inSeconds(4 * 3600), reservations: [slotsIn('api-run', { amount: 3, preemptible: true })] });
    expect(lent.status).toBe(201);
    const lentId = lent.body.lease.id as string;
    await eventually(async () => ((await leaseOf(lentId)).status === 'ACTIVE' ? true : undefined));
    const start = Math.ceil((Date.now() + H) / 60_000) * 60_000;
    const needing = await asB('POST', '/v1/leases', { name: 'regular-run', start_date: inSeconds(0, start), end_date: inSeconds(3600, start), reservations: [slotsIn('api-run', { amount: 2 })] });
    expect([needing.status, needing.body.error_message]).toEqual([201, undefined]);
    const ends = await stack().db.pool.query<{ end_ms: number }>('SELECT (extract(epoch FROM upper(during)) * 1000)::float8 AS end_ms FROM quantity_allocations WHERE lease_id = $1', [lentId]);
    expect(ends.rows.map((r) => r.end_ms)).toEqual([start, start, start]);
    const preempted = await eventually(async () => {
      const now = await leaseOf(lentId);
      return endOf(now) === start ? now : undefined;
    });
    expect(preempted).toMatchObject({ status: 'ACTIVE', status_reason: expect.stringMatching(/^preempted: host needed by another lease from /) });
    expect(JSON.stringify(preempted)).not.toContain('project-b');
  });

  it('a regular instance lease that cut a running preemptible one starts only once that lease has ended, and waits for no other slot lease on the host', async () => {
    const lent = await asA('POST', '/v1/leases', { name: 'lent-wait', start_date: 'now', end_date: inSeconds(4 * 3600), reservations: [slotsIn('api-wait', { amount: 3, preemptible: true })] });
    const beside = await asB('POST', '/v1/leases', { name: 'beside-wait', start_date: 'now', end_date: inSeconds(4 * 3600), reservations: [slotsIn('api-wait', { amount: 1 })] });
    expect([lent.status, beside.status]).toEqual([201, 201]);
    const leaseOfB = async (id: string) => (await asB('GET', `/v1/leases/${id}`)).body.lease;
    const [lentId, besideId] = [lent.body.lease.id as string, beside.body.lease.id as string];
    await eventually(async () => ((await leaseOf(lentId)).status === 'ACTIVE' && (await leaseOfB(besideId)).status === 'ACTIVE' ? true : undefined));
    // Sooner than the warning: the cut and the start come together, and only the wait orders them.
    const needing = await asB('POST', '/v1/leases', { name: 'regular-wait', start_date: inSeconds(3), end_date: inSeconds(3600), reservations: [slotsIn('api-wait', { amount: 2 })] });
    expect([needing.status, needing.body.error_message]).toEqual([201, undefined]);
    const needingId = needing.body.lease.id as string;
    const keysOf = async (id: string) => (await stack().db.pool.query<{ resource_keys: string[] }>('SELECT resource_keys FROM leases WHERE id = $1', [id])).rows[0].resource_keys;
    expect(await keysOf(needingId)).toEqual([`preemptible-lease:${lentId}`]);
    expect(await keysOf(besideId)).toEqual([]);
    expect(await findPredecessors(stack().db.pool, { leaseId: needingId, keys: await keysOf(needingId), startMs: Date.now() + H })).toEqual([lentId]);
    await eventually(async () => ((await leaseOfB(needingId)).status === 'ACTIVE' ? true : undefined), 30_000);
    const event = async (id: string, type: string) => (await findLease(stack().db.pool, id))!.events.find((e) => e.event_type === type)!;
    const lentEnd = await event(lentId, 'end_lease');
    expect(lentEnd.status).toBe('DONE');
    const handedOverMs = await activityScheduledTimes(stack(), needingId, ['startReservation', 'startReservationStep']);
    expect(handedOverMs.length).toBeGreaterThan(0);
    expect(handedOverMs[0]).toBeGreaterThanOrEqual(lentEnd.finishedAt!);
    expect((await leaseOfB(besideId)).status).toBe('ACTIVE');
  });

  it('a regular host lease that cuts a running preemptible slot lease waits for its end (the key of the lease it cut), and a preemptible host lease holds its own', async () => {
    const lent = await asA('POST', '/v1/leases', { name: 'lent-cross', start_date: 'now', end_date: inSeconds(4 * 3600), reservations: [slotsIn('api-cross', { amount: 1, preemptible: true })] });
    expect(lent.status).toBe(201);
    const lentId = lent.body.lease.id as string;
    const hostIn = (pool: string, fields: Record<string, unknown> = {}) => ({ resource_type: 'physical:host', min: 1, max: 1, hypervisor_properties: '', resource_properties: JSON.stringify(['==', '$pool', pool]), ...fields });
    const needing = await asB('POST', '/v1/leases', { name: 'host-cross', start_date: inSeconds(H / 1000), end_date: inSeconds(2 * 3600), reservations: [hostIn('api-cross')] });
    expect([needing.status, needing.body.error_message]).toEqual([201, undefined]);
    const needingId = needing.body.lease.id as string;
    const keysOf = async (id: string) => (await stack().db.pool.query<{ resource_keys: string[] }>('SELECT resource_keys FROM leases WHERE id = $1', [id])).rows[0].resource_keys;
    const needingKeys = await keysOf(needingId);
    expect(needingKeys).toEqual([expect.stringMatching(/^host:/), `preemptible-lease:${lentId}`]);
    expect(await findPredecessors(stack().db.pool, { leaseId: needingId, keys: needingKeys, startMs: Date.now() + H })).toEqual([lentId]);
    const preemptibleHost = await asA('POST', '/v1/leases', { name: 'lent-host-cross', start_date: at(40, 0), end_date: at(40, 1), reservations: [hostIn('api-cross', { preemptible: true })] });
    expect(preemptibleHost.status).toBe(201);
    expect(await keysOf(preemptibleHost.body.lease.id)).toEqual([expect.stringMatching(/^host:/), `preemptible-lease:${preemptibleHost.body.lease.id}`]);
  });

  it('a lease with preemptible hosts and slots, cut in its slots and updated before the tell, keeps one end: every booking at the cut', async () => {
    const pool = stack().db.pool;
    const hostIn = (name: string, fields: Record<string, unknown> = {}) => ({ resource_type: 'physical:host', min: 1, max: 1, hypervisor_properties: '', resource_properties: JSON.stringify(['==', '$pool', name]), ...fields });
    /** A lease of a whole host and 4 slots on `day`, cut in its third hour by a regular slot booking (every booking of it, its host too), the tell held. */
    const cutWithTellHeld = async (day: number) => {
      const lent = await asA('POST', '/v1/leases', { name: `lent-both-${day}`, start_date: at(day, 0), end_date: at(day, 4), reservations: [hostIn('api-both-host', { preemptible: true }), slotsIn('api-both-slots', { amount: 4, preemptible: true })] });
      expect(lent.status).toBe(201);
      const lentId = lent.body.lease.id as string;
      const cutMs = Date.parse(`${at(day, 2).replace(' ', 'T')}Z`);
      const regular = instances({ amount: 2, resource_properties: JSON.stringify(['==', '$pool', 'api-both-slots']) });
      const needing = reservationContext({ reservation: regular, leaseReservations: [regular], startMs: cutMs, endMs: cutMs + H, projectId: 'project-b' });
      const calendar = new InstanceSlotCalendar(pool, { cleaningMs: 0 });
      const spec = (await virtualInstance.describe(regular as never, 'project-b')).spec;
      await bookInTransaction(pool, async (client) => {
        await calendar.bookWithin(client, needing, spec, { preempt: true });
        await client.query("UPDATE lease_preemptions SET next_attempt_at = now() + interval '1 hour' WHERE lease_id = $1", [lentId]);
      }, { retryExclusion: true });
      return { lentId, cutMs, hostReservationId: lent.body.lease.reservations[0].id as string };
    };
    const endsOf = async (lentId: string) => ({
      hosts: (await pool.query<{ end_ms: number }>('SELECT DISTINCT (extract(epoch FROM upper(during)) * 1000)::float8 AS end_ms FROM host_allocations WHERE lease_id = $1', [lentId])).rows.map((r) => r.end_ms),
      slots: (await pool.query<{ end_ms: number }>('SELECT DISTINCT (extract(epoch FROM upper(during)) * 1000)::float8 AS end_ms FROM quantity_allocations WHERE lease_id = $1', [lentId])).rows.map((r) => r.end_ms),
    });
    // The same host asked another way: its host alone could move back to the end the lease records, its slots cannot.
    const samePlace = JSON.stringify(['and', ['==', '$pool', 'api-both-host'], ['!=', '$pool', 'api-none']]);

    const moved = await cutWithTellHeld(20);
    expect(await endsOf(moved.lentId)).toEqual({ hosts: [moved.cutMs], slots: [moved.cutMs] });
    const updated = await asA('PUT', `/v1/leases/${moved.lentId}`, { reservations: [{ id: moved.hostReservationId, resource_properties: samePlace }] });
    expect([updated.status, updated.body.error_message]).toEqual([200, undefined]);
    expect(endOf(updated.body.lease)).toBe(moved.cutMs);
    expect(await endsOf(moved.lentId)).toEqual({ hosts: [moved.cutMs], slots: [moved.cutMs] });

    // Asked past the cut: refused, and the rollback books nothing past it either (the lease as cut).
    const refused = await cutWithTellHeld(21);
    const past = await asA('PUT', `/v1/leases/${refused.lentId}`, { end_date: at(21, 5), reservations: [{ id: refused.hostReservationId, resource_properties: samePlace }] });
    expect(past.status).toBe(409);
    expect(endOf(await leaseOf(refused.lentId))).toBe(refused.cutMs);
    expect(await endsOf(refused.lentId)).toEqual({ hosts: [refused.cutMs], slots: [refused.cutMs] });
  });

  it('ends at once a preemptible instance lease not started whose whole window a regular lease takes, a host lease too', async () => {
    const lend = (name: string, pool: string, day: number) => asA('POST', '/v1/leases', { name, start_date: at(day, 1), end_date: at(day, 2), reservations: [slotsIn(pool, { amount: 4, preemptible: true })] });
    const bySlots = await lend('lent-gone', 'api-gone', 30);
    const byHost = await lend('lent-host', 'api-host', 31);
    expect([bySlots.status, byHost.status]).toEqual([201, 201]);
    expect((await asB('POST', '/v1/leases', { name: 'regular-gone', start_date: at(30, 0), end_date: at(30, 3), reservations: [slotsIn('api-gone', { amount: 1 })] })).status).toBe(201);
    const hostLease = { resource_type: 'physical:host', min: 1, max: 1, hypervisor_properties: '', resource_properties: JSON.stringify(['==', '$pool', 'api-host']) };
    expect((await asB('POST', '/v1/leases', { name: 'regular-host', start_date: at(31, 0), end_date: at(31, 3), reservations: [hostLease] })).status).toBe(201);
    for (const [lent, day] of [[bySlots, 30], [byHost, 31]] as const) {
      const ended = await eventually(async () => {
        const now = await leaseOf(lent.body.lease.id);
        return now.status === 'TERMINATED' ? now : undefined;
      });
      expect(ended.status_reason).toBe(`preempted: host needed by another lease from ${at(day, 0)}`);
      const left = await stack().db.pool.query('SELECT 1 FROM quantity_allocations WHERE lease_id = $1 UNION ALL SELECT 1 FROM host_allocations WHERE lease_id = $1', [lent.body.lease.id]);
      expect(left.rows).toEqual([]);
    }
  });
});

describe('placePreempting (the choice, pure)', () => {
  const SLOT = { VCPU: 2, MEMORY_MB: 1024, DISK_GB: 10 };
  const calendar = (hostIds: string[]): SlotCalendar => ({ hosts: hostIds.map((id) => ({ id, capacity: CAPACITY })), slots: [], wholeHost: [], cleaningMs: 0 });
  const lease = (leaseId: string, hostId: string, slots: number, fields: Partial<PreemptibleSlotLease> = {}): PreemptibleSlotLease => ({
    leaseId,
    started: false,
    cuttable: true,
    slots: Array.from({ length: slots }, () => ({ providerId: hostId, start: T0, end: T0 + 4 * H, amounts: SLOT })),
    wholeHost: [],
    ...fields,
  });
  const request = (amount: number) => ({ slot: SLOT, amount, affinity: null });

  it('takes room free of preemptible bookings first, then cuts a lease not started before a running one, and only as many as it needs', () => {
    const leases = [lease('a-running', '1', 1, { started: true }), lease('b-waiting', '1', 1), lease('c-waiting', '1', 1), lease('d-whole', '2', 0, { wholeHost: [{ hostId: '2', start: T0, end: T0 + 4 * H }] })];
    const place = (amount: number) => placePreempting(request(amount), calendar(['1', '2']), leases, T0 + H, T0 + 2 * H);
    // Host 1 has a slot free of everything: no cut.
    expect(place(1)).toEqual({ placed: new Map([['1', 1]]), cut: [] });
    // One more on host 1 by cutting one lease not started (by id), not the running one.
    expect(place(2)).toEqual({ placed: new Map([['1', 2]]), cut: ['b-waiting'] });
    // 4: the leases not started go first, the host lease on host 2 among them; the running one stays.
    expect(place(4)).toEqual({ placed: new Map([['1', 3], ['2', 1]]), cut: ['b-waiting', 'c-waiting', 'd-whole'] });
    // 8: everything.
    expect(place(8)?.cut).toEqual(['a-running', 'b-waiting', 'c-waiting', 'd-whole']);
  });

  it('never cuts a lease that would lose a slot already begun, and answers undefined when nothing else fits', () => {
    const kept = lease('kept', '1', 4, { started: true, cuttable: false });
    expect(placePreempting(request(1), calendar(['1']), [kept], T0 + H, T0 + 2 * H)).toBeUndefined();
    expect(placePreempting(request(1), calendar(['1']), [kept, lease('x', '1', 0)], T0 + H, T0 + 2 * H)).toBeUndefined();
    const cuttable = lease('running', '1', 4, { started: true });
    expect(placePreempting(request(1), calendar(['1']), [cuttable], T0 + H, T0 + 2 * H)).toEqual({ placed: new Map([['1', 1]]), cut: ['running'] });
  });
});
