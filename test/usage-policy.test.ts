/**
 * The usage policy's rules, pure: each allowed at its limit and refused one step past it, with a
 * message that names the rule, the limit and what would fit; budgets over period boundaries,
 * rolling budgets, extension windows, admins, and changes that do not make things worse.
 */
import { EVENT_TYPES, type Lease } from '../src/domain/lease';
import { HOUR_MS, peakRollingHours, peakWithin, type Footprint, type Holding } from '../src/domain/usage';
import { offerHoldRefusal, policyEvaluation, policyRefusal, type PolicySubject, type ProjectLedger, type UsagePolicy } from '../src/domain/usage-policy';
import { peakClassShare } from '../src/domain/fair-share';
import { allocationEndMs, effectiveRules, environmentRules, loadPolicyFile, rulesSchema, toUsagePolicy } from '../src/policy/rules';
import { loadConfig } from '../src/config';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const DAY_MS = 24 * HOUR_MS;
/** A fixed "now": 2027-03-10 12:00 UTC (no wall clock). */
const NOW = Date.UTC(2027, 2, 10, 12);
const at = (iso: string) => Date.parse(`${iso}Z`);

let serial = 0;
function lease(startMs: number, endMs: number, footprint: Footprint, fields: Partial<Lease> = {}): Lease {
  const id = `00000000-0000-4000-8000-${String(++serial).padStart(12, '0')}`;
  return {
    id,
    name: `lease-${serial}`,
    projectId: 'project-a',
    userId: 'alice',
    startMs,
    endMs,
    status: 'PENDING',
    reservations: [{ id: `${id}-r`, resource_type: 'physical:host', status: 'pending', params: {}, footprint }],
    events: EVENT_TYPES.map((type) => ({ id: `${id}:${type}`, event_type: type, time: 0, status: 'UNDONE' as const })),
    createdMs: NOW,
    updatedMs: NOW,
    version: 1,
    ...fields,
  };
}

const policyOf = (partial: Partial<UsagePolicy>): UsagePolicy => ({ atOnce: {}, enforceOnAdmins: [], ...partial });
const noLedger: ProjectLedger = { others: [], liveLeases: 0 };
const subject = (next: Lease, extra: Partial<PolicySubject> = {}): PolicySubject => ({ next, byAdmin: false, nowMs: NOW, ...extra });
const ledger = (...others: Lease[]): ProjectLedger => ({ others: others.map((l) => ({ lease: l })), liveLeases: others.length });

describe('usage policy: rules on one lease', () => {
  it('max_lease_duration: at the limit allowed; a minute past refused with Blazar\'s sentence (400)', () => {
    const policy = policyOf({ maxLeaseDurationMs: 7 * DAY_MS });
    const start = NOW + HOUR_MS;
    expect(policyRefusal(policy, subject(lease(start, start + 7 * DAY_MS, {})), noLedger)).toBeUndefined();
    const refusal = policyRefusal(policy, subject(lease(start, start + 7 * DAY_MS + 60_000, {})), noLedger);
    expect(refusal).toMatchObject({ rule: 'max_lease_duration', status: 400, message: `Lease duration of ${7 * 86_400 + 60} seconds must be less than or equal to the maximum lease duration of ${7 * 86_400} seconds.` });
  });

  it('max_advance and min_notice: at the limit allowed, past it refused with the date that fits', () => {
    const policy = policyOf({ maxAdvanceMs: 30 * DAY_MS, minNoticeMs: 2 * HOUR_MS });
    expect(policyRefusal(policy, subject(lease(NOW + 30 * DAY_MS, NOW + 31 * DAY_MS, {})), noLedger)).toBeUndefined();
    expect(policyRefusal(policy, subject(lease(NOW + 30 * DAY_MS + 60_000, NOW + 31 * DAY_MS, {})), noLedger)).toMatchObject({ rule: 'max_advance', status: 403, details: { latest_start: '2027-04-09 12:00' } });
    expect(policyRefusal(policy, subject(lease(NOW + 2 * HOUR_MS, NOW + 3 * HOUR_MS, {})), noLedger)).toBeUndefined();
    const early = policyRefusal(policy, subject(lease(NOW + 2 * HOUR_MS - 60_000, NOW + 3 * HOUR_MS, {})), noLedger);
    expect(early?.message).toBe('Usage policy: min_notice: a lease must be booked at least 2 h before its start; it fits from 2027-03-10 14:00.');
  });

  it('max_leases: the n-th allowed, the n+1-th refused; updates of an existing lease are not counted again', () => {
    const policy = policyOf({ maxLeases: 2 });
    const next = lease(NOW + HOUR_MS, NOW + 2 * HOUR_MS, {});
    expect(policyRefusal(policy, subject(next), { others: [], liveLeases: 1 })).toBeUndefined();
    expect(policyRefusal(policy, subject(next), { others: [], liveLeases: 2 })?.message).toBe('Usage policy: max_leases: project project-a may have at most 2 lease(s) not yet ended, and has 2; delete or end one first.');
    expect(policyRefusal(policy, subject({ ...next, endMs: next.endMs + HOUR_MS }, { previous: next }), { others: [], liveLeases: 5 })).toBeUndefined();
  });

  it('admins are exempt unless the rule says otherwise', () => {
    const next = lease(NOW + HOUR_MS, NOW + 100 * DAY_MS, { hosts: 50 });
    expect(policyRefusal(policyOf({ maxLeaseDurationMs: DAY_MS, atOnce: { max_hosts: 4 } }), subject(next, { byAdmin: true }), noLedger)).toBeUndefined();
    expect(policyRefusal(policyOf({ maxLeaseDurationMs: DAY_MS, atOnce: { max_hosts: 4 }, enforceOnAdmins: ['max_hosts'] }), subject(next, { byAdmin: true }), noLedger)?.rule).toBe('max_hosts');
  });
});

