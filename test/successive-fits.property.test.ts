/**
 * Several later windows from one sweep (searchSuccessiveFits; offers' `later` through
 * FitLimits.laterWindows) against the searches they replace: one earliest-fit search from each
 * window's end, on random hosts, bookings and requests. The first answer stays that of the
 * single search; each following window is what a search from the previous window's end finds;
 * where the windows stop, a search from there finds none (or stops short, as the sweep says).
 */
import fc from 'fast-check';
import { searchEarliestFit, searchSuccessiveFits, type Blocked, type CalendarSnapshot, type EarliestSearchLimits, type HostRequest } from '../src/domain/host-calendar';
import { wholeResourceFitNearFirst } from '../src/resources/shared/booking';

const MIN = 60_000;
const H = 60 * MIN;
const T0 = Date.UTC(2099, 0, 1);
const wholeMinuteUp = (ms: number) => Math.ceil(ms / MIN) * MIN;

const scenario = fc.record({
  hosts: fc.integer({ min: 1, max: 5 }),
  bookings: fc.array(fc.record({ host: fc.nat(4), startH: fc.nat(300), hours: fc.integer({ min: 1, max: 48 }), forGood: fc.nat(19).map((n) => n === 0) }), { maxLength: 50 }),
  cleaningMinutes: fc.constantFrom(0, 30),
  requests: fc.array(fc.record({ min: fc.integer({ min: 1, max: 3 }), extra: fc.nat(2), evenOnly: fc.boolean() }), { minLength: 1, maxLength: 2 }),
  startH: fc.nat(150),
  durationH: fc.integer({ min: 1, max: 72 }),
  more: fc.integer({ min: 1, max: 8 }),
  workBudget: fc.option(fc.integer({ min: 0, max: 60 }), { nil: undefined }),
  knownUntilH: fc.option(fc.nat(400), { nil: undefined }),
  nearH: fc.integer({ min: 1, max: 200 }),
  earliestUntilH: fc.option(fc.nat(300), { nil: undefined }),
});

function calendarOf(s: { hosts: number; bookings: Array<{ host: number; startH: number; hours: number; forGood: boolean }>; cleaningMinutes: number; requests: Array<{ min: number; extra: number; evenOnly: boolean }> }) {
  const hostIds = Array.from({ length: s.hosts }, (_, i) => String(i + 1));
  const cleaningMs = s.cleaningMinutes * MIN;
  // Bookings of one host never overlap (as the exclusion constraint keeps them).
  const blocked: Blocked[] = [];
  for (const b of s.bookings) {
    const booking = { hostId: String((b.host % s.hosts) + 1), start: T0 + b.startH * H, end: b.forGood ? Infinity : T0 + (b.startH + b.hours) * H + cleaningMs };
    if (!blocked.some((o) => o.hostId === booking.hostId && o.start < booking.end && booking.start < o.end)) blocked.push(booking);
  }
  const requests: HostRequest[] = s.requests.map((r, i) => ({ reservationId: `r${i}`, min: r.min, max: r.min + r.extra, matches: (id) => !r.evenOnly || Number(id) % 2 === 0 }));
  const calendar: CalendarSnapshot = { hostIds, blocked, cleaningMs };
  return { calendar, requests };
}

describe('several later windows from one sweep', () => {
  it('finds what one search from each window’s end finds (host calendar)', () => {
    fc.assert(
      fc.property(scenario, (s) => {
        const { calendar, requests } = calendarOf(s);
        const start = T0 + s.startH * H + 7 * MIN;
        const durationMs = s.durationH * H;
        const limits: EarliestSearchLimits = {
          align: wholeMinuteUp,
          ...(s.workBudget !== undefined ? { workBudget: s.workBudget } : {}),
          ...(s.knownUntilH !== undefined ? { knownUntil: T0 + s.knownUntilH * H } : {}),
        };
        const single = searchEarliestFit(requests, calendar, start, durationMs, limits);
        const swept = searchSuccessiveFits(requests, calendar, start, durationMs, limits, s.more);
        const { following, ...first } = swept;
        expect(first).toEqual(single);
        if (single.start === undefined) {
          expect(following).toBeUndefined();
          return;
        }
        // The searches the sweep replaces, one from each window's end.
        const repeated: number[] = [];
        let next = searchEarliestFit(requests, calendar, single.start + durationMs, durationMs, limits);
        for (let i = 0; i < s.more && next.start !== undefined; i++) {
          repeated.push(next.start);
          next = searchEarliestFit(requests, calendar, next.start + durationMs, durationMs, limits);
        }
        expect(following!.starts).toEqual(repeated);
        // Stopped without `resumeAt`: no search from there finds more, nor stops short.
        if (following!.resumeAt === undefined) expect({ start: next.start, cutShort: next.cutShort, beyond: next.beyondKnown }).toEqual({ start: undefined, cutShort: false, beyond: undefined });
        else expect(repeated.length === s.more || next.cutShort || next.beyondKnown !== undefined).toBe(true);
      }),
      { numRuns: 1000 },
    );
  });

  it('gives offers the windows that searches from each window’s end give (near bookings first, within earliestUntil)', async () => {
    await fc.assert(
      fc.asyncProperty(scenario, async (s) => {
        const { calendar, requests } = calendarOf(s);
        const start = T0 + s.startH * H + 7 * MIN;
        const durationMs = s.durationH * H;
        const snapshotFrom = (from: number) => (until: number | null): Promise<CalendarSnapshot> =>
          Promise.resolve({ ...calendar, blocked: calendar.blocked.filter((b) => b.end > from && (until === null || b.start < until + calendar.cleaningMs)) });
        const nearOf = (from: number) => from + s.nearH * H;
        const limits = { longestUpToMs: durationMs, ...(s.earliestUntilH !== undefined ? { earliestUntilMs: start + s.earliestUntilH * H } : {}) };
        const earliestUntil = limits.earliestUntilMs ?? Infinity;

        const single = await wholeResourceFitNearFirst(snapshotFrom(start), requests, start, durationMs, nearOf(start), limits);
        const swept = await wholeResourceFitNearFirst(snapshotFrom(start), requests, start, durationMs, nearOf(start), { ...limits, laterWindows: s.more });
        const { laterWindows, ...first } = swept;
        expect(first).toEqual(single);
        if (single.earliest === undefined || single.earliest === start) {
          expect(laterWindows).toBeUndefined();
          return;
        }
        expect(laterWindows).toBeDefined();
        let previous = single.earliest;
        for (const windowStart of laterWindows!.starts) {
          const from = previous + durationMs;
          expect((await wholeResourceFitNearFirst(snapshotFrom(from), requests, from, durationMs, nearOf(from), limits)).earliest).toBe(windowStart);
          previous = windowStart;
        }
        expect(laterWindows!.starts.length).toBeLessThanOrEqual(s.more);
        if (laterWindows!.resumeAt === undefined && laterWindows!.starts.length < s.more) {
          // No more windows within what the caller wants.
          const from = previous + durationMs;
          const after = await wholeResourceFitNearFirst(snapshotFrom(from), requests, from, durationMs, nearOf(from), limits);
          if (after.earliest !== undefined) expect(after.earliest).toBeGreaterThan(earliestUntil);
          else expect(after.cutShort).toBe(false);
        }
      }),
      { numRuns: 500 },
    );
  });
});
