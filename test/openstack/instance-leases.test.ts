/**
 * Instance reservations (`virtual:instance`) against the rig's real Nova scheduler and Placement,
 * driven by Debian's python3-blazarclient unchanged with Keystone tokens: three slots with
 * `affinity=False` become three servers of the lessee on three different reserved hosts, a fourth
 * fails to schedule, project B neither sees nor uses the flavor, and at the end the servers, the
 * flavor, the aggregate, the inventory and the resource class are gone; `affinity=True` keeps every
 * server on one host; capacity is counted with Placement's allocation ratios; Nova and Placement 5xx
 * answers are retried; the start and end lags are measured. `flavor:instance` (through
 * blazarclient's Python library: its CLI does not know the type) books an existing flavor's
 * footprint, `resources:*` overrides included, and copies its extra specs to the reservation flavor.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { keystoneAuthenticator } from '../../src/api/keystone-auth';
import { KeystoneSession, NotFoundError, openStackClients, type OpenStackClients, type Server } from '../../src/openstack';
import { snapshotName } from '../../src/resources/shared/server-snapshots';
import { removeReservationResources, reservationProviderName, reservationResourceClass } from '../../src/resources/virtual-instance/nova-resources';
import { virtualInstancePlugin } from '../../src/resources/virtual-instance';
import { flavorInstancePlugin } from '../../src/resources/flavor-instance';
import { FaultProxy } from '../support/fault-proxy';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { bootServer, deleteAggregateNamed, providerNamed, rigClients, rigCredentials, rigEnv, uniqueName } from './support';

const run = promisify(execFile);
const HOSTS = ['fake-1', 'fake-2', 'fake-3'];
/** Deleting a fake server takes a second or two; an end gives up this long after its time. */
const SERVER_DELETE_TIMEOUT_MS = 15_000;

