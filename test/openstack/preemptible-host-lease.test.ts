/**
 * A preemptible host lease preempted in Nova (issue 43): project A's preemptible lease runs a
 * server on the host; project B's regular lease claims the host a little more than the warning
 * ahead. A's lessee hears `lease.preempting` at least the configured minutes before its new end
 * (naming nothing of B's), its before-end snapshot and end run at the cut, its server is deleted
 * before B's start hands the host over, and B starts on time, its servers landing on the host.
 * Then a regular start that comes before the preempted lease's end has let go of the host.
 */
import { openStackClients, serverHost, type OpenStackClients, type Server } from '../../src/openstack';
import { findLease } from '../../src/db/leases';
import { snapshotName } from '../../src/resources/shared/server-snapshots';
import { blazarHostReservation } from '../../dev-stack/fixtures/builders';
import { enrolHost } from '../../dev-stack/fixtures/hosts';
import { activityScheduledTimes, apiClient, deleteAllLeases, eventually, inSeconds } from '../../dev-stack/stack';
import { FaultProxy } from '../support/fault-proxy';
import { startWebhookReceiver, type WebhookReceiver } from '../support/notice-receiver';
import { type Api, bootServer, deleteServers, hostLeaseStack, instant, leaseAs, projectIdOf, rigClients, rigCredentials, rigEnv, serverGone, uniqueName, untilStatus } from './support';

const HOST = 'fake-3';
const WARNING_MINUTES = 0.25;
/** B's lease starts this much later than the warning: room for its admission, A's workflow's signal and the webhook's delivery. */
const MARGIN_MS = 15_000;


