/**
 * The host monitor and healing with the rig's Nova: a compute service forced down (what an
 * operator or a fencing agent does to a dead host) makes its host failed (os-hosts shows why); a
 * pending lease on it is booked again on another host; an active lease gets a replacement in its
 * aggregate while the failed host is set aside; with no spare host the lease is degraded, and the
 * flag clears when the host comes back. Hosts moved by hand go back where the calendar says.
 * Every service is put back at the end, whatever happens.
 */
import { physicalHostPlugin } from '../../src/resources/physical-host';
import { physicalHostWatch } from '../../src/resources/physical-host/health';
import { blazarHostReservation } from '../../dev-stack/fixtures/builders';
import { doubleBookings, enrolHost } from '../../dev-stack/fixtures/hosts';
import { startWebhookReceiver, type WebhookReceiver } from '../support/notice-receiver';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { computeForcing, deleteAggregateNamed, rigClients, uniqueName } from './support';

const HOSTS = ['fake-1', 'fake-2', 'fake-3'];
const CLOSED_PROJECT = 'leasekeeper-freepool';

describe('host monitor and healing with the rig', () => {
  const admin = rigClients('leasekeeper-admin');
  const freepool = uniqueName('freepool');
  const failedAggregate = uniqueName('failed');
  const hostIds = new Map<string, string>();
  const { forceDown, restoreAll } = computeForcing(admin);

  let receiver: WebhookReceiver;
  beforeAll(async () => {
    receiver = await startWebhookReceiver();
  });
  afterAll(() => receiver?.close());

  const stack = useTestStack(
    () => ({
      env: {
        LK_FREEPOOL_AGGREGATE: freepool,
        LK_FAILED_AGGREGATE: failedAggregate,
        LK_HOST_MONITOR_INTERVAL_SECONDS: '0.5',
        LK_HOST_FAIL_GRACE_SECONDS: '1',
        LK_HEALING_RETRY_MINUTES: '0.05',
        LK_DRIFT_CHECK_MINUTES: '0.02',
        LK_NOTIFY_URL: receiver.url,
      },
      withPool: (pool) => [
        physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: () => admin, freepool, failedAggregate, endAggregates: { closedProjectId: CLOSED_PROJECT }, noticesConfigured: true }),
      ],
      hostWatch: (pool) => physicalHostWatch({ pool, source: { nova: () => admin.nova }, freepool, failed: { name: failedAggregate, closedProjectId: CLOSED_PROJECT } }),
      openstack: () => admin,
    }),
    {
      beforeStop: async () => {
        await restoreAll();
        await deleteAllLeases(api);
        for (const id of hostIds.values()) await api('DELETE', `/v1/os-hosts/${id}`);
        await deleteAggregateNamed(admin, freepool);
        await deleteAggregateNamed(admin, failedAggregate);
      },
      timeoutMs: 180_000,
    },
  );
  const api = apiClient(() => stack().url);

  const hostJson = async (name: string) => (await api('GET', `/v1/os-hosts/${hostIds.get(name)}`)).body.host;
  const leaseJson = async (id: string) => (await api('GET', `/v1/leases/${id}`)).body.lease;
  const aggregateHosts = async (name: string) => [...((await admin.nova.listAggregates()).find((a) => a.name === name)?.hosts ?? [])].sort();
  const until = <T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 30_000) => eventually(check, timeoutMs, 200, () => `not yet: ${what}`);

  async function createLease(fields: { start: string; end: string; min?: number }): Promise<{ id: string; reservationId: string; hosts: string[] }> {
    const created = await api('POST', '/v1/leases', {
      name: uniqueName('heal'),
      start_date: fields.start,
      end_date: fields.end,
      reservations: [blazarHostReservation({ min: fields.min ?? 1, max: fields.min ?? 1 })],
    });
    expect(created.status).toBe(201);
    return { id: created.body.lease.id, reservationId: created.body.lease.reservations[0].id, hosts: created.body.lease.reservations[0].hosts };
  }

  beforeAll(async () => {
    for (const host of HOSTS) hostIds.set(host, await enrolHost(api, host));
  }, 60_000);

  afterEach(async () => {
    // The next test starts with every host up and no lease.
    await restoreAll();
    await until('every host up', async () => ((await Promise.all(HOSTS.map(hostJson))).every((h) => h.state === 'up') ? true : undefined));
    await deleteAllLeases(api);
  }, 120_000);

  it('fails a forced-down host (os-hosts says why) and re-books a pending lease on it onto another host', async () => {
    const lease = await createLease({ start: inSeconds(3600), end: inSeconds(7200) });
    const [failing] = lease.hosts;
    expect(HOSTS).toContain(failing);
    expect((await leaseJson(lease.id)).degraded).toBe(false);

    await forceDown(failing, true);
    const failed = await until('the host failed', async () => {
      const host = await hostJson(failing);
      return host.state === 'failed' ? host : undefined;
    });
    expect(failed.state_reason).toBe('its compute service is forced down');
    expect(failed.state_since).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/);

    const healed = await until('the lease re-booked', async () => {
      const json = await leaseJson(lease.id);
      return json.reservations[0].hosts[0] !== failing ? json : undefined;
    });
    const moved = healed.reservations[0];
    expect(moved.hosts).toHaveLength(1);
    expect(HOSTS.filter((h) => h !== failing)).toContain(moved.hosts[0]);
    expect(moved.host_ids).toEqual([hostIds.get(moved.hosts[0])]);
    expect(moved).toMatchObject({ resources_changed: true, missing_resources: false });
    expect(healed.degraded).toBe(true);
    // The booking moved in the calendar too: the failed host is free, the new one booked, nothing twice.
    const allocations = (await api('GET', `/v1/os-hosts/allocations?lease_id=${lease.id}`)).body.allocations;
    const booked = allocations.filter((a: { reservations: unknown[] }) => a.reservations.length > 0).map((a: { resource_id: string }) => a.resource_id);
    expect(booked).toEqual([hostIds.get(moved.hosts[0])]);
    expect(await doubleBookings(stack().db.pool)).toEqual([]);

    // A failed host takes no new lease; once back, it does, and the healed lease keeps its new host.
    const allThree = { name: uniqueName('all'), start_date: inSeconds(3 * 3600), end_date: inSeconds(4 * 3600), reservations: [blazarHostReservation({ min: 3, max: 3 })] };
    const whileFailed = await api('POST', '/v1/leases', allThree);
    expect(whileFailed.status).toBe(409);
    expect(whileFailed.body.error_message).toContain(`2 reservable host(s) are up (2 match its properties) and 1 failed (${failing}): it may fit once they are back.`);
    await forceDown(failing, false);
    const recovered = await until('the host up again', async () => {
      const host = await hostJson(failing);
      return host.state === 'up' ? host : undefined;
    });
    expect(recovered.state_reason).toBe('compute service up and enabled again');
    // The deployment's webhook heard both, with the lease the failure concerned.
    const notices = await until('both host notices', () => {
      const mine = receiver.received.filter((n) => n.body.payload.host_id === hostIds.get(failing));
      return Promise.resolve(mine.length >= 2 ? mine : undefined);
    });
    expect(notices.map((n) => [n.body.event_type, n.body.payload.reason])).toEqual([
      ['host.failed', 'its compute service is forced down'],
      ['host.recovered', 'compute service up and enabled again'],
    ]);
    expect(notices[0].body.payload.lease_ids).toEqual([lease.id]);
    expect(notices[0].headers['idempotency-key']).toMatch(new RegExp(`^host:${hostIds.get(failing)}:failed:\\d+$`));
    expect((await leaseJson(lease.id)).reservations[0].hosts).toEqual(moved.hosts);
    expect((await api('POST', '/v1/leases', { ...allThree, name: uniqueName('all') })).status).toBe(201);
  }, 120_000);

  it('replaces a failed host of an active lease in its aggregate and sets the failed one aside until it is back', async () => {
    const lease = await createLease({ start: 'now', end: inSeconds(3600) });
    await until('the lease active', async () => ((await leaseJson(lease.id)).status === 'ACTIVE' ? true : undefined));
    const [failing] = lease.hosts;
    expect(await aggregateHosts(lease.reservationId)).toEqual([failing]);

    await forceDown(failing, true);
    const healed = await until('a replacement in the lease', async () => {
      const json = await leaseJson(lease.id);
      return json.reservations[0].hosts[0] !== failing ? json : undefined;
    });
    const [replacement] = healed.reservations[0].hosts;
    expect(replacement).not.toBe(failing);
    expect(healed).toMatchObject({ status: 'ACTIVE', degraded: false });
    expect(healed.reservations[0]).toMatchObject({ missing_resources: false, resources_changed: false });
    // Nova: the replacement serves the lease's zone; the failed host sits in the closed failed aggregate, out of the lease and the pool.
    expect(await aggregateHosts(lease.reservationId)).toEqual([replacement]);
    expect(await aggregateHosts(failedAggregate)).toEqual([failing]);
    expect(await aggregateHosts(freepool)).not.toContain(failing);
    expect(await aggregateHosts(freepool)).not.toContain(replacement);
    expect(await doubleBookings(stack().db.pool)).toEqual([]);
    // The lessee hears which host left the lease and which replaced it.
    const healedNotice = await until('the lease.healed notice', () => Promise.resolve(receiver.received.find((n) => n.body.event_type === 'lease.healed' && n.body.payload.lease_id === lease.id)));
    expect(healedNotice.body.payload).toMatchObject({ hosts: [replacement], hosts_removed: [failing], hosts_added: [replacement], status: 'ACTIVE' });

    await forceDown(failing, false);
    // Into the pool first, then out of the failed aggregate (never in no aggregate).
    await until('the recovered host back in the pool only', async () =>
      (await aggregateHosts(freepool)).includes(failing) && (await aggregateHosts(failedAggregate)).length === 0 ? true : undefined,
    );
    expect((await leaseJson(lease.id)).reservations[0].hosts).toEqual([replacement]);
  }, 120_000);

  it('puts a host moved by hand back where the calendar says, and removes an aggregate its ended lease left behind', async () => {
    const lease = await createLease({ start: 'now', end: inSeconds(3600) });
    await until('the lease active', async () => ((await leaseJson(lease.id)).status === 'ACTIVE' ? true : undefined));
    const [host] = lease.hosts;
    const aggregateId = async (name: string) => (await admin.nova.listAggregates()).find((a) => a.name === name)!.id;
    // By hand: out of the lease's aggregate, into the pool.
    await admin.nova.addHostToAggregate(await aggregateId(freepool), host);
    await admin.nova.removeHostFromAggregate(await aggregateId(lease.reservationId), host);
    await until('the host back in its lease', async () =>
      (await aggregateHosts(lease.reservationId)).includes(host) && !(await aggregateHosts(freepool)).includes(host) ? true : undefined,
    );
    expect((await hostJson(host)).last_repair).toMatchObject({ found: `in ${freepool}`, action: `belongs in ${lease.reservationId}`, repaired: true });

    // An aggregate of this lease, once deleted, holding an idle host (left behind, as by a crashed script): emptied into the pool and removed.
    expect((await api('DELETE', `/v1/leases/${lease.id}`)).status).toBe(204);
    const stale = await admin.nova.createAggregate({ name: uniqueName('stale') });
    await admin.nova.setAggregateMetadata(stale.id, { 'leasekeeper:reservation': lease.reservationId, 'leasekeeper:lease': lease.id });
    await admin.nova.addHostToAggregate(stale.id, host);
    await admin.nova.removeHostFromAggregate(await aggregateId(freepool), host);
    await until('the stale aggregate gone, its host in the pool', async () =>
      !(await admin.nova.listAggregates()).some((a) => a.id === stale.id) && (await aggregateHosts(freepool)).includes(host) ? true : undefined,
    );
  }, 120_000);

  it('only reports drift with LK_DRIFT_REPAIR=report', async () => {
    // A watch whose pool is another aggregate: to it every host is in none of its aggregates (the running monitor's view is unchanged).
    const otherPool = await admin.nova.createAggregate({ name: uniqueName('other-pool') });
    try {
      const watch = physicalHostWatch({ pool: stack().db.pool, source: { nova: () => admin.nova }, freepool: otherPool.name, failed: { name: failedAggregate, closedProjectId: CLOSED_PROJECT } });
      const [host] = HOSTS;
      const first = await watch.checkDrift({}, 'report');
      expect(first.seen[hostIds.get(host)!]).toBe(`none>${otherPool.name}`);
      expect(first.reported).toEqual([]); // seen once: nothing yet
      const second = await watch.checkDrift(first.seen, 'report');
      expect(second.reported).toContain(`${host}: in none of its aggregates, belongs in ${otherPool.name}`);
      expect(second.repaired).toEqual([]);
      expect(await aggregateHosts(otherPool.name)).toEqual([]);
      expect((await hostJson(host)).last_repair).toMatchObject({ found: 'in none of its aggregates', action: `belongs in ${otherPool.name}`, repaired: false });
    } finally {
      await admin.nova.deleteAggregate(otherPool.id);
    }
  }, 60_000);

  it('marks an active lease degraded when no host can replace the failed one, and clears it when the host is back', async () => {
    const lease = await createLease({ start: 'now', end: inSeconds(3600), min: 3 });
    await until('the lease active', async () => ((await leaseJson(lease.id)).status === 'ACTIVE' ? true : undefined));
    const failing = lease.hosts[1];

    await forceDown(failing, true);
    const degraded = await until('the lease degraded', async () => {
      const json = await leaseJson(lease.id);
      return json.degraded ? json : undefined;
    });
    // No spare host: the failed one stays booked and in the lease's aggregate, so it returns to the lease when it is back.
    expect(degraded.reservations[0]).toMatchObject({ missing_resources: true, resources_changed: false, hosts: lease.hosts });
    expect(await aggregateHosts(lease.reservationId)).toEqual([...HOSTS].sort());

    await forceDown(failing, false);
    const cleared = await until('the flags cleared', async () => {
      const json = await leaseJson(lease.id);
      return json.degraded ? undefined : json;
    });
    expect(cleared.reservations[0]).toMatchObject({ missing_resources: false, hosts: lease.hosts });
    expect((await hostJson(failing)).state).toBe('up');
  }, 120_000);
});
