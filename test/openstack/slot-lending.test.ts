/**
 * Lending a running instance lease's idle slot in Nova and Placement (issue 43): project A's
 * `virtual:instance` lease holds the host's 2 slots and runs a server on one; a lend of both is
 * refused (1 idle) and A's inventory stays 2; a lend of one lowers it to 1 (the drift check
 * expects that, and a heal keeps it); project B's preemptible lease borrows the lent slot and boots
 * a server of its flavor; A reclaims: B hears `lease.preempting` at least the warning ahead, as reclaimed, its server is gone
 * by the return, A's inventory is back to 2, and A boots a second server.
 */
import { NotFoundError, serverHost, type OpenStackClients, type Server } from '../../src/openstack';
import { findLease } from '../../src/db/leases';
import { reservationContext, typedContext } from '../../src/domain/resource-plugin';
import { virtualInstancePlugin } from '../../src/resources/virtual-instance';
import { reservationProviderName, reservationResourceClass } from '../../src/resources/virtual-instance/nova-resources';
import { enrolHost } from '../../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { startWebhookReceiver, type WebhookReceiver } from '../support/notice-receiver';
import { type Api, bootServer, deleteAggregateNamed, deleteServers, instant, leaseAs, projectIdOf, rigClients, uniqueName, untilStatus } from './support';

const HOST = 'fake-1';
const WARNING_MINUTES = 0.25;
/** A slot of 5000 MB: the fake host's memory (8192 MB, 512 reserved, at Placement's ratio of 1.5) holds two, so B's fits only in A's lent one. */
const SLOT = { resource_type: 'virtual:instance', vcpus: 1, memory_mb: 5000, disk_gb: 1, affinity: null };