describe('a preemptible host lease preempted in Nova', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const projectB = rigClients('leasekeeper-project-b');
  const aggregates = { freepool: uniqueName('freepool'), released: uniqueName('released') };
  const servers: Array<{ clients: OpenStackClients; id: string }> = [];
  const snapshots: string[] = [];
  let hostId: string | undefined;
  let lessee: WebhookReceiver;
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
      for (const id of snapshots) await admin.glance.deleteImage(id).catch(() => undefined);
      if (hostId) await api('DELETE', `/v1/os-hosts/${hostId}`);
    },
    { LK_PREEMPT_WARNING_MINUTES: String(WARNING_MINUTES), LK_WEBHOOK_ALLOW_PRIVATE: 'true', LK_NOTIFY_BEFORE_END: 'none' },
  );
  const api = apiClient(() => stack().url);
  const boot = (clients: OpenStackClients, zone: string): Promise<Server> => bootServer(clients, { zone }, (id) => servers.push({ clients, id }));
  beforeAll(async () => {
    lessee = await startWebhookReceiver({ path: '/lessee' });
    [projectAId, projectBId] = [await projectIdOf('leasekeeper-project-a'), await projectIdOf('leasekeeper-project-b')];
    asA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a' });
    asB = apiClient(stack().url, { 'x-project-id': projectBId, 'x-user-id': 'user-b' });
    hostId = await enrolHost(api, HOST);
  });
  afterAll(async () => {
    await lessee.close();
  });

  it(`warns the preemptible lessee ${WARNING_MINUTES} min ahead, deletes its server before the regular lease takes the host, and starts that lease on time`, async () => {
    expect((await asA('PUT', `/v1/projects/${projectAId}/webhooks`, { webhooks: [{ url: lessee.url }] })).status).toBe(200);
    const lentName = uniqueName('lent');
    const lent = await asA('POST', '/v1/leases', {
      name: lentName,
      start_date: 'now',
      end_date: inSeconds(7200),
      reservations: [blazarHostReservation({ preemptible: true, before_end: 'snapshot' })],
    });
    expect(lent.status).toBe(201);
    const lentId: string = lent.body.lease.id;
    expect(lent.body.lease.reservations[0]).toMatchObject({ preemptible: true, hosts: [HOST] });
    await untilStatus(asA, lentId, 'ACTIVE', 60_000);
    const lentServer = await boot(projectA, lent.body.lease.reservations[0].availability_zone);
    expect(lentServer.status).toBe('ACTIVE');
    expect(serverHost(await admin.nova.getServer(lentServer.id))).toBe(HOST);

    // B needs the only host, from a little more than the warning from now: it fits only by preemption.
    const needingName = uniqueName('needing');
    const needing = await asB('POST', '/v1/leases', {
      name: needingName,
      start_date: inSeconds(WARNING_MINUTES * 60 + MARGIN_MS / 1000),
      end_date: inSeconds(3600),
      reservations: [blazarHostReservation()],
    });
    expect(needing.status).toBe(201);
    const needingId: string = needing.body.lease.id;
    expect(needing.body.lease.reservations[0]).toMatchObject({ preemptible: false, hosts: [HOST] });
    const neededFromMs = instant(needing.body.lease.start_date);

    // A's lessee hears it at least the warning before its new end, which comes no later than B's start.
    const notice = await eventually(() => Promise.resolve(lessee.received.find((d) => d.body.event_type === 'lease.preempting' && d.body.payload.lease_id === lentId)), MARGIN_MS, 100);
    const heardMs = Date.now();
    const { ends_at: endsAt, warning_seconds: warningSeconds } = notice.body.payload as { ends_at: string; warning_seconds: number };
    const endsAtMs = Date.parse(endsAt);
    expect(endsAtMs).toBeLessThanOrEqual(neededFromMs);
    expect(notice.body.payload).toMatchObject({ warning_configured_seconds: WARNING_MINUTES * 60, warning_short: false });
    expect(warningSeconds).toBeGreaterThanOrEqual(WARNING_MINUTES * 60);
    expect(endsAtMs - heardMs).toBeGreaterThanOrEqual(WARNING_MINUTES * 60_000);
    const cut = await leaseAs(asA, lentId);
    expect(instant(cut.end_date)).toBe(endsAtMs);
    expect(cut.status_reason).toMatch(/^preempted: host needed by another lease from /);
    // Nothing A sees names B's project or lease.
    const seenByA = JSON.stringify([lessee.received.map((d) => d.body), cut]);
    for (const secret of [projectBId, needingId, needingName]) expect(seenByA).not.toContain(secret);

    // At the cut: A's before-end snapshot, then its end deletes the server.
    const ended = await untilStatus(asA, lentId, 'TERMINATED', endsAtMs - Date.now() + 90_000);
    expect(ended.status_reason).toBe(cut.status_reason);
    expect(ended.events.map((e: { event_type: string; status: string }) => [e.event_type, e.status])).toEqual([['start_lease', 'DONE'], ['before_end_lease', 'DONE'], ['end_lease', 'DONE']]);
    expect(await serverGone(admin, lentServer.id)).toBe(true);
    const images = await admin.glance.listImages({ name: snapshotName(lentServer.name, lentName), visibility: 'all' });
    images.forEach((image) => snapshots.push(image.id));
    expect(images.map((image) => image.leasekeeper_server)).toEqual([lentServer.id]);

    // B starts: the host in its aggregate, handed over only after A's end had deleted A's server.
    const started = await untilStatus(asB, needingId, 'ACTIVE', neededFromMs - Date.now() + 60_000);
    const readyLagMs = Date.now() - neededFromMs;
    const { aggregate, availability_zone: zone } = started.reservations[0];
    expect((await admin.nova.listAggregates()).find((a) => a.name === aggregate)?.hosts).toEqual([HOST]);
    const lentEnd = (await findLease(stack().db.pool, lentId))!.events.find((e) => e.event_type === 'end_lease')!;
    const needingStart = (await findLease(stack().db.pool, needingId))!.events.find((e) => e.event_type === 'start_lease')!;
    const handedOverMs = await activityScheduledTimes(stack(), needingId, ['startReservation']);
    expect(handedOverMs).toHaveLength(1);
    expect(handedOverMs[0]).toBeGreaterThanOrEqual(lentEnd.finishedAt!);
    const startLagMs = needingStart.startedAt! - neededFromMs;
    expect(startLagMs).toBeGreaterThanOrEqual(0);

    const theirs = await boot(projectB, zone);
    expect(theirs.status).toBe('ACTIVE');
    expect(serverHost(await admin.nova.getServer(theirs.id))).toBe(HOST);
    process.stdout.write(
      `preempted host lease: warning ${warningSeconds} s sent, heard ${Math.round((endsAtMs - heardMs) / 1000)} s before the cut (configured ${WARNING_MINUTES * 60} s); ` +
        `A's end took ${lentEnd.finishedAt! - lentEnd.startedAt!} ms (server deleted); regular start lag ${startLagMs} ms, host in its aggregate ${readyLagMs} ms after its start (upper bound: includes polling)\n`,
    );
  }, 300_000);
});

/**
 * A regular lease whose start comes before a preempted lease's end has let go of the host (no
 * warning, no eviction wait here; in production an end that outlasts LK_PREEMPT_EVICTION_SECONDS):
 * the start takes the host out of the preempted lease's zone (Nova refused to put it in a second
 * one: the regular lease failed to start), and the preempted lease's end, held back at the proxy,
 * deletes only its own servers there, not the regular lessee's.
 */
