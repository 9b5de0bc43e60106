/**
 * The real worker process killed with -9 in the middle of a host lease's start and of its end (a
 * proxy in front of Nova holds the aggregate call, so the kill lands inside the activity). After a
 * restart the lease completes and the host ends where it belongs: in the lease aggregate while
 * active, back in the pool after the end, never in no aggregate.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ManagedProcess } from '../../scripts/lib/processes';
import { physicalHostPlugin } from '../../src/resources/physical-host';
import { FaultProxy, type ProxiedRequest } from '../support/fault-proxy';
import { apiClient, deleteAllLeases, eventually, inSeconds, startTestStack, type TestStack } from '../support/stack';
import { rigClients, rigEnv, startWorkerProcess, uniqueName } from './support';

const HOST = 'fake-2';
const AGGREGATE_ACTION = /\/os-aggregates\/\d+\/action$/;

describe('worker killed with -9 mid-start and mid-end of a host lease', () => {
  const admin = rigClients('leasekeeper-admin');
  const freepool = uniqueName('freepool');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lk-crash-'));
  let proxy: FaultProxy;
  let stack: TestStack;
  let api: ReturnType<typeof apiClient>;
  let worker: ManagedProcess | undefined;
  let hostId: string | undefined;

  const aggregateNamed = async (name: string) => (await admin.nova.listAggregates()).find((a) => a.name === name);
  const statusOf = async (id: string) => (await api('GET', `/v1/leases/${id}`)).body.lease.status as string;

  beforeAll(async () => {
    proxy = await FaultProxy.start(rigEnv().LK_NOVA_URL);

    stack = await startTestStack({
      env: { LK_FREEPOOL_AGGREGATE: freepool },
      withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only', freepool })],
      openstack: () => admin,
    });
    await stack.stopWorker(); // only the worker process runs leases here
    api = apiClient(stack.url);
    const enrolled = await api('POST', '/v1/os-hosts', { name: HOST });
    expect(enrolled.status).toBe(201);
    hostId = enrolled.body.host.id;
  });

  afterAll(async () => {
    proxy?.clear();
    if (!worker || worker.child.exitCode !== null) worker = await startWorker().catch(() => undefined);
    await deleteAllLeases(api);
    await worker?.stop();
    if (hostId) await api('DELETE', `/v1/os-hosts/${hostId}`);
    const pool = await aggregateNamed(freepool);
    if (pool) {
      for (const host of pool.hosts) await admin.nova.removeHostFromAggregate(pool.id, host);
      await admin.nova.deleteAggregate(pool.id);
    }
    await stack?.stop();
    await proxy?.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  const startWorker = () => startWorkerProcess(stack, { novaUrl: proxy.url, dir: tmp, env: { LK_FREEPOOL_AGGREGATE: freepool } });

  /** Holds the next matching Nova call, kills the worker once it has been sent, and starts a new worker. */
  async function killDuring(match: (r: ProxiedRequest) => boolean, bodyIncludes: string, trigger: () => Promise<void>): Promise<number> {
    proxy.inject({ method: 'POST', path: AGGREGATE_ACTION, bodyIncludes, fault: { kind: 'delay', ms: 10_000 }, times: 1 });
    const since = Date.now();
    await trigger();
    await proxy.waitForRequest((r) => r.at >= since && match(r), 60_000);
    worker!.child.kill('SIGKILL');
    await worker!.exited;
    worker = await startWorker();
    return Date.now();
  }

  it('completes the start and the end after each crash, with the host where it belongs', async () => {
    worker = await startWorker();
    let lease: { id: string; start_date: string; reservations: Array<{ aggregate: string }> } | undefined;
    const addsHost = (r: ProxiedRequest) => r.method === 'POST' && r.body.includes('add_host');
    let restarted = await killDuring(addsHost, 'add_host', async () => {
      const created = await api('POST', '/v1/leases', {
        name: uniqueName('crash'),
        start_date: inSeconds(2),
        end_date: inSeconds(7200),
        reservations: [{ resource_type: 'physical:host', min: 1, max: 1, hypervisor_properties: '', resource_properties: '', before_end: '' }],
      });
      expect(created.status).toBe(201);
      lease = created.body.lease;
    });
    const { id } = lease!;
    const aggregate = lease!.reservations[0].aggregate;
    await eventually(async () => ((await statusOf(id)) === 'ACTIVE' ? true : undefined), 120_000);
    console.log(`killed mid-start: ACTIVE ${Date.now() - restarted} ms after the restart`);
    expect((await aggregateNamed(aggregate))?.hosts).toEqual([HOST]);
    expect((await aggregateNamed(freepool))?.hosts).toEqual([]);

    const removesHost = (r: ProxiedRequest) => r.method === 'POST' && r.body.includes('remove_host');
    restarted = await killDuring(removesHost, 'remove_host', async () => {
      expect((await api('PUT', `/v1/leases/${id}`, { end_date: 'now' })).status).toBe(200);
    });
    await eventually(async () => ((await statusOf(id)) === 'TERMINATED' ? true : undefined), 120_000);
    console.log(`killed mid-end: TERMINATED ${Date.now() - restarted} ms after the restart`);
    expect((await aggregateNamed(freepool))?.hosts).toEqual([HOST]);
    expect(await aggregateNamed(aggregate)).toBeUndefined();
    const events = (await api('GET', `/v1/leases/${id}`)).body.lease.events.map((e: { status: string }) => e.status);
    expect(events).toEqual(['DONE', 'DONE', 'DONE']);
  }, 300_000);
});
