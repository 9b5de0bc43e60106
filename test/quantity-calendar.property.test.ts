/**
 * The quantity calendar (server footprints now, bandwidth next) proved two ways:
 * - pure: peakUsage and earliestQuantityFit against a brute force over every minute;
 * - against the real PostgreSQL: random providers and random requests booked concurrently over
 *   separate connections, some deleted meanwhile. Invariants: at no instant does any provider carry
 *   more than its capacity of any resource class; every refusal was right (nothing fitted then);
 *   a server is never in two overlapping bookings.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { ApplicationFailure } from '@temporalio/common';
import { earliestQuantityFit, fits, longestQuantityFit, peakUsage, searchEarliestQuantityFit, type QuantityBooking } from '../src/domain/quantity-calendar';
import { wholeMinuteUp } from '../src/domain/dates';
import type { ReservationContext } from '../src/domain/resource-plugin';
import { QuantityCalendar, type CapacityProvider } from '../src/resources/shared/quantity-bookings';
import { pendingReservation, reservationContext } from '../dev-stack/fixtures/builders';
import { useMigratedTestDatabase } from '../dev-stack/db';

const M = 60_000;
const H = 60 * M;
const T0 = Date.UTC(2099, 0, 1);

const booking = (providerId: string) =>
  fc.record({ start: fc.integer({ min: 0, max: 20 }), length: fc.integer({ min: 1, max: 8 }), vcpu: fc.integer({ min: 1, max: 6 }) }).map(
    ({ start, length, vcpu }): QuantityBooking => ({ providerId, start: start * M, end: (start + length) * M, amounts: { VCPU: vcpu } }),
  );

/** The total at each whole minute (bookings here start and end on whole minutes). */
function bruteUsage(bookings: QuantityBooking[], minute: number): number {
  return bookings.filter((b) => b.start <= minute * M && minute * M < b.end).reduce((sum, b) => sum + (b.amounts.VCPU ?? 0), 0);
}

