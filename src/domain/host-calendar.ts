/**
 * The host calendar's decisions, as pure functions over a snapshot of hosts and their bookings:
 * which hosts a lease gets, and — when it does not fit — the earliest start at which the same
 * request would fit and the longest window that fits from the requested start. Exact, also for
 * leases with several host reservations competing for the same hosts (a matching, not a guess).
 *
 * Times are epoch ms. A booking blocks its host over [start, end + cleaning): the next lease on
 * that host may begin once the cleaning gap has passed; with no cleaning, back to back.
 */

export interface HostRequest {
  reservationId: string;
  min: number;
  max: number;
  /** Whether a host can serve this reservation (its property queries). */
  matches: (hostId: string) => boolean;
}

/** A host's blocked interval: [start, end) with the cleaning gap already added to end (Infinity: blocked for good). */
export interface Blocked {
  hostId: string;
  start: number;
  end: number;
}

export interface CalendarSnapshot {
  hostIds: string[];
  blocked: Blocked[];
  cleaningMs: number;
}

/** Hosts free over the lease window [start, end) (the new booking blocks [start, end + cleaning)). */
export function freeHosts(calendar: CalendarSnapshot, start: number, end: number): Set<string> {
  const blockedUntil = end + calendar.cleaningMs;
  const busy = new Set(calendar.blocked.filter((b) => b.start < blockedUntil && start < b.end).map((b) => b.hostId));
  return new Set(calendar.hostIds.filter((id) => !busy.has(id)));
}

/**
 * Gives each request between `min` and `max` distinct hosts from `free`, taking hosts in
 * `preference` order, or returns undefined when the minimums cannot all be met together.
 * A host goes to a request only if the other requests' minimums stay satisfiable without it.
 */
export function assignHosts(requests: HostRequest[], free: Set<string>, preference: string[]): Map<string, string[]> | undefined {
  const ordered = preference.filter((id) => free.has(id));
  const candidates = requests.map((r) => ordered.filter((id) => r.matches(id)));
  const taken = new Set<string>();
  const result = new Map<string, string[]>(requests.map((r) => [r.reservationId, []]));
  if (!minimumsFeasible(requests, candidates, taken, result)) return undefined;
  // First every minimum (in request order), then top up to the maximums.
  for (const phase of ['min', 'max'] as const) {
    requests.forEach((request, i) => {
      const mine = result.get(request.reservationId)!;
      const target = phase === 'min' ? request.min : request.max;
      for (const host of candidates[i]) {
        if (mine.length >= target) break;
        if (taken.has(host)) continue;
        taken.add(host);
        mine.push(host);
        if (!minimumsFeasible(requests, candidates, taken, result)) {
          taken.delete(host);
          mine.pop();
        }
      }
    });
  }
  return result;
}

/**
 * Whether every request can still reach its minimum with hosts not yet taken: a bipartite
 * b-matching, checked with augmenting paths (Ford–Fulkerson on unit host capacities).
 */
function minimumsFeasible(requests: HostRequest[], candidates: string[][], taken: Set<string>, assigned: Map<string, string[]>): boolean {
  const slots: number[] = []; // one entry per still-needed host, holding its request index
  requests.forEach((request, i) => {
    const missing = request.min - assigned.get(request.reservationId)!.length;
    for (let k = 0; k < missing; k++) slots.push(i);
  });
  const slotOf = new Map<string, number>(); // host → slot index
  function augment(slot: number, seen: Set<string>): boolean {
    for (const host of candidates[slots[slot]]) {
      if (taken.has(host) || seen.has(host)) continue;
      seen.add(host);
      const holder = slotOf.get(host);
      if (holder === undefined || augment(holder, seen)) {
        slotOf.set(host, slot);
        return true;
      }
    }
    return false;
  }
  return slots.every((_, slot) => augment(slot, new Set()));
}

/** Whether all requests fit together over [start, end). */
export function fitsAt(requests: HostRequest[], calendar: CalendarSnapshot, start: number, end: number): boolean {
  return assignHosts(requests, freeHosts(calendar, start, end), calendar.hostIds) !== undefined;
}

/**
 * The earliest start ≥ `from` at which the same requests fit for `durationMs`, or undefined if
 * they never do (not enough matching hosts at all). Only `from` and the ends of blocked
 * intervals can be the answer: availability changes nowhere else.
 */
export function earliestFit(requests: HostRequest[], calendar: CalendarSnapshot, from: number, durationMs: number): number | undefined {
  const starts = [...new Set([from, ...calendar.blocked.map((b) => b.end).filter((end) => end > from && Number.isFinite(end))])].sort((a, b) => a - b);
  return starts.find((start) => fitsAt(requests, calendar, start, start + durationMs));
}

/**
 * The longest lease (ms) that fits starting at `start` (Infinity if nothing ever blocks it,
 * 0 if nothing fits at all). Candidate lengths end where a blocking interval begins, less the
 * cleaning gap; fitting only gets harder as the lease grows, so a binary search is exact.
 */
export function longestFit(requests: HostRequest[], calendar: CalendarSnapshot, start: number): number {
  const lengths = [...new Set(calendar.blocked.map((b) => b.start - calendar.cleaningMs - start).filter((length) => length > 0))].sort((a, b) => a - b);
  const horizon = Math.max(start, ...calendar.blocked.map((b) => (Number.isFinite(b.end) ? b.end : b.start))) + 1;
  if (fitsAt(requests, calendar, start, horizon)) return Infinity;
  let lo = 0;
  let hi = lengths.length - 1;
  let best = 0;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (fitsAt(requests, calendar, start, start + lengths[mid])) {
      best = lengths[mid];
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return best;
}

/**
 * Blazar's preference: hosts with no booking from `now` on come first (keeping busy hosts for
 * leases that need them), then the rest; within each group by id, or shuffled when asked.
 */
export function preferenceOrder(calendar: CalendarSnapshot, now: number, shuffle?: (ids: string[]) => string[]): string[] {
  const future = new Set(calendar.blocked.filter((b) => b.end > now).map((b) => b.hostId));
  const byId = (a: string, b: string) => Number(a) - Number(b) || a.localeCompare(b);
  const idle = calendar.hostIds.filter((id) => !future.has(id)).sort(byId);
  const busy = calendar.hostIds.filter((id) => future.has(id)).sort(byId);
  return shuffle ? [...shuffle(idle), ...shuffle(busy)] : [...idle, ...busy];
}
