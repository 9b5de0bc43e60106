/**
 * Lease notices end to end, on the real stack: every event of a lease's life reaches the
 * deployment's webhook (signed, each once, retried after 500s) and the project's own; a dead
 * receiver slows nothing and its notices are dropped and counted once the retry span is over;
 * warnings before the end at the lease's offsets; and Blazar's external filter asked at create,
 * update and end, its denial passed through.
 */
import { createHmac } from 'node:crypto';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { startWebhookReceiver, type Delivery, type WebhookReceiver } from './support/notice-receiver';
import { apiClient, eventually, inSeconds, useTestStack } from '../dev-stack/stack';

const SECRET = 'a-secret-of-the-deployment-webhook';

/** Blazar's external filter as a credit service would run it: denies leases named deny-*, fails for broken-*, records every call. */
function policyService() {
  return startWebhookReceiver({
    path: '/policy/',
    answer: (res, call) => {
      const lease = (call.body.lease ?? {}) as { name?: string };
      if (call.path === '/policy/check-create' && lease.name?.startsWith('broken-')) return void res.writeHead(500).end();
      if (call.path === '/policy/check-create' && lease.name?.startsWith('deny-')) {
        return void res.writeHead(403, { 'content-type': 'application/json' }).end(JSON.stringify({ message: 'Project project-a has no credits left for 2 host-hours.' }));
      }
      res.writeHead(204).end();
    },
  });
}

