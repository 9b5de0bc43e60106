/**
 * Network segment leases (`network`, issue 45) against the rig's Neutron, whose ML2 VLAN range
 * physnet1:100:199 is listed as a network segment range (scripts/openstack/README.md, "Network
 * segments"): two tags outside it enrolled (and tags Neutron could hand out refused); a lease of a
 * host and a segment for project A, a second of the other segment for project B, and a third for
 * the window refused with offers; a booked segment not removable; at the start A's network on
 * exactly the reserved tag, owned by A, and a server of A's booted on the leased host attached to
 * it; at the end (faults on Neutron's port listing and network delete retried) both gone. Start and end
 * lags are measured as for the other types (start moved to now → network in Neutron; end moved to
 * now → network gone).
 */
import { networkSegmentPlugin } from '../../src/resources/network-segment';
import { physicalHostPlugin } from '../../src/resources/physical-host';
import { openStackClients } from '../../src/openstack';
import { FaultProxy } from '../support/fault-proxy';
import { blazarHostReservation } from '../../dev-stack/fixtures/builders';
import { enrolHost, orphanBookings } from '../../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { deleteAggregateNamed, FLAVOR, type Api, IMAGE, leaseAs, projectIdOf, rigClients, rigCredentials, rigEnv, serverGone, uniqueName, untilStatus } from './support';

const HOST = 'fake-3';
/** Outside Neutron's tenant range (100..199), and apart from the tags of the other network segment test files. */
const TAGS = [200, 201];

