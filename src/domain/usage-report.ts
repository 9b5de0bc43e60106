/**
 * The usage report (`GET /v1/usage`): booked and used resource-hours within a window, summed per
 * group (project, resource type, calendar month, or a combination). Pure and incremental: the API
 * feeds it one lease at a time as it reads them. Each reservation is metered on its own (a lease of
 * hosts and floating IPs counts under both resource types); figures are summed exactly, as integer
 * meter-milliseconds, and rounded only when shown (4 decimals, half up).
 *
 * Preemptible reservations (issue 43) are summed apart as well: each group shows its raw figures
 * (every hour in full), what they are charged for (a preemptible hour at the deployment's factor,
 * LK_PREEMPTIBLE_CHARGE_FACTOR), and how much of them was preemptible (borrowed time).
 *
 * Lenders (issue 43) see what they lent: the host-hours their leases lent (`lent`, from lent until
 * back, or until the lending's end or now while not back), and a credit for what borrowers booked in
 * it (`borrowed_credit_hours`: the borrowed host-hours times the charge factor, what the borrowers
 * paid for that time), counted when the host is back and taken off the lender's charged host-hours.
 * Lent instance slots count the same in their vCPU, memory and disk hours (`lent`, `borrowed_credit`).
 * Lent time nobody borrowed earns nothing: booking hosts to lend them never pays.
 */
import { isPreemptibleReservation } from './preemption';
import { bookedInterval, footprintOf, HOUR_MS, monthName, monthOf, monthsOf, overlapMs, usedInterval, type Footprint, type Interval, type Meter, type MeteredLease, type MeteredLending } from './usage';

export const GROUP_KEYS = ['resource_type', 'project', 'month'] as const;
export type GroupKey = (typeof GROUP_KEYS)[number];

/** What each figure counts, and how many of the meter's units make one of the figure's. */
export const FIGURES = {
  host_hours: { meter: 'hosts', per: 1 },
  vcpu_hours: { meter: 'vcpus', per: 1 },
  memory_gb_hours: { meter: 'memory_mb', per: 1024 },
  disk_gb_hours: { meter: 'disk_gb', per: 1 },
  bandwidth_mbps_hours: { meter: 'bandwidth_kbps', per: 1000 },
  floating_ip_hours: { meter: 'floating_ips', per: 1 },
  network_hours: { meter: 'networks', per: 1 },
} as const satisfies Record<string, { meter: Meter; per: number }>;
export type Figure = keyof typeof FIGURES;
export const FIGURE_NAMES = Object.keys(FIGURES) as Figure[];

export type UsageFigures = Record<Figure, number>;

/** How a group is named in the report: `project` is shown as `project_id`, as elsewhere in the API. */
export const GROUP_FIELDS: Record<GroupKey, 'resource_type' | 'project_id' | 'month'> = { resource_type: 'resource_type', project: 'project_id', month: 'month' };

/** Booked and used figures of one kind (as charged, or the preemptible part). */
export interface BookedAndUsed {
  booked: UsageFigures;
  used: UsageFigures;
}

export interface UsageGroup {
  project_id?: string;
  resource_type?: string;
  month?: string;
  /** Every hour in full. */
  booked: UsageFigures;
  used: UsageFigures;
  /** As charged: preemptible hours times the charge factor, others in full. */
  charged: BookedAndUsed;
  /** The preemptible part of `booked` and `used` (in full), and its leases; only in groups that hold some. */
  preemptible?: BookedAndUsed & { leases: number };
  /** Host-hours the group's leases lent (issue 43), and the other figures' hours of the instance slots they lent (only those not zero); only in groups that lent. */
  lent?: { host_hours: number } & Partial<UsageFigures>;
  /** Borrowed host-hours of lendings returned in the group, times the charge factor: taken off `charged`'s host-hours; only in groups that lent. */
  borrowed_credit_hours?: number;
  /** The same credit for borrowed instance slots, per figure (only those not zero), taken off `charged`'s figures; only in groups whose lent slots were borrowed. */
  borrowed_credit?: Partial<UsageFigures>;
  /** Distinct leases booked or used within the group. */
  leases: number;
}

