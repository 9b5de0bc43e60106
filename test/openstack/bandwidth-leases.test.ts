/**
 * Bandwidth leases (`network:bandwidth`) against the rig's Neutron (ML2/OVS with the fake agents and
 * their bandwidth providers in Placement): ports made and bound, allocations written for the
 * reservation in one PUT, everything gone at the end; binding retried on the next candidate host;
 * a concurrent writer's generation bump retried; bandwidth booked as a quantity over time.
 * Placement calls from the activities go through a fault-injecting proxy.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseRequestDate, reuseStart } from '../../src/domain/dates';
import { KeystoneSession, openStackClients, type Network } from '../../src/openstack';
import { bandwidthPlugin } from '../../src/resources/bandwidth';
import { virtualServerPlugin } from '../../src/resources/virtual-server';
import { FaultProxy } from '../support/fault-proxy';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { bandwidthProviderName, bootServer, deleteServers, providerNamed, RIG_DIR, rigClients, rigCredentials, rigEnv, uniqueName } from './support';

const EGRESS = 'NET_BW_EGR_KILOBIT_PER_SEC';
/** Hosts listed here get no reports from the rig's fake Open vSwitch agent (scripts/openstack/fake_ovs_agent.py). */
const STOPPED_AGENTS = path.join(RIG_DIR, 'fake-agents-stopped');

