/**
 * What the host calendar and the quantity calendar do alike: identify a booking request, run a
 * booking again when it lost a race with a concurrent one, free a booking, check a property query's
 * keys, and explain a refusal (409: when the same lease fits, and how long from the asked start).
 */
import { createHash } from 'node:crypto';
import type { PoolClient } from 'pg';
import { formatMessageDate as when, reuseEnd, reuseStart, wholeMinuteDown, wholeMinuteUp } from '../../domain/dates';
import { invalidLease, leaseConflict } from '../../domain/lease';
import { longestFit, searchEarliestFit, searchSuccessiveFits, type CalendarSnapshot, type EarliestSearch, type HostRequest } from '../../domain/host-calendar';
import { parsePropertyQuery, queryKeys, type PropertyQuery } from '../../domain/property-query';
import { reservableCapabilityNames } from '../../db/hosts';
import { isDeadlockOrSerialization, isForeignKeyViolation, isLostRace, type Pool } from '../../db/pool';
import type { FitLimits, FitSearch } from '../../domain/resource-plugin';
import { inTransaction } from '../../db/transaction';
import { endExpiredOfferHolds } from '../../db/offer-holds';

/**
 * Identifies one booking request, so that a booking already made for it is not made again: what the
 * reservations asked for (`params`), then the rest of the request (its window, what it amounts to).
 */
export function bookingKey(params: unknown, rest: unknown[]): string {
  return digest(params) + digest(rest);
}

/**
 * Whether a booking (by its key) was made for these parameters: then, for a started lease, only its
 * window can have changed, which the calendar decides alone (keys from before the two halves never match).
 */
export function bookedFor(key: string, params: unknown): boolean {
  return key.startsWith(digest(params));
}

/**
 * The key of a booking moved to a new window by the calendar alone: what it was made for (the first
 * half) stays, the rest becomes the old key's and the new window's.
 */
export function movedBookingKey(key: string, window: { startMs: number; endMs: number; provisioningLeadMs: number }): string {
  return key.slice(0, DIGEST_LENGTH) + digest([key, window.startMs, window.endMs, window.provisioningLeadMs]);
}

const DIGEST_LENGTH = 16;
const digest = (value: unknown) => createHash('sha256').update(JSON.stringify(value)).digest('hex').slice(0, DIGEST_LENGTH);


/**
 * Runs a booking in one transaction, again from the start when it lost a race with a concurrent
 * booking (a deadlock between them, or, with `retryExclusion`, the other took a chosen resource
 * first, or an enrolled resource it chose was removed meanwhile: a foreign-key violation): the next
 * run sees the winner's booking, or the resource gone. Bookings run again one at a time, whatever
 * their resource type. Offer holds past their expiry are ended first (src/db/offer-holds.ts): what
 * they held is free at their expiry even when no worker ran their timer.
 */
export function bookInTransaction<T>(pool: Pool, work: (client: PoolClient) => Promise<T>, options: { retryExclusion: boolean }): Promise<T> {
  const lostRace = options.retryExclusion ? (err: unknown) => isLostRace(err) || isForeignKeyViolation(err) : isDeadlockOrSerialization;
  return inTransaction(
    pool,
    async (client) => {
      await endExpiredOfferHolds(client);
      return work(client);
    },
    { retryOn: lostRace, retriesOneAtATime: 'bookings' },
  );
}

/** Frees a booking: all of it if its lease never started, else from `nowMs` on. */
export async function releaseBooking(started: boolean, nowMs: number, bookings: { deleteAll: () => Promise<void>; endAt: (nowMs: number) => Promise<void> }): Promise<void> {
  if (started) await bookings.endAt(nowMs);
  else await bookings.deleteAll();
}

/** A 400 for keys not in `known`; keys in `unlisted` (private capabilities) are never named among the known ones. */
export function checkKeys(query: PropertyQuery, known: Set<string>, field: string, unlisted: Set<string> = new Set()): void {
  const unknown = queryKeys(query).filter((key) => !known.has(key));
  if (unknown.length > 0) {
    const listed = [...known].filter((k) => !unlisted.has(k)).sort();
    throw invalidLease(`${field}: unknown property ${unknown.map((k) => `$${k}`).join(', ')} (known: ${listed.map((k) => `$${k}`).join(', ') || 'none'})`);
  }
}

/**
 * At the API, before any booking: a `resource_properties` query over host capabilities naming a key
 * no reservable host has is the booking's own 400. Private capabilities are known to admins only
 * (never listed): for others they answer exactly as a key no host has.
 */
export async function checkCapabilityKeys(db: Pool | PoolClient, text: string, viewer: { isAdmin: boolean }): Promise<void> {
  const query = parsePropertyQuery(text);
  if (queryKeys(query).length === 0) return;
  const names = await reservableCapabilityNames(db);
  checkKeys(query, viewer.isAdmin ? new Set([...names.public, ...names.private]) : names.public, 'resource_properties', names.private);
}

