/**
 * Fair share over time (issue 42): the usage policy's rules on how a project spreads its bookings
 * over the calendar. Pure, as domain/usage-policy.ts (which runs them with its other rules):
 *
 * - `lead_time`: what a project may hold beginning more than N days from now (hosts and vCPUs at
 *   once, host-hours in all); sooner, any number.
 * - `stacking`: a project's share of a host class (a property query over the hosts' capabilities)
 *   over any window of D days, overlapping leases counted once: the host-time of the union of its
 *   bookings per host, over the class's host count × D days.
 * - `allocation_end`: no lease may end after the project's allocation does.
 *
 * Each evaluates to figures (limit, would-be value) whether or not it refuses: the dry run
 * (`POST /v1/policy/check`) shows them all; admission refuses on the first that fails.
 */
import { formatMessageDate } from './dates';
import type { Lease } from './lease';
import { isPreemptibleReservation } from './preemption';
import { bookedInterval, HOUR_MS, holdingOf, integralOfSteps, meterHours, peakWithin, type Holding, type Interval, type MeteredLease } from './usage';

export const FAIR_SHARE_RULE_NAMES = ['lead_time', 'stacking', 'member_budget', 'allocation_end'] as const;
export type FairShareRuleName = (typeof FAIR_SHARE_RULE_NAMES)[number];

export const DAY_MS = 24 * HOUR_MS;
/** Steps of `lead_time` and classes of `stacking`, per policy: a bounded shape. */
export const MAX_FAIR_SHARE_STEPS = 8;
/**
 * The most of a project's leases lead_time and stacking each read (lead_time: those beginning past
 * its nearest step; stacking: those in its windows around the lease). Other rules keep a project far
 * below it (max_leases); a lease that falls under a step or class of a project past it is refused by
 * that rule (its check would not be exact). The budgets' and at-once rules' reads are not capped.
 */
export const FAIR_SHARE_LEDGER_CAP = 2_000;

/** One step of `lead_time`: limits on what begins more than `beyondMs` from now. */
export interface LeadTimeStep {
  beyondMs: number;
  maxHosts?: number;
  maxVcpus?: number;
  maxHostHours?: number;
}

/** One host class of `stacking`: `query` is the class's property query as written (resource_properties), `matches` tells its hosts. */
export interface StackingClass {
  query: string;
  windowMs: number;
  maxPercent: number;
}

export interface FairSharePolicy {
  leadTime?: LeadTimeStep[];
  stacking?: StackingClass[];
  /** Per-member budgets inside the project's budget (its period and meter): by user id, else `default`. */
  memberBudgets?: { default?: number; byUser: Record<string, number> };
  allocationEndMs?: number;
}

/** What lead_time and stacking read of the project (enforcement reads it for the spans fairShareSpans names). */
export interface FairShareLedger {
  /** Each stacking class's hosts (same order as the policy's classes). */
  classHosts: Array<ReadonlySet<string>>;
  /** The project's other leases in the spans read; absent: the ledger's `others` (pure tests). */
  leases?: MeteredLease[];
  /** The rules whose span held more leases than the cap read (the cap, by rule): they refuse (their check would not be exact). */
  overCap?: Partial<Record<'lead_time' | 'stacking', number>>;
}

/** One rule's figures: what the dry run shows, and, when not ok, what admission refuses with. */
export interface RuleFigures {
  rule: FairShareRuleName;
  ok: boolean;
  limit: number | string;
  value: number | string;
  message: string;
  details?: Record<string, unknown>;
}

interface Change {
  next: Lease;
  previous?: Lease;
  nowMs: number;
}

const round = (n: number) => Math.round(n * 100) / 100;

// ---- allocation_end -------------------------------------------------------------------------

export function allocationEndFigures(policy: FairSharePolicy, { next, previous }: Change): RuleFigures | undefined {
  const endMs = policy.allocationEndMs;
  if (endMs === undefined) return undefined;
  const limit = formatMessageDate(endMs);
  const value = formatMessageDate(next.endMs);
  // An update that does not move the end later is never refused (a lease over an end set since may still shrink).
  const ok = next.endMs <= endMs || (previous !== undefined && next.endMs <= previous.endMs);
  const message = ok
    ? `allocation_end: the lease ends ${value}, by the project's allocation end ${limit}.`
    : `allocation_end: project ${next.projectId}'s allocation ends ${limit}; this lease would end ${value}; it fits with an end_date up to ${limit}.`;
  return { rule: 'allocation_end', ok, limit, value, message, details: { limit, value, latest_end: limit } };
}

