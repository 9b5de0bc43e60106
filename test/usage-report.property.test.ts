/**
 * The usage report against a brute force: random leases (pending, running, ended, ended in error,
 * failed at their start; some deleted) made from what happened to them (when they were booked,
 * when their resources were held), on quarter-hour-aligned times, and random report windows. The
 * brute force walks the window quarter-hour by quarter-hour, asks what each lease was booked and
 * holding then (from the story, not from the meter's functions), and adds up per project,
 * resource type and month; every grouping of the report must equal it to the last decimal shown.
 * Some reservations are preemptible: their part is summed apart, and charged at a random factor.
 * Random lendings (issue 43) add their lent host-hours to their project's hosts, and once back, a
 * credit of their borrowed hours at the factor, taken off the charged host-hours (never below 0).
 */
import fc from 'fast-check';
import type { Lease, LeaseEvent, Reservation } from '../src/domain/lease';
import type { Footprint, MeteredLease, MeteredLending } from '../src/domain/usage';
import { FIGURE_NAMES, TooManyGroups, usageReport, type Figure, type GroupKey, type UsageFigures, type UsageGroup, type UsageSummary } from '../src/domain/usage-report';

const HOUR = 3_600_000;
/** Every instant below is a whole number of these after ORIGIN: the brute force's step. */
const UNIT = 15 * 60_000;
/** Near the end of January: leases and windows cross the ends of January, February and March. */
const ORIGIN = Date.UTC(2031, 0, 20);
const SPAN_UNITS = 80 * 96;
const at = (unit: number) => ORIGIN + unit * UNIT;

/** Each figure's meter and unit, written out here rather than taken from the implementation. */
const METER_OF: Record<Figure, { meter: keyof Footprint; per: number }> = {
  host_hours: { meter: 'hosts', per: 1 },
  vcpu_hours: { meter: 'vcpus', per: 1 },
  memory_gb_hours: { meter: 'memory_mb', per: 1024 },
  disk_gb_hours: { meter: 'disk_gb', per: 1 },
  bandwidth_mbps_hours: { meter: 'bandwidth_kbps', per: 1000 },
  floating_ip_hours: { meter: 'floating_ips', per: 1 },
  network_hours: { meter: 'networks', per: 1 },
};

const RESOURCE_TYPES = ['physical:host', 'virtual:server', 'network:bandwidth', 'virtual:floatingip'];

interface ReservationModel {
  resourceType: string;
  /** Absent: a host reservation from before footprints were reported, counted by its allocated hosts. */
  footprint?: Footprint;
  hostCount: number;
  preemptible: boolean;
}

const footprint: fc.Arbitrary<Footprint> = fc.record(
  {
    hosts: fc.integer({ min: 0, max: 4 }),
    vcpus: fc.integer({ min: 0, max: 64 }),
    memory_mb: fc.integer({ min: 0, max: 262_144 }),
    disk_gb: fc.integer({ min: 0, max: 2_000 }),
    bandwidth_kbps: fc.integer({ min: 0, max: 1_000_000 }),
    floating_ips: fc.integer({ min: 0, max: 3 }),
  },
  { requiredKeys: [] },
);

const reservationModel: fc.Arbitrary<ReservationModel> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ resourceType: fc.constantFrom(...RESOURCE_TYPES), footprint, hostCount: fc.constant(0), preemptible: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ resourceType: fc.constant('physical:host'), hostCount: fc.integer({ min: 0, max: 3 }), preemptible: fc.boolean() }) },
);

const KINDS = ['pending', 'active', 'ended', 'end-failed', 'start-failed'] as const;

interface LeaseModel {
  project: string;
  kind: (typeof KINDS)[number];
  offset: number;
  length: number;
  /** When the start finished, from the start date (negative: a provisioning lead time). */
  lag: number;
  /** How late the end began. */
  late: number;
  /** Deleted, this far into the time it could have been. */
  deleted?: number;
  reservations: ReservationModel[];
}