/**
 * The 409 for a lease that does not fit over [startMs, endMs): `what` says what was short, then
 * when the same lease fits (or that it never does: `neverFits`), and until when it fits from the
 * asked start. Dates are handed back for reuse: whole minutes, ends rounded down so that they still fit.
 */
export function shortage(window: { startMs: number; endMs: number }, what: string[], fit: FitSearch, neverFits: string, reason?: 'maintenance') {
  const duration = window.endMs - window.startMs;
  const earliestEnd = fit.earliest !== undefined ? wholeMinuteDown(fit.earliest + duration) : undefined;
  const longestEnd = wholeMinuteDown(window.startMs + fit.longestMs);
  const fitsUntil = fit.longestMs > 0 && fit.longestMs !== Infinity && longestEnd > window.startMs ? longestEnd : undefined;
  const parts = [...what];
  if (fit.earliest !== undefined && earliestEnd !== undefined) parts.push(`the same lease fits from ${reuseStart(fit.earliest)} to ${reuseEnd(earliestEnd)}`);
  else if (fit.cutShort) parts.push(`no fit found within the first ${fit.tried} candidate starts (until ${when(fit.searchedUntil!)}): try a later start`);
  else parts.push(neverFits);
  if (fitsUntil !== undefined) parts.push(`from the requested start it fits until ${reuseEnd(fitsUntil)}`);
  return leaseConflict(`${parts.join('; ')}.`, {
    earliest_start: fit.earliest !== undefined ? reuseStart(fit.earliest) : null,
    earliest_end: earliestEnd !== undefined ? reuseEnd(earliestEnd) : null,
    longest_end: fitsUntil !== undefined ? reuseEnd(fitsUntil) : null,
    // Why, for a refusal's offers (src/api/offers.ts); capacity unless said.
    ...(reason ? { reason } : {}),
  });
}

/**
 * The 409 for an active lease that cannot be extended to `endMs`: Blazar's sentence for the type
 * (e.g. "Not enough hosts available."), why, and the latest end possible (if any).
 */
export function extensionRefused(lease: { leaseName: string; endMs: number }, blazarSentence: string, why: string, latestEnd: number | undefined) {
  return leaseConflict(
    `${blazarSentence} Cannot extend lease ${lease.leaseName} to ${when(lease.endMs)}: ${why}` + (latestEnd !== undefined ? `; the latest possible end is ${reuseEnd(latestEnd)}` : ''),
    { latest_end: latestEnd !== undefined ? reuseEnd(latestEnd) : null },
  );
}

/**
 * The matching work (about resource × request pairs examined) one earliest-slot search over whole
 * resources (hosts, addresses) may do: with 1 000 hosts and 100 000 bookings an unbounded search
 * could hold the event loop for seconds, and everyone else's requests with it. This keeps one
 * search under ~100 ms (bench:calendar); past it, the answer says how far it looked.
 */
export const SEARCH_WORK_BUDGET = 2_000_000;

/**
 * A search reads first the bookings of leases ending within this much of its start, or within
 * this many of its durations (bench:offers: 1 000 hosts with a year of 100 000 bookings).
 */
export const NEAR_SEARCH_MS = 14 * 86_400_000;
export const NEAR_SEARCH_DURATIONS = 4;

/** Where requests for whole resources fit from `start`: the earliest whole-minute start (within the search budget) and the longest lease. */
export function wholeResourceFit(requests: HostRequest[], future: CalendarSnapshot, start: number, durationMs: number): FitSearch {
  const earliest = searchEarliestFit(requests, future, start, durationMs, { align: wholeMinuteUp, workBudget: SEARCH_WORK_BUDGET });
  return { earliest: earliest.start, longestMs: longestFit(requests, future, start), cutShort: earliest.cutShort, tried: earliest.tried, searchedUntil: earliest.lastTried };
}

/**
 * What the two-step search (fitNearFirst) needs of one calendar type, in lease starts: the
 * earliest start from `from` and up to `more` windows after it (as searchSuccessiveFits answers;
 * a type may find no later windows), and how long the lease fits from the asked start as far as
 * the calendar tells until `until` (Infinity: all of it; undefined: it fits until then, at least
 * `upToMs` needs no more). `workBudget`: the whole search's, shared by both steps.
 */
export interface NearFirstSearch<Calendar> {
  workBudget: number;
  successive(calendar: Calendar, from: number, limits: { workBudget: number; knownUntil: number }, more: number): EarliestSearch;
  longest(calendar: Calendar, until: number, upToMs: number): number | undefined;
}

