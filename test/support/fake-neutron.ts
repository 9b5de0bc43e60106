/**
 * Neutron's networks, ports, routers' interfaces and segment ranges in memory, for the network
 * segment type's core tests (test/network-segments.test.ts): what enrolment checks, what a start
 * makes and what an end takes away, with Neutron's rules where they matter (a network with ports
 * other than its DHCP port is in use; a router interface goes only through its router, and not while
 * a floating IP on the network reaches out through it; DVR's SNAT port goes with the interface, never
 * by a port delete; a trunk's parent port is not deleted while its trunk is there).
 */
import { randomUUID } from 'node:crypto';
import { ConflictError, NotFoundError, type CreateNetworkRequest, type ListNetworksFilters, type ListPortsFilters, type Network, type NetworkSegmentRange, type Port } from '../../src/openstack';

const conflict = (message: string, method: string, url: string) => new ConflictError(message, { service: 'network', method, url: `/v2.0/${url}`, status: 409 });
const notFound = (what: string) => new NotFoundError(`${what} could not be found`, { service: 'network', method: 'GET', url: `/v2.0/${what}`, status: 404 });

export class FakeNeutron {
  networks: Network[] = [];
  ports: Port[] = [];
  /** Undefined: the `network-segment-range` extension is off (the listing answers 404). */
  ranges: NetworkSegmentRange[] | undefined = [];
  /** Every call that changed something, in order: `create network <name>`, `delete port <id>`, … */
  readonly calls: string[] = [];
  /** Tries of replaceTags to fail after the network was made (a start whose answer was lost): counted down. */
  failTaggingTimes = 0;
  /** Ports with a floating IP, each through its router (the router's interface on their network cannot go while it is there). */
  readonly floatingIpVia = new Map<string, string>();
  /** Ports that are a trunk's parent (never deleted while the trunk is there). */
  readonly trunkParents = new Set<string>();
  /** Runs before a network is made (e.g. an overlapping try of the same start making it first). */
  beforeCreateNetwork: ((request: CreateNetworkRequest) => void) | undefined;

  range(physicalNetwork: string | null, minimum: number, maximum: number, networkType = 'vlan', shared = true) {
    (this.ranges ??= []).push({ id: randomUUID(), name: `${physicalNetwork ?? networkType}-${minimum}`, network_type: networkType, physical_network: physicalNetwork, minimum, maximum, shared });
  }

  /** A network of someone else's (an ordinary provider network on a segment, or a project's). */
  network(fields: Partial<Network> = {}): Network {
    const network: Network = { id: randomUUID(), name: 'net', project_id: 'someone', status: 'ACTIVE', admin_state_up: true, shared: false, subnets: [], tags: [], description: '', ...fields };
    this.networks.push(network);
    return network;
  }

  /** A port on a network: a server's (`compute:nova`), a router interface (`network:router_interface`, device the router), DHCP's. */
  port(networkId: string, deviceOwner: string, deviceId: string = randomUUID()): Port {
    const port = { id: randomUUID(), name: '', network_id: networkId, project_id: 'someone', mac_address: 'fa:16:3e:00:00:01', admin_state_up: true, status: 'ACTIVE', device_id: deviceId, device_owner: deviceOwner, fixed_ips: [] } as Port;
    this.ports.push(port);
    return port;
  }

  listNetworkSegmentRanges(): Promise<NetworkSegmentRange[] | undefined> {
    return Promise.resolve(this.ranges?.map((r) => ({ ...r })));
  }

  listNetworks(filters: ListNetworksFilters = {}): Promise<Network[]> {
    return Promise.resolve(
      this.networks
        .filter((n) => filters.tags === undefined || filters.tags.split(',').every((t) => (n.tags ?? []).includes(t)))
        .filter((n) => filters['provider:network_type'] === undefined || n['provider:network_type'] === filters['provider:network_type'])
        .filter((n) => filters['provider:physical_network'] === undefined || n['provider:physical_network'] === filters['provider:physical_network'])
        .filter((n) => filters['provider:segmentation_id'] === undefined || n['provider:segmentation_id'] === filters['provider:segmentation_id'])
        .filter((n) => filters.project_id === undefined || n.project_id === filters.project_id)
        .map((n) => ({ ...n, tags: [...(n.tags ?? [])] })),
    );
  }

  findNetworksBySegment(segment: { network_type: string; physical_network: string | null; segmentation_id: number }): Promise<Network[]> {
    return this.listNetworks({
      'provider:network_type': segment.network_type,
      ...(segment.physical_network !== null ? { 'provider:physical_network': segment.physical_network } : {}),
      'provider:segmentation_id': segment.segmentation_id,
    });
  }

