/**
 * The whole-resource and instance-slot searches in two steps (wholeResourceFitNearFirst,
 * slotFitNearFirst: the bookings near the start first, the rest only when needed) against the
 * one-step searches over every booking: random hosts,
 * bookings, requests and near windows. Without limits the answers are the same; with the offers'
 * limits, the same as far as the limits ask (an earliest start up to `earliestUntilMs`, a longest
 * fit up to `longestUpToMs`), and the second step reads only what they need.
 */
import fc from 'fast-check';
import type { Blocked, CalendarSnapshot, HostRequest } from '../src/domain/host-calendar';
import { freeSlots, longestSlots, placeSlots, SlotFreeIndex, type SlotCalendar, type SlotRequest } from '../src/domain/instance-slots';
import { wholeResourceFit, wholeResourceFitNearFirst } from '../src/resources/shared/booking';
import { slotFit, slotFitNearFirst } from '../src/resources/virtual-instance/calendar';

const MIN = 60_000;
const H = 60 * MIN;
const T0 = Date.UTC(2099, 0, 1);

const scenario = fc.record({
  hosts: fc.integer({ min: 1, max: 5 }),
  bookings: fc.array(fc.record({ host: fc.nat(4), startH: fc.nat(200), hours: fc.integer({ min: 1, max: 48 }), forGood: fc.nat(9).map((n) => n === 0) }), { maxLength: 40 }),
  cleaningMinutes: fc.constantFrom(0, 30),
  requests: fc.array(fc.record({ min: fc.integer({ min: 1, max: 3 }), extra: fc.nat(2), evenOnly: fc.boolean() }), { minLength: 1, maxLength: 2 }),
  startH: fc.nat(150),
  durationH: fc.integer({ min: 1, max: 72 }),
  nearH: fc.integer({ min: 1, max: 200 }),
  longestUpToH: fc.option(fc.integer({ min: 1, max: 100 }), { nil: undefined }),
  earliestUntilH: fc.option(fc.nat(200), { nil: undefined }),
});