const leaseModel: fc.Arbitrary<LeaseModel> = fc.record({
  project: fc.constantFrom('p1', 'p2', 'p3'),
  kind: fc.constantFrom(...KINDS),
  offset: fc.integer({ min: 0, max: 30 * 96 }),
  length: fc.integer({ min: 1, max: 20 * 96 }),
  lag: fc.integer({ min: -8, max: 8 }),
  late: fc.integer({ min: 0, max: 8 }),
  deleted: fc.option(fc.nat(), { nil: undefined }),
  reservations: fc.array(reservationModel, { maxLength: 3 }),
});

type Span = [number, number] | undefined;

/** A host lent (in units): from `start` for `length`, back `returned` after its start (if by now), `borrowed` of it booked by borrowers. */
interface LendingModel {
  project: string;
  start: number;
  length: number;
  returned?: number;
  borrowed: number;
}

const lendingModel: fc.Arbitrary<LendingModel> = fc.record({
  project: fc.constantFrom('p1', 'p2', 'p3'),
  start: fc.integer({ min: 0, max: SPAN_UNITS }),
  length: fc.integer({ min: 1, max: 10 * 96 }),
  returned: fc.option(fc.integer({ min: 0, max: 12 * 96 }), { nil: undefined }),
  borrowed: fc.nat({ max: 10 * 96 }),
});

/** A lending as the store reads it, and in units: lent over `lent`, its credit's quarter-hours at `credited` (once back: then, or its last unit if back after its end). */
interface LendingStory {
  metered: MeteredLending;
  project: string;
  lent: Span;
  credited?: number;
  borrowed: number;
}

function lendingStory(model: LendingModel, index: number, now: number): LendingStory {
  const returned = model.returned !== undefined && model.start + model.returned <= now ? model.start + model.returned : undefined;
  const until = model.start + model.length;
  // Borrowers book inside the lending, which ends when it is back at the latest.
  const borrowed = Math.min(model.borrowed, Math.min(until, returned ?? until) - model.start);
  const lentUntil = Math.min(returned ?? now, until);
  return {
    metered: { id: String(index), projectId: model.project, startMs: at(model.start), untilMs: at(until), returnedMs: returned === undefined ? null : at(returned), borrowedMs: returned === undefined ? null : borrowed * UNIT },
    project: model.project,
    lent: lentUntil > model.start ? [model.start, lentUntil] : undefined,
    credited: returned === undefined ? undefined : Math.min(returned, until - 1),
    borrowed,
  };
}

/** A lease as the meter reads it, and what happened to it (in units): booked and held when. */
interface Story {
  metered: MeteredLease;
  booked: Span;
  used: Span;
}

