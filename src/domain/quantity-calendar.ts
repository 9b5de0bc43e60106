/**
 * The quantity calendar's decisions, as pure functions: a provider (a compute host's VCPU /
 * MEMORY_MB / DISK_GB, a network device's bandwidth) serves many bookings at once, and a new one
 * fits over an interval when, for every resource class, the peak of the amounts already booked
 * over that interval plus the new amount stays within the provider's capacity.
 *
 * Times are epoch ms; a booking occupies [start, end) (end may be Infinity).
 */

/** Resource class → amount (e.g. { VCPU: 2, MEMORY_MB: 4096 }). */
export type Amounts = Readonly<Record<string, number>>;

export interface QuantityBooking {
  providerId: string;
  start: number;
  end: number;
  amounts: Amounts;
}

export interface QuantityProvider {
  id: string;
  capacity: Amounts;
}

/** Per resource class, the highest total booked at any instant of [from, to) by these bookings (of one provider). */
export function peakUsage(bookings: readonly QuantityBooking[], from: number, to: number): Record<string, number> {
  const inside = bookings.filter((b) => b.start < to && from < b.end);
  // One sweep over the bookings' starts and ends (n log n): the total only rises where a booking
  // begins (or at `from`); at the same instant an end comes first, [start, end) being half-open.
  const events = inside.flatMap((b) => [
    { at: Math.max(b.start, from), sign: 1, amounts: b.amounts },
    { at: b.end, sign: -1, amounts: b.amounts },
  ]);
  events.sort((x, y) => x.at - y.at || x.sign - y.sign);
  const total: Record<string, number> = {};
  const peak: Record<string, number> = {};
  for (const { sign, amounts } of events) {
    for (const [resourceClass, amount] of Object.entries(amounts)) {
      total[resourceClass] = (total[resourceClass] ?? 0) + sign * amount;
      if (sign > 0) peak[resourceClass] = Math.max(peak[resourceClass] ?? 0, total[resourceClass]);
    }
  }
  return peak;
}

/** The resource classes the request would overflow on this provider over [from, to), with what is left of each. */
export function shortfall(provider: QuantityProvider, bookings: readonly QuantityBooking[], request: Amounts, from: number, to: number): Array<{ resourceClass: string; wanted: number; left: number }> {
  const peak = peakUsage(
    bookings.filter((b) => b.providerId === provider.id),
    from,
    to,
  );
  return Object.entries(request)
    .filter(([, wanted]) => wanted > 0)
    .map(([resourceClass, wanted]) => ({ resourceClass, wanted, left: (provider.capacity[resourceClass] ?? 0) - (peak[resourceClass] ?? 0) }))
    .filter(({ wanted, left }) => wanted > left);
}

export function fits(provider: QuantityProvider, bookings: readonly QuantityBooking[], request: Amounts, from: number, to: number): boolean {
  return shortfall(provider, bookings, request, from, to).length === 0;
}

/**
 * How full the provider would be over [from, to) with the request added: the highest share of
 * capacity across resource classes (0 = empty, 1 = full). Used to spread bookings.
 */
export function loadWith(provider: QuantityProvider, bookings: readonly QuantityBooking[], request: Amounts, from: number, to: number): number {
  const peak = peakUsage(
    bookings.filter((b) => b.providerId === provider.id),
    from,
    to,
  );
  let load = 0;
  for (const [resourceClass, wanted] of Object.entries(request)) {
    const capacity = provider.capacity[resourceClass] ?? 0;
    load = Math.max(load, capacity > 0 ? ((peak[resourceClass] ?? 0) + wanted) / capacity : Infinity);
  }
  return load;
}

export interface QuantitySearchLimits {
  /** How many bookings the search may examine before it gives up: a request must not hold the event loop (~100 ms). Unlimited by default. */
  workBudget?: number;
  /** Maps a candidate instant to the first acceptable one at or after it (e.g. the lease start on a whole minute). Monotonic. */
  align?: (ms: number) => number;
}

