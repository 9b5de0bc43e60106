/**
 * Preemptible bookings mixed in (issue 43), property-based against the real PostgreSQL: random
 * hosts, random regular and preemptible leases booked concurrently over separate connections.
 * Invariants once every transaction has committed: no two regular bookings overlap; no preemptible
 * booking overlaps a regular one (nor another); a regular lease was refused only when it fits
 * nowhere even with every preemptible booking free; every admitted regular reservation got between
 * min and max hosts; a preempted lease ends at one end on every host, and its workflow is owed it.
 */
import fc from 'fast-check';
import { HostCalendar } from '../src/resources/physical-host/calendar';
import { bookAsCreatePath, hostLeaseContext } from '../dev-stack/fixtures/host-bookings';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { insertHost } from '../dev-stack/fixtures/hosts';

const H = 3_600_000;
const T0 = Date.UTC(2099, 0, 1);

interface LeaseSpec {
  start: number;
  hours: number;
  min: number;
  max: number;
  preemptible: boolean;
}

const leaseSpec = fc
  .record({ start: fc.integer({ min: 0, max: 8 }), hours: fc.integer({ min: 1, max: 4 }), min: fc.integer({ min: 1, max: 2 }), extra: fc.integer({ min: 0, max: 1 }), preemptible: fc.boolean() })
  .map(({ extra, ...spec }) => ({ ...spec, max: spec.min + extra }));
const scenario = fc.record({
  hosts: fc.integer({ min: 2, max: 5 }),
  cleaningMinutes: fc.constantFrom(0, 30),
  // Preemptible leases first (most of them), then everything at once.
  lent: fc.array(leaseSpec.map((spec) => ({ ...spec, preemptible: true })), { minLength: 2, maxLength: 6 }),
  mixed: fc.array(leaseSpec, { minLength: 3, maxLength: 10 }),
});

const context = (spec: LeaseSpec) => hostLeaseContext(spec, T0);
const book = bookAsCreatePath;

/** Whether `min` hosts are free of every regular booking over the lease's window (its cleaning gap kept). */
function fitsIgnoringPreemptible(spec: LeaseSpec, hosts: string[], regular: Array<{ host: string; start: number; end: number }>, cleaningMs: number): boolean {
  const start = T0 + spec.start * H;
  const end = start + spec.hours * H;
  return hosts.filter((host) => !regular.some((b) => b.host === host && b.start < end + cleaningMs && start < b.end + cleaningMs)).length >= spec.min;
}

describe('host calendar with preemptible bookings under concurrency (property-based, real PostgreSQL)', () => {
  const database = useMigratedTestDatabase();

  it('never lets a preemptible booking overlap a regular one, never double-books regular leases, and refuses a regular lease only when even preemption cannot fit it', async () => {
    await fc.assert(
      fc.asyncProperty(scenario, async ({ hosts, cleaningMinutes, lent, mixed }) => {
        const pool = database().pool;
        await pool.query('TRUNCATE host_allocations, host_capabilities, hosts, lease_preemptions RESTART IDENTITY CASCADE');
        const hostIds: string[] = [];
        for (let i = 0; i < hosts; i++) hostIds.push(await insertHost(pool, { name: `p${i}` }));
        const cleaningMs = cleaningMinutes * 60_000;
        const calendar = new HostCalendar(pool, { cleaningMs, randomChoice: true });

        const lentContexts = lent.map(context);
        await Promise.all(lentContexts.map((ctx) => book(pool, calendar, ctx)));
        const contexts = mixed.map(context);
        const outcomes = await Promise.all(contexts.map((ctx) => book(pool, calendar, ctx)));

        const { rows } = await pool.query<{ host: string; start: number; end: number; reservation_id: string; lease_id: string; preemptible: boolean }>(
          `SELECT host_id::text AS host, (extract(epoch FROM lower(during)) * 1000)::float8 AS start, (extract(epoch FROM upper(during)) * 1000)::float8 AS "end",
                  reservation_id::text, lease_id::text, preemptible FROM host_allocations`,
        );
        const overlapping = await pool.query<{ a: boolean; b: boolean }>(
          'SELECT x.preemptible AS a, y.preemptible AS b FROM host_allocations x JOIN host_allocations y ON x.host_id = y.host_id AND x.id < y.id AND x.blocks && y.blocks',
        );
        expect(overlapping.rows).toEqual([]);

        const regular = rows.filter((r) => !r.preemptible);
        mixed.forEach((spec, i) => {
          if (spec.preemptible) return;
          const mine = regular.filter((row) => row.reservation_id === contexts[i].reservation.id);
          if (outcomes[i] === 'refused') {
            // Regular bookings only grew meanwhile: what the refusal saw, this holds at least.
            expect({ refusedButFits: fitsIgnoringPreemptible(spec, hostIds, regular, cleaningMs), spec }).toEqual({ refusedButFits: false, spec });
          } else {
            expect(mine.length).toBeGreaterThanOrEqual(spec.min);
            expect(mine.length).toBeLessThanOrEqual(spec.max);
          }
        });

        // A preempted lease: one end on every host, and that end owed to its workflow.
        const owed = new Map((await pool.query<{ lease_id: string; end_ms: number }>('SELECT lease_id::text, (extract(epoch FROM end_at) * 1000)::float8 AS end_ms FROM lease_preemptions')).rows.map((r) => [r.lease_id, r.end_ms]));
        for (const [leaseId, endMs] of owed) {
          const ends = new Set(rows.filter((r) => r.lease_id === leaseId).map((r) => r.end));
          expect(ends.size).toBeLessThanOrEqual(1);
          for (const end of ends) expect(end).toBe(endMs);
        }
        // A preemptible booking cut short is always owed: none ends before its lease's end without a row.
        for (const ctx of [...lentContexts, ...contexts]) {
          const mine = rows.filter((r) => r.lease_id === ctx.leaseId && r.preemptible && r.end < ctx.endMs);
          if (mine.length > 0) expect(owed.has(ctx.leaseId)).toBe(true);
        }
      }),
      { numRuns: 25 },
    );
  }, 240_000);
});
