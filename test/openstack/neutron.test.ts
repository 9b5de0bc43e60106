/** Neutron against the rig: network, subnet, port binding to a fake host, QoS minimum bandwidth; network segment ranges, provider networks by segment and by tag, router interfaces. */
import { NotFoundError, resourceRequestGroups } from '../../src/openstack';
import { Cleanup, rigClients, uniqueName } from './support';

const { neutron, keystone } = rigClients('leasekeeper-admin');
const cleanup = new Cleanup();

afterAll(async () => {
  await cleanup.run();
});

test('a port bound to fake-2 gets vif_type ovs; a QoS minimum-bandwidth policy gives it a resource_request', async () => {
  const [projectA] = await keystone.listProjects({ name: 'project-a' });
  const projectId = projectA?.id ?? '';
  const name = uniqueName('net');
  const network = await neutron.createNetwork({ name, project_id: projectId });
  cleanup.add(`network ${name}`, () => neutron.deleteNetwork(network.id));
  expect(network).toMatchObject({ name, project_id: projectId, status: 'ACTIVE', 'provider:network_type': 'vlan', 'provider:physical_network': 'physnet1' });
  expect((await neutron.getNetwork(network.id)).id).toBe(network.id);
  expect((await neutron.listNetworks({ name })).map((n) => n.id)).toEqual([network.id]);

  const subnet = await neutron.createSubnet({ network_id: network.id, cidr: '10.98.0.0/24', ip_version: 4, name, project_id: projectId, enable_dhcp: false });
  expect(subnet).toMatchObject({ network_id: network.id, cidr: '10.98.0.0/24', gateway_ip: '10.98.0.1' });

  const port = await neutron.createPort({ network_id: network.id, name: `${name}-plain`, project_id: projectId });
  cleanup.add(`port ${port.id}`, () => neutron.deletePort(port.id));
  expect(port.fixed_ips[0]?.subnet_id).toBe(subnet.id);
  expect(port['binding:vif_type']).toBe('unbound');
  expect(port.resource_request ?? null).toBeNull();

  const bound = await neutron.updatePort(port.id, { 'binding:host_id': 'fake-2', 'binding:profile': { lk: 'test' } });
  expect(bound).toMatchObject({ 'binding:host_id': 'fake-2', 'binding:vif_type': 'ovs', 'binding:profile': { lk: 'test' } });
  expect((await neutron.getPort(port.id))['binding:vif_type']).toBe('ovs');

  const policy = await neutron.createQosPolicy({ name, project_id: projectId });
  cleanup.add(`qos policy ${name}`, () => neutron.deleteQosPolicy(policy.id));
  const rule = await neutron.createMinimumBandwidthRule(policy.id, { min_kbps: 1000, direction: 'egress' });
  expect(rule).toMatchObject({ min_kbps: 1000, direction: 'egress' });
  expect((await neutron.listMinimumBandwidthRules(policy.id)).map((r) => r.id)).toEqual([rule.id]);
  expect((await neutron.getQosPolicy(policy.id)).rules).toEqual([expect.objectContaining({ id: rule.id, type: 'minimum_bandwidth' })]);

  const qosPort = await neutron.createPort({ network_id: network.id, name: `${name}-qos`, project_id: projectId, qos_policy_id: policy.id });
  cleanup.add(`port ${qosPort.id}`, () => neutron.deletePort(qosPort.id));
  // Zed has port-resource-request-groups: { request_groups, same_subtree }.
  expect(qosPort.resource_request).toMatchObject({ request_groups: [{ id: expect.any(String) }], same_subtree: [expect.any(String)] });
  const groups = resourceRequestGroups(qosPort.resource_request);
  expect(groups).toHaveLength(1);
  expect(groups[0]?.resources).toEqual({ NET_BW_EGR_KILOBIT_PER_SEC: 1000 });
  expect(groups[0]?.required.sort()).toEqual(['CUSTOM_PHYSNET_PHYSNET1', 'CUSTOM_VNIC_TYPE_NORMAL']);

  const ports = await neutron.listPorts({ network_id: network.id });
  expect(ports.map((p) => p.id).sort()).toEqual([port.id, qosPort.id].sort());

  // Clean up in order, checking each is gone.
  await neutron.deletePort(qosPort.id);
  await neutron.deletePort(port.id);
  await expect(neutron.getPort(port.id)).rejects.toBeInstanceOf(NotFoundError);
  await neutron.deleteMinimumBandwidthRule(policy.id, rule.id);
  await neutron.deleteQosPolicy(policy.id);
  await neutron.deleteSubnet(subnet.id);
  await neutron.deleteNetwork(network.id);
  await expect(neutron.getNetwork(network.id)).rejects.toBeInstanceOf(NotFoundError);
});

test("network segments (issue 45): the VLAN ranges Neutron hands to tenants, a provider network found by its segment and by tag, a router's interface removed by its port", async () => {
  const ranges = await neutron.listNetworkSegmentRanges();
  // scripts/openstack/templates/ml2_conf.ini: physnet1:100:199, listed by the network_segment_range service plugin.
  expect(ranges).toContainEqual(expect.objectContaining({ network_type: 'vlan', physical_network: 'physnet1', minimum: 100, maximum: 199, shared: true, default: true }));

  const [projectB] = await keystone.listProjects({ name: 'project-b' });
  const tag = 209; // outside the tenant range, and no lease test's
  for (const left of await neutron.findNetworksBySegment({ network_type: 'vlan', physical_network: 'physnet1', segmentation_id: tag })) await neutron.deleteNetwork(left.id);
  const name = uniqueName('segment');
  const network = await neutron.createNetwork({ name, project_id: projectB.id, 'provider:network_type': 'vlan', 'provider:physical_network': 'physnet1', 'provider:segmentation_id': tag });
  cleanup.add(`network ${name}`, () => neutron.deleteNetwork(network.id));
  expect(network).toMatchObject({ project_id: projectB.id, 'provider:segmentation_id': tag });
  expect((await neutron.findNetworksBySegment({ network_type: 'vlan', physical_network: 'physnet1', segmentation_id: tag })).map((n) => n.id)).toEqual([network.id]);
  expect(await neutron.findNetworksBySegment({ network_type: 'vlan', physical_network: 'physnet1', segmentation_id: tag + 1 })).toEqual([]);
  await neutron.replaceTags('networks', network.id, ['blazar', `reservation:${name}`]);
  expect((await neutron.listNetworks({ tags: `reservation:${name}` })).map((n) => n.id)).toEqual([network.id]);

  const subnet = await neutron.createSubnet({ network_id: network.id, cidr: '10.96.0.0/24', ip_version: 4, project_id: projectB.id, enable_dhcp: false });
  const router = (await neutron.http.post<{ router: { id: string } }>('/routers', { router: { name, project_id: projectB.id } })).router;
  cleanup.add(`router ${name}`, () => neutron.http.delete(`/routers/${router.id}`));
  await neutron.http.put(`/routers/${router.id}/add_router_interface`, { subnet_id: subnet.id });
  const [routerPort] = await neutron.listPorts({ network_id: network.id, device_id: router.id });
  expect(routerPort?.device_owner).toBe('network:router_interface');
  await neutron.removeRouterInterface(router.id, { port_id: routerPort.id });
  expect(await neutron.listPorts({ network_id: network.id })).toEqual([]);
  await neutron.http.delete(`/routers/${router.id}`);
  await neutron.deleteNetwork(network.id);
  expect(await neutron.findNetworksBySegment({ network_type: 'vlan', physical_network: 'physnet1', segmentation_id: tag })).toEqual([]);
});
