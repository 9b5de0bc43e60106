/**
 * Approval (issue 42): a lease an approval rule names, or a member's exception (`justification`) to
 * a rule that would refuse it, is admitted PENDING_APPROVAL with its capacity booked; admins
 * approve or deny it (members get 403), and with no answer the rule's timeout decides. Timeouts
 * are a few seconds here (a minute lasts `approvalMinuteMs`, a setting no environment variable
 * gives); the waits follow the lease workflow's history, never the clock.
 */
import { createHmac } from 'node:crypto';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { startWebhookReceiver, type WebhookReceiver } from './support/notice-receiver';
import { apiClient, eventually, inSeconds, leaseHistoryEvents, useTestStack, type TestStack } from '../dev-stack/stack';

/** How long a policy's written minute lasts here: long enough for a create's answer to come first on a loaded machine. */
const MINUTE_MS = 4_000;
const HOSTS = 4;
const ADMIN = { 'x-auth-token': 'admin' };
const member = (project: string) => ({ 'x-project-id': project, 'x-user-id': `${project}-user`, 'x-roles': 'member' });

/** Once the lease workflow's first timer (the approval's wait: the first thing it waits for) has fired, by its history. */
async function untilApprovalTimerFired(stack: TestStack, leaseId: string): Promise<void> {
  await eventually(async () => {
    const events = await leaseHistoryEvents(stack, leaseId);
    const first = events.find((e) => e.timerStartedEventAttributes)?.timerStartedEventAttributes?.timerId;
    return first && events.some((e) => e.timerFiredEventAttributes?.timerId === first) ? true : undefined;
  }, 60_000, 200, () => `lease ${leaseId}: the approval timer did not fire`);
}

