/**
 * One project's webhooks cannot hold up anyone else (issue 39, point 2): a member's 10 webhooks on a
 * tarpit (it accepts connections and never answers) and a lease renamed again and again make more
 * deliveries than a worker has activity slots. Another project's notice is delivered, and its lease
 * starts, while every tarpit delivery is still in flight; the tarpit project never has more than
 * its cap in flight, and its excess waits, dropping nothing. A webhook that keeps failing to answer
 * is held back (its last_error says so) while its project's other webhook hears every notice; after
 * the hold, one probe goes.
 */
import type http from 'node:http';
import net from 'node:net';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { claimWebhookDelivery, countDelivery, countWebhookFailure } from '../src/db/webhooks';
import type { Notice } from '../src/domain/notices';
import { ProjectDeliveryCap } from '../src/notifications/delivery-gates';
import { NoticeFailedError } from '../src/notifications/errors';
import { deliverWebhook, sendToWebhook } from '../src/notifications/webhooks';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { startWebhookReceiver, type WebhookReceiver } from './support/notice-receiver';
import { freePort } from '../dev-stack/ports';
import { apiClient, eventually, inSeconds, useTestStack } from '../dev-stack/stack';

/** Deliveries of one project in flight at once. */
const CAP = 3;
const TARPIT_HOOKS = 10;
/** lease.create and this many lease.update notices, each to every tarpit webhook: more deliveries than the 100 activity slots a worker has by default. */
const RENAMES = 11;
const BREAKER_FAILURES = 2;

