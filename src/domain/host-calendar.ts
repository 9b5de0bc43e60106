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
  const minimums = new MinimumsWitness(candidates, taken);
  if (!minimums.reach(requests.map((r) => r.min))) return undefined;
  // First every minimum (in request order), then top up to the maximums.
  for (const phase of ['min', 'max'] as const) {
    requests.forEach((request, i) => {
      const mine = result.get(request.reservationId)!;
      const target = phase === 'min' ? request.min : request.max;
      for (const host of candidates[i]) {
        if (mine.length >= target) break;
        if (taken.has(host)) continue;
        taken.add(host);
        if (minimums.take(i, host, mine.length < request.min)) mine.push(host);
        else taken.delete(host);
      }
    });
  }
  return result;
}

/**
 * Whether every request can still reach its minimum with hosts not yet taken: a flow from each
 * request (capacity: its minimum still missing) to its untaken candidate hosts (capacity 1),
 * kept as a witness — the hosts set aside for each request — and grown by augmenting paths.
 * Capacities, not one slot per host needed: memory and time do not grow with `min`, and a
 * request's minimum larger than its candidates fails at once.
 */
class MinimumsWitness {
  /** Host → the request it is set aside for. */
  private readonly owner = new Map<string, number>();
  /** Per request, the hosts set aside for it: exactly its minimum still missing. */
  private readonly held: Array<Set<string>>;

  constructor(
    private readonly candidates: string[][],
    private readonly taken: Set<string>,
  ) {
    this.held = candidates.map(() => new Set());
  }

  /** Sets aside `missing[i]` hosts for every request i; false when that is impossible. */
  reach(missing: number[]): boolean {
    const reachable = new Set(this.candidates.flat().filter((host) => !this.taken.has(host)));
    if (missing.reduce((sum, n) => sum + n, 0) > reachable.size) return false; // not enough hosts at all
    return missing.every((count, i) => count <= this.candidates[i].length && this.grow(i, count));
  }

  /**
   * Request i takes `host` (already added to `taken`), lowering its missing minimum when `needed`.
   * True when every minimum stays reachable; otherwise the witness is left as it was.
   */
  take(i: number, host: string, needed: boolean): boolean {
    const holder = this.owner.get(host);
    if (holder !== undefined) this.release(host);
    // i needs one host fewer: it gives up one it held (unless it just gave up `host` itself).
    const dropped = needed && holder !== i ? this.held[i].values().next().value : undefined;
    if (dropped !== undefined) this.release(dropped);
    if (holder === undefined || holder === i || this.augment(holder, new Set())) return true;
    if (dropped !== undefined) this.hold(dropped, i);
    this.hold(host, holder);
    return false;
  }

  private grow(i: number, count: number): boolean {
    for (let k = 0; k < count; k++) if (!this.augment(i, new Set())) return false;
    return true;
  }

  /** One more host for request i, moving other requests' hosts along a path (Kuhn); changes nothing when it fails. */
  private augment(i: number, seen: Set<string>): boolean {
    for (const host of this.candidates[i]) {
      if (this.taken.has(host) || seen.has(host)) continue;
      seen.add(host);
      const holder = this.owner.get(host);
      if (holder === undefined || this.augment(holder, seen)) {
        if (holder !== undefined) this.release(host);
        this.hold(host, i);
        return true;
      }
    }
    return false;
  }

  private hold(host: string, i: number): void {
    this.owner.set(host, i);
    this.held[i].add(host);
  }

  private release(host: string): void {
    this.held[this.owner.get(host)!].delete(host);
    this.owner.delete(host);
  }
}

/** Whether the minimums fit together on `free` hosts (the first step of assignHosts, alone). */
function minimumsFit(requests: HostRequest[], free: Iterable<string>): boolean {
  const hosts = [...free];
  return new MinimumsWitness(
    requests.map((r) => hosts.filter((id) => r.matches(id))),
    new Set(),
  ).reach(requests.map((r) => r.min));
}

/** Whether all requests fit together over [start, end). */
export function fitsAt(requests: HostRequest[], calendar: CalendarSnapshot, start: number, end: number): boolean {
  return minimumsFit(requests, freeHosts(calendar, start, end));
}

/**
 * Whether the requests could fit at all with every host free: each minimum within its matching
 * hosts, and all minimums within the hosts matching any of them. Cheap; searches start with it.
 */
export function canEverFit(requests: HostRequest[], hostIds: string[]): boolean {
  const matching = requests.map((r) => hostIds.filter((id) => r.matches(id)).length);
  const matchingAny = hostIds.filter((id) => requests.some((r) => r.matches(id))).length;
  return requests.every((r, i) => r.min <= matching[i]) && requests.reduce((sum, r) => sum + r.min, 0) <= matchingAny;
}