export interface UsageSummary {
  groups: UsageGroup[];
  /** The total always shows its preemptible part (zero when none). */
  total: Pick<UsageGroup, 'booked' | 'used' | 'charged' | 'leases' | 'lent' | 'borrowed_credit_hours' | 'borrowed_credit'> & { preemptible: BookedAndUsed & { leases: number } };
}

/** A lending's resource type, footprint and borrowed unit when the meter names none: one host. */
const LENT_RESOURCE_TYPE = 'physical:host';
const ONE_HOST = { hosts: 1 };

export interface UsageReportOptions {
  window: Interval;
  nowMs: number;
  groupBy: readonly GroupKey[];
  /** What a preemptible hour is charged for (LK_PREEMPTIBLE_CHARGE_FACTOR: 0 to 1). */
  preemptibleChargeFactor: number;
  /** Refuse (TooManyGroups) rather than hold more groups than this. */
  maxGroups?: number;
}

export class TooManyGroups extends Error {
  constructor(readonly limit: number) {
    super(`the report would have more than ${limit} groups`);
  }
}

/** One sum per figure booked, then per figure used; then the same of preemptible reservations only; then per figure lent, and borrowed in returned lendings. */
const FIGURE_COUNT = FIGURE_NAMES.length;
const BOOKED = 0;
const USED = FIGURE_COUNT;
const PREEMPTIBLE = 2 * FIGURE_COUNT;
const LENT = 4 * FIGURE_COUNT;
const BORROWED = LENT + FIGURE_COUNT;
const SLOTS = BORROWED + FIGURE_COUNT;
const HOST_HOURS = FIGURE_NAMES.indexOf('host_hours');
const METER_OF_SLOT = [...FIGURE_NAMES, ...FIGURE_NAMES].map((f) => FIGURES[f].meter);

/**
 * A group's sums in meter-milliseconds, exact: whole amounts (a footprint counts things) add up in
 * a float while it stays a safe integer, then carry into a bigint (a 10-year sum of big footprints
 * passes 2^53); a fractional amount, rare, adds to a float of its own. Typed arrays: a report may
 * hold 100 000 groups.
 */
interface Accumulator {
  values: string[];
  pending: Float64Array;
  carried?: bigint[];
  fraction?: Float64Array;
  leases: number;
  preemptibleLeases: number;
  /** A lending of the group's project counted here. */
  lent: boolean;
}

const accumulator = (values: string[]): Accumulator => ({ values, pending: new Float64Array(SLOTS), leases: 0, preemptibleLeases: 0, lent: false });

function add(sums: Accumulator, slot: number, amount: number, ms: number): void {
  const product = amount * ms;
  if (Number.isSafeInteger(product)) {
    const sum = sums.pending[slot] + product;
    if (Number.isSafeInteger(sum)) {
      sums.pending[slot] = sum;
      return;
    }
    (sums.carried ??= new Array<bigint>(SLOTS).fill(0n))[slot] += BigInt(sums.pending[slot]);
    sums.pending[slot] = product;
  } else if (Number.isSafeInteger(amount)) {
    (sums.carried ??= new Array<bigint>(SLOTS).fill(0n))[slot] += BigInt(amount) * BigInt(ms);
  } else {
    (sums.fraction ??= new Float64Array(SLOTS))[slot] += product;
  }
}

/**
 * Meter-milliseconds as hours of the figure's unit to 4 decimals, rounded half up in integers, so
 * that the last decimal shown is right however large the sum: `unit` meter-milliseconds make
 * 0.0001 of an hour.
 */
function tenThousandths(meterMs: number | bigint, unit: number): number {
  if (typeof meterMs === 'number' && meterMs < 2 ** 50) {
    // Float division of safe integers, its result checked in integers (it may round up past a whole quotient).
    const q = Math.floor((2 * meterMs + unit) / (2 * unit));
    return q * 2 * unit > 2 * meterMs + unit ? q - 1 : q;
  }
  const exact = BigInt(meterMs);
  return Number((exact * 2n + BigInt(unit)) / (2n * BigInt(unit)));
}

const unitOf = (figure: Figure): number => (HOUR_MS / 10_000) * FIGURES[figure].per;

/** A slot's sum: its whole part exact, its fractional part (rare) apart. */
function sumOf(sums: Accumulator, slot: number): { whole: number | bigint; fraction: number } {
  const carried = sums.carried?.[slot] ?? 0n;
  return { whole: carried === 0n ? sums.pending[slot] : carried + BigInt(sums.pending[slot]), fraction: sums.fraction?.[slot] ?? 0 };
}

