/**
 * Fair share over time through the API, on the real stack with a fresh deployment's defaults:
 * lead_time, stacking, member_budgets and allocation_end refused at admission (403, the rule and
 * its figures, reason and offers); an allocation end moved earlier ends the leases past it
 * (deleted or shortened, each with its notice); `POST /v1/policy/check` answers each rule's
 * figures, the fit and offers without booking anything; the protective defaults hold.
 */
import { randomUUID } from 'node:crypto';
import { DEFAULT_PREEMPTIBLE_CHARGE_FACTOR, loadConfig } from '../src/config';
import { EVENT_TYPES, type Lease } from '../src/domain/lease';
import { UsagePolicyEnforcer } from '../src/policy/enforcement';
import { policyFileSchema } from '../src/policy/rules';
import { insertLeaseRows } from '../dev-stack/fixtures/lease-rows';
import { endLeasesPastAllocation, workflowEnders } from '../src/api/allocation-end';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, eventually, inSeconds, useTestStack } from '../dev-stack/stack';
import { startWebhookReceiver, type WebhookReceiver } from './support/notice-receiver';

const ADMIN = { 'x-auth-token': 'admin' };
const member = (project: string, user = 'alice') => ({ 'x-project-id': project, 'x-user-id': user, 'x-roles': 'member' });
const GPU = '["==", "$node_type", "gpu"]';
const HOUR_S = 3600;
const DAY_S = 86_400;

/** The limits of a fresh install: the environment without the test suite's own (jest.config.js). */
const fresh = loadConfig(Object.fromEntries(Object.entries(process.env).filter(([name]) => name !== 'LK_MAX_LEASE_DURATION_DAYS' && name !== 'LK_MAX_LEASES')));