// ---- lead_time ------------------------------------------------------------------------------

/** The holdings that begin more than `beyondMs` from now. */
function beginningBeyond(holdings: Holding[], horizonMs: number): Holding[] {
  return holdings.filter((h) => h.interval.startMs > horizonMs);
}

/**
 * Each step's figures for the lease (only steps it falls under: a lease beginning sooner is not
 * counted). Host-hours as charged (`preemptibleFactor`), hosts and vCPUs at once in full.
 */
export function leadTimeFigures(policy: FairSharePolicy, change: Change, others: MeteredLease[], preemptibleFactor = 1): RuleFigures[] {
  const steps = policy.leadTime ?? [];
  const { next, previous, nowMs } = change;
  const mine = others.map((m) => holdingOf(m, nowMs, preemptibleFactor)).filter((h): h is Holding => h !== undefined);
  const nextHolding = holdingOf({ lease: next }, nowMs, preemptibleFactor);
  const previousHolding = previous ? holdingOf({ lease: previous }, nowMs, preemptibleFactor) : undefined;
  const figures: RuleFigures[] = [];
  for (const step of steps) {
    const horizonMs = nowMs + step.beyondMs;
    if (!nextHolding || nextHolding.interval.startMs <= horizonMs) continue;
    const days = round(step.beyondMs / DAY_MS);
    const latestStart = formatMessageDate(Math.floor(horizonMs / 60_000) * 60_000); // a start by then is not counted
    const ahead = beginningBeyond(mine, horizonMs);
    const beyond: Interval = { startMs: horizonMs, endMs: Infinity };
    const measures: Array<{ name: string; limit: number | undefined; meter: 'hosts' | 'vcpus'; measure: (with_: Holding) => number; unit: string }> = [
      { name: 'max_hosts', limit: step.maxHosts, meter: 'hosts', measure: (h) => peakWithin([...ahead, h], 'hosts', h.interval), unit: 'host(s) at once' },
      { name: 'max_vcpus', limit: step.maxVcpus, meter: 'vcpus', measure: (h) => peakWithin([...ahead, h], 'vcpus', h.interval), unit: 'vCPU(s) at once' },
      { name: 'max_host_hours', limit: step.maxHostHours, meter: 'hosts', measure: (h) => meterHours([...ahead, h], 'hosts', beyond), unit: 'host-hours' },
    ];
    for (const { name, limit, meter, measure, unit } of measures) {
      // A lease that holds none of what a limit counts adds nothing to it.
      if (limit === undefined || !nextHolding.footprint[meter]) continue;
      const value = round(measure(nextHolding));
      const before = previousHolding && previousHolding.interval.startMs > horizonMs ? measure(previousHolding) : undefined;
      const ok = value <= limit + 1e-9 || (before !== undefined && value <= before + 1e-9);
      const message = ok
        ? `lead_time: ${value} of ${limit} ${unit} beginning more than ${days} days ahead.`
        : `lead_time: project ${next.projectId} may hold at most ${limit} ${unit} beginning more than ${days} days from now (${name}); with this lease it would hold ${value}; it fits starting by ${latestStart}, or smaller.`;
      figures.push({ rule: 'lead_time', ok, limit, value, message, details: { step: name, beyond_days: days, limit, value, latest_start: latestStart } });
    }
  }
  return figures;
}

// ---- stacking -------------------------------------------------------------------------------

/**
 * A host reservation's hosts within a class: its booked hosts there, or (not yet booked: a preview)
 * as many stand-ins as it asks when it asks for that class by the same query; each with whether its
 * reservation is preemptible (its host-time is charged at the factor).
 */
function classHostsOf(lease: Lease, classQuery: string, hosts: ReadonlySet<string>): Array<{ host: string; preemptible: boolean }> {
  const found: Array<{ host: string; preemptible: boolean }> = [];
  for (const r of lease.reservations) {
    if (r.resource_type !== 'physical:host') continue;
    const preemptible = isPreemptibleReservation(r);
    const booked = r.allocation?.host_ids;
    if (Array.isArray(booked)) {
      for (const id of booked) if (hosts.has(String(id))) found.push({ host: String(id), preemptible });
    } else if (sameQuery(r.params.resource_properties, classQuery)) {
      const count = r.footprint?.hosts ?? Number(r.params.min ?? 0);
      for (let i = 0; i < count; i++) found.push({ host: `${lease.id}/${r.id}/${i}`, preemptible });
    }
  }
  return found;
}

