/**
 * Delivering a notice to a webhook, against receivers on 127.0.0.1: the signature verifies with
 * the secret over the exact body, the Idempotency-Key is the notice's id; what counts as delivered,
 * refused (final) or failed (retried); a response read no further than 64 KiB; and the payload and
 * envelope in Blazar's and oslo.messaging's shapes. The SSRF guard: test/webhook-address.test.ts.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type http from 'node:http';
import type { Lease } from '../src/domain/lease';
import { noticeBody, noticeMessageId, noticePayload, osloEnvelope, pythonJson } from '../src/notifications/blazar-payload';
import { pythonIsoformat } from '../src/domain/dates';
import { NoticeFailedError, NoticeRefusedError } from '../src/notifications/errors';
import type { Notice } from '../src/domain/notices';
import { deliverWebhook, generateSecret, MAX_RESPONSE_BYTES, signatureOf } from '../src/notifications/webhooks';
import { startWebhookReceiver, type Delivery } from './support/notice-receiver';

const SECRET = 'a-webhook-secret-of-some-length';

/** A receiver on 127.0.0.1 where the webhook's URL carries a token (never to be shown in an error); `answer` replies. */
const receiver = (answer: (res: http.ServerResponse) => void) => startWebhookReceiver({ path: '/hooks/leasekeeper?token=abc', answer });

/** Whether the delivery's signature verifies with SECRET over the exact bytes received. */
function signedWithSecret(delivery: Delivery): boolean {
  const expected = Buffer.from(`sha256=${createHmac('sha256', SECRET).update(delivery.raw).digest('hex')}`);
  const given = Buffer.from(String(delivery.headers['x-leasekeeper-signature'] ?? ''));
  return given.length === expected.length && timingSafeEqual(given, expected);
}

const OCCURRED_MS = Date.UTC(2026, 10, 21, 9, 15, 0, 123);

function hostLease(): Lease {
  return {
    id: '6f1c7c2e-3b5a-4d8e-9a41-0c2b7d9e5f10',
    name: 'gpu-week',
    projectId: 'project-a',
    userId: 'alice',
    startMs: Date.UTC(2026, 10, 21, 9, 15),
    endMs: Date.UTC(2026, 10, 28, 9, 15),
    status: 'ACTIVE',
    reservations: [
      {
        id: 'b7c1a0de-8f7e-4b6a-9c3d-2e1f0a9b8c7d',
        resource_type: 'physical:host',
        status: 'active',
        params: { min: 2, max: 2, hypervisor_properties: '', resource_properties: '["=", "$gpu", "a100"]', before_end: 'notify' },
        allocation: { hosts: ['compute-1', 'compute-2'], aggregate: 'lease-b7c1a0de' },
      },
    ],
    events: [
      { id: 'e1', event_type: 'start_lease', time: Date.UTC(2026, 10, 21, 9, 15), status: 'DONE' },
      { id: 'e2', event_type: 'before_end_lease', time: Date.UTC(2026, 10, 28, 8, 15), status: 'UNDONE' },
      { id: 'e3', event_type: 'end_lease', time: Date.UTC(2026, 10, 28, 9, 15), status: 'UNDONE' },
    ],
    createdMs: Date.UTC(2026, 10, 20, 8, 0, 0),
    updatedMs: Date.UTC(2026, 10, 21, 9, 15, 2),
    version: 3,
  };
}

const leaseNotice = (fields: Partial<Notice> = {}): Notice => ({
  id: 'notice-1',
  eventType: 'lease.event.start_lease',
  occurredMs: OCCURRED_MS,
  projectId: 'project-a',
  lease: hostLease(),
  ...fields,
});

const hostFailed: Notice = {
  id: 'host:42:failed:1',
  eventType: 'host.failed',
  occurredMs: Date.UTC(2026, 10, 22, 3, 0, 0),
  details: { host_id: '42', host: 'compute-1', state: 'failed', state_since: '2026-11-22T02:59:30.000Z', reason: 'nova-compute down', lease_ids: ['6f1c7c2e-3b5a-4d8e-9a41-0c2b7d9e5f10'] },
};