function story(model: LeaseModel, index: number, now: number): Story {
  const id = `00000000-0000-4000-8000-${String(index).padStart(12, '0')}`;
  const reservations: Reservation[] = model.reservations.map((r, i) => ({
    id: `${id.slice(0, -4)}${String(i).padStart(4, '0')}`,
    resource_type: r.resourceType,
    status: 'active',
    params: r.preemptible ? { preemptible: true } : {},
    ...(r.footprint ? { footprint: r.footprint } : { allocation: { host_ids: Array.from({ length: r.hostCount }, (_, h) => String(h + 1)) } }),
  }));
  const event = (type: LeaseEvent['event_type'], time: number, status: LeaseEvent['status'], more: Partial<LeaseEvent> = {}): LeaseEvent => ({ id: `${id}-${type}`, event_type: type, time: at(time), status, ...more });
  const lease = (status: Lease['status'], start: number, end: number, events: LeaseEvent[]): Lease => ({
    id, name: id, projectId: model.project, userId: 'u', startMs: at(start), endMs: at(end), status, reservations, events, createdMs: at(start) - HOUR, updatedMs: at(start), version: 2,
  });
  const deletedWithin = (from: number) => (model.deleted === undefined ? undefined : from + (model.deleted % (now - from + 1)));
  const spanOf = (from: number, to: number): Span => (to > from ? [from, to] : undefined);

  switch (model.kind) {
    case 'pending': {
      const start = now + 1 + model.offset;
      const end = start + model.length;
      const deleted = model.deleted === undefined ? undefined : now - (model.deleted % 96);
      const metered = { lease: lease('PENDING', start, end, [event('start_lease', start, 'UNDONE'), event('end_lease', end, 'UNDONE')]), ...(deleted === undefined ? {} : { deletedAtMs: at(deleted) }) };
      return { metered, booked: deleted === undefined ? [start, end] : undefined, used: undefined };
    }
    case 'active': {
      const start = now - model.offset;
      const end = Math.max(start + model.length, now + 1);
      const held = Math.min(start + model.lag, now);
      const deleted = deletedWithin(held);
      // No finishedAt (an older document): the meter takes the start date, as the story does.
      const started = model.lag === 0 ? event('start_lease', start, 'DONE') : event('start_lease', start, 'DONE', { startedAt: at(held), finishedAt: at(held) });
      const metered = { lease: lease('ACTIVE', start, end, [started, event('end_lease', end, 'UNDONE')]), ...(deleted === undefined ? {} : { deletedAtMs: at(deleted) }) };
      const used = spanOf(held, deleted ?? now);
      return { metered, booked: deleted === undefined ? [start, end] : used, used };
    }
    case 'ended':
    case 'end-failed': {
      const end = now - model.offset;
      const start = end - model.length;
      const ended = Math.min(end + model.late, now);
      const held = Math.min(start + model.lag, ended);
      const deleted = deletedWithin(ended);
      const started = model.lag === 0 ? event('start_lease', start, 'DONE') : event('start_lease', start, 'DONE', { finishedAt: at(held) });
      const endStatus = model.kind === 'ended' ? 'DONE' : 'ERROR';
      const stopped = ended === end ? event('end_lease', end, endStatus) : event('end_lease', end, endStatus, { startedAt: at(ended) });
      const status = model.kind === 'ended' ? 'TERMINATED' : 'ERROR';
      const metered = { lease: lease(status, start, end, [started, stopped]), ...(deleted === undefined ? {} : { deletedAtMs: at(deleted) }) };
      const used = spanOf(held, ended);
      return { metered, booked: deleted === undefined ? [start, end] : used, used };
    }
    case 'start-failed': {
      const start = now - model.offset;
      const end = start + model.length;
      const deleted = deletedWithin(start);
      const metered = { lease: lease('ERROR', start, end, [event('start_lease', start, 'ERROR', { startedAt: at(start) }), event('end_lease', end, 'UNDONE')]), ...(deleted === undefined ? {} : { deletedAtMs: at(deleted) }) };
      return { metered, booked: undefined, used: undefined };
    }
  }
}

/** Sums in meter-units × quarter-hours (exact integers) for one (project, resource type, month). */
interface Cell {
  project: string;
  resourceType: string;
  month: string;
  booked: Record<Figure, number>;
  used: Record<Figure, number>;
  leases: Set<string>;
  /** The same of preemptible reservations only. */
  preemptibleBooked: Record<Figure, number>;
  preemptibleUsed: Record<Figure, number>;
  preemptibleLeases: Set<string>;
  /** Quarter-hours of hosts lent, and borrowed in lendings back then (the credit); whether any lending counts here. */
  lent: number;
  borrowed: number;
  lends: boolean;
}

const zeros = () => Object.fromEntries(FIGURE_NAMES.map((f) => [f, 0])) as Record<Figure, number>;
const amountOf = (r: Reservation, figure: Figure): number => (r.footprint ? (r.footprint[METER_OF[figure].meter] ?? 0) : figure === 'host_hours' ? (r.allocation!.host_ids as string[]).length : 0);
const inSpan = (span: Span, unit: number) => span !== undefined && span[0] <= unit && unit < span[1];