describe('usage policy: what a project holds at once', () => {
  const policy = policyOf({ atOnce: { max_hosts: 8, max_vcpus: 64 } });
  const start = at('2027-04-01T00:00:00');

  it('counts only the other leases that overlap, at their peak; back-to-back leases do not add up', () => {
    const others = ledger(lease(start, start + DAY_MS, { hosts: 5 }), lease(start + DAY_MS, start + 2 * DAY_MS, { hosts: 6 }), lease(start + 3 * DAY_MS, start + 4 * DAY_MS, { hosts: 8 }));
    expect(policyRefusal(policy, subject(lease(start, start + 2 * DAY_MS, { hosts: 2 })), others)).toBeUndefined(); // 6 + 2 = 8
    const refusal = policyRefusal(policy, subject(lease(start, start + 2 * DAY_MS, { hosts: 3 })), others);
    expect(refusal?.message).toBe(
      'Usage policy: max_hosts: project project-a may hold at most 8 hosts at once; its other leases hold up to 6 hosts between 2027-04-01 00:00 and 2027-04-03 00:00; this lease needs 3 hosts; it fits with 2 hosts.',
    );
    expect(refusal?.details).toMatchObject({ limit: 8, held: 6, wanted: 3, room: 2 });
  });

  it('lets an update that makes nothing worse through, even over a limit tightened since', () => {
    const before = lease(start, start + DAY_MS, { hosts: 10 });
    const renamed = { ...before, name: 'renamed' };
    expect(policyRefusal(policy, subject(renamed, { previous: before }), noLedger)).toBeUndefined();
    const longer = { ...before, endMs: before.endMs + DAY_MS };
    expect(policyRefusal(policy, subject(longer, { previous: before }), noLedger)).toBeUndefined(); // the peak stays 10
    const more = { ...before, reservations: [{ ...before.reservations[0], footprint: { hosts: 11 } }] };
    expect(policyRefusal(policy, subject(more, { previous: before }), noLedger)?.rule).toBe('max_hosts');
  });

  it('peakWithin sweeps in order, ends before starts', () => {
    const holdings: Holding[] = [
      { footprint: { vcpus: 4 }, interval: { startMs: 0, endMs: 10 } },
      { footprint: { vcpus: 8 }, interval: { startMs: 10, endMs: 20 } },
      { footprint: { vcpus: 2 }, interval: { startMs: 5, endMs: 15 } },
    ];
    expect(peakWithin(holdings, 'vcpus', { startMs: 0, endMs: 20 })).toBe(10);
    expect(peakWithin(holdings, 'vcpus', { startMs: 0, endMs: 9 })).toBe(6);
    expect(peakWithin(holdings, 'vcpus', { startMs: 15, endMs: 20 })).toBe(8);
  });
});