export interface EarliestSearchLimits {
  /**
   * How much matching work the search may do (about host × request pairs examined) before it
   * gives up: a request must not hold the event loop (~100 ms). Unlimited by default.
   */
  workBudget?: number;
  /** Maps a candidate start to the first acceptable one at or after it (e.g. the next whole minute). Monotonic. */
  align?: (ms: number) => number;
  /**
   * The snapshot holds every booking that matters to leases ending by then (and maybe not later
   * ones): a start whose lease would end later is not tried (`beyondKnown`). Infinity by default.
   */
  knownUntil?: number;
}

export interface EarliestSearch {
  /** The earliest start found, if any. */
  start: number | undefined;
  /** The search stopped on its work budget before trying every candidate start (`start` is then undefined). */
  cutShort: boolean;
  /** How many candidate starts it went through, and the last one. */
  tried: number;
  lastTried: number | undefined;
  /** It stopped at `knownUntil`: no start before `resumeAt` fits, later ones need a snapshot reaching further. */
  beyondKnown?: { resumeAt: number };
  /** The matching work it did, against its budget. */
  work: number;
  /** searchSuccessiveFits: the windows after `start` (each from the previous one's end), and where they stopped short, if they did. */
  following?: { starts: number[]; resumeAt?: number };
}

/**
 * The earliest start ≥ `from` at which the requests fit for `durationMs`. Only `from` and the
 * ends of blocked intervals (aligned) can be the answer: availability changes nowhere else.
 * One sweep over the candidate starts in order, keeping per host how many blocked intervals
 * overlap the window [start, start + duration + cleaning): intervals enter by start and leave by
 * end, each once (n log n for the sorts). The matching runs only when a host became free since
 * the last failed try (with fewer free hosts a failed request still fails).
 */
export function searchEarliestFit(requests: HostRequest[], calendar: CalendarSnapshot, from: number, durationMs: number, limits: EarliestSearchLimits = {}): EarliestSearch {
  return searchSuccessiveFits(requests, calendar, from, durationMs, limits, 0);
}

/**
 * The earliest fit (searchEarliestFit) and, in the same sweep, up to `more` windows after it: each
 * the answer searchEarliestFit gives from the previous window's end (own work budget, same
 * `knownUntil`), without sorting the intervals again. The sweep runs on from the previous fit: its
 * state at any start depends only on that start. `following.resumeAt`: the windows stopped short
 * (budget or `knownUntil`) and a search from there would tell more; absent, there are no more.
 */
export function searchSuccessiveFits(requests: HostRequest[], calendar: CalendarSnapshot, from: number, durationMs: number, limits: EarliestSearchLimits, more: number): EarliestSearch {
  const align = limits.align ?? ((ms: number) => ms);
  const budget = limits.workBudget ?? Infinity;
  const knownUntil = limits.knownUntil ?? Infinity;
  const none: EarliestSearch = { start: undefined, cutShort: false, tried: 0, lastTried: undefined, work: 0 };
  if (!canEverFit(requests, calendar.hostIds)) return none;
  const relevantIds = calendar.hostIds.filter((id) => requests.some((r) => r.matches(id)));
  const indexOf = new Map(relevantIds.map((id, i) => [id, i]));
  const blocked = calendar.blocked.filter((b) => indexOf.has(b.hostId));
  // Typed arrays and plain loops: 100 000 intervals in a few ms, and the sweep touches only numbers.
  const hostOf = new Int32Array(blocked.length);
  const startOf = new Float64Array(blocked.length);
  const endOf = new Float64Array(blocked.length);
  const candidates = new Float64Array(blocked.length + 1);
  let count = 0;
  candidates[count++] = align(from);
  for (let i = 0; i < blocked.length; i++) {
    hostOf[i] = indexOf.get(blocked[i].hostId)!;
    startOf[i] = blocked[i].start;
    endOf[i] = blocked[i].end;
    if (endOf[i] > from && Number.isFinite(endOf[i])) candidates[count++] = align(endOf[i]);
  }
  const starts = uniqueSorted(candidates.subarray(0, count));
  const byStart = orderOf(startOf);
  const byEnd = orderOf(endOf);
  const windowMs = durationMs + calendar.cleaningMs;
  const overlapping = new Int32Array(relevantIds.length); // per host: blocked intervals overlapping the window
  const neededHosts = requests.reduce((sum, r) => sum + r.min, 0);
  let freeCount = relevantIds.length;
  let gainedSinceTry = true;
  let entered = 0;
  let left = 0;
  let work = 0;
  let tried = 0;
  // After a fit: the next window's search starts at its end (a candidate of its own), earlier candidates skipped.
  let first: EarliestSearch | undefined;
  const following: number[] = [];
  const answer = (stoppedAt?: number): EarliestSearch => ({ ...first!, following: { starts: following, ...(stoppedAt !== undefined ? { resumeAt: stoppedAt } : {}) } });
  let nextFrom = -Infinity;
  let pending: number | undefined;
  let index = 0;
  for (let step = 0; step <= starts.length + more + 1; step++) {
    let start: number;
    if (pending !== undefined && (index >= starts.length || starts[index] >= pending)) {
      start = pending;
      pending = undefined;
      if (index < starts.length && starts[index] === start) index++;
    } else if (index < starts.length) start = starts[index++];
    else break;
    if (start < nextFrom) continue;
    if (work > budget) return first ? answer(start) : { start: undefined, cutShort: true, tried, lastTried: starts[tried - 1], work };
    if (start + durationMs > knownUntil) return first ? answer(start) : { ...none, tried, lastTried: starts[tried - 1], beyondKnown: { resumeAt: start }, work };
    tried++;
    for (; entered < byStart.length && startOf[byStart[entered]] < start + windowMs; entered++) {
      if (++overlapping[hostOf[byStart[entered]]] === 1) freeCount--;
    }
    // Every interval ending by `start` began before it, so it has entered already.
    for (; left < byEnd.length && endOf[byEnd[left]] <= start; left++) {
      if (--overlapping[hostOf[byEnd[left]]] === 0) {
        freeCount++;
        gainedSinceTry = true;
      }
    }
    work += 1;
    if (!gainedSinceTry || freeCount < neededHosts) continue;
    gainedSinceTry = false;
    const free = relevantIds.filter((_, i) => overlapping[i] === 0);
    work += free.length * requests.length;
    if (!minimumsFit(requests, free)) continue;
    if (first) following.push(start);
    else first = { start, cutShort: false, tried, lastTried: start, work };
    if (following.length >= more) return more === 0 ? first : answer(align(start + durationMs));
    // As a fresh search from this window's end would: its own budget, and it matches at its first start.
    nextFrom = align(start + durationMs);
    pending = nextFrom;
    work = 0;
    gainedSinceTry = true;
  }
  return first ? answer() : { ...none, tried, lastTried: starts[tried - 1], work };
}

