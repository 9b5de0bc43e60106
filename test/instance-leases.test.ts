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
import { insertHost } from './support/hosts';
import { apiClient, deleteAllLeases, useTestStack } from './support/stack';

const NETWORK = '33333333-3333-4333-8333-333333333333';
const dayAhead = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10);
const D = dayAhead(40);

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
});
