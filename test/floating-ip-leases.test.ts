/**
 * Floating IP leases and Blazar's floatingips API through the API and the real worker, booked in
 * the PostgreSQL calendar (addresses put in the inventory directly; enrolment through Neutron and
 * the addresses' life in Neutron have their rig test, test/openstack/floating-ip-leases.test.ts).
 */
import { randomUUID } from 'node:crypto';
import { floatingIpBookings, insertFloatingIp } from '../src/db/floating-ips';
import { floatingIpPlugin } from '../src/resources/floating-ip';
import { apiClient, deleteAllLeases, useTestStack } from '../dev-stack/stack';

const NETWORK = '11111111-1111-4111-8111-111111111111';
/** Days a month ahead (within the deployment's advance-booking limit), as Blazar writes dates. */
const dayAhead = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10);
const [D1, D2, D3] = [30, 31, 32].map(dayAhead);

describe('floating IP leases and the floatingips API', () => {
  const stack = useTestStack({ withPool: (pool) => [floatingIpPlugin({ pool, cloud: 'calendar-only' })] });
  const admin = apiClient(() => stack().url);
  const member = apiClient(() => stack().url, { 'x-project-id': 'project-a', 'x-roles': 'member' });
  const other = apiClient(() => stack().url, { 'x-project-id': 'project-b', 'x-roles': 'member' });
  const ids: Record<string, string> = {};

  beforeAll(async () => {
    for (const address of ['203.0.113.100', '203.0.113.101']) {
      ids[address] = randomUUID();
      await insertFloatingIp(stack().db.pool, { id: ids[address], networkId: NETWORK, subnetId: 'subnet-1', address });
    }
  });
  afterEach(() => deleteAllLeases(admin));

  const fipLease = (api: typeof admin, name: string, start: string, end: string, params: Record<string, unknown>) =>
    api('POST', '/v1/leases', { name, start_date: start, end_date: end, reservations: [{ resource_type: 'virtual:floatingip', network_id: NETWORK, ...params }] });

  it('lists and shows the addresses to anyone, and lets only admins enrol and remove them', async () => {
    const listed = await member('GET', '/v1/floatingips');
    expect(listed.status).toBe(200);
    expect(listed.body.floatingips.map((f: { floating_ip_address: string }) => f.floating_ip_address)).toEqual(['203.0.113.100', '203.0.113.101']);
    const shown = await member('GET', `/v1/floatingips/${ids['203.0.113.100']}`);
    expect(shown.body.floatingip).toEqual({
      id: ids['203.0.113.100'],
      floating_network_id: NETWORK,
      subnet_id: 'subnet-1',
      floating_ip_address: '203.0.113.100',
      reservable: true,
      created_at: expect.stringMatching(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/),
      updated_at: null,
    });
    expect((await member('GET', `/v1/floatingips/${randomUUID()}`)).status).toBe(404);
    expect((await member('GET', '/v1/floatingips/not-an-id')).body).toMatchObject({ error_code: 404, error_message: 'Floating IP not-an-id not found.' });
    const post = await member('POST', '/v1/floatingips', { floating_network_id: NETWORK, floating_ip_address: '203.0.113.102' });
    expect(post.body).toEqual({ error_code: 403, error_message: "Policy doesn't allow blazar:floatingips:post to be performed.", error_name: 403 });
    expect((await member('DELETE', `/v1/floatingips/${ids['203.0.113.100']}`)).status).toBe(403);
    const missing = await admin('POST', '/v1/floatingips', { floating_ip_address: '203.0.113.102' });
    expect(missing).toMatchObject({ status: 400, body: { error_message: expect.stringMatching(/floating_network_id/) } });
    // This stack has no cloud: enrolment, which asks Neutron, says so.
    const noCloud = await admin('POST', '/v1/floatingips', { floating_network_id: NETWORK, floating_ip_address: '203.0.113.102' });
    expect(noCloud.status).toBe(503);
  });

  it('books addresses, shows them in the lease, refuses a third with the earliest start, and updates a pending lease', async () => {
    const first = await fipLease(member, 'fip-1', `${D1} 10:00`, `${D1} 12:00`, { amount: 1, required_floatingips: ['203.0.113.101'] });
    expect(first.status).toBe(201);
    expect(first.body.lease.reservations[0]).toMatchObject({
      resource_type: 'virtual:floatingip',
      network_id: NETWORK,
      amount: 1,
      required_floatingips: ['203.0.113.101'],
      floating_ip_addresses: ['203.0.113.101'],
      floatingip_ids: [ids['203.0.113.101']],
    });
    const second = await fipLease(other, 'fip-2', `${D1} 11:00`, `${D1} 13:00`, { amount: 1 });
    expect(second.body.lease.reservations[0].floating_ip_addresses).toEqual(['203.0.113.100']);
    const third = await fipLease(other, 'fip-3', `${D1} 11:30`, `${D1} 12:30`, { amount: 1 });
    expect(third.status).toBe(409);
    expect(third.body).toMatchObject({ error_code: 409, earliest_start: `${D1} 12:00`, earliest_end: `${D1} 13:00` });

    // A pending lease grows: its second address is free only once fip-2 ends, so move it after.
    const reservationId = first.body.lease.reservations[0].id;
    const blocked = await member('PUT', `/v1/leases/${first.body.lease.id}`, { reservations: [{ id: reservationId, amount: 2 }] });
    expect(blocked.status).toBe(409);
    expect((await member('GET', `/v1/leases/${first.body.lease.id}`)).body.lease.reservations[0].floating_ip_addresses).toEqual(['203.0.113.101']); // the old booking stays
    const moved = await member('PUT', `/v1/leases/${first.body.lease.id}`, { start_date: `${D1} 13:00`, end_date: `${D1} 14:00`, reservations: [{ id: reservationId, amount: 2 }] });
    expect(moved.status).toBe(200);
    expect([...moved.body.lease.reservations[0].floating_ip_addresses].sort()).toEqual(['203.0.113.100', '203.0.113.101']);

    // Allocations: an admin sees every address; a member only the bookings of their project.
    const all = await admin('GET', '/v1/floatingips/allocations');
    expect(all.body.allocations).toHaveLength(2);
    expect(all.body.allocations.find((a: { floating_ip_address: string }) => a.floating_ip_address === '203.0.113.100').reservations).toHaveLength(2);
    const mine = await other('GET', '/v1/floatingips/allocations');
    expect(mine.body.allocations).toEqual([
      { resource_id: ids['203.0.113.100'], floating_ip_address: '203.0.113.100', reservations: [expect.objectContaining({ lease_id: second.body.lease.id, project_id: 'project-b' })] },
    ]);
    const one = await admin('GET', `/v1/floatingips/${ids['203.0.113.101']}/allocation?lease_id=${first.body.lease.id}`);
    expect(one.body.allocation.reservations).toEqual([expect.objectContaining({ id: reservationId, start_date: `${D1}T13:00:00.000000`, end_date: `${D1}T14:00:00.000000` })]);
  });

  it('refuses to remove an address while a lease holds it, and removes it once the lease is gone', async () => {
    const lease = await fipLease(admin, 'holds', `${D2} 10:00`, `${D2} 12:00`, { amount: 1, required_floatingips: ['203.0.113.100'] });
    expect(lease.status).toBe(201);
    const refused = await admin('DELETE', `/v1/floatingips/${ids['203.0.113.100']}`);
    expect(refused.status).toBe(409);
    expect(refused.body.error_message).toBe(`Can't delete floating IP ${ids['203.0.113.100']}. Floating IP id ${ids['203.0.113.100']} is allocated by reservations of lease(s) holds (${lease.body.lease.id}).`);
    expect((await admin('DELETE', `/v1/leases/${lease.body.lease.id}`)).status).toBe(204);
    // The lease's 204 comes once its bookings are freed: the address can go at once.
    expect((await admin('DELETE', `/v1/floatingips/${ids['203.0.113.100']}`)).status).toBe(204);
    expect((await admin('GET', `/v1/floatingips/${ids['203.0.113.100']}`)).status).toBe(404);
    const bad = await fipLease(admin, 'bad', `${D3} 10:00`, `${D3} 12:00`, { amount: 1, required_floatingips: ['999.1.1.1'] });
    expect(bad).toMatchObject({ status: 400, body: { error_message: expect.stringContaining('IP address 999.1.1.1 is invalid form.') } });
  });

  it('refuses to remove an address booked by a reservation whose lease is not recorded yet (LK_ADMISSION=workflow, the external filter)', async () => {
    const id = randomUUID();
    await insertFloatingIp(stack().db.pool, { id, networkId: NETWORK, subnetId: 'subnet-1', address: '203.0.113.109' });
    const leaseId = randomUUID();
    const client = await stack().db.pool.connect();
    try {
      // What `reserve` commits before the workflow records the lease's row.
      const fromMs = Date.now() + 86_400_000;
      await floatingIpBookings.insert(client, { resourceId: id, reservationId: randomUUID(), leaseId, projectId: 'project-a', fromMs, endMs: fromMs + 3_600_000, leadMs: 0, bookingKey: 'k' });
      const refused = await admin('DELETE', `/v1/floatingips/${id}`);
      expect(refused).toMatchObject({ status: 409, body: { error_message: expect.stringContaining(`booking of ${leaseId} (no live lease)`) } });
      await floatingIpBookings.deleteLease(client, leaseId);
    } finally {
      client.release();
    }
    expect((await admin('DELETE', `/v1/floatingips/${id}`)).status).toBe(204);
  });
});