describe('usage policy: budgets', () => {
  const monthly = policyOf({ budget: { period: { kind: 'month' }, hours: { host_hours: 400 } } });

  it('counts booked host-hours per calendar month, across the boundary, and says what fits', () => {
    // 372 h booked in December 2027 by others: 31 hosts × 12 h.
    const others = ledger(lease(at('2027-12-05T00:00:00'), at('2027-12-05T12:00:00'), { hosts: 31 }));
    const fitsExactly = lease(at('2027-12-30T00:00:00'), at('2027-12-30T14:00:00'), { hosts: 2 }); // 28 h
    expect(policyRefusal(monthly, subject(fitsExactly), others)).toBeUndefined();
    const tooMuch = lease(at('2027-12-30T00:00:00'), at('2028-01-01T00:00:00'), { hosts: 1 }); // 48 h, all in December
    const refusal = policyRefusal(monthly, subject(tooMuch), others);
    expect(refusal?.message).toBe('Usage policy: host-hours budget for 2027-12: 400 h, 372 h booked; this lease needs 48 h; it fits with 1 host for 28 h or in January 2028.');
    expect(refusal?.details).toMatchObject({ period: '2027-12', booked_hours: 372, needed_hours: 48, room_hours: 28 });
    // Over the boundary each month is charged its part: 24 h in December (fits), 24 h in January (fits).
    expect(policyRefusal(monthly, subject(lease(at('2027-12-31T00:00:00'), at('2028-01-02T00:00:00'), { hosts: 1 })), others)).toBeUndefined();
    // January's own bookings count for January only.
    const january = ledger(...others.others.map((o) => o.lease), lease(at('2028-01-01T00:00:00'), at('2028-01-17T16:00:00'), { hosts: 1 })); // 400 h in January
    expect(policyRefusal(monthly, subject(lease(at('2027-12-31T23:00:00'), at('2028-01-01T01:00:00'), { hosts: 1 })), january)?.details).toMatchObject({ period: '2028-01' });
  });

  it('refunds: deleted leases count only what they used, a failed start nothing', () => {
    const ran = lease(at('2027-12-01T00:00:00'), at('2027-12-31T00:00:00'), { hosts: 1 }, {
      status: 'ACTIVE',
      events: EVENT_TYPES.map((type) => ({ id: type, event_type: type, time: 0, status: type === 'start_lease' ? ('DONE' as const) : ('UNDONE' as const), ...(type === 'start_lease' ? { finishedAt: at('2027-12-01T00:00:00') } : {}) })),
    });
    const failed = lease(at('2027-12-01T00:00:00'), at('2027-12-31T00:00:00'), { hosts: 10 }, {
      status: 'ERROR',
      events: EVENT_TYPES.map((type) => ({ id: type, event_type: type, time: 0, status: type === 'start_lease' ? ('ERROR' as const) : ('UNDONE' as const) })),
    });
    const deletedAfter100Hours: ProjectLedger = { others: [{ lease: ran, deletedAtMs: at('2027-12-05T04:00:00') }, { lease: failed }], liveLeases: 0 };
    const next = lease(at('2027-12-20T00:00:00'), at('2027-12-20T00:00:00') + 300 * HOUR_MS / 2, { hosts: 2 }); // 300 h
    expect(policyRefusal(monthly, subject(next), deletedAfter100Hours)).toBeUndefined(); // 100 + 300 = 400
    const bigger = { ...next, endMs: next.endMs + 60 * 60_000 };
    expect(policyRefusal(monthly, subject(bigger), deletedAfter100Hours)?.details).toMatchObject({ booked_hours: 100 });
  });

  it('a rolling budget holds over every window of its length', () => {
    const rolling = policyOf({ budget: { period: { kind: 'rolling', lengthMs: 7 * DAY_MS }, hours: { vcpu_hours: 1000 } } });
    const others = ledger(lease(at('2027-05-01T00:00:00'), at('2027-05-03T00:00:00'), { vcpus: 20 })); // 960 vCPU-h
    // Eight days later the window no longer reaches it.
    expect(policyRefusal(rolling, subject(lease(at('2027-05-10T00:00:00'), at('2027-05-11T00:00:00'), { vcpus: 41 })), others)).toBeUndefined();
    expect(policyRefusal(rolling, subject(lease(at('2027-05-07T00:00:00'), at('2027-05-07T10:00:00'), { vcpus: 4 })), others)).toBeUndefined(); // 960 + 40
    const refusal = policyRefusal(rolling, subject(lease(at('2027-05-07T00:00:00'), at('2027-05-07T10:01:00'), { vcpus: 4 })), others);
    expect(refusal?.message).toMatch(/^Usage policy: vCPU-hours budget over any 7 days: 1000 h; 960 h booked in the 7 days from 2027-05-0\d \d\d:\d\d; this lease needs 40\.07 h there; it fits with 4 vCPUs for 10 h\.$/);
  });

  it('peakRollingHours finds the worst window, not only the ones starting at an edge', () => {
    const holdings: Holding[] = [
      { footprint: { hosts: 1 }, interval: { startMs: 0, endMs: 10 * HOUR_MS } },
      { footprint: { hosts: 1 }, interval: { startMs: 20 * HOUR_MS, endMs: 30 * HOUR_MS } },
    ];
    // Any 20 h window holds at most 10 h of the two (the gap is 10 h wide)… 
    expect(peakRollingHours(holdings, 'hosts', 20 * HOUR_MS, { startMs: 0, endMs: 30 * HOUR_MS }).hours).toBe(10);
    // …and a 25 h window at most 15 h.
    expect(peakRollingHours(holdings, 'hosts', 25 * HOUR_MS, { startMs: 0, endMs: 30 * HOUR_MS }).hours).toBe(15);
  });
});

