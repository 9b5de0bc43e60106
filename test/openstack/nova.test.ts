/** Nova against the rig: aggregates, a server's life (shelve, unshelve elsewhere, snapshot), hypervisors, flavors. */
import {
  ConflictError,
  ignoreNotFound,
  NotFoundError,
  type Server,
  serverHost,
} from '../../src/openstack';
import { Cleanup, FLAVOR, IMAGE, providerNamed, rigClients, uniqueName } from './support';
import { pollUntil } from '../../src/openstack/wait';

const admin = rigClients('leasekeeper-admin');
const { nova, placement, glance } = admin;
const cleanup = new Cleanup();

afterAll(async () => {
  await cleanup.run();
});

async function flavorId(name: string): Promise<string> {
  const flavor = (await nova.listFlavors()).find((f) => f.name === name);
  if (flavor === undefined) throw new Error(`flavor ${name} missing on the rig`);
  return flavor.id;
}

async function imageId(name: string): Promise<string> {
  const [image] = await glance.listImages({ name });
  if (image === undefined) throw new Error(`image ${name} missing on the rig`);
  return image.id;
}

test('aggregate with an AZ: add and remove a host, set and unset metadata', async () => {
  const name = uniqueName('agg');
  const created = await nova.createAggregate({ name, availability_zone: name });
  cleanup.add(`aggregate ${name}`, () => nova.deleteAggregate(created.id));
  expect(created).toMatchObject({ name, availability_zone: name });
  expect(created.uuid).toMatch(/^[0-9a-f-]{36}$/);

  const withHost = await nova.addHostToAggregate(created.id, 'fake-3');
  expect(withHost.hosts).toEqual(['fake-3']);
  expect(withHost.metadata).toMatchObject({ availability_zone: name });
  // Nova mirrors the aggregate into Placement.
  const provider = await providerNamed(placement, 'fake-3');
  expect((await placement.getProviderAggregates(provider.uuid)).aggregates).toContain(created.uuid);

  const duplicate = await nova.addHostToAggregate(created.id, 'fake-3').catch((e: unknown) => e);
  expect(duplicate).toBeInstanceOf(ConflictError);
  expect(duplicate).toMatchObject({ status: 409, retryable: false });

  const tagged = await nova.setAggregateMetadata(created.id, { 'blazar:owner': 'p1', purpose: 'test' });
  expect(tagged.metadata).toMatchObject({ 'blazar:owner': 'p1', purpose: 'test', availability_zone: name });
  const untagged = await nova.setAggregateMetadata(created.id, { purpose: null });
  expect(untagged.metadata).not.toHaveProperty('purpose');
  expect(untagged.metadata).toHaveProperty('blazar:owner', 'p1');

  expect((await nova.listAggregates()).some((a) => a.id === created.id && a.hosts.includes('fake-3'))).toBe(true);
  const emptied = await nova.removeHostFromAggregate(created.id, 'fake-3');
  expect(emptied.hosts).toEqual([]);
  expect((await nova.getAggregate(created.id)).hosts).toEqual([]);
  expect((await placement.getProviderAggregates(provider.uuid)).aggregates).not.toContain(created.uuid);

  await nova.deleteAggregate(created.id);
  await expect(nova.getAggregate(created.id)).rejects.toBeInstanceOf(NotFoundError);
});

