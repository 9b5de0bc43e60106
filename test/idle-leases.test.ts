/**
 * Idle-lease reaping (LK_IDLE_LEASE_WARN_HOURS / LK_IDLE_LEASE_END_HOURS, here seconds long): an
 * active lease nobody uses hears `lease.idle`, then ends early saying why; a lease in use is left
 * alone, and is reaped in its turn once nobody uses it any more.
 */
import { RecordingPlugin } from './support/recording-plugin';
import { startWebhookReceiver, type WebhookReceiver } from './support/notice-receiver';
import { apiClient, eventually, inSeconds, useTestStack } from '../dev-stack/stack';

describe('idle leases', () => {
  const plugin = new RecordingPlugin();
  let receiver: WebhookReceiver;
  beforeAll(async () => {
    receiver = await startWebhookReceiver();
  });
  const stack = useTestStack(() => ({
    // Warned after 3.6 s of nobody using it, ended after 7.2 s.
    env: { LK_IDLE_LEASE_WARN_HOURS: '0.001', LK_IDLE_LEASE_END_HOURS: '0.002', LK_NOTIFY_URL: receiver.url, LK_NOTIFY_BEFORE_END: 'none' },
    plugins: [plugin],
  }));
  afterAll(() => receiver.close());
  const api = apiClient(() => stack().url, { 'x-project-id': 'project-idle', 'x-user-id': 'ida', 'x-roles': 'member' });
  const lease = async (id: string) => (await api('GET', `/v1/leases/${id}`)).body.lease;

  it('warns, then ends a lease nobody uses; leaves one in use alone until it is idle too', async () => {
    const create = (name: string) => api('POST', '/v1/leases', { name, start_date: 'now', end_date: inSeconds(3600), reservations: [{ resource_type: 'test:recording', idle_check: true }] });
    const [idle, used] = [(await create('nobody-uses-it')).body.lease, (await create('in-use')).body.lease];
    plugin.inUseReservations.add(used.reservations[0].id);

    const warned = await eventually(() => Promise.resolve(receiver.received.find((n) => n.body.event_type === 'lease.idle' && n.body.payload.lease_id === idle.id)), 30_000);
    expect(warned.body.payload).toMatchObject({ status: 'ACTIVE', idle_since: expect.any(String), ends_at: expect.any(String) });
    const ended = await eventually(async () => {
      const now = await lease(idle.id);
      return now.status === 'TERMINATED' ? now : undefined;
    }, 30_000);
    expect(ended.status_reason).toMatch(/^ended early: nothing of project project-idle has used the lease since .* \(idle for \d+s; the deployment ends idle leases after 7s\)$/);
    expect(Date.parse(`${ended.end_date}Z`)).toBeLessThan(Date.parse(`${idle.end_date}Z`));
    expect(plugin.callsFor(idle.id, 'end')).toHaveLength(1);

    // The lease in use was looked at all along and stays; once nobody uses it, it goes the same way.
    expect((await lease(used.id)).status).toBe('ACTIVE');
    expect(receiver.received.some((n) => n.body.event_type === 'lease.idle' && n.body.payload.lease_id === used.id)).toBe(false);
    plugin.inUseReservations.delete(used.reservations[0].id);
    await eventually(async () => ((await lease(used.id)).status === 'TERMINATED' ? true : undefined), 30_000);
    for (const id of [idle.id, used.id]) expect((await api('DELETE', `/v1/leases/${id}`)).status).toBe(204);
  }, 90_000);
});