/** The distinct values, ascending. */
function uniqueSorted(values: Float64Array): Float64Array {
  const sorted = values.slice().sort();
  let kept = 0;
  for (let i = 0; i < sorted.length; i++) if (i === 0 || sorted[i] !== sorted[kept - 1]) sorted[kept++] = sorted[i];
  return sorted.subarray(0, kept);
}

/**
 * The indices of `keys` in ascending order of their keys. A comparator sort of 100 000 indices
 * takes V8 hundreds of ms; this sorts the numbers natively and places each index by binary search.
 */
function orderOf(keys: Float64Array): Uint32Array {
  const sorted = keys.slice().sort();
  const placed = new Uint32Array(keys.length); // per first position of a value: how many of it are placed
  const order = new Uint32Array(keys.length);
  for (let i = 0; i < keys.length; i++) {
    let lo = 0;
    let hi = sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (sorted[mid] < keys[i]) lo = mid + 1;
      else hi = mid;
    }
    order[lo + placed[lo]++] = i;
  }
  return order;
}

/** The earliest start ≥ `from` at which the same requests fit for `durationMs`, or undefined if they never do. Exact, unbounded. */
export function earliestFit(requests: HostRequest[], calendar: CalendarSnapshot, from: number, durationMs: number): number | undefined {
  return searchEarliestFit(requests, calendar, from, durationMs).start;
}

/**
 * The longest lease (ms) that fits starting at `start` (Infinity if nothing ever blocks it,
 * 0 if nothing fits at all). Candidate lengths end where a blocking interval begins, less the
 * cleaning gap; fitting only gets harder as the lease grows, so a binary search is exact
 * (log n matchings over n bookings). With a snapshot complete only for leases ending by
 * `knownUntil`: undefined when the lease fits until then (how much longer, it cannot tell).
 */
export function longestFit(requests: HostRequest[], calendar: CalendarSnapshot, start: number): number;
export function longestFit(requests: HostRequest[], calendar: CalendarSnapshot, start: number, knownUntil: number): number | undefined;
export function longestFit(requests: HostRequest[], calendar: CalendarSnapshot, start: number, knownUntil = Infinity): number | undefined {
  if (!canEverFit(requests, calendar.hostIds)) return 0;
  if (knownUntil !== Infinity && fitsAt(requests, calendar, start, knownUntil)) return undefined;
  const lengths = uniqueSorted(Float64Array.from(calendar.blocked.map((b) => b.start - calendar.cleaningMs - start).filter((length) => length > 0)));
  // A loop, not Math.max(...): 100 000 arguments overflow the stack.
  let horizon = start;
  for (const b of calendar.blocked) horizon = Math.max(horizon, Number.isFinite(b.end) ? b.end : b.start);
  horizon += 1;
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
 * Power management (issue 48): hosts awake before sleeping ones, each in the order given. A lease
 * gets a sleeping host only when the awake ones do not do (then the planner wakes it), so that a
 * lease starting sooner than a host's boot never waits for one when an awake host would do, and
 * sleeping hosts sleep on.
 */
export function awakeFirst(order: readonly string[], asleep: ReadonlySet<string>): string[] {
  if (asleep.size === 0) return [...order];
  return [...order.filter((id) => !asleep.has(id)), ...order.filter((id) => asleep.has(id))];
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
