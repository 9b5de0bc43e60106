/**
 * Metering: what a lease holds (its reservations' footprints) and for how long, booked and used.
 * Pure: the usage policy (domain/usage-policy.ts) and the usage API (`GET /v1/usage`) both count
 * with these functions, so that a refusal and a report never disagree.
 */
import { formatMonth } from './dates';
import type { Lease, Reservation } from './lease';
import { isPreemptibleReservation } from './preemption';

/** What one reservation holds at once, in the units the policy and the usage report count. */
export interface Footprint {
  hosts?: number;
  vcpus?: number;
  memory_mb?: number;
  disk_gb?: number;
  /** Guaranteed egress bandwidth. */
  bandwidth_kbps?: number;
  floating_ips?: number;
  /** Network segments (issue 45). */
  networks?: number;
}

export const METERS = ['hosts', 'vcpus', 'memory_mb', 'disk_gb', 'bandwidth_kbps', 'floating_ips', 'networks'] as const;
export type Meter = (typeof METERS)[number];

export const HOUR_MS = 3_600_000;

/** A half-open interval [startMs, endMs) in epoch milliseconds. */
export interface Interval {
  startMs: number;
  endMs: number;
}

export const overlapMs = (a: Interval, b: Interval): number => Math.max(0, Math.min(a.endMs, b.endMs) - Math.max(a.startMs, b.startMs));

const count = (value: unknown): number => (typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : 0);
const numberParam = (params: Record<string, unknown>, key: string): number => count(typeof params[key] === 'string' ? Number(params[key]) : params[key]);

/**
 * The reservation's footprint: the one its resource type reported when it booked, or for a lease
 * booked before footprints were reported, what its parameters and allocation say.
 */
export function footprintOf(reservation: Pick<Reservation, 'resource_type' | 'params' | 'allocation' | 'footprint'>): Footprint {
  if (reservation.footprint) return reservation.footprint;
  const { params, allocation = {} } = reservation;
  switch (reservation.resource_type) {
    case 'physical:host':
      return { hosts: Array.isArray(allocation.host_ids) ? allocation.host_ids.length : 0 };
    case 'virtual:instance': {
      const amount = numberParam(params, 'amount');
      return { vcpus: amount * numberParam(params, 'vcpus'), memory_mb: amount * numberParam(params, 'memory_mb'), disk_gb: amount * numberParam(params, 'disk_gb') };
    }
    case 'virtual:server': {
      const booked = (allocation.footprint ?? {}) as Record<string, unknown>;
      return { vcpus: count(booked.VCPU) + count(booked.PCPU), memory_mb: count(booked.MEMORY_MB), disk_gb: count(booked.DISK_GB) };
    }
    case 'network:bandwidth':
      return { bandwidth_kbps: (numberParam(params, 'amount') || 1) * numberParam(params, 'egress_kbps') };
    case 'virtual:floatingip':
      return { floating_ips: Array.isArray(allocation.floatingip_ids) ? allocation.floatingip_ids.length : numberParam(params, 'amount') || 1 };
    case 'network':
      return { networks: 1 };
    default:
      return {}; // flavor:instance booked before footprints: its slot size was not kept
  }
}

/** Placement's resource classes (a booking's amounts) in the meters' units. */
export function footprintOfAmounts(amounts: Record<string, number>, times = 1): Footprint {
  const footprint: Footprint = {};
  const add = (meter: Meter, value: number | undefined) => {
    if (value) footprint[meter] = (footprint[meter] ?? 0) + value * times;
  };
  add('vcpus', amounts.VCPU);
  add('vcpus', amounts.PCPU);
  add('memory_mb', amounts.MEMORY_MB);
  add('disk_gb', amounts.DISK_GB);
  return footprint;
}

export function addFootprints(...footprints: Footprint[]): Footprint {
  const sum: Footprint = {};
  for (const footprint of footprints) {
    for (const meter of METERS) {
      const amount = footprint[meter];
      if (amount) sum[meter] = (sum[meter] ?? 0) + amount;
    }
  }
  return sum;
}

/** A footprint times `rate` (the amounts an hour of it is charged for). */
function scaledFootprint(footprint: Footprint, rate: number): Footprint {
  if (rate === 1) return footprint;
  const scaled: Footprint = {};
  for (const meter of METERS) if (footprint[meter]) scaled[meter] = footprint[meter] * rate;
  return scaled;
}

/**
 * What an hour of the reservation is charged for (issue 43): a preemptible reservation's hour is
 * borrowed time that any regular lease takes back, charged `preemptibleFactor` of a regular hour
 * (LK_PREEMPTIBLE_CHARGE_FACTOR); every other hour counts in full.
 */
export function chargeRateOf(reservation: Pick<Reservation, 'params'>, preemptibleFactor: number): number {
  return isPreemptibleReservation(reservation) ? preemptibleFactor : 1;
}