describe('whole-resource search, near bookings first', () => {
  it('answers as the one-step search does, within the limits asked', async () => {
    await fc.assert(
      fc.asyncProperty(scenario, async (s) => {
        const hostIds = Array.from({ length: s.hosts }, (_, i) => String(i + 1));
        const cleaningMs = s.cleaningMinutes * MIN;
        // Bookings of one host never overlap (as the exclusion constraint keeps them).
        const blocked: Blocked[] = [];
        for (const b of s.bookings) {
          const booking = { hostId: String((b.host % s.hosts) + 1), start: T0 + b.startH * H, end: b.forGood ? Infinity : T0 + (b.startH + b.hours) * H + cleaningMs };
          if (!blocked.some((o) => o.hostId === booking.hostId && o.start < booking.end && booking.start < o.end)) blocked.push(booking);
        }
        const requests: HostRequest[] = s.requests.map((r, i) => ({ reservationId: `r${i}`, min: r.min, max: r.min + r.extra, matches: (id) => !r.evenOnly || Number(id) % 2 === 0 }));
        const start = T0 + s.startH * H + 7 * MIN;
        const durationMs = s.durationH * H;
        // What the store reads (blockedIntervals): bookings overlapping [start, until + cleaning).
        let reads = 0;
        let readUntilMax = -Infinity;
        const snapshot = (until: number | null): Promise<CalendarSnapshot> => {
          reads++;
          readUntilMax = Math.max(readUntilMax, until ?? Infinity);
          return Promise.resolve({ hostIds, blocked: blocked.filter((b) => b.end > start && (until === null || b.start < until + cleaningMs)), cleaningMs });
        };
        const everything: CalendarSnapshot = { hostIds, blocked: blocked.filter((b) => b.end > start), cleaningMs };
        const exact = wholeResourceFit(requests, everything, start, durationMs);
        const nearUntil = start + s.nearH * H;

        const plain = await wholeResourceFitNearFirst(snapshot, requests, start, durationMs, nearUntil);
        expect({ earliest: plain.earliest, longestMs: plain.longestMs, cutShort: plain.cutShort }).toEqual({ earliest: exact.earliest, longestMs: exact.longestMs, cutShort: exact.cutShort });
        expect(reads).toBeLessThanOrEqual(2);

        const limits = {
          ...(s.longestUpToH !== undefined ? { longestUpToMs: s.longestUpToH * H } : {}),
          ...(s.earliestUntilH !== undefined ? { earliestUntilMs: start + s.earliestUntilH * H } : {}),
        };
        [reads, readUntilMax] = [0, -Infinity];
        const limited = await wholeResourceFitNearFirst(snapshot, requests, start, durationMs, nearUntil, limits);
        const earliestUntil = limits.earliestUntilMs ?? Infinity;
        const longestUpTo = limits.longestUpToMs ?? Infinity;
        if (exact.earliest !== undefined && exact.earliest <= earliestUntil) expect(limited.earliest).toBe(exact.earliest);
        else expect([undefined, exact.earliest]).toContain(limited.earliest);
        if (exact.longestMs >= longestUpTo) expect(limited.longestMs).toBeGreaterThanOrEqual(longestUpTo);
        else expect(limited.longestMs).toBe(exact.longestMs);
        // Never reads bookings of leases ending after what the limits need.
        expect(readUntilMax).toBeLessThanOrEqual(Math.max(earliestUntil + durationMs, start + longestUpTo));
      }),
      { numRuns: 500 },
    );
  });

  const slotScenario = fc.record({
    hosts: fc.array(fc.constantFrom(4, 8), { minLength: 1, maxLength: 3 }),
    slots: fc.array(fc.record({ host: fc.nat(2), startH: fc.nat(200), hours: fc.integer({ min: 1, max: 48 }), vcpus: fc.constantFrom(1, 2, 4) }), { maxLength: 40 }),
    wholeHost: fc.array(fc.record({ host: fc.nat(2), startH: fc.nat(200), hours: fc.integer({ min: 1, max: 24 }) }), { maxLength: 3 }),
    cleaningMinutes: fc.constantFrom(0, 30),
    leadMinutes: fc.constantFrom(0, 10),
    request: fc.record({ vcpus: fc.constantFrom(1, 2, 4), amount: fc.integer({ min: 1, max: 6 }), affinity: fc.constantFrom(null, true, false) }),
    startH: fc.nat(150),
    durationH: fc.integer({ min: 1, max: 72 }),
    nearH: fc.integer({ min: 1, max: 200 }),
    longestUpToH: fc.option(fc.integer({ min: 1, max: 100 }), { nil: undefined }),
    earliestUntilH: fc.option(fc.nat(200), { nil: undefined }),
  });

  it('answers for instance slots as the one-step slot search does, within the limits asked', async () => {
    await fc.assert(
      fc.asyncProperty(slotScenario, async (s) => {
        const hosts = s.hosts.map((vcpus, i) => ({ id: String(i + 1), capacity: { VCPU: vcpus } }));
        const hostOf = (n: number) => String((n % hosts.length) + 1);
        const calendar: SlotCalendar = {
          hosts,
          slots: s.slots.map((b) => ({ providerId: hostOf(b.host), start: T0 + b.startH * H, end: T0 + (b.startH + b.hours) * H, amounts: { VCPU: b.vcpus } })),
          wholeHost: s.wholeHost.map((b) => ({ hostId: hostOf(b.host), start: T0 + b.startH * H, end: T0 + (b.startH + b.hours) * H })),
          cleaningMs: s.cleaningMinutes * MIN,
        };
        const request: SlotRequest = { slot: { VCPU: s.request.vcpus }, amount: s.request.amount, affinity: s.request.affinity };
        const leadMs = s.leadMinutes * MIN;
        const start = T0 + s.startH * H + 7 * MIN;
        const from = start - leadMs;
        const durationMs = s.durationH * H;
        // What the calendar's snapshot reads: slots overlapping [from, until), host leases [from, until + cleaning).
        let readUntilMax = -Infinity;
        const snapshot = (until: number | null): Promise<SlotCalendar> => {
          readUntilMax = Math.max(readUntilMax, until ?? Infinity);
          const to = until ?? Infinity;
          return Promise.resolve({
            ...calendar,
            slots: calendar.slots.filter((b) => b.end > from && b.start < to),
            wholeHost: calendar.wholeHost.filter((b) => b.end > from && b.start < to + calendar.cleaningMs),
          });
        };
        const exact = slotFit(request, calendar, start, durationMs, leadMs);
        const nearUntil = start + s.nearH * H;
        const plain = await slotFitNearFirst(snapshot, request, start, durationMs, leadMs, {}, nearUntil);
        expect({ earliest: plain.earliest, longestMs: plain.longestMs, cutShort: plain.cutShort }).toEqual({ earliest: exact.earliest, longestMs: exact.longestMs, cutShort: exact.cutShort });

        const limits = {
          ...(s.longestUpToH !== undefined ? { longestUpToMs: s.longestUpToH * H } : {}),
          ...(s.earliestUntilH !== undefined ? { earliestUntilMs: start + s.earliestUntilH * H } : {}),
        };
        readUntilMax = -Infinity;
        const limited = await slotFitNearFirst(snapshot, request, start, durationMs, leadMs, limits, nearUntil);
        const earliestUntil = limits.earliestUntilMs ?? Infinity;
        const longestUpTo = limits.longestUpToMs ?? Infinity;
        if (exact.earliest !== undefined && exact.earliest <= earliestUntil) expect(limited.earliest).toBe(exact.earliest);
        else expect([undefined, exact.earliest]).toContain(limited.earliest);
        if (exact.longestMs >= longestUpTo) expect(limited.longestMs).toBeGreaterThanOrEqual(longestUpTo);
        else expect(limited.longestMs).toBe(exact.longestMs);
        expect(readUntilMax).toBeLessThanOrEqual(Math.max(earliestUntil + durationMs, start + longestUpTo));
      }),
      { numRuns: 500 },
    );
  });

  it('finds the longest slot window by bisection as the boundary-by-boundary walk does', () => {
    fc.assert(
      fc.property(slotScenario, (s) => {
        const hosts = s.hosts.map((vcpus, i) => ({ id: String(i + 1), capacity: { VCPU: vcpus } }));
        const hostOf = (n: number) => String((n % hosts.length) + 1);
        const calendar: SlotCalendar = {
          hosts,
          slots: s.slots.map((b) => ({ providerId: hostOf(b.host), start: T0 + b.startH * H, end: T0 + (b.startH + b.hours) * H, amounts: { VCPU: b.vcpus } })),
          wholeHost: s.wholeHost.map((b) => ({ hostId: hostOf(b.host), start: T0 + b.startH * H, end: T0 + (b.startH + b.hours) * H })),
          cleaningMs: s.cleaningMinutes * MIN,
        };
        const request: SlotRequest = { slot: { VCPU: s.request.vcpus }, amount: s.request.amount, affinity: s.request.affinity };
        const from = T0 + s.startH * H + 7 * MIN;
        // The walk: grow the window to each instant where a booking begins until it breaks.
        const boundaries = [...new Set([...calendar.slots.map((b) => b.start), ...calendar.wholeHost.map((b) => b.start - calendar.cleaningMs)].filter((t) => t > from))].sort((a, b) => a - b);
        let walked = placeSlots(request, calendar, from, from + 1) ? Infinity : 0;
        for (const boundary of walked ? boundaries : []) {
          if (!placeSlots(request, calendar, from, boundary + 1)) {
            walked = boundary - from;
            break;
          }
        }
        expect(longestSlots(request, calendar, from)).toBe(walked);
      }),
      { numRuns: 500 },
    );
  });

  it('counts free slots and fits from its index as freeSlots and placeSlots do over every window', () => {
    const indexScenario = fc.record({
      hosts: fc.array(fc.record({ vcpus: fc.constantFrom(4, 8), memory: fc.constantFrom(4096, 8192) }), { minLength: 1, maxLength: 3 }),
      slots: fc.array(fc.record({ host: fc.nat(2), startH: fc.nat(100), hours: fc.integer({ min: 0, max: 48 }), forGood: fc.nat(9).map((n) => n === 0), vcpus: fc.constantFrom(1, 2, 4), memory: fc.constantFrom(0, 1024, 4096) }), { maxLength: 30 }),
      wholeHost: fc.array(fc.record({ host: fc.nat(2), startH: fc.nat(100), hours: fc.integer({ min: 1, max: 24 }) }), { maxLength: 3 }),
      cleaningMinutes: fc.constantFrom(0, 30),
      request: fc.record({ vcpus: fc.constantFrom(0, 1, 2, 4), memory: fc.constantFrom(0, 1024, 2048), amount: fc.integer({ min: 0, max: 6 }), affinity: fc.constantFrom(null, true, false) }),
      windows: fc.array(fc.record({ fromH: fc.nat(120), fromMin: fc.constantFrom(0, 30), hours: fc.nat(60), minutes: fc.constantFrom(0, 1, 30) }), { minLength: 1, maxLength: 10 }),
    });
    fc.assert(
      fc.property(indexScenario, (s) => {
        const hosts = s.hosts.map((h, i) => ({ id: String(i + 1), capacity: { VCPU: h.vcpus, MEMORY_MB: h.memory } }));
        const hostOf = (n: number) => String((n % hosts.length) + 1);
        const calendar: SlotCalendar = {
          hosts,
          slots: s.slots.map((b) => ({ providerId: hostOf(b.host), start: T0 + b.startH * H, end: b.forGood ? Infinity : T0 + (b.startH + b.hours) * H, amounts: { VCPU: b.vcpus, MEMORY_MB: b.memory } })),
          wholeHost: s.wholeHost.map((b) => ({ hostId: hostOf(b.host), start: T0 + b.startH * H, end: T0 + (b.startH + b.hours) * H })),
          cleaningMs: s.cleaningMinutes * MIN,
        };
        const request: SlotRequest = { slot: { VCPU: s.request.vcpus, MEMORY_MB: s.request.memory }, amount: s.request.amount, affinity: s.request.affinity };
        const index = new SlotFreeIndex(calendar, request.slot);
        for (const w of s.windows) {
          const from = T0 + w.fromH * H + w.fromMin * MIN;
          const to = from + w.hours * H + w.minutes * MIN;
          if (to <= from) continue;
          expect(index.free(from, to)).toEqual(hosts.map((host) => freeSlots(host, calendar, request.slot, from, to)));
          expect(index.fits(request, from, to)).toBe(placeSlots(request, calendar, from, to) !== undefined);
        }
      }),
      { numRuns: 1000 },
    );
  });
});