describe('usage policy: extensions', () => {
  const policy = policyOf({ extension: { withinLastMs: 48 * HOUR_MS, maxEachMs: 24 * HOUR_MS, maxCount: 2 } });
  const active = lease(NOW - DAY_MS, NOW + 48 * HOUR_MS, { hosts: 1 }, { status: 'ACTIVE' });

  it('only within the last N hours, at most M hours each, at most K times', () => {
    const extend = (from: Lease, byMs: number, count: number): Lease => ({ ...from, endMs: from.endMs + byMs, extensions: count });
    expect(policyRefusal(policy, subject(extend(active, 24 * HOUR_MS, 1), { previous: active }), noLedger)).toBeUndefined();
    const early = { ...active, endMs: NOW + 48 * HOUR_MS + 60_000 };
    expect(policyRefusal(policy, subject(extend(early, HOUR_MS, 1), { previous: early }), noLedger)?.message).toBe(
      'Usage policy: extension: a lease may be extended only within the last 48 h before its end, from 2027-03-10 12:01.',
    );
    expect(policyRefusal(policy, subject(extend(active, 24 * HOUR_MS + 60_000, 1), { previous: active }), noLedger)?.details).toMatchObject({ latest_end: '2027-03-13 12:00' });
    const twice = { ...active, extensions: 2 };
    expect(policyRefusal(policy, subject(extend(twice, HOUR_MS, 3), { previous: twice }), noLedger)?.message).toBe('Usage policy: extension: a lease may be extended at most 2 time(s), and this one was extended 2 time(s) already.');
    // Pending leases are moved, not extended: the rules on duration and budget apply, these do not.
    const pending = { ...active, status: 'PENDING' as const };
    expect(policyRefusal(policy, subject({ ...pending, endMs: pending.endMs + 5 * DAY_MS }, { previous: pending }), noLedger)).toBeUndefined();
  });
});

