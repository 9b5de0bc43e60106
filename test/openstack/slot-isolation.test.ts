/**
 * Hosts carrying instance slots take only servers of a reservation flavor, with the rig's real
 * scheduler (the Nova-native layout: the slot hosts' trait, required by the reservation aggregates
 * and flavors, under `enable_isolated_aggregate_filtering`) and under BlazarFilter's rules as
 * written (test/support/blazar-filter.ts, on the aggregates Nova lists for the host). fake-1..3 are
 * all enrolled, so an ordinary server has nowhere to go: blazar-tempest-plugin's scenarios
 * (`test_instance_reservation`, `test_flavor_instance_reservation`) expect it in ERROR.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import { promisify } from 'node:util';
import { KeystoneSession, serverHost, type OpenStackClients, type Server } from '../../src/openstack';
import { flavorInstancePlugin } from '../../src/resources/flavor-instance';
import { virtualInstancePlugin } from '../../src/resources/virtual-instance';
import { reservationProviderName, SLOT_HOST_TRAIT } from '../../src/resources/virtual-instance/nova-resources';
import { BLAZAR_FILTER_DEFAULTS, blazarHostPasses, type FilterRequest } from '../support/blazar-filter';
import { enrolHost } from '../../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { bootServer, CLOUDS_FILE, deleteAggregateNamed, deleteServers, FLAVOR, rigClients, rigCredentials, uniqueName } from './support';

const run = promisify(execFile);
const HOSTS = ['fake-1', 'fake-2', 'fake-3'];

describe('hosts carrying instance slots', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const projectB = rigClients('leasekeeper-project-b');
  const freepool = uniqueName('freepool');
  const filterOptions = { ...BLAZAR_FILTER_DEFAULTS, aggregate_freepool_name: freepool, preemptible_aggregate: freepool };
  const servers: Array<{ clients: OpenStackClients; id: string }> = [];
  let projectAId: string;
  let projectBId: string;

  const stack = useTestStack(
    () => ({
      env: { LK_FREEPOOL_AGGREGATE: freepool },
      withPool: (pool) => {
        const deps = {
          pool,
          settings: { cleaningMs: 0, capacityRefreshMs: 0 },
          cloud: () => admin,
          projectCloud: (id: string) => (id === projectAId ? projectA : id === projectBId ? projectB : admin),
          serverDeleteTimeoutMs: 60_000,
        };
        return [virtualInstancePlugin(deps), flavorInstancePlugin(deps)];
      },
      openstack: () => admin,
    }),
    {
      timeoutMs: 180_000,
      beforeStop: async () => {
        await deleteAllLeases(api);
        await deleteServers(servers);
        for (const host of (await api('GET', '/v1/os-hosts')).body?.hosts ?? []) await api('DELETE', `/v1/os-hosts/${host.id}`);
        await deleteAggregateNamed(admin, freepool);
      },
    },
  );
  const api = apiClient(() => stack().url);
  const as = (projectId: string) => apiClient(stack().url, { 'x-project-id': projectId, 'x-user-id': `user-of-${projectId}` });

  beforeAll(async () => {
    projectAId = (await new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-a') }).authenticate()).projectId;
    projectBId = (await new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-b') }).authenticate()).projectId;
    for (const host of HOSTS) await enrolHost(api, host);
  }, 120_000);
  afterEach(async () => {
    await deleteAllLeases(api, 180_000);
    await deleteServers(servers.splice(0));
  }, 240_000);

  const boot = (clients: OpenStackClients, flavor: string): Promise<Server> => bootServer(clients, { flavor }, (id) => servers.push({ clients, id }));
  const hostOf = async (server: Server) => serverHost(await admin.nova.getServer(server.id));

  /** An ACTIVE lease of the project with this one reservation, from now; its reservation once the lessee sees the flavor. */
  async function activeReservation(projectId: string, lessee: OpenStackClients, reservation: Record<string, unknown>) {
    const created = await as(projectId)('POST', '/v1/leases', { name: uniqueName('slots'), start_date: 'now', end_date: inSeconds(3600), reservations: [reservation] });
    expect([created.status, created.body.error_message]).toEqual([201, undefined]);
    const { id } = created.body.lease;
    await eventually(async () => ((await as(projectId)('GET', `/v1/leases/${id}`)).body.lease.status === 'ACTIVE' ? true : undefined), 120_000, 200, () => `lease ${id} not ACTIVE`);
    const made = created.body.lease.reservations[0];
    const flavor = `reservation:${made.id}`;
    await eventually(async () => ((await lessee.nova.listFlavors()).some((f) => f.name === flavor) ? true : undefined), 30_000);
    return { leaseId: id as string, id: made.id as string, flavor, hosts: made.hosts as string[] };
  }

  /** BlazarFilter's verdict on `host` for a request of the project with the flavor's extra specs (no hint). */
  const blazarFilterPasses = async (host: string, projectId: string, flavorId?: string) => {
    const request: FilterRequest = { projectId, flavorExtraSpecs: flavorId ? await admin.nova.getFlavorExtraSpecs(flavorId) : {} };
    return blazarHostPasses((await admin.nova.listAggregates()).filter((a) => a.hosts.includes(host)), request, filterOptions);
  };

  /** The lessee's server of the reservation flavor runs on a slot host; one of an ordinary flavor fails, in both layouts. */
  async function expectOnlyTheReservationFlavor(reservation: { id: string; flavor: string; hosts: string[] }) {
    const slot = await boot(projectA, reservation.flavor);
    expect(slot.status).toBe('ACTIVE');
    expect(reservation.hosts).toContain(await hostOf(slot));
    const ordinary = await boot(projectA, FLAVOR);
    expect(ordinary.status).toBe('ERROR');
    expect(ordinary.fault?.message).toMatch(/No valid host/);
    for (const host of reservation.hosts) {
      expect(await blazarFilterPasses(host, projectAId)).toBe(false);
      expect(await blazarFilterPasses(host, projectAId, reservation.id)).toBe(true);
    }
  }

  it('virtual:instance: an ordinary server of the lessee ends in ERROR (no valid host), the reservation flavor boots', async () => {
    const reservation = await activeReservation(projectAId, projectA, { resource_type: 'virtual:instance', vcpus: 1, memory_mb: 512, disk_gb: 1, amount: 1, affinity: false });
    await expectOnlyTheReservationFlavor(reservation);

    // The lessee's own image asking for the trait does not let an ordinary flavor in: Placement
    // looks for it on the providers the server draws from, and only reservation flavors draw from the slot provider.
    const file = `/tmp/${uniqueName('image')}`;
    await fs.writeFile(file, 'leasekeeper fake image\n');
    const asLessee = (...args: string[]) => run('/usr/bin/openstack', ['--os-cloud', 'leasekeeper-project-a', ...args], { timeout: 60_000, env: { ...process.env, OS_CLIENT_CONFIG_FILE: CLOUDS_FILE } });
    const image = JSON.parse(
      (await asLessee('image', 'create', '--disk-format', 'raw', '--container-format', 'bare', '--file', file, '--property', `trait:${SLOT_HOST_TRAIT}=required`, '-f', 'json', uniqueName('trait-image'))).stdout,
    ) as { id: string };
    try {
      const [flavor] = (await projectA.nova.listFlavors()).filter((f) => f.name === FLAVOR);
      const { id } = await projectA.nova.createServer({ name: uniqueName('image-trait'), flavorRef: flavor.id, imageRef: image.id, networks: 'none' });
      servers.push({ clients: projectA, id });
      const smuggled = await projectA.nova.waitForServer(id, (s) => s.status === 'ACTIVE' || s.status === 'ERROR', { timeoutMs: 90_000, failOnError: false });
      expect([smuggled.status, smuggled.fault?.message]).toEqual(['ERROR', expect.stringMatching(/No valid host/)]);
    } finally {
      await deleteServers(servers.splice(0));
      await admin.glance.deleteImage(image.id).catch(() => undefined);
      await fs.rm(file, { force: true });
    }
  }, 300_000);

  it('flavor:instance: an ordinary server of the lessee ends in ERROR (no valid host), the reservation flavor boots', async () => {
    const source = await admin.nova.createFlavor({ name: uniqueName('source'), vcpus: 1, ram: 512, disk: 1, is_public: true });
    try {
      const reservation = await activeReservation(projectAId, projectA, { resource_type: 'flavor:instance', flavor_id: source.id, amount: 1 });
      await expectOnlyTheReservationFlavor(reservation);
    } finally {
      await deleteAllLeases(api, 180_000);
      await admin.nova.deleteFlavor(source.id).catch(() => undefined);
    }
  }, 300_000);

  it("two projects' slots on one host: A's ordinary servers never land there, B boots every slot it booked, and the host is open again after the leases", async () => {
    const a = await activeReservation(projectAId, projectA, { resource_type: 'virtual:instance', vcpus: 1, memory_mb: 512, disk_gb: 1, amount: 1 });
    const b = await activeReservation(projectBId, projectB, { resource_type: 'virtual:instance', vcpus: 1, memory_mb: 512, disk_gb: 1, amount: 2 });
    // Packed: B's slots share A's host, so the host is in both reservations' aggregates.
    expect(a.hosts).toHaveLength(1);
    expect(b.hosts).toEqual(a.hosts);
    const [shared] = a.hosts;

    const ordinary = [await boot(projectA, FLAVOR), await boot(projectA, FLAVOR)];
    expect(ordinary.map((s) => s.status)).toEqual(['ERROR', 'ERROR']);
    for (const server of ordinary) expect(await hostOf(server)).toBeNull();
    const ofB = [await boot(projectB, b.flavor), await boot(projectB, b.flavor)];
    expect(ofB.map((s) => s.status)).toEqual(['ACTIVE', 'ACTIVE']);
    const ofA = await boot(projectA, a.flavor);
    expect(ofA.status).toBe('ACTIVE');
    expect(await Promise.all([...ofB, ofA].map(hostOf))).toEqual([shared, shared, shared]);
    // BlazarFilter's rules: no ordinary server of either project, both reservation flavors.
    expect(await blazarFilterPasses(shared, projectAId)).toBe(false);
    expect(await blazarFilterPasses(shared, projectBId)).toBe(false);
    expect(await blazarFilterPasses(shared, projectAId, a.id)).toBe(true);
    expect(await blazarFilterPasses(shared, projectBId, b.id)).toBe(true);

    // A's lease ends first: B's slots keep the host closed to other flavors (B's own too, which its
    // aggregate's filter_tenant_id lets in).
    const slotProvider = (await admin.placement.listResourceProviders({ name: reservationProviderName(shared) }))[0];
    const providerTraits = async () => (await admin.placement.getProviderTraits(slotProvider.uuid)).traits;
    expect((await as(projectAId)('PUT', `/v1/leases/${a.leaseId}`, { end_date: 'now' })).status).toBe(200);
    await eventually(async () => ((await as(projectAId)('GET', `/v1/leases/${a.leaseId}`)).body.lease.status === 'TERMINATED' ? true : undefined), 120_000);
    expect(await providerTraits()).toContain(SLOT_HOST_TRAIT);
    expect((await boot(projectB, FLAVOR)).status).toBe('ERROR');

    // After the leases: the host is in no aggregate that requires the trait, its slot provider has
    // no trait left, and, out of the pool, it takes an ordinary server again.
    await deleteAllLeases(api, 180_000);
    const requiring = (await admin.nova.listAggregates()).filter((agg) => agg.hosts.includes(shared) && agg.metadata?.[`trait:${SLOT_HOST_TRAIT}`]);
    expect(requiring.map((agg) => agg.name)).toEqual([]);
    expect(await providerTraits()).not.toContain(SLOT_HOST_TRAIT);
    const hostId = ((await api('GET', '/v1/os-hosts')).body.hosts as Array<{ id: string; hypervisor_hostname: string }>).find((h) => h.hypervisor_hostname === shared)!.id;
    expect((await api('DELETE', `/v1/os-hosts/${hostId}`)).status).toBe(204);
    const again = await bootServer(admin, { host: shared }, (id) => servers.push({ clients: admin, id }));
    expect([again.status, await hostOf(again)]).toEqual(['ACTIVE', shared]);
  }, 420_000);
});
