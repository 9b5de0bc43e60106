/**
 * Offers: what would work instead of a lease as asked, found by the calendars' own searches (the
 * `search` handed in is the one availability search and admission use). Pure: it decides which
 * searches to run, at most MAX_OFFER_SEARCHES of them, and what they mean.
 *
 * Kinds, and the order offers are listed in ("best first": what the user gives up, least first):
 * 1. `exact`: as asked, from the asked start, for the whole duration, with every count;
 * 2. `later`: everything as asked, for the whole duration, from a later start (earliest first);
 * 3. `shorter`: every count from the asked start, for less time (at least `min_duration`);
 * 4. `fewer`: from the asked start for the whole duration, with the largest counts that fit (at least each `min`).
 * When the lease fits as asked, that is the only offer: nothing is given up.
 * 5. `extension`: an existing lease's new `end_date` (extension offers: extensionSteps), never mixed with the others.
 */
import { wholeMinuteDown } from './dates';
import type { Reservation } from './lease';
import type { FitLimits, FitSearch } from './resource-plugin';
import { SearchReads } from './search-reads';

export type OfferKind = 'exact' | 'later' | 'shorter' | 'fewer' | 'extension';
export const OFFER_KIND_ORDER: readonly OfferKind[] = ['exact', 'later', 'shorter', 'fewer', 'extension'];

/**
 * Searches one offer request may run: the lease as asked, the least counts, the bisection between
 * them (14 steps reach any count up to 10 000), and further later windows with what is left.
 */
export const MAX_OFFER_SEARCHES = 20;

/** One reservation's count: what it asks for, and the least the user accepts. */
export interface OfferCount {
  asked: number;
  least: number;
}

export interface OfferQuery {
  /** Per reservation of the lease (in its order): its count, or undefined for a type without one. */
  counts: Array<OfferCount | undefined>;
  /** The reservations with these counts (same order; undefined entries left as they are). */
  withCounts(counts: Array<number | undefined>): Reservation[];
  /** The earliest start, on a whole minute. */
  startMs: number;
  /** Offers end by then (undefined: no bound). */
  endBeforeMs?: number;
  durationMs: number;
  /** The least duration a `shorter` offer may have (equal to durationMs: none). */
  minDurationMs: number;
  /** How many offers at most. */
  limit: number;
}

/**
 * Where these reservations fit from a start, for a duration (the calendars' search), within
 * `limits`: a fit from the start longer than the lease is never needed, nor an earliest start
 * past `earliestUntilMs`.
 */
export type LeaseSearch = (reservations: Reservation[], startMs: number, durationMs: number, limits: FitLimits) => Promise<FitSearch>;

export interface PlannedOffer {
  kind: OfferKind;
  startMs: number;
  endMs: number;
  reservations: Reservation[];
  reason: string;
}

export interface OfferPlan {
  offers: PlannedOffer[];
  searches: number;
  /** Some search gave up within its work budget, or the searches ran out: there may be more than found. */
  cutShort: boolean;
}

const minutes = (ms: number) => {
  const total = Math.round(ms / 60_000);
  const [d, h, m] = [Math.floor(total / 1440), Math.floor((total % 1440) / 60), total % 60];
  return [d ? `${d} d` : '', h ? `${h} h` : '', m || total === 0 ? `${m} min` : ''].filter(Boolean).join(' ');
};

