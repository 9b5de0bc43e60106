/**
 * Floating IP leases (`virtual:floatingip`) against the rig's Neutron (its external network
 * `public`, 203.0.113.0/24 with pool .10–.99, made by scripts/openstack/seed.py), driven by
 * Debian's python3-blazarclient unchanged with Keystone tokens: enrolment checked against the
 * network's subnets, the required addresses created at the start in the lessee's project, an
 * active lease shrunk and grown, addresses taken off their ports and deleted at the end, Neutron
 * 5xx answers retried, and the start and end lags measured.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { keystoneAuthenticator } from '../../src/api/keystone-auth';
import { KeystoneSession, openStackClients, type FloatingIp, type Network } from '../../src/openstack';
import { floatingIpPlugin } from '../../src/resources/floating-ip';
import { FaultProxy } from '../support/fault-proxy';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { rigClients, rigCredentials, rigEnv, uniqueName } from './support';

const run = promisify(execFile);
const ADDRESSES = ['203.0.113.201', '203.0.113.202'];
const TAKEN = '203.0.113.210';

describe('floating IP leases in Neutron', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  let proxy: FaultProxy;
  let publicNet: Network;
  let tokens: { a: string; b: string; admin: string };
  let projectAId: string;
  const made: { networks: string[]; routers: Array<{ id: string; subnetId: string }>; ports: string[] } = { networks: [], routers: [], ports: [] };

  beforeAll(async () => {
    proxy = await FaultProxy.start(rigEnv().LK_NEUTRON_URL);
  });
  const stack = useTestStack(() => {
    const throughProxy = openStackClients({ credentials: { ...rigCredentials('leasekeeper-admin'), endpointOverride: { network: proxy.url } }, timeoutMs: 5_000 });
    return {
      withPool: (pool) => [floatingIpPlugin({ pool, cloud: () => throughProxy })],
      openstack: () => admin,
      authenticator: keystoneAuthenticator({ validateToken: (token) => admin.keystone.validateToken(token) }),
    };
  });

  const blazar = async (token: string, ...args: string[]) =>
    (await run('/usr/bin/blazar', ['--os-auth-type', 'admin_token', '--os-endpoint', `${stack().url}/v1`, '--os-token', token, ...args], { timeout: 60_000 })).stdout;
  const blazarFails = (token: string, ...args: string[]) => blazar(token, ...args).then(() => '', (err: { stderr: string }) => err.stderr);
  const field = (table: string, name: string) => new RegExp(`\\|\\s+${name}\\s+\\|\\s+(\\S+)\\s+\\|`).exec(table)?.[1];
  const asA = () => apiClient(stack().url, { 'x-auth-token': tokens.a });
  const asAdmin = () => apiClient(stack().url, { 'x-auth-token': tokens.admin });
  const lease = async (id: string) => (await asA()('GET', `/v1/leases/${id}`)).body.lease;
  const waitForStatus = (id: string, status: string, timeoutMs = 120_000) => eventually(async () => ((await lease(id))?.status === status ? true : undefined), timeoutMs, 100, () => `lease ${id} not ${status}`);
  const tagged = (reservationId: string) => admin.neutron.listFloatingIps({ tags: `reservation:${reservationId}` });
  const byAddress = (fips: FloatingIp[]) => fips.map((f) => f.floating_ip_address).sort();

  beforeAll(async () => {
    const tokenOf = async (cloud: 'leasekeeper-project-a' | 'leasekeeper-project-b' | 'leasekeeper-admin') => new KeystoneSession({ credentials: rigCredentials(cloud) }).authenticate();
    const [a, b, adminSession] = await Promise.all([tokenOf('leasekeeper-project-a'), tokenOf('leasekeeper-project-b'), tokenOf('leasekeeper-admin')]);
    tokens = { a: a.token, b: b.token, admin: adminSession.token };
    projectAId = a.projectId;
    [publicNet] = await admin.neutron.listNetworks({ name: 'public' });
    expect(publicNet?.['router:external']).toBe(true); // seeded by scripts/openstack/seed.py
    // What an earlier, interrupted run may have left.
    for (const address of [...ADDRESSES, TAKEN]) {
      for (const fip of await admin.neutron.listFloatingIps({ floating_ip_address: address })) await admin.neutron.deleteFloatingIp(fip.id);
    }
  });

  afterEach(async () => {
    proxy.clear();
    await deleteAllLeases(asAdmin());
  });
  // The test stack (and its API) stops before this runs: what is left is cleaned in the clouds directly.
  afterAll(async () => {
    for (const port of made.ports) await admin.neutron.deletePort(port).catch(() => undefined);
    for (const address of [...ADDRESSES, TAKEN]) for (const fip of await admin.neutron.listFloatingIps({ floating_ip_address: address })) await admin.neutron.deleteFloatingIp(fip.id);
    for (const router of made.routers) {
      await admin.neutron.http.put(`/routers/${router.id}/remove_router_interface`, { subnet_id: router.subnetId }).catch(() => undefined);
      await admin.neutron.http.delete(`/routers/${router.id}`).catch(() => undefined);
    }
    for (const network of made.networks) await admin.neutron.deleteNetwork(network).catch(() => undefined);
    // The enrolled addresses go with the test database.
    await proxy?.stop();
  });

  it('enrols addresses with blazarclient, refusing those Neutron hands out or holds', async () => {
    const pool = await blazarFails(tokens.admin, 'floatingip-create', publicNet.id, '203.0.113.50');
    expect(pool).toContain('The floating IP 203.0.113.50 is used in allocation_pools or gateway_ip in subnet');
    expect(await blazarFails(tokens.admin, 'floatingip-create', publicNet.id, '203.0.113.1')).toContain('used in allocation_pools or gateway_ip');
    expect(await blazarFails(tokens.admin, 'floatingip-create', publicNet.id, '198.51.100.7')).toContain('Valid subnet for the floating IP 198.51.100.7 is not found.');
    expect(await blazarFails(tokens.admin, 'floatingip-create', publicNet.id, 'not-an-ip')).toContain('IP address not-an-ip is invalid form.');
    expect(await blazarFails(tokens.admin, 'floatingip-create', '00000000-0000-4000-8000-000000000000', '203.0.113.201')).toContain('Failed to find network 00000000-0000-4000-8000-000000000000');
    const internal = await admin.neutron.createNetwork({ name: uniqueName('fip-internal') });
    made.networks.push(internal.id);
    expect(await blazarFails(tokens.admin, 'floatingip-create', internal.id, '10.0.0.5')).toContain('is not external');
    // An address Neutron already gave out (an admin's floating IP outside the pool).
    await admin.neutron.createFloatingIp({ floating_network_id: publicNet.id, floating_ip_address: TAKEN });
    expect(await blazarFails(tokens.admin, 'floatingip-create', publicNet.id, TAKEN)).toMatch(/floating IP 203\.0\.113\.210 is in use in Neutron \(floating IP .* of project .*\): only a free address can be made reservable/);
    expect(await blazarFails(tokens.a, 'floatingip-create', publicNet.id, ADDRESSES[0])).toContain("Policy doesn't allow blazar:floatingips:post to be performed.");

    for (const address of ADDRESSES) {
      const created = await blazar(tokens.admin, 'floatingip-create', publicNet.id, address);
      expect(created).toMatch(/Created a new floatingip:/);
      expect(field(created, 'floating_ip_address')).toBe(address);
      expect(field(created, 'floating_network_id')).toBe(publicNet.id);
    }
    expect(await blazarFails(tokens.admin, 'floatingip-create', publicNet.id, ADDRESSES[0])).toContain('is already reservable');
    const list = await blazar(tokens.a, 'floatingip-list');
    for (const address of ADDRESSES) expect(list).toContain(address);
    const id = new RegExp(`\\|\\s+([0-9a-f-]{36})\\s+\\|\\s+${ADDRESSES[1].replace(/\./g, '\\.')}\\s+\\|`).exec(list)?.[1];
    expect(field(await blazar(tokens.a, 'floatingip-show', id!), 'subnet_id')).toBe(publicNet.subnets[0]);
  }, 120_000);

  it('creates exactly the required addresses in the lessee project at the start, retrying Neutron 5xx, and takes them back at the end', async () => {
    // The first create of a floating IP, and one tag write, fail with 503: retried.
    proxy.inject({ method: 'POST', path: /\/floatingips$/, fault: { kind: 'status', status: 503 }, times: 1 });
    proxy.inject({ method: 'PUT', path: /\/floatingips\/[^/]+\/tags$/, fault: { kind: 'status', status: 500 }, times: 1 });
    const reservation = `resource_type=virtual:floatingip,network_id=${publicNet.id},amount=2,required_floatingips=${JSON.stringify(ADDRESSES)}`;
    // The client takes whole minutes: the lease is made for later, checked while pending, then
    // moved to start now and, once used, to end now (as `lease-update` does), so no test waits for a clock.
    const start = new Date(Date.now() + 3_600_000);
    const end = new Date(start.getTime() + 3_600_000);
    const minute = (d: Date) => d.toISOString().slice(0, 16).replace('T', ' ');
    const created = await blazar(tokens.a, 'lease-create', '--reservation', reservation, '--start-date', minute(start), '--end-date', minute(end), uniqueName('fip'));
    const leaseId = field(created, 'id')!;
    const shown = await lease(leaseId);
    const reservationId = shown.reservations[0].id;
    expect(shown.reservations[0]).toMatchObject({ resource_type: 'virtual:floatingip', amount: 2, required_floatingips: ADDRESSES });
    expect([...shown.reservations[0].floating_ip_addresses].sort()).toEqual(ADDRESSES);

    // Project B, for the same window: no address left; 409 with the earliest start (this lease's end).
    const third = await apiClient(stack().url, { 'x-auth-token': tokens.b })('POST', '/v1/leases', {
      name: uniqueName('fip-b'),
      start_date: minute(start),
      end_date: minute(end),
      reservations: [{ resource_type: 'virtual:floatingip', network_id: publicNet.id, amount: 1 }],
    });
    expect(third.status).toBe(409);
    expect(third.body.earliest_start).toBe(minute(end));

    const startAt = Date.now();
    expect(await asA()('PUT', `/v1/leases/${leaseId}`, { start_date: 'now' })).toMatchObject({ status: 200 });
    await waitForStatus(leaseId, 'ACTIVE');
    const startLag = (await eventually(async () => ((await tagged(reservationId)).length === 2 ? Date.now() : undefined), 30_000)) - startAt;
    const fips = await tagged(reservationId);
    expect(byAddress(fips)).toEqual(ADDRESSES);
    expect(fips.every((f) => f.project_id === projectAId && f.tags?.includes('blazar'))).toBe(true);
    expect(byAddress(await projectA.neutron.listFloatingIps({ floating_network_id: publicNet.id }))).toEqual(expect.arrayContaining(ADDRESSES)); // the lessee sees them
    expect(proxy.injected()).toBe(2);
    const active = await lease(leaseId);
    expect(active.reservations[0].floatingips.map((f: { id: string }) => f.id).sort()).toEqual(fips.map((f) => f.id).sort());

    // The lessee uses one: a router to the external network, a port behind it, the address on the port.
    const inner = await admin.neutron.createNetwork({ name: uniqueName('fip-inner'), project_id: projectAId });
    made.networks.push(inner.id);
    const subnet = await admin.neutron.createSubnet({ network_id: inner.id, cidr: '10.98.0.0/24', ip_version: 4, project_id: projectAId, enable_dhcp: false });
    const router = (await admin.neutron.http.post<{ router: { id: string } }>('/routers', { router: { name: uniqueName('fip-router'), project_id: projectAId, external_gateway_info: { network_id: publicNet.id } } })).router;
    made.routers.push({ id: router.id, subnetId: subnet.id });
    await admin.neutron.http.put(`/routers/${router.id}/add_router_interface`, { subnet_id: subnet.id });
    const port = await admin.neutron.createPort({ network_id: inner.id, project_id: projectAId, name: uniqueName('fip-port') });
    made.ports.push(port.id);
    const used = fips.find((f) => f.floating_ip_address === ADDRESSES[0])!;
    await projectA.neutron.setFloatingIpPort(used.id, port.id);

    // Shrinking to one keeps the address in use and deletes the other at once; growing brings one back at once.
    const shrunk = await asA()('PUT', `/v1/leases/${leaseId}`, { reservations: [{ id: reservationId, amount: 1, required_floatingips: [] }] });
    expect(shrunk.status).toBe(200);
    expect(byAddress(await tagged(reservationId))).toEqual([ADDRESSES[0]]);
    const refused = await asA()('PUT', `/v1/leases/${leaseId}`, { reservations: [{ id: reservationId, amount: 1, required_floatingips: [ADDRESSES[1]] }] });
    expect(refused.status).toBe(409);
    expect(refused.body.error_message).toContain(`(${ADDRESSES[0]} associated with a port: disassociate them first)`);
    const grown = await asA()('PUT', `/v1/leases/${leaseId}`, { reservations: [{ id: reservationId, amount: 2 }] });
    expect(grown.status).toBe(200);
    expect(byAddress(await tagged(reservationId))).toEqual(ADDRESSES);

    // The end: the address comes off its port, and both are deleted.
    const endAt = Date.now();
    expect(await asA()('PUT', `/v1/leases/${leaseId}`, { end_date: 'now' })).toMatchObject({ status: 200 });
    await waitForStatus(leaseId, 'TERMINATED');
    const endLag = (await eventually(async () => ((await tagged(reservationId)).length === 0 ? Date.now() : undefined), 30_000)) - endAt;
    expect(await admin.neutron.listFloatingIps({ port_id: port.id })).toEqual([]);
    expect((await admin.neutron.getPort(port.id)).id).toBe(port.id); // the port itself is the lessee's: untouched
    process.stdout.write(`floating IP lease: start lag ${startLag} ms (start moved to now → both addresses in Neutron), end lag ${endLag} ms (end moved to now → both gone)\n`);
  }, 360_000);

  it('a lease deleted while active takes its addresses back; one deleted while pending never makes them', async () => {
    const api = asA();
    const pending = await api('POST', '/v1/leases', {
      name: uniqueName('fip-pending'),
      start_date: inSeconds(3600),
      end_date: inSeconds(7200),
      reservations: [{ resource_type: 'virtual:floatingip', network_id: publicNet.id, amount: 1 }],
    });
    expect(pending.status).toBe(201);
    const pendingReservation = pending.body.lease.reservations[0].id;
    expect((await api('DELETE', `/v1/leases/${pending.body.lease.id}`)).status).toBe(204);
    expect(await tagged(pendingReservation)).toEqual([]);

    const now = await api('POST', '/v1/leases', { name: uniqueName('fip-now'), start_date: 'now', end_date: inSeconds(3600), reservations: [{ resource_type: 'virtual:floatingip', network_id: publicNet.id, amount: 1 }] });
    expect(now.status).toBe(201);
    await waitForStatus(now.body.lease.id, 'ACTIVE');
    const reservationId = now.body.lease.reservations[0].id;
    expect(await tagged(reservationId)).toHaveLength(1);
    expect([204, 202]).toContain((await api('DELETE', `/v1/leases/${now.body.lease.id}`)).status);
    await eventually(async () => ((await tagged(reservationId)).length === 0 ? true : undefined), 30_000);
  }, 180_000);
});
