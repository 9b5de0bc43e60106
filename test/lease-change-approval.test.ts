/**
 * An exception on an update of an active lease (issue 42): a member's extension a rule of ours
 * refuses, sent with a justification, is admitted as a pending change. Its capacity is booked at
 * once (another project is refused it), the lease stays ACTIVE on its current end, and its JSON
 * shows the change. An admin's approve makes it take effect (the workflow's end timer moves); a
 * deny, the timeout or the current end puts the lease back exactly as it was, the extra booking
 * freed. One change at a time (an admin's end of the lease denies it first); a delete takes the
 * change with it. An answer is for its own change; only extensions wait. Timeouts last a few
 * seconds (a minute lasts `approvalMinuteMs`); the waits follow the workflow's history or are
 * bounded polls.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { ResourcePlugin } from '../src/domain/resource-plugin';
import { physicalHostPlugin } from '../src/resources/physical-host';
import type { PhysicalHostParams } from '../src/resources/physical-host/params';
import { physicalHostWatch } from '../src/resources/physical-host/health';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { startWebhookReceiver, type WebhookReceiver } from './support/notice-receiver';
import { apiClient, eventually, inSeconds, leaseHistoryEvents, pendingTimers, useTestStack, type TestStack } from '../dev-stack/stack';

/** How long a policy's written minute lasts here. */
const MINUTE_MS = 4_000;
const HOSTS = 2;
const ADMIN = { 'x-auth-token': 'admin' };
const member = (project: string) => ({ 'x-project-id': project, 'x-user-id': `${project}-user`, 'x-roles': 'member' });

/** Once a timer of the lease workflow that was started for at most `longestMs` (the change's timeout, not the end's) has fired, by its history. */
async function untilShortTimerFired(stack: TestStack, leaseId: string, longestMs: number): Promise<void> {
  await eventually(async () => {
    const events = await leaseHistoryEvents(stack, leaseId);
    const short = events.filter((e) => e.timerStartedEventAttributes && Number(e.timerStartedEventAttributes.startToFireTimeout?.seconds ?? 0) * 1000 <= longestMs).map((e) => e.timerStartedEventAttributes!.timerId);
    return short.some((id) => events.some((e) => e.timerFiredEventAttributes?.timerId === id)) ? true : undefined;
  }, 60_000, 200, () => `lease ${leaseId}: the change's timer did not fire`);
}

/** Hosts the host watch reports as down (by hypervisor name): the healing test fails one. */
const hostsDown = new Set<string>();

/** A lease's bookings held or failed at the calendar (by lease name): reserve waits for `release`, or fails for good. */
const reserveGates = new Map<string, { entered: boolean; release: () => void; released: Promise<void> } | { fail: string }>();
function holdReserveOf(leaseName: string): { entered: boolean; release: () => void } {
  let release = () => {};
  const released = new Promise<void>((resolve) => (release = resolve));
  const gate = { entered: false, release, released };
  reserveGates.set(leaseName, gate);
  return gate;
}
/** The host type, its reserve going through reserveGates. */
function gatedHostPlugin(pool: Parameters<typeof physicalHostPlugin>[0]['pool']): ResourcePlugin<PhysicalHostParams> {
  const real = physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' });
  return {
    ...real,
    async reserve(ctx) {
      const gate = reserveGates.get(ctx.leaseName);
      if (gate && 'fail' in gate) throw ApplicationFailure.nonRetryable(gate.fail, 'InjectedOutage');
      if (gate) {
        gate.entered = true;
        await gate.released;
      }
      return real.reserve(ctx);
    },
  };
}