function sameQuery(asked: unknown, classQuery: string): boolean {
  if (typeof asked !== 'string' || asked === '') return false;
  try {
    return JSON.stringify(JSON.parse(asked)) === JSON.stringify(JSON.parse(classQuery));
  } catch {
    return false;
  }
}

/** The union of intervals (sorted, merged). */
function union(intervals: Interval[]): Interval[] {
  const sorted = [...intervals].sort((a, b) => a.startMs - b.startMs);
  const merged: Interval[] = [];
  for (const interval of sorted) {
    const last = merged[merged.length - 1];
    if (last && interval.startMs <= last.endMs) last.endMs = Math.max(last.endMs, interval.endMs);
    else merged.push({ ...interval });
  }
  return merged;
}

/**
 * The peak share (host-time over hosts × window) of the class the project holds in any window of
 * `windowMs` that overlaps `around`: the share as a function of the window's start is piecewise
 * linear, so its maximum is at a window that starts at a booking's start or ends at a booking's
 * end. O(n log n) in the project's bookings of the class. Preemptible host-time counts
 * `preemptibleFactor` of its length.
 */
export function peakClassShare(leases: Array<{ lease: Lease; interval: Interval }>, stacking: StackingClass, hosts: ReadonlySet<string>, around: Interval, preemptibleFactor = 1): { percent: number; window: Interval } {
  // Per host and kind: overlapping leases are counted once (a regular and a preemptible booking of one host never overlap).
  const perHost = new Map<string, { rate: number; intervals: Interval[] }>();
  for (const { lease, interval } of leases) {
    for (const { host, preemptible } of classHostsOf(lease, stacking.query, hosts)) {
      const key = `${preemptible ? 'p' : 'r'}:${host}`;
      const held = perHost.get(key);
      if (held) held.intervals.push(interval);
      else perHost.set(key, { rate: preemptible ? preemptibleFactor : 1, intervals: [interval] });
    }
  }
  const booked = [...perHost.values()].flatMap(({ rate, intervals }) => union(intervals).map((b) => ({ ...b, rate })));
  // Host-time held up to any instant, as charged: the slope is how many hosts are held at once, each at its rate.
  const held = integralOfSteps(booked.flatMap((b): Array<[number, number]> => [[b.startMs, b.rate], [b.endMs, -b.rate]])).upTo;
  const capacityMs = hosts.size * stacking.windowMs;
  let best = { percent: 0, window: { startMs: around.startMs, endMs: around.startMs + stacking.windowMs } };
  for (const b of booked) {
    for (const startMs of [b.startMs, b.endMs - stacking.windowMs]) {
      const window = { startMs, endMs: startMs + stacking.windowMs };
      if (window.endMs <= around.startMs || window.startMs >= around.endMs) continue;
      const percent = capacityMs > 0 ? ((held(window.endMs) - held(window.startMs)) / capacityMs) * 100 : 0;
      if (percent > best.percent) best = { percent, window };
    }
  }
  return best;
}

export function stackingFigures(policy: FairSharePolicy, change: Change, others: MeteredLease[], ledger: FairShareLedger, preemptibleFactor = 1): RuleFigures[] {
  const { next, previous, nowMs } = change;
  const figures: RuleFigures[] = [];
  const held = others.flatMap((m) => {
    const interval = bookedInterval(m, nowMs);
    return interval ? [{ lease: m.lease, interval }] : [];
  });
  (policy.stacking ?? []).forEach((stacking, i) => {
    const hosts = ledger.classHosts[i] ?? new Set<string>();
    const withLease = (lease: Lease) => {
      const interval = bookedInterval({ lease }, nowMs);
      return interval && classHostsOf(lease, stacking.query, hosts).length > 0 ? peakClassShare([...held, { lease, interval }], stacking, hosts, interval, preemptibleFactor) : undefined;
    };
    const peak = withLease(next);
    if (!peak) return; // the lease holds none of the class
    const before = previous ? withLease(previous) : undefined;
    const days = round(stacking.windowMs / DAY_MS);
    const value = round(peak.percent);
    const ok = peak.percent <= stacking.maxPercent + 1e-9 || (before !== undefined && peak.percent <= before.percent + 1e-9);
    const message = ok
      ? `stacking: ${value}% of ${stacking.maxPercent}% of class ${stacking.query} (${hosts.size} hosts) over any ${days} days.`
      : `stacking: project ${next.projectId} may hold at most ${stacking.maxPercent}% of the hosts matching ${stacking.query} (${hosts.size} hosts) over any ${days} days; with this lease it would hold ${value}% in the ${days} days from ${formatMessageDate(peak.window.startMs)}; it fits shorter, with fewer hosts, or later.`;
    figures.push({ rule: 'stacking', ok, limit: stacking.maxPercent, value, message, details: { class: stacking.query, class_hosts: hosts.size, window_days: days, limit: stacking.maxPercent, value, window_start: formatMessageDate(peak.window.startMs) } });
  });
  return figures;
}

