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
  const peak: Record<string, number> = {};
  // The total only rises where a booking begins: the peak is at `from` or at one of those starts.
  const instants = [from, ...inside.map((b) => b.start).filter((t) => t > from)];
  for (const instant of instants) {
    const total: Record<string, number> = {};
    for (const b of inside) {
      if (b.start <= instant && instant < b.end) {
        for (const [resourceClass, amount] of Object.entries(b.amounts)) total[resourceClass] = (total[resourceClass] ?? 0) + amount;
      }
    }
    for (const [resourceClass, amount] of Object.entries(total)) peak[resourceClass] = Math.max(peak[resourceClass] ?? 0, amount);
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

/**
 * The earliest start ≥ `from` at which some provider can take `request` for `durationMs`, and on
 * which provider; undefined if none ever can. A fit can only begin at `from` or where a booking
 * ends, so those are the only instants tried.
 */
export function earliestQuantityFit(
  providers: readonly QuantityProvider[],
  bookings: readonly QuantityBooking[],
  request: Amounts,
  from: number,
  durationMs: number,
): { start: number; providerId: string } | undefined {
  const instants = [...new Set([from, ...bookings.map((b) => b.end).filter((t) => t > from && t !== Infinity)])].sort((a, b) => a - b);
  for (const start of instants) {
    const provider = providers.find((p) => fits(p, bookings, request, start, start + durationMs));
    if (provider) return { start, providerId: provider.id };
  }
  return undefined;
}

/** How long from `from` the request fits on the best provider (Infinity: for ever; 0: not at all). */
export function longestQuantityFit(providers: readonly QuantityProvider[], bookings: readonly QuantityBooking[], request: Amounts, from: number): number {
  let best = 0;
  for (const provider of providers) {
    if (!fits(provider, bookings, request, from, from + 1)) continue;
    // The fit can only break where a booking on this provider begins.
    const starts = bookings
      .filter((b) => b.providerId === provider.id && b.start > from)
      .map((b) => b.start)
      .sort((a, b) => a - b);
    let until = Infinity;
    for (const start of starts) {
      if (!fits(provider, bookings, request, from, start + 1)) {
        until = start;
        break;
      }
    }
    best = Math.max(best, until - from);
  }
  return best;
}