describe('an exception on an update of an active lease', () => {
  let approvers: WebhookReceiver;
  beforeAll(async () => {
    approvers = await startWebhookReceiver({ path: '/approvers' });
  });
  afterAll(() => approvers.close());
  const stack = useTestStack(() => ({
    env: { LK_APPROVERS_WEBHOOK_URL: approvers.url, LK_HOST_MONITOR_INTERVAL_SECONDS: '0.2', LK_HOST_FAIL_GRACE_SECONDS: '0' },
    withPool: (pool) => [gatedHostPlugin(pool)],
    hostWatch: (pool) => physicalHostWatch({ pool, source: { calendarOnly: (host) => (hostsDown.has(host.hypervisor_hostname) ? 'down in the test' : undefined) }, freepool: 'freepool', failed: { name: 'failed', closedProjectId: 'nobody' } }),
    config: (config) => ({ ...config, approvalMinuteMs: MINUTE_MS }),
  }));
  const asAdmin = apiClient(() => stack().url, ADMIN);
  const as = (project: string) => apiClient(() => stack().url, member(project));
  const hosts = (n: number) => [hostReservation({ min: n, max: n })];
  const setPolicy = async (project: string, rules: Record<string, unknown>) => expect((await asAdmin('PUT', `/v1/projects/${project}/policy`, rules)).status).toBe(200);
  const leaseOf = async (id: string) => (await asAdmin('GET', `/v1/leases/${id}`)).body.lease;
  const untilStatus = (id: string, status: string) => eventually(async () => ((await leaseOf(id)).status === status ? true : undefined), 30_000, 100, () => `lease ${id} never became ${status}`);
  /** Another project's create of one host over the extension's hours: refused while the change holds them. */
  const otherCreate = (name: string) => as('chg-other')('POST', '/v1/leases', { name, start_date: inSeconds(3600 + 300), end_date: inSeconds(7200 - 300), reservations: hosts(1) });

  beforeAll(async () => {
    for (let n = 1; n <= HOSTS; n++) await insertHost(stack().db.pool, { name: `change-host-${n}` });
  });
  afterEach(async () => {
    for (const gate of reserveGates.values()) if ('release' in gate) gate.release();
    reserveGates.clear();
    for (const project of ['chg-a', 'chg-other']) {
      for (const lease of (await as(project)('GET', '/v1/leases')).body.leases) await as(project)('DELETE', `/v1/leases/${lease.id}`);
    }
  });

  /** An active lease of project chg-a for an hour, on every host (or `count`). */
  async function activeLease(name: string, count = HOSTS): Promise<{ id: string; end_date: string }> {
    const created = await as('chg-a')('POST', '/v1/leases', { name, start_date: 'now', end_date: inSeconds(3600), reservations: hosts(count) });
    expect(created.status).toBe(201);
    await untilStatus(created.body.lease.id, 'ACTIVE');
    return created.body.lease;
  }
  /** Three hours from now: the old end an hour away, the new before-end event (an hour before the new end) an hour after it. */
  const extend = (id: string, justification?: string) => as('chg-a')('PUT', `/v1/leases/${id}`, { end_date: inSeconds(3 * 3600), ...(justification !== undefined ? { justification } : {}) });

  it('books an extension past a rule sent with a justification as a pending change; approved, it takes effect and the end timer moves', async () => {
    await setPolicy('chg-a', { extension: { max_count: 0 }, exception_timeout: 600 });
    const lease = await activeLease('extended');
    // The dry run says it would wait; without a justification the update is refused as before.
    const check = await as('chg-a')('POST', '/v1/policy/check', { lease_id: lease.id, end_date: inSeconds(3 * 3600), justification: 'results due Monday' });
    expect(check.body).toMatchObject({ decision: 'approval', approval: { kind: 'exception', rule: 'extension', on_timeout: 'deny' } });
    const refused = await extend(lease.id);
    expect(refused.status).toBe(403);
    expect(refused.body).toMatchObject({ rule: 'extension' });
    expect((await otherCreate('before-change')).status).toBe(201); // the hours past the end are free before the change
    await as('chg-other')('DELETE', `/v1/leases/${(await as('chg-other')('GET', '/v1/leases')).body.leases[0].id}`);

    const asked = await extend(lease.id, 'results due Monday');
    expect(asked.status).toBe(200);
    expect(asked.body.lease).toMatchObject({ status: 'ACTIVE', end_date: lease.end_date, pending_change: { kind: 'exception', rule: 'extension', justification: 'results due Monday', on_timeout: 'deny', outcome: null } });
    const pendingEnd: string = asked.body.lease.pending_change.end_date;
    expect(pendingEnd > lease.end_date).toBe(true);
    expect(asked.body.lease.pending_change.reservations).toHaveLength(1);
    expect(await leaseOf(lease.id)).toMatchObject({ status: 'ACTIVE', end_date: lease.end_date, pending_change: { end_date: pendingEnd } });
    expect((await otherCreate('during-change')).status).toBe(409); // booked at once: others see it taken
    // Listed among the leases an admin's answer is waited for (the page's "Waiting for approval"); a bad value is a 400.
    const awaitingIds = async () => ((await asAdmin('GET', '/v1/leases?awaiting_approval=true&limit=1000')).body.leases as Array<{ id: string }>).map((l) => l.id);
    expect(await awaitingIds()).toContain(lease.id);
    expect(((await asAdmin('GET', '/v1/leases?awaiting_approval=false&limit=1000')).body.leases as Array<{ id: string }>).map((l) => l.id)).not.toContain(lease.id);
    expect((await asAdmin('GET', '/v1/leases?awaiting_approval=yes')).status).toBe(400);

    // One change at a time: another is refused, naming the one that waits.
    const second = await as('chg-a')('PUT', `/v1/leases/${lease.id}`, { end_date: inSeconds(5400), justification: 'or a bit less' });
    expect(second.status).toBe(409);
    expect(second.body.error_message).toMatch(/has a change waiting for approval \(end_date .*, extension, asked /);
    expect((await as('chg-a')('POST', `/v1/leases/${lease.id}/approve`, {})).status).toBe(403);

    const approved = await asAdmin('POST', `/v1/leases/${lease.id}/approve`, { reason: 'fine for the deadline' });
    expect(approved.status).toBe(200);
    expect(approved.body.lease).toMatchObject({ status: 'ACTIVE', end_date: pendingEnd, change_approval: { outcome: 'approved', answered_by: 'admin', answer_reason: 'fine for the deadline', rule: 'extension' } });
    expect(approved.body.lease.pending_change).toBeUndefined();
    expect(await awaitingIds()).not.toContain(lease.id);
    expect(approved.body.lease.approval).toBeUndefined(); // the create's approval record is its own
    // The workflow's timers follow the new end (as after an admin's update): it sleeps until the next event the new end sets, past the old end.
    const newEndMs = Date.parse(`${pendingEnd.slice(0, 19)}Z`);
    const dateMs = (blazarDate: string) => Date.parse(`${blazarDate.slice(0, 19)}Z`);
    const nextDueMs = Math.min(...approved.body.lease.events.filter((e: { status: string; event_type: string }) => e.status === 'UNDONE' && e.event_type !== 'start_lease').map((e: { time: string }) => dateMs(e.time)));
    expect(nextDueMs).toBeGreaterThan(dateMs(lease.end_date) + 30 * 60_000);
    let timers: Array<{ firesAt: number }> = [];
    await eventually(async () => ((timers = pendingTimers(await leaseHistoryEvents(stack(), lease.id))).some((t) => Math.abs(t.firesAt - nextDueMs) <= 2_000) ? true : undefined), 30_000, 200, () => `no timer for ${new Date(nextDueMs).toISOString()}: ${timers.map((t) => new Date(t.firesAt).toISOString()).join(', ')}`);
    expect((await asAdmin('POST', `/v1/leases/${lease.id}/deny`, {})).status).toBe(409); // answered once

    // The approvers heard it asked and approved, as a change.
    const heard = () => approvers.received.filter((d) => d.body.payload.lease_id === lease.id);
    await eventually(() => Promise.resolve(heard().some((d) => d.body.event_type === 'lease.approved') ? true : undefined), 30_000, 100, () => `heard ${heard().map((d) => d.body.event_type).join(', ')}`);
    expect(heard().map((d) => d.body.event_type).sort()).toEqual(['lease.approval_requested', 'lease.approved']);
    for (const d of heard()) expect(d.body.payload).toMatchObject({ approval_of: 'change', approval_rule: 'extension', justification: 'results due Monday', change: { end_date: new Date(newEndMs).toISOString() } });
  });

  it('denied, the extra booking is freed and the lease goes on exactly as it was', async () => {
    await setPolicy('chg-a', { extension: { max_count: 0 }, exception_timeout: 600 });
    const lease = await activeLease('denied-change');
    expect((await extend(lease.id, 'one more hour please')).status).toBe(200);
    expect((await otherCreate('while-waiting')).status).toBe(409);
    const denied = await asAdmin('POST', `/v1/leases/${lease.id}/deny`, { reason: 'the hosts are promised' });
    expect(denied.status).toBe(200);
    expect(denied.body.lease).toMatchObject({ status: 'ACTIVE', end_date: lease.end_date, status_reason: 'change denied by an admin: the hosts are promised; the lease goes on as it was', change_approval: { outcome: 'denied', answered_by: 'admin' } });
    expect(denied.body.lease.pending_change).toBeUndefined();
    expect((await otherCreate('after-denial')).status).toBe(201);
    // A new change may be asked once the first is answered.
    expect((await as('chg-a')('PUT', `/v1/leases/${lease.id}`, { name: 'renamed-after-denial' })).status).toBe(200);
  });

  it('with no answer, is denied when its timeout\'s timer fires, the booking freed', async () => {
    await setPolicy('chg-a', { extension: { max_count: 0 }, exception_timeout: 1 });
    const lease = await activeLease('timed-out-change');
    const asked = await extend(lease.id, 'nobody will answer');
    expect(asked.status).toBe(200);
    const { requested_at: requested, timeout_at: timeout } = asked.body.lease.pending_change;
    expect(Date.parse(`${timeout.replace(' ', 'T')}Z`) - Date.parse(`${requested.replace(' ', 'T')}Z`)).toBe(MINUTE_MS);
    await untilShortTimerFired(stack(), lease.id, MINUTE_MS);
    await eventually(async () => ((await leaseOf(lease.id)).change_approval ? true : undefined), 30_000, 100, () => 'the change was never answered');
    const after = await leaseOf(lease.id);
    expect(after).toMatchObject({ status: 'ACTIVE', end_date: lease.end_date, status_reason: "change denied: no approval within 4s (the approval's timeout); the lease goes on as it was", change_approval: { outcome: 'denied', answered_by: 'timeout' } });
    expect(after.pending_change).toBeUndefined();
    expect((await otherCreate('after-timeout')).status).toBe(201);
  });

  it('never waits past the current end: timeout_at is capped at it; an admin ending the lease denies the change first', async () => {
    // The exception's timeout (1440 minutes of 4 s: 96 min) is longer than the hour left: the end caps it.
    await setPolicy('chg-a', { extension: { max_count: 0 }, exception_timeout: 1440 });
    const lease = await activeLease('ends-first');
    const asked = await extend(lease.id, 'please');
    expect(asked.status).toBe(200);
    expect(asked.body.lease.pending_change.timeout_at.replace(' ', 'T')).toBe(lease.end_date.slice(0, 19));
    expect((await as('chg-a')('PUT', `/v1/leases/${lease.id}`, { end_date: 'now' })).status).toBe(409); // a member's change waits its turn
    const ended = await asAdmin('PUT', `/v1/leases/${lease.id}`, { end_date: 'now' });
    expect(ended.status).toBe(200);
    expect(ended.body.lease.change_approval).toMatchObject({ outcome: 'denied', answered_by: 'admin', answer_reason: 'the lease was changed by an admin' });
    expect(ended.body.lease.pending_change).toBeUndefined();
    await untilStatus(lease.id, 'TERMINATED');
    expect(await leaseOf(lease.id)).toMatchObject({ change_approval: { outcome: 'denied', answered_by: 'admin' } });
    expect((await otherCreate('after-end')).status).toBe(201);
  });

  it('refuses an answer that arrives while a denial is settled, and the next change still waits for an admin', async () => {
    await setPolicy('chg-a', { extension: { max_count: 0 }, exception_timeout: 600 });
    const lease = await activeLease('answered-while-settling');
    expect((await extend(lease.id, 'first ask')).status).toBe(200);
    const gate = holdReserveOf('answered-while-settling'); // the denial's re-booking waits at the calendar
    const denying = asAdmin('POST', `/v1/leases/${lease.id}/deny`, { reason: 'no' });
    await eventually(() => Promise.resolve(gate.entered ? true : undefined), 30_000, 50, () => "the denial never re-booked the lease's hosts");
    let answered = false;
    const approving = asAdmin('POST', `/v1/leases/${lease.id}/approve`, {}).finally(() => (answered = true));
    // Refused at once, or (the defect) accepted: then it waits for the settle, so the re-booking is let go once it is in the history.
    const accepted = async () => (await leaseHistoryEvents(stack(), lease.id)).filter((e) => e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name === 'approveLease').length > 0;
    await eventually(async () => (answered || (await accepted()) ? true : undefined), 30_000, 50, () => 'the approve was neither answered nor accepted');
    gate.release();
    expect((await approving).status).toBe(409);
    const denied = await denying;
    expect(denied.status).toBe(200);
    expect(denied.body.lease).toMatchObject({ status: 'ACTIVE', end_date: lease.end_date, change_approval: { outcome: 'denied', answered_by: 'admin', answer_reason: 'no' } });
    // The next change waits: no answer is left over to decide it, so an admin's deny still finds it waiting.
    const next = await extend(lease.id, 'second ask');
    expect(next.status).toBe(200);
    expect(next.body.lease.pending_change).toMatchObject({ outcome: null, justification: 'second ask' });
    const second = await asAdmin('POST', `/v1/leases/${lease.id}/deny`, { reason: 'still no' });
    expect(second.status).toBe(200);
    expect(second.body.lease).toMatchObject({ end_date: lease.end_date, change_approval: { outcome: 'denied', answered_by: 'admin', answer_reason: 'still no', justification: 'second ask' } });
  });

  it('a denial whose re-booking fails is answered at once, the lease going on as it was, status_reason saying what stays booked', async () => {
    await setPolicy('chg-a', { extension: { max_count: 0 }, exception_timeout: 600 });
    const lease = await activeLease('unfreed-denial');
    expect((await extend(lease.id, 'one more hour')).status).toBe(200);
    reserveGates.set('unfreed-denial', { fail: 'the calendar is down in this test' });
    const denied = await asAdmin('POST', `/v1/leases/${lease.id}/deny`, { reason: 'no' });
    expect(denied.status).toBe(200);
    expect(denied.body.lease).toMatchObject({ status: 'ACTIVE', end_date: lease.end_date, change_approval: { outcome: 'denied', answered_by: 'admin' } });
    expect(denied.body.lease.status_reason).toBe("change denied by an admin: no; the lease goes on as it was; freeing the change's bookings failed (the calendar is down in this test): they stay booked until the lease ends");
    expect(denied.body.lease.pending_change).toBeUndefined();
  });

  it('refuses a justified change that adds hosts to an active lease, booking nothing: only extensions wait', async () => {
    await setPolicy('chg-a', { exception_timeout: 600 });
    const lease = await activeLease('grown', 1);
    await setPolicy('chg-a', { max_hosts: 1, exception_timeout: 600 }); // a rule refusing the growth
    const reservation = (await leaseOf(lease.id)).reservations[0];
    const grow = await as('chg-a')('PUT', `/v1/leases/${lease.id}`, { reservations: [{ id: reservation.id, min: 2, max: 2 }], justification: 'need one more' });
    expect(grow.status).toBe(409);
    expect(grow.body.error_message).toMatch(/only an extension of an active lease \(the same reservations, a later end\) can ask for an exception/);
    const after = await leaseOf(lease.id);
    expect(after.reservations[0].hosts).toHaveLength(1);
    expect(after.pending_change).toBeUndefined();
    // The other host stays free now.
    expect((await as('chg-other')('POST', '/v1/leases', { name: 'the-other-host', start_date: 'now', end_date: inSeconds(1800), reservations: hosts(1) })).status).toBe(201);
  });

  it("counts a waiting extension in the project's budget: another lease that fits only beside the lease as it is is refused", async () => {
    await setPolicy('chg-a', { extension: { max_count: 0 }, budget: { period: '30d', host_hours: 4 }, exception_timeout: 600 });
    const lease = await activeLease('budgeted', 1); // 1 host-hour
    expect((await extend(lease.id, 'three hours in all')).status).toBe(200); // 3 host-hours once approved
    // 2 host-hours more: within the budget beside the lease's 1, over it beside the change's 3.
    const another = () => as('chg-a')('POST', '/v1/leases', { name: 'beside-the-change', start_date: inSeconds(4 * 3600), end_date: inSeconds(6 * 3600), reservations: hosts(1) });
    const refused = await another();
    expect(refused.status).toBe(403);
    expect(refused.body).toMatchObject({ rule: 'budget' });
    expect((await asAdmin('POST', `/v1/leases/${lease.id}/deny`, {})).status).toBe(200);
    expect((await another()).status).toBe(201); // the change denied, the lease counts as it is
  });

  it('goes with the lease when it is deleted while waiting', async () => {
    await setPolicy('chg-a', { extension: { max_count: 0 }, exception_timeout: 600 });
    const lease = await activeLease('deleted-while-waiting');
    expect((await extend(lease.id, 'until I delete it')).status).toBe(200);
    expect((await otherCreate('blocked')).status).toBe(409);
    expect((await as('chg-a')('DELETE', `/v1/leases/${lease.id}`)).status).toBe(204);
    expect((await otherCreate('after-delete')).status).toBe(201);
    expect((await asAdmin('POST', `/v1/leases/${lease.id}/approve`, {})).status).toBe(404);
  });

  // Last: it adds a spare host, which the tests above must not find free.
  it('heals a failed host to the change\'s end: approved, the replacement holds the extension\'s hours too', async () => {
    await setPolicy('chg-a', { extension: { max_count: 0 }, exception_timeout: 600 });
    await insertHost(stack().db.pool, { name: 'change-host-spare' });
    const lease = await activeLease('healed-while-waiting');
    expect((await extend(lease.id, 'long run')).status).toBe(200);
    const failed: string = (await leaseOf(lease.id)).reservations[0].hosts[0];
    hostsDown.add(failed);
    try {
      await eventually(async () => (!(await leaseOf(lease.id)).reservations[0].hosts.includes(failed) ? true : undefined), 30_000, 100, () => 'the failed host was never replaced');
      expect((await leaseOf(lease.id)).pending_change.reservations[0].hosts).not.toContain(failed);
      const approved = await asAdmin('POST', `/v1/leases/${lease.id}/approve`, {});
      expect(approved.body.lease.reservations[0].hosts).toContain('change-host-spare');
      expect(approved.body.lease.reservations[0].hosts).not.toContain(failed);
      // The replacement is booked over the extension's hours as well: nothing is free there for another project.
      expect((await otherCreate('on-the-replacement')).status).toBe(409);
    } finally {
      hostsDown.delete(failed);
    }
  });
});