describe('lending an instance lease\'s idle slot in Nova and Placement', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const projectB = rigClients('leasekeeper-project-b');
  const freepool = uniqueName('freepool');
  const servers: Array<{ clients: OpenStackClients; id: string }> = [];
  let borrowerHears: WebhookReceiver;
  let projectAId: string;
  let projectBId: string;
  let asA: Api;
  let asB: Api;

  const pluginOf = (pool: Parameters<typeof virtualInstancePlugin>[0]['pool']) =>
    virtualInstancePlugin({
      pool,
      settings: { cleaningMs: 0, capacityRefreshMs: 0 },
      cloud: () => admin,
      projectCloud: (id: string) => (id === projectAId ? projectA : id === projectBId ? projectB : admin),
      serverDeleteTimeoutMs: 60_000,
    });
  const stack = useTestStack(
    () => ({
      env: { LK_FREEPOOL_AGGREGATE: freepool, LK_PREEMPT_WARNING_MINUTES: String(WARNING_MINUTES), LK_PREEMPT_EVICTION_SECONDS: '20', LK_WEBHOOK_ALLOW_PRIVATE: 'true', LK_NOTIFY_BEFORE_END: 'none' },
      withPool: (pool) => [pluginOf(pool)],
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
    eventually(async () => ((await clients.nova.listFlavors()).some((f) => f.name === flavor) ? true : undefined), 30_000, 100, () => `flavor ${flavor} not usable`);
  /** The reservation's slot inventory on the host, as Placement has it. */
  const inventoryOf = async (reservationId: string) => {
    const provider = (await admin.placement.listResourceProviders({ name: reservationProviderName(HOST) }))[0];
    return provider ? ((await admin.placement.getInventories(provider.uuid)).inventories[reservationResourceClass(reservationId)]?.total ?? 0) : 0;
  };
  beforeAll(async () => {
    borrowerHears = await startWebhookReceiver({ path: '/borrower' });
    [projectAId, projectBId] = [await projectIdOf('leasekeeper-project-a'), await projectIdOf('leasekeeper-project-b')];
    asA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a' });
    asB = apiClient(stack().url, { 'x-project-id': projectBId, 'x-user-id': 'user-b' });
    await enrolHost(api, HOST);
  });
  afterAll(async () => {
    await borrowerHears.close();
  });

  it(`lends an idle slot only, a preemptible lease runs a server in it, and a reclaim warns it ${WARNING_MINUTES} min ahead and gives the slot back`, async () => {
    const beganMs = Date.now();
    expect((await asB('PUT', `/v1/projects/${projectBId}/webhooks`, { webhooks: [{ url: borrowerHears.url }] })).status).toBe(200);
    const lender = await asA('POST', '/v1/leases', { name: uniqueName('slot-lender'), start_date: 'now', end_date: inSeconds(7200), reservations: [{ ...SLOT, amount: 2 }] });
    expect([lender.status, lender.body.error_message]).toEqual([201, undefined]);
    const lenderId: string = lender.body.lease.id;
    const lenderReservation: string = lender.body.lease.reservations[0].id;
    await untilStatus(asA, lenderId, 'ACTIVE', 60_000);
    const lenderFlavor = `reservation:${lenderReservation}`;
    await flavorUsable(projectA, lenderFlavor);
    const mine = await boot(projectA, lenderFlavor);
    expect([mine.status, serverHost(await admin.nova.getServer(mine.id))]).toEqual(['ACTIVE', HOST]);
    expect(await inventoryOf(lenderReservation)).toBe(2);

    // Both asked: one runs A's server, so none is lent and the inventory is put back.
    const both = await asA('POST', `/v1/leases/${lenderId}/lend`, { count: 2, until: inSeconds(3600) });
    expect(both).toMatchObject({ status: 409, body: { error_code: 409, idle: 1 } });
    expect(await inventoryOf(lenderReservation)).toBe(2);
    const lent = await asA('POST', `/v1/leases/${lenderId}/lend`, { count: 1, until: inSeconds(3600) });
    expect([lent.status, lent.body.error_message]).toEqual([200, undefined]);
    expect(lent.body.lease.reservations[0].lendings).toEqual([expect.objectContaining({ hosts: [HOST], slots: 1, state: 'lent' })]);
    expect(await inventoryOf(lenderReservation)).toBe(1);
    // The drift check expects the lowered inventory: nothing seen for the lender, twice (a repair needs the same drift seen twice).
    const drift = pluginOf(stack().db.pool);
    const first = await drift.checkDrift!({}, 'repair');
    const second = await drift.checkDrift!(first.seen, 'repair');
    expect([first.seen[`slots:${lenderReservation}`], second.repaired, second.reported]).toEqual([undefined, [], []]);
    expect(await inventoryOf(lenderReservation)).toBe(1);
    // Nor does a heal (it writes the inventory to match the booking) put the lent slot back.
    const stored = (await findLease(stack().db.pool, lenderId))!;
    const healing = { ...reservationContext(stored, stored.reservations[0]), reportProgress: () => undefined, placementOf: () => Promise.resolve({ hosts: [] }), announce: () => Promise.resolve() };
    await drift.heal!(typedContext(drift, healing));
    expect(await inventoryOf(lenderReservation)).toBe(1);

    // B's preemptible lease borrows the lent slot (the host has no other room) and runs a server of its flavor there.
    const borrower = await asB('POST', '/v1/leases', { name: uniqueName('slot-borrower'), start_date: 'now', end_date: inSeconds(1800), reservations: [{ ...SLOT, amount: 1, preemptible: true }] });
    expect([borrower.status, borrower.body.error_message]).toEqual([201, undefined]);
    const borrowerId: string = borrower.body.lease.id;
    const started = await untilStatus(asB, borrowerId, 'ACTIVE', 60_000);
    expect(started.reservations[0].hosts).toEqual([HOST]);
    const borrowerFlavor = `reservation:${started.reservations[0].id}`;
    await flavorUsable(projectB, borrowerFlavor);
    const theirs = await boot(projectB, borrowerFlavor);
    expect([theirs.status, serverHost(await admin.nova.getServer(theirs.id))]).toEqual(['ACTIVE', HOST]);

    // A reclaims: B hears it the warning ahead, as reclaimed, naming nothing of A's.
    const reclaimed = await asA('POST', `/v1/leases/${lenderId}/reclaim`, {});
    expect([reclaimed.status, reclaimed.body.error_message]).toEqual([200, undefined]);
    const returnsAtMs = instant(reclaimed.body.lease.reservations[0].lendings[0].returns_at);
    const notice = await eventually(() => Promise.resolve(borrowerHears.received.find((d) => d.body.event_type === 'lease.preempting' && d.body.payload.lease_id === borrowerId)), 15_000, 100);
    const heardMs = Date.now();
    expect(notice.body.payload).toMatchObject({ reason: expect.stringMatching(/^reclaimed: /), warning_configured_seconds: WARNING_MINUTES * 60, warning_short: false });
    expect(Date.parse(String(notice.body.payload.ends_at))).toBe(returnsAtMs);
    expect(returnsAtMs - heardMs).toBeGreaterThanOrEqual(WARNING_MINUTES * 60_000 - 1_000);
    const seenByB = JSON.stringify([notice.body, await leaseAs(asB, borrowerId)]);
    for (const secret of [projectAId, lenderId]) expect(seenByB).not.toContain(secret);

    // B's end deletes its server; the slot comes back to A (its inventory 2 again); A boots a second server.
    await untilStatus(asB, borrowerId, 'TERMINATED', returnsAtMs - Date.now() + 60_000);
    await expect(admin.nova.getServer(theirs.id)).rejects.toBeInstanceOf(NotFoundError);
    await eventually(async () => ((await leaseAs(asA, lenderId)).reservations[0].lendings[0].state === 'returned' ? true : undefined), 60_000, 250);
    const backMs = Date.now();
    expect(await inventoryOf(lenderReservation)).toBe(2);
    const another = await boot(projectA, lenderFlavor);
    expect([another.status, serverHost(await admin.nova.getServer(another.id))]).toEqual(['ACTIVE', HOST]);
    const untouched = await admin.nova.getServer(mine.id);
    expect(untouched.status).toBe('ACTIVE');
    process.stdout.write(
      `lent slot: reclaim heard ${Math.round((returnsAtMs - heardMs) / 1000)} s before the return (configured ${WARNING_MINUTES * 60} s); slot back ${backMs - returnsAtMs} ms after the return (upper bound: includes polling); test body ${Date.now() - beganMs} ms\n`,
    );
  }, 120_000);
});
