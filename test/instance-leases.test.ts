/**
 * Instance leases through the API and the real worker, booked in the PostgreSQL slot calendar
 * (hosts and their Placement capacities put in directly; Nova and Placement have their rig test,
 * test/openstack/instance-leases.test.ts): blazarclient's string parameters, the lease JSON, the 409
 * with the earliest start, and the free slots and free addresses GET /v1/availability reports.
 */
import { randomUUID } from 'node:crypto';
import { insertFloatingIp } from '../src/db/floating-ips';
import { syncCapacityProviders } from '../src/db/quantity-allocations';
import { floatingIpPlugin } from '../src/resources/floating-ip';
import { COMPUTE_KIND } from '../src/resources/shared/compute-providers';
import { virtualInstancePlugin } from '../src/resources/virtual-instance';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { startWebhookReceiver, type WebhookReceiver } from './support/notice-receiver';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../dev-stack/stack';

const NETWORK = '33333333-3333-4333-8333-333333333333';
const dayAhead = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10);
const D = dayAhead(40);
const inDays = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 16).replace('T', ' ');

describe('instance leases and availability through the API', () => {
  const stack = useTestStack({
    withPool: (pool) => [virtualInstancePlugin({ pool, settings: { cleaningMs: 0 }, cloud: 'calendar-only' }), floatingIpPlugin({ pool, cloud: 'calendar-only' })],
  });
  const admin = apiClient(() => stack().url);
  const member = apiClient(() => stack().url, { 'x-project-id': 'project-a', 'x-roles': 'member' });
  const hostIds: string[] = [];

  beforeAll(async () => {
    const { pool } = stack().db;
    for (const name of ['slot-host-1', 'slot-host-2']) hostIds.push(await insertHost(pool, { name }));
    // 8 vCPUs at a ratio of 2: 16 usable (the copy of Placement's capacities the server type keeps).
    await syncCapacityProviders(pool, COMPUTE_KIND, ['slot-host-1', 'slot-host-2'].map((name) => ({ uuid: randomUUID(), name, host: name, capacity: { VCPU: 16, MEMORY_MB: 32_768, DISK_GB: 200 }, traits: [] })));
    for (const address of ['203.0.113.150', '203.0.113.151']) await insertFloatingIp(pool, { id: randomUUID(), networkId: NETWORK, subnetId: 'subnet-1', address });
  });
  afterEach(() => deleteAllLeases(admin));

  const instanceLease = (name: string, start: string, end: string, params: Record<string, unknown>) =>
    member('POST', '/v1/leases', { name, start_date: start, end_date: end, reservations: [{ resource_type: 'virtual:instance', resource_properties: '', ...params }] });

  it('books slots from blazarclient\'s strings, shows where, and refuses more with the earliest start', async () => {
    const first = await instanceLease('slots-1', `${D} 10:00`, `${D} 12:00`, { vcpus: 4, memory_mb: '1024', disk_gb: '10', amount: 5, affinity: 'None' });
    expect(first.status).toBe(201);
    expect(first.body.lease.reservations[0]).toMatchObject({ resource_type: 'virtual:instance', vcpus: 4, memory_mb: 1024, disk_gb: 10, amount: 5, affinity: null, hosts: ['slot-host-1', 'slot-host-2'], slots_per_host: { 'slot-host-1': 4, 'slot-host-2': 1 } });
    const more = await instanceLease('slots-2', `${D} 11:00`, `${D} 13:00`, { vcpus: 4, memory_mb: 1024, disk_gb: 10, amount: 2, affinity: 'False' }); // two hosts, one full
    expect(more.status).toBe(409);
    expect(more.body).toMatchObject({ error_code: 409, earliest_start: `${D} 12:00` });
    const bad = await instanceLease('slots-bad', `${D} 11:00`, `${D} 13:00`, { vcpus: '', memory_mb: 1024, disk_gb: 10, amount: 1, affinity: 'maybe' });
    expect(bad.status).toBe(400);
    expect(bad.body.error_message).toMatch(/vcpus|affinity/);

    // Availability: free slots of a size per host over the window, free addresses of a network.
    const query = (from: string, to: string, extra: string) => admin('GET', `/v1/availability?start=${encodeURIComponent(from)}&end=${encodeURIComponent(to)}${extra}`);
    const during = await query(`${D} 10:30`, `${D} 11:30`, '&vcpus=4&memory_mb=1024&disk_gb=10');
    expect(during.status).toBe(200);
    const freeOf = (body: { availability: Array<{ hypervisor_hostname: string; free_slots: number }> }) => Object.fromEntries(body.availability.map((h) => [h.hypervisor_hostname, h.free_slots]));
    expect(freeOf(during.body)).toEqual({ 'slot-host-1': 0, 'slot-host-2': 3 });
    const after = await query(`${D} 12:00`, `${D} 13:00`, '&vcpus=4&memory_mb=1024&disk_gb=10');
    expect(freeOf(after.body)).toEqual({ 'slot-host-1': 4, 'slot-host-2': 4 });
    expect((await query(`${D} 12:00`, `${D} 13:00`, '&vcpus=4')).status).toBe(400);

    const fip = await member('POST', '/v1/leases', { name: 'fip', start_date: `${D} 10:00`, end_date: `${D} 12:00`, reservations: [{ resource_type: 'virtual:floatingip', network_id: NETWORK, amount: 1, required_floatingips: ['203.0.113.151'] }] });
    expect(fip.status).toBe(201);
    const addresses = await query(`${D} 11:00`, `${D} 11:30`, `&network_id=${NETWORK}`);
    expect(addresses.body.floatingips).toEqual({ network_id: NETWORK, free: [expect.objectContaining({ floating_ip_address: '203.0.113.150' })] });
    const later = await query(`${D} 12:00`, `${D} 12:30`, `&network_id=${NETWORK}`);
    expect(later.body.floatingips.free.map((f: { floating_ip_address: string }) => f.floating_ip_address).sort()).toEqual(['203.0.113.150', '203.0.113.151']);
  });

  it('ends active instance and floating IP leases now, freeing their slots and addresses from then', async () => {
    const slots = await instanceLease('end-now-slots', 'now', inDays(1), { vcpus: 8, memory_mb: 1024, disk_gb: 10, amount: 4 });
    const addresses = await member('POST', '/v1/leases', { name: 'end-now-fip', start_date: 'now', end_date: inDays(1), reservations: [{ resource_type: 'virtual:floatingip', network_id: NETWORK, amount: 2 }] });
    expect([slots.status, addresses.status]).toEqual([201, 201]);
    for (const lease of [slots.body.lease, addresses.body.lease]) {
      await eventually(async () => ((await member('GET', `/v1/leases/${lease.id}`)).body.lease.status === 'ACTIVE' ? true : undefined), 30_000);
      const ended = await member('PUT', `/v1/leases/${lease.id}`, { end_date: 'now' });
      expect([ended.status, ended.body.error_message]).toEqual([200, undefined]);
      await eventually(async () => ((await member('GET', `/v1/leases/${lease.id}`)).body.lease.status === 'TERMINATED' ? true : undefined), 30_000);
    }
    // Everything they held is free again: the same requests fit at once.
    expect((await instanceLease('after-slots', 'now', inDays(1), { vcpus: 8, memory_mb: 1024, disk_gb: 10, amount: 4 })).status).toBe(201);
    expect((await member('POST', '/v1/leases', { name: 'after-fip', start_date: 'now', end_date: inDays(1), reservations: [{ resource_type: 'virtual:floatingip', network_id: NETWORK, amount: 2 }] })).status).toBe(201);
  }, 90_000);

  it('refuses before_end notify where the deployment has no notice endpoint', async () => {
    const refused = await instanceLease('notify-nowhere', `${D} 10:00`, `${D} 12:00`, { vcpus: 1, memory_mb: 512, disk_gb: 1, amount: 1, before_end: 'notify' });
    expect(refused.status).toBe(400);
    expect(refused.body.error_message).toContain('LK_NOTIFY_URL');
    const unknown = await instanceLease('notify-what', `${D} 10:00`, `${D} 12:00`, { vcpus: 1, memory_mb: 512, disk_gb: 1, amount: 1, before_end: 'email' });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error_message).toMatch(/before_end/);
  });
});

