/**
 * The instance-slot calendar's decisions, as pure functions: a `virtual:instance` reservation asks
 * for `amount` slots of one size (VCPU, MEMORY_MB, DISK_GB) on enrolled hosts over a window. A host
 * serves slots of many instance reservations at once, within its capacity (Placement's, allocation
 * ratios and reserved amounts applied), but never while a whole-host lease holds it (its blocks
 * carry the cleaning gap, as in the host calendar).
 *
 * Times are epoch ms; a booking occupies [start, end) (end may be Infinity).
 */
import type { Blocked } from './host-calendar';
import { peakUsage, type Amounts, type QuantityBooking } from './quantity-calendar';

export interface SlotHost {
  id: string;
  capacity: Amounts;
}

export interface SlotCalendar {
  /** The hosts that may serve the request (enrolled, reservable, matching its properties). */
  hosts: SlotHost[];
  /** Other instance reservations' slots (providerId = host id), one booking per slot or per host. */
  slots: QuantityBooking[];
  /** Whole-host bookings (host leases), their cleaning gap included. */
  wholeHost: Blocked[];
  cleaningMs: number;
}

/** `true`: every slot on one host; `false`: each on a different host; `null`: slots may share hosts. */
export type Affinity = boolean | null;

export interface SlotRequest {
  slot: Amounts;
  amount: number;
  affinity: Affinity;
}

/** How many slots of `slot` the host has free over [from, to) besides `slots` (0 while a host lease holds it). */
export function freeSlots(host: SlotHost, calendar: Pick<SlotCalendar, 'slots' | 'wholeHost' | 'cleaningMs'>, slot: Amounts, from: number, to: number): number {
  const blockedUntil = to + calendar.cleaningMs;
  if (calendar.wholeHost.some((b) => b.hostId === host.id && b.start < blockedUntil && from < b.end)) return 0;
  const peak = peakUsage(
    calendar.slots.filter((b) => b.providerId === host.id),
    from,
    to,
  );
  let free = Infinity;
  for (const [resourceClass, size] of Object.entries(slot)) {
    if (size <= 0) continue;
    const left = (host.capacity[resourceClass] ?? 0) - (peak[resourceClass] ?? 0);
    free = Math.min(free, Math.max(0, Math.floor(left / size)));
  }
  return free === Infinity ? 0 : free;
}

export interface PlaceOptions {
  /** Hosts the reservation holds (a pending reservation updated): taken first. */
  held?: ReadonlySet<string>;
  /** Slots that must stay where they are (an active reservation's, servers may run there): host id → slots. */
  fixed?: ReadonlyMap<string, number>;
}

/**
 * Where the slots go over [from, to): host id → slots, or undefined when they do not fit. `fixed`
 * slots stay on their hosts (and must still fit there); the rest take hosts in this order: those in
 * `held` or `fixed`, then hosts already serving other instance reservations in the window (packing,
 * as Blazar does: whole hosts stay free for host leases), then the others; by id within each group.
 */
export function placeSlots(request: SlotRequest, calendar: SlotCalendar, from: number, to: number, options: PlaceOptions = {}): Map<string, number> | undefined {
  const fixed = options.fixed ?? new Map<string, number>();
  const held = new Set([...(options.held ?? []), ...fixed.keys()]);
  const byId = new Map(calendar.hosts.map((h) => [h.id, h]));
  // Each host's own bookings, grouped once: one pass over the calendar, not one per host.
  const slotsOf = groupBy(calendar.slots, (b) => b.providerId);
  const blocksOf = groupBy(calendar.wholeHost, (b) => b.hostId);
  const free = new Map<string, number>();
  for (const host of calendar.hosts) {
    const own = { slots: slotsOf.get(host.id) ?? [], wholeHost: blocksOf.get(host.id) ?? [], cleaningMs: calendar.cleaningMs };
    free.set(host.id, freeSlots(host, own, request.slot, from, to));
  }

  const placed = new Map<string, number>();
  let left = request.amount;
  for (const [hostId, slots] of fixed) {
    if (!byId.has(hostId) || free.get(hostId)! < slots) return undefined;
    placed.set(hostId, slots);
    left -= slots;
  }
  if (left < 0) return undefined;
  if (request.affinity === true && placed.size > 1) return undefined;
  if (request.affinity === false && [...placed.values()].some((n) => n > 1)) return undefined;

  const busy = new Set(calendar.slots.filter((b) => b.start < to && from < b.end).map((b) => b.providerId));
  const rank = (id: string) => (held.has(id) ? 0 : busy.has(id) ? 1 : 2);
  const ordered = [...calendar.hosts].sort((a, b) => rank(a.id) - rank(b.id) || a.id.localeCompare(b.id, 'en', { numeric: true }));
  if (request.affinity === true) {
    // One host for all: the one already holding slots, else the first with room for every slot.
    const candidates = placed.size === 1 ? [...placed.keys()] : ordered.map((h) => h.id);
    const host = candidates.find((id) => free.get(id)! >= request.amount);
    return host === undefined ? undefined : new Map([[host, request.amount]]);
  }
  for (const host of ordered) {
    if (left === 0) break;
    const room = free.get(host.id)! - (placed.get(host.id) ?? 0);
    const take = request.affinity === false ? (placed.has(host.id) ? 0 : Math.min(room, 1)) : Math.min(room, left);
    if (take > 0) placed.set(host.id, (placed.get(host.id) ?? 0) + take);
    left -= Math.max(0, take);
  }
  return left === 0 ? placed : undefined;
}

