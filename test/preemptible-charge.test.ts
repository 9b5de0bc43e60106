/**
 * Preemptible time charged by LK_PREEMPTIBLE_CHARGE_FACTOR (issue 43): the usage report's raw,
 * charged and preemptible figures; a preempted lease charged up to its cut (also while its workflow
 * has not applied the cut: the meter reads lease_preemptions); the rules that count hours at the
 * factor; and `preemptible_exempt`, rule by rule: it lifts a rule for a preemptible lease, never
 * for a regular or mixed one. Pure but for the store and wiring checks (one migrated database).
 */
import { addOwedPreemption } from '../src/db/lease-preemptions';
import { meteredLeaseBatches, projectLeasesEndingAfter, projectLeasesWithin } from '../src/db/leases';
import { saveProjectRules } from '../src/db/usage-policy';
import { loadConfig } from '../src/config';
import { EVENT_TYPES, type Lease, type LeaseEvent, type Reservation } from '../src/domain/lease';
import { HOUR_MS, type Footprint, type MeteredLease } from '../src/domain/usage';
import { usageReport, type UsageFigures } from '../src/domain/usage-report';
import { offerHoldRefusal, policyEvaluation, policyRefusal, RULE_NAMES, type PolicySubject, type ProjectLedger, type RuleName, type UsagePolicy } from '../src/domain/usage-policy';
import { usagePolicy } from '../src/policy';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { insertLeaseRows } from '../dev-stack/fixtures/lease-rows';

const DAY_MS = 24 * HOUR_MS;
/** A fixed "now": 2027-03-10 12:00 UTC (no wall clock in the pure checks). */
const NOW = Date.UTC(2027, 2, 10, 12);
const FACTOR = 0.25;

let serial = 0;
const idOf = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
const event = (type: LeaseEvent['event_type'], status: LeaseEvent['status'], more: Partial<LeaseEvent> = {}): LeaseEvent => ({ id: `${type}-${serial}`, event_type: type, time: 0, status, ...more });

/** A host reservation holding `footprint`, preemptible or not. */
const reservation = (preemptible: boolean, footprint: Footprint = { hosts: 1 }, allocation?: Record<string, unknown>): Reservation => ({
  id: idOf(1_000_000 + ++serial),
  resource_type: 'physical:host',
  status: 'pending',
  params: preemptible ? { preemptible: true } : {},
  footprint,
  ...(allocation ? { allocation } : {}),
});

function lease(startMs: number, endMs: number, reservations: Reservation[], fields: Partial<Lease> = {}): Lease {
  const id = idOf(++serial);
  return {
    id,
    name: `lease-${serial}`,
    projectId: 'project-a',
    userId: 'alice',
    startMs,
    endMs,
    status: 'PENDING',
    reservations,
    events: EVENT_TYPES.map((type) => event(type, 'UNDONE')),
    createdMs: NOW - DAY_MS,
    updatedMs: NOW - DAY_MS,
    version: 1,
    ...fields,
  };
}

/** A lease started at its start (its resources held since), not ended. */
const active = (startMs: number, endMs: number, reservations: Reservation[], fields: Partial<Lease> = {}): Lease =>
  lease(startMs, endMs, reservations, { status: 'ACTIVE', events: [event('start_lease', 'DONE', { finishedAt: startMs }), event('end_lease', 'UNDONE')], ...fields });

const figures = (fields: Partial<UsageFigures> = {}): UsageFigures => ({ host_hours: 0, vcpu_hours: 0, memory_gb_hours: 0, disk_gb_hours: 0, bandwidth_mbps_hours: 0, floating_ip_hours: 0, network_hours: 0, ...fields });
const WINDOW = { startMs: Date.UTC(2027, 2, 1), endMs: Date.UTC(2027, 3, 1) };

