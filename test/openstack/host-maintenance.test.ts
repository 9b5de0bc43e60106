/**
 * A maintenance window with `disable_compute` against the rig's Nova: the pending lease on the host
 * (starting during the window) moves to another host when the window is booked; at the window's start the compute service is
 * disabled (its reason names the window), and the host monitor, looking every half second with a
 * one-second grace, does not count it as a failure; at the end the service is enabled again.
 * Every service is enabled again at the end, whatever happens.
 */
import { physicalHostPlugin } from '../../src/resources/physical-host';
import { physicalHostWatch } from '../../src/resources/physical-host/health';
import { getHostHealth, hostMonitorWorkflowId } from '../../workflows/host-monitor/messages';
import { blazarHostReservation } from '../../dev-stack/fixtures/builders';
import { doubleBookings, enrolHost } from '../../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { deleteAggregateNamed, rigClients, uniqueName } from './support';

const HOSTS = ['fake-1', 'fake-2'];
const CLOSED_PROJECT = 'leasekeeper-freepool';

describe('maintenance windows with the rig', () => {
  const admin = rigClients('leasekeeper-admin');
  const freepool = uniqueName('freepool');
  const failedAggregate = uniqueName('failed');
  const hostIds = new Map<string, string>();

  const stack = useTestStack(
    () => ({
      env: { LK_FREEPOOL_AGGREGATE: freepool, LK_FAILED_AGGREGATE: failedAggregate, LK_HOST_MONITOR_INTERVAL_SECONDS: '0.5', LK_HOST_FAIL_GRACE_SECONDS: '1' },
      withPool: (pool) => [
        physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: () => admin, freepool, failedAggregate, endAggregates: { closedProjectId: CLOSED_PROJECT } }),
      ],
      hostWatch: (pool) => physicalHostWatch({ pool, source: { nova: () => admin.nova }, freepool, failed: { name: failedAggregate, closedProjectId: CLOSED_PROJECT } }),
      openstack: () => admin,
    }),
    {
      beforeStop: async () => {
        for (const host of HOSTS) {
          const [service] = await admin.nova.listServices({ binary: 'nova-compute', host });
          if (service?.status === 'disabled') await admin.nova.updateService(service.id, { status: 'enabled' });
        }
        await deleteAllLeases(api);
        for (const id of hostIds.values()) await api('DELETE', `/v1/os-hosts/${id}`);
        await deleteAggregateNamed(admin, freepool);
        await deleteAggregateNamed(admin, failedAggregate);
      },
      timeoutMs: 180_000,
    },
  );
  const api = apiClient(() => stack().url);
  const until = <T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 30_000) => eventually(check, timeoutMs, 200, () => `not yet: ${what}`);
  const serviceOf = async (host: string) => (await admin.nova.listServices({ binary: 'nova-compute', host }))[0];

  beforeAll(async () => {
    for (const host of HOSTS) hostIds.set(host, await enrolHost(api, host));
  });

  it('moves the pending lease, disables the compute service over the window without a failure, and enables it at the end', async () => {
    const created = await api('POST', '/v1/leases', { name: uniqueName('maint'), start_date: inSeconds(10), end_date: inSeconds(60), reservations: [blazarHostReservation()] });
    expect(created.status).toBe(201);
    const leaseId = created.body.lease.id;
    const [booked] = created.body.lease.reservations[0].hosts as string[];
    const other = HOSTS.find((h) => h !== booked)!;

    const booking = await api('POST', `/v1/os-hosts/${hostIds.get(booked)}/maintenance`, { start_date: inSeconds(3), end_date: inSeconds(12), reason: 'BIOS update', disable_compute: true });
    expect(booking.status).toBe(201);
    const windowId = booking.body.maintenance.id;
    const moved = await until('the lease moved', async () => {
      const lease = (await api('GET', `/v1/leases/${leaseId}`)).body.lease;
      return lease.reservations[0].hosts[0] === other ? lease : undefined;
    });
    expect(moved.reservations[0].resources_changed).toBe(true);

    // In force: the service is disabled with the window's reason.
    const disabled = await until('the compute service disabled', async () => {
      const service = await serviceOf(booked);
      return service.status === 'disabled' ? service : undefined;
    });
    expect(disabled.disabled_reason).toBe(`leasekeeper maintenance ${windowId}: BIOS update`);
    expect((await api('GET', `/v1/maintenance/${windowId}`)).body.maintenance).toMatchObject({ status: 'in_force', compute_disabled: true });

    // Several looks of the monitor later (twice the grace), the host is neither failed nor suspect.
    const monitor = stack().temporal.client.workflow.getHandle(hostMonitorWorkflowId(stack().config.temporal.taskQueue));
    const disabledSeenAt = Date.now();
    await until('two seconds of looks', () => Promise.resolve(Date.now() - disabledSeenAt >= 2_000 ? true : undefined), 10_000);
    const health = await monitor.query(getHostHealth);
    expect(health[hostIds.get(booked)!]).toMatchObject({ state: 'up' });
    expect(health[hostIds.get(booked)!].suspectSinceMs).toBeUndefined();
    expect((await api('GET', `/v1/os-hosts/${hostIds.get(booked)}`)).body.host.state).toBe('up');

    // At the end: enabled again, on record as over.
    await until('the compute service enabled again', async () => ((await serviceOf(booked)).status === 'enabled' ? true : undefined));
    const over = await until('the window over', async () => {
      const window = (await api('GET', `/v1/maintenance/${windowId}`)).body.maintenance;
      return window.status === 'over' && !window.compute_disabled ? window : undefined;
    });
    expect(over.disable_compute).toBe(true);
    expect((await api('GET', `/v1/os-hosts/${hostIds.get(booked)}`)).body.host.state).toBe('up');
    expect(await doubleBookings(stack().db.pool)).toEqual([]);
  });

  it("leaves a service an operator disabled before the window as it was", async () => {
    await deleteAllLeases(api); // the first test's lease holds a host now
    const host = HOSTS[1];
    const service = await serviceOf(host);
    await admin.nova.updateService(service.id, { status: 'disabled', disabled_reason: 'operator: bad disk' });
    const booking = await api('POST', `/v1/os-hosts/${hostIds.get(host)}/maintenance`, { start_date: 'now', end_date: inSeconds(4), reason: 'disk swap', disable_compute: true });
    expect(booking.status).toBe(201);
    await stack().temporal.client.workflow.getHandle(`maintenance-${booking.body.maintenance.id}`).result();
    expect(await serviceOf(host)).toMatchObject({ status: 'disabled', disabled_reason: 'operator: bad disk' });
    await admin.nova.updateService(service.id, { status: 'enabled' });
  });
});