/** A preemptible lease's bookings in a slot calendar's window (issue 43): slots, and whole hosts (a preemptible host lease). */
export interface PreemptibleSlotLease {
  leaseId: string;
  /** Its window has begun: its servers may run (cut last). */
  started: boolean;
  /** False: a cut would drop a slot it already runs on (its servers must stay where its end cleans them): it counts as regular. */
  cuttable: boolean;
  slots: QuantityBooking[];
  wholeHost: Blocked[];
}

/**
 * Where a regular reservation's slots go when they do not fit as the calendar stands (issue 43):
 * `regular` is the calendar without preemptible bookings, `leases` the preemptible leases in the
 * window. Preemptible leases not started count as free first (running ones still taken), then every
 * one that may be cut; hosts with room free of any preemptible booking are taken first. On each host taken, the
 * leases are cut one by one (not started first, then by id; not always the fewest) until its slots fit there: a lease cut ends
 * before the window, all of it. Undefined: it does not fit even with every preemptible booking free.
 */
export function placePreempting(request: SlotRequest, regular: SlotCalendar, leases: readonly PreemptibleSlotLease[], from: number, to: number): { placed: Map<string, number>; cut: string[] } | undefined {
  const withLeases = (kept: readonly PreemptibleSlotLease[]): SlotCalendar => ({
    ...regular,
    slots: [...regular.slots, ...kept.flatMap((l) => l.slots)],
    wholeHost: [...regular.wholeHost, ...kept.flatMap((l) => l.wholeHost)],
  });
  const everything = withLeases(leases);
  const roomWithoutCuts = new Set(regular.hosts.filter((h) => freeSlots(h, everything, request.slot, from, to) > 0).map((h) => h.id));
  const order = [...leases].sort((a, b) => Number(a.started) - Number(b.started) || a.leaseId.localeCompare(b.leaseId));
  for (const kept of [leases.filter((l) => l.started || !l.cuttable), leases.filter((l) => !l.cuttable)]) {
    const placed = placeSlots(request, withLeases(kept), from, to, { held: roomWithoutCuts });
    if (!placed) continue;
    const cut = new Set<string>();
    for (const [hostId, slots] of placed) {
      const host = regular.hosts.find((h) => h.id === hostId)!;
      const onHost = order.filter((l) => !kept.includes(l) && (l.slots.some((b) => b.providerId === hostId) || l.wholeHost.some((b) => b.hostId === hostId)));
      for (const lease of onHost) {
        if (freeSlots(host, withLeases(leases.filter((l) => !cut.has(l.leaseId))), request.slot, from, to) >= slots) break;
        cut.add(lease.leaseId);
      }
    }
    return { placed, cut: [...cut].sort() };
  }
  return undefined;
}

function groupBy<T>(items: readonly T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    const group = groups.get(k);
    if (group) group.push(item);
    else groups.set(k, [item]);
  }
  return groups;
}

/**
 * Each host's free slots of one size over any window, from the calendar read once: per host the
 * usage of each resource class as a step function (the instants where it changes, sorted) with a
 * sparse table for the peak over a range of steps, and its whole-host blocks by start with the
 * latest end so far. A query costs O(log n) per host and class instead of a pass over every
 * booking (freeSlots): the searches try thousands of windows on one calendar. Same answers as
 * freeSlots (the peak of each class over the window, taken apart).
 */
export class SlotFreeIndex {
  private readonly perHost: Array<{ host: SlotHost; times: Float64Array; peaks: Float64Array[][]; blockStarts: Float64Array; blockEndsSoFar: Float64Array }>;

