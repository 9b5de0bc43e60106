import fc from 'fast-check';
import { assignHosts, earliestFit, freeHosts, longestFit, preferenceOrder, searchEarliestFit, type CalendarSnapshot, type HostRequest } from '../src/domain/host-calendar';
import { wholeMinuteUp } from '../src/domain/dates';
import { matchesQuery, parsePropertyQuery, PropertyQueryError, queryKeys } from '../src/domain/property-query';

const H = 3_600_000;

function request(reservationId: string, min: number, max: number, hosts?: string[]): HostRequest {
  return { reservationId, min, max, matches: (id) => !hosts || hosts.includes(id) };
}

function calendar(blocked: Array<[string, number, number]>, cleaningMs = 0, hostIds = ['1', '2', '3']): CalendarSnapshot {
  return { hostIds, blocked: blocked.map(([hostId, start, end]) => ({ hostId, start, end: end + cleaningMs })), cleaningMs };
}

describe('host choice (Blazar semantics)', () => {
  it('prefers hosts with no future bookings, then the others', () => {
    const cal = calendar([['1', 10 * H, 12 * H]]);
    expect(preferenceOrder(cal, 0)).toEqual(['2', '3', '1']);
    expect(preferenceOrder(cal, 13 * H)).toEqual(['1', '2', '3']); // the booking is past
  });

  it('takes up to max, needs at least min', () => {
    const cal = calendar([['1', 0, 5 * H]]);
    const free = freeHosts(cal, H, 2 * H);
    expect([...free]).toEqual(['2', '3']);
    expect(assignHosts([request('r', 1, 5)], free, ['1', '2', '3'])?.get('r')).toEqual(['2', '3']);
    expect(assignHosts([request('r', 3, 3)], free, ['1', '2', '3'])).toBeUndefined();
  });

  it('excludes hosts that do not match', () => {
    const free = freeHosts(calendar([]), 0, H);
    expect(assignHosts([request('r', 1, 3, ['2'])], free, ['1', '2', '3'])?.get('r')).toEqual(['2']);
  });

  it('allows back-to-back bookings without cleaning time, and keeps the gap with it', () => {
    expect([...freeHosts(calendar([['1', 0, 2 * H]]), 2 * H, 3 * H)]).toContain('1');
    expect([...freeHosts(calendar([['1', 0, 2 * H]], H / 2), 2 * H, 3 * H)]).not.toContain('1');
    expect([...freeHosts(calendar([['1', 0, 2 * H]], H / 2), 2.5 * H, 3 * H)]).toContain('1');
    // …and the gap also applies before a later booking
    expect([...freeHosts(calendar([['1', 4 * H, 5 * H]], H / 2), 3 * H, 3.75 * H)]).not.toContain('1');
  });

  it('assigns competing reservations so that all minimums hold (a matching, not first come first served)', () => {
    // r1 can use 1 or 2; r2 only 1. Greedy r1 → 1 would starve r2.
    const result = assignHosts([request('r1', 1, 1, ['1', '2']), request('r2', 1, 1, ['1'])], new Set(['1', '2']), ['1', '2']);
    expect(result?.get('r1')).toEqual(['2']);
    expect(result?.get('r2')).toEqual(['1']);
  });

  it('finds the earliest start where the same request fits, exactly', () => {
    const cal = calendar([
      ['1', 0, 4 * H],
      ['2', 0, 6 * H],
      ['3', 0, 2 * H],
      ['3', 3 * H, 8 * H],
    ]);
    // two hosts for 2 h: host 1 is free from 4 h, host 3 only from 8 h, host 2 from 6 h → 6 h.
    expect(earliestFit([request('r', 2, 2)], cal, 0, 2 * H)).toBe(6 * H);
    // one host for 1 h: host 3 is free between 2 h and 3 h.
    expect(earliestFit([request('r', 1, 1)], cal, 0, H)).toBe(2 * H);
    // never: four hosts do not exist
    expect(earliestFit([request('r', 4, 4)], cal, 0, H)).toBeUndefined();
  });

  it('finds the longest window that fits from the requested start', () => {
    const cal = calendar([['1', 5 * H, 6 * H], ['2', 7 * H, 8 * H]], H / 4);
    expect(longestFit([request('r', 2, 2, ['1', '2'])], cal, H)).toBe(5 * H - H / 4 - H);
    expect(longestFit([request('r', 1, 1, ['1', '2'])], cal, H)).toBe(7 * H - H / 4 - H);
    expect(longestFit([request('r', 1, 1)], cal, H)).toBe(Infinity); // host 3 is never booked
    expect(longestFit([request('r', 1, 1, ['1'])], cal, 5.5 * H)).toBe(0);
  });
});