/** The figures shown (booked from slot BOOKED, used from USED, their preemptible parts PREEMPTIBLE on): rounded here and only here. */
function figures(sums: Accumulator, offset: number): UsageFigures {
  const shown = {} as UsageFigures;
  FIGURE_NAMES.forEach((figure, i) => (shown[figure] = shownFigure(sums, offset + i, figure)));
  return shown;
}

/** One slot's sum as the figure shows it. */
function shownFigure(sums: Accumulator, slot: number, figure: Figure): number {
  const { whole, fraction } = sumOf(sums, slot);
  const unit = unitOf(figure);
  // A fractional amount makes the sum inexact anyway: plain float rounding then.
  return (fraction === 0 ? tenThousandths(whole, unit) : Math.round((Number(whole) + fraction) / unit)) / 10_000;
}

/** The charge factor's denominator: LK_PREEMPTIBLE_CHARGE_FACTOR has at most 6 decimals, so factor × this is whole. */
const FACTOR_SCALE = 1_000_000;

const isZero = (sum: { whole: number | bigint; fraction: number }) => sum.whole === 0 && sum.fraction === 0;

/**
 * The figures as charged (`offset`: BOOKED or USED): the regular part in full and the preemptible
 * part times the factor, less a lender's credit (host-ms, or lent slots' vCPU, memory and disk ms,
 * borrowed in its returned lendings, times the factor) from those figures, never below zero (a lending back in a window, or month, where
 * its lender booked less than its credit: the lease ended as it came back), summed exactly (in
 * millionths) and rounded as the raw ones. Without preemptible time or credit, exactly the raw figures.
 */
function chargedFigures(sums: Accumulator, offset: number, factor: number): UsageFigures {
  const shown = figures(sums, offset);
  const millionths = Math.round(factor * FACTOR_SCALE);
  FIGURE_NAMES.forEach((figure, i) => {
    const preemptible = sumOf(sums, PREEMPTIBLE + offset + i);
    const credited = sumOf(sums, BORROWED + i);
    if ((isZero(preemptible) || factor === 1) && isZero(credited)) return;
    const all = sumOf(sums, offset + i);
    const unit = unitOf(figure);
    if (all.fraction === 0 && preemptible.fraction === 0) {
      const scaled = (BigInt(all.whole) - BigInt(preemptible.whole)) * BigInt(FACTOR_SCALE) + (BigInt(preemptible.whole) - BigInt(credited.whole)) * BigInt(millionths);
      shown[figure] = tenThousandths(scaled > 0n ? scaled : 0n, unit * FACTOR_SCALE) / 10_000;
    } else {
      const charged = Number(all.whole) + all.fraction - (1 - factor) * (Number(preemptible.whole) + preemptible.fraction) - factor * Number(credited.whole);
      shown[figure] = Math.round(Math.max(0, charged) / unit) / 10_000;
    }
  });
  return shown;
}

/** Where (which month, when grouped by month) and how long a reservation was booked or used. */
interface Part {
  month?: string;
  bookedMs: number;
  usedMs: number;
}

/** The window's share of the booked and used intervals, split by calendar month when grouped by month. */
function partsOf(booked: Interval | undefined, used: Interval | undefined, window: Interval, byMonth: boolean): Part[] {
  const clip = (interval: Interval | undefined): Interval | undefined => {
    if (!interval || overlapMs(interval, window) === 0) return undefined;
    return { startMs: Math.max(interval.startMs, window.startMs), endMs: Math.min(interval.endMs, window.endMs) };
  };
  const inBooked = clip(booked);
  const inUsed = clip(used);
  if (!inBooked && !inUsed) return [];
  if (!byMonth) return [{ bookedMs: inBooked ? inBooked.endMs - inBooked.startMs : 0, usedMs: inUsed ? inUsed.endMs - inUsed.startMs : 0 }];
  const span = { startMs: Math.min(inBooked?.startMs ?? Infinity, inUsed?.startMs ?? Infinity), endMs: Math.max(inBooked?.endMs ?? -Infinity, inUsed?.endMs ?? -Infinity) };
  return monthsOf(span, Infinity)
    .map((month) => ({ month: monthName(month), bookedMs: inBooked ? overlapMs(inBooked, month) : 0, usedMs: inUsed ? overlapMs(inUsed, month) : 0 }))
    .filter((part) => part.bookedMs > 0 || part.usedMs > 0);
}

