/**
 * The worker process killed with -9 in the middle of healing: an active host lease's host is
 * forced down, and the worker dies while the heal is in Nova (a proxy holds the call that puts the
 * replacement into the lease's aggregate). After a restart the same heal is finished: the
 * replacement serves the lease, the failed host is set aside, the lease JSON names the replacement,
 * and no host is booked twice.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ManagedProcess } from '../../dev-stack/processes';
import { physicalHostPlugin } from '../../src/resources/physical-host';
import { FaultProxy } from '../support/fault-proxy';
import { blazarHostReservation } from '../../dev-stack/fixtures/builders';
import { doubleBookings, enrolHost } from '../../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { deleteAggregateNamed, rigClients, rigEnv, startWorkerProcess, uniqueName } from './support';

const HOSTS = ['fake-1', 'fake-2'];
const AGGREGATE_ACTION = /\/os-aggregates\/\d+\/action$/;

describe('worker killed with -9 while it heals a lease', () => {
  const admin = rigClients('leasekeeper-admin');
  const freepool = uniqueName('freepool');
  const failedAggregate = uniqueName('failed');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lk-heal-crash-'));
  const hostIds: string[] = [];
  let forcedService: string | undefined;
  let proxy: FaultProxy;
  let worker: ManagedProcess | undefined;

  beforeAll(async () => {
    proxy = await FaultProxy.start(rigEnv().LK_NOVA_URL);
  });
  const stack = useTestStack(
    {
      env: { LK_FREEPOOL_AGGREGATE: freepool },
      withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only', freepool })],
      openstack: () => admin,
      noWorker: true, // only the worker process runs leases and the monitor here
    },
    {
      beforeStop: async () => {
        proxy?.clear();
        if (forcedService) await admin.nova.updateService(forcedService, { forced_down: false });
        if (!worker || worker.child.exitCode !== null || worker.child.signalCode !== null) worker = await startWorker().catch(() => undefined);
        try {
          await deleteAllLeases(api);
        } finally {
          await worker?.stop();
        }
        for (const id of hostIds) await api('DELETE', `/v1/os-hosts/${id}`);
        await deleteAggregateNamed(admin, freepool);
        await deleteAggregateNamed(admin, failedAggregate);
      },
      timeoutMs: 120_000,
    },
  );
  const api = apiClient(() => stack().url);

  afterAll(async () => {
    await proxy?.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  const startWorker = () =>
    startWorkerProcess(stack(), {
      novaUrl: proxy.url,
      dir: tmp,
      env: {
        LK_FREEPOOL_AGGREGATE: freepool,
        LK_FAILED_AGGREGATE: failedAggregate,
        LK_HOST_MONITOR: 'on',
        LK_HOST_MONITOR_INTERVAL_SECONDS: '0.5',
        LK_HOST_FAIL_GRACE_SECONDS: '1',
        LK_HEALING_RETRY_MINUTES: '0.05',
      },
    });
  const aggregateHosts = async (name: string) => [...((await admin.nova.listAggregates()).find((a) => a.name === name)?.hosts ?? [])].sort();

  it('finishes the same heal after the restart', async () => {
    for (const host of HOSTS) hostIds.push(await enrolHost(api, host));
    worker = await startWorker();
    const created = await api('POST', '/v1/leases', { name: uniqueName('heal-crash'), start_date: 'now', end_date: inSeconds(3600), reservations: [blazarHostReservation()] });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    const [failing] = created.body.lease.reservations[0].hosts as string[];
    const replacement = HOSTS.find((h) => h !== failing)!;
    const aggregate: string = created.body.lease.reservations[0].aggregate;
    await eventually(async () => ((await api('GET', `/v1/leases/${id}`)).body.lease.status === 'ACTIVE' ? true : undefined), 60_000);
    expect(await aggregateHosts(aggregate)).toEqual([failing]);

    // The heal's first Nova change puts the replacement into the lease's aggregate: held, then the worker dies.
    proxy.inject({ method: 'POST', path: AGGREGATE_ACTION, bodyIncludes: replacement, fault: { kind: 'delay', ms: 10_000 }, times: 1 });
    const since = Date.now();
    const [service] = await admin.nova.listServices({ binary: 'nova-compute', host: failing });
    forcedService = service.id;
    await admin.nova.updateService(service.id, { forced_down: true });
    await proxy.waitForRequest((r) => r.at >= since && r.method === 'POST' && AGGREGATE_ACTION.test(r.path) && r.body.includes(replacement), 60_000);
    worker.child.kill('SIGKILL');
    await worker.exited;
    // Nothing recorded the heal yet: the lease still names the failed host.
    expect((await api('GET', `/v1/leases/${id}`)).body.lease.reservations[0].hosts).toEqual([failing]);
    worker = await startWorker();

    const healed = await eventually(async () => {
      const lease = (await api('GET', `/v1/leases/${id}`)).body.lease;
      return lease.reservations[0].hosts[0] === replacement ? lease : undefined;
    }, 90_000);
    expect(healed).toMatchObject({ status: 'ACTIVE', degraded: false });
    await eventually(async () => ((await aggregateHosts(aggregate)).join() === replacement ? true : undefined), 30_000);
    expect(await aggregateHosts(failedAggregate)).toEqual([failing]);
    expect(await aggregateHosts(freepool)).toEqual([]);
    expect(await doubleBookings(stack().db.pool)).toEqual([]);
    const hostState = (await api('GET', `/v1/os-hosts/${hostIds[HOSTS.indexOf(failing)]}`)).body.host;
    expect(hostState).toMatchObject({ state: 'failed', state_reason: 'its compute service is forced down' });

    await admin.nova.updateService(service.id, { forced_down: false });
    forcedService = undefined;
    await eventually(async () => ((await aggregateHosts(freepool)).join() === failing && (await aggregateHosts(failedAggregate)).length === 0 ? true : undefined), 30_000);
  }, 240_000);
});