describe('property queries', () => {
  const host = { memory_mb: '8192', vcpus: '10', gpu: 'a100', rack: '9' };

  it('compares numbers as numbers, not as strings (a Blazar bug)', () => {
    expect(matchesQuery(parsePropertyQuery('[">=", "$vcpus", "9"]'), host)).toBe(true); // "10" >= "9" as text is false
    expect(matchesQuery(parsePropertyQuery('["<", "$rack", "10"]'), host)).toBe(true);
    expect(matchesQuery(parsePropertyQuery('["==", "$gpu", "a100"]'), host)).toBe(true);
    expect(matchesQuery(parsePropertyQuery('["!=", "$gpu", "a100"]'), host)).toBe(false);
  });

  it('combines with and / or / not, and treats "" and [] as any host', () => {
    expect(matchesQuery(parsePropertyQuery(['and', ['>=', '$memory_mb', '4096'], ['=', '$gpu', 'a100']]), host)).toBe(true);
    expect(matchesQuery(parsePropertyQuery(['or', ['>', '$vcpus', '64'], ['=', '$gpu', 'h100']]), host)).toBe(false);
    expect(matchesQuery(parsePropertyQuery(['not', ['=', '$gpu', 'h100']]), host)).toBe(true);
    expect(parsePropertyQuery('')).toEqual({ kind: 'any' });
    expect(parsePropertyQuery('[]')).toEqual({ kind: 'any' });
    expect(matchesQuery(parsePropertyQuery('["==", "$missing", "1"]'), host)).toBe(false);
    expect(queryKeys(parsePropertyQuery(['and', ['>=', '$memory_mb', '1'], ['not', ['=', '$gpu', 'x']]]))).toEqual(['memory_mb', 'gpu']);
  });

  it.each([
    ['[">=", "$vcpus"', 'not valid JSON'],
    ['{"op": ">="}', 'expected ["op", "$key", "value"]'],
    ['["~=", "$vcpus", "2"]', 'unknown operator "~="'],
    ['[">=", "vcpus", "2"]', 'must name a property, like "$memory_mb"'],
    ['[">=", "$vcpus", ["2"]]', 'the value must be a string or a number'],
    ['["and"]', '"and" needs at least one query'],
  ])('refuses %s with a clear message', (text, message) => {
    expect(() => parsePropertyQuery(text)).toThrow(PropertyQueryError);
    expect(() => parsePropertyQuery(text)).toThrow(message);
  });
});