export async function planOffers(query: OfferQuery, search: LeaseSearch): Promise<OfferPlan> {
  const { startMs, durationMs, endBeforeMs = Infinity } = query;
  let searches = 0;
  let cutShort = false;
  // The searches look at the same calendars over overlapping windows: each window is read once.
  const reads = new SearchReads();
  // A later start is one within the range (`end_before`); fewer are searched from the asked start only.
  const run = async (reservations: Reservation[], from: number, earliestUntilMs = endBeforeMs - durationMs, laterWindows = 0): Promise<FitSearch> => {
    searches++;
    const found = await search(reservations, from, durationMs, { longestUpToMs: durationMs, reads, ...(Number.isFinite(earliestUntilMs) ? { earliestUntilMs } : {}), ...(laterWindows ? { laterWindows } : {}) });
    cutShort ||= found.cutShort;
    return found;
  };
  const fitsFromStart = (fit: FitSearch) => fit.longestMs >= durationMs || fit.earliest === startMs;
  const withinRange = (start: number) => start + durationMs <= endBeforeMs;

  // Every count as asked (hosts: `max` of them, not Blazar's range): what `exact`, `later` and `shorter` book.
  const full = query.withCounts(query.counts.map((c) => c?.asked));
  // A later start comes with the windows after it, from the same sweep: the list has room for `limit` in all.
  const asked = await run(full, startMs, undefined, query.limit - 1);
  if (fitsFromStart(asked) && withinRange(startMs)) {
    return { offers: [{ kind: 'exact', startMs, endMs: startMs + durationMs, reservations: full, reason: 'it fits as asked' }], searches, cutShort };
  }
  const offers: PlannedOffer[] = [];
  const later: PlannedOffer[] = [];
  if (asked.earliest !== undefined && withinRange(asked.earliest)) {
    later.push({ kind: 'later', startMs: asked.earliest, endMs: asked.earliest + durationMs, reservations: full, reason: `everything as asked, ${minutes(asked.earliest - startMs)} later: the earliest start where all of it fits` });
  }

  // Shorter: the longest from the asked start, whole minutes, within the range.
  const longestEnd = wholeMinuteDown(Math.min(startMs + Math.min(asked.longestMs, durationMs), endBeforeMs));
  if (query.minDurationMs < durationMs && longestEnd - startMs >= query.minDurationMs && longestEnd > startMs) {
    offers.push({ kind: 'shorter', startMs, endMs: longestEnd, reservations: full, reason: `everything as asked from the asked start, for ${minutes(longestEnd - startMs)} instead of ${minutes(durationMs)}: the longest that fits` });
  }

  const fewer = withinRange(startMs) ? await largestCountsThatFit(query, (counts) => run(query.withCounts(counts), startMs, startMs).then(fitsFromStart), () => searches < MAX_OFFER_SEARCHES) : undefined;
  if (fewer) {
    const what = query.counts.flatMap((c, i) => (c && fewer.counts[i] !== c.asked ? [`${fewer.counts[i]} of ${c.asked}`] : []));
    offers.push({
      kind: 'fewer',
      startMs,
      endMs: startMs + durationMs,
      reservations: query.withCounts(fewer.counts),
      reason: `from the asked start for the whole duration with ${what.join(', ')}: the most that fits${fewer.exact ? '' : ' found within the search bound'}`,
    });
    cutShort ||= !fewer.exact;
  }

  // More later windows, each after the previous one, while there is room in the list: those the
  // first search found in its sweep, then (if it stopped short) one search each while searches are left.
  const swept = asked.laterWindows ? [...asked.laterWindows.starts] : [];
  const sweptAll = asked.laterWindows !== undefined && asked.laterWindows.resumeAt === undefined;
  while (later.length > 0 && later.length + offers.length < query.limit) {
    const previous = later[later.length - 1];
    let nextStart = swept.shift();
    if (nextStart === undefined) {
      if (sweptAll || searches >= MAX_OFFER_SEARCHES) break;
      nextStart = (await run(full, previous.endMs)).earliest;
    }
    if (nextStart === undefined || !withinRange(nextStart)) break;
    later.push({ kind: 'later', startMs: nextStart, endMs: nextStart + durationMs, reservations: full, reason: `everything as asked, ${minutes(nextStart - startMs)} later: the next window after ${minutes(previous.startMs - startMs)} later` });
  }
  if (searches >= MAX_OFFER_SEARCHES) cutShort = true;
  return { offers: sortOffers([...later, ...offers]).slice(0, query.limit), searches, cutShort };
}

/** Best first: by kind (OFFER_KIND_ORDER), then the earliest start, then the longest. */
export function sortOffers<T extends Pick<PlannedOffer, 'kind' | 'startMs' | 'endMs'>>(offers: T[]): T[] {
  const rank = (o: T) => OFFER_KIND_ORDER.indexOf(o.kind);
  return [...offers].sort((a, b) => rank(a) - rank(b) || a.startMs - b.startMs || b.endMs - a.endMs);
}

/**
 * The largest counts that fit, each between its least and asked, lowered together by one step `t`
 * (each to max(least, asked − t)): fitting only gets easier as t grows, so t is found by bisection,
 * one search per step, never one per count. `exact`: the bisection finished within `mayRun`.
 */
async function largestCountsThatFit(
  query: Pick<OfferQuery, 'counts'>,
  fits: (counts: Array<number | undefined>) => Promise<boolean>,
  mayRun: () => boolean,
): Promise<{ counts: Array<number | undefined>; exact: boolean } | undefined> {
  const countsAt = (t: number) => query.counts.map((c) => (c ? Math.max(c.least, c.asked - t) : undefined));
  const widest = Math.max(0, ...query.counts.map((c) => (c ? c.asked - c.least : 0)));
  if (widest === 0 || !mayRun() || !(await fits(countsAt(widest)))) return undefined;
  // t = 0 is the lease as asked, which did not fit; t = widest fits.
  let [low, high] = [0, widest];
  while (high - low > 1 && mayRun()) {
    const middle = Math.floor((low + high) / 2);
    if (await fits(countsAt(middle))) high = middle;
    else low = middle;
  }
  return { counts: countsAt(high), exact: high - low <= 1 };
}

/** How far an extension offer reaches when nothing follows the lease's resources (also how far the calendars look for what follows). */
export const EXTENSION_HORIZON_MS = 30 * 86_400_000;

/**
 * Ends an extension can take, longest first: the latest possible, then halfway there from the
 * current end, and halves again (`steps` at most), each on a whole minute after the current end.
 */
export function extensionSteps(currentEndMs: number, latestEndMs: number, steps = 4): number[] {
  const ends: number[] = [];
  for (let k = 0; k < steps; k++) {
    const end = wholeMinuteDown(currentEndMs + (latestEndMs - currentEndMs) / 2 ** k);
    if (end <= currentEndMs) break;
    if (!ends.includes(end)) ends.push(end);
  }
  return ends;
}