describe('notice isolation', () => {
  let tarpit: WebhookReceiver;
  let live: WebhookReceiver;
  let resetting: WebhookReceiver;
  let healthy: WebhookReceiver;
  /** The tarpit's held requests, answered once `answering`. */
  const held: http.ServerResponse[] = [];
  let answering = false;
  beforeAll(async () => {
    tarpit = await startWebhookReceiver({
      path: '/tarpit',
      answer: (res) => {
        if (answering) res.writeHead(204).end();
        else held.push(res);
      },
    });
    live = await startWebhookReceiver({ path: '/live' });
    // Cuts every connection without an answer: a delivery that gets none, as a tarpit's time-out, but at once.
    resetting = await startWebhookReceiver({ path: '/reset', answer: (res) => void res.socket?.destroy() });
    healthy = await startWebhookReceiver({ path: '/healthy' });
  });
  const stack = useTestStack(() => ({
    env: {
      LK_WEBHOOK_ALLOW_PRIVATE: 'true', // the receivers are on loopback here
      // No tarpit delivery times out during the test: every one stays in flight until answered.
      LK_NOTICE_TIMEOUT_MS: '120000',
      LK_NOTICE_PROJECT_IN_FLIGHT: String(CAP),
      LK_WEBHOOK_BREAKER_FAILURES: String(BREAKER_FAILURES),
      LK_WEBHOOK_BREAKER_COOLDOWN_SECONDS: '3600',
      LK_NOTIFY_BEFORE_END: 'none',
    },
    withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })],
  }));
  afterAll(async () => {
    for (const res of held) res.destroy();
    await tarpit.close();
    await live.close();
    await resetting.close();
    await healthy.close();
  });
  const asTarpit = apiClient(() => stack().url, { 'x-project-id': 'project-tarpit', 'x-user-id': 'mallory', 'x-roles': 'member' });
  const asOther = apiClient(() => stack().url, { 'x-project-id': 'project-other', 'x-user-id': 'olivia', 'x-roles': 'member' });
  const asFlaky = apiClient(() => stack().url, { 'x-project-id': 'project-flaky', 'x-user-id': 'fred', 'x-roles': 'member' });

  beforeAll(async () => {
    for (let i = 1; i <= 3; i++) await insertHost(stack().db.pool, { name: `isolation-host-${i}` });
  });

  it("delivers another project's notice and starts its lease while the tarpit's deliveries hold their cap", async () => {
    const hooks = Array.from({ length: TARPIT_HOOKS }, (_, i) => ({ url: `${tarpit.url}?hook=${i}` }));
    expect((await asTarpit('PUT', '/v1/projects/project-tarpit/webhooks', { webhooks: hooks })).status).toBe(200);
    const renamed = await asTarpit('POST', '/v1/leases', { name: 'rename-0', start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [hostReservation()] });
    expect(renamed.status).toBe(201);
    for (let i = 1; i <= RENAMES; i++) expect((await asTarpit('PUT', `/v1/leases/${renamed.body.lease.id}`, { name: `rename-${i}` })).status).toBe(200);
    // The tarpit holds all it may: its project's cap.
    await eventually(() => Promise.resolve(tarpit.unanswered() >= CAP ? true : undefined), 30_000, 100, () => `the tarpit holds ${tarpit.unanswered()} deliveries`);

    expect((await asOther('PUT', '/v1/projects/project-other/webhooks', { webhooks: [{ url: live.url, events: ['lease.create'] }] })).status).toBe(200);
    const created = await asOther('POST', '/v1/leases', { name: 'unhindered', start_date: 'now', end_date: inSeconds(3600), reservations: [hostReservation()] });
    expect(created.status).toBe(201);
    const id = created.body.lease.id as string;
    await eventually(() => Promise.resolve(live.received.find((d) => d.body.payload.lease_id === id)), 60_000, 100, () => 'the other project\'s lease.create was not delivered');
    await eventually(async () => ((await asOther('GET', `/v1/leases/${id}`)).body.lease.status === 'ACTIVE' ? true : undefined), 60_000, 100, () => 'the other project\'s lease did not start');
    // Meanwhile not one tarpit delivery ended: they were all still in flight, never more than the cap.
    expect(tarpit.abandoned()).toBe(0);
    expect(held.every((res) => !res.writableEnded && !res.destroyed)).toBe(true);
    expect(tarpit.mostUnanswered()).toBeLessThanOrEqual(CAP);
    expect(tarpit.unanswered()).toBe(CAP);
  }, 120_000);

  it("makes the tarpit project's excess wait and drops none of it once the receiver answers", async () => {
    answering = true;
    for (const res of held.splice(0)) res.writeHead(204).end();
    let delivered: number[] = [];
    const done = await eventually(
      async () => {
        const { webhooks } = (await asTarpit('GET', '/v1/projects/project-tarpit/webhooks')).body;
        delivered = webhooks.map((hook: { delivered_count: number }) => hook.delivered_count);
        return delivered.every((count) => count === 1 + RENAMES) ? webhooks : undefined;
      },
      110_000,
      500,
      () => `the tarpit webhooks counted ${delivered.join(', ')} deliveries of ${1 + RENAMES} each`,
    );
    expect(done.map((hook: { dropped_count: number }) => hook.dropped_count)).toEqual(Array(TARPIT_HOOKS).fill(0));
    expect(tarpit.mostUnanswered()).toBeLessThanOrEqual(CAP);
    // Each posted once, none retried (the Idempotency-Key is the notice's id, the query names the webhook): the waits cost no attempt.
    expect(tarpit.requests).toHaveLength(TARPIT_HOOKS * (1 + RENAMES));
    expect(new Set(tarpit.requests.map((d) => `${d.path} ${String(d.headers['idempotency-key'])}`)).size).toBe(TARPIT_HOOKS * (1 + RENAMES));
  }, 120_000);

  it("holds back a webhook that keeps failing to answer, and not its project's other webhook", async () => {
    const put = await asFlaky('PUT', '/v1/projects/project-flaky/webhooks', { webhooks: [{ url: resetting.url }, { url: healthy.url }] });
    expect(put.status).toBe(200);
    const lease = await asFlaky('POST', '/v1/leases', { name: 'flaky-0', start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [hostReservation()] });
    expect(lease.status).toBe(201);
    const leaseId = lease.body.lease.id as string;
    const heard = (count: number) => eventually(() => Promise.resolve(healthy.received.filter((d) => d.body.payload.lease_id === leaseId).length >= count ? true : undefined), 60_000);
    for (let i = 1; i <= 3; i++) expect((await asFlaky('PUT', `/v1/leases/${leaseId}`, { name: `flaky-${i}` })).status).toBe(200);
    await heard(4);
    const heldBack = await eventually(async () => {
      const [hook] = (await asFlaky('GET', '/v1/projects/project-flaky/webhooks')).body.webhooks;
      return /^held back until .* 2 deliveries in a row got no answer/.test(hook.last_error ?? '') ? hook : undefined;
    }, 60_000);
    expect(heldBack).toMatchObject({ delivered_count: 0, dropped_count: 0 });
    const triedBefore = resetting.requests.length;
    expect(triedBefore).toBeGreaterThanOrEqual(BREAKER_FAILURES);

    // Held back: more notices, and their retries, reach the healthy webhook and not the failing one.
    for (let i = 4; i <= 6; i++) expect((await asFlaky('PUT', `/v1/leases/${leaseId}`, { name: `flaky-${i}` })).status).toBe(200);
    await heard(7);
    expect(resetting.requests.length).toBe(triedBefore);

  }, 150_000);

  it("delivers to a project's approvers' webhook while the members' webhooks hold the project's cap", async () => {
    const asAdmin = apiClient(() => stack().url, { 'x-auth-token': 'admin' });
    const put = await asAdmin('PUT', '/v1/projects/project-approving/approvers-webhook', { url: `${healthy.url}?approvers` });
    expect(put.status).toBe(200);
    const cap = new ProjectDeliveryCap(1, 60_000);
    const members = cap.enter('project-approving'); // the members' one place, taken
    expect('leave' in members).toBe(true);
    const notice: Notice = { id: 'lease:approving:approval_requested:1', eventType: 'lease.approval_requested', occurredMs: Date.UTC(2026, 10, 27), projectId: 'project-approving', details: { lease_id: 'approving' } };
    expect(await sendToWebhook(stack().db.pool, stack().config.notices, put.body.approvers_webhook.id, notice, { projectCap: cap })).toBe('delivered');
    expect(healthy.received.some((d) => d.path.includes('approvers') && d.body.event_type === 'lease.approval_requested')).toBe(true);
    expect(cap.count('project-approving')).toBe(1); // nor did it take a members' place
  });

  it('lets one probe go after a hold, holds the others until its outcome, and closes on its answer', async () => {
    // A webhook no delivery is under way for (its project has no lease), held back and its hold over.
    const asProbed = apiClient(() => stack().url, { 'x-project-id': 'project-probed', 'x-user-id': 'pat', 'x-roles': 'member' });
    const put = await asProbed('PUT', '/v1/projects/project-probed/webhooks', { webhooks: [{ url: healthy.url }] });
    expect(put.status).toBe(200);
    const flakyId = put.body.webhooks[0].id as string;
    const pool = stack().db.pool;
    const state = async () => (await pool.query<{ failures_in_row: number; held_until: Date }>('SELECT failures_in_row, held_until FROM project_webhooks WHERE id = $1', [flakyId])).rows[0];
    expect(await claimWebhookDelivery(pool, flakyId, BREAKER_FAILURES, 60_000)).toEqual({ state: 'open' });
    await pool.query("UPDATE project_webhooks SET failures_in_row = $2, held_until = now() - interval '1 second' WHERE id = $1", [flakyId, BREAKER_FAILURES]);
    expect(await claimWebhookDelivery(pool, flakyId, BREAKER_FAILURES, 60_000)).toEqual({ state: 'probe' });
    expect(await claimWebhookDelivery(pool, flakyId, BREAKER_FAILURES, 60_000)).toEqual({ state: 'held', heldForMs: expect.any(Number) });
    // A failure of a delivery that began before the hold changes nothing; the probe's failure holds it back again, twice as long.
    const before = await state();
    const breaker = { failures: BREAKER_FAILURES, cooldownMs: 3_600_000, maxCooldownMs: 86_400_000 };
    expect(await countWebhookFailure(pool, flakyId, 'ECONNRESET', { ...breaker, probe: false })).toBeUndefined();
    expect(await state()).toEqual(before);
    const heldUntil = await countWebhookFailure(pool, flakyId, 'ECONNRESET', { ...breaker, probe: true });
    const after = await state();
    expect(after.failures_in_row).toBe(before.failures_in_row + 1);
    expect(heldUntil).toEqual(after.held_until);
    expect(after.held_until.getTime() - before.held_until.getTime()).toBeGreaterThan(3_600_000); // 2^k hours from now, against the probe's minute
    await pool.query("UPDATE project_webhooks SET held_until = now() - interval '1 second' WHERE id = $1", [flakyId]);
    expect(await claimWebhookDelivery(pool, flakyId, BREAKER_FAILURES, 60_000)).toEqual({ state: 'probe' });
    // The probe answered: the breaker closes.
    await countDelivery(pool, flakyId, 'delivered');
    expect(await claimWebhookDelivery(pool, flakyId, BREAKER_FAILURES, 60_000)).toEqual({ state: 'open' });
  });
});