describe('large requests and long calendars: counted, not materialised; same answers as brute force', () => {
  const MIN = 60_000;

  /** Whether the minimums fit on `free`, by trying every way of giving each host to one request or none. */
  function bruteMinimumsFit(requests: HostRequest[], free: string[]): boolean {
    if (requests.some((r) => r.min > free.length)) return false;
    const counts = requests.map(() => 0);
    const place = (k: number): boolean => {
      if (k === free.length) return requests.every((r, i) => counts[i] >= r.min);
      if (place(k + 1)) return true;
      for (let i = 0; i < requests.length; i++) {
        if (!requests[i].matches(free[k])) continue;
        counts[i]++;
        const found = place(k + 1);
        counts[i]--;
        if (found) return true;
      }
      return false;
    };
    return place(0);
  }
  const bruteFitsAt = (requests: HostRequest[], cal: CalendarSnapshot, start: number, end: number) => bruteMinimumsFit(requests, [...freeHosts(cal, start, end)]);

  const hostIds = ['1', '2', '3', '4', '5'];
  const requestsArb = fc.array(
    fc.record({ min: fc.oneof(fc.integer({ min: 0, max: 4 }), fc.constant(10_000)), extra: fc.integer({ min: 0, max: 3 }), hosts: fc.subarray(hostIds, { minLength: 1 }) }),
    { minLength: 1, maxLength: 3 },
  ).map((specs) => specs.map((r, i) => request(`r${i}`, r.min, r.min + r.extra, r.hosts)));
  // Times in seconds over two hours: bookings end on and off whole minutes.
  const calendarArb = fc.record({
    blocked: fc.array(fc.tuple(fc.constantFrom(...hostIds), fc.integer({ min: 0, max: 7_200 }), fc.integer({ min: 1, max: 3_600 }), fc.boolean()), { maxLength: 14 }),
    cleaningSeconds: fc.constantFrom(0, 90),
  }).map(({ blocked, cleaningSeconds }) => calendar(blocked.map(([host, start, length, forGood]) => [host, start * 1000, forGood ? Infinity : (start + length) * 1000]), cleaningSeconds * 1000, hostIds));

  it('assignHosts: a matching exactly when brute force finds one, each request between min and max distinct matching hosts', () => {
    fc.assert(
      fc.property(requestsArb, fc.subarray(hostIds), (requests, free) => {
        const assignment = assignHosts(requests, new Set(free), hostIds);
        expect(assignment !== undefined).toBe(bruteMinimumsFit(requests, free));
        if (!assignment) return;
        const all = [...assignment.values()].flat();
        expect(new Set(all).size).toBe(all.length);
        for (const r of requests) {
          const mine = assignment.get(r.reservationId)!;
          expect(mine.length).toBeGreaterThanOrEqual(r.min);
          expect(mine.length).toBeLessThanOrEqual(r.max);
          expect(mine.every((id) => free.includes(id) && r.matches(id))).toBe(true);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('earliestFit and longestFit: the first start (and the longest length) at which brute force fits', () => {
    fc.assert(
      fc.property(requestsArb, calendarArb, fc.integer({ min: 0, max: 3_600 }), fc.integer({ min: 1, max: 90 }), (requests, cal, fromSeconds, minutes) => {
        const from = fromSeconds * 1000;
        const duration = minutes * MIN;
        const candidates = [...new Set([from, ...cal.blocked.map((b) => b.end).filter((end) => end > from && Number.isFinite(end))])].sort((a, b) => a - b);
        expect(earliestFit(requests, cal, from, duration)).toBe(candidates.find((t) => bruteFitsAt(requests, cal, t, t + duration)));
        // On whole minutes only (a start handed back for reuse): every minute up to the last booking's end.
        const last = Math.max(from, ...cal.blocked.map((b) => (Number.isFinite(b.end) ? b.end : b.start)));
        let minute: number | undefined;
        for (let t = wholeMinuteUp(from); t <= wholeMinuteUp(last); t += MIN) {
          if (bruteFitsAt(requests, cal, t, t + duration)) {
            minute = t;
            break;
          }
        }
        expect(searchEarliestFit(requests, cal, from, duration, { align: wholeMinuteUp }).start).toBe(minute);
        const longest = longestFit(requests, cal, from);
        if (longest === 0) expect(bruteFitsAt(requests, cal, from, from + 1)).toBe(false);
        else if (longest === Infinity) expect(bruteFitsAt(requests, cal, from, last + 10 * H)).toBe(true);
        else {
          expect(bruteFitsAt(requests, cal, from, from + longest)).toBe(true);
          expect(bruteFitsAt(requests, cal, from, from + longest + 1)).toBe(false);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('answers requests for 10 000 hosts, and 16 000 of them at once, without a slot per host', () => {
    const cal = calendar([['1', 0, H], ['2', 2 * H, 3 * H]]);
    expect(assignHosts([request('huge', 10_000, 10_000)], new Set(['1', '2', '3']), ['1', '2', '3'])).toBeUndefined();
    const many = Array.from({ length: 16_000 }, (_, i) => request(`r${i}`, 10_000, 10_000));
    expect(assignHosts(many, new Set(['1', '2', '3']), ['1', '2', '3'])).toBeUndefined();
    expect(earliestFit(many, cal, 0, H)).toBeUndefined();
    expect(longestFit(many, cal, 0)).toBe(0);
    // Large maximums are just "as many as there are".
    expect(assignHosts([request('r', 1, 10_000)], new Set(['1', '2', '3']), ['1', '2', '3'])?.get('r')).toEqual(['1', '2', '3']);
    expect(earliestFit([request('r', 3, 10_000)], cal, 0, 2 * H)).toBe(3 * H);
  });

  it('finds the earliest slot among 100 000 bookings of one host, in one sweep', () => {
    // Back-to-back 1-minute bookings on host 1 with a 2-minute hole after the 100 000th minute.
    const blocked: Array<[string, number, number]> = [];
    for (let k = 0; k < 100_000; k++) blocked.push(['1', k * MIN, (k + 1) * MIN]);
    blocked.push(['1', 100_002 * MIN, 100_010 * MIN]);
    const cal = calendar(blocked, 0, ['1', '2', '3']);
    expect(earliestFit([request('r', 3, 3)], cal, 0, 2 * MIN)).toBe(100_000 * MIN);
    expect(earliestFit([request('r', 3, 3)], cal, 0, 3 * MIN)).toBe(100_010 * MIN);
    expect(longestFit([request('r', 3, 3)], cal, 100_000 * MIN)).toBe(2 * MIN);
  });

  it('gives up on its work budget and says how far it looked', () => {
    const blocked: Array<[string, number, number]> = [];
    for (let k = 0; k < 1_000; k++) blocked.push([String(k % 2 ? 1 : 2), k * MIN, (k + 2) * MIN]);
    const cal = calendar(blocked, 0, ['1', '2']);
    const unbounded = searchEarliestFit([request('r', 2, 2)], cal, 0, MIN);
    expect(unbounded).toMatchObject({ start: 1_001 * MIN, cutShort: false });
    const bounded = searchEarliestFit([request('r', 2, 2)], cal, 0, MIN, { workBudget: 100 });
    expect(bounded.start).toBeUndefined();
    expect(bounded.cutShort).toBe(true);
    expect(bounded.tried).toBeGreaterThan(0);
    expect(bounded.lastTried).toBeLessThan(1_001 * MIN);
  });
});
