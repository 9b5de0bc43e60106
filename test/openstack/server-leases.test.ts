/**
 * Server leases (`virtual:server`) in Nova, with the real scheduler and Placement: the server is
 * shelved and offloaded after admission (its host's room is free for others), unshelved onto the
 * reserved host at the start, snapshotted and deleted at the end. The capacity is guaranteed by
 * the calendar: overlapping leases that do not fit together are refused with the earliest start;
 * on-demand servers that took the reserved host's room meanwhile make the start move the server
 * to a host with room, or fail with the reason, as the policy says. Nova calls from the activities
 * go through a fault-injecting proxy.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { parseRequestDate, reuseStart } from '../../src/domain/dates';
import { KeystoneSession, openStackClients, projectScopedClients, serverHost, type Flavor, type OpenStackClients, type Server } from '../../src/openstack';
import { virtualServerPlugin } from '../../src/resources/virtual-server';
import { findServer } from '../../src/resources/virtual-server/servers';
import { FaultProxy } from '../support/fault-proxy';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { bootServer, deleteServers, rigClients, rigCredentials, rigEnv, uniqueName } from './support';

const SERVER_ACTION = /\/servers\/[0-9a-f-]+\/action$/;
const run = promisify(execFile);

/**
 * python3-blazarclient's library, unchanged, as project A (its CLI's generic `--reservation` parser
 * fails on any type it does not know: KeyError in _parse_params, a client bug).
 */
const BLAZARCLIENT_SCRIPT = `
import json, sys
from keystoneauth1 import noauth, session
from blazarclient import client
url, project, action, arg = sys.argv[1:5]
sess = session.Session(auth=noauth.NoAuth(endpoint=url), additional_headers={'X-Project-Id': project, 'X-User-Id': 'user-a'})
leases = client.Client('1', session=sess).lease
if action == 'create':
    print(json.dumps(leases.create(reservations=[json.loads(arg)], events=[], **json.loads(sys.argv[5]))))
elif action == 'show':
    print(json.dumps(leases.get(arg)))
else:
    leases.delete(arg)
`;

