/**
 * Projects' webhooks through the API, on the real stack: `PUT` replaces the list and `GET` shows
 * it; a generated secret is shown once and kept when a later PUT repeats the URL without one; at
 * most 10; a bad event type, URL or address not allowed is a 400 naming the field (and never what a
 * name resolves to); another project's members get 403. And the store behind it: the targets of a
 * notice, and deliveries counted on the webhook (a receiver on 127.0.0.1, allowed by
 * LK_WEBHOOK_ALLOW_PRIVATE). Names are answered by a stand-in name server (LK_WEBHOOK_DNS_SERVERS).
 */
import { createHmac } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { createApp } from '../src/api/app';
import { webhookById } from '../src/db/webhooks';
import { pluginRegistry } from '../src/domain/resource-plugin';
import { NoticeRefusedError } from '../src/notifications/errors';
import type { Notice } from '../src/domain/notices';
import { noteDropped, noticeTargets, sendToWebhook } from '../src/notifications/webhooks';
import { startDnsStandIn, type DnsStandIn } from './support/dns-server';
import { startWebhookReceiver, type WebhookReceiver } from './support/notice-receiver';
import { apiClient, useTestStack } from '../dev-stack/stack';

const ALICE = { 'x-project-id': 'project-a', 'x-user-id': 'alice', 'x-roles': 'member' };
const BOB = { 'x-project-id': 'project-b', 'x-user-id': 'bob', 'x-roles': 'member' };
const ADMIN = { 'x-auth-token': 'admin' };
const TIMESTAMP = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/;
const NOT_ALLOWED = 'the address of this webhook is not allowed';