describe('a regular lease starting before a preempted lease on its host has ended, in Nova', () => {
  const HOST2 = 'fake-2';
  /** How long the preempted lease's server delete is held: its end outlasts the regular lease's start and the regular lessee's boot. */
  const DELETE_HELD_MS = 12_000;
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const projectB = rigClients('leasekeeper-project-b');
  const aggregates = { freepool: uniqueName('freepool'), released: uniqueName('released') };
  const servers: Array<{ clients: OpenStackClients; id: string }> = [];
  let hostId: string | undefined;
  let nova: FaultProxy;
  let throughProxy: OpenStackClients | undefined;
  let asA: Api;
  let asB: Api;

  beforeAll(async () => {
    nova = await FaultProxy.start(rigEnv().LK_NOVA_URL);
  });
  const stack = hostLeaseStack(
    admin,
    aggregates,
    async () => {
      await deleteAllLeases(api);
      await deleteServers(servers);
      if (hostId) await api('DELETE', `/v1/os-hosts/${hostId}`);
    },
    { LK_PREEMPT_WARNING_MINUTES: '0', LK_PREEMPT_EVICTION_SECONDS: '0', LK_NOTIFY_BEFORE_END: 'none' },
    () => (throughProxy ??= openStackClients({ credentials: { ...rigCredentials('leasekeeper-admin'), endpointOverride: { compute: nova.url } }, timeoutMs: 30_000 })),
  );
  const api = apiClient(() => stack().url);
  const boot = (clients: OpenStackClients, zone: string): Promise<Server> => bootServer(clients, { zone }, (id) => servers.push({ clients, id }));
  const aggregateNamed = async (name: string) => (await admin.nova.listAggregates()).find((a) => a.name === name);
  afterAll(async () => {
    await nova.stop();
  });

  beforeAll(async () => {
    asA = apiClient(stack().url, { 'x-project-id': await projectIdOf('leasekeeper-project-a'), 'x-user-id': 'user-a' });
    asB = apiClient(stack().url, { 'x-project-id': await projectIdOf('leasekeeper-project-b'), 'x-user-id': 'user-b' });
    hostId = await enrolHost(api, HOST2);
  });

  it("takes the host from the preempted lease's zone, whose end then deletes only its own servers there", async () => {
    const lent = await asA('POST', '/v1/leases', { name: uniqueName('lent'), start_date: 'now', end_date: inSeconds(7200), reservations: [blazarHostReservation({ preemptible: true })] });
    expect(lent.status).toBe(201);
    const lentId: string = lent.body.lease.id;
    const { aggregate: lentAggregate, availability_zone: lentZone } = lent.body.lease.reservations[0];
    await untilStatus(asA, lentId, 'ACTIVE', 60_000);
    const lentServer = await boot(projectA, lentZone);
    expect(lentServer.status).toBe('ACTIVE');

    // The preempted lease's end will hang on its server's delete: the regular start finds the host still in its zone.
    nova.inject({ method: 'DELETE', path: /\/servers\/[0-9a-f-]{36}$/, fault: { kind: 'delay', ms: DELETE_HELD_MS }, times: 1 });
    const needing = await asB('POST', '/v1/leases', { name: uniqueName('needing'), start_date: inSeconds(5), end_date: inSeconds(3600), reservations: [blazarHostReservation()] });
    expect(needing.status).toBe(201);
    const needingId: string = needing.body.lease.id;
    const started = await untilStatus(asB, needingId, 'ACTIVE', 60_000);
    const { aggregate, availability_zone: zone } = started.reservations[0];
    expect((await aggregateNamed(aggregate))?.hosts).toEqual([HOST2]);
    expect((await aggregateNamed(lentAggregate))?.hosts ?? []).not.toContain(HOST2);
    expect((await aggregateNamed(aggregates.freepool))?.hosts).not.toContain(HOST2);
    const theirs = await boot(projectB, zone);
    expect(theirs.status).toBe('ACTIVE');
    expect(serverHost(await admin.nova.getServer(theirs.id))).toBe(HOST2);
    // Both while the preempted lease's end was still at work (its server's delete held).
    const theirsUpMs = Date.now();

    const ended = await untilStatus(asA, lentId, 'TERMINATED', 90_000);
    const lentEnd = (await findLease(stack().db.pool, lentId))!.events.find((e) => e.event_type === 'end_lease')!;
    expect(lentEnd.finishedAt).toBeGreaterThan(theirsUpMs);
    expect(ended.status_reason).toMatch(/^preempted: host needed by another lease from /);
    expect(nova.injected()).toBe(1);
    expect(await serverGone(admin, lentServer.id)).toBe(true);
    // The regular lessee's server and host are untouched by that end: still there, still in its zone only.
    expect((await admin.nova.getServer(theirs.id)).status).toBe('ACTIVE');
    expect((await aggregateNamed(aggregate))?.hosts).toEqual([HOST2]);
    expect((await aggregateNamed(aggregates.freepool))?.hosts).not.toContain(HOST2);
    expect(await aggregateNamed(lentAggregate)).toBeUndefined();
    expect((await leaseAs(asB, needingId)).status).toBe('ACTIVE');
  }, 240_000);
});
