/**
 * A host lease carried out in Nova, with the real scheduler: before the start the host sits in the
 * reservable pool where nobody's servers land; at the start it moves into the lease's aggregate,
 * whose zone takes the lessee's servers and refuses everyone else's; at the end the lessee's
 * servers are deleted and the host goes back to the pool.
 */
import { physicalHostPlugin } from '../../src/resources/physical-host';
import type { OpenStackClients, Server } from '../../src/openstack';
import { KeystoneSession, serverHost } from '../../src/openstack';
import { snapshotName } from '../../src/resources/shared/server-snapshots';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { blazarHostReservation } from '../../dev-stack/fixtures/builders';
import { enrolHost } from '../../dev-stack/fixtures/hosts';
import { bootServer, deleteAggregateNamed, deleteServers, rigClients, rigCredentials, uniqueName } from './support';

describe('a host lease in Nova', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const projectB = rigClients('leasekeeper-project-b');
  const freepool = uniqueName('freepool');
  const servers: Array<{ clients: OpenStackClients; id: string }> = [];
  const snapshots: string[] = [];
  let hostId: string;

  const aggregateNamed = async (name: string) => (await admin.nova.listAggregates()).find((a) => a.name === name);

  const boot = (clients: OpenStackClients, where: { zone?: string; host?: string } = {}): Promise<Server> => bootServer(clients, where, (id) => servers.push({ clients, id }));

  const stack = useTestStack(
    {
      env: { LK_FREEPOOL_AGGREGATE: freepool },
      withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: () => admin, freepool })],
      openstack: () => admin,
    },
    {
      beforeStop: async () => {
        await deleteAllLeases(api);
        await deleteServers(servers);
        for (const id of snapshots) await admin.glance.deleteImage(id).catch(() => undefined);
        if (hostId) await api('DELETE', `/v1/os-hosts/${hostId}`);
        await deleteAggregateNamed(admin, freepool);
      },
    },
  );
  const api = apiClient(() => stack().url);

  beforeAll(async () => {
    hostId = await enrolHost(api, 'fake-1');
  });

  it('moves the host into the lease aggregate at start, takes only the lessee, and returns it at the end', async () => {
    const projectAId = (await new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-a') }).authenticate()).projectId;
    const asA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a' });
    const leaseName = uniqueName('nova-lease');
    const created = await asA('POST', '/v1/leases', {
      name: leaseName,
      start_date: inSeconds(15),
      end_date: inSeconds(7200), // before_end (end − 60 min) comes after the start, so the server exists by then
      reservations: [blazarHostReservation({ before_end: 'snapshot' })],
    });
    expect(created.status).toBe(201);
    const lease = created.body.lease;
    const { aggregate, availability_zone: zone, hosts } = lease.reservations[0];
    expect(hosts).toEqual(['fake-1']);
    // Blazar's layout: the aggregate named after the reservation, the zone with BlazarFilter's prefix.
    expect(aggregate).toBe(lease.reservations[0].id);
    expect(zone).toBe(`blazar_${lease.reservations[0].id}`);

    // Pending: in the pool, no lease aggregate yet, and no ordinary server lands on the host, even
    // when asked for it by name (the scheduler still applies the pool's filter_tenant_id).
    expect((await aggregateNamed(freepool))?.hosts).toEqual(['fake-1']);
    expect(await aggregateNamed(aggregate)).toBeUndefined();
    expect((await boot(admin, { host: 'fake-1' })).status).toBe('ERROR');

    const scheduledStart = Date.parse(`${lease.start_date}Z`);
    await eventually(async () => ((await asA('GET', `/v1/leases/${lease.id}`)).body.lease.status === 'ACTIVE' ? true : undefined), 60_000);
    const inLease = await aggregateNamed(aggregate);
    console.log(`host in the lease aggregate ${Date.now() - scheduledStart} ms after the scheduled start (upper bound: includes polling)`);
    expect(inLease).toMatchObject({ hosts: ['fake-1'], availability_zone: zone, metadata: expect.objectContaining({ filter_tenant_id: projectAId, 'blazar:owner': projectAId }) });
    expect((await aggregateNamed(freepool))?.hosts).toEqual([]);

    const mine = await boot(projectA, { zone });
    expect(mine.status).toBe('ACTIVE');
    expect(serverHost(await admin.nova.getServer(mine.id))).toBe('fake-1'); // the host is an admin-only attribute
    const theirs = await boot(projectB, { zone });
    expect(theirs.status).toBe('ERROR');

    // End it now: the lessee's server is deleted, the host goes back, the aggregate is removed.
    const endRequested = Date.now();
    expect((await asA('PUT', `/v1/leases/${lease.id}`, { end_date: 'now' })).status).toBe(200);
    await eventually(async () => ((await asA('GET', `/v1/leases/${lease.id}`)).body.lease.status === 'TERMINATED' ? true : undefined), 120_000);
    console.log(`host back in the pool ${Date.now() - endRequested} ms after the end (including deleting one server)`);
    expect((await aggregateNamed(freepool))?.hosts).toEqual(['fake-1']);
    expect(await aggregateNamed(aggregate)).toBeUndefined();
    expect(await admin.nova.listServers({ all_tenants: true, host: 'fake-1' })).toEqual([]);

    // before_end: snapshot ran before the end deleted the server: an image record of it, marked with the lease.
    const images = await admin.glance.listImages({ name: snapshotName(mine.name, leaseName), visibility: 'all' });
    images.forEach((image) => snapshots.push(image.id));
    expect(images.map((image) => [image.leasekeeper_lease, image.leasekeeper_server])).toEqual([[lease.id, mine.id]]);
    const events = (await asA('GET', `/v1/leases/${lease.id}`)).body.lease.events.map((e: { event_type: string; status: string }) => [e.event_type, e.status]);
    expect(events).toEqual([['start_lease', 'DONE'], ['before_end_lease', 'DONE'], ['end_lease', 'DONE']]);
  }, 240_000);
});