describe('GET /v1/usage figures: preemptible time', () => {
  it('charges a preemptible lease raw × factor and a regular one raw, and shows the preemptible part apart', () => {
    const start = NOW - 10 * HOUR_MS;
    const regular = active(start, start + 20 * HOUR_MS, [reservation(false, { hosts: 1 })]); // 20 booked, 10 used so far
    const preemptible = active(start, start + 20 * HOUR_MS, [reservation(true, { hosts: 2 })]); // 40 booked, 20 used
    const borrower = lease(NOW + DAY_MS, NOW + DAY_MS + 4 * HOUR_MS, [reservation(true, { hosts: 3 })], { projectId: 'project-b' }); // 12 booked
    const report = usageReport([{ lease: regular }, { lease: preemptible }, { lease: borrower }], { window: WINDOW, nowMs: NOW, groupBy: ['project'], preemptibleChargeFactor: FACTOR });
    expect(report.groups).toEqual([
      {
        project_id: 'project-a',
        booked: figures({ host_hours: 60 }),
        used: figures({ host_hours: 30 }),
        charged: { booked: figures({ host_hours: 20 + 40 * FACTOR }), used: figures({ host_hours: 10 + 20 * FACTOR }) },
        preemptible: { booked: figures({ host_hours: 40 }), used: figures({ host_hours: 20 }), leases: 1 },
        leases: 2,
      },
      {
        project_id: 'project-b',
        booked: figures({ host_hours: 12 }),
        used: figures(),
        charged: { booked: figures({ host_hours: 12 * FACTOR }), used: figures() },
        preemptible: { booked: figures({ host_hours: 12 }), used: figures(), leases: 1 },
        leases: 1,
      },
    ]);
    expect(report.total).toMatchObject({ booked: figures({ host_hours: 72 }), charged: { booked: figures({ host_hours: 20 + 52 * FACTOR }) }, preemptible: { booked: figures({ host_hours: 52 }), leases: 2 }, leases: 3 });
    // A regular lease alone: charged as it is, no preemptible part.
    const alone = usageReport([{ lease: regular }], { window: WINDOW, nowMs: NOW, groupBy: ['project'], preemptibleChargeFactor: FACTOR });
    expect(alone.groups).toEqual([{ project_id: 'project-a', booked: figures({ host_hours: 20 }), used: figures({ host_hours: 10 }), charged: { booked: figures({ host_hours: 20 }), used: figures({ host_hours: 10 }) }, leases: 1 }]);
  });

  it('charges a preempted lease up to its cut, never for the window it first asked for', () => {
    const start = NOW - 10 * HOUR_MS;
    const asked = active(start, start + 40 * HOUR_MS, [reservation(true, { hosts: 2 })]);
    const cutEndMs = NOW - 4 * HOUR_MS; // 6 h held
    const report = (metered: MeteredLease) => usageReport([metered], { window: WINDOW, nowMs: NOW, groupBy: ['project'], preemptibleChargeFactor: FACTOR }).total;
    // Its workflow applied the cut: the end moved there, and the end ran then.
    const applied = { ...asked, endMs: cutEndMs, status: 'TERMINATED' as const, events: [event('start_lease', 'DONE', { finishedAt: start }), event('end_lease', 'DONE', { startedAt: cutEndMs })] };
    // The cut is owed to the workflow still (lease_preemptions): the document says the window asked.
    for (const metered of [{ lease: applied }, { lease: asked, cutEndMs }]) {
      expect(report(metered)).toMatchObject({ booked: figures({ host_hours: 12 }), used: figures({ host_hours: 12 }), charged: { booked: figures({ host_hours: 12 * FACTOR }), used: figures({ host_hours: 12 * FACTOR }) } });
    }
    // Cut before it started: nothing of it is charged.
    const pending = lease(NOW + HOUR_MS, NOW + 5 * HOUR_MS, [reservation(true, { hosts: 2 })]);
    expect(report({ lease: pending, cutEndMs: NOW + HOUR_MS }).booked).toEqual(figures());
    // The policy counts the same: 6 h of 2 hosts at the factor (3 host-hours) leave room in a 4 host-hour budget, the window asked for (20) would not.
    const policy = policyOf({ budget: { period: { kind: 'month' }, hours: { host_hours: 4 } } });
    const next = lease(NOW + DAY_MS, NOW + DAY_MS + 60_000, [reservation(false, { hosts: 1 })]);
    expect(policyRefusal(policy, subject(next), { others: [{ lease: asked, cutEndMs }], liveLeases: 1 })).toBeUndefined();
    expect(policyRefusal(policy, subject(next), { others: [{ lease: asked }], liveLeases: 1 })).toMatchObject({ rule: 'budget' });
  });

  it('meters an ended preempted lease to its end, not to a cut the end came after (the eviction took its time)', () => {
    const start = NOW - 10 * HOUR_MS;
    const cutEndMs = NOW - 4 * HOUR_MS;
    const endedLate = cutEndMs + 20 * 60_000; // its end actions began 20 min after the cut
    const ended = active(start, cutEndMs, [reservation(true, { hosts: 1 })], { status: 'TERMINATED', events: [event('start_lease', 'DONE', { finishedAt: start }), event('end_lease', 'DONE', { startedAt: endedLate })] });
    const report = usageReport([{ lease: ended, cutEndMs }], { window: WINDOW, nowMs: NOW, groupBy: ['project'], preemptibleChargeFactor: FACTOR }).total;
    // Held (used) until its end began, whatever the owed cut's row says; booked (charged) to its end.
    expect(report.used.host_hours).toBeCloseTo((endedLate - start) / HOUR_MS, 3);
    expect(report.booked.host_hours).toBe(6);
  });
});