/**
 * The same in two steps, each reading its own snapshot: first only the bookings near `start` (for
 * leases ending by `nearUntil`, or by what `limits` say the caller needs, if sooner), which answer
 * most searches; then, only when the answer lies further (no fit that early, or the lease fits
 * from `start` past it), the bookings up to what the caller needs (everything, unless `limits`
 * say), the earliest start searched on from where the first step stopped, within what is left of
 * the budget. The answer is the one-step answer within `limits` (FitLimits). `earliestSnapshot`
 * reads the rest when only the earliest fit needs it (it may merge gaps too short for the lease).
 * Fewer bookings read make each try cheaper, so the budget reaches further than in one step.
 */
export async function fitNearFirst<Calendar>(
  snapshot: (untilMs: number | null) => Promise<Calendar>,
  search: NearFirstSearch<Calendar>,
  start: number,
  durationMs: number,
  nearUntil: number,
  limits: FitLimits = {},
  earliestSnapshot = snapshot,
): Promise<FitSearch> {
  const longestUpTo = limits.longestUpToMs ?? Infinity;
  const earliestUntil = limits.earliestUntilMs ?? Infinity;
  // Leases ending later matter to neither answer the caller wants.
  const neededUntil = Math.max(earliestUntil + durationMs, start + longestUpTo);
  const firstUntil = Math.min(nearUntil, neededUntil);
  // Windows after a later earliest (offers' `later`): the same sweep runs on; past `earliestUntil` none is wanted.
  const more = limits.laterWindows ?? 0;
  const windowsOf = (earliest: EarliestSearch): Pick<FitSearch, 'laterWindows'> => {
    if (!earliest.following || earliest.start === start) return {};
    const resumeAt = earliest.following.resumeAt;
    return { laterWindows: { starts: earliest.following.starts, ...(resumeAt !== undefined && resumeAt <= earliestUntil ? { resumeAt } : {}) } };
  };
  const fit = (earliest: EarliestSearch, longestMs: number): FitSearch => ({ earliest: earliest.start, longestMs, cutShort: earliest.cutShort, tried: earliest.tried, searchedUntil: earliest.lastTried, ...windowsOf(earliest) });
  // Fitting from `start` until `until` (as far as the snapshot tells) is as good as longer when the caller needs no more.
  const longestWithin = (calendar: Calendar, until: number) => search.longest(calendar, until, longestUpTo) ?? (until - start >= longestUpTo ? until - start : undefined);

  const near = await snapshot(firstUntil);
  // A start past `earliestUntil` is none the caller wants: the search stops before it (beyondKnown).
  const nearEarliest = search.successive(near, start, { workBudget: search.workBudget, knownUntil: firstUntil }, more);
  const nearLongest = longestWithin(near, firstUntil);
  const resumeAt = nearEarliest.beyondKnown && nearEarliest.beyondKnown.resumeAt <= earliestUntil ? nearEarliest.beyondKnown.resumeAt : undefined;
  if (resumeAt === undefined && nearLongest !== undefined) return fit(nearEarliest, nearLongest);
  const restUntil = neededUntil === Infinity ? null : neededUntil;
  // With the longest known, the rest is read for the earliest fit alone (`earliestSnapshot`: maybe with short gaps merged).
  const future = await (nearLongest === undefined ? snapshot : earliestSnapshot)(restUntil);
  const longestMs = nearLongest ?? longestWithin(future, restUntil ?? Infinity)!;
  if (resumeAt === undefined) return fit(nearEarliest, longestMs);
  const further = search.successive(future, resumeAt, { workBudget: Math.max(0, search.workBudget - nearEarliest.work), knownUntil: restUntil ?? Infinity }, more);
  return fit({ ...further, tried: nearEarliest.tried + further.tried, lastTried: further.lastTried ?? nearEarliest.lastTried }, longestMs);
}

/** fitNearFirst over whole resources (hosts, addresses): the lease fits where the requests can all be matched. */
export function wholeResourceFitNearFirst(
  snapshot: (untilMs: number | null) => Promise<CalendarSnapshot>,
  requests: HostRequest[],
  start: number,
  durationMs: number,
  nearUntil: number,
  limits: FitLimits = {},
  earliestSnapshot = snapshot,
): Promise<FitSearch> {
  const search: NearFirstSearch<CalendarSnapshot> = {
    workBudget: SEARCH_WORK_BUDGET,
    successive: (calendar, from, bounds, more) => searchSuccessiveFits(requests, calendar, from, durationMs, { align: wholeMinuteUp, ...bounds }, more),
    longest: (calendar, until) => longestFit(requests, calendar, start, until),
  };
  return fitNearFirst(snapshot, search, start, durationMs, nearUntil, limits, earliestSnapshot);
}