/** The refusal of `rule` when the project's leases in the span it counts went past the cap. */
export function overCapFigures(rule: 'lead_time' | 'stacking', ledger: FairShareLedger): RuleFigures | undefined {
  const cap = ledger.overCap?.[rule];
  if (cap === undefined) return undefined;
  return {
    rule,
    ok: false,
    limit: cap,
    value: cap + 1,
    message: `${rule}: the project has more than ${cap} leases in the span this rule counts, more than the check reads; end or delete some first.`,
    details: { limit: cap },
  };
}

/** The member budget that applies to a user: theirs, else the default, else none. */
export function memberBudgetOf(policy: FairSharePolicy, userId: string): number | undefined {
  const budgets = policy.memberBudgets;
  if (!budgets) return undefined;
  return Object.prototype.hasOwnProperty.call(budgets.byUser, userId) ? budgets.byUser[userId] : budgets.default;
}

/**
 * What lead_time and stacking read of the project's other leases for the change, only where the
 * lease (as it would be) falls under a step or holds hosts of a class: the leases beginning after
 * the nearest step it falls under (lead_time), and the lease's span widened by its classes' widest
 * window (stacking). Nothing to read: the rule counts nothing for this lease.
 */
export function fairShareSpans(policy: FairSharePolicy, change: Change, classHosts: Array<ReadonlySet<string>>, applies: { leadTime: boolean; stacking: boolean }): { leadTimeAfterMs?: number; stackingSpan?: Interval } {
  const { next, previous, nowMs } = change;
  const spans: { leadTimeAfterMs?: number; stackingSpan?: Interval } = {};
  const nextInterval = bookedInterval({ lease: next }, nowMs);
  if (applies.leadTime && nextInterval) {
    const under = (policy.leadTime ?? []).filter((step) => nextInterval.startMs > nowMs + step.beyondMs);
    if (under.length) spans.leadTimeAfterMs = nowMs + Math.min(...under.map((s) => s.beyondMs));
  }
  if (applies.stacking) {
    const held = (policy.stacking ?? []).filter((stacking, i) => classHostsOf(next, stacking.query, classHosts[i] ?? new Set()).length > 0);
    if (held.length) {
      const leases = [next, previous].filter((l): l is Lease => l !== undefined);
      const widest = Math.max(...held.map((s) => s.windowMs));
      spans.stackingSpan = { startMs: Math.min(...leases.map((l) => l.startMs)) - widest, endMs: Math.max(...leases.map((l) => l.endMs)) + widest };
    }
  }
  return spans;
}

/**
 * The fair-share rules' figures for the change, per rule (only those the lease falls under), in the
 * order admission runs them: the one computation behind both the admission's refusal and the dry run.
 * `preemptibleFactor`: what a preemptible hour is charged for in the rules that count hours.
 */
export function fairShareFigures(policy: FairSharePolicy, change: Change, others: MeteredLease[], ledger: FairShareLedger, preemptibleFactor = 1): Partial<Record<'allocation_end' | 'lead_time' | 'stacking', RuleFigures[]>> {
  const leases = ledger.leases ?? others;
  const present = (figures: Array<RuleFigures | undefined>) => figures.filter((f): f is RuleFigures => f !== undefined);
  return {
    allocation_end: present([allocationEndFigures(policy, change)]),
    lead_time: policy.leadTime?.length ? present([overCapFigures('lead_time', ledger), ...leadTimeFigures(policy, change, leases, preemptibleFactor)]) : [],
    stacking: policy.stacking?.length ? present([overCapFigures('stacking', ledger), ...stackingFigures(policy, change, leases, ledger, preemptibleFactor)]) : [],
  };
}