/** What the whole lease's hours are charged for: each reservation's footprint at its charge rate. */
export function chargedFootprint(lease: Pick<Lease, 'reservations'>, preemptibleFactor: number): Footprint {
  return addFootprints(...lease.reservations.map((r) => scaledFootprint(footprintOf(r), chargeRateOf(r, preemptibleFactor))));
}

/** What the whole lease holds at once (its metered span says when: see bookedInterval and usedInterval). */
export function leaseFootprint(lease: Pick<Lease, 'reservations'>): Footprint {
  return addFootprints(...lease.reservations.map(footprintOf));
}

/** A lease as the meter reads it: its document, and when it was deleted (deleted leases count for what they used). */
export interface MeteredLease {
  lease: Lease;
  deletedAtMs?: number;
  /**
   * Where a regular lease's admission cut this preemptible lease (issue 43) while its workflow has
   * not yet moved its end there (lease_preemptions): it holds nothing past the cut, and is charged
   * for nothing past it either.
   */
  cutEndMs?: number;
}

/**
 * A host lent by a lease (issue 43; a host_lendings row), or slots lent on one host (a
 * quantity_lendings row), as the meter reads it: the lender's project, when it was lent and back,
 * and what its borrowers booked in it (the lender's credit).
 */
export interface MeteredLending {
  /** The lender's resource type (the group it counts under); physical:host when absent. */
  resourceType?: string;
  /** What it lends at once (a slot lending: its slots' amounts); one host when absent. */
  footprint?: Footprint;
  /** What one millisecond of `borrowedMs` holds (a slot lending: one slot's amounts, its borrowed time being slot-ms); one host when absent. */
  borrowedUnit?: Footprint;
  id: string;
  projectId: string;
  startMs: number;
  /** Its end as lent (or as a reclaim shortened it). */
  untilMs: number;
  /** When the host was back in its lender's hands; null while it is not. */
  returnedMs: number | null;
  /** Once returned: the host-ms (slot-ms) its borrowers booked in it; null before. */
  borrowedMs: number | null;
}

/** When the lease's resources became the lessee's, if they did. */
function usedFromMs(lease: Lease): number | undefined {
  const start = lease.events.find((e) => e.event_type === 'start_lease');
  return start?.status === 'DONE' ? (start.finishedAt ?? lease.startMs) : undefined;
}

/**
 * The span the lessee had the resources: from the start's end to the end's beginning (an early
 * end stops the meter), to the deletion, or to `nowMs` while the lease runs.
 */
export function usedInterval({ lease, deletedAtMs, cutEndMs }: MeteredLease, nowMs: number): Interval | undefined {
  const from = usedFromMs(lease);
  if (from === undefined) return undefined;
  const end = lease.events.find((e) => e.event_type === 'end_lease');
  const endedMs = end && end.status !== 'UNDONE' ? (end.startedAt ?? lease.endMs) : undefined;
  // An owed cut stops the meter only while the lease runs: once it ended (late, after its eviction) or was deleted, that is when.
  const running = endedMs === undefined && deletedAtMs === undefined;
  const to = running ? Math.min(nowMs, lease.endMs, cutEndMs ?? Infinity) : Math.min(endedMs ?? Infinity, deletedAtMs ?? Infinity);
  return to > from ? { startMs: from, endMs: to } : undefined;
}

/**
 * The span the project is charged for: the booked window of a live lease (future time counts as
 * soon as it is admitted), only what was used once deleted (the rest is refunded), nothing for a
 * lease whose start failed (its bookings were freed).
 */
export function bookedInterval(metered: MeteredLease, nowMs: number): Interval | undefined {
  const { lease, deletedAtMs } = metered;
  if (deletedAtMs !== undefined) return usedInterval(metered, nowMs);
  const start = lease.events.find((e) => e.event_type === 'start_lease');
  if (lease.status === 'ERROR' && start?.status === 'ERROR') return undefined;
  // A lease denied approval never held anything: its capacity went back at the denial.
  if (lease.approval?.outcome === 'denied') return undefined;
  // A preempted lease is charged up to its cut, never for the window it first asked for.
  const endMs = Math.min(lease.endMs, metered.cutEndMs ?? Infinity);
  return endMs > lease.startMs ? { startMs: lease.startMs, endMs } : undefined;
}

/** A footprint held over an interval: the unit of every sum below. */
export interface Holding {
  /** What is held at once (the rules on amounts at once count it in full). */
  footprint: Footprint;
  interval: Interval;
  /** What an hour of it is charged for (chargedFootprint; the sums of hours count it); absent: the footprint. */
  charged?: Footprint;
}