const policyOf = (partial: Partial<UsagePolicy>): UsagePolicy => ({ atOnce: {}, enforceOnAdmins: [], preemptibleChargeFactor: FACTOR, ...partial });
const noLedger: ProjectLedger = { others: [], liveLeases: 0 };
const subject = (next: Lease, extra: Partial<PolicySubject> = {}): PolicySubject => ({ next, byAdmin: false, nowMs: NOW, ...extra });

describe('usage policy: preemptible hours at the factor', () => {
  /** 2 hosts for 8 h from tomorrow: 16 host-hours in full, 4 charged as preemptible. */
  const window = [NOW + DAY_MS, NOW + DAY_MS + 8 * HOUR_MS] as const;
  const regular = () => lease(...window, [reservation(false, { hosts: 2, vcpus: 32 }, { host_ids: ['h1', 'h2'] })]);
  const preemptible = () => lease(...window, [reservation(true, { hosts: 2, vcpus: 32 }, { host_ids: ['h1', 'h2'] })]);

  it('a budget refuses a regular lease but admits the same hours preemptible, at the factor', () => {
    for (const period of [{ kind: 'month' as const }, { kind: 'rolling' as const, lengthMs: 7 * DAY_MS }]) {
      const policy = policyOf({ budget: { period, hours: { host_hours: 10 } } });
      expect(policyRefusal(policy, subject(regular()), noLedger)).toMatchObject({ rule: 'budget', details: { needed_hours: 16 } });
      expect(policyRefusal(policy, subject(preemptible()), noLedger)).toBeUndefined();
      // Charged in full (a factor of 1), the preemptible lease is refused as the regular one, and said so.
      expect(policyRefusal({ ...policy, preemptibleChargeFactor: 1 }, subject(preemptible()), noLedger)).toMatchObject({ rule: 'budget', details: { needed_hours: 16 } });
      // 4 preemptible host-hours booked leave 6 for a regular lease.
      const booked = { others: [{ lease: preemptible() }], liveLeases: 1 };
      expect(policyRefusal(policy, subject(lease(window[0], window[0] + 6 * HOUR_MS, [reservation(false, { hosts: 1 })])), booked)).toBeUndefined();
      expect(policyRefusal(policy, subject(lease(window[0], window[0] + 7 * HOUR_MS, [reservation(false, { hosts: 1 })])), booked)).toMatchObject({ rule: 'budget', details: { booked_hours: 4 } });
    }
    // The refusal of a preemptible lease says how its hours were counted, and what fits at its rate.
    const tight = policyOf({ budget: { period: { kind: 'month' }, hours: { host_hours: 2 } } });
    expect(policyRefusal(tight, subject(preemptible()), noLedger)?.message).toBe(
      'Usage policy: host-hours budget for 2027-03: 2 h, 0 h booked; this lease needs 4 h (preemptible: 2 hosts charged as 0.5); it fits with 1 host for the same window or with 2 hosts for 4 h.',
    );
  });

  it("members' budgets, lead_time's host-hours and stacking count preemptible hours at the factor; hosts at once in full", () => {
    const cases: Array<[RuleName, Partial<UsagePolicy>, ProjectLedger?]> = [
      ['member_budget', { fairShare: { memberBudgets: { default: 10, byUser: {} } } }],
      ['lead_time', { fairShare: { leadTime: [{ beyondMs: 0, maxHostHours: 10 }] } }],
      // Two hosts of a class of 2 for 8 h of a 1-day window: 33 % in full, 8 % at the factor.
      ['stacking', { fairShare: { stacking: [{ query: '["==", "$gpu", "a100"]', windowMs: DAY_MS, maxPercent: 20 }] } }, { ...noLedger, fairShare: { classHosts: [new Set(['h1', 'h2'])] } }],
      ['max_hosts', { atOnce: { max_hosts: 1 } }],
    ];
    for (const [rule, partial, ledger = noLedger] of cases) {
      const policy = policyOf(partial);
      expect(policyRefusal(policy, subject(regular()), ledger)).toMatchObject({ rule });
      if (rule === 'max_hosts') expect(policyRefusal(policy, subject(preemptible()), ledger)).toMatchObject({ rule });
      else expect(policyRefusal(policy, subject(preemptible()), ledger)).toBeUndefined();
    }
  });
});

