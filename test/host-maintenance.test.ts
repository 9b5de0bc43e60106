/**
 * Maintenance windows (`/v1/os-hosts/{id}/maintenance`, `/v1/maintenance`), calendar side: a
 * window is blocked time for admission; pending leases it overlaps move to other hosts or are
 * flagged (and their owners told where the lease would fit); a lease that has begun is never cut
 * short unless forced; withdrawing a window clears the flags. The compute-service side is in
 * test/openstack/host-maintenance.test.ts.
 */
import { physicalHostPlugin } from '../src/resources/physical-host';
import { physicalHostWatch } from '../src/resources/physical-host/health';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';
import { startWebhookReceiver, type WebhookReceiver } from './support/notice-receiver';
import { apiClient, eventually, inSeconds, useTestStack } from '../dev-stack/stack';

/** A lease date ("2026-11-21T09:15:00.000000", UTC) as epoch ms. */
const leaseMs = (date: string) => Date.parse(`${date.slice(0, 23)}Z`);
const GPU = JSON.stringify(['==', '$gpu', 'a100']);
const CPU = JSON.stringify(['==', '$kind', 'cpu']);

describe('maintenance windows', () => {
  let receiver: WebhookReceiver | undefined;
  beforeAll(async () => {
    receiver = await startWebhookReceiver();
  });
  // The deployment's webhook is the receiver (started before the stack, which reads its address).
  const stack = useTestStack(() => ({
    env: { LK_NOTIFY_URL: receiver!.url },
    withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only', noticesConfigured: true })],
    hostWatch: (pool) => physicalHostWatch({ pool, source: { calendarOnly: () => undefined }, freepool: 'unused', failed: { name: 'unused', closedProjectId: 'nobody' } }),
  }));
  const api = apiClient(() => stack().url);
  const ids = new Map<string, string>();
  const leaseJson = async (id: string) => (await api('GET', `/v1/leases/${id}`)).body.lease;
  const book = (hostId: string, body: Record<string, unknown>) => api('POST', `/v1/os-hosts/${hostId}/maintenance`, { reason: 'firmware', ...body });

  beforeAll(async () => {
    for (const name of ['gpu-1', 'gpu-2']) ids.set(name, await insertHost(stack().db.pool, { name, capabilities: { gpu: 'a100' } }));
    ids.set('cpu-1', await insertHost(stack().db.pool, { name: 'cpu-1', capabilities: { kind: 'cpu' } }));
  });
  afterAll(() => receiver?.close());

  it('refuses bad windows with a clear 4xx', async () => {
    const host = ids.get('cpu-1')!;
    const cases: Array<[Record<string, unknown>, number, RegExp]> = [
      [{ start_date: inSeconds(3600), end_date: inSeconds(1800) }, 400, /end_date: must be after start_date/],
      [{ start_date: inSeconds(-7200), end_date: inSeconds(3600) }, 400, /start_date: .* is in the past/],
      [{ start_date: 'tomorrow', end_date: inSeconds(3600) }, 400, /start_date/],
      [{ start_date: inSeconds(60), end_date: inSeconds(3600), reason: '' }, 400, /reason: must not be empty/],
      [{ start_date: inSeconds(60), end_date: inSeconds(3600), reason: 'x'.repeat(256) }, 400, /reason: must be at most 255/],
      [{ start_date: inSeconds(60), end_date: inSeconds(3600), disable_compute: 'yes' }, 400, /disable_compute: expected true or false/],
      [{ start_date: inSeconds(60), end_date: inSeconds(3600), surprise: 1 }, 400, /surprise/],
      [{ start_date: inSeconds(60), end_date: '2999-01-01 00:00' }, 400, /end_date: at most ten years ahead/],
    ];
    for (const [body, status, message] of cases) {
      const answer = await book(host, body);
      expect({ body, status: answer.status }).toEqual({ body, status });
      expect(answer.body.error_message).toMatch(message);
    }
    expect((await book('999999', { start_date: inSeconds(60), end_date: inSeconds(3600) })).status).toBe(404);
    expect((await api('GET', '/v1/maintenance/00000000-0000-4000-8000-000000000000')).status).toBe(404);
    expect((await api('GET', '/v1/maintenance?limit=0')).status).toBe(400);
    expect((await api('DELETE', '/v1/maintenance/not-a-window')).status).toBe(404);
  });

  it('moves a pending lease off the host, flags and notifies one that cannot move, and clears the flag when withdrawn', async () => {
    const created = await api('POST', '/v1/leases', { name: 'gpu-lease', start_date: inSeconds(7200), end_date: inSeconds(10_800), reservations: [hostReservation({ resource_properties: GPU })] });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    const first = created.body.lease.reservations[0].host_ids[0] as string;
    const other = first === ids.get('gpu-1') ? ids.get('gpu-2')! : ids.get('gpu-1')!;

    const window = await book(first, { start_date: inSeconds(3600), end_date: inSeconds(9000) });
    expect(window.status).toBe(201);
    expect(window.body.maintenance).toMatchObject({ host_id: first, reason: 'firmware', disable_compute: false, compute_disabled: false, status: 'scheduled', leases_told: [id], leases_ended: [] });
    const moved = await eventually(async () => {
      const lease = await leaseJson(id);
      return lease.reservations[0].host_ids[0] === other ? lease : undefined;
    });
    expect(moved.reservations[0]).toMatchObject({ resources_changed: true, missing_resources: false });
    // Its owner hears where it went, once for this set of hosts.
    const healed = await eventually(() => Promise.resolve(receiver!.received.find((n) => n.body.event_type === 'lease.healed' && n.body.payload.lease_id === id)));
    expect(healed.body.payload).toMatchObject({ hosts: [moved.reservations[0].hosts[0]], hosts_removed: [created.body.lease.reservations[0].hosts[0]], hosts_added: [moved.reservations[0].hosts[0]], status: 'PENDING' });
    expect(healed.headers['idempotency-key']).toBe(`${id}:${moved.reservations[0].id}:lease.healed:${other}`);

    // Admission avoids the window: the only other GPU host is taken, this one is in maintenance.
    const refused = await api('POST', '/v1/leases', { name: 'no-room', start_date: inSeconds(7200), end_date: inSeconds(8000), reservations: [hostReservation({ resource_properties: GPU })] });
    expect(refused.status).toBe(409);
    // After the window it fits on the first host again.
    expect((await api('POST', '/v1/leases', { name: 'after-window', start_date: inSeconds(9000), end_date: inSeconds(9600), reservations: [hostReservation({ resource_properties: GPU })] })).status).toBe(201);

    // A second window over the other host: nowhere to go, so the lease keeps it, flagged, and its owner is told.
    const second = await book(other, { start_date: inSeconds(6000), end_date: inSeconds(8000), reason: 'rack move' });
    expect(second.status).toBe(201);
    const flagged = await eventually(async () => {
      const lease = await leaseJson(id);
      return lease.reservations[0].missing_resources ? lease : undefined;
    });
    expect(flagged.degraded).toBe(true);
    expect(flagged.reservations[0].host_ids).toEqual([other]);
    const notice = await eventually(() => Promise.resolve(receiver!.received.find((n) => n.body.event_type === 'lease.degraded' && n.body.payload.lease_id === id)));
    expect(notice.body.payload).toMatchObject({ hosts: ['gpu-' + (other === ids.get('gpu-1') ? '1' : '2')], maintenance: [expect.objectContaining({ id: second.body.maintenance.id, reason: 'rack move' })] });
    expect((notice.body.payload.alternative as Record<string, unknown>).earliest_start).toEqual(expect.any(String));
    expect(notice.headers['idempotency-key']).toBe(`${id}:${flagged.reservations[0].id}:lease.degraded:${other}`);

    // Listed, per host and across hosts.
    const listed = await api('GET', '/v1/maintenance');
    expect(listed.body.maintenance.map((w: { id: string }) => w.id)).toEqual([window.body.maintenance.id, second.body.maintenance.id]);
    expect((await api('GET', `/v1/os-hosts/${other}/maintenance`)).body.maintenance.map((w: { id: string }) => w.id)).toEqual([second.body.maintenance.id]);
    const paged = await api('GET', `/v1/maintenance?limit=1&marker=${window.body.maintenance.id}`);
    expect(paged.body.maintenance.map((w: { id: string }) => w.id)).toEqual([second.body.maintenance.id]);
    // Windows of one host never overlap.
    const overlapping = await book(other, { start_date: inSeconds(7000), end_date: inSeconds(9000) });
    expect(overlapping.status).toBe(409);
    expect(overlapping.body.error_message).toContain(second.body.maintenance.id);

    // Withdrawn before it starts: deleted, and the lease's flag clears.
    expect((await api('DELETE', `/v1/os-hosts/${other}/maintenance/${second.body.maintenance.id}`)).status).toBe(204);
    const cleared = await eventually(async () => {
      const lease = await leaseJson(id);
      return lease.reservations[0].missing_resources ? undefined : lease;
    });
    expect(cleared.reservations[0]).toMatchObject({ host_ids: [other], resources_changed: true });
    expect((await api('GET', `/v1/maintenance/${second.body.maintenance.id}`)).status).toBe(404);
    expect(await doubleBookings(stack().db.pool)).toEqual([]);
  });

  it('never cuts short a lease that has begun, unless forced: then it ends at the window start', async () => {
    const created = await api('POST', '/v1/leases', { name: 'cpu-active', start_date: 'now', end_date: inSeconds(7200), reservations: [hostReservation({ resource_properties: CPU })] });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    await eventually(async () => ((await leaseJson(id)).status === 'ACTIVE' ? true : undefined));
    const host = ids.get('cpu-1')!;
    const windowStart = inSeconds(3600);

    const refused = await book(host, { start_date: windowStart, end_date: inSeconds(5400) });
    expect(refused.status).toBe(409);
    expect(refused.body.error_message).toContain(`cpu-active (${id}, ACTIVE`);
    expect(refused.body.error_message).toContain('"force": true');
    expect((await api('GET', `/v1/os-hosts/${host}/maintenance`)).body.maintenance).toEqual([]);

    const forced = await book(host, { start_date: windowStart, end_date: inSeconds(5400), force: true });
    expect(forced.status).toBe(201);
    expect(forced.body.maintenance).toMatchObject({ leases_ended: [id], leases_not_ended: [] });
    const lease = await leaseJson(id);
    expect(leaseMs(lease.end_date)).toBe(Date.parse(`${windowStart.replace(' ', 'T')}Z`));
    expect(lease.status).toBe('ACTIVE');
  });

  it('runs a window in force: shown as such, withdrawn early it ends now and stays on record', async () => {
    const host = ids.get('gpu-1')!;
    const window = await book(host, { start_date: 'now', end_date: inSeconds(1200), reason: 'reboot' });
    expect(window.status).toBe(201);
    const windowId = window.body.maintenance.id;
    expect(window.body.maintenance.status).toBe('in_force');
    // The window's workflow began it: its history shows the start's activity.
    const handle = stack().temporal.client.workflow.getHandle(`maintenance-${windowId}`);
    await eventually(async () => ((await handle.fetchHistory()).events?.some((e) => e.activityTaskCompletedEventAttributes) ? true : undefined));

    expect((await api('DELETE', `/v1/maintenance/${windowId}`)).status).toBe(204);
    await handle.result();
    const ended = (await api('GET', `/v1/maintenance/${windowId}`)).body.maintenance;
    expect(ended.status).toBe('over');
    expect(leaseMs(ended.end_date)).toBeLessThanOrEqual(Date.now());
    expect((await api('GET', '/v1/maintenance')).body.maintenance.map((w: { id: string }) => w.id)).not.toContain(windowId);
    expect((await api('GET', '/v1/maintenance?all=true')).body.maintenance.map((w: { id: string }) => w.id)).toContain(windowId);
    expect((await api('DELETE', `/v1/maintenance/${windowId}`)).status).toBe(409);
  });
});