/** Quarter-hour by quarter-hour over the window: what each lease was booked and held, where. */
function bruteForce(stories: Story[], from: number, to: number, lendings: LendingStory[] = []): Cell[] {
  const cells = new Map<string, Cell>();
  const cellOf = (project: string, resourceType: string, month: string) => {
    const key = `${project}|${resourceType}|${month}`;
    let cell = cells.get(key);
    if (!cell) {
      cell = { project, resourceType, month, booked: zeros(), used: zeros(), leases: new Set(), preemptibleBooked: zeros(), preemptibleUsed: zeros(), preemptibleLeases: new Set(), lent: 0, borrowed: 0, lends: false };
      cells.set(key, cell);
    }
    return cell;
  };
  for (let unit = from; unit < to; unit++) {
    const month = new Date(at(unit)).toISOString().slice(0, 7);
    for (const lending of lendings) {
      const lent = inSpan(lending.lent, unit);
      const credited = lending.credited === unit && lending.borrowed > 0;
      if (!lent && !credited) continue;
      const cell = cellOf(lending.project, 'physical:host', month);
      if (lent) cell.lent += 1;
      if (credited) cell.borrowed += lending.borrowed;
      cell.lends = true;
    }
    for (const { metered, booked, used } of stories) {
      const isBooked = inSpan(booked, unit);
      const isUsed = inSpan(used, unit);
      if (!isBooked && !isUsed) continue;
      for (const r of metered.lease.reservations) {
        const cell = cellOf(metered.lease.projectId, r.resource_type, month);
        cell.leases.add(metered.lease.id);
        const preemptible = r.params.preemptible === true;
        if (preemptible) cell.preemptibleLeases.add(metered.lease.id);
        for (const figure of FIGURE_NAMES) {
          if (isBooked) cell.booked[figure] += amountOf(r, figure);
          if (isUsed) cell.used[figure] += amountOf(r, figure);
          if (isBooked && preemptible) cell.preemptibleBooked[figure] += amountOf(r, figure);
          if (isUsed && preemptible) cell.preemptibleUsed[figure] += amountOf(r, figure);
        }
      }
    }
  }
  return [...cells.values()];
}

/** Quarter-hours of amounts as hours of the figure's unit, to 4 decimals rounded half up, in integers. */
const shown = (sums: Record<Figure, number>): UsageFigures => shownCharged(sums, zeros(), 1_000_000);

/** As charged: the preemptible part (within `sums`) at `millionths` / 10^6 of its hours, less the credit (borrowed quarter-hours at the same), never below 0, exactly, rounded half up. */
const shownCharged = (sums: Record<Figure, number>, preemptible: Record<Figure, number>, millionths: number, borrowed = 0): UsageFigures =>
  Object.fromEntries(
    FIGURE_NAMES.map((f) => {
      const credit = f === 'host_hours' ? BigInt(borrowed) * BigInt(millionths) : 0n;
      const charged = BigInt(sums[f] - preemptible[f]) * 1_000_000n + BigInt(preemptible[f]) * BigInt(millionths) - credit;
      const millionthQuarters = charged > 0n ? charged : 0n;
      const tenThousandths = millionthQuarters * BigInt((UNIT / HOUR) * 10_000); // 2500 per quarter-hour
      const per = BigInt(METER_OF[f].per) * 1_000_000n;
      return [f, Number((tenThousandths * 2n + per) / (2n * per)) / 10_000];
    }),
  ) as UsageFigures;

