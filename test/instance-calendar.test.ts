/**
 * The instance-slot calendar against the real PostgreSQL: slots counted against the compute
 * providers' capacities; a host lease and instance slots never share a host over overlapping
 * windows (either way round, cleaning gap included, also under concurrent admissions); two
 * instance leases that fit only one after the other; an active reservation grown and shrunk.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { LeaseStatus, Reservation } from '../src/domain/lease';
import type { ReservationContext } from '../src/domain/resource-plugin';
import { syncCapacityProviders } from '../src/db/quantity-allocations';
import { HostCalendar } from '../src/resources/physical-host/calendar';
import { physicalHostParams } from '../src/resources/physical-host/params';
import { COMPUTE_KIND } from '../src/resources/shared/compute-providers';
import { InstanceSlotCalendar, VIRTUAL_INSTANCE } from '../src/resources/virtual-instance/calendar';
import { virtualInstanceParams } from '../src/resources/virtual-instance/params';
import { virtualInstance } from '../src/resources/virtual-instance';
import { pendingReservation, refusal, reservationContext } from '../dev-stack/fixtures/builders';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';

const H = 3_600_000;
const T0 = Date.UTC(2099, 5, 1);
const CLEANING = H / 2;
// Each host takes 4 slots of 2 vCPU: 8 vCPUs × ratio 1 (the capacity is Placement's, ratios applied).
const CAPACITY = { VCPU: 8, MEMORY_MB: 16_384, DISK_GB: 100 };

const instances = (params: Record<string, unknown>, id?: string): Reservation =>
  pendingReservation(VIRTUAL_INSTANCE, virtualInstanceParams.parse({ vcpus: 2, memory_mb: 1024, disk_gb: 10, amount: 1, affinity: 'None', resource_properties: '', ...params }), id);

function ctxFor(reservation: Reservation, startH: number, endH: number, status: LeaseStatus = 'PENDING'): ReservationContext<never> {
  return reservationContext({ reservation, leaseName: 'l', leaseStatus: status, startMs: T0 + startH * H, endMs: T0 + endH * H });
}


const total = (placement: Array<{ slots: number }>) => placement.reduce((n, p) => n + p.slots, 0);

describe('instance-slot calendar', () => {
  const database = useMigratedTestDatabase();
  let slots: InstanceSlotCalendar;
  let hosts: HostCalendar;

  /** Books as the plugin does: the reservation described by its type. */
  const book = async (ctx: ReservationContext<never>, options?: { keepOn?: Map<string, number> }) => slots.book(ctx, (await virtualInstance.describe(ctx.reservation, ctx.projectId)).spec, options);

  beforeAll(() => {
    slots = new InstanceSlotCalendar(database().pool, { cleaningMs: CLEANING });
    hosts = new HostCalendar(database().pool, { cleaningMs: CLEANING, randomChoice: false });
  });
  beforeEach(async () => {
    const { pool } = database();
    await pool.query('TRUNCATE host_allocations, quantity_allocations, capacity_providers, host_capabilities, hosts CASCADE');
    const ids = [await insertHost(pool, { name: 'node-1' }), await insertHost(pool, { name: 'node-2' }), await insertHost(pool, { name: 'node-3', capabilities: { gpu: 'true' } })];
    // node-4 is in Placement but not enrolled: never used for slots.
    await syncCapacityProviders(
      pool,
      COMPUTE_KIND,
      ['node-1', 'node-2', 'node-3', 'node-4'].map((name) => ({ uuid: `uuid-${name}`, name, host: name, capacity: CAPACITY, traits: [] })),
    );
    expect(ids).toHaveLength(3);
  });

  it('books slots within capacity, packs them, spreads them with affinity False, and honours resource_properties', async () => {
    const packed = await book(ctxFor(instances({ amount: 3 }), 0, 2));
    expect(packed.map((p) => [p.hypervisorHostname, p.slots])).toEqual([['node-1', 3]]);
    const next = await book(ctxFor(instances({ amount: 2 }), 1, 3));
    expect(next.map((p) => [p.hypervisorHostname, p.slots])).toEqual([['node-1', 1], ['node-2', 1]]); // node-1 first: it already serves slots
    const spread = await book(ctxFor(instances({ amount: 3, affinity: 'False' }), 10, 12));
    expect(spread.map((p) => p.slots)).toEqual([1, 1, 1]);
    const gpu = await book(ctxFor(instances({ amount: 2, resource_properties: '["==", "$gpu", "true"]' }), 5, 6));
    expect(gpu.map((p) => p.hypervisorHostname)).toEqual(['node-3']);
    const tooMany = await refusal(book(ctxFor(instances({ amount: 13 }), 10, 11)));
    expect(tooMany.type).toBe('LeaseConflict');
    expect(tooMany.message).toContain('can never fit on the 3 matching host(s)');
  });

  it('refuses with the earliest start when full, and two leases that fit only one after the other', async () => {
    await book(ctxFor(instances({ amount: 12 }), 0, 2));
    const refused = await refusal(book(ctxFor(instances({ amount: 1 }), 1, 3)));
    expect(refused.type).toBe('LeaseConflict');
    expect(refused.message).toContain('Not enough hosts available.');
    expect(refused.details?.[0]).toMatchObject({ earliest_start: expect.stringMatching(/^2099-06-01 02:00$/) });
    const after = await book(ctxFor(instances({ amount: 12 }), 2, 4));
    expect(total(after)).toBe(12);
  });

  it('never puts slots on a host a host lease holds (cleaning gap included), nor a host lease on a host with slots', async () => {
    // A host lease takes node-1 and node-2 for hours 0–2.
    const hostLease = pendingReservation('physical:host', physicalHostParams.parse({ min: 2, max: 2, hypervisor_properties: '', resource_properties: '' }));
    await hosts.book(ctxFor(hostLease, 0, 2));
    const during = await book(ctxFor(instances({ amount: 2 }), 1, 2));
    expect(during.map((p) => p.hypervisorHostname)).toEqual(['node-3']);
    // Within the cleaning gap after the host lease: node-3 only; once it has passed, node-1 again.
    expect((await book(ctxFor(instances({ amount: 4 }), 2.25, 3))).map((p) => [p.hypervisorHostname, p.slots])).toEqual([['node-3', 4]]);
    const refused = await refusal(book(ctxFor(instances({ amount: 1 }), 2.25, 3)));
    expect(refused.message).toContain('Not enough hosts available.');
    expect(refused.details?.[0]).toMatchObject({ earliest_start: '2099-06-01 02:30' });
    expect((await book(ctxFor(instances({ amount: 1 }), 2.5, 3))).map((p) => p.hypervisorHostname)).toEqual(['node-1']);
    // Now the other way: a host lease wanting every host while slots hold node-3.
    const everyHost = pendingReservation('physical:host', physicalHostParams.parse({ min: 3, max: 3, hypervisor_properties: '', resource_properties: '' }));
    expect((await refusal(hosts.book(ctxFor(everyHost, 1.5, 3)))).type).toBe('LeaseConflict');
    expect(await doubleBookings(database().pool)).toEqual([]);
  });

  it('under concurrent admissions, never mixes host leases and slots on a host, nor overbooks a host', async () => {
    const hostLeases = Array.from({ length: 3 }, () => hosts.book(ctxFor(pendingReservation('physical:host', physicalHostParams.parse({ min: 1, max: 1, hypervisor_properties: '', resource_properties: '' })), 0, 2)));
    const slotLeases = Array.from({ length: 6 }, () => book(ctxFor(instances({ amount: 2, affinity: 'True' }), 1, 3)));
    const results = await Promise.allSettled([...hostLeases, ...slotLeases]);
    const refusedOtherwise = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected' && !(r.reason instanceof ApplicationFailure && r.reason.type === 'LeaseConflict'));
    expect(refusedOtherwise).toEqual([]);
    expect(await doubleBookings(database().pool)).toEqual([]);
    const { rows } = await database().pool.query<{ provider_uuid: string; n: number }>(
      `SELECT provider_uuid, max(n)::int AS n FROM (SELECT provider_uuid, count(*) AS n FROM quantity_allocations GROUP BY provider_uuid, reservation_id) x GROUP BY provider_uuid`,
    );
    const { rows: perHost } = await database().pool.query<{ provider_uuid: string; n: number }>('SELECT provider_uuid, count(*)::int AS n FROM quantity_allocations GROUP BY provider_uuid');
    expect(perHost.every((r) => r.n <= 4)).toBe(true); // 4 slots of 2 vCPU per host, all overlapping
    expect(rows.length + results.slice(0, 3).filter((r) => r.status === 'fulfilled').length).toBeLessThanOrEqual(3);
  });

  it('an active reservation keeps its slots in place, grows from now, and shrinks by the idle slots first', async () => {
    const reservation = instances({ amount: 2, affinity: 'False' });
    const now = Date.now();
    const activeCtx = (amount: number, keepOn?: Map<string, number>) =>
      book(
        reservationContext({
          reservation: { ...reservation, params: { ...reservation.params, amount } },
          leaseId: 'cccccccc-cccc-4ccc-8ccc-cccccccccccc',
          leaseStatus: amount === 2 && !keepOn ? 'PENDING' : 'ACTIVE',
          startMs: now - H,
          endMs: now + 4 * H,
        }),
        { keepOn },
      );
    const first = await activeCtx(2);
    expect(first.map((p) => p.slots)).toEqual([1, 1]);
    const grown = await activeCtx(3);
    expect(grown.map((p) => p.hypervisorHostname)).toEqual(['node-1', 'node-2', 'node-3']);
    const servers = new Map([[grown[2].hostId, 1]]); // a server runs on node-3 only
    const shrunk = await activeCtx(1, servers);
    expect(shrunk.map((p) => p.hypervisorHostname)).toEqual(['node-3']);
    expect(total(await slots.placement(reservation.id))).toBe(1);
    expect(await doubleBookings(database().pool)).toEqual([]);
  });
});