describe('lease notices', () => {
  let deployment: WebhookReceiver;
  let project: WebhookReceiver;
  let dead: WebhookReceiver;
  let policy: WebhookReceiver;
  beforeAll(async () => {
    deployment = await startWebhookReceiver({ path: '/hook', failFirst: 2, failWith: 500 });
    project = await startWebhookReceiver({ path: '/hook' });
    dead = await startWebhookReceiver({ path: '/hook', answer: () => undefined });
    policy = await policyService();
  });
  const stack = useTestStack(() => ({
    env: {
      LK_WEBHOOK_URLS: deployment.url,
      LK_WEBHOOK_SECRET: SECRET,
      LK_WEBHOOK_ALLOW_PRIVATE: 'true', // the projects' receivers are on loopback here
      LK_NOTICE_TIMEOUT_MS: '300',
      LK_NOTICE_RETRY_HOURS: '0.002', // 7.2 s, then dropped
      LK_NOTIFY_BEFORE_END: 'none',
      LK_POLICY_EXTERNAL_URL: policy.url,
    },
    withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })],
  }));
  afterAll(async () => {
    await deployment.close();
    await project.close();
    await dead.close();
    await policy.close();
  });
  const asA = apiClient(() => stack().url, { 'x-project-id': 'project-a', 'x-user-id': 'alice', 'x-roles': 'member' });
  const asB = apiClient(() => stack().url, { 'x-project-id': 'project-b', 'x-user-id': 'bob', 'x-roles': 'member' });
  const ofLease = (deliveries: Delivery[], id: string) => deliveries.filter((d) => d.body.payload.lease_id === id);

  beforeAll(async () => {
    for (let i = 1; i <= 3; i++) await insertHost(stack().db.pool, { name: `notice-host-${i}` });
  });

  it('tells every event of a lease\'s life, signed, each once, to the deployment and the project, retrying after 500s', async () => {
    const hooks = await asA('PUT', '/v1/projects/project-a/webhooks', { webhooks: [{ url: project.url }] });
    expect(hooks.status).toBe(200);
    // Starts now, ends in 65 s, warns 1 minute before its end (5 s from now).
    const created = await asA('POST', '/v1/leases', { name: 'told', start_date: 'now', end_date: inSeconds(65), notify_before_end: ['1m'], reservations: [hostReservation()] });
    expect(created.status).toBe(201);
    expect(created.body.lease.notify_before_end).toEqual(['1m']);
    const id = created.body.lease.id as string;
    const warning = await eventually(() => Promise.resolve(ofLease(deployment.received, id).find((d) => d.body.payload.notify_before_end === '1m')), 30_000);
    expect(warning.body).toMatchObject({ event_type: 'lease.event.before_end_lease', payload: { lease_id: id, status: 'ACTIVE', name: 'told' } });
    expect((await asA('PUT', `/v1/leases/${id}`, { end_date: 'now' })).status).toBe(200);
    await eventually(async () => ((await asA('GET', `/v1/leases/${id}`)).body.lease.status === 'TERMINATED' ? true : undefined), 30_000);
    expect((await asA('DELETE', `/v1/leases/${id}`)).status).toBe(204);

    const expected = ['lease.create', 'lease.event.before_end_lease', 'lease.event.end_lease', 'lease.event.start_lease', 'lease.delete', 'lease.update'].sort();
    const types = (deliveries: Delivery[]) => [...new Set(ofLease(deliveries, id).map((d) => d.body.event_type))].sort();
    await eventually(() => Promise.resolve(types(deployment.received).length === expected.length && types(project.received).length === expected.length ? true : undefined), 30_000);
    expect(types(deployment.received)).toEqual(expected);
    expect(types(project.received)).toEqual(expected);
    // Each notice once (its Idempotency-Key), though the first two deliveries got a 500 and were retried.
    expect(deployment.refused()).toBe(2);
    for (const deliveries of [deployment.received, project.received]) {
      const keys = ofLease(deliveries, id).map((d) => d.headers['idempotency-key']);
      expect(new Set(keys).size).toBe(keys.length);
    }
    // The deployment's webhook is signed with its secret, over the exact body; the project's with its own.
    for (const d of ofLease(deployment.received, id)) {
      expect(d.headers['x-leasekeeper-signature']).toBe(`sha256=${createHmac('sha256', SECRET).update(d.raw).digest('hex')}`);
    }
    expect(project.received[0].headers['x-leasekeeper-signature']).toMatch(/^sha256=[0-9a-f]{64}$/);
    expect(ofLease(deployment.received, id).find((d) => d.body.event_type === 'lease.create')?.body.payload).toMatchObject({
      lease_id: id,
      project_id: 'project-a',
      status: 'PENDING',
      reservations: [expect.objectContaining({ resource_type: 'physical:host' })],
    });
    // The project's hook hears only its own project.
    expect(project.received.every((d) => d.body.payload.project_id === 'project-a')).toBe(true);
    const shown = (await asA('GET', '/v1/projects/project-a/webhooks')).body.webhooks[0];
    expect(shown.delivered_count).toBeGreaterThanOrEqual(expected.length);
    expect(shown.dropped_count).toBe(0);
  }, 120_000);

  it('drops and counts what a dead receiver never takes, and the lease goes on as if it were not there', async () => {
    expect((await asB('PUT', '/v1/projects/project-b/webhooks', { webhooks: [{ url: dead.url, events: ['lease.create'] }] })).status).toBe(200);
    const created = await asB('POST', '/v1/leases', { name: 'unheard', start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [hostReservation()] });
    expect(created.status).toBe(201);
    const dropped = await eventually(async () => {
      const [hook] = (await asB('GET', '/v1/projects/project-b/webhooks')).body.webhooks;
      return hook.dropped_count >= 1 ? hook : undefined;
    }, 60_000);
    expect(dropped).toMatchObject({ delivered_count: 0, dropped_count: 1 });
    expect(dropped.last_error).toEqual(expect.any(String));
    // The deployment's webhook got it meanwhile; the lease was never held up.
    expect(ofLease(deployment.received, created.body.lease.id).map((d) => d.body.event_type)).toContain('lease.create');
    expect((await asB('DELETE', `/v1/leases/${created.body.lease.id}`)).status).toBe(204);
  }, 90_000);

  it('asks Blazar\'s external filter at create, update and end, and passes its denial through', async () => {
    const denied = await asA('POST', '/v1/leases', { name: 'deny-me', start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [hostReservation()] });
    expect(denied.status).toBe(403);
    expect(denied.body).toMatchObject({ error_code: 403, error_message: 'Project project-a has no credits left for 2 host-hours.', rule: 'external' });
    expect((await asA('GET', '/v1/leases')).body.leases.map((l: { name: string }) => l.name)).not.toContain('deny-me');
    // A service that gives no decision: closed by default, the caller may try again later.
    const broken = await asA('POST', '/v1/leases', { name: 'broken-service', start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [hostReservation()] });
    expect(broken.status).toBe(503);
    expect(broken.body.error_message).toMatch(/^External service enforcement filter denied the request\. The usage policy service could not be reached or gave no decision/);
    expect((await asA('GET', '/v1/leases')).body.leases.map((l: { name: string }) => l.name)).not.toContain('broken-service');

    const lease = (await asA('POST', '/v1/leases', { name: 'credited', start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [hostReservation()] })).body.lease;
    expect((await asA('PUT', `/v1/leases/${lease.id}`, { end_date: inSeconds(9000) })).status).toBe(200);
    expect((await asA('DELETE', `/v1/leases/${lease.id}`)).status).toBe(204);
    const calls = policy.requests.filter((c) => JSON.stringify(c.body).includes('credited'));
    expect(calls.map((c) => c.path)).toEqual(['/policy/check-create', '/policy/check-update', '/policy/on-end']);
    expect(calls[0].body).toMatchObject({ context: { user_id: 'alice', project_id: 'project-a' }, lease: { name: 'credited', reservations: [expect.objectContaining({ resource_type: 'physical:host', allocations: [expect.objectContaining({ hypervisor_hostname: expect.any(String) })] })] } });
    expect(Object.keys(calls[1].body)).toEqual(['context', 'current_lease', 'lease']);
  }, 60_000);
});