describe('the policy file', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'lk-policy-'));
  const write = (name: string, text: string) => {
    const file = path.join(dir, name);
    writeFileSync(file, text);
    return file;
  };

  it('reads durations, budgets and per-project entries; a project entry lifts a default with null', () => {
    const file = loadPolicyFile(
      write('good.yaml', 'defaults:\n  max_lease_duration: 7d\n  max_hosts: 8\n  budget: { period: month, host_hours: 400 }\n  extension: { within_last: 48h, max_count: 3 }\nprojects:\n  big-project: { max_hosts: 32, budget: null }\n'),
    );
    const big = toUsagePolicy(effectiveRules(file.defaults, file.projects?.['big-project']));
    expect(big).toMatchObject({ maxLeaseDurationMs: 7 * DAY_MS, atOnce: { max_hosts: 32 }, budget: undefined, extension: { withinLastMs: 48 * HOUR_MS, maxCount: 3 } });
    expect(toUsagePolicy(effectiveRules(file.defaults)).budget).toEqual({ period: { kind: 'month' }, hours: { host_hours: 400 } });
  });

  it('names the bad key in one line', () => {
    expect(() => loadPolicyFile(write('typo.yaml', 'defaults:\n  max_host: 8\n'))).toThrow(/^LK_POLICY_FILE .*typo\.yaml: defaults: unknown key\(s\) max_host$/);
    expect(() => loadPolicyFile(write('unit.yaml', 'defaults:\n  extension: { within_last: 48 hours }\n'))).toThrow(/defaults\.extension\.within_last: expected a duration such as "48h"/);
    expect(() => loadPolicyFile(write('period.yaml', 'defaults:\n  budget: { period: quarterly }\n'))).toThrow(/defaults\.budget\.period: expected "month" or a rolling span/);
    expect(() => loadPolicyFile(path.join(dir, 'missing.yaml'))).toThrow(/^LK_POLICY_FILE .*missing\.yaml: ENOENT/);
    expect(() => loadPolicyFile(write('bad.yaml', 'defaults: [\n'))).toThrow(/not YAML/);
  });
});

describe('usage policy: offer holds at once', () => {
  const capped = (rules: Record<string, unknown>) => toUsagePolicy(rulesSchema.parse(rules));

  it('max_offer_holds: the n-th hold allowed, the n+1-th refused (403) naming how to free one; 0 allows none; absent: no limit', () => {
    expect(offerHoldRefusal(capped({ max_offer_holds: 2 }), { liveHolds: 1, byAdmin: false })).toBeUndefined();
    const refusal = offerHoldRefusal(capped({ max_offer_holds: 2 }), { liveHolds: 2, byAdmin: false });
    expect(refusal).toMatchObject({ rule: 'max_offer_holds', status: 403, details: { rule: 'max_offer_holds', limit: 2, live_holds: 2 } });
    expect(refusal?.message).toContain('DELETE /v1/offers/{id}/hold');
    expect(offerHoldRefusal(capped({ max_offer_holds: 0 }), { liveHolds: 0, byAdmin: false })?.rule).toBe('max_offer_holds');
    expect(offerHoldRefusal(capped({}), { liveHolds: 1_000, byAdmin: false })).toBeUndefined();
  });

  it('admins are exempt unless enforce_on_admins names it', () => {
    expect(offerHoldRefusal(capped({ max_offer_holds: 1 }), { liveHolds: 1, byAdmin: true })).toBeUndefined();
    expect(offerHoldRefusal(capped({ max_offer_holds: 1, enforce_on_admins: ['max_offer_holds'] }), { liveHolds: 1, byAdmin: true })?.rule).toBe('max_offer_holds');
  });

  it('takes the deployment default from the environment (LK_MAX_OFFER_HOLDS) and refuses a bad value', () => {
    expect(environmentRules({ maxDurationMs: 86_400_000, maxAdvanceMs: 86_400_000, maxOfferHolds: 3 }).max_offer_holds).toBe(3);
    expect(rulesSchema.safeParse({ max_offer_holds: -1 }).success).toBe(false);
    expect(rulesSchema.safeParse({ max_offer_holds: 1.5 }).success).toBe(false);
  });
});

