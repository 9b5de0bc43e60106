/**
 * The real worker process killed with -9 while an instance lease starts: its call putting a host
 * into the reservation's aggregate is held by the proxy (Nova never got it). After a restart the
 * lease is ACTIVE: the lessee has the flavor, the hosts are in the aggregate, the slots are
 * Placement inventory; and a delete takes it all back.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ManagedProcess } from '../../dev-stack/processes';
import { KeystoneSession, NotFoundError } from '../../src/openstack';
import { virtualInstancePlugin } from '../../src/resources/virtual-instance';
import { reservationProviderName, reservationResourceClass } from '../../src/resources/virtual-instance/nova-resources';
import { FaultProxy } from '../support/fault-proxy';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { deleteAggregateNamed, rigClients, rigCredentials, rigEnv, startWorkerProcess, uniqueName } from './support';

const ADD_HOST = /\/os-aggregates\/\d+\/action$/;

describe('worker killed with -9 mid-start of an instance lease', () => {
  const admin = rigClients('leasekeeper-admin');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lk-instance-crash-'));
  const freepool = uniqueName('freepool');
  let proxy: FaultProxy;
  let asA: ReturnType<typeof apiClient>;
  let projectAId: string;
  let worker: ManagedProcess | undefined;
  const asAdmin = () => apiClient(stack().url);

  const startWorker = () => startWorkerProcess(stack(), { novaUrl: proxy.url, dir: tmp, env: { LK_CAPACITY_REFRESH_SECONDS: '0', LK_FREEPOOL_AGGREGATE: freepool } });

  beforeAll(async () => {
    proxy = await FaultProxy.start(rigEnv().LK_NOVA_URL);
  });
  // The API validates with the plugin; only the worker process runs leases.
  const stack = useTestStack(
    {
      env: { LK_FREEPOOL_AGGREGATE: freepool },
      withPool: (pool) => [virtualInstancePlugin({ pool, settings: { cleaningMs: 0, capacityRefreshMs: 0 }, cloud: () => admin })],
      openstack: () => admin,
    },
    {
      beforeStop: async () => {
        proxy?.clear();
        if (!worker || worker.child.exitCode !== null) worker = await startWorker().catch(() => undefined);
        try {
          await deleteAllLeases(asAdmin());
          for (const host of (await asAdmin()('GET', '/v1/os-hosts')).body?.hosts ?? []) await asAdmin()('DELETE', `/v1/os-hosts/${host.id}`);
        } finally {
          await worker?.stop();
        }
        await deleteAggregateNamed(admin, freepool);
      },
    },
  );

  beforeAll(async () => {
    await stack().stopWorker();
    projectAId = (await new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-a') }).authenticate()).projectId;
    asA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a', 'x-roles': 'member' });
    for (const name of ['fake-1', 'fake-2', 'fake-3']) expect((await asAdmin()('POST', '/v1/os-hosts', { name })).status).toBe(201);
  }, 120_000);

  afterAll(async () => {
    await proxy?.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('recovers when killed before Nova got a host into the aggregate, and a delete then takes everything back', async () => {
    worker = await startWorker();
    const created = await asA('POST', '/v1/leases', {
      name: uniqueName('instance-crash'),
      start_date: inSeconds(12),
      end_date: inSeconds(3600),
      reservations: [{ resource_type: 'virtual:instance', vcpus: 1, memory_mb: 512, disk_gb: 1, amount: 2, affinity: 'None' }],
    });
    expect(created).toMatchObject({ status: 201 });
    const leaseId: string = created.body.lease.id;
    const reservation = created.body.lease.reservations[0];
    const [host] = reservation.hosts as string[];
    expect(reservation.slots_per_host).toEqual({ [host]: 2 }); // packed on one host

    const since = Date.now();
    proxy.inject({ method: 'POST', path: ADD_HOST, bodyIncludes: '"add_host"', fault: { kind: 'hang' }, times: 1 });
    await proxy.waitForRequest((r) => r.at >= since && r.method === 'POST' && ADD_HOST.test(r.path) && r.body.includes('"add_host"'), 60_000);
    worker.child.kill('SIGKILL');
    await worker.exited;
    worker = await startWorker();
    const restarted = Date.now();
    await eventually(async () => ((await asA('GET', `/v1/leases/${leaseId}`)).body.lease.status === 'ACTIVE' ? true : undefined), 120_000);
    console.log(`killed with add_host held: ACTIVE ${Date.now() - restarted} ms after the restart`);

    expect((await admin.nova.listFlavorAccess(reservation.id)).map((a) => a.tenant_id)).toEqual([projectAId]);
    const aggregate = (await admin.nova.listAggregates()).find((a) => a.name === reservation.id)!;
    expect(aggregate.hosts).toEqual([host]);
    expect(aggregate.metadata).toMatchObject({ reservation: reservation.id, filter_tenant_id: projectAId });
    const [provider] = await admin.placement.listResourceProviders({ name: reservationProviderName(host) });
    expect((await admin.placement.getInventories(provider.uuid)).inventories[reservationResourceClass(reservation.id)]?.total).toBe(2);

    await deleteAllLeases(asA);
    await expect(admin.nova.getFlavor(reservation.id)).rejects.toBeInstanceOf(NotFoundError);
    expect((await admin.nova.listAggregates()).some((a) => a.name === reservation.id)).toBe(false);
  }, 300_000);
});
