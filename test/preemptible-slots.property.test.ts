/**
 * Preemptible instance slots mixed in (issue 43), property-based against the real PostgreSQL:
 * random slot leases, regular and preemptible, and a few host leases, booked concurrently over
 * separate connections as the API's create path books them. Invariants once every transaction has
 * committed: no provider over capacity among regular slots, nor with the preemptible ones; no slot
 * host row overlaps a whole-host booking; a regular lease was refused only when it fits nowhere
 * even with every preemptible booking free; a preempted lease ends at one end, owed to its workflow.
 */
import fc from 'fast-check';
import { ApplicationFailure } from '@temporalio/common';
import { placeSlots, type SlotCalendar } from '../src/domain/instance-slots';
import type { Reservation } from '../src/domain/lease';
import type { ReservationContext } from '../src/domain/resource-plugin';
import { syncCapacityProviders } from '../src/db/quantity-allocations';
import type { Pool } from '../src/db/pool';
import { HostCalendar } from '../src/resources/physical-host/calendar';
import { physicalHostParams } from '../src/resources/physical-host/params';
import { bookInTransaction } from '../src/resources/shared/booking';
import { COMPUTE_KIND } from '../src/resources/shared/compute-providers';
import { InstanceSlotCalendar, VIRTUAL_INSTANCE } from '../src/resources/virtual-instance/calendar';
import { virtualInstanceParams } from '../src/resources/virtual-instance/params';
import { virtualInstance } from '../src/resources/virtual-instance';
import { pendingReservation, reservationContext } from '../dev-stack/fixtures/builders';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { insertHost } from '../dev-stack/fixtures/hosts';

const H = 3_600_000;
const T0 = Date.UTC(2099, 8, 1);
/** 4 slots of 2 vCPU per host. */
const CAPACITY = { VCPU: 8, MEMORY_MB: 16_384, DISK_GB: 100 };
const SLOT = { VCPU: 2, MEMORY_MB: 1024, DISK_GB: 10 };

interface LeaseSpec {
  kind: 'slots' | 'host';
  start: number;
  hours: number;
  /** Slots asked (a host lease: hosts). */
  amount: number;
  preemptible: boolean;
}

const slotLease = fc.record({ kind: fc.constant('slots' as const), start: fc.integer({ min: 0, max: 6 }), hours: fc.integer({ min: 1, max: 3 }), amount: fc.integer({ min: 1, max: 5 }), preemptible: fc.boolean() });
const hostLease = fc.record({ kind: fc.constant('host' as const), start: fc.integer({ min: 0, max: 6 }), hours: fc.integer({ min: 1, max: 3 }), amount: fc.constant(1), preemptible: fc.boolean() });
const scenario = fc.record({
  hosts: fc.integer({ min: 2, max: 3 }),
  cleaningMinutes: fc.constantFrom(0, 30),
  // Preemptible slot leases first, then everything at once.
  lent: fc.array(slotLease.map((spec) => ({ ...spec, preemptible: true })), { minLength: 2, maxLength: 5 }),
  mixed: fc.array(fc.oneof({ arbitrary: slotLease, weight: 4 }, { arbitrary: hostLease, weight: 1 }), { minLength: 3, maxLength: 8 }),
});

function context(spec: LeaseSpec): ReservationContext<never> {
  const reservation: Reservation =
    spec.kind === 'slots'
      ? pendingReservation(VIRTUAL_INSTANCE, virtualInstanceParams.parse({ vcpus: SLOT.VCPU, memory_mb: SLOT.MEMORY_MB, disk_gb: SLOT.DISK_GB, amount: spec.amount, affinity: 'None', resource_properties: '', preemptible: spec.preemptible }))
      : pendingReservation('physical:host', physicalHostParams.parse({ min: spec.amount, max: spec.amount, hypervisor_properties: '', resource_properties: '', preemptible: spec.preemptible }));
  const startMs = T0 + spec.start * H;
  return reservationContext({ reservation, leaseReservations: [reservation], startMs, endMs: startMs + spec.hours * H });
}

/** As the API's create path books (the only one that may preempt): in its own transaction, preempting allowed. */
async function admit(pool: Pool, calendars: { slots: InstanceSlotCalendar; hosts: HostCalendar }, ctx: ReservationContext<never>): Promise<'admitted' | 'refused'> {
  try {
    if (ctx.reservation.resource_type === VIRTUAL_INSTANCE) {
      const { spec } = await virtualInstance.describe(ctx.reservation, ctx.projectId);
      await bookInTransaction(pool, (client) => calendars.slots.bookWithin(client, ctx, spec, { preempt: true }), { retryExclusion: true });
    } else {
      await bookInTransaction(pool, (client) => calendars.hosts.bookWithin(client, ctx, { preempt: true }), { retryExclusion: true });
    }
    return 'admitted';
  } catch (err) {
    if (err instanceof ApplicationFailure && err.type === 'LeaseConflict') return 'refused';
    throw err;
  }
}

interface SlotRow {
  host: string;
  start: number;
  end: number;
  lease_id: string;
  reservation_id: string;
  preemptible: boolean;
}

/** The most slots booked at once on each host (rows are one slot each), over the rows given. */
function peakSlots(rows: SlotRow[]): number {
  let peak = 0;
  for (const row of rows) peak = Math.max(peak, rows.filter((r) => r.host === row.host && r.start <= row.start && row.start < r.end).length);
  return peak;
}