/** The brute force's cells merged by `groupBy`, in the order of their keys; preemptible hours charged `millionths` / 10^6. */
function expectedGroups(cells: Cell[], groupBy: GroupKey[], millionths = 1_000_000): UsageGroup[] {
  const field = { project: 'project_id', resource_type: 'resource_type', month: 'month' } as const;
  const valueOf = (cell: Cell, key: GroupKey) => (key === 'project' ? cell.project : key === 'resource_type' ? cell.resourceType : cell.month);
  const merged = new Map<string, Omit<Cell, 'project' | 'resourceType' | 'month'> & { values: string[] }>();
  for (const cell of cells) {
    const values = groupBy.map((key) => valueOf(cell, key));
    const key = values.join('|');
    let group = merged.get(key);
    if (!group) merged.set(key, (group = { values, booked: zeros(), used: zeros(), leases: new Set(), preemptibleBooked: zeros(), preemptibleUsed: zeros(), preemptibleLeases: new Set(), lent: 0, borrowed: 0, lends: false }));
    group.lent += cell.lent;
    group.borrowed += cell.borrowed;
    group.lends = group.lends || cell.lends;
    for (const figure of FIGURE_NAMES) {
      group.booked[figure] += cell.booked[figure];
      group.used[figure] += cell.used[figure];
      group.preemptibleBooked[figure] += cell.preemptibleBooked[figure];
      group.preemptibleUsed[figure] += cell.preemptibleUsed[figure];
    }
    for (const id of cell.leases) group.leases.add(id);
    for (const id of cell.preemptibleLeases) group.preemptibleLeases.add(id);
  }
  return [...merged.values()]
    .sort((a, b) => (a.values.join('\u0000') < b.values.join('\u0000') ? -1 : 1))
    .map((g) => ({
      ...Object.fromEntries(groupBy.map((key, i) => [field[key], g.values[i]])),
      booked: shown(g.booked),
      used: shown(g.used),
      charged: { booked: shownCharged(g.booked, g.preemptibleBooked, millionths, g.borrowed), used: shownCharged(g.used, g.preemptibleUsed, millionths, g.borrowed) },
      ...(g.preemptibleLeases.size > 0 ? { preemptible: { booked: shown(g.preemptibleBooked), used: shown(g.preemptibleUsed), leases: g.preemptibleLeases.size } } : {}),
      leases: g.leases.size,
      ...(g.lends ? { lent: { host_hours: shown({ ...zeros(), host_hours: g.lent }).host_hours }, borrowed_credit_hours: shownCharged({ ...zeros(), host_hours: g.borrowed }, { ...zeros(), host_hours: g.borrowed }, millionths).host_hours } : {}),
    }));
}

/** The report's total: a group of everything, its preemptible part always shown. */
function expectedTotal(cells: Cell[], millionths: number): UsageSummary['total'] {
  const [total] = expectedGroups(cells, [], millionths);
  const none = { booked: shown(zeros()), used: shown(zeros()) };
  return { ...(total ?? { ...none, charged: none, leases: 0 }), preemptible: total?.preemptible ?? { ...none, leases: 0 } };
}