describe('instance leases: before_end notify', () => {
  let receiver: WebhookReceiver;
  beforeAll(async () => {
    receiver = await startWebhookReceiver();
  });
  const stack = useTestStack(() => ({
    env: { LK_NOTIFY_URL: receiver.url },
    withPool: (pool) => [virtualInstancePlugin({ pool, settings: { cleaningMs: 0 }, cloud: 'calendar-only', noticesConfigured: true })],
  }));
  beforeAll(async () => {
    const { pool } = stack().db;
    await insertHost(pool, { name: 'notify-slot-host' });
    await syncCapacityProviders(pool, COMPUTE_KIND, [{ uuid: randomUUID(), name: 'notify-slot-host', host: 'notify-slot-host', capacity: { VCPU: 8, MEMORY_MB: 8_192, DISK_GB: 100 }, traits: [] }]);
  });
  afterAll(() => receiver.close());

  it('posts the notice with the reservation flavor and the hosts of its slots', async () => {
    const api = apiClient(stack().url, { 'x-project-id': 'project-a', 'x-user-id': 'user-a' });
    const created = await api('POST', '/v1/leases', {
      name: 'notify-slots',
      start_date: 'now',
      before_end_date: inSeconds(2),
      end_date: inSeconds(3600),
      reservations: [{ resource_type: 'virtual:instance', vcpus: 2, memory_mb: 1024, disk_gb: 10, amount: 2, before_end: 'notify' }],
    });
    expect(created.status).toBe(201);
    const { id, reservations } = created.body.lease;
    expect(reservations[0].before_end).toBe('notify');
    const ofReservation = () => receiver.received.filter((n) => n.body.event_type === 'lease.event.before_end_lease' && n.body.payload.reservation_id === reservations[0].id);
    await eventually(() => Promise.resolve(ofReservation().length > 0 ? true : undefined), 30_000);
    expect(ofReservation()).toHaveLength(1);
    expect(ofReservation()[0].body).toMatchObject({
      event_type: 'lease.event.before_end_lease',
      payload: { lease_id: id, project_id: 'project-a', reservation_id: reservations[0].id, resource_type: 'virtual:instance', flavor_id: reservations[0].id, hosts: ['notify-slot-host'] },
    });
    expect((await api('DELETE', `/v1/leases/${id}`)).status).toBe(204);
  }, 60_000);
});