export class UsageReport {
  private readonly groups = new Map<string, Accumulator>();
  private readonly totals = accumulator([]);
  private readonly byMonth: boolean;

  constructor(private readonly options: UsageReportOptions) {
    this.byMonth = options.groupBy.includes('month');
  }

  get groupCount(): number {
    return this.groups.size;
  }

  add(metered: MeteredLease): void {
    const { window, nowMs, groupBy } = this.options;
    // A lease waiting for approval was not granted: booked (the policy counts it), but not charged until approved.
    const booked = metered.lease.status === 'PENDING_APPROVAL' ? undefined : bookedInterval(metered, nowMs);
    const used = usedInterval(metered, nowMs);
    const parts = partsOf(booked, used, window, this.byMonth);
    if (parts.length === 0) return;
    const touched = new Set<Accumulator>();
    const touchedPreemptible = new Set<Accumulator>();
    for (const reservation of metered.lease.reservations) {
      const footprint = footprintOf(reservation);
      const preemptible = isPreemptibleReservation(reservation);
      for (const part of parts) {
        const values = groupBy.map((key) => (key === 'project' ? metered.lease.projectId : key === 'resource_type' ? reservation.resource_type : part.month!));
        const group = this.groupOf(values);
        for (let slot = 0; slot < METER_OF_SLOT.length; slot++) {
          const amount = footprint[METER_OF_SLOT[slot]] ?? 0;
          const ms = slot < USED ? part.bookedMs : part.usedMs;
          if (amount === 0 || ms === 0) continue;
          for (const sums of [group, this.totals]) {
            add(sums, slot, amount, ms);
            if (preemptible) add(sums, PREEMPTIBLE + slot, amount, ms);
          }
        }
        touched.add(group).add(this.totals);
        if (preemptible) touchedPreemptible.add(group).add(this.totals);
      }
    }
    for (const group of touched) group.leases += 1;
    for (const group of touchedPreemptible) group.preemptibleLeases += 1;
  }

  /**
   * A host a lease of the project lent (issue 43): its lent time within the window, from lent until
   * back (or now, while not back), never past the lending's end (which lies in the lender's
   * booking); and, once it came back, the host-ms borrowed in it (the credit), counted at the
   * lending's last moment: a host given back after the lender's end (its end takes it back) is
   * credited in the lender's own time, not in a window or month where it booked nothing.
   */
  addLending(lending: MeteredLending): void {
    const { window, nowMs, groupBy } = this.options;
    const valuesOf = (month: string | undefined) => groupBy.map((key) => (key === 'project' ? lending.projectId : key === 'resource_type' ? (lending.resourceType ?? LENT_RESOURCE_TYPE) : month!));
    // Each figure's amount (a host lending: one host; a slot lending: its slots' vCPUs, memory and disk) times the time.
    const addPerFigure = (sums: Accumulator, offset: number, footprint: Footprint, ms: number) =>
      FIGURE_NAMES.forEach((figure, i) => {
        const amount = footprint[FIGURES[figure].meter] ?? 0;
        if (amount !== 0) add(sums, offset + i, amount, ms);
      });
    const lentUntil = Math.min(lending.returnedMs ?? nowMs, lending.untilMs);
    const lent = lentUntil > lending.startMs ? partsOf({ startMs: lending.startMs, endMs: lentUntil }, undefined, window, this.byMonth) : [];
    for (const part of lent) {
      for (const sums of [this.groupOf(valuesOf(part.month)), this.totals]) {
        addPerFigure(sums, LENT, lending.footprint ?? ONE_HOST, part.bookedMs);
        sums.lent = true;
      }
    }
    const { returnedMs, borrowedMs } = lending;
    if (returnedMs === null || borrowedMs === null || borrowedMs <= 0) return;
    const creditedAt = Math.min(returnedMs, lending.untilMs - 1);
    if (creditedAt < window.startMs || creditedAt >= window.endMs) return;
    for (const sums of [this.groupOf(valuesOf(this.byMonth ? monthName(monthOf(creditedAt)) : undefined)), this.totals]) {
      addPerFigure(sums, BORROWED, lending.borrowedUnit ?? ONE_HOST, borrowedMs);
      sums.lent = true;
    }
  }