describe("projects' webhooks", () => {
  let names: DnsStandIn;
  beforeAll(async () => {
    names = await startDnsStandIn({ 'internal.test': ['10.0.0.5'], 'metadata.test': ['::a9fe:a9fe'], 'mixed.test': ['1.1.1.1', '192.168.0.1'], 'hung.test': 'no answer' });
  });
  afterAll(() => names.close());
  const stack = useTestStack(() => ({
    env: {
      LK_WEBHOOK_URLS: 'https://1.1.1.1/deployment-hook',
      LK_NOTIFY_URL: 'https://1.1.1.1/legacy-endpoint',
      LK_WEBHOOK_DNS_SERVERS: names.server,
      LK_WEBHOOK_DNS_TIMEOUT_MS: '1000',
    },
  }));
  const asAlice = apiClient(() => stack().url, ALICE);
  const asBob = apiClient(() => stack().url, BOB);
  const asAdmin = apiClient(() => stack().url, ADMIN);

  it('sets and lists them; a generated secret is shown once, and kept when the URL is listed again without one', async () => {
    const put = await asAlice('PUT', '/v1/projects/project-a/webhooks', {
      webhooks: [
        { url: 'https://1.1.1.1/hooks/a', secret: 'a-secret-of-the-projects-own' },
        { url: 'HTTPS://[2606:4700:4700::1111]:8443/hooks/b?x=1', events: ['lease.create', 'lease.event.before_end_lease'] },
      ],
    });
    expect(put.status).toBe(200);
    const [given, generated] = put.body.webhooks;
    expect(given).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      url: 'https://1.1.1.1/hooks/a',
      events: null,
      secret_set: true,
      delivered_count: 0,
      dropped_count: 0,
      last_error: null,
      last_error_at: null,
      created_at: expect.stringMatching(TIMESTAMP),
    });
    expect(generated).toMatchObject({ url: 'https://[2606:4700:4700::1111]:8443/hooks/b?x=1', events: ['lease.create', 'lease.event.before_end_lease'], secret_set: true, secret: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/) });
    expect((await webhookById(stack().db.pool, given.id))?.secret).toBe('a-secret-of-the-projects-own');
    expect((await webhookById(stack().db.pool, generated.id))?.secret).toBe(generated.secret);

    const listed = await asAlice('GET', '/v1/projects/project-a/webhooks');
    expect(listed).toEqual({ status: 200, body: { webhooks: [given, { ...generated, secret: undefined }].map((w) => JSON.parse(JSON.stringify(w))) } });
    expect(JSON.stringify(listed.body)).not.toContain(generated.secret);

    // Listed again without a secret: the same id and secret, not shown again; the other one removed; a new one added.
    const again = await asAlice('PUT', '/v1/projects/project-a/webhooks', { webhooks: [{ url: 'https://[2606:4700:4700::1111]:8443/hooks/b?x=1' }, { url: 'https://8.8.8.8/c', secret: 'another-secret-16+' }] });
    expect(again.status).toBe(200);
    expect(again.body.webhooks.map((w: { id: string; url: string; events: unknown }) => [w.id === generated.id, w.url, w.events])).toEqual([
      [true, 'https://[2606:4700:4700::1111]:8443/hooks/b?x=1', null],
      [false, 'https://8.8.8.8/c', null],
    ]);
    expect(again.body.webhooks.some((w: object) => 'secret' in w)).toBe(false);
    expect((await webhookById(stack().db.pool, generated.id))?.secret).toBe(generated.secret);
    expect(await webhookById(stack().db.pool, given.id)).toBeUndefined();

    // A secret given for a URL already listed replaces its secret, keeping its id.
    const rekeyed = await asAlice('PUT', '/v1/projects/project-a/webhooks', { webhooks: [{ url: 'https://[2606:4700:4700::1111]:8443/hooks/b?x=1', secret: 'a-brand-new-secret-value' }] });
    expect(rekeyed.body.webhooks.map((w: { id: string }) => w.id)).toEqual([generated.id]);
    expect((await webhookById(stack().db.pool, generated.id))?.secret).toBe('a-brand-new-secret-value');

    expect((await asAlice('PUT', '/v1/projects/project-a/webhooks', { webhooks: [] })).body).toEqual({ webhooks: [] });
    expect((await asAlice('GET', '/v1/projects/project-a/webhooks')).body).toEqual({ webhooks: [] });
  });

  it('takes at most 10', async () => {
    const hooks = (n: number) => Array.from({ length: n }, (_, i) => ({ url: `https://1.1.1.1/hook-${i}` }));
    expect((await asAlice('PUT', '/v1/projects/project-a/webhooks', { webhooks: hooks(10) })).body.webhooks).toHaveLength(10);
    const eleven = await asAlice('PUT', '/v1/projects/project-a/webhooks', { webhooks: hooks(11) });
    expect(eleven.status).toBe(400);
    expect(eleven.body.error_message).toBe('webhooks: expected at most 10 webhooks per project');
    expect((await asAlice('GET', '/v1/projects/project-a/webhooks')).body.webhooks).toHaveLength(10);
    await asAlice('PUT', '/v1/projects/project-a/webhooks', { webhooks: [] });
  });

  it.each([
    ['a host event type', { webhooks: [{ url: 'https://1.1.1.1/a', events: ['lease.create', 'host.failed'] }] }, /^webhooks\[0\]\.events\[1\]: expected a lease event type: lease\.create, /],
    ['an unknown event type', { webhooks: [{ url: 'https://1.1.1.1/a', events: ['lease.nonsense'] }] }, /^webhooks\[0\]\.events\[0\]: expected a lease event type: /],
    ['no event type', { webhooks: [{ url: 'https://1.1.1.1/a', events: [] }] }, /^webhooks\[0\]\.events: expected at least one event type/],
    ['ftp', { webhooks: [{ url: 'https://1.1.1.1/a' }, { url: 'ftp://1.1.1.1/a' }] }, /^webhooks\[1\]\.url: expected an http:\/\/ or https:\/\/ URL$/],
    ['not a URL', { webhooks: [{ url: 'not a url' }] }, /^webhooks\[0\]\.url: expected an http:\/\/ or https:\/\/ URL$/],
    ['credentials in the URL', { webhooks: [{ url: 'https://user:pw@1.1.1.1/a' }] }, /^webhooks\[0\]\.url: expected no credentials in the URL/],
    ['a URL over 2048 characters', { webhooks: [{ url: `https://1.1.1.1/${'a'.repeat(2_100)}` }] }, /^webhooks\[0\]\.url: expected at most 2048 characters$/],
    ['a URL twice', { webhooks: [{ url: 'https://1.1.1.1/a' }, { url: 'https://1.1.1.1/a' }] }, /^webhooks\[1\]\.url: listed twice$/],
    ['a private address', { webhooks: [{ url: 'http://10.0.0.5/hook' }] }, `webhooks[0].url: ${NOT_ALLOWED}`],
    ['the metadata service', { webhooks: [{ url: 'http://169.254.169.254/latest/meta-data' }] }, `webhooks[0].url: ${NOT_ALLOWED}`],
    // IPv6 forms that embed an IPv4 address are judged as that address.
    ['the metadata service, IPv4-compatible', { webhooks: [{ url: 'http://[::169.254.169.254]/latest/meta-data/' }] }, `webhooks[0].url: ${NOT_ALLOWED}`],
    ['loopback, IPv4-compatible', { webhooks: [{ url: 'http://[::127.0.0.1]/' }] }, `webhooks[0].url: ${NOT_ALLOWED}`],
    ['a private address, IPv4-compatible', { webhooks: [{ url: 'http://[::10.0.0.1]/' }] }, `webhooks[0].url: ${NOT_ALLOWED}`],
    ['the metadata service, IPv4-mapped', { webhooks: [{ url: 'http://[::ffff:169.254.169.254]/' }] }, `webhooks[0].url: ${NOT_ALLOWED}`],
    ['the metadata service, NAT64', { webhooks: [{ url: 'http://[64:ff9b::169.254.169.254]/' }] }, `webhooks[0].url: ${NOT_ALLOWED}`],
    ['the metadata service, 6to4', { webhooks: [{ url: 'http://[2002:a9fe:a9fe::1]/' }] }, `webhooks[0].url: ${NOT_ALLOWED}`],
    ['a documentation address', { webhooks: [{ url: 'http://[2001:db8::1]/' }] }, `webhooks[0].url: ${NOT_ALLOWED}`],
    // A name: the same sentence, never the address it resolves to.
    ['a name resolving to loopback', { webhooks: [{ url: 'https://1.1.1.1/a' }, { url: 'http://localhost:9000/hook' }] }, `webhooks[1].url: ${NOT_ALLOWED}`],
    ['a name resolving to a private address', { webhooks: [{ url: 'http://internal.test/hook' }] }, `webhooks[0].url: ${NOT_ALLOWED}`],
    ['a name whose AAAA record is the metadata service', { webhooks: [{ url: 'http://metadata.test/hook' }] }, `webhooks[0].url: ${NOT_ALLOWED}`],
    ['a name resolving to a public and a private address', { webhooks: [{ url: 'http://mixed.test/hook' }] }, `webhooks[0].url: ${NOT_ALLOWED}`],
    ['a name that does not resolve', { webhooks: [{ url: 'https://no-such-host.invalid/hook' }] }, 'webhooks[0].url: no-such-host.invalid does not resolve'],
    ['a name whose name server does not answer', { webhooks: [{ url: 'https://hung.test/hook' }] }, 'webhooks[0].url: hung.test did not resolve within 1000 ms'],
    ['a short secret', { webhooks: [{ url: 'https://1.1.1.1/a', secret: 'short' }] }, /^webhooks\[0\]\.secret: expected 16 to 256 characters$/],
    ['an unknown field', { webhooks: [{ url: 'https://1.1.1.1/a', token: 'x' }] }, /^webhooks\[0\]: unknown field\(s\) "token"$/],
    ['no list', {}, /^Missing parameter webhooks$/],
  ])('refuses %s with 400 naming the field', async (_what, body, message) => {
    const res = await asAlice('PUT', '/v1/projects/project-a/webhooks', body);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ error_code: 400, error_name: 400, error_message: typeof message === 'string' ? message : expect.stringMatching(message) });
    expect((await asAlice('GET', '/v1/projects/project-a/webhooks')).body).toEqual({ webhooks: [] });
  });

  it("refuses another project's members with 403, lets admins set any project's, and nothing changes", async () => {
    expect((await asAdmin('PUT', '/v1/projects/project-b/webhooks', { webhooks: [{ url: 'https://1.1.1.1/bob' }] })).status).toBe(200);
    const before = (await asBob('GET', '/v1/projects/project-b/webhooks')).body;
    expect(before.webhooks.map((w: { url: string }) => w.url)).toEqual(['https://1.1.1.1/bob']);
    const refusal = (action: string) => ({ status: 403, body: { error_code: 403, error_name: 403, error_message: `Policy doesn't allow blazar:projects:webhooks:${action} to be performed: members see and set their own project's webhooks only.` } });
    expect(await asAlice('GET', '/v1/projects/project-b/webhooks')).toEqual(refusal('get'));
    expect(await asAlice('PUT', '/v1/projects/project-b/webhooks', { webhooks: [] })).toEqual(refusal('put'));
    expect((await asAdmin('GET', '/v1/projects/project-b/webhooks')).body).toEqual(before);
    expect((await asAdmin('PUT', '/v1/projects/project-b/webhooks', { webhooks: [] })).status).toBe(200);
  });

  describe("a project's approvers' webhook", () => {
    const path = (project: string) => `/v1/projects/${project}/approvers-webhook`;

    it("is set and shown by admins only (its secret once), apart from the project's own list, and hears only the project's approval notices", async () => {
      expect((await asAdmin('GET', path('project-a'))).body).toEqual({ approvers_webhook: null });
      const put = await asAdmin('PUT', path('project-a'), { url: 'https://1.1.1.1/approvers' });
      expect(put.status).toBe(200);
      const hook = put.body.approvers_webhook;
      expect(hook).toMatchObject({ url: 'https://1.1.1.1/approvers', events: ['lease.approval_requested', 'lease.approved', 'lease.denied'], secret_set: true, secret: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/), delivered_count: 0 });
      expect((await webhookById(stack().db.pool, hook.id))?.secret).toBe(hook.secret);
      const shown = await asAdmin('GET', path('project-a'));
      expect(shown.body.approvers_webhook).toEqual(JSON.parse(JSON.stringify({ ...hook, secret: undefined })));
      expect(JSON.stringify(shown.body)).not.toContain(hook.secret);

      // The project's members neither see nor set it, nor does their own list show or replace it (the same URL may be in both).
      const refusal = (action: string) => ({ status: 403, body: { error_code: 403, error_name: 403, error_message: `Policy doesn't allow blazar:projects:approvers_webhook:${action} to be performed.` } });
      expect(await asAlice('GET', path('project-a'))).toEqual(refusal('get'));
      expect(await asAlice('PUT', path('project-a'), { url: 'https://1.1.1.1/mine' })).toEqual(refusal('put'));
      expect(await asAlice('DELETE', path('project-a'))).toEqual(refusal('delete'));
      const own = await asAlice('PUT', '/v1/projects/project-a/webhooks', { webhooks: [{ url: 'https://1.1.1.1/approvers' }] });
      expect(own.status).toBe(200);
      expect(own.body.webhooks.map((w: { id: string }) => w.id)).not.toContain(hook.id);
      expect((await asAlice('PUT', '/v1/projects/project-a/webhooks', { webhooks: [] })).body).toEqual({ webhooks: [] });
      expect((await asAdmin('GET', path('project-a'))).body.approvers_webhook.id).toBe(hook.id);

      // Approval notices of the project's leases, besides the deployment's webhooks; nothing else, and nothing of another project.
      const settings = stack().config.notices;
      const notice: Notice = { id: 'lease-9:lease.approval_requested', eventType: 'lease.approval_requested', occurredMs: Date.UTC(2026, 10, 27, 9), projectId: 'project-a', details: {} };
      expect((await noticeTargets(stack().db.pool, settings, notice)).webhooks).toEqual(['deployment:0', 'deployment:1', hook.id]);
      expect((await noticeTargets(stack().db.pool, settings, { ...notice, eventType: 'lease.denied' })).webhooks).toContain(hook.id);
      expect((await noticeTargets(stack().db.pool, settings, { ...notice, eventType: 'lease.create' })).webhooks).toEqual(['deployment:0', 'deployment:1']);
      expect((await noticeTargets(stack().db.pool, settings, { ...notice, projectId: 'project-b' })).webhooks).toEqual(['deployment:0', 'deployment:1']);

      // The same URL again keeps its id and secret; a given secret replaces it; another URL replaces the webhook.
      const again = await asAdmin('PUT', path('project-a'), { url: 'https://1.1.1.1/approvers' });
      expect(again.body.approvers_webhook).toMatchObject({ id: hook.id });
      expect(again.body.approvers_webhook.secret).toBeUndefined();
      expect((await webhookById(stack().db.pool, hook.id))?.secret).toBe(hook.secret);
      const rekeyed = await asAdmin('PUT', path('project-a'), { url: 'https://1.1.1.1/approvers', secret: 'the-approvers-own-secret' });
      expect(rekeyed.body.approvers_webhook).toMatchObject({ id: hook.id });
      expect((await webhookById(stack().db.pool, hook.id))?.secret).toBe('the-approvers-own-secret');
      const moved = await asAdmin('PUT', path('project-a'), { url: 'https://8.8.8.8/approvers', secret: 'the-approvers-own-secret' });
      expect(moved.body.approvers_webhook.id).not.toBe(hook.id);
      expect(await webhookById(stack().db.pool, hook.id)).toBeUndefined();

      expect((await asAdmin('DELETE', path('project-a'))).status).toBe(204);
      expect((await asAdmin('GET', path('project-a'))).body).toEqual({ approvers_webhook: null });
      expect((await asAdmin('DELETE', path('project-a'))).status).toBe(404);
    });

    it.each([
      ['a private address', { url: 'http://10.0.0.5/hook' }, `url: ${NOT_ALLOWED}`],
      ['the metadata service', { url: 'http://169.254.169.254/latest/meta-data' }, `url: ${NOT_ALLOWED}`],
      ['a name resolving to a private address', { url: 'http://internal.test/hook' }, `url: ${NOT_ALLOWED}`],
      ['ftp', { url: 'ftp://1.1.1.1/a' }, /^url: expected an http:\/\/ or https:\/\/ URL$/],
      ['credentials in the URL', { url: 'https://user:pw@1.1.1.1/a' }, /^url: expected no credentials in the URL/],
      ['a URL over 2048 characters', { url: `https://1.1.1.1/${'a'.repeat(2_100)}` }, /^url: expected at most 2048 characters$/],
      ['a short secret', { url: 'https://1.1.1.1/a', secret: 'short' }, /^secret: expected 16 to 256 characters$/],
      ['a secret not printable', { url: 'https://1.1.1.1/a', secret: 'sixteen-chars-\u0000-x' }, /^secret: must not contain control characters/],
      ['events', { url: 'https://1.1.1.1/a', events: ['lease.create'] }, /^unknown field\(s\) "events"$/],
      ['no URL', {}, /^Missing parameter url$/],
    ])('refuses %s with 400 naming the field, setting nothing', async (_what, body, message) => {
      const res = await asAdmin('PUT', path('project-a'), body);
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ error_code: 400, error_name: 400, error_message: typeof message === 'string' ? message : expect.stringMatching(message) });
      expect((await asAdmin('GET', path('project-a'))).body).toEqual({ approvers_webhook: null });
    });
  });

  describe('deliveries to a project webhook (LK_WEBHOOK_ALLOW_PRIVATE: a receiver on 127.0.0.1)', () => {
    let receiver: WebhookReceiver;
    let api: ReturnType<typeof apiClient>;
    let app: http.Server;

    beforeAll(async () => {
      receiver = await startWebhookReceiver({ answer: (res, delivery) => void res.writeHead(delivery.path === '/gone' ? 404 : 204).end() });
      const s = stack();
      const config = { ...s.config, notices: { ...s.config.notices, allowPrivate: true } };
      app = http.createServer(createApp({ config, log: pino({ level: 'silent' }), pool: s.db.pool, connection: s.temporal.connection, client: s.temporal.client, types: pluginRegistry([]) }));
      await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', resolve));
      api = apiClient(`http://127.0.0.1:${(app.address() as AddressInfo).port}`, ALICE);
    });
    afterAll(async () => {
      app.closeAllConnections();
      await Promise.all([new Promise((resolve) => app.close(resolve)), receiver.close()]);
    });

    it('targets the webhooks that want the event, delivers signed notices and counts them; a refusal is counted as dropped with why', async () => {
      const put = await api('PUT', '/v1/projects/project-a/webhooks', {
        webhooks: [{ url: `${receiver.origin}/ok` }, { url: `${receiver.origin}/gone`, secret: 'secret-of-the-gone-one' }, { url: `${receiver.origin}/starts-only`, events: ['lease.event.start_lease'] }],
      });
      expect(put.status).toBe(200);
      const [ok, gone, startsOnly] = put.body.webhooks as Array<{ id: string; secret?: string }>;
      const settings = { ...stack().config.notices, allowPrivate: true };
      const notice: Notice = { id: 'lease-1:lease.create', eventType: 'lease.create', occurredMs: Date.UTC(2026, 10, 21, 9, 15), projectId: 'project-a', details: {} };

      expect(stack().config.notices.deploymentWebhooks).toEqual(['https://1.1.1.1/deployment-hook', 'https://1.1.1.1/legacy-endpoint']);
      expect(await noticeTargets(stack().db.pool, settings, notice)).toEqual({ webhooks: ['deployment:0', 'deployment:1', ok.id, gone.id], oslo: false, retryForMs: 24 * 3_600_000 });
      expect((await noticeTargets(stack().db.pool, settings, { ...notice, eventType: 'lease.event.start_lease' })).webhooks).toEqual(['deployment:0', 'deployment:1', ok.id, gone.id, startsOnly.id]);
      expect((await noticeTargets(stack().db.pool, settings, { eventType: 'host.failed' })).webhooks).toEqual(['deployment:0', 'deployment:1']);

      expect(await sendToWebhook(stack().db.pool, settings, ok.id, notice)).toBe('delivered');
      expect(receiver.requests).toHaveLength(1);
      const [delivered] = receiver.requests;
      expect(delivered.path).toBe('/ok');
      expect(delivered.headers['idempotency-key']).toBe('lease-1:lease.create');
      expect(delivered.headers['x-leasekeeper-signature']).toBe(`sha256=${createHmac('sha256', ok.secret!).update(delivered.raw).digest('hex')}`);
      const refused = await sendToWebhook(stack().db.pool, settings, gone.id, notice).catch((err: unknown) => err);
      expect(refused).toBeInstanceOf(NoticeRefusedError);
      // Another project's notice never reaches this project's webhook.
      expect(await sendToWebhook(stack().db.pool, settings, ok.id, { ...notice, projectId: 'project-b' })).toBe('gone');
      await noteDropped(stack().db.pool, ok.id, 'still failing after 24 h: HTTP 503');
      await noteDropped(stack().db.pool, 'deployment:0', 'not counted anywhere');

      const listed = (await api('GET', '/v1/projects/project-a/webhooks')).body.webhooks;
      expect(listed.map((w: Record<string, unknown>) => [w.delivered_count, w.dropped_count, w.last_error])).toEqual([
        [1, 1, 'still failing after 24 h: HTTP 503'],
        [0, 1, `notice to ${receiver.origin} refused: HTTP 404`],
        [0, 0, null],
      ]);
      expect(listed[1].last_error_at).toMatch(TIMESTAMP);
      expect(receiver.requests).toHaveLength(2); // ok, then gone; nothing for project-b's notice

      // Without the allowance the same webhook is refused at the connection: no request leaves.
      const guarded = await sendToWebhook(stack().db.pool, { ...settings, allowPrivate: false }, ok.id, notice).catch((err: unknown) => err);
      expect(guarded).toBeInstanceOf(NoticeRefusedError);
      expect((guarded as Error).message).toBe(`notice to ${receiver.origin} refused: ${NOT_ALLOWED}`);
      expect(receiver.requests).toHaveLength(2);
      expect((await api('GET', '/v1/projects/project-a/webhooks')).body.webhooks[0].last_error).toBe(`notice to ${receiver.origin} refused: ${NOT_ALLOWED}`);
      await api('PUT', '/v1/projects/project-a/webhooks', { webhooks: [] });
    });

    it('checks a name again at each delivery: one that now resolves to a private address is refused, its last_error naming no address', async () => {
      const notice: Notice = { id: 'lease-2:lease.create', eventType: 'lease.create', occurredMs: Date.UTC(2026, 10, 21, 9, 15), projectId: 'project-a', details: {} };
      const url = `http://rebind.test:${receiver.port}/rebind`;
      names.records.set('rebind.test', ['1.1.1.1']);
      const put = await asAlice('PUT', '/v1/projects/project-a/webhooks', { webhooks: [{ url }] }); // guarded: a public address
      expect(put.status).toBe(200);
      const [hook] = put.body.webhooks as Array<{ id: string }>;
      names.records.set('rebind.test', ['127.0.0.1']); // the name now leads to the receiver on loopback
      const before = receiver.requests.length;
      const refused = await sendToWebhook(stack().db.pool, stack().config.notices, hook.id, notice).catch((err: unknown) => err);
      expect(refused).toBeInstanceOf(NoticeRefusedError);
      const said = `notice to http://rebind.test:${receiver.port} refused: ${NOT_ALLOWED}`;
      expect((refused as Error).message).toBe(said);
      expect(receiver.requests).toHaveLength(before); // never connected
      const [listed] = (await asAlice('GET', '/v1/projects/project-a/webhooks')).body.webhooks;
      expect(listed).toMatchObject({ dropped_count: 1, last_error: said });
      // With the allowance the name resolves through the same name server and the notice arrives: the refusal was the guard's.
      expect(await sendToWebhook(stack().db.pool, { ...stack().config.notices, allowPrivate: true }, hook.id, notice)).toBe('delivered');
      expect(receiver.requests.map((delivery) => delivery.path).slice(before)).toEqual(['/rebind']);
      await asAlice('PUT', '/v1/projects/project-a/webhooks', { webhooks: [] });
    });
  });
});