  constructor(
    private readonly calendar: SlotCalendar,
    private readonly slot: Amounts,
  ) {
    const classes = Object.entries(slot).filter(([, size]) => size > 0).map(([resourceClass]) => resourceClass);
    const slotsOf = groupBy(calendar.slots, (b) => b.providerId);
    const blocksOf = groupBy(calendar.wholeHost, (b) => b.hostId);
    this.perHost = calendar.hosts.map((host) => {
      const events = (slotsOf.get(host.id) ?? []).flatMap((b) => (b.start < b.end ? [{ at: b.start, sign: 1, amounts: b.amounts }, ...(b.end !== Infinity ? [{ at: b.end, sign: -1, amounts: b.amounts }] : [])] : []));
      events.sort((x, y) => x.at - y.at);
      // times[k]: where step k begins (step 0 from the beginning of time, usage 0); levels per class.
      const times: number[] = [-Infinity];
      const levels = classes.map(() => [0]);
      const total = classes.map(() => 0);
      for (let i = 0; i < events.length; i++) {
        const { at, sign, amounts } = events[i];
        classes.forEach((c, j) => (total[j] += sign * (amounts[c] ?? 0)));
        if (i + 1 < events.length && events[i + 1].at === at) continue;
        times.push(at);
        classes.forEach((_, j) => levels[j].push(total[j]));
      }
      const blocks = [...(blocksOf.get(host.id) ?? [])].sort((a, b) => a.start - b.start);
      const blockEndsSoFar = new Float64Array(blocks.length);
      blocks.forEach((b, i) => (blockEndsSoFar[i] = Math.max(b.end, i > 0 ? blockEndsSoFar[i - 1] : -Infinity)));
      return { host, times: Float64Array.from(times), peaks: levels.map(sparseMax), blockStarts: Float64Array.from(blocks.map((b) => b.start)), blockEndsSoFar };
    });
    this.classes = classes;
  }

  private readonly classes: string[];

  /** Per host (in the calendar's order): its free slots over [from, to), as freeSlots answers. */
  free(from: number, to: number): number[] {
    return this.perHost.map((_, i) => this.freeOn(i, from, to));
  }

  /** Whether the request's slots fit over [from, to) (placeSlots with nothing held or fixed finds a place exactly then). */
  fits(request: SlotRequest, from: number, to: number): boolean {
    // Counted host by host, stopping as soon as the answer is known: a search asks this thousands of times.
    let found = 0;
    for (let i = 0; i < this.perHost.length; i++) {
      const free = this.freeOn(i, from, to);
      if (request.affinity === true) {
        if (free >= request.amount) return true;
      } else {
        found += request.affinity === false ? Math.min(free, 1) : free;
        if (found >= request.amount) return true;
      }
    }
    return request.affinity !== true && found >= request.amount;
  }

  private freeOn(i: number, from: number, to: number): number {
    const { host, times, peaks, blockStarts, blockEndsSoFar } = this.perHost[i];
    const blocks = countBelow(blockStarts, to + this.calendar.cleaningMs);
    if (blocks > 0 && blockEndsSoFar[blocks - 1] > from) return 0;
    // The steps overlapping [from, to): from the one holding `from` to the last beginning before `to`.
    const first = countAtOrBelow(times, from) - 1;
    const last = Math.max(first, countBelow(times, to) - 1);
    let free = Infinity;
    for (let j = 0; j < this.classes.length; j++) {
      const resourceClass = this.classes[j];
      const peak = rangeMax(peaks[j], first, last);
      free = Math.min(free, Math.max(0, Math.floor(((host.capacity[resourceClass] ?? 0) - Math.max(0, peak)) / this.slot[resourceClass])));
    }
    return free === Infinity ? 0 : free;
  }
}

