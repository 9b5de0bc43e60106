/**
 * The real worker process killed with -9 in the middle of a network segment lease's start (issue
 * 45): the network is made, and a proxy in front of Neutron holds the write of its tags, so the
 * kill lands inside the activity with an untagged network in Neutron. The restarted worker
 * finishes the start on that very network (found by the reservation its description names, then
 * tagged) rather than making a second: one network on the tag, the lease ACTIVE; the end then takes
 * it away and frees the booking. Books no compute host.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ManagedProcess } from '../../dev-stack/processes';
import { networkSegmentPlugin } from '../../src/resources/network-segment';
import { FaultProxy } from '../support/fault-proxy';
import { apiClient, deleteAllLeases, inSeconds, useTestStack } from '../../dev-stack/stack';
import { projectIdOf, rigClients, rigEnv, startWorkerProcess, uniqueName, untilStatus, type Api } from './support';

/** Outside Neutron's tenant range, and apart from the other network segment test files' tags. */
const TAG = 202;
const TAG_WRITE = /\/networks\/[^/]+\/tags$/;

describe('worker killed with -9 in the middle of a network segment lease start', () => {
  const admin = rigClients('leasekeeper-admin');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lk-net-crash-'));
  let proxy: FaultProxy;
  let worker: ManagedProcess | undefined;
  let projectAId: string;
  let segmentId: string | undefined;

  const onTag = () => admin.neutron.findNetworksBySegment({ network_type: 'vlan', physical_network: 'physnet1', segmentation_id: TAG });
  async function deleteNetworksOnTag(): Promise<void> {
    for (const network of await onTag()) await admin.neutron.deleteNetwork(network.id).catch(() => undefined);
  }

  beforeAll(async () => {
    proxy = await FaultProxy.start(rigEnv().LK_NEUTRON_URL);
    projectAId = await projectIdOf('leasekeeper-project-a');
    await deleteNetworksOnTag();
  });
  const stack = useTestStack(
    {
      withPool: (pool) => [networkSegmentPlugin({ pool, cloud: 'calendar-only' })],
      openstack: () => admin,
      noWorker: true, // only the worker process runs leases here
    },
    {
      beforeStop: async () => {
        proxy?.clear();
        if (!worker || worker.child.exitCode !== null || worker.child.signalCode !== null) worker = await startWorker().catch(() => undefined);
        try {
          await deleteAllLeases(api);
          if (segmentId) await api('DELETE', `/v1/networks/${segmentId}`);
        } finally {
          await worker?.stop();
          await deleteNetworksOnTag();
        }
      },
    },
  );
  const api = apiClient(() => stack().url);
  const asA: Api = (method, urlPath, body, headers) => apiClient(stack().url, { 'X-Project-Id': projectAId, 'X-Roles': 'member' })(method, urlPath, body, headers);

  afterAll(async () => {
    await proxy?.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  const startWorker = () => startWorkerProcess(stack(), { neutronUrl: proxy.url, dir: tmp });

  it('the restarted worker starts the lease on the network the killed one made (no second), and the end takes it away', async () => {
    worker = await startWorker();
    const enrolled = await api('POST', '/v1/networks', { network_type: 'vlan', physical_network: 'physnet1', segment_id: String(TAG) });
    expect(enrolled.status).toBe(201);
    segmentId = enrolled.body.network.id;

    // The network's tag write is held for 10 s: the worker is killed while it waits (the proxy then drops it).
    proxy.inject({ method: 'PUT', path: TAG_WRITE, fault: { kind: 'delay', ms: 10_000 }, times: 1 });
    const since = Date.now();
    const created = await asA('POST', '/v1/leases', {
      name: uniqueName('net-crash'),
      start_date: 'now',
      end_date: inSeconds(3600),
      reservations: [{ resource_type: 'network', network_name: uniqueName('crash-net'), network_properties: '', resource_properties: '' }],
    });
    expect(created.status).toBe(201);
    const leaseId: string = created.body.lease.id;
    await proxy.waitForRequest((r) => r.at >= since && r.method === 'PUT' && TAG_WRITE.test(r.path), 60_000);
    worker.child.kill('SIGKILL');
    await worker.exited;
    // Left behind: the network, untagged. The lease must adopt it, not make a second.
    const [left] = await onTag();
    expect(left?.tags ?? []).toEqual([]);
    const restartedAt = Date.now();
    worker = await startWorker();
    const active = await untilStatus(asA, leaseId, 'ACTIVE', 120_000);
    const networks = await onTag();
    expect(networks.map((n) => n.id)).toEqual([left.id]);
    expect(networks[0]).toMatchObject({ project_id: projectAId, 'provider:segmentation_id': TAG });
    expect(networks[0].tags).toContain(`reservation:${active.reservations[0].id}`);
    expect(active.reservations[0].network_id).toBe(networks[0].id);
    process.stdout.write(`network segment lease killed mid-start: ACTIVE ${Date.now() - restartedAt} ms after the restart\n`);

    expect((await asA('PUT', `/v1/leases/${leaseId}`, { end_date: 'now' })).status).toBe(200);
    await untilStatus(asA, leaseId, 'TERMINATED', 120_000);
    expect(await onTag()).toEqual([]);
    expect((await stack().db.pool.query('SELECT 1 FROM network_segment_allocations WHERE lease_id = $1 AND upper(blocks) > now()', [leaseId])).rowCount).toBe(0);
  }, 240_000);
});
