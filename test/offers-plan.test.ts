/**
 * The offer planner (src/domain/offers.ts) over a search handed in: which kinds it finds, their
 * order, and its work bound (searches per request, `fewer` by bisection).
 */
import { MAX_OFFER_SEARCHES, extensionSteps, planOffers, type LeaseSearch, type OfferQuery } from '../src/domain/offers';
import type { Reservation } from '../src/domain/lease';
import type { FitLimits } from '../src/domain/resource-plugin';

const MIN = 60_000;
const start = Date.UTC(2099, 0, 1, 10);
const slots = (amount: number): Reservation => ({ id: 'r', resource_type: 'test:slots', status: 'pending', params: { amount } });
const countOf = (reservations: Reservation[]) => reservations[0].params.amount as number;

/** A calendar of `free` slots from the start until `busyAt` (relative ms), none until `freeAgain`, then `free` again for ever. */
function calendar(free: number, busyAt: number, freeAgain: number): LeaseSearch & { calls: number } {
  // Exact whatever the limits asked (a calendar may always answer more than the limits need).
  const search = ((reservations: Reservation[], from: number, durationMs: number, _limits: FitLimits) => {
    search.calls++;
    const wanted = countOf(reservations);
    if (wanted > free) return Promise.resolve({ longestMs: 0, cutShort: false, tried: 1 });
    const t = from - start;
    const longestMs = t >= freeAgain ? Infinity : t < busyAt ? busyAt - t : 0;
    const earliest = longestMs >= durationMs ? from : start + Math.max(t, freeAgain);
    return Promise.resolve({ earliest, longestMs, cutShort: false, tried: 1 });
  }) as LeaseSearch & { calls: number };
  search.calls = 0;
  return search;
}

const query = (asked: number, least: number, more: Partial<OfferQuery> = {}): OfferQuery => ({
  counts: [{ asked, least }],
  withCounts: (counts) => [slots(counts[0]!)],
  startMs: start,
  durationMs: 120 * MIN,
  minDurationMs: 120 * MIN,
  limit: 5,
  ...more,
});

describe('planOffers', () => {
  it('offers only `exact` when the lease fits as asked', async () => {
    const plan = await planOffers(query(4, 4), calendar(8, 600 * MIN, 700 * MIN));
    expect(plan.offers.map((o) => [o.kind, o.startMs, o.endMs])).toEqual([['exact', start, start + 120 * MIN]]);
  });

  it('lists later, shorter and fewer offers, best first, later windows to fill the limit', async () => {
    // 37 slots; busy from 60 min to 180 min. Asking 50 (more than exist: never later, never shorter), accepting 10:
    // fewer does not last the 2 h from the start (busy at 60 min): nothing to offer.
    const none = await planOffers(query(50, 10, { minDurationMs: 30 * MIN }), calendar(37, 60 * MIN, 180 * MIN));
    expect(none.offers).toEqual([]);
    const roomy = calendar(37, 600 * MIN, 700 * MIN);
    const fewer = await planOffers(query(50, 10), roomy);
    expect(fewer.offers.map((o) => [o.kind, countOf(o.reservations)])).toEqual([['fewer', 37]]);
    const all = await planOffers(query(30, 10, { minDurationMs: 30 * MIN }), calendar(37, 60 * MIN, 180 * MIN));
    expect(all.offers.map((o) => [o.kind, (o.startMs - start) / MIN, (o.endMs - start) / MIN])).toEqual([
      ['later', 180, 300],
      ['later', 300, 420],
      ['later', 420, 540],
      ['later', 540, 660],
      ['shorter', 0, 60],
    ]);
  });

  it('finds the largest count by bisection, within the search bound, even for 10 000', async () => {
    const search = calendar(4321, 10_000 * MIN, 20_000 * MIN);
    const plan = await planOffers(query(10_000, 1, { limit: 1 }), search);
    expect(plan.offers.map((o) => [o.kind, countOf(o.reservations)])).toEqual([['fewer', 4321]]);
    expect(search.calls).toBeLessThanOrEqual(MAX_OFFER_SEARCHES);
    expect(search.calls).toBeLessThan(20);
    expect(plan.cutShort).toBe(false);
  });

  it('stops at MAX_OFFER_SEARCHES whatever the limit, and says so', async () => {
    // Free for 2 h windows one after another, never from the start: later windows up to the bound.
    let calls = 0;
    const endless: LeaseSearch = (_reservations, from) => {
      calls++;
      return Promise.resolve({ earliest: from + 180 * MIN, longestMs: 0, cutShort: false, tried: 1 });
    };
    const plan = await planOffers(query(1, 1, { limit: 1_000 }), endless);
    expect(calls).toBe(MAX_OFFER_SEARCHES);
    expect(plan.offers.length).toBe(MAX_OFFER_SEARCHES);
    expect(plan.cutShort).toBe(true);
  });

  it('takes later windows from the first search’s sweep, and searches on only where the sweep stopped short', async () => {
    // Free for 2 h windows every 3 h, never from the start; the sweep finds `found` windows after the first.
    const sweeping = (found: number, stoppedShort: boolean) => {
      const asked: FitLimits[] = [];
      const search: LeaseSearch = (_reservations, from, _durationMs, limits) => {
        asked.push(limits);
        const earliest = from + 180 * MIN;
        const starts = Array.from({ length: Math.min(found, limits.laterWindows ?? 0) }, (_, i) => earliest + (i + 1) * 300 * MIN);
        const laterWindows = limits.laterWindows ? { laterWindows: { starts, ...(stoppedShort ? { resumeAt: starts.at(-1)! + 120 * MIN } : {}) } } : {};
        return Promise.resolve({ earliest, longestMs: 0, cutShort: false, tried: 1, ...laterWindows });
      };
      return { search, asked };
    };
    const complete = sweeping(10, false);
    const plan = await planOffers(query(1, 1, { limit: 4 }), complete.search);
    expect(plan.offers.map((o) => [o.kind, (o.startMs - start) / MIN])).toEqual([['later', 180], ['later', 480], ['later', 780], ['later', 1080]]);
    expect(complete.asked.map((l) => l.laterWindows)).toEqual([3]);
    // The sweep found no more than one: none is searched for.
    const ended = sweeping(1, false);
    expect((await planOffers(query(1, 1, { limit: 4 }), ended.search)).offers.map((o) => (o.startMs - start) / MIN)).toEqual([180, 480]);
    expect(ended.asked.length).toBe(1);
    // Stopped short after one: the rest one search each, from the previous window's end.
    const short = sweeping(1, true);
    expect((await planOffers(query(1, 1, { limit: 4 }), short.search)).offers.map((o) => (o.startMs - start) / MIN)).toEqual([180, 480, 780, 1080]);
    expect(short.asked.length).toBe(3);
  });

  it('steps extensions down from the latest end by halves, on whole minutes', () => {
    expect(extensionSteps(start, start + 240 * MIN).map((ms) => (ms - start) / MIN)).toEqual([240, 120, 60, 30]);
    expect(extensionSteps(start, start + 3 * MIN).map((ms) => (ms - start) / MIN)).toEqual([3, 1]);
    expect(extensionSteps(start, start)).toEqual([]);
  });
});
