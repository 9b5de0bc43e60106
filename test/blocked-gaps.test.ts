/**
 * The host calendar's read for a far earliest fit (issue 41, bench:offers): PostgreSQL answers a
 * host's bookings separated by gaps shorter than the lease as one interval. Checked against the
 * plain read: the merged intervals are the plain ones joined across exactly the short gaps, and
 * the earliest fit found from either is the same.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { blockedIntervals } from '../src/db/host-allocations';
import { searchEarliestFit, type Blocked } from '../src/domain/host-calendar';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { useTestStack } from '../dev-stack/stack';

const MIN = 60_000;
const T0 = Date.UTC(2099, 0, 1);

/** The plain intervals of each host joined where the gap to all before is below `gapMs` (what the SQL should answer). */
function mergedInJs(rows: Blocked[], gapMs: number): Blocked[] {
  const sorted = [...rows].sort((a, b) => a.hostId.localeCompare(b.hostId) || a.start - b.start || a.end - b.end);
  const merged: Blocked[] = [];
  for (const row of sorted) {
    const last = merged[merged.length - 1];
    if (last && last.hostId === row.hostId && row.start - last.end < gapMs) last.end = Math.max(last.end, row.end);
    else merged.push({ ...row });
  }
  return merged;
}

const byHostAndStart = (a: Blocked, b: Blocked) => a.hostId.localeCompare(b.hostId) || a.start - b.start;

describe('host bookings read with short gaps merged', () => {
  const stack = useTestStack();
  let hostIds: string[] = [];
  beforeAll(async () => {
    hostIds = [];
    for (let i = 0; i < 3; i++) hostIds.push(await insertHost(stack().db.pool, { name: `gaps-${i}` }));
  });

  it('answers the plain intervals joined across gaps shorter than asked, and the same earliest fit', async () => {
    const scenario = fc.record({
      hosts: fc.array(fc.array(fc.record({ gapMinutes: fc.integer({ min: 0, max: 600 }), minutes: fc.integer({ min: 1, max: 600 }) }), { maxLength: 12 }), { minLength: 3, maxLength: 3 }),
      forGood: fc.nat(2),
      fromMinutes: fc.nat(3000),
      untilMinutes: fc.option(fc.integer({ min: 1, max: 6000 }), { nil: null }),
      durationMinutes: fc.integer({ min: 1, max: 480 }),
      cleaningMinutes: fc.constantFrom(0, 30),
      needed: fc.integer({ min: 1, max: 3 }),
    });
    await fc.assert(
      fc.asyncProperty(scenario, async (s) => {
        const pool = stack().db.pool;
        await pool.query('DELETE FROM host_allocations WHERE host_id = ANY($1::bigint[])', [hostIds]);
        for (const [i, bookings] of s.hosts.entries()) {
          let at = T0;
          for (const [k, b] of bookings.entries()) {
            const start = at + b.gapMinutes * MIN;
            const end = start + b.minutes * MIN;
            const unbounded = i === s.forGood && k === bookings.length - 1;
            await pool.query(
              `INSERT INTO host_allocations (host_id, reservation_id, lease_id, project_id, during, blocks, booking_key)
               VALUES ($1, $2::uuid, $2::uuid, 'p', tstzrange(to_timestamp($3 / 1000.0), to_timestamp($4 / 1000.0)), tstzrange(to_timestamp($3 / 1000.0), CASE WHEN $5 THEN NULL ELSE to_timestamp($4 / 1000.0) END), $2::text)`,
              [hostIds[i], randomUUID(), start, end, unbounded],
            );
            if (unbounded) break;
            at = end;
          }
        }
        const window = { fromMs: T0 + s.fromMinutes * MIN, toMs: s.untilMinutes === null ? null : T0 + (s.fromMinutes + s.untilMinutes) * MIN, cleaningMs: s.cleaningMinutes * MIN, hostIds, withMaintenance: false };
        const gapMs = (s.durationMinutes + s.cleaningMinutes) * MIN;
        const asBlocked = (rows: Array<{ host_id: string; start_ms: number; end_ms: number }>) => rows.map((r) => ({ hostId: r.host_id, start: r.start_ms, end: r.end_ms }));
        const plain = asBlocked(await blockedIntervals(pool, window));
        const merged = asBlocked(await blockedIntervals(pool, { ...window, mergeGapsBelowMs: gapMs }));
        expect(merged.sort(byHostAndStart)).toEqual(mergedInJs(plain, gapMs).sort(byHostAndStart));
        const request = [{ reservationId: 'r', min: s.needed, max: s.needed, matches: () => true }];
        const search = (blocked: Blocked[]) => searchEarliestFit(request, { hostIds, blocked, cleaningMs: s.cleaningMinutes * MIN }, window.fromMs, s.durationMinutes * MIN, { align: (ms) => Math.ceil(ms / MIN) * MIN }).start;
        expect(search(merged)).toBe(search(plain));
      }),
      { numRuns: 60 },
    );
  });
});
