/**
 * What the host calendar does with a provisioning lead time (a lease's hosts are booked from its
 * start less the lead) and with the `release` end policy (its hosts leave the reservable pool at
 * the end, so nothing may be booked on them after it); and the edge's checks of the end options.
 */
import { physicalHostPlugin } from '../src/resources/physical-host';
import { blazarHostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { startWebhookReceiver, type WebhookReceiver } from './support/notice-receiver';
import { apiClient, eventually, inSeconds, useTestStack } from '../dev-stack/stack';

const LEAD_MINUTES = 30;

describe('host calendar: provisioning lead time and the release policy', () => {
  const stack = useTestStack({
    env: { LK_PROVISIONING_LEAD_TIME_SECONDS: String(LEAD_MINUTES * 60) },
    withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false, provisioningLeadMs: LEAD_MINUTES * 60_000 }, cloud: 'calendar-only' })],
  });
  const api = apiClient(() => stack().url);
  beforeAll(async () => {
    for (const name of ['lead-host', 'release-host']) await insertHost(stack().db.pool, { name, vcpus: 4 });
  });

  const on = (host: string, name: string, start: string, end: string, params: Record<string, unknown> = {}) =>
    api('POST', '/v1/leases', {
      name,
      start_date: start,
      end_date: end,
      reservations: [blazarHostReservation({ hypervisor_properties: `["==", "$hypervisor_hostname", "${host}"]`, ...params })],
    });

  it('books the lead time before the start: a lease right after another must leave room for it', async () => {
    expect((await on('lead-host', 'first', '2099-05-01 10:00', '2099-05-01 12:00')).status).toBe(201);
    const tooClose = await on('lead-host', 'too-close', '2099-05-01 12:00', '2099-05-01 13:00');
    expect(tooClose.status).toBe(409);
    expect(tooClose.body).toMatchObject({ earliest_start: '2099-05-01 12:30', earliest_end: '2099-05-01 13:30' });
    expect((await on('lead-host', 'after-lead', '2099-05-01 12:30', '2099-05-01 13:30')).status).toBe(201);
    // …and before a later booking: a lease must end before that one's lead time begins.
    const before = await on('lead-host', 'before', '2099-05-01 08:00', '2099-05-01 09:45');
    expect(before.status).toBe(409);
    expect((await on('lead-host', 'before-ok', '2099-05-01 08:00', '2099-05-01 09:30')).status).toBe(201);

    const allocations = (await api('GET', '/v1/os-hosts/allocations')).body.allocations;
    expect(allocations.find((a: { hypervisor_hostname: string }) => a.hypervisor_hostname === 'lead-host').reservations).toHaveLength(3);
    const free = await api('GET', `/v1/availability?start=${encodeURIComponent('2099-05-01 07:00')}&end=${encodeURIComponent('2099-05-01 16:00')}`);
    expect(free.status).toBe(200);
    const host = free.body.availability.find((h: { hypervisor_hostname: string }) => h.hypervisor_hostname === 'lead-host');
    // Free for a lease: until 07:30 (the 08:00 lease's lead), and from 14:00 (13:30 + its own lead).
    expect(host.free).toEqual([
      { start_date: '2099-05-01T07:00:00.000000', end_date: '2099-05-01T07:30:00.000000', start: '2099-05-01 07:00', end: '2099-05-01 07:30' },
      { start_date: '2099-05-01T14:00:00.000000', end_date: '2099-05-01T16:00:00.000000', start: '2099-05-01 14:00', end: '2099-05-01 16:00' },
    ]);
  });

  it('a release lease takes its host for good: nothing can be booked on it after, and it needs a host free from then on', async () => {
    const release = await on('release-host', 'release', '2099-06-01 10:00', '2099-06-01 11:00', { on_end: 'release' });
    expect(release.status).toBe(201);
    expect(release.body.lease.reservations[0]).toMatchObject({ hosts: ['release-host'], on_end: 'release' });
    const later = await on('release-host', 'later', '2099-07-01 10:00', '2099-07-01 11:00');
    expect(later.status).toBe(409);
    expect(later.body.earliest_start).toBeNull();
    // Before it (with room for the release lease's lead time) is still fine.
    expect((await on('release-host', 'earlier', '2099-05-20 10:00', '2099-05-20 11:00')).status).toBe(201);
    // A second release lease earlier than a booking cannot have the host for good.
    const another = await on('release-host', 'release-too', '2099-05-10 10:00', '2099-05-10 11:00', { on_end: 'release' });
    expect(another.status).toBe(409);
    // Deleting the release lease frees the host's future.
    expect((await api('DELETE', `/v1/leases/${release.body.lease.id}`)).status).toBe(204);
    await expectEventually(async () => (await on('release-host', 'later-again', '2099-07-01 10:00', '2099-07-01 11:00')).status === 201);
  });

  it('checks the end options at the edge, with Blazar error bodies', async () => {
    const grace = await on('lead-host', 'grace', '2099-08-01 10:00', '2099-08-01 11:00', { on_end: 'delete', recycle_grace_seconds: 60 });
    expect(grace.status).toBe(400);
    expect(grace.body.error_message).toMatch(/recycle_grace_seconds applies only to on_end "recycle"/);
    const policy = await on('lead-host', 'policy', '2099-08-01 10:00', '2099-08-01 11:00', { on_end: 'shred' });
    expect(policy.status).toBe(400);
    expect(policy.body.error_message).toMatch(/on_end: expected "default", "delete", "recycle" or "release"/);
    const notify = await on('lead-host', 'notify', '2099-08-01 10:00', '2099-08-01 11:00', { before_end: 'notify' });
    expect(notify.status).toBe(400);
    expect(notify.body.error_message).toMatch(/notify needs a notification endpoint/);
    const recycle = await on('lead-host', 'recycle', '2099-08-01 10:00', '2099-08-01 11:00', { on_end: 'recycle', recycle_grace_seconds: '120' });
    expect(recycle.status).toBe(201);
    expect(recycle.body.lease.reservations[0]).toMatchObject({ on_end: 'recycle', recycle_grace_seconds: 120 });
  });
});

