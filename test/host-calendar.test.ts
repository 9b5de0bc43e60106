import { assignHosts, earliestFit, freeHosts, longestFit, preferenceOrder, type CalendarSnapshot, type HostRequest } from '../src/domain/host-calendar';
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