describe('usage report, pure', () => {
  it('equals a quarter-hour by quarter-hour brute force, for every grouping and in total', () => {
    fc.assert(
      fc.property(
        fc.array(leaseModel, { maxLength: 8 }),
        fc.integer({ min: 0, max: SPAN_UNITS }),
        fc.integer({ min: -40 * 96, max: SPAN_UNITS + 40 * 96 }),
        fc.integer({ min: 1, max: 90 * 96 }),
        fc.shuffledSubarray([...(['resource_type', 'project', 'month'] as const)], { minLength: 1 }),
        fc.integer({ min: 0, max: 1_000_000 }),
        fc.array(lendingModel, { maxLength: 4 }),
        (models, now, from, length, groupBy, millionths, lendingModels) => {
          const stories = models.map((model, i) => story(model, i, now));
          const lendings = lendingModels.map((model, i) => lendingStory(model, i, now));
          const cells = bruteForce(stories, from, from + length, lendings);
          const report = usageReport(
            stories.map((s) => s.metered),
            { window: { startMs: at(from), endMs: at(from + length) }, nowMs: at(now), groupBy, preemptibleChargeFactor: millionths / 1_000_000 },
            lendings.map((l) => l.metered),
          );
          expect(report.groups).toEqual(expectedGroups(cells, groupBy, millionths));
          expect(report.total).toEqual(expectedTotal(cells, millionths));
        },
      ),
      { numRuns: 300 },
    );
  });

  it('splits a lease across a month end, per reservation, and counts the lease once per group', () => {
    const lease: Lease = {
      id: 'l1', name: 'l1', projectId: 'p', userId: 'u', status: 'PENDING',
      startMs: Date.UTC(2031, 0, 31, 12), endMs: Date.UTC(2031, 1, 1, 18),
      reservations: [
        { id: 'r1', resource_type: 'physical:host', status: 'pending', params: {}, footprint: { hosts: 2 } },
        { id: 'r2', resource_type: 'virtual:server', status: 'pending', params: {}, footprint: { vcpus: 4, memory_mb: 6_144 } },
      ],
      events: [], createdMs: 0, updatedMs: 0, version: 1,
    };
    const window = { startMs: Date.UTC(2031, 0, 1), endMs: Date.UTC(2031, 1, 1, 6) };
    const report = usageReport([{ lease }], { window, nowMs: Date.UTC(2030, 0, 1), groupBy: ['month', 'resource_type'], preemptibleChargeFactor: 0.25 });
    const figures = (fields: Partial<UsageFigures>): UsageFigures => ({ ...shown(zeros()), ...fields });
    // No preemptible reservation: charged as booked and used.
    const group = (keys: Record<string, string>, booked: UsageFigures) => ({ ...keys, booked, used: figures({}), charged: { booked, used: figures({}) }, leases: 1 });
    expect(report.groups).toEqual([
      group({ month: '2031-01', resource_type: 'physical:host' }, figures({ host_hours: 24 })),
      group({ month: '2031-01', resource_type: 'virtual:server' }, figures({ vcpu_hours: 48, memory_gb_hours: 72 })),
      group({ month: '2031-02', resource_type: 'physical:host' }, figures({ host_hours: 12 })),
      group({ month: '2031-02', resource_type: 'virtual:server' }, figures({ vcpu_hours: 24, memory_gb_hours: 36 })),
    ]);
    expect(report.total).toEqual({ ...group({}, figures({ host_hours: 36, vcpu_hours: 72, memory_gb_hours: 108 })), preemptible: { booked: figures({}), used: figures({}), leases: 0 } });
  });

  it('sums exactly past 2^53 meter-milliseconds (a year of many large leases), rounding only what it shows', () => {
    const start = Date.UTC(2031, 0, 1);
    const year = 365 * 24 * HOUR;
    let vcpuMs = 0n;
    let kbpsMs = 0n;
    const leases: MeteredLease[] = Array.from({ length: 1000 }, (_, i) => {
      const [from, to] = [start + i, start + i + year + 2 * i + 1]; // odd lengths: no hour is whole
      const vcpus = 299 + 2 * (i % 3);
      const kbps = 10_000_001 + 2 * i; // alone past 2^53 over a year
      vcpuMs += BigInt(vcpus) * BigInt(to - from);
      kbpsMs += BigInt(kbps) * BigInt(to - from);
      const reservations: Reservation[] = [
        { id: `v${i}`, resource_type: 'virtual:server', status: 'active', params: {}, footprint: { vcpus } },
        { id: `b${i}`, resource_type: 'network:bandwidth', status: 'active', params: {}, footprint: { bandwidth_kbps: kbps } },
      ];
      return { lease: { id: `l${i}`, name: 'big', projectId: 'p', userId: 'u', status: 'PENDING', startMs: from, endMs: to, reservations, events: [], createdMs: 0, updatedMs: 0, version: 1 } };
    });
    expect(vcpuMs > BigInt(Number.MAX_SAFE_INTEGER)).toBe(true);
    /** Hours to 4 decimals, rounded half up in integers. */
    const shownExactly = (meterMs: bigint, per: bigint) => Number((meterMs * 10_000n * 2n + 3_600_000n * per) / (2n * 3_600_000n * per)) / 10_000;
    const { total } = usageReport(leases, { window: { startMs: start, endMs: start + 2 * year }, nowMs: start, groupBy: ['project'], preemptibleChargeFactor: 0.25 });
    expect(total.booked).toEqual({ ...shown(zeros()), vcpu_hours: shownExactly(vcpuMs, 1n), bandwidth_mbps_hours: shownExactly(kbpsMs, 1000n) });
  });

  it('counts lent instance slots in their vCPU, memory and disk hours, and credits their borrowed slot-hours off those charged figures', () => {
    const start = Date.UTC(2031, 0, 1);
    // A lease of 4 slots (2 vCPUs, 3 GB each) for 10 h; 2 of them lent for 4 h, a borrower's slot in them for 3 h.
    const lease: Lease = {
      id: 'lender', name: 'lender', projectId: 'p', userId: 'u', status: 'ACTIVE', startMs: start, endMs: start + 10 * HOUR,
      reservations: [{ id: 'r', resource_type: 'virtual:instance', status: 'active', params: {}, footprint: { vcpus: 8, memory_mb: 12_288 } }],
      events: [], createdMs: 0, updatedMs: 0, version: 1,
    };
    const lending: MeteredLending = {
      id: 'slots:1', resourceType: 'virtual:instance', projectId: 'p', startMs: start + HOUR, untilMs: start + 5 * HOUR, returnedMs: start + 5 * HOUR, borrowedMs: 3 * HOUR,
      footprint: { vcpus: 4, memory_mb: 6_144 }, borrowedUnit: { vcpus: 2, memory_mb: 3_072 },
    };
    const report = usageReport([{ lease }], { window: { startMs: start, endMs: start + 10 * HOUR }, nowMs: start + 10 * HOUR, groupBy: ['resource_type'], preemptibleChargeFactor: 0.25 }, [lending]);
    const figures = (fields: Partial<UsageFigures>): UsageFigures => ({ ...shown(zeros()), ...fields });
    const booked = figures({ vcpu_hours: 80, memory_gb_hours: 120 });
    // Credit: 3 slot-hours of 2 vCPUs and 3 GB at 0.25 = 1.5 vCPU-hours and 2.25 GB-hours.
    expect(report.groups).toEqual([
      { resource_type: 'virtual:instance', booked, used: figures({}), charged: { booked: figures({ vcpu_hours: 78.5, memory_gb_hours: 117.75 }), used: figures({}) }, leases: 1, lent: { host_hours: 0, vcpu_hours: 16, memory_gb_hours: 24 }, borrowed_credit_hours: 0, borrowed_credit: { vcpu_hours: 1.5, memory_gb_hours: 2.25 } },
    ]);
  });

  it('refuses to hold more groups than its bound', () => {
    const leases: MeteredLease[] = ['a', 'b', 'c'].map((project) => ({
      lease: { id: project, name: project, projectId: project, userId: 'u', status: 'PENDING', startMs: at(0), endMs: at(4), reservations: [{ id: `r-${project}`, resource_type: 'physical:host', status: 'pending', params: {}, footprint: { hosts: 1 } }], events: [], createdMs: 0, updatedMs: 0, version: 1 },
    }));
    const options = { window: { startMs: at(0), endMs: at(4) }, nowMs: at(0), groupBy: ['project'] as GroupKey[], preemptibleChargeFactor: 0.25 };
    expect(usageReport(leases, { ...options, maxGroups: 3 }).groups).toHaveLength(3);
    expect(() => usageReport(leases, { ...options, maxGroups: 2 })).toThrow(TooManyGroups);
  });
});