const OPTIONS = { timeoutMs: 10_000, guardAddresses: false };

describe('delivering a notice to a webhook', () => {
  it('posts the body signed with the secret, its Idempotency-Key the notice id, and is delivered on 200 and 204', async () => {
    for (const status of [200, 204]) {
      const hook = await receiver((res) => res.writeHead(status).end());
      try {
        const notice = leaseNotice();
        const delivered = await deliverWebhook({ url: hook.url, secret: SECRET }, notice, OPTIONS);
        expect(delivered.status).toBe(status);
        expect(hook.requests).toHaveLength(1);
        const [got] = hook.requests;
        expect(signedWithSecret(got)).toBe(true);
        expect(got.headers['idempotency-key']).toBe('notice-1');
        expect(got.headers['x-leasekeeper-event']).toBe('lease.event.start_lease');
        expect(got.headers['content-type']).toBe('application/json');
        expect(got.headers['user-agent']).toBe('leasekeeper');
        expect(got.body).toEqual(noticeBody(notice));
      } finally {
        await hook.close();
      }
    }
  });

  it('sends no signature without a secret, and the signature is the HMAC of the exact bytes', async () => {
    const hook = await receiver((res) => res.writeHead(200).end());
    try {
      await deliverWebhook({ url: hook.url }, hostFailed, OPTIONS);
      expect(hook.requests[0].headers['x-leasekeeper-signature']).toBeUndefined();
      expect(signatureOf(hook.requests[0].raw, SECRET)).toBe(`sha256=${createHmac('sha256', SECRET).update(hook.requests[0].raw).digest('hex')}`);
      expect(signatureOf(Buffer.concat([hook.requests[0].raw, Buffer.from(' ')]), SECRET)).not.toBe(signatureOf(hook.requests[0].raw, SECRET));
    } finally {
      await hook.close();
    }
  });

  it.each([
    [500, NoticeFailedError],
    [503, NoticeFailedError],
    [429, NoticeFailedError],
    [408, NoticeFailedError],
    [409, NoticeFailedError],
    [302, NoticeFailedError],
    [400, NoticeRefusedError],
    [404, NoticeRefusedError],
    [410, NoticeRefusedError],
  ])('HTTP %i: %p', async (status, errorClass) => {
    const hook = await receiver((res) => res.writeHead(status, status === 302 ? { location: 'http://127.0.0.1:1/elsewhere' } : {}).end(`said ${status}`));
    try {
      const failure = await deliverWebhook({ url: hook.url, secret: SECRET }, leaseNotice(), OPTIONS).then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(failure).toBeInstanceOf(errorClass);
      expect((failure as NoticeFailedError).status).toBe(status);
      // The origin only: a webhook's path and query may hold a token.
      expect((failure as Error).message).toContain(`http://127.0.0.1:${hook.port}`);
      expect((failure as Error).message).not.toContain('token=abc');
      expect((failure as Error).message).toContain(`HTTP ${status}: said ${status}`);
      // A redirect is not followed: one request only.
      expect(hook.requests).toHaveLength(1);
    } finally {
      await hook.close();
    }
  });

  it('fails (retryably) when the receiver never answers within the timeout', async () => {
    const hook = await receiver(() => undefined); // never answers
    try {
      const failure = await deliverWebhook({ url: hook.url }, leaseNotice(), { timeoutMs: 300, guardAddresses: false }).catch((err: unknown) => err);
      expect(failure).toBeInstanceOf(NoticeFailedError);
      expect((failure as Error).message).toContain('no answer within 300 ms');
    } finally {
      await hook.close();
    }
  });

  it('fails (retryably) when the connection is refused', async () => {
    const hook = await receiver((res) => res.end());
    const url = hook.url;
    await hook.close(); // nothing listens on its port now
    const failure = await deliverWebhook({ url }, leaseNotice(), OPTIONS).catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(NoticeFailedError);
    expect((failure as Error).message).toContain('ECONNREFUSED');
  });

  it('reads no more than 64 KiB of an answer, then drops the connection', async () => {
    let serverSawClose = false;
    let written = 0;
    const chunk = Buffer.alloc(16 * 1024, 'x');
    const hook = await receiver((res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.on('close', () => (serverSawClose = true));
      // An endless body: only the reader's limit ends it.
      const pump = () => {
        let more = true;
        while (!res.destroyed && more) {
          more = res.write(chunk);
          written += chunk.length;
        }
        if (!res.destroyed) res.once('drain', pump);
      };
      pump();
    });
    try {
      // A timeout far beyond the test's own: only the read limit can end this delivery in time.
      const delivered = await deliverWebhook({ url: hook.url }, leaseNotice(), { timeoutMs: 600_000, guardAddresses: false });
      expect(delivered.status).toBe(200);
      expect(Buffer.byteLength(delivered.body)).toBe(MAX_RESPONSE_BYTES);
      for (let i = 0; i < 100 && !serverSawClose; i++) await new Promise((resolve) => setTimeout(resolve, 20));
      expect(serverSawClose).toBe(true);
      expect(written).toBeGreaterThanOrEqual(MAX_RESPONSE_BYTES); // sent at least what was read; the rest never was
    } finally {
      await hook.close();
    }
  });
});

