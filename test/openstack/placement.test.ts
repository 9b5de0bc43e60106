/** Placement against the rig: providers, inventories, traits, aggregates, candidates, allocations with generations. */
import { randomUUID } from 'node:crypto';
import { ConflictError, isRetryable, type KeystoneSession, PLACEMENT_CONCURRENT_UPDATE } from '../../src/openstack';
import { bandwidthProviderName, Cleanup, providerNamed, rigClients, uniqueName } from './support';

const admin = rigClients('leasekeeper-admin');
const { placement } = admin;
const cleanup = new Cleanup();

afterAll(async () => {
  await cleanup.run();
});

test('a consumer allocated across a compute and a bandwidth provider; a stale generation is a retryable Conflict', async () => {
  const compute = await providerNamed(placement, 'fake-3');
  const bandwidth = await providerNamed(placement, bandwidthProviderName('fake-3'));
  expect(bandwidth.root_provider_uuid).toBe(compute.uuid);
  const { projectId, userId } = await (admin.session as KeystoneSession).authenticate();

  const consumer = randomUUID();
  cleanup.add(`allocations of ${consumer}`, () => placement.deleteAllocations(consumer));
  const before = (await placement.getProviderUsages(bandwidth.uuid)).usages.NET_BW_EGR_KILOBIT_PER_SEC ?? 0;

  expect(await placement.getAllocations(consumer)).toEqual({ allocations: {} });
  await placement.putAllocations(consumer, {
    allocations: {
      [compute.uuid]: { resources: { VCPU: 1, MEMORY_MB: 256 } },
      [bandwidth.uuid]: { resources: { NET_BW_EGR_KILOBIT_PER_SEC: 1000 } },
    },
    project_id: projectId,
    user_id: userId,
    consumer_generation: null,
    consumer_type: 'LEASE',
  });
  const held = await placement.getAllocations(consumer);
  expect(held).toMatchObject({
    project_id: projectId,
    user_id: userId,
    consumer_type: 'LEASE',
    allocations: {
      [compute.uuid]: { resources: { VCPU: 1, MEMORY_MB: 256 } },
      [bandwidth.uuid]: { resources: { NET_BW_EGR_KILOBIT_PER_SEC: 1000 } },
    },
  });
  const generation = held.consumer_generation ?? -1;
  expect(generation).toBeGreaterThanOrEqual(0);
  expect((await placement.getProviderUsages(bandwidth.uuid)).usages.NET_BW_EGR_KILOBIT_PER_SEC).toBe(before + 1000);

  // Writing as if the consumer were new, or with an old generation, is a generation conflict.
  for (const stale of [null, generation + 1]) {
    const error = await placement
      .putAllocations(consumer, {
        allocations: { [compute.uuid]: { resources: { VCPU: 2 } } },
        project_id: projectId,
        user_id: userId,
        consumer_generation: stale,
        consumer_type: 'LEASE',
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConflictError);
    expect(error).toMatchObject({ status: 409, code: PLACEMENT_CONCURRENT_UPDATE, service: 'placement', method: 'PUT', retryable: true });
    expect((error as ConflictError).requestId).toMatch(/^req-/);
    expect(isRetryable(error)).toBe(true);
  }

  // With the generation read last, the write goes through and replaces the allocations.
  await placement.putAllocations(consumer, {
    allocations: { [compute.uuid]: { resources: { VCPU: 2, MEMORY_MB: 256 } } },
    project_id: projectId,
    user_id: userId,
    consumer_generation: generation,
    consumer_type: 'LEASE',
  });
  const replaced = await placement.getAllocations(consumer);
  expect(Object.keys(replaced.allocations)).toEqual([compute.uuid]);
  expect(replaced.consumer_generation).toBe(generation + 1);
  const usages = await placement.getProjectUsages({ project_id: projectId, consumer_type: 'LEASE' });
  expect(usages.LEASE).toMatchObject({ VCPU: expect.any(Number), consumer_count: expect.any(Number) });

  await placement.deleteAllocations(consumer);
  expect(await placement.getAllocations(consumer)).toEqual({ allocations: {} });
  expect((await placement.getProviderUsages(bandwidth.uuid)).usages.NET_BW_EGR_KILOBIT_PER_SEC ?? 0).toBe(before);
});

test('provider filters and allocation candidates', async () => {
  const fake1 = await providerNamed(placement, 'fake-1');
  const tree = await placement.listResourceProviders({ in_tree: fake1.uuid });
  // An instance lease's slot provider (blazar_fake-1) stays once made, empty, as Blazar's does: not Nova's or Neutron's.
  expect(tree.map((p) => p.name).filter((name) => !name.startsWith('blazar_')).sort()).toEqual(['fake-1', 'fake-1:Open vSwitch agent', 'fake-1:Open vSwitch agent:br-ex']);

  const withBandwidth = await placement.listResourceProviders({
    resources: { NET_BW_EGR_KILOBIT_PER_SEC: 1000 },
    required: ['CUSTOM_PHYSNET_PHYSNET1', 'CUSTOM_VNIC_TYPE_NORMAL'],
  });
  expect(withBandwidth.map((p) => p.name).sort()).toEqual(['fake-1', 'fake-2', 'fake-3'].map(bandwidthProviderName));
  expect(await placement.listResourceProviders({ required: ['!CUSTOM_PHYSNET_PHYSNET1'], resources: { NET_BW_EGR_KILOBIT_PER_SEC: 1 } })).toEqual([]);

  const candidates = await placement.getAllocationCandidates({
    resources: { VCPU: 1, MEMORY_MB: 512 },
    groups: { _bw: { resources: { NET_BW_EGR_KILOBIT_PER_SEC: 1000 }, required: ['CUSTOM_PHYSNET_PHYSNET1'] } },
    group_policy: 'none',
    in_tree: fake1.uuid,
  });
  expect(candidates.allocation_requests).toHaveLength(1);
  const [request] = candidates.allocation_requests;
  const bandwidth1 = await providerNamed(placement, bandwidthProviderName('fake-1'));
  expect(request?.allocations).toEqual({
    [fake1.uuid]: { resources: { VCPU: 1, MEMORY_MB: 512 } },
    [bandwidth1.uuid]: { resources: { NET_BW_EGR_KILOBIT_PER_SEC: 1000 } },
  });
  expect(request?.mappings?._bw).toEqual([bandwidth1.uuid]);
  expect(candidates.provider_summaries[fake1.uuid]?.resources.VCPU?.capacity).toBe(160);
});

test('a provider of our own: inventories, custom trait and aggregates with generations', async () => {
  // The trait first, so that the cleanup (in reverse) deletes the provider before the trait.
  const trait = `CUSTOM_LK_TEST_${randomUUID().slice(0, 8).toUpperCase()}`;
  await placement.createTrait(trait);
  await placement.createTrait(trait); // already there: fine
  cleanup.add(`trait ${trait}`, () => placement.deleteTrait(trait));

  const name = uniqueName('rp');
  const provider = await placement.createResourceProvider({ name });
  cleanup.add(`provider ${name}`, () => placement.deleteResourceProvider(provider.uuid));
  expect(provider).toMatchObject({ name, generation: 0, parent_provider_uuid: null, root_provider_uuid: provider.uuid });
  expect((await placement.getResourceProvider(provider.uuid)).name).toBe(name);

  const inventories = await placement.putInventories(provider.uuid, provider.generation, {
    VCPU: { total: 8, allocation_ratio: 2 },
    MEMORY_MB: { total: 4096, reserved: 512 },
  });
  expect(inventories.resource_provider_generation).toBe(1);
  expect(inventories.inventories.VCPU).toMatchObject({ total: 8, allocation_ratio: 2, reserved: 0, min_unit: 1 });
  expect((await placement.getInventories(provider.uuid)).inventories.MEMORY_MB).toMatchObject({ total: 4096, reserved: 512 });
  const staleInventory = await placement.putInventories(provider.uuid, 0, { VCPU: { total: 4 } }).catch((e: unknown) => e);
  expect(staleInventory).toMatchObject({ name: 'ConflictError', code: PLACEMENT_CONCURRENT_UPDATE, retryable: true });

  expect(await placement.listTraits({ name: `in:${trait}` })).toEqual([trait]);
  const traits = await placement.putProviderTraits(provider.uuid, inventories.resource_provider_generation, [trait, 'HW_CPU_X86_AVX2']);
  expect(traits.traits.sort()).toEqual([trait, 'HW_CPU_X86_AVX2'].sort());
  expect((await placement.getProviderTraits(provider.uuid)).traits).toContain(trait);
  expect((await placement.listResourceProviders({ required: [trait] })).map((p) => p.uuid)).toEqual([provider.uuid]);

  const aggregate = randomUUID();
  const aggregates = await placement.putProviderAggregates(provider.uuid, traits.resource_provider_generation, [aggregate]);
  expect(aggregates.aggregates).toEqual([aggregate]);
  expect((await placement.getProviderAggregates(provider.uuid)).aggregates).toEqual([aggregate]);
  expect((await placement.listResourceProviders({ member_of: aggregate })).map((p) => p.uuid)).toEqual([provider.uuid]);
  expect((await placement.listResourceProviders({ member_of: `in:${aggregate},${randomUUID()}` })).map((p) => p.uuid)).toEqual([provider.uuid]);
  const staleAggregates = await placement.putProviderAggregates(provider.uuid, traits.resource_provider_generation, []).catch((e: unknown) => e);
  expect(staleAggregates).toBeInstanceOf(ConflictError);

  await placement.putProviderTraits(provider.uuid, aggregates.resource_provider_generation, []);
  await placement.deleteTrait(trait);
  await placement.deleteResourceProvider(provider.uuid);
  expect(await placement.listResourceProviders({ name })).toEqual([]);
});