describe('usage policy: fair share over time', () => {
  const rules = (r: Record<string, unknown>) => toUsagePolicy(rulesSchema.parse(r));
  /** A host lease booked on these hosts (host ids as the calendar gives them). */
  const onHosts = (startMs: number, endMs: number, hostIds: string[], fields: Partial<Lease> = {}) => {
    const l = lease(startMs, endMs, { hosts: hostIds.length }, fields);
    return { ...l, reservations: [{ ...l.reservations[0], allocation: { host_ids: hostIds } }] };
  };

  it('lead_time: 2 hosts at once beginning more than 7 days ahead allowed, a third refused; sooner, any number; host-hours in all', () => {
    const policy = rules({ lead_time: [{ beyond_days: 7, max_hosts: 2, max_host_hours: 96 }] });
    const far = NOW + 10 * DAY_MS;
    const held = ledger(lease(far, far + DAY_MS, { hosts: 1 }));
    expect(policyRefusal(policy, subject(lease(far, far + DAY_MS, { hosts: 1 })), held)).toBeUndefined();
    const third = policyRefusal(policy, subject(lease(far, far + DAY_MS, { hosts: 2 })), held);
    expect(third).toMatchObject({ rule: 'lead_time', status: 403, details: { step: 'max_hosts', beyond_days: 7, limit: 2, value: 3, latest_start: '2027-03-17 12:00' } });
    expect(third?.message).toBe('Usage policy: lead_time: project project-a may hold at most 2 host(s) at once beginning more than 7 days from now (max_hosts); with this lease it would hold 3; it fits starting by 2027-03-17 12:00, or smaller.');
    // Sooner than 7 days: not counted, whatever it holds.
    expect(policyRefusal(policy, subject(lease(NOW + 6 * DAY_MS, NOW + 7 * DAY_MS, { hosts: 50 })), held)).toBeUndefined();
    // Host-hours: 24 booked + 72 = 96 allowed; 24 + 73 refused (not at once: later in the horizon).
    expect(policyRefusal(policy, subject(lease(far + 2 * DAY_MS, far + 5 * DAY_MS, { hosts: 1 })), held)).toBeUndefined();
    expect(policyRefusal(policy, subject(lease(far + 2 * DAY_MS, far + 5 * DAY_MS + HOUR_MS, { hosts: 1 })), held)).toMatchObject({ rule: 'lead_time', details: { step: 'max_host_hours', limit: 96, value: 97 } });
  });

  it('stacking: a share of a host class over any 21 days, overlapping leases counted once; at the limit allowed, one step past refused', () => {
    const gpu = '["==", "$node_type", "gpu"]';
    const policy = rules({ stacking: [{ resource_properties: gpu, window_days: 21, max_percent: 25 }] });
    const classHosts = [new Set(['1', '2', '3', '4'])];
    const start = NOW + DAY_MS;
    // Host 1 held 21 days by two overlapping leases: counted once, 21 host-days of 84 = 25 %.
    const others = ledger(onHosts(start, start + 14 * DAY_MS, ['1']), onHosts(start + 7 * DAY_MS, start + 21 * DAY_MS, ['1']), onHosts(start, start + 21 * DAY_MS, ['9']));
    const withClass = { ...others, fairShare: { classHosts } };
    expect(policyRefusal(policy, subject(onHosts(start + 10 * DAY_MS, start + 20 * DAY_MS, ['1'])), withClass)).toBeUndefined();
    // One more host for one hour of that window: 25.06 %.
    const past = policyRefusal(policy, subject(onHosts(start + 10 * DAY_MS, start + 10 * DAY_MS + HOUR_MS, ['2'])), withClass);
    expect(past).toMatchObject({ rule: 'stacking', status: 403, details: { class: gpu, class_hosts: 4, window_days: 21, limit: 25, value: 25.05 } });
    expect(past?.message).toMatch(/^Usage policy: stacking: project project-a may hold at most 25% of the hosts matching .* \(4 hosts\) over any 21 days; with this lease it would hold 25\.05% in the 21 days from /);
    // Hosts outside the class are not counted; a lease three weeks later is in another window.
    expect(policyRefusal(policy, subject(onHosts(start + 10 * DAY_MS, start + 11 * DAY_MS, ['9'])), withClass)).toBeUndefined();
    expect(policyRefusal(policy, subject(onHosts(start + 42 * DAY_MS, start + 47 * DAY_MS, ['2'])), withClass)).toBeUndefined();
  });

  it('stacking finds the worst window exactly: the same peak as sliding the window minute by minute', () => {
    let seed = 7;
    const random = (n: number) => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) % n;
    const hosts = new Set(['1', '2', '3']);
    const booked = Array.from({ length: 20 }, () => {
      const startMs = NOW + random(48) * HOUR_MS + random(60) * 60_000;
      const endMs = startMs + (1 + random(10)) * HOUR_MS;
      return { lease: onHosts(startMs, endMs, [String(1 + random(3))]), interval: { startMs, endMs } };
    });
    const stacking = { query: '[]', windowMs: 5 * HOUR_MS, maxPercent: 100 };
    const around = { startMs: NOW, endMs: NOW + 60 * HOUR_MS };
    const fast = peakClassShare(booked, stacking, hosts, around).percent;
    let slow = 0;
    for (let startMs = NOW - 5 * HOUR_MS; startMs <= NOW + 60 * HOUR_MS; startMs += 60_000) {
      const perHost = new Map<string, Array<[number, number]>>();
      for (const b of booked) for (const id of b.lease.reservations[0].allocation.host_ids) perHost.set(id, [...(perHost.get(id) ?? []), [b.interval.startMs, b.interval.endMs]]);
      let heldMinutes = 0;
      for (const intervals of perHost.values()) for (let t = startMs; t < startMs + 5 * HOUR_MS; t += 60_000) if (intervals.some(([a, z]) => a <= t && t < z)) heldMinutes++;
      slow = Math.max(slow, (heldMinutes * 60_000 * 100) / (3 * 5 * HOUR_MS));
    }
    expect(slow).toBeGreaterThan(30);
    expect(fast).toBeCloseTo(slow, 6);
  });

  it('member_budget: a member\'s own leases against their limit inside the project\'s budget; others\' leases not counted', () => {
    const policy = rules({ budget: { period: 'month', host_hours: 1000 }, member_budgets: { default: 48, by_user: { bob: 100 } } });
    const day = at('2027-04-05T00:00');
    const mine = lease(day, day + DAY_MS, { hosts: 1 });
    const bobs = lease(day, day + 3 * DAY_MS, { hosts: 1 }, { userId: 'bob' });
    const held = ledger(mine, bobs);
    expect(policyRefusal(policy, subject(lease(day + 2 * DAY_MS, day + 3 * DAY_MS, { hosts: 1 })), held)).toBeUndefined();
    const past = policyRefusal(policy, subject(lease(day + 2 * DAY_MS, day + 3 * DAY_MS + HOUR_MS, { hosts: 1 })), held);
    expect(past).toMatchObject({ rule: 'member_budget', status: 403, details: { rule: 'member_budget', member: 'alice', limit: 48, value: 49, booked_hours: 24, needed_hours: 25 } });
    expect(past?.message).toMatch(/^Usage policy: member_budget: user alice may book at most 48 host-hours of project project-a's budget; host-hours budget for 2027-04: 48 h, 24 h booked; this lease needs 25 h;/);
    // bob: his own 72 h + 28 h = 100 allowed, 29 h refused.
    expect(policyRefusal(policy, subject(lease(day + 4 * DAY_MS, day + 4 * DAY_MS + 28 * HOUR_MS, { hosts: 1 }, { userId: 'bob' })), held)).toBeUndefined();
    expect(policyRefusal(policy, subject(lease(day + 4 * DAY_MS, day + 4 * DAY_MS + 29 * HOUR_MS, { hosts: 1 }, { userId: 'bob' })), held)?.rule).toBe('member_budget');
  });

  it('allocation_end: a lease ending at it allowed, a minute past refused; an update that does not move the end later passes', () => {
    const policy = rules({ allocation_end: '2027-04-01' });
    const end = at('2027-04-01T00:00');
    expect(policyRefusal(policy, subject(lease(NOW + DAY_MS, end, {})), noLedger)).toBeUndefined();
    const past = policyRefusal(policy, subject(lease(NOW + DAY_MS, end + 60_000, {})), noLedger);
    expect(past).toMatchObject({ rule: 'allocation_end', status: 403, details: { limit: '2027-04-01 00:00', value: '2027-04-01 00:01', latest_end: '2027-04-01 00:00' } });
    const over = lease(NOW + DAY_MS, end + DAY_MS, {});
    expect(policyRefusal(policy, subject({ ...over, endMs: end + HOUR_MS }, { previous: over }), noLedger)).toBeUndefined();
    expect(policyRefusal(policy, subject({ ...over, endMs: end + 2 * DAY_MS }, { previous: over }), noLedger)?.rule).toBe('allocation_end');
  });

  it('the fair-share rules are bounded: at most 8 steps or classes, a valid query, a valid date', () => {
    const good = { lead_time: Array.from({ length: 8 }, () => ({ beyond_days: 7, max_hosts: 1 })), stacking: [{ resource_properties: '["==", "$a", "b"]', window_days: 21, max_percent: 50 }], allocation_end: '2027-06-30', member_budgets: { by_user: { alice: 3 } } };
    expect(rulesSchema.safeParse(good).success).toBe(true);
    expect(rulesSchema.safeParse({ lead_time: Array.from({ length: 9 }, () => ({ beyond_days: 7, max_hosts: 1 })) }).success).toBe(false);
    expect(rulesSchema.safeParse({ lead_time: [{ beyond_days: 7 }] }).success).toBe(false);
    expect(rulesSchema.safeParse({ stacking: [{ resource_properties: '["==", "$a"', window_days: 21, max_percent: 50 }] }).success).toBe(false);
    expect(rulesSchema.safeParse({ stacking: [{ resource_properties: '["==", "$a", "b"]', window_days: 21, max_percent: 101 }] }).success).toBe(false);
    expect(rulesSchema.safeParse({ allocation_end: 'next year' }).success).toBe(false);
    expect(rulesSchema.safeParse({ member_budgets: { by_user: { 'a b': 3 } } }).success).toBe(false);
  });

  it('past the read cap, the rule that counts refuses naming itself (lead_time with stacking also in force); the dry run gives the same refusal in its one pass', () => {
    const policy = rules({ lead_time: [{ beyond_days: 7, max_hosts: 10 }], stacking: [{ resource_properties: '["==", "$node_type", "gpu"]', window_days: 1, max_percent: 100 }] });
    const far = lease(NOW + 10 * DAY_MS, NOW + 11 * DAY_MS, { hosts: 1 });
    const overCap: ProjectLedger = { ...noLedger, fairShare: { classHosts: [new Set(['1'])], overCap: { lead_time: 3 } } };
    const refusal = policyRefusal(policy, subject(far), overCap);
    expect(refusal).toMatchObject({ rule: 'lead_time', details: { rule: 'lead_time', limit: 3 } });
    expect(refusal?.message).toBe('Usage policy: lead_time: the project has more than 3 leases in the span this rule counts, more than the check reads; end or delete some first.');
    expect(policyEvaluation(policy, subject(far), overCap).refusal).toEqual(refusal);
    expect(policyEvaluation(policy, subject(far), noLedger)).toEqual({ evaluations: [expect.objectContaining({ rule: 'lead_time', ok: true, value: 1 })] });
  });

  it('allocation_end: a date alone is the midnight that begins it (UTC); seconds are rounded down to the minute', () => {
    expect(allocationEndMs('2027-06-30')).toBe(Date.UTC(2027, 5, 30));
    expect(allocationEndMs('2027-06-30 12:00:59.5')).toBe(Date.UTC(2027, 5, 30, 12));
    expect(allocationEndMs('2027-06-30T12:00:30+02:00')).toBe(Date.UTC(2027, 5, 30, 10));
  });

  it('protective defaults: a fresh config limits leases to 7 days and 50 per project, and holds to 3', () => {
    const policy = toUsagePolicy(environmentRules({ ...loadConfig({}).leaseLimits, maxOfferHolds: loadConfig({}).offerHolds.maxAtOnce }));
    expect(policy).toMatchObject({ maxLeaseDurationMs: 7 * DAY_MS, maxAdvanceMs: 365 * DAY_MS, maxLeases: 50, maxOfferHolds: 3 });
    expect(policyRefusal(policy, subject(lease(NOW + HOUR_MS, NOW + HOUR_MS + 7 * DAY_MS + 60_000, {})), noLedger)?.rule).toBe('max_lease_duration');
    expect(policyRefusal(policy, subject(lease(NOW + HOUR_MS, NOW + 2 * HOUR_MS, {})), { others: [], liveLeases: 50 })?.rule).toBe('max_leases');
    expect(policyRefusal(policy, subject(lease(NOW + HOUR_MS, NOW + 2 * HOUR_MS, {})), { others: [], liveLeases: 49 })).toBeUndefined();
  });
});
