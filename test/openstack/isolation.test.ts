/**
 * Lease isolation with the real scheduler, done through our clients: fake-1 in an aggregate set up
 * as leasekeeper does for a lease of project A (named after the reservation, AZ `blazar_<reservation>`, `filter_tenant_id` and ownership
 * metadata). Project A reaches fake-1 through the AZ; project B never lands there and cannot use the AZ.
 */
import { randomUUID } from 'node:crypto';
import { ignoreNotFound, type KeystoneSession, type NovaClient, type OpenStackClients, serverHost } from '../../src/openstack';
import { leaseAggregateFor } from '../../src/resources/physical-host/aggregates';
import { Cleanup, FLAVOR, IMAGE, providerNamed, rigClients, uniqueName } from './support';

const admin = rigClients('leasekeeper-admin');
const projectA = rigClients('leasekeeper-project-a');
const projectB = rigClients('leasekeeper-project-b');
const cleanup = new Cleanup();
const PROJECT_B_SERVERS = 4;

afterAll(async () => {
  await cleanup.run();
});

async function boot(clients: OpenStackClients, name: string, availabilityZone?: string): Promise<string> {
  const [flavor] = (await clients.nova.listFlavors()).filter((f) => f.name === FLAVOR);
  const [image] = await clients.glance.listImages({ name: IMAGE });
  const { id } = await clients.nova.createServer({
    name,
    flavorRef: flavor?.id ?? FLAVOR,
    imageRef: image?.id ?? IMAGE,
    networks: 'none',
    availability_zone: availabilityZone,
  });
  cleanup.add(`server ${name}`, () => deleteAndWait(admin.nova, id));
  return id;
}

async function deleteAndWait(nova: NovaClient, id: string): Promise<void> {
  await ignoreNotFound(nova.deleteServer(id));
  await nova.waitForServerDeleted(id, { timeoutMs: 60_000 });
}

test('a leased host takes the lessee through its AZ and keeps everyone else out', async () => {
  const { name, availabilityZone: lease } = leaseAggregateFor(randomUUID());
  const projectAId = (await (projectA.session as KeystoneSession).authenticate()).projectId;

  const aggregate = await admin.nova.createAggregate({ name, availability_zone: lease });
  cleanup.add(`aggregate ${lease}`, () => admin.nova.deleteAggregate(aggregate.id));
  await admin.nova.addHostToAggregate(aggregate.id, 'fake-1');
  cleanup.add(`fake-1 out of ${lease}`, () => admin.nova.removeHostFromAggregate(aggregate.id, 'fake-1'));
  const configured = await admin.nova.setAggregateMetadata(aggregate.id, {
    filter_tenant_id: projectAId,
    'blazar:owner': projectAId,
    'leasekeeper:lease': lease,
  });
  expect(configured).toMatchObject({
    hosts: ['fake-1'],
    availability_zone: lease,
    metadata: { availability_zone: lease, filter_tenant_id: projectAId, 'blazar:owner': projectAId },
  });
  const fake1 = await providerNamed(admin.placement, 'fake-1');
  expect((await admin.placement.getProviderAggregates(fake1.uuid)).aggregates).toContain(aggregate.uuid);

  // Project A, asking for the lease's AZ, lands on fake-1.
  const lessee = await boot(projectA, uniqueName('lessee'), lease);
  // Project B: several servers without an AZ, and one asking for the lease's AZ.
  const others = await Promise.all(Array.from({ length: PROJECT_B_SERVERS }, (_, i) => boot(projectB, uniqueName(`other${i}`))));
  const intruder = await boot(projectB, uniqueName('intruder'), lease);

  const lesseeServer = await admin.nova.waitForServer(lessee, (s) => s.status === 'ACTIVE', { timeoutMs: 90_000 });
  expect(serverHost(lesseeServer)).toBe('fake-1');
  expect(lesseeServer['OS-EXT-AZ:availability_zone']).toBe(lease);

  const otherServers = await Promise.all(others.map((id) => admin.nova.waitForServer(id, (s) => s.status === 'ACTIVE', { timeoutMs: 90_000 })));
  const otherHosts = otherServers.map(serverHost);
  expect(otherHosts).toHaveLength(PROJECT_B_SERVERS);
  expect(otherHosts).not.toContain('fake-1');
  for (const host of otherHosts) expect(['fake-2', 'fake-3']).toContain(host);

  const rejected = await projectB.nova.waitForServer(intruder, (s) => s.status === 'ERROR' || s.status === 'ACTIVE', { timeoutMs: 90_000 });
  expect(rejected.status).toBe('ERROR');
  expect(rejected.fault?.message).toMatch(/No valid host/);
  expect(serverHost(await admin.nova.getServer(intruder))).toBeNull();

  // What fake-1 holds: only the lessee's server.
  const onFake1 = await admin.nova.listServers({ all_tenants: true, host: 'fake-1' });
  expect(onFake1.map((s) => s.tenant_id)).not.toContain(rejected.tenant_id);
  expect(onFake1.map((s) => s.id)).toContain(lessee);

  // Undo in order: servers, host, aggregate (the cleanup stack does the same on failure).
  await Promise.all([lessee, ...others, intruder].map((id) => deleteAndWait(admin.nova, id)));
  await admin.nova.removeHostFromAggregate(aggregate.id, 'fake-1');
  await admin.nova.deleteAggregate(aggregate.id);
  expect((await admin.nova.listAggregates()).map((a) => a.name)).not.toContain(lease);
  expect((await admin.placement.getProviderAggregates(fake1.uuid)).aggregates).not.toContain(aggregate.uuid);
});
