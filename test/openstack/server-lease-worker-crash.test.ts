/**
 * The real worker process killed with -9 while a server lease starts: once while its unshelve call
 * is held by the proxy (Nova never got it), once after Nova got it while the worker waits for the
 * server to run. After a restart the lease is ACTIVE with the server running on the reserved host,
 * unshelved once.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ManagedProcess } from '../../dev-stack/processes';
import { serverHost, type OpenStackClients, type Server } from '../../src/openstack';
import { virtualServerPlugin } from '../../src/resources/virtual-server';
import { FaultProxy, type ProxiedRequest } from '../support/fault-proxy';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { KeystoneSession } from '../../src/openstack';
import { bootServer, deleteServers, rigClients, rigCredentials, rigEnv, startWorkerProcess, uniqueName } from './support';

const SERVER_ACTION = /\/servers\/[0-9a-f-]+\/action$/;

describe('worker killed with -9 mid-unshelve of a server lease', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lk-vm-crash-'));
  const servers: string[] = [];
  let proxy: FaultProxy;
  let asA: ReturnType<typeof apiClient>;
  let worker: ManagedProcess | undefined;

  const startWorker = () => startWorkerProcess(stack(), { novaUrl: proxy.url, dir: tmp, env: { LK_CAPACITY_REFRESH_SECONDS: '0' } });
  const statusOf = async (id: string) => (await asA('GET', `/v1/leases/${id}`)).body.lease.status as string;
  const boot = (clients: OpenStackClients): Promise<Server> => bootServer(clients, {}, (id) => servers.push(id));
  const unshelveOf = (serverId: string) => (r: ProxiedRequest) => r.method === 'POST' && r.path.includes(serverId) && r.body.includes('"unshelve"');

  beforeAll(async () => {
    proxy = await FaultProxy.start(rigEnv().LK_NOVA_URL);
  });
  // The API validates with the plugin; only the worker process runs leases.
  const stack = useTestStack(
    { withPool: (pool) => [virtualServerPlugin({ pool, cloud: () => admin })] },
    {
      beforeStop: async () => {
        proxy?.clear();
        if (!worker || worker.child.exitCode !== null) worker = await startWorker().catch(() => undefined);
        try {
          await deleteAllLeases(asA);
        } finally {
          await worker?.stop();
        }
        await deleteServers(servers.map((id) => ({ clients: admin, id })));
      },
    },
  );

  beforeAll(async () => {
    await stack().stopWorker();
    const projectAId = (await new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-a') }).authenticate()).projectId;
    asA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a' });
  });

  afterAll(async () => {
    await proxy?.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  async function restart(): Promise<number> {
    worker!.child.kill('SIGKILL');
    await worker!.exited;
    worker = await startWorker();
    return Date.now();
  }

  /** Books the server on fake-3 and, once the server is shelved, moves the start to now; returns the lease id. */
  async function leaseStartingSoon(server: Server): Promise<string> {
    const created = await asA('POST', '/v1/leases', {
      name: uniqueName('vm-crash'),
      start_date: inSeconds(3600),
      end_date: inSeconds(7200),
      reservations: [{ resource_type: 'virtual:server', server_id: server.id, resource_properties: JSON.stringify(['=', '$hypervisor_hostname', 'fake-3']) }],
    });
    expect(created.status).toBe(201);
    const id = created.body.lease.id as string;
    await eventually(async () => ((await admin.nova.getServer(server.id)).status === 'SHELVED_OFFLOADED' ? true : undefined), 60_000);
    expect((await asA('PUT', `/v1/leases/${id}`, { start_date: 'now' })).status).toBe(200);
    return id;
  }

  it('recovers when killed before Nova got the unshelve, and when killed while waiting for the server to run', async () => {
    worker = await startWorker();

    // 1. The unshelve call is held by the proxy and never reaches Nova: the worker dies with it.
    const first = await boot(projectA);
    const since = Date.now();
    proxy.inject({ method: 'POST', path: SERVER_ACTION, bodyIncludes: '"unshelve"', fault: { kind: 'hang' }, times: 1 });
    const firstLease = await leaseStartingSoon(first);
    await proxy.waitForRequest((r) => r.at >= since && unshelveOf(first.id)(r), 60_000);
    let restarted = await restart();
    await eventually(async () => ((await statusOf(firstLease)) === 'ACTIVE' ? true : undefined), 120_000);
    console.log(`killed with the unshelve held: ACTIVE ${Date.now() - restarted} ms after the restart`);
    let running = await admin.nova.getServer(first.id);
    expect(running.status).toBe('ACTIVE');
    expect(serverHost(running)).toBe('fake-3');

    // 2. Nova got the unshelve; the worker dies while it polls the server (the poll is held).
    const second = await boot(projectA);
    const secondSince = Date.now();
    const secondLease = await leaseStartingSoon(second);
    await proxy.waitForRequest((r) => r.at >= secondSince && unshelveOf(second.id)(r), 60_000);
    const unshelvedAt = Date.now();
    proxy.inject({ method: 'GET', path: new RegExp(`/servers/${second.id}$`), fault: { kind: 'hang' }, times: 1 });
    await proxy.waitForRequest((r) => r.at >= unshelvedAt && r.method === 'GET' && r.path.endsWith(second.id), 30_000);
    restarted = await restart();
    await eventually(async () => ((await statusOf(secondLease)) === 'ACTIVE' ? true : undefined), 120_000);
    console.log(`killed after the unshelve: ACTIVE ${Date.now() - restarted} ms after the restart`);
    running = await admin.nova.getServer(second.id);
    expect(running.status).toBe('ACTIVE');
    expect(serverHost(running)).toBe('fake-3');
    // Unshelved once: the new worker saw the server running (or unshelving) and did not ask again.
    expect(proxy.requests.filter(unshelveOf(second.id))).toHaveLength(1);
  }, 300_000);
});