describe('instance leases in Nova and Placement', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const projectB = rigClients('leasekeeper-project-b');
  const freepool = uniqueName('freepool');
  let nova: FaultProxy;
  let placement: FaultProxy;
  let tokens: { a: string; b: string; admin: string };
  let projectAId: string;
  const servers: Array<{ clients: OpenStackClients; id: string }> = [];
  const snapshots: string[] = [];

  beforeAll(async () => {
    nova = await FaultProxy.start(rigEnv().LK_NOVA_URL);
    placement = await FaultProxy.start(rigEnv().LK_PLACEMENT_URL);
  });
  const stack = useTestStack(
    () => {
      const throughProxies = openStackClients({
        credentials: { ...rigCredentials('leasekeeper-admin'), endpointOverride: { compute: nova.url, placement: placement.url } },
        timeoutMs: 10_000,
      });
      return {
        env: { LK_FREEPOOL_AGGREGATE: freepool },
        withPool: (pool) => {
          const deps = {
            pool,
            settings: { cleaningMs: 0, capacityRefreshMs: 0 },
            cloud: () => throughProxies,
            projectCloud: (id: string) => (id === projectAId ? projectA : admin),
            serverDeleteTimeoutMs: SERVER_DELETE_TIMEOUT_MS,
          };
          return [virtualInstancePlugin(deps), flavorInstancePlugin(deps)];
        },
        openstack: () => admin,
        authenticator: keystoneAuthenticator({ validateToken: (token) => admin.keystone.validateToken(token) }),
      };
    },
    {
      beforeStop: async () => {
        const api = asAdmin();
        for (const host of (await api('GET', '/v1/os-hosts')).body?.hosts ?? []) await api('DELETE', `/v1/os-hosts/${host.id}`);
        await deleteAggregateNamed(admin, freepool);
      },
    },
  );

  const blazar = async (token: string, ...args: string[]) =>
    (await run('/usr/bin/blazar', ['--os-auth-type', 'admin_token', '--os-endpoint', `${stack().url}/v1`, '--os-token', token, ...args], { timeout: 60_000 })).stdout;
  const field = (table: string, name: string) => new RegExp(`\\|\\s+${name}\\s+\\|\\s+(\\S+)\\s+\\|`).exec(table)?.[1];
  const asA = () => apiClient(stack().url, { 'x-auth-token': tokens.a });
  const asAdmin = () => apiClient(stack().url, { 'x-auth-token': tokens.admin });
  const lease = async (id: string) => (await asA()('GET', `/v1/leases/${id}`)).body.lease;
  const waitForStatus = (id: string, status: string, timeoutMs = 150_000) => eventually(async () => ((await lease(id))?.status === status ? true : undefined), timeoutMs, 100, () => `lease ${id} not ${status}`);
  const minute = (d: Date) => d.toISOString().slice(0, 16).replace('T', ' ');
  const boot = async (clients: OpenStackClients, flavor: string): Promise<Server> => bootServer(clients, { flavor }, (id) => servers.push({ clients, id }));
  const hostOf = async (server: Server) => (await admin.nova.getServer(server.id))['OS-EXT-SRV-ATTR:host'];
  const flavorGone = (id: string) => admin.nova.getFlavor(id).then(() => false, (err: unknown) => err instanceof NotFoundError);
  const resourceClassExists = async (name: string) => {
    try {
      await admin.placement.http.get(`/resource_classes/${name}`);
      return true;
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  };
  const slotInventory = async (host: string, resourceClass: string) => {
    const [provider] = await admin.placement.listResourceProviders({ name: reservationProviderName(host) });
    return provider ? (await admin.placement.getInventories(provider.uuid)).inventories[resourceClass]?.total ?? 0 : 0;
  };

  /** What the reservation made in Nova and Placement is gone. */
  const expectAllGone = async (reservation: { id: string; server_group_id: string | null }) => {
    expect(await flavorGone(reservation.id)).toBe(true);
    expect((await admin.nova.listAggregates()).some((a) => a.name === reservation.id)).toBe(false);
    for (const host of HOSTS) expect(await slotInventory(host, reservationResourceClass(reservation.id))).toBe(0);
    // The providers made for the slots stay, empty of this class (deleting one breaks the compute that cached it, for minutes).
    expect(await resourceClassExists(reservationResourceClass(reservation.id))).toBe(false);
    expect((await admin.nova.listServerGroups({ all_projects: true })).some((g) => g.name === `reservation:${reservation.id}`)).toBe(false);
  };

  beforeAll(async () => {
    const tokenOf = async (cloud: 'leasekeeper-project-a' | 'leasekeeper-project-b' | 'leasekeeper-admin') => new KeystoneSession({ credentials: rigCredentials(cloud) }).authenticate();
    const [a, b, adminSession] = await Promise.all([tokenOf('leasekeeper-project-a'), tokenOf('leasekeeper-project-b'), tokenOf('leasekeeper-admin')]);
    tokens = { a: a.token, b: b.token, admin: adminSession.token };
    projectAId = a.projectId;
    for (const host of HOSTS) expect(await blazar(tokens.admin, 'host-create', host)).toMatch(/Created a new host:/);
  }, 120_000);
  afterEach(async () => {
    nova.clear();
    placement.clear();
    await deleteAllLeases(asAdmin());
  }, 180_000);
  afterAll(async () => {
    for (const s of servers) await s.clients.nova.deleteServer(s.id).catch(() => undefined);
    for (const id of snapshots) await admin.glance.deleteImage(id).catch(() => undefined);
    await nova?.stop();
    await placement?.stop();
  });

  it('gives three slots on three hosts to the lessee at the start (blazarclient, affinity False), a fourth server fails, project B sees nothing, and the end takes it all back', async () => {
    // The first flavor creation and the first inventory write fail with 503: retried.
    nova.inject({ method: 'POST', path: /\/flavors$/, fault: { kind: 'status', status: 503 }, times: 1 });
    placement.inject({ method: 'PUT', path: /\/resource_providers\/[^/]+\/inventories$/, fault: { kind: 'status', status: 503 }, times: 1 });
    // The client takes whole minutes: the lease is made for later, checked while pending, then
    // moved to start now and, once used, to end now (as `lease-update` does), so no test waits for a clock.
    const start = new Date(Date.now() + 3_600_000);
    const end = new Date(start.getTime() + 3_600_000);
    const created = await blazar(
      tokens.a,
      'lease-create',
      '--reservation',
      'resource_type=virtual:instance,vcpus=1,memory_mb=512,disk_gb=1,amount=3,affinity=False',
      '--start-date',
      minute(start),
      '--end-date',
      minute(end),
      uniqueName('instances'),
    );
    const leaseId = field(created, 'id')!;
    // Admitted by the API at once; the flavor, server group and aggregate are made by the workflow's hold step right after.
    const reservation = await eventually(async () => {
      const made = (await lease(leaseId)).reservations[0];
      return made.aggregate_id != null && made.server_group_id != null ? made : undefined;
    }, 60_000, 100, () => `lease ${leaseId}: its hold step made no aggregate and server group`);
    const flavorId: string = reservation.flavor_id;
    expect(reservation).toMatchObject({ resource_type: 'virtual:instance', vcpus: 1, memory_mb: 512, disk_gb: 1, amount: 3, affinity: false, flavor_id: reservation.id });
    expect(reservation.aggregate_id).toEqual(expect.any(Number));
    expect(reservation.server_group_id).toEqual(expect.any(String));
    expect([...reservation.hosts].sort()).toEqual(HOSTS);
    // Made at admission: the private flavor with Blazar's extra specs; nobody has access yet.
    const specs = await admin.nova.getFlavorExtraSpecs(flavorId);
    expect(specs).toMatchObject({ 'aggregate_instance_extra_specs:reservation': reservation.id, [`resources:${reservationResourceClass(reservation.id)}`]: '1' });
    expect((await projectA.nova.listFlavors()).map((f) => f.id)).not.toContain(flavorId);
    expect(nova.injected() + placement.injected()).toBeGreaterThanOrEqual(1);

    const startAt = Date.now();
    expect(await asA()('PUT', `/v1/leases/${leaseId}`, { start_date: 'now' })).toMatchObject({ status: 200 });
    await waitForStatus(leaseId, 'ACTIVE');
    const startLag = (await eventually(async () => ((await projectA.nova.listFlavors()).some((f) => f.id === flavorId) ? Date.now() : undefined), 30_000)) - startAt;
    for (const host of HOSTS) expect(await slotInventory(host, reservationResourceClass(reservation.id))).toBe(1);

    const booted = [await boot(projectA, `reservation:${reservation.id}`), await boot(projectA, `reservation:${reservation.id}`), await boot(projectA, `reservation:${reservation.id}`)];
    expect(booted.map((s) => s.status)).toEqual(['ACTIVE', 'ACTIVE', 'ACTIVE']);
    expect((await Promise.all(booted.map(hostOf))).sort()).toEqual(HOSTS);
    const fourth = await boot(projectA, `reservation:${reservation.id}`);
    expect(fourth.status).toBe('ERROR');
    // Project B: no such flavor for it, and no server of it.
    expect((await projectB.nova.listFlavors()).map((f) => f.id)).not.toContain(flavorId);
    await expect(projectB.nova.createServer({ name: uniqueName('b'), flavorRef: flavorId, imageRef: booted[0].image && typeof booted[0].image === 'object' ? booted[0].image.id : '', networks: 'none' })).rejects.toThrow();

    // An active lease shrinks only down to the servers its flavor runs (Blazar: never).
    const shrink = await asA()('PUT', `/v1/leases/${leaseId}`, { reservations: [{ id: reservation.id, amount: 2 }] });
    expect(shrink.status).toBe(409);
    expect(shrink.body.error_message).toContain('3 server(s) use its flavor');

    const endAt = Date.now();
    expect(await asA()('PUT', `/v1/leases/${leaseId}`, { end_date: 'now' })).toMatchObject({ status: 200 });
    await waitForStatus(leaseId, 'TERMINATED');
    const endLag = (await eventually(async () => ((await flavorGone(flavorId)) ? Date.now() : undefined), 60_000)) - endAt;
    for (const server of [...booted, fourth]) await eventually(async () => ((await admin.nova.getServer(server.id).then(() => false, (err: unknown) => err instanceof NotFoundError)) ? true : undefined), 60_000);
    await expectAllGone(reservation);
    // The hosts are otherwise untouched: still enrolled, still in the pool.
    expect(((await asAdmin()('GET', '/v1/os-hosts')).body.hosts as unknown[]).length).toBe(3);
    process.stdout.write(`instance lease: start lag ${startLag} ms (start moved to now → flavor usable by the lessee), end lag ${endLag} ms (end moved to now → servers and flavor gone)\n`);
  }, 420_000);

  it('keeps every server on one host with affinity True, and counts slots with Placement allocation ratios', async () => {
    // The fake hosts have 10 vCPUs at a ratio of 16: 160 usable. Slots of 100 vCPUs fit one per
    // host (Blazar, counting raw vCPUs, would fit none); a fourth does not fit.
    const big = await asA()('POST', '/v1/leases', {
      name: uniqueName('big'),
      start_date: inSeconds(3600),
      end_date: inSeconds(7200),
      reservations: [{ resource_type: 'virtual:instance', vcpus: 100, memory_mb: 512, disk_gb: 1, amount: 3, affinity: null }],
    });
    expect(big.status).toBe(201);
    expect(big.body.lease.reservations[0].hosts).toHaveLength(3);
    const more = await asA()('POST', '/v1/leases', {
      name: uniqueName('more'),
      start_date: inSeconds(3600),
      end_date: inSeconds(7200),
      reservations: [{ resource_type: 'virtual:instance', vcpus: 100, memory_mb: 512, disk_gb: 1, amount: 1, affinity: null }],
    });
    expect(more.status).toBe(409);
    expect(more.body.error_message).toContain('Not enough hosts available.');
    expect(more.body.earliest_start).toEqual(expect.any(String));
    await deleteAllLeases(asAdmin());

    const together = await asA()('POST', '/v1/leases', {
      name: uniqueName('together'),
      start_date: 'now',
      end_date: inSeconds(3600),
      reservations: [{ resource_type: 'virtual:instance', vcpus: 1, memory_mb: 512, disk_gb: 1, amount: 2, affinity: 'True' }],
    });
    expect(together.status).toBe(201);
    const reservation = together.body.lease.reservations[0];
    expect(reservation.hosts).toHaveLength(1);
    await waitForStatus(together.body.lease.id, 'ACTIVE');
    const flavor = `reservation:${reservation.id}`;
    await eventually(async () => ((await projectA.nova.listFlavors()).some((f) => f.name === flavor) ? true : undefined), 30_000);
    const pair = [await boot(projectA, flavor), await boot(projectA, flavor)];
    expect(pair.map((s) => s.status)).toEqual(['ACTIVE', 'ACTIVE']);
    expect(new Set(await Promise.all(pair.map(hostOf)))).toEqual(new Set(reservation.hosts));
    // Growing the active lease: a third slot on the same host, usable at once.
    const grown = await asA()('PUT', `/v1/leases/${together.body.lease.id}`, { reservations: [{ id: reservation.id, amount: 3 }] });
    expect(grown.status).toBe(200);
    expect(await slotInventory(reservation.hosts[0], reservationResourceClass(reservation.id))).toBe(3);
    expect((await boot(projectA, flavor)).status).toBe('ACTIVE');
    // Deleted while active, servers running: the servers go first, then everything the reservation made.
    await deleteAllLeases(asAdmin());
    await expectAllGone(reservation);
  }, 300_000);
  it('books an existing flavor with flavor:instance through blazarclient\'s library, copying its extra specs, and refuses a flavor the project may not use', async () => {
    const source = await admin.nova.createFlavor({ name: uniqueName('source'), vcpus: 2, ram: 512, disk: 1, ephemeral: 1, is_public: true });
    const hidden = await admin.nova.createFlavor({ name: uniqueName('hidden'), vcpus: 1, ram: 512, disk: 1, is_public: false });
    try {
      await admin.nova.setFlavorExtraSpecs(source.id, { 'resources:MEMORY_MB': '1024', 'trait:COMPUTE_STATUS_DISABLED': 'forbidden', 'hw:watchdog_action': 'reset' });
      const script = [
        'import json, sys',
        'from blazarclient import client',
        'c = client.Client(1, blazar_url=sys.argv[1], auth_token=sys.argv[2])',
        'print(json.dumps(c.lease.create(sys.argv[3], "now", sys.argv[4], [{"resource_type": "flavor:instance", "flavor_id": sys.argv[5], "amount": 2}], [])))',
      ].join('\n');
      const viaLibrary = async (flavorId: string) => run('/usr/bin/python3', ['-c', script, `${stack().url}/v1`, tokens.a, uniqueName('flavor-lease'), inSeconds(3600), flavorId], { timeout: 60_000 });
      const refused = await viaLibrary(hidden.id).then(() => '', (err: { stderr: string }) => err.stderr);
      expect(refused).toContain(`Flavor ${hidden.id} could not be found`);
      const created = JSON.parse((await viaLibrary(source.id)).stdout);
      const reservation = created.reservations[0];
      expect(reservation).toMatchObject({ resource_type: 'flavor:instance', flavor_id: reservation.id, source_flavor_id: source.id, amount: 2 });
      expect(reservation.hosts).toHaveLength(1); // packed
      const specs = await admin.nova.getFlavorExtraSpecs(reservation.id);
      expect(specs).toMatchObject({ 'resources:MEMORY_MB': '1024', 'hw:watchdog_action': 'reset', [`resources:${reservationResourceClass(reservation.id)}`]: '1' });
      const copy = await admin.nova.getFlavor(reservation.id);
      expect([copy.vcpus, copy.ram, copy.disk, copy['OS-FLV-EXT-DATA:ephemeral']]).toEqual([2, 512, 1, 1]);
      await waitForStatus(created.id, 'ACTIVE');
      const flavor = `reservation:${reservation.id}`;
      await eventually(async () => ((await projectA.nova.listFlavors()).some((f) => f.name === flavor) ? true : undefined), 30_000);
      expect((await boot(projectA, flavor)).status).toBe('ACTIVE');
      expect((await boot(projectA, flavor)).status).toBe('ACTIVE');
      expect((await boot(projectA, flavor)).status).toBe('ERROR');
      await deleteAllLeases(asAdmin());
      await expectAllGone(reservation);
    } finally {
      await admin.nova.deleteFlavor(source.id).catch(() => undefined);
      await admin.nova.deleteFlavor(hidden.id).catch(() => undefined);
    }
  }, 300_000);

  it('takes an image of each server before the end (before_end snapshot); an end whose servers are not deleted fails after the time-out, naming them', async () => {
    const leaseName = uniqueName('snap');
    const created = await asA()('POST', '/v1/leases', {
      name: leaseName,
      start_date: 'now',
      end_date: inSeconds(7200), // before_end (end − 60 min) comes after the start, so the server exists by then
      reservations: [{ resource_type: 'virtual:instance', vcpus: 1, memory_mb: 512, disk_gb: 1, amount: 1, before_end: 'snapshot' }],
    });
    expect(created.status).toBe(201);
    const { id: leaseId, reservations } = created.body.lease;
    const reservation = reservations[0];
    await waitForStatus(leaseId, 'ACTIVE');
    const flavor = `reservation:${reservation.id}`;
    await eventually(async () => ((await projectA.nova.listFlavors()).some((f) => f.name === flavor) ? true : undefined), 30_000);
    const server = await boot(projectA, flavor);
    expect(server.status).toBe('ACTIVE');
    const endNow = await asA()('PUT', `/v1/leases/${leaseId}`, { end_date: 'now' });
    expect([endNow.status, endNow.body.error_message]).toEqual([200, undefined]);
    await waitForStatus(leaseId, 'TERMINATED');
    const images = await admin.glance.listImages({ name: snapshotName(server.name, leaseName), visibility: 'all' });
    images.forEach((image) => snapshots.push(image.id));
    expect(images.map((image) => [image.leasekeeper_lease, image.leasekeeper_reservation, image.leasekeeper_server])).toEqual([[leaseId, reservation.id, server.id]]);
    expect((await lease(leaseId)).events.map((e: { event_type: string; status: string }) => [e.event_type, e.status])).toEqual([
      ['start_lease', 'DONE'],
      ['before_end_lease', 'DONE'],
      ['end_lease', 'DONE'],
    ]);
    await expectAllGone(reservation);

    // Nova accepts the deletes but never carries them out: the end waits out its time-out, then ERROR.
    const stuck = await asA()('POST', '/v1/leases', {
      name: uniqueName('stuck'),
      start_date: 'now',
      end_date: inSeconds(3600),
      reservations: [{ resource_type: 'virtual:instance', vcpus: 1, memory_mb: 512, disk_gb: 1, amount: 1 }],
    });
    expect(stuck.status).toBe(201);
    const stuckReservation = stuck.body.lease.reservations[0];
    await waitForStatus(stuck.body.lease.id, 'ACTIVE');
    await eventually(async () => ((await projectA.nova.listFlavors()).some((f) => f.name === `reservation:${stuckReservation.id}`) ? true : undefined), 30_000);
    const kept = await boot(projectA, `reservation:${stuckReservation.id}`);
    expect(kept.status).toBe('ACTIVE');
    nova.inject({ method: 'DELETE', path: /\/servers\/[0-9a-f-]+$/, fault: { kind: 'status', status: 202, body: {} }, times: Infinity });
    const ended = Date.now();
    expect(await asA()('PUT', `/v1/leases/${stuck.body.lease.id}`, { end_date: 'now' })).toMatchObject({ status: 200 });
    await waitForStatus(stuck.body.lease.id, 'ERROR', SERVER_DELETE_TIMEOUT_MS + 60_000);
    expect(Date.now() - ended).toBeGreaterThanOrEqual(SERVER_DELETE_TIMEOUT_MS);
    expect((await lease(stuck.body.lease.id)).status_reason).toBe(`end failed: 1 server(s) of flavor reservation:${stuckReservation.id} still there ${SERVER_DELETE_TIMEOUT_MS / 1000} s after the end`);
    expect((await admin.nova.getServer(kept.id)).status).toBe('ACTIVE');

    // What an operator does next: the server goes, then what the reservation made.
    nova.clear();
    await admin.nova.deleteServer(kept.id);
    await admin.nova.waitForServerDeleted(kept.id, { timeoutMs: 60_000 });
    const computeNodes = await Promise.all(HOSTS.map(async (host) => ({ host, uuid: (await providerNamed(admin.placement, host)).uuid })));
    const hostSlots = computeNodes.map(({ host, uuid }) => ({ computeHost: host, hypervisorHostname: host, computeNodeUuid: uuid, slots: 0 }));
    await eventually(async () => ((await removeReservationResources(admin, { reservationId: stuckReservation.id }, hostSlots)) ? true : undefined), 30_000);
    await expectAllGone(stuckReservation);
  }, 300_000);
});