describe('network segment leases in Neutron', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const freepool = uniqueName('freepool');
  let proxy: FaultProxy;
  let projectAId: string;
  let projectBId: string;
  const segments: string[] = [];

  /** Networks on our tags (what an interrupted earlier run may have left). */
  const networksOnTag = (tag: number) => admin.neutron.findNetworksBySegment({ network_type: 'vlan', physical_network: 'physnet1', segmentation_id: tag });
  async function deleteNetworksOnTags(): Promise<void> {
    for (const tag of TAGS) {
      for (const network of await networksOnTag(tag)) {
        for (const port of await admin.neutron.listPorts({ network_id: network.id })) await admin.neutron.deletePort(port.id).catch(() => undefined);
        await admin.neutron.deleteNetwork(network.id).catch(() => undefined);
      }
    }
  }

  beforeAll(async () => {
    proxy = await FaultProxy.start(rigEnv().LK_NEUTRON_URL);
    [projectAId, projectBId] = await Promise.all([projectIdOf('leasekeeper-project-a'), projectIdOf('leasekeeper-project-b')]);
    await deleteNetworksOnTags();
  });
  const stack = useTestStack(
    () => {
      const throughProxy = openStackClients({ credentials: { ...rigCredentials('leasekeeper-admin'), endpointOverride: { network: proxy.url } }, timeoutMs: 5_000 });
      return {
        env: { LK_FREEPOOL_AGGREGATE: freepool },
        withPool: (pool) => [
          physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: () => admin, freepool }),
          networkSegmentPlugin({ pool, cloud: () => throughProxy }),
        ],
        openstack: () => admin,
      };
    },
    {
      beforeStop: async () => {
        proxy.clear();
        try {
          await deleteAllLeases(api);
          for (const id of segments) await api('DELETE', `/v1/networks/${id}`);
          for (const host of (await api('GET', '/v1/os-hosts')).body?.hosts ?? []) await api('DELETE', `/v1/os-hosts/${host.id}`);
        } finally {
          await deleteAggregateNamed(admin, freepool);
          await deleteNetworksOnTags();
        }
      },
    },
  );
  const api = apiClient(() => stack().url);
  /** A member of a rig project (its Keystone id, known once the tests run). */
  const member = (projectId: () => string): Api => (method, path, body, headers) => apiClient(stack().url, { 'X-Project-Id': projectId(), 'X-Roles': 'member' })(method, path, body, headers);
  const asA = member(() => projectAId);
  const asB = member(() => projectBId);

  afterAll(async () => {
    await proxy?.stop();
  });

  it('enrols two VLAN segments outside the tenant range, refusing tags Neutron could hand out and unknown physical networks', async () => {
    const inRange = await api('POST', '/v1/networks', { network_type: 'vlan', physical_network: 'physnet1', segment_id: '150' });
    expect(inRange.status).toBe(409);
    expect(inRange.body.error_message).toMatch(/lies in Neutron's segment range .*\(100-199\), which Neutron hands to tenant networks/);
    const unknown = await api('POST', '/v1/networks', { network_type: 'vlan', physical_network: 'physnet9', segment_id: '200' });
    expect(unknown.status).toBe(409);
    expect(unknown.body.error_message).toContain("physical network physnet9 is not in Neutron's network segment ranges");
    expect((await asA('POST', '/v1/networks', { network_type: 'vlan', physical_network: 'physnet1', segment_id: '200' })).status).toBe(403);
    for (const tag of TAGS) {
      const enrolled = await api('POST', '/v1/networks', { network_type: 'vlan', physical_network: 'physnet1', segment_id: String(tag), stitch_provider: 'none' });
      expect(enrolled.status).toBe(201);
      expect(enrolled.body.network).toMatchObject({ network_type: 'vlan', physical_network: 'physnet1', segment_id: String(tag), stitch_provider: 'none' });
      segments.push(enrolled.body.network.id);
    }
    expect((await api('POST', '/v1/networks', { network_type: 'vlan', physical_network: 'physnet1', segment_id: 200 })).status).toBe(409);
  });

  it("starts the lessee's network on the reserved tag with a leased host whose server attaches to it, and takes both back at the end, retrying Neutron faults", async () => {
    await enrolHost(api, HOST);
    const networkName = uniqueName('lab-net');
    const window = { start_date: inSeconds(3600), end_date: inSeconds(7200) };
    const network = (name: string) => ({ resource_type: 'network', network_name: name, network_description: 'a lab VLAN', network_properties: '["==", "$physical_network", "physnet1"]', resource_properties: '' });
    const created = await asA('POST', '/v1/leases', { name: uniqueName('net-a'), ...window, reservations: [blazarHostReservation({ before_end: '' }), network(networkName)] });
    expect(created.status).toBe(201);
    const leaseId: string = created.body.lease.id;
    const reserved = created.body.lease.reservations.find((r: { resource_type: string }) => r.resource_type === 'network');
    expect(reserved).toMatchObject({ network_name: networkName, network_description: 'a lab VLAN', network_id: null, segment: { network_type: 'vlan', physical_network: 'physnet1' } });
    const tag = Number(reserved.segment.segment_id);
    expect(TAGS).toContain(tag);

    // Project B takes the other segment; a third request for the window gets 409 with offers.
    const second = await asB('POST', '/v1/leases', { name: uniqueName('net-b'), ...window, reservations: [network(uniqueName('b-net'))] });
    expect(second.status).toBe(201);
    expect(second.body.lease.reservations[0].segment.segment_id).toBe(String(TAGS.find((t) => t !== tag)));
    const third = await asB('POST', '/v1/leases', { name: uniqueName('net-c'), ...window, reservations: [network(uniqueName('c-net'))] });
    expect(third.status).toBe(409);
    expect(third.body.reason).toBe('capacity');
    expect(third.body.offers.length).toBeGreaterThan(0);
    expect(third.body.offers[0].reservations).toEqual([expect.objectContaining({ resource_type: 'network' })]);
    expect((await asB('DELETE', `/v1/leases/${second.body.lease.id}`)).status).toBe(204);

    // A booked segment cannot be removed: 409 naming the lease.
    const segmentId = segments[TAGS.indexOf(tag)];
    const removal = await api('DELETE', `/v1/networks/${segmentId}`);
    expect(removal.status).toBe(409);
    expect(removal.body.error_message).toContain(leaseId);

    const startAt = Date.now();
    expect((await asA('PUT', `/v1/leases/${leaseId}`, { start_date: 'now' })).status).toBe(200);
    const [made] = await eventually(async () => {
      const onTag = await networksOnTag(tag);
      return onTag.length > 0 && onTag[0].tags?.length ? onTag : undefined;
    }, 60_000);
    const startLag = Date.now() - startAt;
    const active = await untilStatus(asA, leaseId, 'ACTIVE', 120_000);
    expect(await networksOnTag(tag)).toHaveLength(1);
    expect(made).toMatchObject({ name: networkName, project_id: projectAId, 'provider:network_type': 'vlan', 'provider:physical_network': 'physnet1', 'provider:segmentation_id': tag });
    expect(active.reservations.find((r: { resource_type: string }) => r.resource_type === 'network').network_id).toBe(made.id);
    expect((await projectA.neutron.listNetworks({ name: networkName })).map((n) => n.id)).toEqual([made.id]); // the lessee sees it as its own

    // A server of the lessee's, in the lease's zone (its host), on its network: the port binds on the host through physnet1.
    await projectA.neutron.createSubnet({ network_id: made.id, cidr: '10.97.0.0/24', ip_version: 4, enable_dhcp: false });
    const zone: string = active.reservations.find((r: { resource_type: string }) => r.resource_type === 'physical:host').availability_zone;
    const flavor = (await projectA.nova.listFlavors()).find((f) => f.name === FLAVOR)!;
    const image = (await projectA.glance.listImages({ name: IMAGE }))[0];
    const server = await projectA.nova.createServer({ name: uniqueName('on-vlan'), flavorRef: flavor.id, imageRef: image.id, networks: [{ uuid: made.id }], availability_zone: zone });
    const booted = await projectA.nova.waitForServer(server.id, (s) => s.status === 'ACTIVE' || s.status === 'ERROR', { timeoutMs: 90_000, failOnError: false });
    expect(booted.status).toBe('ACTIVE');
    expect((await admin.nova.getServer(server.id))['OS-EXT-SRV-ATTR:host']).toBe(HOST);
    const [port] = await admin.neutron.listPorts({ network_id: made.id, device_id: server.id });
    expect(port).toMatchObject({ 'binding:host_id': HOST, 'binding:vif_type': 'ovs' });

    // The end: the server (the host lease's) and the network (its ports first) both go; Neutron's
    // first port listing and first network delete fail (retried).
    proxy.inject({ method: 'GET', path: /\/ports\?/, fault: { kind: 'status', status: 503 }, times: 1 });
    proxy.inject({ method: 'DELETE', path: /\/networks\/[^/]+$/, fault: { kind: 'status', status: 500 }, times: 1 });
    const endAt = Date.now();
    expect((await asA('PUT', `/v1/leases/${leaseId}`, { end_date: 'now' })).status).toBe(200);
    await eventually(async () => ((await networksOnTag(tag)).length === 0 ? true : undefined), 120_000);
    const endLag = Date.now() - endAt;
    await untilStatus(asA, leaseId, 'TERMINATED', 120_000);
    expect(proxy.injected()).toBe(2);
    expect(await serverGone(admin, server.id)).toBe(true);
    expect((await leaseAs(asA, leaseId)).reservations.find((r: { resource_type: string }) => r.resource_type === 'network').network_id).toBeNull();
    expect(await orphanBookings(stack().db.pool)).toEqual([]);
    expect((await api('DELETE', `/v1/networks/${segmentId}`)).status).toBe(204);
    segments.splice(segments.indexOf(segmentId), 1);
    process.stdout.write(`network segment lease: start lag ${startLag} ms (start moved to now → network on the tag in Neutron), end lag ${endLag} ms (end moved to now → network gone, two faults retried)\n`);
  }, 360_000);
});
