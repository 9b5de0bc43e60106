/**
 * Neutron (networking API v2.0): networks, subnets, ports (with port binding), floating IPs, QoS
 * policies and their minimum-bandwidth rules, network segment ranges (the `network-segment-range`
 * extension) and routers' interfaces. A port whose QoS policy has a minimum-bandwidth rule carries a
 * `resource_request` that Nova turns into Placement allocations on the bandwidth provider.
 */
import { ignoreNotFound } from './errors';
import { type CallOptions, type QueryParams, ServiceHttp, type Session, seg } from './http';

export interface Network {
  id: string;
  name: string;
  project_id: string;
  tenant_id?: string;
  status: string;
  admin_state_up: boolean;
  shared: boolean;
  subnets: string[];
  mtu?: number;
  'router:external'?: boolean;
  'provider:network_type'?: string | null;
  'provider:physical_network'?: string | null;
  'provider:segmentation_id'?: number | null;
  availability_zones?: string[];
  qos_policy_id?: string | null;
  port_security_enabled?: boolean;
  description?: string;
  tags?: string[];
  created_at?: string;
  updated_at?: string;
  revision_number?: number;
}

/** Filters of a network listing; `tags`: networks carrying all these (comma-separated). */
export interface ListNetworksFilters {
  name?: string;
  project_id?: string;
  shared?: boolean;
  'router:external'?: boolean;
  'provider:network_type'?: string;
  'provider:physical_network'?: string;
  'provider:segmentation_id'?: number;
  tags?: string;
}

/**
 * A range of segmentation ids Neutron knows (the `network-segment-range` extension): a `shared`
 * one is what it hands to any project's tenant networks; a non-shared one is `project_id`'s alone.
 */
export interface NetworkSegmentRange {
  id: string;
  name?: string;
  network_type: string;
  physical_network: string | null;
  minimum: number;
  maximum: number;
  shared: boolean;
  project_id?: string | null;
  default?: boolean;
}

export interface CreateNetworkRequest {
  name?: string;
  project_id?: string;
  admin_state_up?: boolean;
  shared?: boolean;
  description?: string;
  'router:external'?: boolean;
  'provider:network_type'?: 'flat' | 'vlan' | 'vxlan' | 'geneve' | 'gre' | 'local';
  'provider:physical_network'?: string;
  'provider:segmentation_id'?: number;
  qos_policy_id?: string;
  port_security_enabled?: boolean;
  mtu?: number;
}

export interface Subnet {
  id: string;
  name: string;
  network_id: string;
  project_id: string;
  cidr: string;
  ip_version: 4 | 6;
  gateway_ip: string | null;
  enable_dhcp: boolean;
  allocation_pools: Array<{ start: string; end: string }>;
  dns_nameservers: string[];
  host_routes: Array<{ destination: string; nexthop: string }>;
  description?: string;
}

export interface CreateSubnetRequest {
  network_id: string;
  cidr: string;
  ip_version: 4 | 6;
  name?: string;
  project_id?: string;
  gateway_ip?: string | null;
  enable_dhcp?: boolean;
  allocation_pools?: Array<{ start: string; end: string }>;
  dns_nameservers?: string[];
  description?: string;
}

/** A request group of a port's `resource_request` (resource class amounts + traits). */
export interface PortRequestGroup {
  id: string;
  required: string[];
  resources: Record<string, number>;
}

/**
 * The Placement resources a port needs. With the `port-resource-request-groups` extension (Neutron
 * ≥ Yoga) it is `{ request_groups, same_subtree }`; before, one group `{ required, resources }`.
 */
export type PortResourceRequest = { request_groups: PortRequestGroup[]; same_subtree: string[] } | { required: string[]; resources: Record<string, number> };

/** The request groups of a resource request, whichever format Neutron used. */
export function resourceRequestGroups(request: PortResourceRequest | null | undefined): Array<Omit<PortRequestGroup, 'id'> & { id?: string }> {
  if (request === null || request === undefined) return [];
  return 'request_groups' in request ? request.request_groups : [request];
}

export type VnicType = 'normal' | 'direct' | 'macvtap' | 'baremetal' | 'direct-physical' | 'virtio-forwarder' | 'smart-nic' | 'remote-managed';