describe("a project webhook's secret", () => {
  it('generates secrets of 32 random bytes, base64url', () => {
    const [a, b] = [generateSecret(), generateSecret()];
    expect(a).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(Buffer.from(a, 'base64url')).toHaveLength(32);
    expect(a).not.toBe(b);
  });
});

describe("notices in Blazar's and oslo.messaging's shapes", () => {
  it("makes a lease event's payload Blazar 17's: the whole lease, its dates as Blazar writes them, details beside it", () => {
    const payload = noticePayload(leaseNotice({ eventType: 'lease.event.before_end_lease', details: { hosts: ['compute-1'], lease_id: 'not-this', reservation_id: 'b7c1a0de-8f7e-4b6a-9c3d-2e1f0a9b8c7d' } }));
    expect(Object.keys(payload).slice(0, 13)).toEqual(['lease_id', 'user_id', 'project_id', 'trust_id', 'start_date', 'end_date', 'status', 'reservations', 'events', 'name', 'created_at', 'updated_at', 'degraded']);
    expect(payload).toMatchObject({
      lease_id: '6f1c7c2e-3b5a-4d8e-9a41-0c2b7d9e5f10',
      user_id: 'alice',
      project_id: 'project-a',
      trust_id: null,
      start_date: '2026-11-21T09:15:00.000000',
      end_date: '2026-11-28T09:15:00.000000',
      status: 'ACTIVE',
      name: 'gpu-week',
      created_at: '2026-11-20 08:00:00',
      updated_at: '2026-11-21 09:15:02',
      degraded: false,
      hosts: ['compute-1'],
      reservation_id: 'b7c1a0de-8f7e-4b6a-9c3d-2e1f0a9b8c7d',
    });
    const reservations = payload.reservations as Array<Record<string, unknown>>;
    expect(reservations).toHaveLength(1);
    expect(reservations[0]).toMatchObject({
      id: 'b7c1a0de-8f7e-4b6a-9c3d-2e1f0a9b8c7d',
      lease_id: '6f1c7c2e-3b5a-4d8e-9a41-0c2b7d9e5f10',
      resource_type: 'physical:host',
      status: 'active',
      min: 2,
      max: 2,
      hypervisor_properties: '',
      resource_properties: '["=", "$gpu", "a100"]',
      before_end: 'notify',
      hosts: ['compute-1', 'compute-2'],
      missing_resources: false,
      resources_changed: false,
    });
    const events = payload.events as Array<Record<string, unknown>>;
    expect(events.map((e) => [e.event_type, e.time, e.status])).toEqual([
      ['start_lease', '2026-11-21T09:15:00.000000', 'DONE'],
      ['before_end_lease', '2026-11-28T08:15:00.000000', 'UNDONE'],
      ['end_lease', '2026-11-28T09:15:00.000000', 'UNDONE'],
    ]);
    expect(events[0].id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it("makes a host event's payload its details", () => {
    expect(noticePayload(hostFailed)).toEqual(hostFailed.details);
    expect(noticeBody(hostFailed)).toEqual({ event_type: 'host.failed', message_id: noticeMessageId(hostFailed), timestamp: '2026-11-22T03:00:00.000Z', payload: hostFailed.details });
  });

  it('gives the webhook body an ISO timestamp and a message id derived from the notice id', () => {
    const body = noticeBody(leaseNotice());
    expect(body).toMatchObject({ event_type: 'lease.event.start_lease', timestamp: '2026-11-21T09:15:00.123Z' });
    expect(body.message_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(noticeBody(leaseNotice()).message_id).toBe(body.message_id);
    expect(noticeBody(leaseNotice({ id: 'notice-2' })).message_id).not.toBe(body.message_id);
  });

  it("wraps it in oslo.messaging's 2.0 envelope as Blazar's notifier would", () => {
    const notice = leaseNotice({ eventType: 'lease.create' });
    const envelope = osloEnvelope(notice, 'blazar.lease');
    expect(Object.keys(envelope)).toEqual(['oslo.version', 'oslo.message']);
    expect(envelope['oslo.version']).toBe('2.0');
    // Python's json.dumps: ", " and ": " between items, oslo's field order.
    expect(envelope['oslo.message'].startsWith(`{"message_id": "${noticeMessageId(notice)}", "publisher_id": "blazar.lease", "event_type": "lease.create", "priority": "INFO", "payload": {"lease_id": `)).toBe(true);
    const message = JSON.parse(envelope['oslo.message']) as Record<string, unknown>;
    expect(message).toEqual({
      message_id: noticeMessageId(notice),
      publisher_id: 'blazar.lease',
      event_type: 'lease.create',
      priority: 'INFO',
      payload: noticePayload(notice),
      timestamp: '2026-11-21 09:15:00.123000',
      _unique_id: noticeMessageId(notice).replace(/-/g, ''),
      _context_user_id: 'alice',
      _context_project_id: 'project-a',
    });
    expect((JSON.parse(osloEnvelope(leaseNotice({ eventType: 'lease.error' }), 'blazar.lease')['oslo.message']) as { priority: string }).priority).toBe('ERROR');
    const hostMessage = JSON.parse(osloEnvelope(hostFailed, 'blazar.lease')['oslo.message']) as Record<string, unknown>;
    expect(hostMessage).toMatchObject({ event_type: 'host.failed', priority: 'INFO', payload: hostFailed.details, timestamp: '2026-11-22 03:00:00' });
    expect(hostMessage).not.toHaveProperty('_context_project_id');
  });

  it("writes oslo's timestamps and Python's JSON", () => {
    expect(pythonIsoformat(Date.UTC(2026, 0, 2, 3, 4, 5, 6), ' ')).toBe('2026-01-02 03:04:05.006000');
    expect(pythonIsoformat(Date.UTC(2026, 0, 2, 3, 4, 5), ' ')).toBe('2026-01-02 03:04:05');
    expect(pythonJson({ a: [1, 'é', null, true], b: { c: 'x"y' }, d: undefined })).toBe('{"a": [1, "\\u00e9", null, true], "b": {"c": "x\\"y"}}');
    expect(pythonJson('😀')).toBe('"\\ud83d\\ude00"');
  });
});