test('a server on a chosen host: shelve-offload frees Placement, unshelve onto another host, snapshot, delete', async () => {
  const name = uniqueName('vm');
  const [flavorRef, imageRef] = await Promise.all([flavorId(FLAVOR), imageId(IMAGE)]);
  const created = await nova.createServer({ name, flavorRef, imageRef, networks: 'none', host: 'fake-2', metadata: { lk: 'test' } });
  cleanup.add(`server ${name}`, async () => {
    await ignoreNotFound(nova.deleteServer(created.id));
    await nova.waitForServerDeleted(created.id, { timeoutMs: 60_000 });
  });

  const active = await nova.waitForServer(created.id, (s) => s.status === 'ACTIVE', { timeoutMs: 60_000 });
  expect(serverHost(active)).toBe('fake-2');
  expect(active).toMatchObject({ name, metadata: { lk: 'test' }, flavor: { original_name: FLAVOR, vcpus: 1, ram: 512 } });
  const fake2 = await providerNamed(placement, 'fake-2');
  const fake3 = await providerNamed(placement, 'fake-3');
  const allocated = await placement.getAllocations(created.id);
  expect(Object.keys(allocated.allocations)).toEqual([fake2.uuid]);
  expect(allocated.allocations[fake2.uuid]?.resources).toEqual({ VCPU: 1, MEMORY_MB: 512, DISK_GB: 1 });
  expect(allocated.project_id).toBe(active.tenant_id);
  expect(allocated.consumer_generation).toEqual(expect.any(Number));

  const listed = await nova.listServers({ all_tenants: true, host: 'fake-2', name });
  expect(listed.map((s) => s.id)).toEqual([created.id]);
  expect(await nova.listServers({ all_tenants: true, host: 'fake-1', name })).toEqual([]);

  await nova.shelve(created.id);
  // Nova saves SHELVED_OFFLOADED first, frees the resources, and only then clears the host (compute
  // manager's _shelve_offload_instance): offloading is over when the host is gone.
  const offloaded = await nova.waitForServer(created.id, (s: Server) => s.status === 'SHELVED_OFFLOADED' && serverHost(s) === null, { timeoutMs: 60_000 });
  expect(serverHost(offloaded)).toBeNull();
  const freed = await pollUntil(() => placement.getAllocations(created.id), (a) => Object.keys(a.allocations).length === 0, { timeoutMs: 30_000, intervalMs: 250, what: 'allocations freed' });
  expect(freed.allocations).toEqual({});

  await nova.unshelve(created.id, { host: 'fake-3' });
  const moved = await nova.waitForServer(created.id, (s: Server) => s.status === 'ACTIVE' && s['OS-EXT-STS:task_state'] === null, { timeoutMs: 60_000 });
  expect(serverHost(moved)).toBe('fake-3');
  expect(Object.keys((await placement.getAllocations(created.id)).allocations)).toEqual([fake3.uuid]);

  const snapshotName = uniqueName('snap');
  const { imageId: snapshotId } = await nova.createImage(created.id, snapshotName, { lk: 'snapshot' });
  cleanup.add(`image ${snapshotName}`, () => glance.deleteImage(snapshotId));
  // Fake-driver snapshots stay queued: wait for the record, not for `active`.
  const snapshot = await glance.waitForImage(snapshotId, undefined, { timeoutMs: 30_000 });
  expect(snapshot).toMatchObject({ id: snapshotId, name: snapshotName, image_type: 'snapshot', instance_uuid: created.id, lk: 'snapshot' });
  expect((await glance.listImages({ name: snapshotName })).map((i) => i.id)).toEqual([snapshotId]);
  await nova.waitForServer(created.id, (s) => s.status === 'ACTIVE' && s['OS-EXT-STS:task_state'] === null, { timeoutMs: 30_000 });
  await glance.deleteImage(snapshotId);
  await expect(glance.getImage(snapshotId)).rejects.toBeInstanceOf(NotFoundError);

  await nova.deleteServer(created.id);
  await nova.waitForServerDeleted(created.id, { timeoutMs: 60_000 });
  // Nova may show the server as DELETED for a moment before it answers 404 (what waitForServerDeleted accepts).
  const notFound = await pollUntil(
    async () => {
      try {
        await nova.getServer(created.id);
        return false;
      } catch (error) {
        if (error instanceof NotFoundError) return true;
        throw error;
      }
    },
    (gone) => gone,
    { timeoutMs: 30_000, intervalMs: 200, what: `server ${created.id} answering 404` },
  );
  expect(notFound).toBe(true);
  expect((await placement.getAllocations(created.id)).allocations).toEqual({});
});