/** The lease's holding as the usage policy counts it: its booked interval, what it holds, what its hours are charged for. */
export function holdingOf(metered: MeteredLease, nowMs: number, preemptibleFactor: number): Holding | undefined {
  const interval = bookedInterval(metered, nowMs);
  return interval ? { footprint: leaseFootprint(metered.lease), interval, charged: chargedFootprint(metered.lease, preemptibleFactor) } : undefined;
}

/** What an hour of the holding is charged for in `meter`. */
export const chargedAmount = (holding: Holding, meter: Meter): number => (holding.charged ?? holding.footprint)[meter] ?? 0;

/** Meter-hours of these holdings within `window` (e.g. host-hours in a month), as charged. */
export function meterHours(holdings: readonly Holding[], meter: Meter, window: Interval): number {
  let ms = 0;
  for (const holding of holdings) ms += chargedAmount(holding, meter) * overlapMs(holding.interval, window);
  return ms / HOUR_MS;
}

/**
 * The most of `meter` held at once within `window`: a sweep over the holdings' ends, O(n log n).
 * Ends come before starts at the same instant (back-to-back leases do not add up).
 */
export function peakWithin(holdings: readonly Holding[], meter: Meter, window: Interval): number {
  const edges: Array<[number, number]> = [];
  for (const { footprint, interval } of holdings) {
    const amount = footprint[meter] ?? 0;
    if (amount === 0 || overlapMs(interval, window) === 0) continue;
    edges.push([Math.max(interval.startMs, window.startMs), amount], [Math.min(interval.endMs, window.endMs), -amount]);
  }
  edges.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let load = 0;
  let peak = 0;
  for (const [, delta] of edges) {
    load += delta;
    peak = Math.max(peak, load);
  }
  return peak;
}

/**
 * The integral up to any instant of a step function given by its changes ([instant, change of
 * the rate]): piecewise linear, read by binary search. O(n log n) to build, O(log n) a read.
 * `edges`: the instants where the rate changes, sorted.
 */
export function integralOfSteps(changes: ReadonlyArray<readonly [number, number]>): { edges: number[]; upTo: (t: number) => number } {
  const rateChange = new Map<number, number>();
  for (const [t, delta] of changes) rateChange.set(t, (rateChange.get(t) ?? 0) + delta);
  const edges = [...rateChange.keys()].sort((a, b) => a - b);
  const rates: number[] = [];
  const cumulative: number[] = [];
  let rate = 0;
  let total = 0;
  edges.forEach((t, i) => {
    if (i > 0) total += rate * (t - edges[i - 1]);
    cumulative.push(total);
    rate += rateChange.get(t)!;
    rates.push(rate);
  });
  const upTo = (t: number): number => {
    let lo = 0;
    let hi = edges.length - 1;
    if (hi < 0 || t <= edges[0]) return 0;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (edges[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    return cumulative[lo] + rates[lo] * (t - edges[lo]);
  };
  return { edges, upTo };
}

/**
 * The most meter-hours (as charged) within any window of `lengthMs` that overlaps `around` (a rolling budget):
 * the windowed sum is piecewise linear in the window's start, so its maximum is where the window's
 * start or end meets a holding's edge. O(n log n) with cumulative sums.
 */
export function peakRollingHours(holdings: readonly Holding[], meter: Meter, lengthMs: number, around: Interval): { hours: number; window: Interval } {
  const rated = holdings.filter((h) => chargedAmount(h, meter) > 0 && h.interval.endMs > h.interval.startMs);
  const meterMs = integralOfSteps(rated.flatMap((h): Array<[number, number]> => [[h.interval.startMs, chargedAmount(h, meter)], [h.interval.endMs, -chargedAmount(h, meter)]]));
  const earliest = around.startMs - lengthMs;
  const latest = around.endMs;
  const candidates = new Set<number>([earliest, latest]);
  for (const t of meterMs.edges) {
    for (const start of [t, t - lengthMs]) if (start >= earliest && start <= latest) candidates.add(start);
  }
  let best = { hours: 0, window: { startMs: earliest, endMs: earliest + lengthMs } };
  for (const start of candidates) {
    const hours = (meterMs.upTo(start + lengthMs) - meterMs.upTo(start)) / HOUR_MS;
    if (hours > best.hours) best = { hours, window: { startMs: start, endMs: start + lengthMs } };
  }
  return best;
}

/** The calendar month (UTC) holding `ms`. */
export function monthOf(ms: number): Interval {
  const d = new Date(ms);
  return { startMs: Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1), endMs: Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) };
}

/** Every calendar month (UTC) an interval touches, at most `limit` of them. */
export function monthsOf(interval: Interval, limit = 240): Interval[] {
  const months: Interval[] = [];
  for (let month = monthOf(interval.startMs); month.startMs < interval.endMs && months.length < limit; month = monthOf(month.endMs)) months.push(month);
  return months;
}

/** `2026-12`: how a month is named in refusals and the usage report. */
export const monthName = (month: Interval): string => formatMonth(month.startMs);
