/**
 * The end policies of a host lease in Nova, with the real scheduler: `recycle` (the host waits in the
 * lease's own aggregate, closed, while the lessee's server runs, returns when it is gone or when the
 * grace period deletes it; the aggregate goes once empty) and `release` (host and server handed to the shared cloud, no longer reservable;
 * enrolling it again once empty makes it reservable).
 */
import { KeystoneSession, type OpenStackClients, type Server } from '../../src/openstack';
import { blazarHostReservation } from '../../dev-stack/fixtures/builders';
import { enrolHost } from '../../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, inSeconds } from '../../dev-stack/stack';
import { bootServer, deleteServers, hostLeaseStack, rigClients, rigCredentials, uniqueName } from './support';

const HOST = 'fake-2';

describe('host lease end policies in Nova', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const aggregates = { freepool: uniqueName('freepool'), released: uniqueName('released') };
  const servers: Array<{ clients: OpenStackClients; id: string }> = [];
  let asA: ReturnType<typeof apiClient>;
  /** An admin working in project A: only admins may give hosts away (`on_end: release`). */
  let asAdminOfA: ReturnType<typeof apiClient>;
  let hostId: string;

  const aggregateNamed = async (name: string) => (await admin.nova.listAggregates()).find((a) => a.name === name);
  const hostsOf = async (name: string) => (await aggregateNamed(name))?.hosts ?? [];
  const boot = (where: { zone?: string }): Promise<Server> => bootServer(projectA, where, (id) => servers.push({ clients: projectA, id }));
  const statusOf = async (id: string) => (await asA('GET', `/v1/leases/${id}`)).body.lease.status as string;
  /** Once the end has closed the lease's aggregate with the host still in it: the aggregate. */
  const closedWithHost = (name: string) =>
    eventually(async () => {
      const aggregate = await aggregateNamed(name);
      return aggregate?.metadata['leasekeeper:pool'] === 'recycling' && aggregate.hosts.includes(HOST) ? aggregate : undefined;
    }, 60_000);

  const stack = hostLeaseStack(admin, aggregates, async () => {
    await deleteAllLeases(api);
    await deleteServers(servers);
    if (hostId) await api('DELETE', `/v1/os-hosts/${hostId}`);
  });
  const api = apiClient(() => stack().url);

  beforeAll(async () => {
    const projectAId = (await new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-a') }).authenticate()).projectId;
    asA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a' });
    asAdminOfA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a', 'x-roles': 'admin' });
    hostId = await enrolHost(api, HOST);
  });

  /** A lease of project A on the host, active, with one of A's servers running in its zone. */
  async function activeLeaseWithServer(params: Record<string, unknown>, caller = asA): Promise<{ id: string; server: Server; aggregate: string; zone: string }> {
    const created = await caller('POST', '/v1/leases', {
      name: uniqueName('policy'),
      start_date: inSeconds(3),
      end_date: inSeconds(7200),
      reservations: [blazarHostReservation({ before_end: '', ...params })],
    });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    await eventually(async () => ((await statusOf(id)) === 'ACTIVE' ? true : undefined), 60_000);
    const { aggregate, availability_zone: zone } = created.body.lease.reservations[0];
    const server = await boot({ zone });
    expect(server.status).toBe('ACTIVE');
    return { id, server, aggregate, zone };
  }

  it('recycle: the host waits, closed, while the server runs; returns when the lessee deletes it', async () => {
    const { id, server, aggregate, zone } = await activeLeaseWithServer({ on_end: 'recycle' });
    expect((await asA('PUT', `/v1/leases/${id}`, { end_date: 'now' })).status).toBe(200);
    const closed = await closedWithHost(aggregate);
    expect(closed).toMatchObject({ availability_zone: zone, metadata: { filter_tenant_id: 'leasekeeper-freepool', 'blazar:owner': 'leasekeeper' } });
    expect(await statusOf(id)).toBe('TERMINATING');
    expect(await hostsOf(aggregates.freepool)).not.toContain(HOST);
    expect((await admin.nova.getServer(server.id)).status).toBe('ACTIVE'); // the lessee's server keeps running
    // Nobody can start a new server there, not even the lessee through its zone: the aggregate names no real project.
    const intruder = await bootServer(admin, { host: HOST }, (sid) => servers.push({ clients: admin, id: sid }));
    expect(intruder.status).toBe('ERROR');
    expect((await boot({ zone })).status).toBe('ERROR');
    // Still waiting (no grace period) after the end has looked at the host again, twice.
    await eventually(async () => {
      const { raw } = await stack().temporal.client.workflow.getHandle(`lease-${id}`).describe();
      const polling = raw.pendingActivities?.find((a) => a.activityType?.name === 'awaitReservationEnd');
      return (polling?.attempt ?? 0) >= 3 ? true : undefined;
    }, 60_000);
    expect(await statusOf(id)).toBe('TERMINATING');
    const metadata = await stack().temporal.client.workflow.getHandle(`lease-${id}`).query<{ currentDetails: string }>('__temporal_workflow_metadata');
    expect(metadata.currentDetails).toContain(`Waiting: recycling: waiting for the last servers on ${HOST} (1 server(s))`);

    await projectA.nova.deleteServer(server.id);
    const deleted = Date.now();
    await eventually(async () => ((await statusOf(id)) === 'TERMINATED' ? true : undefined), 60_000);
    console.log(`recycle: host back in the pool ${Date.now() - deleted} ms after its last server was deleted`);
    expect(await hostsOf(aggregates.freepool)).toContain(HOST);
    expect(await aggregateNamed(aggregate)).toBeUndefined();
  }, 240_000);

  it('recycle with a grace period: what still runs when it expires is deleted, then the host returns', async () => {
    const { id, server, aggregate } = await activeLeaseWithServer({ on_end: 'recycle', recycle_grace_seconds: 8 });
    const ended = Date.now();
    expect((await asA('PUT', `/v1/leases/${id}`, { end_date: 'now' })).status).toBe(200);
    await closedWithHost(aggregate);
    await eventually(async () => ((await statusOf(id)) === 'TERMINATED' ? true : undefined), 90_000);
    const took = Date.now() - ended;
    console.log(`recycle with 8 s grace: host back in the pool ${took} ms after the end`);
    expect(took).toBeGreaterThanOrEqual(7_000);
    await expect(admin.nova.getServer(server.id)).rejects.toThrow(/not be found|404/i);
    expect(await hostsOf(aggregates.freepool)).toContain(HOST);
    expect(await aggregateNamed(aggregate)).toBeUndefined();
  }, 240_000);

  it('release: host and server go to the shared cloud at once; the host is no longer reservable until enrolled again', async () => {
    const { id, server } = await activeLeaseWithServer({ on_end: 'release' }, asAdminOfA);
    expect((await asA('PUT', `/v1/leases/${id}`, { end_date: 'now' })).status).toBe(200);
    await eventually(async () => ((await statusOf(id)) === 'TERMINATED' ? true : undefined), 60_000);
    expect(await hostsOf(aggregates.released)).toEqual([HOST]);
    expect(await hostsOf(aggregates.freepool)).not.toContain(HOST);
    expect((await admin.nova.getServer(server.id)).status).toBe('ACTIVE');
    const host = (await api('GET', `/v1/os-hosts/${hostId}`)).body.host;
    expect(host).toMatchObject({ reservable: false, released_by_lease: id });
    expect(host.released_at).toEqual(expect.any(String));
    const refused = await asA('POST', '/v1/leases', {
      name: uniqueName('after-release'),
      start_date: inSeconds(600),
      end_date: inSeconds(1200),
      reservations: [blazarHostReservation()],
    });
    expect(refused.status).toBe(409);

    // Enrolling it again: refused while the server runs, accepted once the host is empty.
    expect((await api('POST', '/v1/os-hosts', { name: HOST })).status).toBe(409);
    await projectA.nova.deleteServer(server.id);
    await projectA.nova.waitForServerDeleted(server.id, { timeoutMs: 60_000 });
    // Nova lists the host's servers a moment longer than it shows the server (deleting): refused until then.
    const again = await eventually(async () => {
      const res = await api('POST', '/v1/os-hosts', { name: HOST });
      return res.status === 409 && /Servers \[/.test(res.body.error_message) ? undefined : res;
    }, 30_000, 500);
    expect(again.status).toBe(201);
    expect(again.body.host).toMatchObject({ id: hostId, reservable: true, released_by_lease: null });
    expect(await hostsOf(aggregates.freepool)).toContain(HOST);
    expect(await hostsOf(aggregates.released)).not.toContain(HOST);
    const bookable = await asA('POST', '/v1/leases', {
      name: uniqueName('after-reenrol'),
      start_date: inSeconds(600),
      end_date: inSeconds(1200),
      reservations: [blazarHostReservation()],
    });
    expect(bookable.status).toBe(201);
  }, 240_000);
});