test('hypervisors with their capacity and servers; compute services', async () => {
  const hypervisors = await nova.listHypervisors({ with_servers: true });
  expect(hypervisors.map((h) => h.hypervisor_hostname).sort()).toEqual(['fake-1', 'fake-2', 'fake-3']);
  for (const hypervisor of hypervisors) {
    expect(hypervisor).toMatchObject({ state: 'up', status: 'enabled', vcpus: 10, memory_mb: 8192, local_gb: 1028 });
    expect(hypervisor.id).toMatch(/^[0-9a-f-]{36}$/);
  }
  const one = hypervisors.find((h) => h.hypervisor_hostname === 'fake-1');
  const shown = await nova.getHypervisor(one?.id ?? '', { with_servers: true });
  expect(shown).toMatchObject({ hypervisor_hostname: 'fake-1', vcpus: 10, service: { host: 'fake-1' } });

  const services = await nova.listServices({ binary: 'nova-compute' });
  expect(services.map((s) => s.host).sort()).toEqual(['fake-1', 'fake-2', 'fake-3']);
  expect(services.every((s) => s.state === 'up' && s.status === 'enabled' && s.zone === 'nova')).toBe(true);
  const scheduler = await nova.listServices({ binary: 'nova-scheduler' });
  expect(scheduler).toHaveLength(1);
});

test('flavors: create a private one, grant access, extra specs, delete', async () => {
  const name = uniqueName('flavor');
  const flavor = await nova.createFlavor({ name, vcpus: 1, ram: 256, disk: 1, is_public: false, description: 'lease flavor' });
  cleanup.add(`flavor ${name}`, () => nova.deleteFlavor(flavor.id));
  expect(flavor).toMatchObject({ name, vcpus: 1, ram: 256, disk: 1, 'os-flavor-access:is_public': false, description: 'lease flavor' });

  const projectA = (await admin.keystone.listProjects({ name: 'project-a' }))[0]?.id ?? '';
  expect(await nova.addFlavorAccess(flavor.id, projectA)).toEqual([{ flavor_id: flavor.id, tenant_id: projectA }]);
  expect(await nova.listFlavorAccess(flavor.id)).toEqual([{ flavor_id: flavor.id, tenant_id: projectA }]);
  // project-a now sees the private flavor; project-b does not.
  const visibleToA = await rigClients('leasekeeper-project-a').nova.listFlavors();
  expect(visibleToA.map((f) => f.id)).toContain(flavor.id);
  expect((await rigClients('leasekeeper-project-b').nova.listFlavors()).map((f) => f.id)).not.toContain(flavor.id);
  expect(await nova.removeFlavorAccess(flavor.id, projectA)).toEqual([]);

  const specs = await nova.setFlavorExtraSpecs(flavor.id, { 'trait:CUSTOM_LEASE_X': 'required', 'aggregate_instance_extra_specs:lease': 'x' });
  expect(specs).toEqual({ 'trait:CUSTOM_LEASE_X': 'required', 'aggregate_instance_extra_specs:lease': 'x' });
  await nova.deleteFlavorExtraSpec(flavor.id, 'aggregate_instance_extra_specs:lease');
  expect(await nova.getFlavorExtraSpecs(flavor.id)).toEqual({ 'trait:CUSTOM_LEASE_X': 'required' });
  expect((await nova.getFlavor(flavor.id)).extra_specs).toEqual({ 'trait:CUSTOM_LEASE_X': 'required' });
  expect((await nova.listFlavors({ is_public: 'none' })).map((f) => f.id)).toContain(flavor.id);
  expect((await nova.listFlavors()).map((f) => f.name)).toEqual(expect.arrayContaining(['m1.tiny', 'm1.small', 'm1.medium']));

  await nova.deleteFlavor(flavor.id);
  await expect(nova.getFlavor(flavor.id)).rejects.toBeInstanceOf(NotFoundError);
});
