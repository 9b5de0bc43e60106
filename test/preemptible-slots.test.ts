/**
 * Preemptible instance slots (issue 43) in the slot and host calendars, against the real
 * PostgreSQL: a preemptible slot booking takes only capacity no regular booking holds; a regular
 * one that does not fit otherwise cuts the preemptible leases it needs (free capacity first, then
 * leases not started), in the create path's transaction only (the workflow's booking and offer
 * holds refuse); a regular host lease cuts the preemptible slots on its host; a cut committed
 * since the admission's first read is capacity, not a refusal.
 */
import type { Reservation } from '../src/domain/lease';
import type { ReservationContext } from '../src/domain/resource-plugin';
import { syncCapacityProviders } from '../src/db/quantity-allocations';
import { HostCalendar } from '../src/resources/physical-host/calendar';
import { physicalHostParams } from '../src/resources/physical-host/params';
import { bookInTransaction } from '../src/resources/shared/booking';
import { COMPUTE_KIND } from '../src/resources/shared/compute-providers';
import { InstanceSlotCalendar, VIRTUAL_INSTANCE } from '../src/resources/virtual-instance/calendar';
import { virtualInstanceParams } from '../src/resources/virtual-instance/params';
import { virtualInstance } from '../src/resources/virtual-instance';
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