async function expectEventually(check: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`not true within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

describe('before_end: notify', () => {
  let receiver: WebhookReceiver;
  beforeAll(async () => {
    receiver = await startWebhookReceiver({ failFirst: 1 }); // the first delivery gets a 503: the activity must retry it
  });
  const stack = useTestStack(() => ({
    env: { LK_NOTIFY_URL: receiver.url },
    withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only', noticesConfigured: true })],
  }));
  beforeAll(async () => {
    await insertHost(stack().db.pool, { name: 'notify-host', vcpus: 4 });
  });
  afterAll(() => receiver.close());

  it('posts a Blazar-style notice before the end, retried until delivered, once', async () => {
    const api = apiClient(stack().url);
    const created = await api('POST', '/v1/leases', {
      name: 'notify-me',
      start_date: 'now',
      before_end_date: inSeconds(2),
      end_date: inSeconds(3600),
      reservations: [blazarHostReservation({ before_end: 'notify' })],
    });
    expect(created.status).toBe(201);
    const lease = created.body.lease;
    // The reservation's own notice (the lease announces its events too: create, start, its warnings…).
    const key = `${lease.id}:${lease.reservations[0].id}:lease.event.before_end_lease`;
    const ofReservation = () => receiver.received.filter((n) => n.headers['idempotency-key'] === key);
    await eventually(() => Promise.resolve(ofReservation().length > 0 ? true : undefined), 30_000);
    expect(ofReservation()[0].body).toMatchObject({
      event_type: 'lease.event.before_end_lease',
      payload: { lease_id: lease.id, name: 'notify-me', project_id: 'admin', reservation_id: lease.reservations[0].id, resource_type: 'physical:host', hosts: ['notify-host'] },
    });
    await eventually(async () => {
      const events = (await api('GET', `/v1/leases/${lease.id}`)).body.lease.events as Array<{ event_type: string; status: string }>;
      return events.find((e) => e.event_type === 'before_end_lease')?.status === 'DONE' ? true : undefined;
    }, 10_000);
    // The first delivery got a 503 and was retried: every notice arrived, each once.
    await eventually(() => Promise.resolve(receiver.received.some((n) => n.body.event_type === 'lease.create') ? true : undefined), 30_000);
    expect(receiver.refused()).toBe(1);
    const keys = receiver.received.map((n) => n.headers['idempotency-key']);
    expect(new Set(keys).size).toBe(keys.length);
    expect(ofReservation()).toHaveLength(1);
    await api('DELETE', `/v1/leases/${lease.id}`);
  }, 60_000);
});