export interface QuantitySearch {
  fit: { start: number; providerId: string } | undefined;
  /** Stopped on its work budget before trying every candidate instant (`fit` is then undefined). */
  cutShort: boolean;
  tried: number;
  lastTried: number | undefined;
}

/**
 * The earliest start ≥ `from` at which some provider can take `request` for `durationMs`, and on
 * which provider. A fit can only begin at `from` or where a booking ends (aligned), so those are
 * the only instants tried; each try looks at the provider's own bookings only.
 */
export function searchEarliestQuantityFit(
  providers: readonly QuantityProvider[],
  bookings: readonly QuantityBooking[],
  request: Amounts,
  from: number,
  durationMs: number,
  limits: QuantitySearchLimits = {},
): QuantitySearch {
  const align = limits.align ?? ((ms: number) => ms);
  const budget = limits.workBudget ?? Infinity;
  const byProvider = new Map<string, QuantityBooking[]>(providers.map((p) => [p.id, []]));
  for (const b of bookings) byProvider.get(b.providerId)?.push(b);
  const instants = [...new Set([align(from), ...bookings.filter((b) => b.end > from && b.end !== Infinity && byProvider.has(b.providerId)).map((b) => align(b.end))])].sort((a, b) => a - b);
  let work = 0;
  let tried = 0;
  for (const start of instants) {
    if (work > budget) return { fit: undefined, cutShort: true, tried, lastTried: instants[tried - 1] };
    tried++;
    for (const provider of providers) {
      const own = byProvider.get(provider.id)!;
      work += own.length + 1;
      if (fits(provider, own, request, start, start + durationMs)) return { fit: { start, providerId: provider.id }, cutShort: false, tried, lastTried: start };
    }
  }
  return { fit: undefined, cutShort: false, tried, lastTried: instants[tried - 1] };
}

/** The earliest start ≥ `from` at which some provider can take `request` for `durationMs` (exact, unbounded); undefined if none ever can. */
export function earliestQuantityFit(
  providers: readonly QuantityProvider[],
  bookings: readonly QuantityBooking[],
  request: Amounts,
  from: number,
  durationMs: number,
): { start: number; providerId: string } | undefined {
  return searchEarliestQuantityFit(providers, bookings, request, from, durationMs).fit;
}

/**
 * How long from `from` the request fits on the best provider (Infinity: for ever; 0: not at all).
 * Per provider one sweep (n log n): the fit can only break where a booking on it begins.
 */
export function longestQuantityFit(providers: readonly QuantityProvider[], bookings: readonly QuantityBooking[], request: Amounts, from: number): number {
  let best = 0;
  const wanted = Object.entries(request).filter(([, amount]) => amount > 0);
  for (const provider of providers) {
    const own = bookings.filter((b) => b.providerId === provider.id && b.end > from);
    const total: Record<string, number> = {};
    const add = (amounts: Amounts, sign: number) => {
      for (const [resourceClass, amount] of Object.entries(amounts)) total[resourceClass] = (total[resourceClass] ?? 0) + sign * amount;
    };
    const overflows = () => wanted.some(([resourceClass, amount]) => (total[resourceClass] ?? 0) + amount > (provider.capacity[resourceClass] ?? 0));
    for (const b of own) if (b.start <= from) add(b.amounts, 1);
    if (overflows()) continue;
    const events = own.flatMap((b) => [...(b.start > from ? [{ at: b.start, sign: 1, amounts: b.amounts }] : []), ...(b.end !== Infinity ? [{ at: b.end, sign: -1, amounts: b.amounts }] : [])]);
    events.sort((x, y) => x.at - y.at || x.sign - y.sign); // at one instant ends first: [start, end)
    let until = Infinity;
    for (const { at, sign, amounts } of events) {
      add(amounts, sign);
      if (sign > 0 && overflows()) {
        until = at;
        break;
      }
    }
    best = Math.max(best, until - from);
  }
  return best;
}