export interface Port {
  id: string;
  name: string;
  network_id: string;
  project_id: string;
  tenant_id?: string;
  mac_address: string;
  admin_state_up: boolean;
  status: string;
  device_id: string;
  device_owner: string;
  fixed_ips: Array<{ subnet_id: string; ip_address: string }>;
  security_groups?: string[];
  port_security_enabled?: boolean;
  qos_policy_id?: string | null;
  qos_network_policy_id?: string | null;
  /** Null when the port needs no Placement resources. */
  resource_request?: PortResourceRequest | null;
  'binding:host_id'?: string;
  'binding:profile'?: Record<string, unknown>;
  'binding:vif_type'?: string;
  'binding:vif_details'?: Record<string, unknown>;
  'binding:vnic_type'?: VnicType;
  description?: string;
  tags?: string[];
  created_at?: string;
  updated_at?: string;
  revision_number?: number;
}

export interface CreatePortRequest {
  network_id: string;
  name?: string;
  project_id?: string;
  admin_state_up?: boolean;
  device_id?: string;
  device_owner?: string;
  fixed_ips?: Array<{ subnet_id?: string; ip_address?: string }>;
  security_groups?: string[];
  port_security_enabled?: boolean;
  qos_policy_id?: string | null;
  'binding:host_id'?: string;
  'binding:profile'?: Record<string, unknown>;
  'binding:vnic_type'?: VnicType;
  description?: string;
}

export type UpdatePortRequest = Partial<Omit<CreatePortRequest, 'network_id' | 'project_id'>>;

export interface ListPortsFilters {
  network_id?: string;
  device_id?: string;
  device_owner?: string;
  project_id?: string;
  name?: string;
  'binding:host_id'?: string;
  status?: string;
  /** e.g. `ip_address=203.0.113.5`: ports holding that fixed address. */
  fixed_ips?: string;
}

export interface FloatingIp {
  id: string;
  floating_ip_address: string;
  floating_network_id: string;
  project_id: string;
  port_id: string | null;
  fixed_ip_address: string | null;
  router_id: string | null;
  status: string;
  description?: string;
  tags?: string[];
}

export interface CreateFloatingIpRequest {
  floating_network_id: string;
  /** A chosen address: an admin's right (Neutron's policy), as is `project_id`. */
  floating_ip_address?: string;
  subnet_id?: string;
  project_id?: string;
  description?: string;
}

export interface ListFloatingIpsFilters {
  floating_ip_address?: string;
  floating_network_id?: string;
  project_id?: string;
  port_id?: string;
  /** Floating IPs carrying all these tags (comma-separated in the query). */
  tags?: string;
}

export interface QosPolicy {
  id: string;
  name: string;
  project_id: string;
  shared: boolean;
  is_default?: boolean;
  description?: string;
  rules: Array<{ id: string; type: string; [key: string]: unknown }>;
}

export interface MinimumBandwidthRule {
  id: string;
  min_kbps: number;
  direction: 'egress' | 'ingress';
  qos_policy_id?: string;
}

/** A Neutron RBAC policy: `object_type`'s object `object_id` is shared (`action`) with `target_tenant` (a project, or `*` for all). */
export interface RbacPolicy {
  id: string;
  /** `network`, `qos_policy`, `security_group`, `address_scope`, `subnetpool`, … */
  object_type: string;
  object_id: string;
  /** `access_as_shared`, or `access_as_external` (networks). */
  action: string;
  target_tenant: string;
  project_id: string;
}

export interface Agent {
  id: string;
  agent_type: string;
  host: string;
  alive: boolean;
  admin_state_up: boolean;
  binary?: string;
  resources_synced?: boolean | null;
}

export class NeutronClient {
  readonly http: ServiceHttp;

  constructor(session: Session) {
    this.http = new ServiceHttp('network', session, { versionPath: '/v2.0' });
  }

  // --- networks ------------------------------------------------------------------------------------

  async createNetwork(request: CreateNetworkRequest, options: CallOptions = {}): Promise<Network> {
    return (await this.http.post<{ network: Network }>('/networks', { network: request }, options)).network;
  }

