/**
 * Healing of instance reservations (`virtual:instance`) with the rig's Nova and Placement: when an
 * enrolled host holding slots is forced down, a pending reservation's slots are booked again on the
 * hosts that are up; an active one's slots move to another host with the inventory: the new host
 * joins the reservation's aggregate with its slot as inventory, the failed one leaves it keeping
 * only the slot its server still holds. Slots changed by hand in Placement or Nova (inventory, the
 * aggregate) are put back by the monitor's drift check. Every service is put back at the end.
 */
import { KeystoneSession, type OpenStackClients, type Server } from '../../src/openstack';
import { physicalHostWatch } from '../../src/resources/physical-host/health';
import { virtualInstancePlugin } from '../../src/resources/virtual-instance';
import { reservationProviderName, reservationResourceClass, SLOT_HOST_TRAIT, SLOT_TRAIT_SPEC } from '../../src/resources/virtual-instance/nova-resources';
import { enrolHost } from '../../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { bootServer, computeForcing, deleteAggregateNamed, rigClients, rigCredentials, uniqueName } from './support';

const HOSTS = ['fake-1', 'fake-2', 'fake-3'];

describe('healing instance reservations with the rig', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const freepool = uniqueName('freepool');
  const failedAggregate = uniqueName('failed');
  const { forceDown, restoreAll } = computeForcing(admin);
  const servers: Array<{ clients: OpenStackClients; id: string }> = [];
  let projectAId = '';
  let asA: ReturnType<typeof apiClient>;

  const stack = useTestStack(
    () => ({
      env: { LK_FREEPOOL_AGGREGATE: freepool, LK_FAILED_AGGREGATE: failedAggregate, LK_HOST_MONITOR_INTERVAL_SECONDS: '0.5', LK_HOST_FAIL_GRACE_SECONDS: '1', LK_HEALING_RETRY_MINUTES: '0.05', LK_DRIFT_CHECK_MINUTES: '0.02' },
      withPool: (pool) => [
        virtualInstancePlugin({ pool, settings: { cleaningMs: 0, capacityRefreshMs: 0 }, cloud: () => admin, projectCloud: (id) => (id === projectAId ? projectA : admin), serverDeleteTimeoutMs: 30_000 }),
      ],
      hostWatch: (pool) => physicalHostWatch({ pool, source: { nova: () => admin.nova }, freepool, failed: { name: failedAggregate, closedProjectId: 'leasekeeper-freepool' } }),
      openstack: () => admin,
    }),
    {
      beforeStop: async () => {
        await restoreAll();
        const api = apiClient(stack().url);
        await deleteAllLeases(api);
        for (const s of servers) await s.clients.nova.deleteServer(s.id).catch(() => undefined);
        for (const host of (await api('GET', '/v1/os-hosts')).body?.hosts ?? []) await api('DELETE', `/v1/os-hosts/${host.id}`);
        await deleteAggregateNamed(admin, freepool);
        await deleteAggregateNamed(admin, failedAggregate);
      },
      timeoutMs: 240_000,
    },
  );

  const lease = async (id: string) => (await asA('GET', `/v1/leases/${id}`)).body.lease;
  const until = <T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 60_000) => eventually(check, timeoutMs, 200, () => `not yet: ${what}`);
  const slotInventory = async (host: string, resourceClass: string) => {
    const [provider] = await admin.placement.listResourceProviders({ name: reservationProviderName(host) });
    return provider ? ((await admin.placement.getInventories(provider.uuid)).inventories[resourceClass]?.total ?? 0) : 0;
  };
  const aggregateHosts = async (name: string) => [...((await admin.nova.listAggregates()).find((a) => a.name === name)?.hosts ?? [])].sort();
  const instanceLease = (start: string, end: string, amount: number) =>
    asA('POST', '/v1/leases', {
      name: uniqueName('slots'),
      start_date: start,
      end_date: end,
      reservations: [{ resource_type: 'virtual:instance', vcpus: 1, memory_mb: 512, disk_gb: 1, amount, affinity: false }],
    });

  /** An instance lease of `amount` slots from now, once ACTIVE. */
  async function activeInstanceLease(amount: number): Promise<{ id: string; reservationId: string; resourceClass: string }> {
    const created = await instanceLease('now', inSeconds(3600), amount);
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    const reservationId: string = created.body.lease.reservations[0].id;
    await until('the lease active', async () => ((await lease(id)).status === 'ACTIVE' ? true : undefined), 120_000);
    return { id, reservationId, resourceClass: reservationResourceClass(reservationId) };
  }

  beforeAll(async () => {
    projectAId = (await new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-a') }).authenticate()).projectId;
    asA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a' });
    const api = apiClient(stack().url);
    for (const host of HOSTS) await enrolHost(api, host);
  }, 120_000);

  afterEach(async () => {
    await restoreAll();
    await deleteAllLeases(asA);
  }, 240_000);

  it('books the slots of a pending reservation again on hosts that are up', async () => {
    const created = await instanceLease(inSeconds(3600), inSeconds(7200), 2);
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    const [failing] = [...created.body.lease.reservations[0].hosts].sort();
    await forceDown(failing, true);
    const healed = await until('the slots moved', async () => {
      const json = await lease(id);
      return json.reservations[0].hosts.includes(failing) ? undefined : json;
    });
    expect(healed.reservations[0].hosts).toHaveLength(2);
    expect(healed.reservations[0]).toMatchObject({ resources_changed: true, missing_resources: false });
    expect(healed.degraded).toBe(true);
  }, 240_000);

  it('puts the slots of an active reservation back in Placement and in its aggregate when changed by hand', async () => {
    const { id, reservationId, resourceClass } = await activeInstanceLease(2);
    const [first, second] = [...(await lease(id)).reservations[0].hosts].sort();
    await until('the slots open', async () => ((await slotInventory(first, resourceClass)) === 1 && (await aggregateHosts(reservationId)).includes(second) ? true : undefined));

    // By hand: three slots on the first host, the second host out of the reservation's aggregate.
    const [provider] = await admin.placement.listResourceProviders({ name: reservationProviderName(first) });
    const current = await admin.placement.getInventories(provider.uuid);
    await admin.placement.putInventories(provider.uuid, current.resource_provider_generation, { ...current.inventories, [resourceClass]: { ...current.inventories[resourceClass], total: 3 } });
    const aggregate = (await admin.nova.listAggregates()).find((a) => a.name === reservationId)!;
    await admin.nova.removeHostFromAggregate(aggregate.id, second);
    expect(await slotInventory(first, resourceClass)).toBe(3);

    await until('the slots put back', async () => ((await slotInventory(first, resourceClass)) === 1 && (await aggregateHosts(reservationId)).includes(second) ? true : undefined));
    expect(await aggregateHosts(reservationId)).toEqual([first, second]);
    expect(await slotInventory(second, resourceClass)).toBe(1);
  }, 240_000);

  it("puts the slot hosts' trait back on the reservation's aggregate and the slot provider when removed by hand", async () => {
    const { id, reservationId, resourceClass } = await activeInstanceLease(1);
    const [host] = (await lease(id)).reservations[0].hosts;
    await until('the slot open', async () => ((await slotInventory(host, resourceClass)) === 1 ? true : undefined));
    const [provider] = await admin.placement.listResourceProviders({ name: reservationProviderName(host) });
    const isolated = async () => {
      const aggregate = (await admin.nova.listAggregates()).find((a) => a.name === reservationId)!;
      return [aggregate.metadata?.[SLOT_TRAIT_SPEC] === 'required', (await admin.placement.getProviderTraits(provider.uuid)).traits.includes(SLOT_HOST_TRAIT)];
    };
    expect(await isolated()).toEqual([true, true]);

    // By hand: the aggregate no longer requires the trait (ordinary servers could land), the provider lost it.
    const aggregate = (await admin.nova.listAggregates()).find((a) => a.name === reservationId)!;
    await admin.nova.setAggregateMetadata(aggregate.id, { [SLOT_TRAIT_SPEC]: null });
    const traits = await admin.placement.getProviderTraits(provider.uuid);
    await admin.placement.putProviderTraits(provider.uuid, traits.resource_provider_generation, traits.traits.filter((t) => t !== SLOT_HOST_TRAIT));
    expect(await isolated()).toEqual([false, false]);

    await until('the trait put back', async () => ((await isolated()).every(Boolean) ? true : undefined));
  }, 240_000);

  it('moves a slot of an active reservation off a failed host, with its inventory, and leaves the slot its server holds there', async () => {
    const { id, reservationId, resourceClass } = await activeInstanceLease(2);
    const held: string[] = [...(await lease(id)).reservations[0].hosts].sort();
    const server: Server = await bootServer(projectA, { flavor: `reservation:${reservationId}` }, (serverId) => servers.push({ clients: projectA, id: serverId }));
    expect(server.status).toBe('ACTIVE');
    const failing = (await admin.nova.getServer(server.id))['OS-EXT-SRV-ATTR:host'] as string;
    expect(held).toContain(failing);
    const [spare] = HOSTS.filter((h) => !held.includes(h));

    await forceDown(failing, true);
    const healed = await until('the slot moved', async () => {
      const json = await lease(id);
      return json.reservations[0].hosts.includes(failing) ? undefined : json;
    });
    expect([...healed.reservations[0].hosts].sort()).toEqual(HOSTS.filter((h) => h !== failing));
    expect(healed.reservations[0]).toMatchObject({ missing_resources: false, resources_changed: false });
    expect(healed).toMatchObject({ status: 'ACTIVE', degraded: false });
    // Nova and Placement follow the booking: the spare host serves the flavor; the failed host keeps only its server's slot.
    expect(await aggregateHosts(reservationId)).toEqual(HOSTS.filter((h) => h !== failing));
    expect(await slotInventory(spare, resourceClass)).toBe(1);
    expect(await slotInventory(failing, resourceClass)).toBe(1);
    const { usages } = await admin.placement.getProviderUsages((await admin.placement.listResourceProviders({ name: reservationProviderName(failing) }))[0].uuid);
    expect(usages[resourceClass]).toBe(1);

    // Back up: nothing moves back, and the lease stays whole.
    await forceDown(failing, false);
    await until('the host up', async () => ((await apiClient(stack().url)('GET', '/v1/os-hosts')).body.hosts.every((h: { state: string }) => h.state === 'up') ? true : undefined));
    expect([...(await lease(id)).reservations[0].hosts].sort()).toEqual(HOSTS.filter((h) => h !== failing));
    expect((await lease(id)).degraded).toBe(false);
  }, 300_000);
});