describe('instance slots with preemptible bookings under concurrency (property-based, real PostgreSQL)', () => {
  const database = useMigratedTestDatabase();

  it('keeps every provider within capacity, slots off whole hosts, and refuses a regular lease only when even preemption cannot fit it', async () => {
    await fc.assert(
      fc.asyncProperty(scenario, async ({ hosts, cleaningMinutes, lent, mixed }) => {
        const pool = database().pool;
        await pool.query('TRUNCATE host_allocations, quantity_allocations, capacity_providers, host_capabilities, hosts, lease_preemptions RESTART IDENTITY CASCADE');
        const names = Array.from({ length: hosts }, (_, i) => `s${i}`);
        const hostIds: string[] = [];
        for (const name of names) hostIds.push(await insertHost(pool, { name }));
        await syncCapacityProviders(pool, COMPUTE_KIND, names.map((name) => ({ uuid: `uuid-${name}`, name, host: name, capacity: CAPACITY, traits: [] })));
        const cleaningMs = cleaningMinutes * 60_000;
        const calendars = { slots: new InstanceSlotCalendar(pool, { cleaningMs }), hosts: new HostCalendar(pool, { cleaningMs, randomChoice: true }) };

        const lentContexts = lent.map(context);
        await Promise.all(lentContexts.map((ctx) => admit(pool, calendars, ctx)));
        const contexts = mixed.map(context);
        const outcomes = await Promise.all(contexts.map((ctx) => admit(pool, calendars, ctx)));

        const slotRows = (
          await pool.query<SlotRow>(
            `SELECT h.id::text AS host, (extract(epoch FROM lower(q.blocks)) * 1000)::float8 AS start, (extract(epoch FROM upper(q.blocks)) * 1000)::float8 AS "end",
                    q.lease_id::text, q.reservation_id::text, q.preemptible
             FROM quantity_allocations q JOIN capacity_providers p ON p.uuid = q.provider_uuid JOIN hosts h ON h.hypervisor_hostname = p.name`,
          )
        ).rows;
        const hostRows = (
          await pool.query<SlotRow & { shared: boolean; blocked_until: number }>(
            `SELECT host_id::text AS host, (extract(epoch FROM lower(during)) * 1000)::float8 AS start, (extract(epoch FROM upper(during)) * 1000)::float8 AS "end",
                    (extract(epoch FROM upper(blocks)) * 1000)::float8 AS blocked_until, lease_id::text, reservation_id::text, preemptible, shared FROM host_allocations`,
          )
        ).rows;
        const slotsPerHost = CAPACITY.VCPU / SLOT.VCPU;
        expect({ regularPeak: peakSlots(slotRows.filter((r) => !r.preemptible)) <= slotsPerHost, allPeak: peakSlots(slotRows) <= slotsPerHost }).toEqual({ regularPeak: true, allPeak: true });
        const overlapping = await pool.query('SELECT 1 FROM host_allocations x JOIN host_allocations y ON x.host_id = y.host_id AND x.id < y.id AND x.blocks && y.blocks AND NOT (x.shared AND y.shared)');
        expect(overlapping.rows).toEqual([]);

        const regularSlots = slotRows.filter((r) => !r.preemptible);
        const regularHostRows = hostRows.filter((r) => !r.preemptible);
        mixed.forEach((spec, i) => {
          if (spec.preemptible) return;
          const ctx = contexts[i];
          if (outcomes[i] === 'admitted') {
            const mine = spec.kind === 'slots' ? regularSlots : regularHostRows;
            expect(mine.filter((r) => r.reservation_id === ctx.reservation.id)).toHaveLength(spec.amount);
            return;
          }
          // Regular bookings only grew meanwhile: what the refusal saw, this holds at least.
          let fits: boolean;
          if (spec.kind === 'slots') {
            const calendar: SlotCalendar = {
              hosts: hostIds.map((id) => ({ id, capacity: CAPACITY })),
              slots: regularSlots.map((r) => ({ providerId: r.host, start: r.start, end: r.end, amounts: SLOT })),
              wholeHost: regularHostRows.filter((r) => !r.shared).map((r) => ({ hostId: r.host, start: r.start, end: r.blocked_until })),
              cleaningMs,
            };
            fits = placeSlots({ slot: SLOT, amount: spec.amount, affinity: null }, calendar, ctx.startMs, ctx.endMs) !== undefined;
          } else {
            fits = hostIds.some((host) => !regularHostRows.some((b) => b.host === host && b.start < ctx.endMs + cleaningMs && ctx.startMs < b.blocked_until));
          }
          expect({ refusedButFits: fits, spec }).toEqual({ refusedButFits: false, spec });
        });

        // A preempted lease: one end on every row, and that end owed to its workflow; a preemptible lease cut short is always owed.
        const owed = new Map((await pool.query<{ lease_id: string; end_ms: number }>('SELECT lease_id::text, (extract(epoch FROM end_at) * 1000)::float8 AS end_ms FROM lease_preemptions')).rows.map((r) => [r.lease_id, r.end_ms]));
        for (const [leaseId, endMs] of owed) {
          const ends = new Set([...slotRows, ...hostRows].filter((r) => r.lease_id === leaseId).map((r) => r.end));
          expect([...ends].filter((end) => end !== endMs)).toEqual([]);
        }
        for (const ctx of [...lentContexts, ...contexts]) {
          const cutShort = [...slotRows, ...hostRows].some((r) => r.lease_id === ctx.leaseId && r.preemptible && r.end < ctx.endMs);
          if (cutShort) expect(owed.has(ctx.leaseId)).toBe(true);
        }
      }),
      { numRuns: 15 },
    );
  }, 240_000);
});
