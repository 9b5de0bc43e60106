/**
 * A preemptible instance-slot lease preempted in Nova and Placement (issue 43), as
 * preemptible-host-lease.test.ts does it for hosts: project A's preemptible `virtual:instance`
 * lease runs a server of its reservation flavor on the only enrolled host; project B's regular
 * lease, whose slot fits there only without A's, starts a little more than the warning ahead. A's
 * lessee hears `lease.preempting` at least the configured minutes before its new end (naming
 * nothing of B's), its server is deleted before B starts, and B starts on time, a server of its
 * flavor landing on the host.
 */
import { NotFoundError, serverHost, type OpenStackClients, type Server } from '../../src/openstack';
import { findLease } from '../../src/db/leases';
import { virtualInstancePlugin } from '../../src/resources/virtual-instance';
import { enrolHost } from '../../dev-stack/fixtures/hosts';
import { activityScheduledTimes, apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { startWebhookReceiver, type WebhookReceiver } from '../support/notice-receiver';
import { type Api, bootServer, deleteAggregateNamed, deleteServers, instant, leaseAs, projectIdOf, rigClients, uniqueName, untilStatus } from './support';

const HOST = 'fake-1';
const WARNING_MINUTES = 0.25;
/** B's lease starts this much later than the warning: room for its admission, A's workflow's signal and the webhook's delivery. */
const MARGIN_MS = 12_000;
/** How late B may be ACTIVE, and its flavor usable, after its start (instance-leases.test.ts's bound on a slot lease's start). */
const START_BOUND_MS = 30_000;
/**
 * A slot of 7000 MB: the fake host's memory (8192 MB, 512 reserved, at Placement's ratio of 1.5)
 * holds one, so B's fits only where A's was (a server takes at most one host's vCPUs, 10: Placement's max_unit).
 */
const SLOT = { resource_type: 'virtual:instance', vcpus: 1, memory_mb: 7000, disk_gb: 1, amount: 1, affinity: null };

/** What a lease's start runs once it may take its resources (its steps, for a type that has them). */
const START_ACTIVITIES = ['startReservation', 'startReservationStep'];


describe('a preemptible instance-slot lease preempted in Nova', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const projectB = rigClients('leasekeeper-project-b');
  const freepool = uniqueName('freepool');
  const servers: Array<{ clients: OpenStackClients; id: string }> = [];
  let lessee: WebhookReceiver;
  let projectAId: string;
  let projectBId: string;
  let asA: Api;
  let asB: Api;

  const stack = useTestStack(
    () => ({
      env: { LK_FREEPOOL_AGGREGATE: freepool, LK_PREEMPT_WARNING_MINUTES: String(WARNING_MINUTES), LK_WEBHOOK_ALLOW_PRIVATE: 'true', LK_NOTIFY_BEFORE_END: 'none' },
      withPool: (pool) => [
        virtualInstancePlugin({
          pool,
          settings: { cleaningMs: 0, capacityRefreshMs: 0 },
          cloud: () => admin,
          projectCloud: (id: string) => (id === projectAId ? projectA : id === projectBId ? projectB : admin),
          serverDeleteTimeoutMs: 60_000,
        }),
      ],
      openstack: () => admin,
    }),
    {
      beforeStop: async () => {
        await deleteAllLeases(api);
        await deleteServers(servers);
        for (const host of (await api('GET', '/v1/os-hosts')).body?.hosts ?? []) await api('DELETE', `/v1/os-hosts/${host.id}`);
        await deleteAggregateNamed(admin, freepool);
      },
    },
  );
  const api = apiClient(() => stack().url);
  const boot = (clients: OpenStackClients, flavor: string): Promise<Server> => bootServer(clients, { flavor }, (id) => servers.push({ clients, id }));
  const flavorUsable = (clients: OpenStackClients, flavor: string) =>
    eventually(async () => ((await clients.nova.listFlavors()).some((f) => f.name === flavor) ? Date.now() : undefined), START_BOUND_MS, 100, () => `flavor ${flavor} not usable`);
  beforeAll(async () => {
    lessee = await startWebhookReceiver({ path: '/lessee' });
    [projectAId, projectBId] = [await projectIdOf('leasekeeper-project-a'), await projectIdOf('leasekeeper-project-b')];
    asA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a' });
    asB = apiClient(stack().url, { 'x-project-id': projectBId, 'x-user-id': 'user-b' });
    await enrolHost(api, HOST);
  });
  afterAll(async () => {
    await lessee.close();
  });

  it(`warns the preemptible lessee ${WARNING_MINUTES} min ahead, deletes its server before the regular lease starts, and starts that lease on time`, async () => {
    expect((await asA('PUT', `/v1/projects/${projectAId}/webhooks`, { webhooks: [{ url: lessee.url }] })).status).toBe(200);
    const lent = await asA('POST', '/v1/leases', { name: uniqueName('lent'), start_date: 'now', end_date: inSeconds(7200), reservations: [{ ...SLOT, preemptible: true }] });
    expect([lent.status, lent.body.error_message]).toEqual([201, undefined]);
    const lentId: string = lent.body.lease.id;
    expect(lent.body.lease.reservations[0]).toMatchObject({ preemptible: true, hosts: [HOST] });
    await untilStatus(asA, lentId, 'ACTIVE', 60_000);
    const lentFlavor = `reservation:${lent.body.lease.reservations[0].id}`;
    await flavorUsable(projectA, lentFlavor);
    const lentServer = await boot(projectA, lentFlavor);
    expect(lentServer.status).toBe('ACTIVE');
    expect(serverHost(await admin.nova.getServer(lentServer.id))).toBe(HOST);

    // B needs a slot only the host's room without A's holds, from a little more than the warning from now: it fits only by preemption.
    const needingName = uniqueName('needing');
    const needing = await asB('POST', '/v1/leases', { name: needingName, start_date: inSeconds(WARNING_MINUTES * 60 + MARGIN_MS / 1000), end_date: inSeconds(3600), reservations: [SLOT] });
    expect([needing.status, needing.body.error_message]).toEqual([201, undefined]);
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

    // At the cut A's end deletes its server; B's start comes after that end has finished.
    const ended = await untilStatus(asA, lentId, 'TERMINATED', endsAtMs - Date.now() + 60_000);
    expect(ended.status_reason).toBe(cut.status_reason);
    await expect(admin.nova.getServer(lentServer.id)).rejects.toBeInstanceOf(NotFoundError);
    const started = await untilStatus(asB, needingId, 'ACTIVE', neededFromMs - Date.now() + START_BOUND_MS);
    const lentEnd = (await findLease(stack().db.pool, lentId))!.events.find((e) => e.event_type === 'end_lease')!;
    const needingStart = (await findLease(stack().db.pool, needingId))!.events.find((e) => e.event_type === 'start_lease')!;
    expect(lentEnd.status).toBe('DONE');
    // B's start (STARTING from its time on) hands the slots over only after A's end has finished.
    const handedOverMs = await activityScheduledTimes(stack(), needingId, START_ACTIVITIES);
    expect(handedOverMs.length).toBeGreaterThan(0);
    expect(handedOverMs[0]).toBeGreaterThanOrEqual(lentEnd.finishedAt!);
    const startLagMs = needingStart.startedAt! - neededFromMs;
    expect(startLagMs).toBeGreaterThanOrEqual(0);

    // B's flavor is usable within the bound, and its server lands on the host A's had.
    const neededFlavor = `reservation:${started.reservations[0].id}`;
    const usableLagMs = (await flavorUsable(projectB, neededFlavor)) - neededFromMs;
    expect(usableLagMs).toBeLessThan(START_BOUND_MS);
    const theirs = await boot(projectB, neededFlavor);
    expect(theirs.status).toBe('ACTIVE');
    expect(serverHost(await admin.nova.getServer(theirs.id))).toBe(HOST);
    process.stdout.write(
      `preempted instance lease: warning ${warningSeconds} s sent, heard ${Math.round((endsAtMs - heardMs) / 1000)} s before the cut (configured ${WARNING_MINUTES * 60} s); ` +
        `A's end took ${lentEnd.finishedAt! - lentEnd.startedAt!} ms (server deleted); regular start lag ${startLagMs} ms, slots handed over ${handedOverMs[0] - neededFromMs} ms after its start, flavor usable by B ${usableLagMs} ms after its start (upper bound: includes polling)\n`,
    );
  }, 240_000);
});