describe('server leases in Nova', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const servers: Array<{ clients: OpenStackClients; id: string }> = [];
  const images: string[] = [];
  let half: Flavor; // 8192 MB: two of them never fit one fake host (12288 MB)
  let proxy: FaultProxy;
  let asA: ReturnType<typeof apiClient>;
  let projectAId: string;

  const blazarclient = async (action: 'create' | 'show' | 'delete', arg: string, extra: Record<string, unknown> = {}) => {
    const { stdout } = await run('/usr/bin/python3', ['-c', BLAZARCLIENT_SCRIPT, `${stack().url}/v1`, projectAId, action, arg, JSON.stringify(extra)], { timeout: 60_000 });
    return stdout.trim() ? JSON.parse(stdout) : undefined;
  };
  const boot = (clients: OpenStackClients, where: { host?: string; flavor?: string } = {}): Promise<Server> => bootServer(clients, where, (id) => servers.push({ clients, id }));
  const lease = async (id: string) => (await asA('GET', `/v1/leases/${id}`)).body.lease;
  const waitForStatus = (id: string, status: string, timeoutMs = 120_000) => eventually(async () => ((await lease(id))?.status === status ? true : undefined), timeoutMs);
  const waitForServer = (id: string, ok: (s: Server | undefined) => boolean, timeoutMs = 60_000) =>
    eventually(async () => {
      const server = await findServer(admin.nova, id);
      return ok(server) ? (server ?? ({} as Server)) : undefined;
    }, timeoutMs);
  const offloaded = (s: Server | undefined) => s?.status === 'SHELVED_OFFLOADED' && serverHost(s) === null && !s['OS-EXT-STS:task_state'];
  const serverLease = (serverId: string, start: string, end: string, extra: Record<string, unknown> = {}) =>
    asA('POST', '/v1/leases', { name: uniqueName('vm'), start_date: start, end_date: end, reservations: [{ resource_type: 'virtual:server', server_id: serverId, ...extra }] });
  const onHost = (host: string) => ({ resource_properties: JSON.stringify(['=', '$hypervisor_hostname', host]) });

  beforeAll(async () => {
    proxy = await FaultProxy.start(rigEnv().LK_NOVA_URL);
  });
  const stack = useTestStack(
    () => {
      const viaProxy = { credentials: { ...rigCredentials('leasekeeper-admin'), endpointOverride: { compute: proxy.url } }, timeoutMs: 5_000 };
      const throughProxy = openStackClients(viaProxy);
      // Servers created for leases are made in the lessee's project (the rig's admin has an inherited admin role).
      const inProject = projectScopedClients(viaProxy);
      return { withPool: (pool) => [virtualServerPlugin({ pool, cloud: () => throughProxy, projectCloud: inProject, settings: { capacityRefreshMs: 0 } })] };
    },
    {
      beforeStop: async () => {
        for (const id of images) await admin.glance.deleteImage(id).catch(() => undefined);
        if (half) await admin.nova.deleteFlavor(half.id).catch(() => undefined);
      },
    },
  );

  beforeAll(async () => {
    projectAId = (await new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-a') }).authenticate()).projectId;
    asA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a' });
    half = await admin.nova.createFlavor({ name: uniqueName('half'), vcpus: 1, ram: 8192, disk: 1 });
  });

  // Each test starts on empty hosts: its leases and servers are gone before the next.
  afterEach(async () => {
    proxy?.clear();
    await deleteAllLeases(asA);
    await deleteServers(servers.splice(0));
  }, 240_000);

  afterAll(async () => {
    await proxy?.stop();
  });

  it('shelves the server after admission, unshelves it on the reserved host at the start, snapshots and deletes it at the end', async () => {
    const server = await boot(projectA);
    expect(server.status).toBe('ACTIVE');
    // Made for later and moved to start now once checked while pending: no test waits for a clock.
    const created = await serverLease(server.id, inSeconds(3600), inSeconds(7200), onHost('fake-2'));
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    const [reservation] = created.body.lease.reservations;
    expect(reservation).toMatchObject({ server_id: server.id, server_name: server.name, host: 'fake-2', on_end: 'snapshot_and_delete', footprint: { VCPU: 1, MEMORY_MB: 512, DISK_GB: 1 } });

    // Pending: shelved and offloaded, nothing allocated in Placement, the host free for others.
    await waitForServer(server.id, offloaded);
    expect((await admin.placement.getAllocations(server.id)).allocations).toEqual({});
    expect((await lease(id)).status).toBe('PENDING');

    const startAt = Date.now();
    expect((await asA('PUT', `/v1/leases/${id}`, { start_date: 'now' })).status).toBe(200);
    await waitForStatus(id, 'ACTIVE', 60_000);
    const running = await admin.nova.getServer(server.id);
    console.log(`server ACTIVE on the reserved host ${Date.now() - startAt} ms after its start was moved to now (upper bound: includes polling)`);
    expect(running.status).toBe('ACTIVE');
    expect(serverHost(running)).toBe('fake-2');
    expect((await lease(id)).reservations[0].host).toBe('fake-2');

    expect((await asA('PUT', `/v1/leases/${id}`, { end_date: 'now' })).status).toBe(200);
    await waitForStatus(id, 'TERMINATED', 60_000);
    const ended = (await lease(id)).reservations[0];
    expect(ended.snapshot_image_id).toEqual(expect.any(String));
    images.push(ended.snapshot_image_id);
    const image = await admin.glance.getImage(ended.snapshot_image_id);
    expect(image.leasekeeper_lease).toBe(id);
    expect(await findServer(admin.nova, server.id)).toBeUndefined();
  }, 180_000);

  it('creates the server at the start from a flavor and an image, in the lessee project on the reserved host, and deletes it at the end', async () => {
    const tiny = (await admin.nova.listFlavors()).find((f) => f.name === 'm1.tiny')!;
    const [image] = await admin.glance.listImages({ name: 'fake-image' });
    const toCreate = { flavor_id: tiny.id, image_id: image.id, networks: 'none' };
    const missingFlavor = await asA('POST', '/v1/leases', { name: uniqueName('vm'), start_date: inSeconds(600), end_date: inSeconds(900), reservations: [{ resource_type: 'virtual:server', ...toCreate, flavor_id: 'no-such-flavor' }] });
    expect(missingFlavor.status).toBe(400);
    expect(missingFlavor.body.error_message).toBe(`flavor_id: flavor no-such-flavor not found or not visible to project ${projectAId}`);
    const both = await asA('POST', '/v1/leases', { name: uniqueName('vm'), start_date: inSeconds(600), end_date: inSeconds(900), reservations: [{ resource_type: 'virtual:server', ...toCreate, server_id: image.id }] });
    expect(both.status).toBe(400);
    expect(both.body.error_message).toContain('give either server_id, or flavor_id and image_id (with networks), not both');

    const created = await asA('POST', '/v1/leases', {
      name: uniqueName('vm-create'),
      start_date: 'now',
      end_date: inSeconds(3600),
      reservations: [{ resource_type: 'virtual:server', ...toCreate, on_end: 'delete', ...onHost('fake-1') }],
    });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    const [reservation] = created.body.lease.reservations;
    expect(reservation).toMatchObject({ server_id: null, host: 'fake-1', image_id: image.id, footprint: { VCPU: 1, MEMORY_MB: 512, DISK_GB: 1 } });

    await waitForStatus(id, 'ACTIVE', 90_000);
    const active = (await lease(id)).reservations[0];
    expect(active.server_name).toBe(`lease-${reservation.id}`);
    servers.push({ clients: admin, id: active.server_id });
    const server = await admin.nova.getServer(active.server_id);
    expect(server).toMatchObject({ status: 'ACTIVE', tenant_id: projectAId, metadata: { leasekeeper_lease: id, leasekeeper_reservation: reservation.id } });
    expect(serverHost(server)).toBe('fake-1');

    expect((await asA('PUT', `/v1/leases/${id}`, { end_date: 'now' })).status).toBe(200);
    await waitForStatus(id, 'TERMINATED', 60_000);
    expect(await findServer(admin.nova, active.server_id)).toBeUndefined();
  }, 180_000);

  it('admits leases that fit only one after the other, refuses the overlap with the earliest start, and gives servers back when deleted', async () => {
    const first = await boot(projectA, { flavor: half.name });
    const second = await boot(projectA, { flavor: half.name });
    const hour = 3600;
    const one = await serverLease(first.id, inSeconds(hour), inSeconds(2 * hour), onHost('fake-3'));
    expect(one.status).toBe(201);
    expect(one.body.lease.reservations[0].host).toBe('fake-3');

    const overlapping = await serverLease(second.id, inSeconds(1.5 * hour), inSeconds(2.5 * hour), onHost('fake-3'));
    expect(overlapping.status).toBe(409);
    expect(overlapping.body.error_message).toMatch(/not enough room for server .* on any of 1 matching host/);
    // The first lease ends at a time with seconds (inSeconds): the earliest start is the next whole minute.
    expect(overlapping.body.earliest_start).toBe(reuseStart(parseRequestDate(one.body.lease.end_date)!));

    const after = await serverLease(second.id, overlapping.body.earliest_start, overlapping.body.earliest_end, onHost('fake-3'));
    expect(after.status).toBe(201);
    // The same server cannot be in two overlapping leases, and another project's server is not found.
    expect((await serverLease(first.id, inSeconds(1.2 * hour), inSeconds(1.4 * hour))).status).toBe(409);
    const adminServer = await boot(admin);
    const foreign = await serverLease(adminServer.id, inSeconds(hour), inSeconds(2 * hour));
    expect(foreign.status).toBe(400);
    expect(foreign.body.error_message).toBe(`server ${adminServer.id} not found in project ${one.body.lease.project_id}`);

    // Deleted before their start, the leases give the servers back: unshelved wherever Nova chooses.
    await waitForServer(first.id, offloaded);
    await waitForServer(second.id, offloaded);
    for (const l of [one, after]) expect((await asA('DELETE', `/v1/leases/${l.body.lease.id}`)).status).toBe(204);
    for (const s of [first, second]) await waitForServer(s.id, (x) => x?.status === 'ACTIVE' && !x['OS-EXT-STS:task_state']);
  }, 180_000);

  it('availability search says where a server lease fits: after the booking that fills the host, or nowhere', async () => {
    const first = await boot(projectA, { flavor: half.name });
    const second = await boot(projectA, { flavor: half.name });
    const hour = 3600;
    const search = (serverId: string, start: string, end: string, extra: Record<string, unknown>) =>
      asA('POST', '/v1/availability/search', { start_date: start, end_date: end, reservations: [{ resource_type: 'virtual:server', server_id: serverId, ...extra }] });
    const one = await serverLease(first.id, inSeconds(hour), inSeconds(2 * hour), onHost('fake-3'));
    expect(one.status).toBe(201);
    const oneStart = parseRequestDate(one.body.lease.start_date)!;
    const oneEnd = parseRequestDate(one.body.lease.end_date)!;

    // Overlapping the booking (two halves never fit one host): from the next whole minute after it ends.
    const overlapping = await search(second.id, inSeconds(1.5 * hour), inSeconds(2.5 * hour), onHost('fake-3'));
    expect(overlapping.status).toBe(200);
    expect(overlapping.body.longest_from_start).toBeNull();
    expect(overlapping.body.earliest.start_date).toBe(reuseStart(oneEnd));

    // Before the booking: it fits from the asked start, until the booking begins.
    const before = await search(second.id, inSeconds(0.25 * hour), inSeconds(1.5 * hour), onHost('fake-3'));
    expect(before.status).toBe(200);
    expect(parseRequestDate(before.body.longest_from_start.end_date)!).toBeLessThanOrEqual(oneStart);
    expect(parseRequestDate(before.body.earliest.start_date)!).toBeGreaterThanOrEqual(oneEnd);

    // On a host that does not exist: never; another project's server: not found, as at creation.
    const nowhere = await search(second.id, inSeconds(hour), inSeconds(2 * hour), onHost('no-such-host'));
    expect(nowhere.status).toBe(200);
    expect(nowhere.body).toMatchObject({ earliest: null, longest_from_start: null });
    const adminServer = await boot(admin);
    const foreign = await search(adminServer.id, inSeconds(hour), inSeconds(2 * hour), {});
    expect(foreign.status).toBe(400);
    expect(foreign.body.error_message).toBe(`server ${adminServer.id} not found in project ${one.body.lease.project_id}`);
  }, 180_000);

  it('moves the server to a host with room when on-demand servers took the reserved one (policy move)', async () => {
    const server = await boot(projectA, { flavor: half.name });
    const created = await serverLease(server.id, inSeconds(3600), inSeconds(7200), { on_end: 'delete' });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    const reserved = created.body.lease.reservations[0].host as string;
    expect(created.body.lease.reservations[0].host_full).toBe('move');
    await waitForServer(server.id, offloaded);

    // An on-demand server takes the room the lease counted on.
    const intruder = await boot(admin, { host: reserved, flavor: half.name });
    expect(intruder.status).toBe('ACTIVE');

    expect((await asA('PUT', `/v1/leases/${id}`, { start_date: 'now' })).status).toBe(200);
    await waitForStatus(id, 'ACTIVE', 90_000);
    const moved = (await lease(id)).reservations[0];
    expect(moved.moved_from).toBe(reserved);
    expect(moved.host).not.toBe(reserved);
    const running = await admin.nova.getServer(server.id);
    expect(running.status).toBe('ACTIVE');
    expect(serverHost(running)).toBe(moved.host);

    expect((await asA('PUT', `/v1/leases/${id}`, { end_date: 'now' })).status).toBe(200);
    await waitForStatus(id, 'TERMINATED', 60_000);
    expect(await findServer(admin.nova, server.id)).toBeUndefined(); // on_end: delete, no snapshot
    expect((await lease(id)).reservations[0].snapshot_image_id).toBeUndefined();
  }, 180_000);

  it('fails the start with the reason when the reserved host is full and the policy is fail, and gives the server back', async () => {
    const server = await boot(projectA, { flavor: half.name });
    const created = await serverLease(server.id, inSeconds(3600), inSeconds(7200), { host_full: 'fail', ...onHost('fake-1') });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    const reservationId = created.body.lease.reservations[0].id;
    await waitForServer(server.id, offloaded);
    const intruder = await boot(admin, { host: 'fake-1', flavor: half.name });
    expect(intruder.status).toBe('ACTIVE');

    expect((await asA('PUT', `/v1/leases/${id}`, { start_date: 'now' })).status).toBe(200);
    await waitForStatus(id, 'ERROR', 90_000);
    const failed = await lease(id);
    expect(failed.status_reason).toMatch(/^start failed: reserved host fake-1 has no room for server .* any more \(MEMORY_MB \d+ free of 8192 needed: taken by on-demand servers\); the policy is to fail the start$/);
    // Never a silent failure: the booking is freed and the owner has the server back (Nova placed it elsewhere).
    const { rows } = await stack().db.pool.query('SELECT 1 FROM quantity_allocations WHERE reservation_id = $1', [reservationId]);
    expect(rows).toEqual([]);
    const back = await waitForServer(server.id, (s) => s?.status === 'ACTIVE' && !s['OS-EXT-STS:task_state']);
    expect(serverHost(back)).not.toBe('fake-1');
  }, 180_000);

  it('python3-blazarclient (its library) creates, shows and deletes a server lease unchanged', async () => {
    const server = await boot(projectA);
    const created = await blazarclient('create', JSON.stringify({ resource_type: 'virtual:server', server_id: server.id, on_end: 'delete' }), {
      name: uniqueName('vm-client'),
      start: inSeconds(3600).slice(0, 16),
      end: inSeconds(7200).slice(0, 16),
    });
    expect(created.reservations[0]).toMatchObject({ resource_type: 'virtual:server', server_id: server.id, on_end: 'delete', host: expect.any(String) });
    await waitForServer(server.id, offloaded);
    const shown = await blazarclient('show', created.id);
    expect(shown.status).toBe('PENDING');
    await blazarclient('delete', created.id);
    await waitForServer(server.id, (s) => s?.status === 'ACTIVE' && !s['OS-EXT-STS:task_state']);
  }, 120_000);

  it('retries a Nova 503 on unshelve; a server deleted by its owner before the start puts the lease in ERROR', async () => {
    const server = await boot(projectA);
    const faultsBefore = proxy.injected();
    proxy.inject({ method: 'POST', path: SERVER_ACTION, bodyIncludes: '"unshelve"', fault: { kind: 'status', status: 503 }, times: 2 });
    const created = await serverLease(server.id, inSeconds(3600), inSeconds(7200), { on_end: 'shelve' });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    await waitForServer(server.id, offloaded);
    expect((await asA('PUT', `/v1/leases/${id}`, { start_date: 'now' })).status).toBe(200);
    await waitForStatus(id, 'ACTIVE', 90_000);
    expect(proxy.injected() - faultsBefore).toBe(2);
    expect((await admin.nova.getServer(server.id)).status).toBe('ACTIVE');
    // on_end: shelve — the owner keeps the server, shelved, holding no host.
    expect((await asA('PUT', `/v1/leases/${id}`, { end_date: 'now' })).status).toBe(200);
    await waitForStatus(id, 'TERMINATED', 60_000);
    await waitForServer(server.id, offloaded);

    const doomed = await boot(projectA);
    const second = await serverLease(doomed.id, inSeconds(15), inSeconds(3600));
    expect(second.status).toBe(201);
    await waitForServer(doomed.id, offloaded);
    await projectA.nova.deleteServer(doomed.id);
    await projectA.nova.waitForServerDeleted(doomed.id);
    await waitForStatus(second.body.lease.id, 'ERROR', 60_000);
    // Deleted while being shelved, or afterwards: either way the reason names it.
    expect((await lease(second.body.lease.id)).status_reason).toMatch(
      new RegExp(`^(hold until start|start) failed: server ${doomed.id} no longer exists \\(deleted by its owner before the lease started\\?\\)$`),
    );
  }, 240_000);
});
