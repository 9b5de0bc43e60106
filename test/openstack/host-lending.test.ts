/**
 * Lending a running host lease's idle host in Nova (issue 43): project A leases two hosts and runs a
 * server on one; a lend of both is refused (only one is idle), a lend of one fences it into the free
 * pool; project B's preemptible lease starts there (in B's aggregate) and runs a server; A reclaims:
 * B hears `lease.preempting` at least the configured warning ahead (as reclaimed, naming nothing of
 * A's), B's server is gone, the host is back in A's aggregate, and A's server ran untouched throughout.
 */
import { serverHost, type OpenStackClients, type Server } from '../../src/openstack';
import { findLease } from '../../src/db/leases';
import { blazarHostReservation } from '../../dev-stack/fixtures/builders';
import { enrolHost } from '../../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, inSeconds } from '../../dev-stack/stack';
import { startWebhookReceiver, type WebhookReceiver } from '../support/notice-receiver';
import { type Api, bootServer, deleteServers, hostLeaseStack, instant, leaseAs, projectIdOf, rigClients, serverGone, uniqueName, untilStatus } from './support';

const HOSTS = ['fake-1', 'fake-2'];
const WARNING_MINUTES = 0.25;


describe('lending a host lease\'s idle host in Nova', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const projectB = rigClients('leasekeeper-project-b');
  const aggregates = { freepool: uniqueName('freepool'), released: uniqueName('released') };
  const servers: Array<{ clients: OpenStackClients; id: string }> = [];
  const hostIds: string[] = [];
  let borrowerHears: WebhookReceiver;
  let projectAId: string;
  let projectBId: string;
  let asA: Api;
  let asB: Api;

  const stack = hostLeaseStack(
    admin,
    aggregates,
    async () => {
      await deleteAllLeases(api);
      await deleteServers(servers);
      for (const id of hostIds) await api('DELETE', `/v1/os-hosts/${id}`);
    },
    { LK_PREEMPT_WARNING_MINUTES: String(WARNING_MINUTES), LK_PREEMPT_EVICTION_SECONDS: '20', LK_WEBHOOK_ALLOW_PRIVATE: 'true', LK_NOTIFY_BEFORE_END: 'none' },
  );
  const api = apiClient(() => stack().url);
  const boot = (clients: OpenStackClients, zone: string): Promise<Server> => bootServer(clients, { zone }, (id) => servers.push({ clients, id }));
  const aggregateHosts = async (name: string) => (await admin.nova.listAggregates()).find((a) => a.name === name)?.hosts ?? [];
  beforeAll(async () => {
    borrowerHears = await startWebhookReceiver({ path: '/borrower' });
    [projectAId, projectBId] = [await projectIdOf('leasekeeper-project-a'), await projectIdOf('leasekeeper-project-b')];
    asA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a' });
    asB = apiClient(stack().url, { 'x-project-id': projectBId, 'x-user-id': 'user-b' });
    for (const host of HOSTS) hostIds.push(await enrolHost(api, host));
  });
  afterAll(async () => {
    await borrowerHears.close();
  });

  it(`lends the idle host only, a preemptible lease runs there, and a reclaim warns it ${WARNING_MINUTES} min ahead and brings the host back`, async () => {
    expect((await asB('PUT', `/v1/projects/${projectBId}/webhooks`, { webhooks: [{ url: borrowerHears.url }] })).status).toBe(200);
    const lender = await asA('POST', '/v1/leases', { name: uniqueName('lender'), start_date: 'now', end_date: inSeconds(7200), reservations: [blazarHostReservation({ min: 2, max: 2 })] });
    expect(lender.status).toBe(201);
    const lenderId: string = lender.body.lease.id;
    const { aggregate: lenderAggregate, availability_zone: lenderZone } = (await untilStatus(asA, lenderId, 'ACTIVE', 60_000)).reservations[0];
    const mine = await boot(projectA, lenderZone);
    expect(mine.status).toBe('ACTIVE');
    const busyHost = serverHost(await admin.nova.getServer(mine.id))!;
    const idleHost = HOSTS.find((h) => h !== busyHost)!;

    // Both asked: one runs a server (put back into A's aggregate after the look), so none is lent.
    const both = await asA('POST', `/v1/leases/${lenderId}/lend`, { count: 2, until: inSeconds(3600) });
    expect(both).toMatchObject({ status: 409, body: { error_code: 409, idle: 1 } });
    expect((await aggregateHosts(lenderAggregate)).sort()).toEqual([...HOSTS].sort());
    const lent = await asA('POST', `/v1/leases/${lenderId}/lend`, { count: 1, until: inSeconds(3600) });
    expect(lent.status).toBe(200);
    expect(lent.body.lease.reservations[0].lendings).toEqual([expect.objectContaining({ hosts: [idleHost], state: 'lent' })]);
    expect(await aggregateHosts(lenderAggregate)).toEqual([busyHost]);
    expect(await aggregateHosts(aggregates.freepool)).toContain(idleHost);

    // B's preemptible lease borrows it: in B's own aggregate, B's server there.
    const askedMs = Date.now();
    const borrower = await asB('POST', '/v1/leases', { name: uniqueName('borrower'), start_date: 'now', end_date: inSeconds(1800), reservations: [blazarHostReservation({ preemptible: true })] });
    expect(borrower.status).toBe(201);
    const borrowerId: string = borrower.body.lease.id;
    const started = await untilStatus(asB, borrowerId, 'ACTIVE', 60_000);
    const activeMs = Date.now();
    expect(started.reservations[0].hosts).toEqual([idleHost]);
    expect(await aggregateHosts(started.reservations[0].aggregate)).toEqual([idleHost]);
    const startEvent = (await findLease(stack().db.pool, borrowerId))!.events.find((e) => e.event_type === 'start_lease')!;
    const theirs = await boot(projectB, started.reservations[0].availability_zone);
    expect(theirs.status).toBe('ACTIVE');
    expect(serverHost(await admin.nova.getServer(theirs.id))).toBe(idleHost);

    // A reclaims: B hears it the warning ahead, as reclaimed, naming nothing of A's.
    const reclaimed = await asA('POST', `/v1/leases/${lenderId}/reclaim`, {});
    expect(reclaimed.status).toBe(200);
    const returnsAtMs = instant(reclaimed.body.lease.reservations[0].lendings[0].returns_at);
    const notice = await eventually(() => Promise.resolve(borrowerHears.received.find((d) => d.body.event_type === 'lease.preempting' && d.body.payload.lease_id === borrowerId)), 15_000, 100);
    const heardMs = Date.now();
    expect(notice.body.payload).toMatchObject({ reason: expect.stringMatching(/^reclaimed: the lending lease takes its host back from /), warning_configured_seconds: WARNING_MINUTES * 60, warning_short: false });
    expect(Date.parse(String(notice.body.payload.ends_at))).toBe(returnsAtMs);
    expect(returnsAtMs - heardMs).toBeGreaterThanOrEqual(WARNING_MINUTES * 60_000 - 1_000);
    const seenByB = JSON.stringify([notice.body, await leaseAs(asB, borrowerId)]);
    for (const secret of [projectAId, lenderId]) expect(seenByB).not.toContain(secret);

    // B's end deletes its server; the host comes back into A's aggregate; A's server never moved.
    await untilStatus(asB, borrowerId, 'TERMINATED', returnsAtMs - Date.now() + 60_000);
    expect(await serverGone(admin, theirs.id)).toBe(true);
    const back = await eventually(async () => {
      const lease = await leaseAs(asA, lenderId);
      return lease.reservations[0].lendings[0].state === 'returned' ? lease : undefined;
    }, 60_000, 250);
    expect(back.status).toBe('ACTIVE');
    expect((await aggregateHosts(lenderAggregate)).sort()).toEqual([...HOSTS].sort());
    expect(await aggregateHosts(aggregates.freepool)).not.toContain(idleHost);
    const untouched = await admin.nova.getServer(mine.id);
    expect([untouched.status, serverHost(untouched)]).toEqual(['ACTIVE', busyHost]);
    process.stdout.write(
      `lent host: borrower (start now) began its start ${startEvent.startedAt! - askedMs} ms after its request, ACTIVE in the lent host's aggregate ${activeMs - askedMs} ms after; reclaim heard ${Math.round((returnsAtMs - heardMs) / 1000)} s before the return (configured ${WARNING_MINUTES * 60} s); host back ${Date.now() - returnsAtMs} ms after the return (upper bound: includes polling)\n`,
    );
  }, 180_000);
});