  async getNetwork(id: string, options: CallOptions = {}): Promise<Network> {
    return (await this.http.get<{ network: Network }>(`/networks/${seg(id)}`, undefined, options)).network;
  }

  async listNetworks(filters: ListNetworksFilters = {}, options: CallOptions = {}): Promise<Network[]> {
    return (await this.http.get<{ networks: Network[] }>('/networks', filters as QueryParams, options)).networks;
  }

  /** The networks on one segment (an admin sees every project's). */
  findNetworksBySegment(segment: { network_type: string; physical_network: string | null; segmentation_id: number }, options: CallOptions = {}): Promise<Network[]> {
    return this.listNetworks(
      {
        'provider:network_type': segment.network_type,
        ...(segment.physical_network !== null ? { 'provider:physical_network': segment.physical_network } : {}),
        'provider:segmentation_id': segment.segmentation_id,
      },
      options,
    );
  }

  /**
   * Neutron's segment ranges; undefined when the `network-segment-range` extension is not enabled
   * (the listing answers 404).
   */
  async listNetworkSegmentRanges(options: CallOptions = {}): Promise<NetworkSegmentRange[] | undefined> {
    return (await ignoreNotFound(this.http.get<{ network_segment_ranges: NetworkSegmentRange[] }>('/network_segment_ranges', undefined, options)))?.network_segment_ranges;
  }