describe('bandwidth leases in Neutron and Placement', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const servers: string[] = [];
  let proxy: FaultProxy;
  let asA: ReturnType<typeof apiClient>;
  let projectAId: string;
  let network: Network;

  const lease = async (id: string) => (await asA('GET', `/v1/leases/${id}`)).body.lease;
  const waitForStatus = (id: string, status: string, timeoutMs = 120_000) => eventually(async () => ((await lease(id))?.status === status ? true : undefined), timeoutMs);
  const onHost = (host: string) => ({ resource_properties: JSON.stringify(['=', '$host', host]) });
  const bandwidthLease = (start: string, end: string, params: Record<string, unknown>) =>
    asA('POST', '/v1/leases', { name: uniqueName('bw'), start_date: start, end_date: end, reservations: [{ resource_type: 'network:bandwidth', network_id: network.id, ...params }] });
  const agentOf = async (host: string) => (await admin.neutron.listAgents({ host, agent_type: 'Open vSwitch agent' }))[0];
  const portsNamed = async (reservationId: string) => (await admin.neutron.listPorts({ network_id: network.id })).filter((p) => p.name.startsWith(`lk-${reservationId}`));

  beforeAll(async () => {
    proxy = await FaultProxy.start(rigEnv().LK_PLACEMENT_URL);
  });
  const stack = useTestStack(
    () => {
      const throughProxy = openStackClients({ credentials: { ...rigCredentials('leasekeeper-admin'), endpointOverride: { placement: proxy.url } }, timeoutMs: 5_000 });
      return {
        withPool: (pool) => [
          bandwidthPlugin({ pool, cloud: () => throughProxy, settings: { capacityRefreshMs: 0 } }),
          virtualServerPlugin({ pool, cloud: () => admin, settings: { capacityRefreshMs: 0 } }),
        ],
      };
    },
    {
      beforeStop: async () => {
        await deleteServers(servers.map((id) => ({ clients: admin, id })));
        for (const port of network ? await admin.neutron.listPorts({ network_id: network.id }) : []) await admin.neutron.deletePort(port.id).catch(() => undefined);
        if (network) await admin.neutron.deleteNetwork(network.id).catch(() => undefined);
      },
    },
  );

  beforeAll(async () => {
    projectAId = (await new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-a') }).authenticate()).projectId;
    asA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a' });
    network = await admin.neutron.createNetwork({ name: uniqueName('bw-net'), project_id: projectAId });
    await admin.neutron.createSubnet({ network_id: network.id, cidr: '10.97.0.0/24', ip_version: 4, project_id: projectAId, enable_dhcp: false });
  });

  afterEach(async () => {
    proxy?.clear();
    if (fs.existsSync(STOPPED_AGENTS)) {
      fs.rmSync(STOPPED_AGENTS);
      await eventually(async () => ((await agentOf('fake-2'))?.alive ? true : undefined), 60_000); // reports again within its 10 s interval
    }
    await deleteAllLeases(asA);
  }, 180_000);

  afterAll(async () => {
    await proxy?.stop();
  });

  it('binds 2 ports × 1000 kbps on fake-2 for a server there, with the allocation in Placement and on the ports, and removes it all at the end', async () => {
    const server = await bootServer(projectA);
    servers.push(server.id);
    const created = await asA('POST', '/v1/leases', {
      name: uniqueName('bw-vm'),
      // Made for later, moved to start now once the server is shelved, and to end now once checked.
      start_date: inSeconds(3600),
      end_date: inSeconds(7200),
      reservations: [
        { resource_type: 'virtual:server', server_id: server.id, on_end: 'shelve', resource_properties: JSON.stringify(['=', '$hypervisor_hostname', 'fake-2']) },
        { resource_type: 'network:bandwidth', network_id: network.id, egress_kbps: 1000, amount: 2, on_host_of: 0 },
      ],
    });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    const reservation = created.body.lease.reservations[1];
    const bandwidthRp = await providerNamed(admin.placement, bandwidthProviderName('fake-2'));
    const computeRp = await providerNamed(admin.placement, 'fake-2');
    expect(reservation).toMatchObject({ host: 'fake-2', provider: bandwidthRp.uuid, bandwidth: { [EGRESS]: 2000 } });

    await eventually(async () => ((await admin.nova.getServer(server.id)).status === 'SHELVED_OFFLOADED' ? true : undefined), 60_000);
    expect((await asA('PUT', `/v1/leases/${id}`, { start_date: 'now' })).status).toBe(200);
    await waitForStatus(id, 'ACTIVE', 90_000);
    const active = (await lease(id)).reservations[1];
    expect(active).toMatchObject({ host: 'fake-2', consumer: server.id, allocation_writes: 1 });
    expect(active.ports).toHaveLength(2);
    for (const portId of active.ports as string[]) {
      const port = await admin.neutron.getPort(portId);
      expect(port).toMatchObject({ 'binding:host_id': 'fake-2', 'binding:vif_type': 'ovs', qos_policy_id: active.qos_policy_id });
      expect(Object.values(port['binding:profile']?.allocation as Record<string, string>)).toEqual([bandwidthRp.uuid]);
    }
    // The server's consumer: its VCPU, memory and disk on the compute provider, the ports' bandwidth on the bridge.
    const consumer = await admin.placement.getAllocations(server.id);
    expect(Object.keys(consumer.allocations).sort()).toEqual([bandwidthRp.uuid, computeRp.uuid].sort());
    expect(consumer.allocations[bandwidthRp.uuid].resources).toEqual({ [EGRESS]: 2000 });
    expect(consumer.allocations[computeRp.uuid].resources).toMatchObject({ VCPU: 1, MEMORY_MB: 512 });

    expect((await asA('PUT', `/v1/leases/${id}`, { end_date: 'now' })).status).toBe(200);
    await waitForStatus(id, 'TERMINATED', 90_000);
    expect((await admin.placement.getAllocations(server.id)).allocations).toEqual({}); // shelved: nothing held
    expect(await portsNamed(reservation.id)).toEqual([]);
    expect(await admin.neutron.listQosPolicies({ name: `lk-${reservation.id}` })).toEqual([]);
  }, 180_000);

  it('a bandwidth lease on its own is its own consumer in Placement', async () => {
    const created = await bandwidthLease('now', inSeconds(3600), { egress_kbps: 300, ...onHost('fake-1') });
    expect(created.status).toBe(201);
    const reservation = created.body.lease.reservations[0];
    await waitForStatus(created.body.lease.id, 'ACTIVE', 60_000);
    const consumer = await admin.placement.getAllocations(reservation.id);
    expect(consumer.allocations).toEqual({ [reservation.provider]: expect.objectContaining({ resources: { [EGRESS]: 300 } }) });
    expect(consumer.consumer_type).toBe('LEASE');
    expect((await asA('DELETE', `/v1/leases/${created.body.lease.id}`)).status).toBe(204);
    await eventually(async () => ((await asA('GET', `/v1/leases/${created.body.lease.id}`)).status === 404 ? true : undefined), 60_000);
    expect((await admin.placement.getAllocations(reservation.id)).allocations).toEqual({});
    expect(await portsNamed(reservation.id)).toEqual([]);
  }, 120_000);

  it('binds on the next candidate when the first host cannot bind; ERROR with the reason and nothing left when none can', async () => {
    // fake-2's agent stopped (the rig's fake agent skips it) and its record gone: Neutron cannot bind there (binding_failed).
    fs.writeFileSync(STOPPED_AGENTS, 'fake-2\n');
    await admin.neutron.deleteAgent((await agentOf('fake-2')).id);
    // Some bandwidth booked on fake-3 makes the calendar prefer fake-2 (least loaded) for the next lease.
    expect((await bandwidthLease(inSeconds(3000), inSeconds(3600), { egress_kbps: 100_000, ...onHost('fake-3') })).status).toBe(201);
    const moved = await bandwidthLease('now', inSeconds(3600), { egress_kbps: 500, resource_properties: JSON.stringify(['or', ['=', '$host', 'fake-2'], ['=', '$host', 'fake-3']]) });
    expect(moved.status).toBe(201);
    expect(moved.body.lease.reservations[0].host).toBe('fake-2');
    await waitForStatus(moved.body.lease.id, 'ACTIVE', 90_000);
    const started = (await lease(moved.body.lease.id)).reservations[0];
    expect(started.host).toBe('fake-3');
    for (const portId of started.ports as string[]) expect((await admin.neutron.getPort(portId))['binding:host_id']).toBe('fake-3');

    const stuck = await bandwidthLease('now', inSeconds(3600), { egress_kbps: 500, ...onHost('fake-2') });
    expect(stuck.status).toBe(201);
    const reservationId = stuck.body.lease.reservations[0].id;
    await waitForStatus(stuck.body.lease.id, 'ERROR', 90_000);
    expect((await lease(stuck.body.lease.id)).status_reason).toMatch(/^start failed: no host could bind the ports \(1 tried\): port .* on fake-2: vif_type binding_failed$/);
    expect((await admin.placement.getAllocations(reservationId)).allocations).toEqual({});
    expect(await portsNamed(reservationId)).toEqual([]);
  }, 240_000);

  it('writes the allocations again when a concurrent writer bumped the consumer generation', async () => {
    const created = await bandwidthLease(inSeconds(6), inSeconds(3600), { egress_kbps: 700, ...onHost('fake-1') });
    expect(created.status).toBe(201);
    const reservationId = created.body.lease.reservations[0].id;
    const bandwidthRp = await providerNamed(admin.placement, bandwidthProviderName('fake-1'));
    const writes = new RegExp(`/allocations/${reservationId}$`);
    // Hold leasekeeper's PUT; meanwhile another writer creates the consumer, so the held PUT's generation is stale.
    proxy.inject({ method: 'PUT', path: writes, fault: { kind: 'delay', ms: 2_000 }, times: 1 });
    await proxy.waitForRequest((r) => r.method === 'PUT' && writes.test(r.path), 60_000);
    await admin.placement.putAllocations(reservationId, {
      allocations: { [bandwidthRp.uuid]: { resources: { [EGRESS]: 1 } } },
      project_id: projectAId,
      user_id: 'someone-else',
      consumer_generation: null,
      consumer_type: 'LEASE',
    });
    await waitForStatus(created.body.lease.id, 'ACTIVE', 60_000);
    const puts = proxy.requests.filter((r) => r.method === 'PUT' && writes.test(r.path));
    expect(puts.map((r) => r.status)).toEqual([409, 204]);
    expect((await admin.placement.getAllocations(reservationId)).allocations).toEqual({ [bandwidthRp.uuid]: expect.objectContaining({ resources: { [EGRESS]: 700 } }) });
  }, 180_000);

  it('completes and cleans up through Placement 409 generation conflicts on half the allocation writes and 503s on a fifth of the reads', async () => {
    const placementError = (status: number, code: string, title: string) => ({ errors: [{ status, title, code, detail: `injected: ${title}`, request_id: 'req-injected' }] });
    const created = await bandwidthLease(inSeconds(6), inSeconds(3600), { egress_kbps: 700, ...onHost('fake-1') });
    expect(created.status).toBe(201);
    const reservationId = created.body.lease.reservations[0].id;
    const bandwidthRp = await providerNamed(admin.placement, bandwidthProviderName('fake-1'));
    const since = Date.now();
    // Faults once admitted: admission reads Placement too, and a failed read there is a clean 503 for the client.
    const allocations = /\/allocations\/[0-9a-f-]+$/;
    proxy.inject({ method: 'PUT', path: allocations, fault: { kind: 'status', status: 409, body: placementError(409, 'placement.concurrent_update', 'Conflict') }, times: Infinity, fraction: 0.5 });
    proxy.inject({ method: 'DELETE', path: allocations, fault: { kind: 'status', status: 409, body: placementError(409, 'placement.concurrent_update', 'Conflict') }, times: Infinity, fraction: 0.5 });
    proxy.inject({ method: 'GET', path: /./, fault: { kind: 'status', status: 503, body: placementError(503, 'placement.undefined_code', 'Service Unavailable') }, times: Infinity, fraction: 0.2 });

    await waitForStatus(created.body.lease.id, 'ACTIVE', 120_000);
    expect((await admin.placement.getAllocations(reservationId)).allocations).toEqual({ [bandwidthRp.uuid]: expect.objectContaining({ resources: { [EGRESS]: 700 } }) });
    // Ended now with the faults still on: moving the end needs no cloud call, so it is answered at once.
    expect((await asA('PUT', `/v1/leases/${created.body.lease.id}`, { end_date: 'now' })).status).toBe(200);
    await waitForStatus(created.body.lease.id, 'TERMINATED', 120_000);
    expect((await admin.placement.getAllocations(reservationId)).allocations).toEqual({});
    expect(await portsNamed(reservationId)).toEqual([]);

    const seen = proxy.requests.filter((r) => r.at >= since);
    const injected = (method: string, status: number) => seen.filter((r) => r.method === method && r.outcome === 'status' && r.status === status).length;
    const writes = seen.filter((r) => allocations.test(r.path) && (r.method === 'PUT' || r.method === 'DELETE'));
    console.log(`Placement faults injected: ${injected('PUT', 409)} × 409 on PUT, ${injected('DELETE', 409)} × 409 on DELETE, ${injected('GET', 503)} × 503 on GET; writes ${writes.map((r) => `${r.method} ${r.status}`).join(', ')}`);
    expect(injected('PUT', 409)).toBeGreaterThan(0);
    expect(injected('DELETE', 409)).toBeGreaterThan(0);
    expect(injected('GET', 503)).toBeGreaterThan(0);
    expect(writes.filter((r) => r.outcome === 'forwarded').map((r) => r.status)).toEqual([204, 204]); // one write in, one delete out
  }, 240_000);

  it('refuses bad parameters with the reason, and a lease deleted while pending leaves nothing behind', async () => {
    const bad = async (params: Record<string, unknown>) => (await bandwidthLease(inSeconds(600), inSeconds(900), params)).body;
    expect(await bad({ egress_kbps: 'fast' })).toMatchObject({ error_code: 400, error_message: expect.stringContaining('egress_kbps') });
    expect(await bad({ egress_kbps: 100, amount: 0 })).toMatchObject({ error_code: 400, error_message: expect.stringContaining('amount') });
    expect(await bad({ egress_kbps: 100, vnic_type: 'warp' })).toMatchObject({ error_code: 400, error_message: expect.stringContaining('vnic_type') });
    expect(await bad({ egress_kbps: 100, on_host_of: 0 })).toMatchObject({ error_code: 400, error_message: 'on_host_of: the lease has no other reservation 0' });
    const otherNetwork = await asA('POST', '/v1/leases', {
      name: uniqueName('bw'),
      start_date: inSeconds(600),
      end_date: inSeconds(900),
      reservations: [{ resource_type: 'network:bandwidth', network_id: '00000000-0000-4000-8000-000000000000', egress_kbps: 100 }],
    });
    expect(otherNetwork.body).toMatchObject({ error_code: 400, error_message: 'network 00000000-0000-4000-8000-000000000000 not found' });

    const pending = await bandwidthLease(inSeconds(600), inSeconds(900), { egress_kbps: 100, amount: 2 });
    expect(pending.status).toBe(201);
    const reservationId = pending.body.lease.reservations[0].id;
    expect((await asA('DELETE', `/v1/leases/${pending.body.lease.id}`)).status).toBe(204);
    await eventually(async () => ((await asA('GET', `/v1/leases/${pending.body.lease.id}`)).status === 404 ? true : undefined), 60_000);
    expect(await portsNamed(reservationId)).toEqual([]);
    expect((await admin.placement.getAllocations(reservationId)).allocations).toEqual({});
    const { rows } = await stack().db.pool.query('SELECT 1 FROM quantity_allocations WHERE reservation_id = $1', [reservationId]);
    expect(rows).toEqual([]);
  }, 120_000);

  it('refuses bandwidth beyond a provider over overlapping windows with the earliest start, and admits it after', async () => {
    const hour = 3600;
    const big = { egress_kbps: 600_000, ...onHost('fake-3') };
    const first = await bandwidthLease(inSeconds(hour), inSeconds(2 * hour), big);
    expect(first.status).toBe(201);
    const overlapping = await bandwidthLease(inSeconds(1.5 * hour), inSeconds(2.5 * hour), big);
    expect(overlapping.status).toBe(409);
    expect(overlapping.body.error_message).toContain(`not enough room for 1 port(s) of 600000 kbps on network ${network.name}`);
    // The first lease ends at a time with seconds (inSeconds): the earliest start is the next whole minute.
    expect(overlapping.body.earliest_start).toBe(reuseStart(parseRequestDate(first.body.lease.end_date)!));
    const after = await bandwidthLease(overlapping.body.earliest_start, overlapping.body.earliest_end, big);
    expect(after.status).toBe(201);
    // Two that fit together (2 × 400 000 ≤ 1 000 000) are admitted side by side, after `after` (which
    // began on the whole minute after the first's end, so it ends up to a minute past 3 h from now).
    expect((await bandwidthLease(inSeconds(3 * hour + 60), inSeconds(4 * hour), { egress_kbps: 400_000, ...onHost('fake-3') })).status).toBe(201);
    expect((await bandwidthLease(inSeconds(3 * hour + 60), inSeconds(4 * hour), { egress_kbps: 400_000, ...onHost('fake-3') })).status).toBe(201);
  }, 120_000);

  it('availability search says where a bandwidth lease fits: after the booking that fills the provider, or nowhere', async () => {
    const hour = 3600;
    const big = { egress_kbps: 600_000, ...onHost('fake-3') };
    const search = (start: string, end: string, params: Record<string, unknown>) =>
      asA('POST', '/v1/availability/search', { start_date: start, end_date: end, reservations: [{ resource_type: 'network:bandwidth', network_id: network.id, ...params }] });
    const first = await bandwidthLease(inSeconds(hour), inSeconds(2 * hour), big);
    expect(first.status).toBe(201);
    const firstStart = parseRequestDate(first.body.lease.start_date)!;
    const firstEnd = parseRequestDate(first.body.lease.end_date)!;

    // Overlapping the booking: not from the asked start, but from the next whole minute after it ends.
    const overlapping = await search(inSeconds(1.5 * hour), inSeconds(2.5 * hour), big);
    expect(overlapping.status).toBe(200);
    expect(overlapping.body.longest_from_start).toBeNull();
    expect(overlapping.body.earliest.start_date).toBe(reuseStart(firstEnd));
    // The same answer as the refused create gives.
    expect((await bandwidthLease(inSeconds(1.5 * hour), inSeconds(2.5 * hour), big)).body.earliest_start).toBe(overlapping.body.earliest.start_date);

    // Before the booking: it fits from the asked start, until the booking begins.
    const before = await search(inSeconds(0.25 * hour), inSeconds(1.5 * hour), big);
    expect(before.status).toBe(200);
    expect(parseRequestDate(before.body.longest_from_start.end_date)!).toBeLessThanOrEqual(firstStart);
    expect(parseRequestDate(before.body.earliest.start_date)!).toBeGreaterThanOrEqual(firstEnd);

    // More than any provider holds: never.
    const never = await search(inSeconds(hour), inSeconds(2 * hour), { egress_kbps: 2_000_000, ...onHost('fake-3') });
    expect(never.status).toBe(200);
    expect(never.body).toMatchObject({ earliest: null, longest_from_start: null });
  }, 120_000);
});
