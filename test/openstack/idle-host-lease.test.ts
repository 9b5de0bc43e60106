/**
 * Idle-lease reaping of a host lease in Nova: with one of the lessee's servers running on the
 * leased host the lease is in use (Nova asked by host and project); once the server is deleted,
 * nobody uses it, and it ends early with the reason (here after seconds).
 */
import { KeystoneSession, type OpenStackClients } from '../../src/openstack';
import { blazarHostReservation } from '../../dev-stack/fixtures/builders';
import { enrolHost } from '../../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, inSeconds } from '../../dev-stack/stack';
import { bootServer, deleteServers, hostLeaseStack, rigClients, rigCredentials, uniqueName } from './support';

const HOST = 'fake-3';

describe('idle host leases in Nova', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const aggregates = { freepool: uniqueName('freepool'), released: uniqueName('released') };
  const servers: Array<{ clients: OpenStackClients; id: string }> = [];
  let asA: ReturnType<typeof apiClient>;
  let hostId: string;
  // Ended once nobody has used it for 14.4 s, looked at every 3.6 s (a server being built counts as in use).
  const IDLE_END_MS = 0.004 * 3_600_000;
  const stack = hostLeaseStack(
    admin,
    aggregates,
    async () => {
      await deleteAllLeases(api);
      await deleteServers(servers);
      if (hostId) await api('DELETE', `/v1/os-hosts/${hostId}`);
    },
    { LK_IDLE_LEASE_END_HOURS: '0.004', LK_NOTIFY_BEFORE_END: 'none' },
  );
  const api = apiClient(() => stack().url);

  beforeAll(async () => {
    const projectAId = (await new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-a') }).authenticate()).projectId;
    asA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a' });
    hostId = await enrolHost(api, HOST);
  });

  it('keeps a lease whose host runs the lessee\'s server, and ends it once the server is gone', async () => {
    const created = await asA('POST', '/v1/leases', { name: uniqueName('idle'), start_date: inSeconds(2), end_date: inSeconds(7200), reservations: [blazarHostReservation({ before_end: '' })] });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    const statusOf = async () => (await asA('GET', `/v1/leases/${id}`)).body.lease;
    await eventually(async () => ((await statusOf()).status === 'ACTIVE' ? true : undefined), 60_000);
    const server = await bootServer(projectA, { zone: created.body.lease.reservations[0].availability_zone }, (sid) => servers.push({ clients: projectA, id: sid }));
    expect(server.status).toBe('ACTIVE');
    // Looked at again well past the idle limit (its history shows when), the lease in use is still active.
    const bootedAt = Date.now();
    const handle = stack().temporal.client.workflow.getHandle(`lease-${id}`);
    const lookedAt = async () =>
      ((await handle.fetchHistory()).events ?? [])
        .filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'reservationInUse')
        .map((e) => Number(e.eventTime?.seconds ?? 0) * 1000);
    await eventually(async () => ((await lookedAt()).some((at) => at - bootedAt > IDLE_END_MS + 1_000) ? true : undefined), 60_000);
    expect((await statusOf()).status).toBe('ACTIVE');
    await deleteServers(servers.splice(0));
    const ended = await eventually(async () => {
      const lease = await statusOf();
      return lease.status === 'TERMINATED' ? lease : undefined;
    }, 60_000);
    expect(ended.status_reason).toMatch(/^ended early: nothing of project .* has used the lease since /);
  }, 150_000);
});