  private groupOf(values: string[]): Accumulator {
    const key = JSON.stringify(values);
    let group = this.groups.get(key);
    if (!group) {
      const limit = this.options.maxGroups ?? Infinity;
      if (this.groups.size >= limit) throw new TooManyGroups(limit);
      group = accumulator(values);
      this.groups.set(key, group);
    }
    return group;
  }

  /** The groups in the order of their keys (as `groupBy` lists them), each shown as it is taken. */
  *groupsInOrder(): Generator<UsageGroup> {
    const { groupBy } = this.options;
    const compare = (a: Accumulator, b: Accumulator): number => {
      for (let i = 0; i < a.values.length; i++) if (a.values[i] !== b.values[i]) return a.values[i] < b.values[i] ? -1 : 1;
      return 0;
    };
    for (const group of [...this.groups.values()].sort(compare)) {
      const keys: Partial<Record<(typeof GROUP_FIELDS)[GroupKey], string>> = {};
      groupBy.forEach((key, i) => (keys[GROUP_FIELDS[key]] = group.values[i]));
      const shown: UsageGroup = { ...keys, ...this.shown(group), leases: group.leases };
      if (group.preemptibleLeases > 0) shown.preemptible = this.preemptiblePart(group);
      if (group.lent) Object.assign(shown, this.lentPart(group));
      yield shown;
    }
  }

  /** A group's raw and charged figures. */
  private shown(sums: Accumulator): Pick<UsageGroup, 'booked' | 'used' | 'charged'> {
    const factor = this.options.preemptibleChargeFactor;
    return { booked: figures(sums, BOOKED), used: figures(sums, USED), charged: { booked: chargedFigures(sums, BOOKED, factor), used: chargedFigures(sums, USED, factor) } };
  }

  private preemptiblePart(sums: Accumulator): BookedAndUsed & { leases: number } {
    return { booked: figures(sums, PREEMPTIBLE + BOOKED), used: figures(sums, PREEMPTIBLE + USED), leases: sums.preemptibleLeases };
  }

  /**
   * What a lender's group lent, and its credit (the borrowed hours at the factor), exact to the last
   * decimal shown: host-hours always (as before slots lent), the slots' figures when not zero.
   */
  private lentPart(sums: Accumulator): Pick<UsageGroup, 'lent' | 'borrowed_credit_hours' | 'borrowed_credit'> {
    const millionths = BigInt(Math.round(this.options.preemptibleChargeFactor * FACTOR_SCALE));
    const credit = (i: number) => tenThousandths(BigInt(sumOf(sums, BORROWED + i).whole) * millionths, unitOf(FIGURE_NAMES[i]) * FACTOR_SCALE) / 10_000;
    const lent: NonNullable<UsageGroup['lent']> = { host_hours: shownFigure(sums, LENT + HOST_HOURS, 'host_hours') };
    const slotCredit: Partial<UsageFigures> = {};
    FIGURE_NAMES.forEach((figure, i) => {
      if (i === HOST_HOURS) return;
      const hours = shownFigure(sums, LENT + i, figure);
      if (hours !== 0) lent[figure] = hours;
      const credited = credit(i);
      if (credited !== 0) slotCredit[figure] = credited;
    });
    return { lent, borrowed_credit_hours: credit(HOST_HOURS), ...(Object.keys(slotCredit).length > 0 ? { borrowed_credit: slotCredit } : {}) };
  }

  /** Like a group's, the lent part only when something was lent. */
  total(): UsageSummary['total'] {
    return { ...this.shown(this.totals), preemptible: this.preemptiblePart(this.totals), leases: this.totals.leases, ...(this.totals.lent ? this.lentPart(this.totals) : {}) };
  }

  summary(): UsageSummary {
    return { groups: [...this.groupsInOrder()], total: this.total() };
  }
}

/** The whole report at once (tests; the API feeds a UsageReport batch by batch). */
export function usageReport(leases: Iterable<MeteredLease>, options: UsageReportOptions, lendings: Iterable<MeteredLending> = []): UsageSummary {
  const report = new UsageReport(options);
  for (const metered of leases) report.add(metered);
  for (const lending of lendings) report.addLending(lending);
  return report.summary();
}