  getNetwork(id: string): Promise<Network> {
    const network = this.networks.find((n) => n.id === id);
    return network ? Promise.resolve({ ...network, tags: [...(network.tags ?? [])] }) : Promise.reject(notFound(`networks/${id}`));
  }

  createNetwork(request: CreateNetworkRequest): Promise<Network> {
    this.beforeCreateNetwork?.(request);
    const taken = this.networks.find(
      (n) => n['provider:network_type'] === request['provider:network_type'] && n['provider:physical_network'] === request['provider:physical_network'] && n['provider:segmentation_id'] === request['provider:segmentation_id'],
    );
    if (taken) return Promise.reject(new ConflictError('Unable to create the network. The VLAN is in use.', { service: 'network', method: 'POST', url: '/v2.0/networks', status: 409 }));
    this.calls.push(`create network ${request.name}`);
    const network = this.network({
      name: request.name ?? '',
      project_id: request.project_id ?? 'admin',
      description: request.description ?? '',
      'provider:network_type': request['provider:network_type'],
      'provider:physical_network': request['provider:physical_network'] ?? null,
      'provider:segmentation_id': request['provider:segmentation_id'],
    });
    return Promise.resolve({ ...network });
  }

  replaceTags(_collection: string, id: string, tags: string[]): Promise<void> {
    if (this.failTaggingTimes > 0) {
      this.failTaggingTimes--;
      return Promise.reject(new Error('connection reset while tagging'));
    }
    const network = this.networks.find((n) => n.id === id);
    if (!network) return Promise.reject(notFound(`networks/${id}`));
    network.tags = [...tags];
    return Promise.resolve();
  }

  listPorts(filters: ListPortsFilters = {}): Promise<Port[]> {
    return Promise.resolve(this.ports.filter((p) => (filters.network_id === undefined || p.network_id === filters.network_id) && (filters.device_id === undefined || p.device_id === filters.device_id)).map((p) => ({ ...p })));
  }

  deletePort(id: string): Promise<void> {
    const port = this.ports.find((p) => p.id === id);
    if (!port) return Promise.reject(notFound(`ports/${id}`));
    if (port.device_owner.startsWith('network:router_interface') || port.device_owner === 'network:router_centralized_snat') {
      return Promise.reject(conflict(`Port ${id} cannot be deleted directly via the port API: has device owner ${port.device_owner}.`, 'DELETE', `ports/${id}`));
    }
    if (this.trunkParents.has(id)) return Promise.reject(conflict(`Port ${id} is currently a parent port for trunk.`, 'DELETE', `ports/${id}`));
    this.calls.push(`delete port ${port.device_owner}`);
    this.ports = this.ports.filter((p) => p !== port);
    this.floatingIpVia.delete(id);
    return Promise.resolve();
  }

  removeRouterInterface(routerId: string, interfaceOf: { port_id: string }): Promise<void> {
    const port = this.ports.find((p) => p.id === interfaceOf.port_id && p.device_id === routerId);
    if (!port) return Promise.reject(notFound(`routers/${routerId}`));
    const floating = this.ports.find((p) => p.network_id === port.network_id && this.floatingIpVia.get(p.id) === routerId);
    if (floating) {
      return Promise.reject(conflict(`Router interface for subnet on router ${routerId} cannot be deleted, as it is required by one or more floating IPs.`, 'PUT', `routers/${routerId}/remove_router_interface`));
    }
    this.calls.push(`remove router interface ${routerId}`);
    // DVR's centralized SNAT port for that network goes with the interface.
    this.ports = this.ports.filter((p) => p !== port && !(p.network_id === port.network_id && p.device_id === routerId && p.device_owner === 'network:router_centralized_snat'));
    return Promise.resolve();
  }

  deleteNetwork(id: string): Promise<void> {
    const network = this.networks.find((n) => n.id === id);
    if (!network) return Promise.reject(notFound(`networks/${id}`));
    if (this.ports.some((p) => p.network_id === id && p.device_owner !== 'network:dhcp')) {
      return Promise.reject(new ConflictError(`Unable to complete operation on network ${id}. There are one or more ports still in use on the network.`, { service: 'network', method: 'DELETE', url: `/v2.0/networks/${id}`, status: 409 }));
    }
    this.calls.push(`delete network ${network.name}`);
    this.networks = this.networks.filter((n) => n !== network);
    this.ports = this.ports.filter((p) => p.network_id !== id);
    return Promise.resolve();
  }
}