/** How many of the ascending `values` are below `x`. */
function countBelow(values: Float64Array, x: number): number {
  let [lo, hi] = [0, values.length];
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (values[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** How many of the ascending `values` are at most `x`. */
function countAtOrBelow(values: Float64Array, x: number): number {
  let [lo, hi] = [0, values.length];
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (values[mid] <= x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** A sparse table: row r holds the maximum of each run of 2^r values. */
function sparseMax(values: number[]): Float64Array[] {
  const rows = [Float64Array.from(values)];
  for (let width = 2; width <= values.length; width *= 2) {
    const previous = rows[rows.length - 1];
    const half = width / 2;
    const row = new Float64Array(values.length - width + 1);
    for (let i = 0; i < row.length; i++) row[i] = Math.max(previous[i], previous[i + half]);
    rows.push(row);
  }
  return rows;
}

/** The maximum of values[first..last] (first ≤ last). */
function rangeMax(rows: Float64Array[], first: number, last: number): number {
  const r = 31 - Math.clz32(last - first + 1);
  return Math.max(rows[r][first], rows[r][last - (1 << r) + 1]);
}

/** Whether the slots could ever fit: on an empty calendar. */
export function canEverPlace(request: SlotRequest, hosts: SlotHost[]): boolean {
  return placeSlots(request, { hosts, slots: [], wholeHost: [], cleaningMs: 0 }, 0, 1) !== undefined;
}

export interface SlotSearchLimits {
  /** Bookings examined before the search gives up (a request must not hold the event loop). */
  workBudget: number;
  /** The first acceptable instant at or after a candidate (lease starts fall on whole minutes). Monotonic. */
  align: (ms: number) => number;
  /**
   * The calendar holds every booking that matters to windows ending by then (and maybe not later
   * ones): an instant whose window would end later is not tried (`beyondKnown`). Infinity by default.
   */
  knownUntil?: number;
}

export interface SlotSearch {
  earliest: number | undefined;
  cutShort: boolean;
  tried: number;
  lastTried: number | undefined;
  /** It stopped at `knownUntil`: nothing before `resumeAt` fits, later instants need a calendar reaching further. */
  beyondKnown?: { resumeAt: number };
  /** Bookings examined, against the budget. */
  work: number;
}

/**
 * The earliest instant ≥ `from` from which the slots fit for `durationMs`. A fit can only begin at
 * `from` or where some booking ends, so those are the only instants tried.
 */
export function searchEarliestSlots(request: SlotRequest, calendar: SlotCalendar, from: number, durationMs: number, limits: SlotSearchLimits): SlotSearch {
  const hostIds = new Set(calendar.hosts.map((h) => h.id));
  const ends = [
    ...calendar.slots.filter((b) => hostIds.has(b.providerId)).map((b) => b.end),
    ...calendar.wholeHost.filter((b) => hostIds.has(b.hostId)).map((b) => b.end),
  ].filter((end) => end > from && end !== Infinity);
  const instants = [...new Set([from, ...ends].map(limits.align))].sort((a, b) => a - b);
  const index = new SlotFreeIndex(calendar, request.slot);
  // Reading the calendar into the index once, then a look-up per host for each instant tried.
  const indexWork = calendar.slots.length + calendar.wholeHost.length;
  const workPerTry = calendar.hosts.length;
  const knownUntil = limits.knownUntil ?? Infinity;
  let tried = 0;
  const work = () => indexWork + tried * workPerTry;
  for (const start of instants) {
    if (work() > limits.workBudget) return { earliest: undefined, cutShort: true, tried, lastTried: instants[tried - 1], work: work() };
    if (start + durationMs > knownUntil) return { earliest: undefined, cutShort: false, tried, lastTried: instants[tried - 1], beyondKnown: { resumeAt: start }, work: work() };
    tried++;
    if (index.fits(request, start, start + durationMs)) return { earliest: start, cutShort: false, tried, lastTried: start, work: work() };
  }
  return { earliest: undefined, cutShort: false, tried, lastTried: instants[tried - 1], work: work() };
}

/**
 * How long from `from` the slots fit (Infinity: for ever; 0: not at all). The fit can only break
 * where a booking begins, and a longer window only fits if a shorter one does, so the first such
 * instant where it breaks is found by bisection (a placement per step, log n of them); past the
 * work budget the answer is what was verified so far (a lower bound). With a calendar complete
 * only for windows ending by `knownUntil`: undefined when the slots fit until then. Once they fit
 * for `upTo`, that is enough for the caller: the answer is then a length of at least `upTo`.
 */
export function longestSlots(request: SlotRequest, calendar: SlotCalendar, from: number, workBudget?: number): number;
export function longestSlots(request: SlotRequest, calendar: SlotCalendar, from: number, workBudget: number, knownUntil: number, upTo?: number): number | undefined;
export function longestSlots(request: SlotRequest, calendar: SlotCalendar, from: number, workBudget = Infinity, knownUntil = Infinity, upTo = Infinity): number | undefined {
  const starts = [
    ...calendar.slots.map((b) => b.start),
    // A host lease blocking from s takes the host from slots whose window ends after s − cleaning.
    ...calendar.wholeHost.map((b) => b.start - calendar.cleaningMs),
  ].filter((s) => s > from);
  const boundaries = [...new Set(starts)].sort((a, b) => a - b);
  const index = new SlotFreeIndex(calendar, request.slot);
  if (!index.fits(request, from, from + 1)) return 0;
  // Only the boundaries before the first that is long enough for the caller, or past what is known, are tried.
  let cut = 0;
  while (cut < boundaries.length && boundaries[cut] - from < upTo && boundaries[cut] < knownUntil) cut++;
  const workPerTry = calendar.hosts.length;
  // Every boundary before `low` fits (the window up to the next boundary), every one from `high` on breaks.
  let [low, high, tried] = [0, cut, 0];
  while (low < high) {
    if (++tried * workPerTry > workBudget) return boundaries[low] - from;
    const middle = (low + high) >> 1;
    if (index.fits(request, from, boundaries[middle] + 1)) low = middle + 1;
    else high = middle;
  }
  if (low < cut) return boundaries[low] - from;
  if (cut < boundaries.length) return boundaries[cut] - from >= upTo ? boundaries[cut] - from : undefined;
  return knownUntil === Infinity ? Infinity : undefined;
}