describe('a project\'s cap on deliveries in flight', () => {
  it('turns the one past the cap away, for about as long as the oldest in flight has run, and frees the place on leave', () => {
    let now = 0;
    const cap = new ProjectDeliveryCap(2, 20_000, () => now);
    const first = cap.enter('a');
    now = 4_000;
    expect('leave' in cap.enter('a')).toBe(true);
    // Another project is not counted against this one.
    expect('leave' in cap.enter('b')).toBe(true);
    now = 6_000;
    expect(cap.enter('a')).toEqual({ waitMs: 6_000 });
    now = 30_000;
    expect(cap.enter('a')).toEqual({ waitMs: 20_000 }); // never longer than a delivery lasts
    now = 10_000;
    if (!('leave' in first)) throw new Error('the first delivery was turned away');
    first.leave();
    first.leave(); // twice is once
    expect(cap.count('a')).toBe(1);
    expect('leave' in cap.enter('a')).toBe(true);
    now = 12_000;
    // The oldest in flight is now the one from 4 s.
    expect(cap.enter('a')).toEqual({ waitMs: 8_000 });
  });
});

describe('connecting to a webhook', () => {
  it('gives up after the connect time-out, not the whole time-out, when the connection is never made (a TLS handshake never answered)', async () => {
    // Accepts TCP connections and says nothing: a TLS client never gets its handshake's answer.
    const sockets: net.Socket[] = [];
    const silent = net.createServer((socket) => void sockets.push(socket));
    const port = await freePort();
    await new Promise<void>((resolve) => silent.listen(port, '127.0.0.1', resolve));
    try {
      const notice: Notice = { id: 'host:1:failed:1', eventType: 'host.failed', occurredMs: Date.UTC(2026, 10, 27), details: { host: 'compute-1' } };
      const failure = await deliverWebhook({ url: `https://127.0.0.1:${port}/hook` }, notice, { timeoutMs: 120_000, connectTimeoutMs: 200, guardAddresses: false }).catch((err: unknown) => err);
      expect(failure).toBeInstanceOf(NoticeFailedError);
      expect((failure as Error).message).toBe(`notice to https://127.0.0.1:${port} failed: no connection within 200 ms`);
      expect(sockets.length).toBe(1);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });
});