describe('preemptible_exempt, rule by rule', () => {
  /** A footprint every at-once rule counts. */
  const everything: Footprint = { hosts: 1, vcpus: 1, memory_mb: 1, bandwidth_kbps: 1, floating_ips: 1, networks: 1 };
  const start = NOW + 2 * HOUR_MS;
  const end = start + 2 * HOUR_MS;
  const kinds = {
    preemptible: [reservation(true, everything, { host_ids: ['h1'] })],
    regular: [reservation(false, everything, { host_ids: ['h1'] })],
    mixed: [reservation(true, everything, { host_ids: ['h1'] }), reservation(false, { hosts: 1 }, { host_ids: ['h2'] })],
  };
  const stackingLedger: ProjectLedger = { ...noLedger, fairShare: { classHosts: [new Set(['h1', 'h2'])] } };

  /** For each rule, a policy under which it refuses the lease (`kind`), and the subject and ledger to check. */
  function refusing(rule: RuleName, reservations: Reservation[]): { policy: Partial<UsagePolicy>; subject: PolicySubject; ledger: ProjectLedger } {
    const next = lease(start, end, reservations);
    const plain = (policy: Partial<UsagePolicy>, ledger = noLedger) => ({ policy, subject: subject(next), ledger });
    switch (rule) {
      case 'max_lease_duration':
        return plain({ maxLeaseDurationMs: HOUR_MS });
      case 'max_advance':
        return plain({ maxAdvanceMs: HOUR_MS });
      case 'min_notice':
        return plain({ minNoticeMs: 10 * HOUR_MS });
      case 'max_leases':
        return plain({ maxLeases: 1 }, { others: [], liveLeases: 1 });
      case 'max_hosts':
      case 'max_vcpus':
      case 'max_memory_mb':
      case 'max_bandwidth_kbps':
      case 'max_floating_ips':
      case 'max_networks':
        return plain({ atOnce: { [rule]: 0 } });
      case 'budget':
        return plain({ budget: { period: { kind: 'month' }, hours: { host_hours: 0 } } });
      case 'extension': {
        const previous = { ...next, status: 'ACTIVE' as const };
        return { policy: { extension: { maxEachMs: 60_000 } }, subject: subject({ ...previous, endMs: end + HOUR_MS }, { previous }), ledger: noLedger };
      }
      case 'max_offer_holds':
        return plain({ maxOfferHolds: 1 });
      case 'allocation_end':
        return plain({ fairShare: { allocationEndMs: NOW } });
      case 'lead_time':
        return plain({ fairShare: { leadTime: [{ beyondMs: 0, maxHosts: 0 }] } });
      case 'stacking':
        return plain({ fairShare: { stacking: [{ query: '["==", "$gpu", "a100"]', windowMs: DAY_MS, maxPercent: 0 }] } }, stackingLedger);
      case 'member_budget':
        return plain({ fairShare: { memberBudgets: { default: 0, byUser: {} } } });
    }
  }

  /** The rules that refuse, and those evaluated (the dry run's list), under the policy. */
  function outcome(rule: RuleName, reservations: Reservation[], exempt: RuleName[]): { refusedBy?: string; evaluated: string[] } {
    const { policy: partial, subject: checked, ledger } = refusing(rule, reservations);
    const policy = policyOf({ ...partial, preemptibleExempt: exempt });
    if (rule === 'max_offer_holds') {
      const refusal = offerHoldRefusal(policy, { liveHolds: 1, byAdmin: false, next: checked.next });
      return { refusedBy: refusal?.rule, evaluated: refusal ? [refusal.rule] : [] };
    }
    const { evaluations, refusal } = policyEvaluation(policy, checked, ledger);
    expect(policyRefusal(policy, checked, ledger)?.rule).toBe(refusal?.rule);
    return { refusedBy: refusal?.rule, evaluated: evaluations.map((e) => e.rule) };
  }

  it.each(RULE_NAMES.map((rule) => [rule]))('%s: skipped for a preemptible lease when named; never for a regular or mixed one', (rule) => {
    expect(outcome(rule, kinds.preemptible, [])).toMatchObject({ refusedBy: rule });
    expect(outcome(rule, kinds.preemptible, [rule])).toEqual({ refusedBy: undefined, evaluated: [] });
    expect(outcome(rule, kinds.regular, [rule])).toMatchObject({ refusedBy: rule });
    expect(outcome(rule, kinds.mixed, [rule])).toMatchObject({ refusedBy: rule });
  });
});

