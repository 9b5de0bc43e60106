/**
 * Property-based proof against the real PostgreSQL: random hosts and random lease requests,
 * booked concurrently over separate connections, then moved and deleted concurrently.
 * Invariants: no host is ever booked twice for overlapping time; every admitted reservation got
 * between min and max matching hosts; every refusal was right (a brute-force search finds no fit).
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { ApplicationFailure } from '@temporalio/common';
import { HostCalendar } from '../src/resources/physical-host/calendar';
import type { ReservationContext } from '../src/domain/resource-plugin';
import { pendingReservation, reservationContext } from '../dev-stack/fixtures/builders';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';

const H = 3_600_000;
const T0 = Date.UTC(2099, 0, 1);

interface ReservationSpec {
  min: number;
  max: number;
  minVcpus: number;
}
interface LeaseSpec {
  start: number;
  hours: number;
  reservations: ReservationSpec[];
}

const reservationSpec = fc
  .record({ min: fc.integer({ min: 1, max: 2 }), extra: fc.integer({ min: 0, max: 2 }), minVcpus: fc.constantFrom(0, 4, 8) })
  .map(({ min, extra, minVcpus }) => ({ min, max: min + extra, minVcpus }));
const leaseSpec = fc.record({ start: fc.integer({ min: 0, max: 8 }), hours: fc.integer({ min: 1, max: 4 }), reservations: fc.array(reservationSpec, { minLength: 1, maxLength: 2 }) });
const scenario = fc.record({
  hosts: fc.array(fc.constantFrom(2, 4, 8), { minLength: 2, maxLength: 5 }),
  cleaningMinutes: fc.constantFrom(0, 30),
  first: fc.array(leaseSpec, { minLength: 4, maxLength: 12 }),
  second: fc.array(leaseSpec, { minLength: 2, maxLength: 6 }),
  deleteEvery: fc.integer({ min: 2, max: 3 }),
});

function context(spec: LeaseSpec): Array<ReservationContext<never>> {
  const leaseId = randomUUID();
  const reservations = spec.reservations.map((r) =>
    pendingReservation('physical:host', { min: r.min, max: r.max, hypervisor_properties: r.minVcpus ? JSON.stringify(['>=', '$vcpus', String(r.minVcpus)]) : '', resource_properties: '', before_end: 'default' }),
  );
  const startMs = T0 + spec.start * H;
  return reservations.map((reservation) => reservationContext({ leaseId, reservation, leaseReservations: reservations, startMs, endMs: startMs + spec.hours * H }));
}

/** Books every reservation of the lease the way the workflow does: one call each, in order. */
async function bookLease(calendar: HostCalendar, contexts: Array<ReservationContext<never>>): Promise<'admitted' | 'refused'> {
  try {
    for (const ctx of contexts) await calendar.book(ctx);
    return 'admitted';
  } catch (err) {
    if (err instanceof ApplicationFailure && err.type === 'LeaseConflict') {
      for (const ctx of contexts) await calendar.release(ctx, false);
      return 'refused';
    }
    throw err;
  }
}

interface Booking {
  host: string;
  start: number;
  end: number;
}

/** Brute force: try every way of giving free hosts to the lease's reservations. */
function fitsByBruteForce(spec: LeaseSpec, hostVcpus: Map<string, number>, bookings: Booking[], cleaningMs: number): boolean {
  const start = T0 + spec.start * H;
  const end = start + spec.hours * H;
  const free = [...hostVcpus.keys()].filter((host) => !bookings.some((b) => b.host === host && b.start < end + cleaningMs && start < b.end));
  const counts = spec.reservations.map(() => 0);
  const search = (i: number): boolean => {
    if (spec.reservations.every((r, k) => counts[k] >= r.min)) return true;
    if (i === free.length) return false;
    for (let k = -1; k < spec.reservations.length; k++) {
      if (k >= 0 && hostVcpus.get(free[i])! < spec.reservations[k].minVcpus) continue;
      if (k >= 0) counts[k]++;
      const ok = search(i + 1);
      if (k >= 0) counts[k]--;
      if (ok) return true;
    }
    return false;
  };
  return search(0);
}

describe('host calendar under concurrency (property-based, real PostgreSQL)', () => {
  const database = useMigratedTestDatabase();

  it('never double-books, respects min/max and queries, and refuses only what cannot fit', async () => {
    await fc.assert(
      fc.asyncProperty(scenario, async ({ hosts, cleaningMinutes, first, second, deleteEvery }) => {
        await database().pool.query('TRUNCATE host_allocations, host_capabilities, hosts RESTART IDENTITY CASCADE');
        const hostVcpus = new Map<string, number>();
        for (const [i, vcpus] of hosts.entries()) hostVcpus.set(await insertHost(database().pool, { name: `h${i}`, vcpus }), vcpus);
        const cleaningMs = cleaningMinutes * 60_000;
        const calendar = new HostCalendar(database().pool, { cleaningMs, randomChoice: true });

        // Wave 1: concurrent creations only, so the final state holds everything any refusal saw.
        const firstContexts = first.map(context);
        const outcomes = await Promise.all(firstContexts.map((contexts) => bookLease(calendar, contexts)));
        const { rows } = await database().pool.query<{ host: string; start: Date; end: Date; reservation_id: string }>(
          'SELECT host_id::text AS host, lower(during) AS start, upper(during) AS "end", reservation_id::text FROM host_allocations',
        );
        const bookings = rows.map((r) => ({ host: r.host, start: r.start.getTime(), end: r.end.getTime() + cleaningMs }));
        first.forEach((spec, i) => {
          if (outcomes[i] === 'refused') {
            expect({ refusedButFits: fitsByBruteForce(spec, hostVcpus, bookings, cleaningMs), spec }).toEqual({ refusedButFits: false, spec });
          } else {
            spec.reservations.forEach((r, k) => {
              const mine = rows.filter((row) => row.reservation_id === firstContexts[i][k].reservation.id);
              expect(mine.length).toBeGreaterThanOrEqual(r.min);
              expect(mine.length).toBeLessThanOrEqual(r.max);
              for (const row of mine) expect(hostVcpus.get(row.host)).toBeGreaterThanOrEqual(r.minVcpus);
            });
          }
        });
        expect(await doubleBookings(database().pool)).toEqual([]);

        // Wave 2: deletions, moves and new creations, all at once.
        const admitted = firstContexts.filter((_, i) => outcomes[i] === 'admitted');
        await Promise.all([
          ...admitted.map((contexts, i) =>
            i % deleteEvery === 0
              ? Promise.all(contexts.map((ctx) => calendar.release(ctx, false)))
              : bookLease(calendar, contexts.map((ctx) => ({ ...ctx, startMs: ctx.startMs + H, endMs: ctx.endMs + H }))),
          ),
          ...second.map((spec) => bookLease(calendar, context(spec))),
        ]);
        expect(await doubleBookings(database().pool)).toEqual([]);
      }),
      { numRuns: 25 },
    );
  }, 240_000);
});