describe('quantity calendar, pure', () => {
  it('peakUsage is the highest total at any instant of the window', () => {
    fc.assert(
      fc.property(fc.array(booking('p'), { maxLength: 12 }), fc.integer({ min: 0, max: 25 }), fc.integer({ min: 1, max: 10 }), (bookings, from, length) => {
        let brute = 0;
        for (let minute = from; minute < from + length; minute++) brute = Math.max(brute, bruteUsage(bookings, minute));
        expect(peakUsage(bookings, from * M, (from + length) * M).VCPU ?? 0).toBe(brute);
      }),
      { numRuns: 300 },
    );
  });

  it('earliestQuantityFit finds the first minute where some provider fits, and none earlier', () => {
    fc.assert(
      fc.property(
        fc.array(booking('a'), { maxLength: 8 }),
        fc.array(booking('b'), { maxLength: 8 }),
        fc.integer({ min: 1, max: 12 }),
        fc.integer({ min: 1, max: 6 }),
        (onA, onB, vcpu, length) => {
          const providers = [
            { id: 'a', capacity: { VCPU: 10 } },
            { id: 'b', capacity: { VCPU: 8 } },
          ];
          const bookings = [...onA, ...onB];
          const found = earliestQuantityFit(providers, bookings, { VCPU: vcpu }, 0, length * M);
          const fitsAt = (minute: number) => providers.some((p) => fits(p, bookings, { VCPU: vcpu }, minute * M, (minute + length) * M));
          let brute: number | undefined;
          for (let minute = 0; minute <= 40; minute++) {
            if (fitsAt(minute)) {
              brute = minute * M;
              break;
            }
          }
          expect(found?.start).toBe(brute);
          if (found) expect(fits(providers.find((p) => p.id === found.providerId)!, bookings, { VCPU: vcpu }, found.start, found.start + length * M)).toBe(true);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('longestQuantityFit runs until the first minute the request no longer fits on the best provider', () => {
    fc.assert(
      fc.property(fc.array(booking('a'), { maxLength: 10 }), fc.integer({ min: 1, max: 12 }), fc.integer({ min: 0, max: 25 }), (bookings, vcpu, from) => {
        let brute = Infinity;
        for (let minute = from; minute <= 40; minute++) {
          if (bruteUsage(bookings, minute) + vcpu > 10) {
            brute = (minute - from) * M;
            break;
          }
        }
        expect(longestQuantityFit([{ id: 'a', capacity: { VCPU: 10 } }], bookings, { VCPU: vcpu }, from * M)).toBe(brute);
      }),
      { numRuns: 300 },
    );
  });

  it('with starts on whole minutes, finds the first whole minute that fits after bookings ending on seconds', () => {
    fc.assert(
      fc.property(fc.array(booking('a'), { maxLength: 8 }), fc.integer({ min: 1, max: 59 }), fc.integer({ min: 1, max: 10 }), fc.integer({ min: 1, max: 6 }), (minutes, seconds, vcpu, length) => {
        const bookings = minutes.map((b) => ({ ...b, end: b.end + seconds * 1000 })); // end on seconds
        const provider = { id: 'a', capacity: { VCPU: 10 } };
        const found = searchEarliestQuantityFit([provider], bookings, { VCPU: vcpu }, 0, length * M, { align: wholeMinuteUp }).fit;
        let brute: number | undefined;
        for (let minute = 0; minute <= 40; minute++) {
          if (fits(provider, bookings, { VCPU: vcpu }, minute * M, (minute + length) * M)) {
            brute = minute * M;
            break;
          }
        }
        expect(found?.start).toBe(brute);
      }),
      { numRuns: 300 },
    );
  });

  it('gives up on its work budget and says how far it looked', () => {
    const bookings = Array.from({ length: 1_000 }, (_, k): QuantityBooking => ({ providerId: 'a', start: k * M, end: (k + 2) * M, amounts: { VCPU: 6 } }));
    const provider = { id: 'a', capacity: { VCPU: 10 } };
    expect(searchEarliestQuantityFit([provider], bookings, { VCPU: 6 }, 0, M).fit).toEqual({ start: 1_001 * M, providerId: 'a' });
    const bounded = searchEarliestQuantityFit([provider], bookings, { VCPU: 6 }, 0, M, { workBudget: 10_000 });
    expect(bounded).toMatchObject({ fit: undefined, cutShort: true });
    expect(bounded.lastTried).toBeLessThan(1_001 * M);
  });
});

describe('quantity calendar in PostgreSQL, concurrent bookings', () => {
  const database = useMigratedTestDatabase();
  let calendar: QuantityCalendar;

  beforeAll(() => {
    calendar = new QuantityCalendar(database().pool);
  });

  // Two resource classes (like a bandwidth provider's egress and ingress): each must hold on its own.
  const EGR = 'NET_BW_EGR_KILOBIT_PER_SEC';
  const IGR = 'NET_BW_IGR_KILOBIT_PER_SEC';
  const request = {
    start: fc.integer({ min: 0, max: 10 }),
    hours: fc.integer({ min: 1, max: 4 }),
    egress: fc.integer({ min: 1, max: 8 }),
    ingress: fc.integer({ min: 0, max: 8 }),
    server: fc.integer({ min: 0, max: 5 }),
  };
  const scenario = fc.record({
    capacities: fc.array(fc.record({ egress: fc.integer({ min: 4, max: 16 }), ingress: fc.integer({ min: 4, max: 16 }) }), { minLength: 1, maxLength: 3 }),
    requests: fc.array(fc.record(request), { minLength: 4, maxLength: 14 }),
    // Sometimes none is deleted: then every refusal can be checked against the final bookings.
    deleteEvery: fc.option(fc.integer({ min: 2, max: 4 }), { nil: undefined }),
  });
  const amountsOf = (r: { egress: number; ingress: number }): Record<string, number> => (r.ingress > 0 ? { [EGR]: r.egress, [IGR]: r.ingress } : { [EGR]: r.egress });

  it('never overfills a provider in any resource class and never refuses what fitted', async () => {
    let refusalsChecked = 0;
    await fc.assert(
      fc.asyncProperty(scenario, async ({ capacities, requests, deleteEvery }) => {
        await database().pool.query('TRUNCATE quantity_lendings, quantity_allocations, capacity_providers');
        const providers: CapacityProvider[] = capacities.map((c, i) => ({ uuid: randomUUID(), name: `node-${i}`, host: `node-${i}`, capacity: { [EGR]: c.egress, [IGR]: c.ingress }, traits: [] }));
        await calendar.syncProviders('bandwidth', providers);
        const servers = Array.from({ length: 6 }, () => randomUUID());

        const outcomes = await Promise.all(
          requests.map(async (r, i) => {
            const ctx = contextFor(r.start, r.hours);
            try {
              await calendar.book(ctx, { kind: 'bandwidth', amounts: amountsOf(r), subject: servers[r.server], describe: `request ${i}`, matches: () => true });
              if (deleteEvery !== undefined && i % deleteEvery === 0) await calendar.release(ctx.reservation.id, false);
              return { ok: true as const };
            } catch (err) {
              if (!(err instanceof ApplicationFailure) || err.type !== 'LeaseConflict') throw err;
              return { ok: false as const, r };
            }
          }),
        );

        const { rows } = await database().pool.query<{ provider_uuid: string; subject: string; amounts: Record<string, number>; start_ms: number; end_ms: number }>(
          `SELECT provider_uuid, subject, amounts, (extract(epoch FROM lower(blocks)) * 1000)::float8 AS start_ms,
                  (extract(epoch FROM upper(blocks)) * 1000)::float8 AS end_ms FROM quantity_allocations`,
        );
        const booked: QuantityBooking[] = rows.map((row) => ({ providerId: row.provider_uuid, start: row.start_ms, end: row.end_ms, amounts: row.amounts }));
        // Capacity holds, per class, at every instant where something begins.
        for (const p of providers) {
          const mine = booked.filter((b) => b.providerId === p.uuid);
          for (const b of mine) {
            const peak = peakUsage(mine, b.start, b.end);
            expect(peak[EGR] ?? 0).toBeLessThanOrEqual(p.capacity[EGR]);
            expect(peak[IGR] ?? 0).toBeLessThanOrEqual(p.capacity[IGR]);
          }
        }
        // A server is in at most one booking at any instant.
        for (const a of rows) {
          const clash = rows.filter((b) => b !== a && b.subject === a.subject && b.start_ms < a.end_ms && a.start_ms < b.end_ms);
          expect(clash).toEqual([]);
        }
        // With no deletions, what a refused request saw is a subset of the final bookings: had it fitted
        // then, it would still fit now, unless its server was booked over the window.
        if (deleteEvery !== undefined) return;
        for (const outcome of outcomes) {
          if (outcome.ok) continue;
          const { r } = outcome;
          const from = T0 + r.start * H;
          const to = from + r.hours * H;
          const serverTaken = rows.some((row) => row.subject === servers[r.server] && row.start_ms < to && from < row.end_ms);
          const anyFits = providers.some((p) => fits({ id: p.uuid, capacity: p.capacity }, booked, amountsOf(r), from, to));
          expect(serverTaken || !anyFits).toBe(true);
          refusalsChecked++;
        }
      }),
      { numRuns: 30 },
    );
    expect(refusalsChecked).toBeGreaterThan(0); // the refusal check did run
  });
});

function contextFor(startHour: number, hours: number): ReservationContext {
  return reservationContext({ reservation: pendingReservation('virtual:server'), startMs: T0 + startHour * H, endMs: T0 + (startHour + hours) * H });
}