describe('preemptible time in the store and the deployment', () => {
  const db = useMigratedTestDatabase();

  it('reads a cut its workflow has not applied yet, in the report and in the policy ledger', async () => {
    const start = Date.now() - 10 * HOUR_MS;
    const preempted = active(start, start + 40 * HOUR_MS, [reservation(true, { hosts: 2 })], { projectId: 'cut-project' });
    await insertLeaseRows(db().pool, [preempted]);
    const cutEndMs = start + 6 * HOUR_MS;
    const client = await db().pool.connect();
    try {
      await addOwedPreemption(client, { leaseId: preempted.id, endMs: cutEndMs, neededFromMs: cutEndMs });
    } finally {
      client.release();
    }
    const span = { startMs: start - DAY_MS, endMs: start + 2 * DAY_MS };
    const [metered] = (await projectLeasesWithin(db().pool, 'cut-project', span)).filter((m) => m.lease.id === preempted.id);
    expect(metered.cutEndMs).toBe(cutEndMs);
    const batches: MeteredLease[] = [];
    for await (const batch of meteredLeaseBatches(db().pool, { projectId: 'cut-project', span })) batches.push(...batch);
    const report = usageReport(batches, { window: span, nowMs: Date.now(), groupBy: ['project'], preemptibleChargeFactor: FACTOR });
    expect(report.total).toMatchObject({ booked: figures({ host_hours: 12 }), charged: { booked: figures({ host_hours: 12 * FACTOR }) } });
  });

  it('takes the factor from LK_PREEMPTIBLE_CHARGE_FACTOR into the usage policy', async () => {
    const projectId = 'factor-project';
    await saveProjectRules(db().pool, projectId, { budget: { period: 'month', host_hours: 10 } }, 'admin');
    const startMs = Date.UTC(new Date().getUTCFullYear() + 1, 5, 10);
    const draft = (preemptibleAsked: boolean) => lease(startMs, startMs + 8 * HOUR_MS, [reservation(preemptibleAsked, { hosts: 2 })], { projectId });
    const enforcer = (env: Record<string, string>) => usagePolicy(db().pool, loadConfig(env));
    expect(await enforcer({}).wouldRefuse(db().pool, { next: draft(false), byAdmin: false })).toMatchObject({ rule: 'budget' });
    expect(await enforcer({}).wouldRefuse(db().pool, { next: draft(true), byAdmin: false })).toBeUndefined();
    expect(await enforcer({ LK_PREEMPTIBLE_CHARGE_FACTOR: '1' }).wouldRefuse(db().pool, { next: draft(true), byAdmin: false })).toMatchObject({ rule: 'budget' });
  });

  it('leaves preemptible leases past an allocation end alone when the policy exempts them', async () => {
    const projectId = 'allocation-project';
    const future = Date.now() + 30 * DAY_MS;
    const preemptibleLease = lease(future, future + HOUR_MS, [reservation(true)], { projectId });
    const regularLease = lease(future, future + HOUR_MS, [reservation(false)], { projectId });
    const mixedLease = lease(future, future + HOUR_MS, [reservation(true), reservation(false)], { projectId });
    await insertLeaseRows(db().pool, [preemptibleLease, regularLease, mixedLease]);
    const ids = async (exempt: boolean) => (await projectLeasesEndingAfter(db().pool, projectId, future, 10, exempt)).map((l) => l.id).sort();
    expect(await ids(false)).toEqual([preemptibleLease.id, regularLease.id, mixedLease.id].sort());
    expect(await ids(true)).toEqual([regularLease.id, mixedLease.id].sort());
  });
});
