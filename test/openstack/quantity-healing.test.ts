/**
 * Healing of server and bandwidth reservations with the rig's Nova, Neutron and Placement: the host
 * monitor watches the compute hosts that carry quantity bookings; when one is forced down (what an
 * operator or a fencing agent does to a dead host), a pending lease's server booking moves to
 * another host with room and its linked bandwidth follows it to that host's bridge, both shown as
 * `resources_changed`; a running server's reservation is flagged `missing_resources` (the lease
 * `degraded`) until the host is back. Every service is put back at the end, whatever happens.
 */
import { KeystoneSession, type Network } from '../../src/openstack';
import { bandwidthPlugin } from '../../src/resources/bandwidth';
import { physicalHostWatch } from '../../src/resources/physical-host/health';
import { virtualServerPlugin } from '../../src/resources/virtual-server';
import { startWebhookReceiver, type WebhookReceiver } from '../support/notice-receiver';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { bandwidthProviderName, bootServer, computeForcing, deleteServers, providerNamed, rigClients, rigCredentials, uniqueName } from './support';

describe('healing server and bandwidth reservations with the rig', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const servers: string[] = [];
  const { forceDown, restoreAll } = computeForcing(admin);
  let receiver: WebhookReceiver;
  let asA: ReturnType<typeof apiClient>;
  let network: Network;

  beforeAll(async () => {
    receiver = await startWebhookReceiver();
  });
  afterAll(() => receiver?.close());

  const stack = useTestStack(
    () => ({
      env: { LK_HOST_MONITOR_INTERVAL_SECONDS: '0.5', LK_HOST_FAIL_GRACE_SECONDS: '1', LK_HEALING_RETRY_MINUTES: '0.05', LK_NOTIFY_URL: receiver.url },
      withPool: (pool) => [
        virtualServerPlugin({ pool, cloud: () => admin, settings: { capacityRefreshMs: 0 } }),
        bandwidthPlugin({ pool, cloud: () => admin, settings: { capacityRefreshMs: 0 } }),
      ],
      hostWatch: (pool) => physicalHostWatch({ pool, source: { nova: () => admin.nova }, freepool: uniqueName('unused'), failed: { name: uniqueName('unused'), closedProjectId: 'nobody' } }),
      openstack: () => admin,
    }),
    {
      beforeStop: async () => {
        await restoreAll();
        await deleteAllLeases(asA);
        await deleteServers(servers.map((id) => ({ clients: admin, id })));
        for (const port of network ? await admin.neutron.listPorts({ network_id: network.id }) : []) await admin.neutron.deletePort(port.id).catch(() => undefined);
        if (network) await admin.neutron.deleteNetwork(network.id).catch(() => undefined);
      },
      timeoutMs: 240_000,
    },
  );

  const lease = async (id: string) => (await asA('GET', `/v1/leases/${id}`)).body.lease;
  const until = <T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 60_000) => eventually(check, timeoutMs, 200, () => `not yet: ${what}`);

  beforeAll(async () => {
    const projectAId = (await new KeystoneSession({ credentials: rigCredentials('leasekeeper-project-a') }).authenticate()).projectId;
    asA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a' });
    network = await admin.neutron.createNetwork({ name: uniqueName('heal-net'), project_id: projectAId });
    await admin.neutron.createSubnet({ network_id: network.id, cidr: '10.98.0.0/24', ip_version: 4, project_id: projectAId, enable_dhcp: false });
  });

  afterEach(async () => {
    await restoreAll();
    await deleteAllLeases(asA);
    await deleteServers(servers.splice(0).map((id) => ({ clients: admin, id })));
  }, 240_000);

  it('moves a pending server booking and its linked bandwidth off a failed host, together, and says so', async () => {
    const server = await bootServer(projectA);
    servers.push(server.id);
    const created = await asA('POST', '/v1/leases', {
      name: uniqueName('heal-vm'),
      start_date: inSeconds(3600),
      end_date: inSeconds(7200),
      reservations: [
        { resource_type: 'virtual:server', server_id: server.id },
        { resource_type: 'network:bandwidth', network_id: network.id, egress_kbps: 1000, amount: 1, on_host_of: 0 },
      ],
    });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    const [vm, bandwidth] = created.body.lease.reservations;
    const failing: string = vm.host;
    expect(bandwidth.host).toBe(failing);
    expect(created.body.lease.degraded).toBe(false);

    await forceDown(failing, true);
    const healed = await until('both reservations moved', async () => {
      const json = await lease(id);
      return json.reservations.every((r: { host: string }) => r.host !== failing) ? json : undefined;
    });
    const [movedVm, movedBandwidth] = healed.reservations;
    expect(movedVm).toMatchObject({ resources_changed: true, missing_resources: false, moved_from: failing });
    expect(movedBandwidth.host).toBe(movedVm.host); // on_host_of follows the server
    expect(movedBandwidth.provider).toBe((await providerNamed(admin.placement, bandwidthProviderName(movedVm.host))).uuid);
    expect(movedBandwidth).toMatchObject({ resources_changed: true, missing_resources: false });
    expect(healed.degraded).toBe(true);
    expect(healed.status).toBe('PENDING');

    // The deployment hears of the shared host too, with the lease it concerned (no host id: it is not enrolled).
    const notice = await until('the host.failed notice', () => Promise.resolve(receiver.received.find((n) => n.body.event_type === 'host.failed' && n.body.payload.host === failing)));
    expect(notice.body.payload).toMatchObject({ host_id: null, state: 'failed', reason: 'its compute service is forced down', lease_ids: [id] });

    // While it is failed, a new lease pinned to that host is refused: no host can take it now.
    const pinned = await asA('POST', '/v1/leases', {
      name: uniqueName('pinned'),
      start_date: inSeconds(3 * 3600),
      end_date: inSeconds(4 * 3600),
      reservations: [{ resource_type: 'virtual:server', server_id: (await bootServer(projectA).then((s) => (servers.push(s.id), s))).id, resource_properties: JSON.stringify(['=', '$hypervisor_hostname', failing]) }],
    });
    expect(pinned.status).toBe(409);
    expect(pinned.body.error_message).toContain(`the matching host(s) are failed, down or disabled (${failing}); it may fit once they are back`);

    // Back up: the lease keeps its new host (nothing moves back), and the flag stays until the start.
    await forceDown(failing, false);
    await until('the host.recovered notice', () => Promise.resolve(receiver.received.find((n) => n.body.event_type === 'host.recovered' && n.body.payload.host === failing)));
    expect((await lease(id)).reservations[0]).toMatchObject({ host: movedVm.host, resources_changed: true });
  }, 240_000);

  it('flags a running server whose host failed, and clears the flag when the host is back', async () => {
    const server = await bootServer(projectA);
    servers.push(server.id);
    const created = await asA('POST', '/v1/leases', {
      name: uniqueName('heal-run'),
      start_date: 'now',
      end_date: inSeconds(3600),
      reservations: [{ resource_type: 'virtual:server', server_id: server.id, on_end: 'shelve' }],
    });
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    const running = await until('the lease active', async () => {
      const json = await lease(id);
      return json.status === 'ACTIVE' ? json : undefined;
    }, 120_000);
    const host: string = running.reservations[0].host;

    await forceDown(host, true);
    const degraded = await until('the lease degraded', async () => {
      const json = await lease(id);
      return json.degraded ? json : undefined;
    });
    expect(degraded.reservations[0]).toMatchObject({ host, missing_resources: true, resources_changed: false });
    expect(degraded.status).toBe('ACTIVE');

    await forceDown(host, false);
    const cleared = await until('the flag cleared', async () => {
      const json = await lease(id);
      return json.degraded ? undefined : json;
    });
    expect(cleared.reservations[0]).toMatchObject({ host, missing_resources: false, resources_changed: false });
  }, 240_000);
});
