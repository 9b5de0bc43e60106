/**
 * One offer request reads a calendar window once (issue 41, bench:offers): every search the
 * planner runs for a request gets the same SearchReads, and a read covered by a wider one kept is
 * answered from it, narrowed, without reading again.
 */
import { planOffers, type OfferQuery } from '../src/domain/offers';
import type { Reservation } from '../src/domain/lease';
import type { FitLimits } from '../src/domain/resource-plugin';
import { SearchReads } from '../src/domain/search-reads';

const MIN = 60_000;
const start = Date.UTC(2099, 0, 1, 10);

describe('reads shared by the searches of one request', () => {
  it('hands every search of one request the same reads, and another request its own', async () => {
    const seen: Array<SearchReads | undefined> = [];
    const search = (_reservations: Reservation[], from: number, _durationMs: number, limits: FitLimits) => {
      seen.push(limits.reads);
      // Busy for the first day, free after: `later` offers, one search each.
      return Promise.resolve({ earliest: Math.max(from, start + 1440 * MIN), longestMs: 0, cutShort: false, tried: 1 });
    };
    const query: OfferQuery = { counts: [undefined], withCounts: () => [{ id: 'r', resource_type: 't', status: 'pending', params: {} }], startMs: start, durationMs: 60 * MIN, minDurationMs: 60 * MIN, limit: 4 };
    await planOffers(query, search);
    const first = seen.length;
    await planOffers(query, search);
    expect(first).toBeGreaterThan(2);
    expect(seen[0]).toBeInstanceOf(SearchReads);
    expect(seen.slice(0, first).every((r) => r === seen[0])).toBe(true);
    expect(seen.slice(first).every((r) => r === seen[first] && r !== seen[0])).toBe(true);
  });

  it('answers a window within a kept read from it, narrowed, and reads a wider one anew', async () => {
    const reads = new SearchReads();
    const loaded: Array<[number, number | null]> = [];
    const rows = [10, 20, 30, 40, 50];
    const read = (from: number, until: number | null) =>
      reads.read(
        'k',
        from,
        until,
        () => {
          loaded.push([from, until]);
          return Promise.resolve(rows.filter((t) => t >= from && (until === null || t < until)));
        },
        (wider) => wider.filter((t) => t >= from && (until === null || t < until)),
      );
    expect(await read(10, 35)).toEqual([10, 20, 30]);
    expect(await read(20, 30)).toEqual([20]);
    expect(await read(10, null)).toEqual(rows);
    expect(await read(30, 45)).toEqual([30, 40]);
    expect(await read(0, null)).toEqual(rows);
    expect(loaded).toEqual([
      [10, 35],
      [10, null],
      [0, null],
    ]);
  });

  it('reads again after a read failed', async () => {
    const reads = new SearchReads();
    let calls = 0;
    const load = () => (++calls === 1 ? Promise.reject(new Error('connection lost')) : Promise.resolve([1]));
    await expect(reads.read('k', 0, null, load, (w) => w)).rejects.toThrow('connection lost');
    await expect(reads.read('k', 0, null, load, (w) => w)).resolves.toEqual([1]);
    expect(calls).toBe(2);
  });
});