describe('fair share over time through the API', () => {
  let hook: WebhookReceiver;
  beforeAll(async () => {
    hook = await startWebhookReceiver({ path: '/hook' });
  });
  afterAll(() => hook.close());
  const stack = useTestStack(() => ({
    env: { LK_WEBHOOK_URLS: hook.url, LK_WEBHOOK_SECRET: 'fair-share-secret', LK_NOTIFY_BEFORE_END: 'none' },
    config: (c) => ({ ...c, leaseLimits: fresh.leaseLimits }),
    withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })],
  }));
  const asAdmin = apiClient(() => stack().url, ADMIN);
  const setPolicy = async (project: string, rules: Record<string, unknown>) => {
    const res = await asAdmin('PUT', `/v1/projects/${project}/policy`, rules);
    expect(res.status).toBe(200);
    return res.body;
  };
  const window = (hoursAhead: number, hours = 2) => ({ start_date: inSeconds(hoursAhead * HOUR_S), end_date: inSeconds((hoursAhead + hours) * HOUR_S) });

  beforeAll(async () => {
    for (let i = 1; i <= 2; i++) await insertHost(stack().db.pool, { name: `fair-gpu-${i}`, capabilities: { node_type: 'gpu' } });
    for (let i = 1; i <= 4; i++) await insertHost(stack().db.pool, { name: `fair-cpu-${i}`, capabilities: { node_type: 'cpu' } });
  });

  it('protective defaults: a fresh config refuses a member\'s lease over 7 days (the rule named), allows 7 days; the policy shows 50 leases per project', async () => {
    const asMember = apiClient(() => stack().url, member('project-defaults'));
    const now = Date.now();
    const over = await asMember('POST', '/v1/leases', { name: 'too-long', start_date: inSeconds(HOUR_S, now), end_date: inSeconds(HOUR_S + 7 * DAY_S + 60, now), reservations: [hostReservation()] });
    expect(over.status).toBe(400); // Blazar's MaxLeaseDurationException answers 400
    expect(over.body).toMatchObject({ rule: 'max_lease_duration', limit_seconds: 7 * DAY_S, reason: 'policy:max_lease_duration' });
    const week = await asMember('POST', '/v1/leases', { name: 'a-week', start_date: inSeconds(HOUR_S, now), end_date: inSeconds(HOUR_S + 7 * DAY_S, now), reservations: [hostReservation()] });
    expect(week.status).toBe(201);
    expect((await asMember('DELETE', `/v1/leases/${week.body.lease.id}`)).status).toBe(204);
    const shown = (await asMember('GET', '/v1/projects/project-defaults/policy')).body.policy.effective;
    expect(shown).toMatchObject({ max_lease_duration: '168h', max_leases: 50, max_offer_holds: 3 });
  });

  it('lead_time: one host beginning more than 7 days ahead allowed, a second at once refused with its figures and offers', async () => {
    await setPolicy('project-lead', { lead_time: [{ beyond_days: 7, max_hosts: 1 }] });
    const asMember = apiClient(() => stack().url, member('project-lead'));
    const far = window(10 * 24);
    expect((await asMember('POST', '/v1/leases', { name: 'far-1', ...far, reservations: [hostReservation()] })).status).toBe(201);
    const second = await asMember('POST', '/v1/leases', { name: 'far-2', ...far, reservations: [hostReservation()] });
    expect(second.status).toBe(403);
    expect(second.body).toMatchObject({ rule: 'lead_time', step: 'max_hosts', beyond_days: 7, limit: 1, value: 2, reason: 'policy:lead_time', offers: expect.any(Array) });
    // The offers' filter and an offer hold meet the same rule.
    const offers = await asMember('POST', '/v1/offers', { start_after: far.start_date, duration: 120, reservations: [hostReservation()] });
    expect(offers.body.offers[0]).toMatchObject({ kind: 'exact', refused_by: 'lead_time' });
    const hold = await asMember('POST', `/v1/offers/${offers.body.offers[0].id}/hold`, {});
    expect(hold.status).toBe(403);
    expect(hold.body).toMatchObject({ rule: 'lead_time', reason: 'policy:lead_time' });
    // Sooner than 7 days: any number.
    expect((await asMember('POST', '/v1/leases', { name: 'soon', ...window(30), reservations: [hostReservation({ min: 2, max: 2 })] })).status).toBe(201);
  });

  it('stacking: half the GPU class over any day allowed, one host more in that day refused; other hosts not counted', async () => {
    await setPolicy('project-stack', { stacking: [{ resource_properties: GPU, window_days: 1, max_percent: 50 }] });
    const asMember = apiClient(() => stack().url, member('project-stack'));
    const gpu = hostReservation({ resource_properties: GPU });
    // 24 h of one of 2 GPU hosts, from two overlapping leases on the same host: counted once.
    expect((await asMember('POST', '/v1/leases', { name: 'gpu-a', ...window(50, 16), reservations: [gpu] })).status).toBe(201);
    const overlapping = await asMember('POST', '/v1/leases', { name: 'gpu-b', ...window(58, 16), reservations: [hostReservation({ resource_properties: GPU, min: 1, max: 1 })] });
    // The calendar gives the second lease the other GPU host (the first is taken from hour 58 to 66): 2 hosts over 8 h in a day passes 50 %.
    expect(overlapping.status).toBe(403);
    expect(overlapping.body).toMatchObject({ rule: 'stacking', class: GPU, class_hosts: 2, window_days: 1, limit: 50, reason: 'policy:stacking' });
    expect(overlapping.body.value).toBeGreaterThan(50);
    // Right after the first, on the same host: 16 + 8 = 24 h of 48 host-hours in any day: 50 %, allowed.
    expect((await asMember('POST', '/v1/leases', { name: 'gpu-c', ...window(66, 8), reservations: [gpu] })).status).toBe(201);
    expect((await asMember('POST', '/v1/leases', { name: 'cpu', ...window(50, 16), reservations: [hostReservation({ resource_properties: '["==", "$node_type", "cpu"]', min: 2, max: 2 })] })).status).toBe(201);
  });

  it('member_budgets: a member\'s own host-hours against their limit inside the project\'s budget; another member has their own', async () => {
    await setPolicy('project-members', { budget: { period: 'month', host_hours: 1000 }, member_budgets: { default: 4, by_user: { carol: 6 } } });
    const asAlice = apiClient(() => stack().url, member('project-members', 'alice'));
    const asCarol = apiClient(() => stack().url, member('project-members', 'carol'));
    // A window inside one calendar month: the first day of next month.
    const next = new Date();
    const monthStart = Date.UTC(next.getUTCFullYear(), next.getUTCMonth() + 1, 1, 2);
    const at = (h: number) => new Date(monthStart + h * 3_600_000).toISOString().slice(0, 16).replace('T', ' ');
    expect((await asAlice('POST', '/v1/leases', { name: 'alice-2h', start_date: at(0), end_date: at(2), reservations: [hostReservation({ min: 2, max: 2 })] })).status).toBe(201);
    const over = await asAlice('POST', '/v1/leases', { name: 'alice-more', start_date: at(3), end_date: at(4), reservations: [hostReservation()] });
    expect(over.status).toBe(403);
    expect(over.body).toMatchObject({ rule: 'member_budget', member: 'alice', limit: 4, value: 5, reason: 'policy:member_budget' });
    expect((await asCarol('POST', '/v1/leases', { name: 'carol-6h', start_date: at(3), end_date: at(6), reservations: [hostReservation({ min: 2, max: 2 })] })).status).toBe(201);
  });

  it('allocation_end: a lease past it refused; moved earlier, leases past it are deleted or shortened through their workflows, each with its notice', async () => {
    const asMember = apiClient(() => stack().url, member('project-alloc'));
    const active = await asMember('POST', '/v1/leases', { name: 'running', start_date: 'now', end_date: inSeconds(5 * HOUR_S), reservations: [hostReservation()] });
    expect(active.status).toBe(201);
    const later = await asMember('POST', '/v1/leases', { name: 'later', ...window(4), reservations: [hostReservation()] });
    expect(later.status).toBe(201);
    await eventually(async () => ((await asMember('GET', `/v1/leases/${active.body.lease.id}`)).body.lease.status === 'ACTIVE' ? true : undefined));

    const end = inSeconds(3 * HOUR_S).slice(0, 16); // a whole minute, as the request dates: 'YYYY-MM-DD HH:MM'
    // Written with seconds: rounded down to the minute, the leases shortened to it end on a whole minute.
    const saved = await setPolicy('project-alloc', { allocation_end: `${end}:45` });
    expect(saved.allocation_end).toEqual({ deleted_leases: [later.body.lease.id], shortened_leases: [active.body.lease.id], failed_leases: [], remaining_leases: 0, complete: true });
    expect((await asMember('GET', `/v1/leases/${later.body.lease.id}`)).status).toBe(404);
    const shortened = (await asMember('GET', `/v1/leases/${active.body.lease.id}`)).body.lease;
    expect(shortened.end_date).toBe(`${end.replace(' ', 'T')}:00.000000`);
    const told = (id: string, type: string) => eventually(() => Promise.resolve(hook.received.find((d) => d.body.event_type === type && d.body.payload.lease_id === id)));
    await told(active.body.lease.id, 'lease.update');
    await told(later.body.lease.id, 'lease.delete');

    // Done: the same update again ends nothing more; a lease past the end is refused with the rule.
    expect((await setPolicy('project-alloc', { allocation_end: end })).allocation_end).toEqual({ deleted_leases: [], shortened_leases: [], failed_leases: [], remaining_leases: 0, complete: true });
    // An update (through the lease's workflow) past the end is refused as a create is.
    const extended = await asMember('PUT', `/v1/leases/${active.body.lease.id}`, { end_date: inSeconds(4 * HOUR_S) });
    expect(extended.status).toBe(403);
    expect(extended.body).toMatchObject({ rule: 'allocation_end', reason: 'policy:allocation_end' });
    const past = await asMember('POST', '/v1/leases', { name: 'past', start_date: inSeconds(2 * HOUR_S), end_date: inSeconds(3 * HOUR_S + 60), reservations: [hostReservation()] });
    expect(past.status).toBe(403);
    expect(past.body).toMatchObject({ rule: 'allocation_end', latest_end: end, reason: 'policy:allocation_end' });
  });

  it('allocation_end: a lease that cannot be ended is skipped and reported, the others ended; the same update again retries it; past the time budget the rest is left for a repeat', async () => {
    const asMember = apiClient(() => stack().url, member('project-retry'));
    const first = (await asMember('POST', '/v1/leases', { name: 'first', ...window(5), reservations: [hostReservation()] })).body.lease;
    const second = (await asMember('POST', '/v1/leases', { name: 'second', ...window(6), reservations: [hostReservation()] })).body.lease;
    const { pool } = stack().db;
    const real = workflowEnders({ pool, commands: { client: stack().temporal.client, taskQueue: stack().config.temporal.taskQueue, timeoutMs: 30_000 } });
    const endMs = Date.now() + 4 * HOUR_S * 1000;
    // No time left: nothing is tried, both are left for a repeat.
    await expect(endLeasesPastAllocation({ pool, enders: real }, 'project-retry', endMs, -1)).resolves.toEqual({ deleted: [], shortened: [], failed: [], remaining: 2 });
    // The first lease's delete fails (its worker gone): skipped and reported; the second is deleted all the same.
    const failing = { ...real, remove: (lease: Lease) => (lease.id === first.id ? Promise.reject(new Error('the worker is gone')) : real.remove(lease)) };
    await expect(endLeasesPastAllocation({ pool, enders: failing }, 'project-retry', endMs, 60_000)).resolves.toEqual({ deleted: [second.id], shortened: [], failed: [{ lease_id: first.id, reason: 'the worker is gone' }], remaining: 0 });
    expect((await asMember('GET', `/v1/leases/${first.id}`)).status).toBe(200);
    expect((await asMember('GET', `/v1/leases/${second.id}`)).status).toBe(404);
    await expect(endLeasesPastAllocation({ pool, enders: real }, 'project-retry', endMs, 60_000)).resolves.toEqual({ deleted: [first.id], shortened: [], failed: [], remaining: 0 });
    expect((await asMember('GET', '/v1/leases')).body.leases).toEqual([]);
  });

  it('POST /v1/policy/check: each rule with its figures, the fit and offers; nothing booked; members for their own project only', async () => {
    await setPolicy('project-check', { lead_time: [{ beyond_days: 7, max_hosts: 1 }], allocation_end: inSeconds(60 * DAY_S) });
    const asMember = apiClient(() => stack().url, member('project-check'));
    const far = { name: 'checked', ...window(12 * 24) };
    const admit = await asMember('POST', '/v1/policy/check', { ...far, reservations: [hostReservation()] });
    expect(admit.status).toBe(200);
    expect(admit.body).toMatchObject({ decision: 'admit', fits: true, offers: [] });
    expect(admit.body.rules).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ rule: 'max_lease_duration', ok: true, limit: 7 * DAY_S }),
        expect.objectContaining({ rule: 'lead_time', ok: true, limit: 1, value: 1 }),
        expect.objectContaining({ rule: 'allocation_end', ok: true }),
      ]),
    );
    const refuse = await asMember('POST', '/v1/policy/check', { ...far, reservations: [hostReservation({ min: 2, max: 2 })] });
    expect(refuse.body).toMatchObject({ decision: 'refuse', fits: true });
    expect(refuse.body.rules).toContainEqual(expect.objectContaining({ rule: 'lead_time', ok: false, limit: 1, value: 2 }));
    expect(refuse.body.offers.length).toBeGreaterThan(0);
    const tooLate = await asMember('POST', '/v1/policy/check', { name: 'late', start_date: inSeconds(59 * DAY_S), end_date: inSeconds(61 * DAY_S) });
    expect(tooLate.body.rules).toContainEqual(expect.objectContaining({ rule: 'allocation_end', ok: false }));
    expect(tooLate.body.decision).toBe('refuse');
    // Nothing was booked by the checks.
    expect((await asMember('GET', '/v1/leases')).body.leases).toEqual([]);

    // A change: an existing lease moved past the allocation end.
    const lease = (await asMember('POST', '/v1/leases', { name: 'soon', ...window(2), reservations: [hostReservation()] })).body.lease;
    const change = await asMember('POST', '/v1/policy/check', { lease_id: lease.id, end_date: inSeconds(61 * DAY_S) });
    expect(change.body).toMatchObject({ decision: 'refuse' });
    expect(change.body.rules).toContainEqual(expect.objectContaining({ rule: 'allocation_end', ok: false }));

    expect((await asMember('POST', '/v1/policy/check', { ...far, project_id: 'project-lead' })).status).toBe(403);
    expect((await apiClient(() => stack().url, member('project-other'))('POST', '/v1/policy/check', { lease_id: lease.id, end_date: inSeconds(3 * HOUR_S) })).status).toBe(404);
    expect(admit.body.as).toBe('member');
    // An admin's check of another project answers as a member of it would be answered (the admins' exemption not applied)...
    const asMemberOf = await asAdmin('POST', '/v1/policy/check', { ...far, project_id: 'project-check', reservations: [hostReservation({ min: 2, max: 2 })] });
    expect(asMemberOf.body).toMatchObject({ decision: 'refuse', as: 'member' });
    expect(asMemberOf.body.rules).toContainEqual(expect.objectContaining({ rule: 'lead_time', ok: false, limit: 1, value: 2 }));
    // ...admin-only options refused as a member's create is; the same lease of another project too.
    const released = await asAdmin('POST', '/v1/policy/check', { ...far, project_id: 'project-check', reservations: [hostReservation({ on_end: 'release' })] });
    expect(released.status).toBe(403);
    expect(released.body.error_message).toMatch(/on_end "release" gives the hosts away and is for admins only/);
    expect((await asAdmin('POST', '/v1/policy/check', { lease_id: lease.id, end_date: inSeconds(61 * DAY_S) })).body).toMatchObject({ decision: 'refuse', as: 'member' });
    // Without project_id, the admin's own view: exempt.
    expect((await asAdmin('POST', '/v1/policy/check', { ...far, reservations: [hostReservation({ min: 2, max: 2 })] })).body).toMatchObject({ decision: 'admit', as: 'admin' });
  });
  it('the fair-share read cap (lowered to 3) hides no lease from the budget, refuses only leases under a lead_time step (naming lead_time), and counts only leases that hold something', async () => {
    const { pool } = stack().db;
    const project = 'project-capped';
    const file = policyFileSchema.parse({
      projects: { [project]: { budget: { period: 'month', host_hours: 4 }, lead_time: [{ beyond_days: 7, max_hosts: 10 }], stacking: [{ resource_properties: GPU, window_days: 1, max_percent: 100 }] } },
    });
    const enforcer = new UsagePolicyEnforcer({ pool, base: {}, file, fairShareLedgerCap: 3, preemptibleChargeFactor: DEFAULT_PREEMPTIBLE_CHARGE_FACTOR });
    const now = Date.now();
    const monthStart = (ahead: number) => Date.UTC(new Date(now).getUTCFullYear(), new Date(now).getUTCMonth() + ahead, 1);
    const row = (startMs: number, hours = 1): Lease => {
      const id = randomUUID();
      return {
        id,
        name: `capped-${id.slice(0, 8)}`,
        projectId: project,
        userId: 'alice',
        startMs,
        endMs: startMs + hours * HOUR_S * 1000,
        status: 'PENDING',
        reservations: [{ id: randomUUID(), resource_type: 'physical:host', status: 'pending', params: {}, footprint: { hosts: 1 } }],
        events: EVENT_TYPES.map((type) => ({ id: `${id}:${type}`, event_type: type, time: 0, status: 'UNDONE' as const })),
        createdMs: now,
        updatedMs: now,
        version: 1,
      };
    };
    // Four host-hours booked in the month after next, the latest on its 20th: one more than the cap.
    const month = monthStart(2);
    await insertLeaseRows(pool, [row(month + HOUR_S * 1000), row(month + 2 * DAY_S * 1000), row(month + 3 * DAY_S * 1000), row(month + 19 * DAY_S * 1000)]);
    const refusalOf = (next: Lease) => enforcer.wouldRefuse(pool, { next, byAdmin: false });
    // (a) A budget over every lease of the month, the latest included: a fifth host-hour is refused.
    expect(await refusalOf(row(month + 25 * DAY_S * 1000))).toMatchObject({ rule: 'budget', details: { booked_hours: 4, limit_hours: 4 } });
    // (b) A lease starting now falls under no lead_time step: the cap does not touch it.
    expect(await refusalOf(row(now + 60_000))).toBeUndefined();
    // A lease past the step, with more leases than the cap beginning past it: refused by lead_time, which counts them.
    expect(await refusalOf(row(monthStart(3) + 2 * DAY_S * 1000))).toMatchObject({ rule: 'lead_time', details: { limit: 3 } });
    // Stacking counts what leases hold: four deleted before they started, in its window, do not count toward the cap.
    const gpuRow = (startMs: number) => {
      const l = row(startMs);
      return { ...l, reservations: [{ ...l.reservations[0], params: { resource_properties: GPU } }] };
    };
    const soon = now + 2 * HOUR_S * 1000; // deleted (now) within the window before it
    const deleted = [gpuRow(soon), gpuRow(soon + HOUR_S * 1000), gpuRow(soon + 2 * HOUR_S * 1000), gpuRow(soon + 3 * HOUR_S * 1000)];
    await insertLeaseRows(pool, deleted);
    await pool.query('UPDATE leases SET deleted_at = now() WHERE id = ANY($1::uuid[])', [deleted.map((l) => l.id)]);
    expect(await refusalOf(gpuRow(soon + 4 * HOUR_S * 1000))).toBeUndefined();
  });
});