  async deleteNetwork(id: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/networks/${seg(id)}`, options);
  }

  // --- RBAC policies ------------------------------------------------------------------------------

  async listRbacPolicies(
    filters: { object_type?: string; object_id?: string; action?: string; target_tenant?: string } = {},
    options: CallOptions = {},
  ): Promise<RbacPolicy[]> {
    return (await this.http.get<{ rbac_policies: RbacPolicy[] }>('/rbac-policies', filters, options)).rbac_policies;
  }

  async createRbacPolicy(request: { object_type: string; object_id: string; action: string; target_tenant: string }, options: CallOptions = {}): Promise<RbacPolicy> {
    return (await this.http.post<{ rbac_policy: RbacPolicy }>('/rbac-policies', { rbac_policy: request }, options)).rbac_policy;
  }

  async deleteRbacPolicy(id: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/rbac-policies/${seg(id)}`, options);
  }

  // --- subnets -------------------------------------------------------------------------------------

  async createSubnet(request: CreateSubnetRequest, options: CallOptions = {}): Promise<Subnet> {
    return (await this.http.post<{ subnet: Subnet }>('/subnets', { subnet: request }, options)).subnet;
  }

  async getSubnet(id: string, options: CallOptions = {}): Promise<Subnet> {
    return (await this.http.get<{ subnet: Subnet }>(`/subnets/${seg(id)}`, undefined, options)).subnet;
  }

  async deleteSubnet(id: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/subnets/${seg(id)}`, options);
  }

  // --- ports ---------------------------------------------------------------------------------------

  async createPort(request: CreatePortRequest, options: CallOptions = {}): Promise<Port> {
    return (await this.http.post<{ port: Port }>('/ports', { port: request }, options)).port;
  }

  async getPort(id: string, options: CallOptions = {}): Promise<Port> {
    return (await this.http.get<{ port: Port }>(`/ports/${seg(id)}`, undefined, options)).port;
  }

  /** Updates the given attributes, e.g. `binding:host_id` to bind the port to a host. */
  async updatePort(id: string, changes: UpdatePortRequest, options: CallOptions = {}): Promise<Port> {
    return (await this.http.put<{ port: Port }>(`/ports/${seg(id)}`, { port: changes }, options)).port;
  }

  async deletePort(id: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/ports/${seg(id)}`, options);
  }

  async listPorts(filters: ListPortsFilters = {}, options: CallOptions = {}): Promise<Port[]> {
    return (await this.http.get<{ ports: Port[] }>('/ports', filters as QueryParams, options)).ports;
  }

  // --- routers -------------------------------------------------------------------------------------

  /** Takes one of the router's interfaces off (by its port): a router interface is a port no plain port delete may remove. */
  async removeRouterInterface(routerId: string, interfaceOf: { port_id: string } | { subnet_id: string }, options: CallOptions = {}): Promise<void> {
    await this.http.put(`/routers/${seg(routerId)}/remove_router_interface`, interfaceOf, options);
  }

  // --- QoS -----------------------------------------------------------------------------------------

  async createQosPolicy(request: { name: string; project_id?: string; shared?: boolean; description?: string; is_default?: boolean }, options: CallOptions = {}): Promise<QosPolicy> {
    return (await this.http.post<{ policy: QosPolicy }>('/qos/policies', { policy: request }, options)).policy;
  }

  async listAgents(filters: { host?: string; agent_type?: string } = {}, options: CallOptions = {}): Promise<Agent[]> {
    return (await this.http.get<{ agents: Agent[] }>('/agents', filters, options)).agents;
  }

  /** An agent taken out of service (`admin_state_up: false`), or back in. */
  async updateAgent(id: string, changes: { admin_state_up?: boolean; description?: string }, options: CallOptions = {}): Promise<Agent> {
    return (await this.http.put<{ agent: Agent }>(`/agents/${seg(id)}`, { agent: changes }, options)).agent;
  }

  async deleteAgent(id: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/agents/${seg(id)}`, options);
  }

  async listQosPolicies(filters: { name?: string; project_id?: string } = {}, options: CallOptions = {}): Promise<QosPolicy[]> {
    return (await this.http.get<{ policies: QosPolicy[] }>('/qos/policies', filters, options)).policies;
  }

  async getQosPolicy(id: string, options: CallOptions = {}): Promise<QosPolicy> {
    return (await this.http.get<{ policy: QosPolicy }>(`/qos/policies/${seg(id)}`, undefined, options)).policy;
  }

  async deleteQosPolicy(id: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/qos/policies/${seg(id)}`, options);
  }

  async createMinimumBandwidthRule(
    policyId: string,
    rule: { min_kbps: number; direction?: 'egress' | 'ingress' },
    options: CallOptions = {},
  ): Promise<MinimumBandwidthRule> {
    const body = await this.http.post<{ minimum_bandwidth_rule: MinimumBandwidthRule }>(
      `/qos/policies/${seg(policyId)}/minimum_bandwidth_rules`,
      { minimum_bandwidth_rule: rule },
      options,
    );
    return body.minimum_bandwidth_rule;
  }

  async listMinimumBandwidthRules(policyId: string, options: CallOptions = {}): Promise<MinimumBandwidthRule[]> {
    const body = await this.http.get<{ minimum_bandwidth_rules: MinimumBandwidthRule[] }>(`/qos/policies/${seg(policyId)}/minimum_bandwidth_rules`, undefined, options);
    return body.minimum_bandwidth_rules;
  }

  async deleteMinimumBandwidthRule(policyId: string, ruleId: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/qos/policies/${seg(policyId)}/minimum_bandwidth_rules/${seg(ruleId)}`, options);
  }

  // --- floating IPs --------------------------------------------------------------------------------

  async createFloatingIp(request: CreateFloatingIpRequest, options: CallOptions = {}): Promise<FloatingIp> {
    return (await this.http.post<{ floatingip: FloatingIp }>('/floatingips', { floatingip: request }, options)).floatingip;
  }

  async listFloatingIps(filters: ListFloatingIpsFilters = {}, options: CallOptions = {}): Promise<FloatingIp[]> {
    return (await this.http.get<{ floatingips: FloatingIp[] }>('/floatingips', filters as QueryParams, options)).floatingips;
  }

  /** Associates the floating IP with a port, or (null) takes it off its port. */
  async setFloatingIpPort(id: string, portId: string | null, options: CallOptions = {}): Promise<FloatingIp> {
    return (await this.http.put<{ floatingip: FloatingIp }>(`/floatingips/${seg(id)}`, { floatingip: { port_id: portId } }, options)).floatingip;
  }

  async deleteFloatingIp(id: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/floatingips/${seg(id)}`, options);
  }

  /** Replaces a resource's tags (Neutron's standard-attr tag extension), e.g. `floatingips`. */
  async replaceTags(collection: 'floatingips' | 'ports' | 'networks', id: string, tags: string[], options: CallOptions = {}): Promise<void> {
    await this.http.put(`/${collection}/${seg(id)}/tags`, { tags }, options);
  }
}
