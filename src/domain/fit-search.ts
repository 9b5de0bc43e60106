/**
 * Where several things that each know their own earliest fit (the reservations of a lease, the
 * resource types of a lease) fit together: each is asked from a candidate start, the latest answer
 * becomes the next candidate, until all agree. Pure: the searches are handed in.
 */
import type { Reservation } from './lease';
import type { FitLimits, FitSearch, ResourceTypes } from './resource-plugin';

/** Rounds of asking everyone again from the latest start one of them proposed, before giving up. */
export const MAX_FIT_ROUNDS = 20;

/**
 * The earliest start from `startMs` where every search fits, and the longest from `startMs` (the
 * shortest any of them allows). With nothing to search, everything fits from the start, for ever.
 */
export async function earliestCommonFit(searches: Array<(startMs: number) => Promise<FitSearch>>, startMs: number): Promise<FitSearch> {
  let candidate = startMs;
  let longestMs = Infinity;
  let tried = 0;
  for (let round = 0; round < MAX_FIT_ROUNDS; round++) {
    const answers = await Promise.all(searches.map((search) => search(candidate)));
    if (round === 0) longestMs = Math.min(Infinity, ...answers.map((a) => a.longestMs));
    tried += answers.reduce((n, a) => n + a.tried, 0);
    const cutShort = answers.find((a) => a.cutShort);
    if (answers.some((a) => a.earliest === undefined)) return { longestMs, cutShort: Boolean(cutShort), tried, ...(cutShort ? { searchedUntil: cutShort.searchedUntil } : {}) };
    const latest = Math.max(candidate, ...answers.map((a) => a.earliest!));
    // Later windows found in the same sweep are common ones only when one search alone decides.
    const windows = searches.length === 1 && answers[0].laterWindows ? { laterWindows: answers[0].laterWindows } : {};
    if (answers.every((a) => a.earliest === latest)) return { earliest: latest, longestMs, cutShort: false, tried, ...windows };
    candidate = latest;
  }
  return { longestMs, cutShort: true, tried, searchedUntil: candidate };
}

/**
 * Where a lease's reservations fit: every resource type answers for its own, and the lease fits
 * where they all do. The one search behind admission's 409s, availability search and offers.
 */
export function searchLease(types: ResourceTypes, projectId: string, reservations: Reservation[], startMs: number, durationMs: number, provisioningLeadMs: number, limits?: FitLimits): Promise<FitSearch> {
  const byType = new Map<string, Reservation[]>();
  for (const r of reservations) byType.set(r.resource_type, [...(byType.get(r.resource_type) ?? []), r]);
  const searches = [...byType].map(([type, ofType]) => (from: number) => types.get(type)!.earliest({ projectId, reservations: ofType, startMs: from, durationMs, provisioningLeadMs, limits }));
  return earliestCommonFit(searches, startMs);
}
