/**
 * leasekeeper's aggregate layout held to BlazarFilter's rules as written (our rendering,
 * test/support/blazar-filter.ts), along a host lease's life in the rig's real Nova: each verdict is
 * the filter's on the aggregates Nova lists for the host at that moment. The rig's scheduler does not
 * run BlazarFilter itself (blazar-nova is not packaged by Debian); this is what a deployment that
 * runs it would decide. The pool is the test's own aggregate, so the filter's options name it.
 */
import { randomUUID } from 'node:crypto';
import { KeystoneSession, type OpenStackClients } from '../../src/openstack';
import { BLAZAR_FILTER_DEFAULTS, blazarHostPasses, type FilterRequest } from '../support/blazar-filter';
import { blazarHostReservation } from '../../dev-stack/fixtures/builders';
import { enrolHost } from '../../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, inSeconds } from '../../dev-stack/stack';
import { bootServer, deleteServers, hostLeaseStack, rigClients, rigCredentials, uniqueName } from './support';

const HOSTS = ['fake-1', 'fake-2'];

describe("leasekeeper's aggregates under BlazarFilter's rules", () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const aggregates = { freepool: uniqueName('freepool'), released: uniqueName('released') };
  const filterOptions = { ...BLAZAR_FILTER_DEFAULTS, aggregate_freepool_name: aggregates.freepool, preemptible_aggregate: aggregates.freepool };
  const servers: Array<{ clients: OpenStackClients; id: string }> = [];
  const hostIds: string[] = [];
  let projectAId: string;
  let projectBId: string;
  let asA: ReturnType<typeof apiClient>;
  /** An admin working in project A: only admins may give hosts away (`on_end: release`). */
  let asAdminOfA: ReturnType<typeof apiClient>;

  const stack = hostLeaseStack(admin, aggregates, async () => {
    await deleteAllLeases(api);
    await deleteServers(servers);
    for (const id of hostIds) await api('DELETE', `/v1/os-hosts/${id}`);
  });
  const api = apiClient(() => stack().url);

  beforeAll(async () => {
    projectAId = (await new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-a') }).authenticate()).projectId;
    projectBId = (await new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-b') }).authenticate()).projectId;
    asA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a' });
    asAdminOfA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a', 'x-roles': 'admin' });
    for (const host of HOSTS) hostIds.push(await enrolHost(api, host));
  });

  /** BlazarFilter's verdict on `host` for the request, on the aggregates Nova lists the host in now. */
  const passes = async (host: string, request: FilterRequest) =>
    blazarHostPasses(
      (await admin.nova.listAggregates()).filter((a) => a.hosts.includes(host)),
      request,
      filterOptions,
    );
  const hintless = (projectId: string): FilterRequest => ({ projectId });
  const hinted = (projectId: string, reservation: string): FilterRequest => ({ projectId, hints: { reservation: [reservation] } });
  const statusOf = async (id: string) => (await asA('GET', `/v1/leases/${id}`)).body.lease.status as string;
  const aggregateNamed = async (name: string) => (await admin.nova.listAggregates()).find((a) => a.name === name);

  /** A lease of project A on one host, ACTIVE: its id, reservation id, zone, the leased host and the pool's other one. */
  async function activeLease(params: Record<string, unknown>, caller = asA) {
    const created = await caller('POST', '/v1/leases', {
      name: uniqueName('blazar-filter'),
      start_date: inSeconds(3),
      end_date: inSeconds(7200),
      reservations: [blazarHostReservation({ before_end: '', ...params })],
    });
    expect(created.status).toBe(201);
    const { id, reservations } = created.body.lease;
    const reservationId: string = reservations[0].id;
    await eventually(async () => ((await statusOf(id)) === 'ACTIVE' ? true : undefined), 60_000);
    const aggregate = await aggregateNamed(reservationId);
    expect(aggregate).toMatchObject({ availability_zone: `blazar_${reservationId}`, metadata: { 'blazar:owner': projectAId } });
    const [leased] = aggregate!.hosts;
    const other = HOSTS.find((h) => h !== leased)!;
    return { id, reservationId, zone: aggregate!.availability_zone!, leased, other };
  }

  it('in the pool, a host takes nothing; leased, only its lessee with the hint; recycling, nobody; back in the pool, nothing', async () => {
    for (const host of HOSTS) {
      expect(await passes(host, hintless(projectAId))).toBe(false);
      expect(await passes(host, hinted(projectAId, randomUUID()))).toBe(false);
      expect(await passes(host, hinted(projectAId, aggregates.freepool))).toBe(false); // the pool asked for by name: nobody owns it
    }

    const { id, reservationId, zone, leased, other } = await activeLease({ on_end: 'recycle' });
    expect(await passes(leased, hinted(projectAId, reservationId))).toBe(true);
    expect(await passes(other, hinted(projectAId, reservationId))).toBe(false);
    expect(await passes(leased, hinted(projectBId, reservationId))).toBe(false);
    expect(await passes(leased, hintless(projectAId))).toBe(false);
    expect(await passes(leased, hintless(projectBId))).toBe(false);
    expect(await passes(other, hintless(projectBId))).toBe(false);

    // One of A's servers keeps the host recycling after the end.
    const server = await bootServer(projectA, { zone }, (sid) => servers.push({ clients: projectA, id: sid }));
    expect(server.status).toBe('ACTIVE');
    expect((await asA('PUT', `/v1/leases/${id}`, { end_date: 'now' })).status).toBe(200);
    await eventually(async () => ((await aggregateNamed(reservationId))?.metadata['leasekeeper:pool'] === 'recycling' ? true : undefined), 60_000);
    expect(await statusOf(id)).toBe('TERMINATING');
    expect(await passes(leased, hinted(projectAId, reservationId))).toBe(false);
    expect(await passes(leased, hinted(projectBId, reservationId))).toBe(false);
    expect(await passes(leased, hintless(projectAId))).toBe(false);
    expect(await passes(leased, hintless(projectBId))).toBe(false);
    expect(await passes(other, hintless(projectBId))).toBe(false);

    await projectA.nova.deleteServer(server.id);
    await eventually(async () => ((await statusOf(id)) === 'TERMINATED' ? true : undefined), 60_000);
    expect((await aggregateNamed(aggregates.freepool))?.hosts).toContain(leased);
    for (const host of HOSTS) {
      expect(await passes(host, hintless(projectAId))).toBe(false);
      expect(await passes(host, hinted(projectAId, reservationId))).toBe(false);
    }
  }, 240_000);

  it('released, a host takes hint-less servers of any project; the pool still does not', async () => {
    const { id, reservationId, leased, other } = await activeLease({ on_end: 'release' }, asAdminOfA);
    expect((await asA('PUT', `/v1/leases/${id}`, { end_date: 'now' })).status).toBe(200);
    await eventually(async () => ((await statusOf(id)) === 'TERMINATED' ? true : undefined), 60_000);
    expect((await aggregateNamed(aggregates.released))?.hosts).toEqual([leased]);
    expect(await passes(leased, hintless(projectAId))).toBe(true);
    expect(await passes(leased, hintless(projectBId))).toBe(true);
    expect(await passes(leased, hinted(projectAId, reservationId))).toBe(false);
    expect(await passes(other, hintless(projectBId))).toBe(false);
  }, 240_000);
});