describe('lease approval', () => {
  let approvers: WebhookReceiver;
  let lessee: WebhookReceiver;
  let projectApprovers: WebhookReceiver;
  beforeAll(async () => {
    approvers = await startWebhookReceiver({ path: '/approvers' });
    lessee = await startWebhookReceiver({ path: '/lessee' });
    projectApprovers = await startWebhookReceiver({ path: '/project-approvers' });
  });
  afterAll(async () => {
    await approvers.close();
    await lessee.close();
    await projectApprovers.close();
  });
  const stack = useTestStack(() => ({
    env: { LK_APPROVERS_WEBHOOK_URL: approvers.url, LK_WEBHOOK_ALLOW_PRIVATE: 'true' /* the lessee's receiver is on loopback */ },
    withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })],
    config: (config) => ({ ...config, approvalMinuteMs: MINUTE_MS }),
  }));
  const asAdmin = apiClient(() => stack().url, ADMIN);
  const as = (project: string) => apiClient(() => stack().url, member(project));
  const window = (hours = 1) => ({ start_date: inSeconds(hours * 3600), end_date: inSeconds(hours * 3600 + 3600) });
  const hosts = (n: number) => [hostReservation({ min: n, max: n })];
  const setPolicy = async (project: string, rules: Record<string, unknown>) => expect((await asAdmin('PUT', `/v1/projects/${project}/policy`, rules)).status).toBe(200);
  const statusOf = async (id: string) => (await asAdmin('GET', `/v1/leases/${id}`)).body.lease;
  /** Host-hours the usage report charges the project as booked over the next two days. */
  const bookedHostHours = async (project: string) => (await asAdmin('GET', `/v1/usage?${new URLSearchParams({ project_id: project, from: inSeconds(0), to: inSeconds(48 * 3600) }).toString()}`)).body.usage.total.booked.host_hours;
  const untilStatus = (id: string, status: string) => eventually(async () => ((await statusOf(id)).status === status ? true : undefined), 30_000, 100, () => `lease ${id} never became ${status}`);

  beforeAll(async () => {
    for (let n = 1; n <= HOSTS; n++) await insertHost(stack().db.pool, { name: `approval-host-${n}`, capabilities: { gpu: n === 1 ? 'a100' : 'none' } });
  });

  it('admits a lease at the rule\'s limit as PENDING and one past it as PENDING_APPROVAL, booked: another project is refused until the denial frees it', async () => {
    await setPolicy('appr-a', { approval: [{ hosts_over: 2, timeout: 600 }] });
    const atLimit = await as('appr-a')('POST', '/v1/leases', { name: 'at-limit', ...window(), reservations: hosts(2) });
    expect(atLimit.status).toBe(201);
    expect(atLimit.body.lease.status).toBe('PENDING');
    expect((await as('appr-a')('DELETE', `/v1/leases/${atLimit.body.lease.id}`)).status).toBe(204);

    const past = await as('appr-a')('POST', '/v1/leases', { name: 'past-limit', ...window(), reservations: hosts(3) });
    expect(past.status).toBe(201);
    expect(past.body.lease).toMatchObject({ status: 'PENDING_APPROVAL', approval: { kind: 'rule', rule: 'approval.hosts_over', on_timeout: 'deny', outcome: null } });
    const id = past.body.lease.id;
    const listed = await asAdmin('GET', '/v1/leases?status=PENDING_APPROVAL');
    expect(listed.body.leases.map((l: { id: string }) => l.id)).toContain(id);

    expect(await bookedHostHours('appr-a')).toBe(0); // not granted: not charged
    // Its three hosts are taken while it waits: two more do not fit.
    const blocked = await as('appr-b')('POST', '/v1/leases', { name: 'blocked', ...window(), reservations: hosts(2) });
    expect(blocked.status).toBe(409);

    const denied = await asAdmin('POST', `/v1/leases/${id}/deny`, { reason: 'no GPU budget this term' });
    expect(denied.status).toBe(200);
    expect(denied.body.lease).toMatchObject({ status: 'TERMINATED', status_reason: 'denied by an admin: no GPU budget this term', approval: { outcome: 'denied', answered_by: 'admin' } });
    const after = await as('appr-b')('POST', '/v1/leases', { name: 'after-denial', ...window(), reservations: hosts(2) });
    expect(after.status).toBe(201);
    expect((await as('appr-b')('DELETE', `/v1/leases/${after.body.lease.id}`)).status).toBe(204);
    expect((await as('appr-a')('DELETE', `/v1/leases/${id}`)).status).toBe(204);

    // Deleting a waiting lease frees its hosts too.
    const deleted = (await as('appr-a')('POST', '/v1/leases', { name: 'deleted-waiting', ...window(), reservations: hosts(3) })).body.lease;
    expect(deleted.status).toBe('PENDING_APPROVAL');
    expect((await as('appr-b')('POST', '/v1/leases', { name: 'blocked-again', ...window(), reservations: hosts(2) })).status).toBe(409);
    expect((await as('appr-a')('DELETE', `/v1/leases/${deleted.id}`)).status).toBe(204);
    const freed = await as('appr-b')('POST', '/v1/leases', { name: 'after-delete', ...window(), reservations: hosts(2) });
    expect(freed.status).toBe(201);
    expect((await as('appr-b')('DELETE', `/v1/leases/${freed.body.lease.id}`)).status).toBe(204);
  });

  it('holds a lease on a host class by property, not one on other hosts; refuses approval rules that are not one condition with a timeout', async () => {
    await setPolicy('appr-h', { approval: [{ host_properties: '["==", "$gpu", "a100"]', timeout: 600 }] });
    const onClass = (value: string) => [hostReservation({ resource_properties: JSON.stringify(['==', '$gpu', value]) })];
    const gpu = await as('appr-h')('POST', '/v1/leases', { name: 'on-a100', ...window(13), reservations: onClass('a100') });
    expect(gpu.body.lease).toMatchObject({ status: 'PENDING_APPROVAL', approval: { rule: 'approval.host_properties' } });
    const other = await as('appr-h')('POST', '/v1/leases', { name: 'on-other', ...window(13), reservations: onClass('none') });
    expect(other.body.lease.status).toBe('PENDING');
    for (const approval of [[{ hosts_over: 1, always: true, timeout: 5 }], [{ hosts_over: 1 }], [{ always: true, timeout: 0 }], [{ host_properties: '[', timeout: 5 }], [{ always: true, timeout: 5, on_timeout: 'maybe' }]]) {
      expect((await asAdmin('PUT', '/v1/projects/appr-h/policy', { approval })).status).toBe(400);
    }
    for (const id of [gpu.body.lease.id, other.body.lease.id]) expect((await as('appr-h')('DELETE', `/v1/leases/${id}`)).status).toBe(204);
  });

  it('holds a lease made from an offer (held or not) for approval as a create', async () => {
    await setPolicy('appr-i', { approval: [{ hosts_over: 0, timeout: 600 }] });
    const ids: string[] = [];
    for (const held of [true, false]) {
      const offered = await as('appr-i')('POST', '/v1/offers', { reservations: hosts(1), duration: 60, start_after: inSeconds((held ? 15 : 17) * 3600), limit: 1 });
      expect(offered.status).toBe(200);
      const offerId: string = offered.body.offers[0].id;
      if (held) expect((await as('appr-i')('POST', `/v1/offers/${offerId}/hold`, {})).status).toBe(201);
      const accepted = await as('appr-i')('POST', `/v1/offers/${offerId}/accept`, { name: `accepted-${held ? 'held' : 'unheld'}` });
      expect(accepted.status).toBe(201);
      expect(accepted.body.lease).toMatchObject({ status: 'PENDING_APPROVAL', approval: { rule: 'approval.hosts_over' } });
      expect((await statusOf(accepted.body.lease.id)).status).toBe('PENDING_APPROVAL');
      ids.push(accepted.body.lease.id);
    }
    for (const id of ids) expect((await as('appr-i')('DELETE', `/v1/leases/${id}`)).status).toBe(204);
  });

  it('lets only admins answer, with bounded bodies; approval after the start has passed starts the lease at once, its end unchanged', async () => {
    await setPolicy('appr-c', { approval: [{ always: true, timeout: 600 }] });
    const end = inSeconds(3600);
    const created = await as('appr-c')('POST', '/v1/leases', { name: 'starts-now', start_date: 'now', end_date: end, reservations: hosts(1) });
    expect(created.body.lease).toMatchObject({ status: 'PENDING_APPROVAL', approval: { rule: 'approval.always' } });
    const id = created.body.lease.id;

    const byMember = await as('appr-c')('POST', `/v1/leases/${id}/approve`, {});
    expect(byMember.status).toBe(403);
    expect(byMember.body).toEqual({ error_code: 403, error_name: 403, error_message: expect.stringMatching(/^Policy doesn't allow blazar:leases:approve to be performed/) });
    for (const bad of [{ reason: 42 }, { reason: 'x'.repeat(1001) }, { reason: 'ok', extra: true }, []]) {
      const res = await asAdmin('POST', `/v1/leases/${id}/approve`, bad);
      expect(res.status).toBe(400);
      expect(res.body.error_code).toBe(400);
    }
    expect((await statusOf(id)).status).toBe('PENDING_APPROVAL');

    const approved = await asAdmin('POST', `/v1/leases/${id}/approve`, { reason: 'class project' });
    expect(approved.status).toBe(200);
    expect(approved.body.lease.approval).toMatchObject({ outcome: 'approved', answered_by: 'admin', answer_reason: 'class project' });
    await untilStatus(id, 'ACTIVE');
    expect((await statusOf(id)).end_date).toBe(created.body.lease.end_date);
    expect((await asAdmin('POST', `/v1/leases/${id}/deny`, {})).status).toBe(409);
    expect((await as('appr-c')('DELETE', `/v1/leases/${id}`)).status).toBe(204);
  });

  it('decides by the rule when nobody answers: denied (capacity freed) or approved, once the workflow\'s timer fires', async () => {
    await setPolicy('appr-d', { approval: [{ hosts_over: 0, timeout: 1 }] });
    await setPolicy('appr-e', { approval: [{ hosts_over: 0, timeout: 1, on_timeout: 'approve' }] });
    const slot = window(3);
    const deniedLater = (await as('appr-d')('POST', '/v1/leases', { name: 'times-out', ...slot, reservations: hosts(HOSTS) })).body.lease;
    const approvedLater = (await as('appr-e')('POST', '/v1/leases', { name: 'times-out-approved', ...window(5), reservations: hosts(1) })).body.lease;
    expect([deniedLater.status, approvedLater.status]).toEqual(['PENDING_APPROVAL', 'PENDING_APPROVAL']);

    await untilApprovalTimerFired(stack(), deniedLater.id);
    await untilStatus(deniedLater.id, 'TERMINATED');
    expect(await statusOf(deniedLater.id)).toMatchObject({ status_reason: 'denied: no approval within 4s (the approval\'s timeout)', approval: { outcome: 'denied', answered_by: 'timeout' } });
    const freed = await as('appr-b')('POST', '/v1/leases', { name: 'after-timeout', ...slot, reservations: hosts(HOSTS) });
    expect(freed.status).toBe(201);
    expect((await as('appr-b')('DELETE', `/v1/leases/${freed.body.lease.id}`)).status).toBe(204);

    await untilApprovalTimerFired(stack(), approvedLater.id);
    await untilStatus(approvedLater.id, 'PENDING');
    expect((await statusOf(approvedLater.id)).approval).toMatchObject({ outcome: 'approved', answered_by: 'timeout' });
    for (const [project, id] of [['appr-d', deniedLater.id], ['appr-e', approvedLater.id]]) expect((await as(project)('DELETE', `/v1/leases/${id}`)).status).toBe(204);
  });

  it('admits a refused create or update sent with a justification as an exception waiting for approval; without one it is refused as before', async () => {
    await setPolicy('appr-f', { max_hosts: 1 });
    const refused = await as('appr-f')('POST', '/v1/leases', { name: 'too-big', ...window(7), reservations: hosts(2) });
    expect(refused.status).toBe(403);
    expect(refused.body).toMatchObject({ rule: 'max_hosts', reason: 'policy:max_hosts', offers: expect.any(Array) });
    for (const justification of ['', 'x'.repeat(2001), 7]) {
      expect((await as('appr-f')('POST', '/v1/leases', { name: 'bad-justification', ...window(7), reservations: hosts(2), justification })).status).toBe(400);
    }

    const asked = await as('appr-f')('POST', '/v1/leases', { name: 'exception', ...window(7), reservations: hosts(2), justification: 'paper deadline on Friday' });
    expect(asked.status).toBe(201);
    expect(asked.body.lease).toMatchObject({ status: 'PENDING_APPROVAL', approval: { kind: 'exception', rule: 'max_hosts', justification: 'paper deadline on Friday' } });
    expect(asked.body.lease.approval.reason).toMatch(/^Usage policy: max_hosts:/);
    const approved = await asAdmin('POST', `/v1/leases/${asked.body.lease.id}/approve`, {});
    expect(approved.body.lease).toMatchObject({ status: 'PENDING', approval: { outcome: 'approved' } });
    expect(await bookedHostHours('appr-f')).toBe(2); // granted: 2 hosts for an hour

    // An update of a pending lease goes through its workflow's record: the same exception there.
    const small = (await as('appr-f')('POST', '/v1/leases', { name: 'grows', ...window(9), reservations: hosts(1) })).body.lease;
    const grow = { reservations: [{ id: small.reservations[0].id, min: 2, max: 2 }] };
    expect((await as('appr-f')('PUT', `/v1/leases/${small.id}`, grow)).status).toBe(403);
    const grown = await as('appr-f')('PUT', `/v1/leases/${small.id}`, { ...grow, justification: 'two nodes for the demo' });
    expect(grown.status).toBe(200);
    expect(grown.body.lease).toMatchObject({ status: 'PENDING_APPROVAL', approval: { kind: 'exception', rule: 'max_hosts' } });
    const denied = await asAdmin('POST', `/v1/leases/${small.id}/deny`, { reason: 'one node is enough' });
    expect(denied.body.lease).toMatchObject({ status: 'TERMINATED', status_reason: 'denied by an admin: one node is enough' });
    for (const id of [asked.body.lease.id, small.id]) expect((await as('appr-f')('DELETE', `/v1/leases/${id}`)).status).toBe(204);
  });

  it('tells the lessee\'s webhook and the approvers\' webhook that approval is asked and how it was answered; the approvers hear nothing else', async () => {
    await setPolicy('appr-g', { approval: [{ always: true, timeout: 600 }] });
    expect((await as('appr-g')('PUT', '/v1/projects/appr-g/webhooks', { webhooks: [{ url: lessee.url }] })).status).toBe(200);
    const id = (await as('appr-g')('POST', '/v1/leases', { name: 'told', ...window(11), reservations: hosts(1) })).body.lease.id;
    expect((await asAdmin('POST', `/v1/leases/${id}/deny`, { reason: 'not this week' })).status).toBe(200);
    const heard = (receiver: WebhookReceiver) => receiver.received.filter((d) => d.body.payload.lease_id === id).map((d) => d.body.event_type);
    for (const receiver of [approvers, lessee]) {
      await eventually(() => Promise.resolve(heard(receiver).includes('lease.denied') ? true : undefined), 30_000, 100, () => `heard ${heard(receiver).join(', ')}`);
    }
    expect(heard(approvers).sort()).toEqual(['lease.approval_requested', 'lease.denied']);
    expect(heard(lessee)).toEqual(expect.arrayContaining(['lease.create', 'lease.approval_requested', 'lease.denied']));
    const denial = approvers.received.find((d) => d.body.payload.lease_id === id && d.body.event_type === 'lease.denied')!;
    expect(denial.body.payload).toMatchObject({ status: 'TERMINATED', approval_rule: 'approval.always', outcome: 'denied', answer_reason: 'not this week' });
    expect((await as('appr-g')('DELETE', `/v1/leases/${id}`)).status).toBe(204);
  });

  it("tells a project's approvers' webhook, signed with its secret, the approval notices of that project's leases only", async () => {
    await setPolicy('appr-pw', { approval: [{ always: true, timeout: 600 }] });
    await setPolicy('appr-pw-other', { approval: [{ always: true, timeout: 600 }] });
    expect((await as('appr-pw')('PUT', '/v1/projects/appr-pw/approvers-webhook', { url: projectApprovers.url })).status).toBe(403);
    const set = await asAdmin('PUT', '/v1/projects/appr-pw/approvers-webhook', { url: projectApprovers.url });
    expect(set.status).toBe(200);
    const secret: string = set.body.approvers_webhook.secret;
    const ours = (await as('appr-pw')('POST', '/v1/leases', { name: 'heard', ...window(17), reservations: hosts(1) })).body.lease.id;
    const theirs = (await as('appr-pw-other')('POST', '/v1/leases', { name: 'not-heard', ...window(19), reservations: hosts(1) })).body.lease.id;
    expect((await asAdmin('POST', `/v1/leases/${ours}/approve`, { reason: 'fine' })).status).toBe(200);
    expect((await asAdmin('POST', `/v1/leases/${theirs}/deny`, {})).status).toBe(200);
    const heard = () => projectApprovers.received.filter((d) => d.body.payload.lease_id === ours);
    await eventually(() => Promise.resolve(heard().some((d) => d.body.event_type === 'lease.approved') ? true : undefined), 30_000, 100, () => `heard ${heard().map((d) => d.body.event_type).join(', ')}`);
    expect(heard().map((d) => d.body.event_type).sort()).toEqual(['lease.approval_requested', 'lease.approved']);
    for (const delivery of heard()) expect(delivery.headers['x-leasekeeper-signature']).toBe(`sha256=${createHmac('sha256', secret).update(delivery.raw).digest('hex')}`);
    // The deployment's approvers' webhook hears both projects; the project's hears its own only.
    await eventually(() => Promise.resolve(approvers.received.some((d) => d.body.payload.lease_id === theirs && d.body.event_type === 'lease.denied') ? true : undefined), 30_000, 100, () => 'the deployment approvers never heard the other denial');
    expect(projectApprovers.received.every((d) => d.body.payload.lease_id === ours)).toBe(true);
    // Counted on it as a project's webhook is (once the receiver's answer is in).
    await eventually(async () => ((await asAdmin('GET', '/v1/projects/appr-pw/approvers-webhook')).body.approvers_webhook.delivered_count === 2 ? true : undefined), 30_000, 100, () => 'the deliveries were not counted');
    for (const [project, id] of [['appr-pw', ours], ['appr-pw-other', theirs]]) expect((await as(project)('DELETE', `/v1/leases/${id}`)).status).toBe(204);
  });

  const dryRun = (project: string) => (body: Record<string, unknown>) => as(project)('POST', '/v1/policy/check', { name: 'dry', ...window(13), ...body });

  it('POST /v1/policy/check says a lease would wait for approval (which rule, its timeout), per occurrence of a series and for a change; below the rule, admit', async () => {
    await setPolicy('appr-check', { approval: [{ hosts_over: 1, timeout: 30, on_timeout: 'approve' }] });
    const check = dryRun('appr-check');
    expect((await check({ reservations: hosts(1) })).body).toMatchObject({ decision: 'admit' });
    expect((await check({ reservations: hosts(1) })).body.approval).toBeUndefined();

    const waits = await check({ reservations: hosts(2) });
    expect(waits.status).toBe(200);
    expect(waits.body).toMatchObject({ decision: 'approval', fits: true, approval: { kind: 'rule', rule: 'approval.hosts_over', timeout_minutes: 30, on_timeout: 'approve' } });
    expect(waits.body.exception).toBeUndefined();
    const series = await check({ reservations: hosts(2), recurrence: 'FREQ=DAILY;COUNT=2' });
    expect(series.body).toMatchObject({ decision: 'approval', occurrences: 2, approval: { rule: 'approval.hosts_over', occurrences: 2 } });
    const lease = (await as('appr-check')('POST', '/v1/leases', { name: 'one', ...window(15), reservations: hosts(1) })).body.lease;
    expect((await as('appr-check')('POST', '/v1/policy/check', { lease_id: lease.id, reservations: [{ id: lease.reservations[0].id, min: 2, max: 2 }] })).body).toMatchObject({ decision: 'approval', approval: { rule: 'approval.hosts_over' } });
    expect((await asAdmin('GET', '/v1/leases?status=PENDING_APPROVAL')).body.leases.filter((l: { project_id: string }) => l.project_id === 'appr-check')).toEqual([]); // nothing recorded
    expect((await as('appr-check')('DELETE', `/v1/leases/${lease.id}`)).status).toBe(204);
  });

  it('POST /v1/policy/check answers a refusal sent with a justification as an exception waiting for approval (the external filter is not asked)', async () => {
    await setPolicy('appr-check-x', { max_hosts: 1, exception_timeout: 90 });
    const check = dryRun('appr-check-x');
    expect((await check({ reservations: hosts(2) })).body).toMatchObject({ decision: 'refuse' });
    const exception = await check({ reservations: hosts(2), justification: 'paper deadline' });
    expect(exception.status).toBe(200);
    expect(exception.body).toMatchObject({ decision: 'approval', approval: { kind: 'exception', rule: 'max_hosts', timeout_minutes: 90, on_timeout: 'deny' }, exception: { rule: 'max_hosts', message: expect.stringMatching(/^Usage policy: max_hosts:/) }, offers: [] });
  });
});
