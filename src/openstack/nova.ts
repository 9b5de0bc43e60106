/**
 * Nova (compute API v2.1): servers, aggregates, hypervisors, services, flavors.
 * Requests carry `OpenStack-API-Version: compute <microversion>` (default 2.91, which covers
 * `networks: "none"` ≥ 2.37, `host` on create ≥ 2.74, createImage's `image_id` ≥ 2.45 and
 * unshelve onto a host 2.91). Hypervisor calls default to 2.87, the last microversion whose
 * hypervisor details still include vcpus, memory_mb and local_gb.
 */
import { NotFoundError } from './errors';
import { type CallOptions, type QueryParams, ServiceHttp, type Session, seg } from './http';
import { pollUntil } from './wait';

export const DEFAULT_COMPUTE_MICROVERSION = '2.91';
export const HYPERVISOR_DETAILS_MICROVERSION = '2.87';

export type ServerStatus =
  | 'ACTIVE'
  | 'BUILD'
  | 'DELETED'
  | 'ERROR'
  | 'HARD_REBOOT'
  | 'MIGRATING'
  | 'PASSWORD'
  | 'PAUSED'
  | 'REBOOT'
  | 'REBUILD'
  | 'RESCUE'
  | 'RESIZE'
  | 'REVERT_RESIZE'
  | 'SHELVED'
  | 'SHELVED_OFFLOADED'
  | 'SHUTOFF'
  | 'SOFT_DELETED'
  | 'SUSPENDED'
  | 'UNKNOWN'
  | 'VERIFY_RESIZE';

export interface Link {
  href: string;
  rel: string;
}

export interface ServerFault {
  code: number;
  message: string;
  details?: string;
  created: string;
}

export interface ServerAddress {
  addr: string;
  version: 4 | 6;
  'OS-EXT-IPS:type'?: 'fixed' | 'floating';
  'OS-EXT-IPS-MAC:mac_addr'?: string;
}

/** A server as `GET /servers/{id}` and `/servers/detail` return it (admin fields optional). */
export interface Server {
  id: string;
  name: string;
  status: ServerStatus;
  tenant_id: string;
  user_id: string;
  created: string;
  updated: string;
  hostId: string;
  /** `''` for servers booted from volume. */
  image: { id: string; links?: Link[] } | '';
  /** Since 2.47 the flavor is embedded. */
  flavor: { original_name: string; vcpus: number; ram: number; disk: number; ephemeral: number; swap: number; extra_specs?: Record<string, string> };
  addresses: Record<string, ServerAddress[]>;
  metadata: Record<string, string>;
  links: Link[];
  key_name: string | null;
  description?: string | null;
  locked?: boolean;
  tags?: string[];
  fault?: ServerFault;
  progress?: number;
  'OS-EXT-AZ:availability_zone'?: string;
  'OS-EXT-SRV-ATTR:host'?: string | null;
  'OS-EXT-SRV-ATTR:hypervisor_hostname'?: string | null;
  'OS-EXT-SRV-ATTR:instance_name'?: string;
  'OS-EXT-STS:task_state'?: string | null;
  'OS-EXT-STS:vm_state'?: string;
  'OS-EXT-STS:power_state'?: number;
  'OS-SRV-USG:launched_at'?: string | null;
  'OS-SRV-USG:terminated_at'?: string | null;
  'os-extended-volumes:volumes_attached'?: Array<{ id: string; delete_on_termination?: boolean }>;
}

/** The compute host a server runs on (admin only; null while unscheduled or shelved-offloaded). */
export function serverHost(server: Server): string | null {
  return server['OS-EXT-SRV-ATTR:host'] ?? null;
}

export type ServerNetworks = 'none' | 'auto' | Array<{ uuid?: string; port?: string; fixed_ip?: string; tag?: string }>;

export interface BlockDeviceMapping {
  boot_index?: number | null;
  uuid?: string;
  source_type: 'blank' | 'image' | 'snapshot' | 'volume';
  destination_type?: 'local' | 'volume';
  volume_size?: number;
  delete_on_termination?: boolean;
  device_name?: string;
  tag?: string;
}

export interface CreateServerRequest {
  name: string;
  flavorRef: string;
  imageRef?: string;
  /** `'none'` (≥ 2.37) for no network, `'auto'`, or ports/networks. */
  networks: ServerNetworks;
  availability_zone?: string;
  /** Boot on this compute host (admin, ≥ 2.74); still goes through the scheduler. */
  host?: string;
  hypervisor_hostname?: string;
  metadata?: Record<string, string>;
  key_name?: string;
  user_data?: string;
  description?: string;
  tags?: string[];
  min_count?: number;
  max_count?: number;
  security_groups?: Array<{ name: string }>;
  block_device_mapping_v2?: BlockDeviceMapping[];
  /** Sent as `os:scheduler_hints`. */
  scheduler_hints?: Record<string, string | string[]>;
}

export interface CreatedServer {
  id: string;
  adminPass?: string;
  links: Link[];
}

export interface ListServersFilters {
  /** All projects' servers (admin). */
  all_tenants?: boolean;
  /** Servers on this compute host (admin). */
  host?: string;
  name?: string;
  status?: ServerStatus;
  project_id?: string;
  availability_zone?: string;
  changes_since?: string;
  /** Servers of this flavor (its id). */
  flavor?: string;
  /** Page size; the client follows the pages to the end. */
  limit?: number;
}

export interface UnshelveOptions {
  /** Unshelve onto this host (admin, 2.91). */
  host?: string;
  /** Unshelve into this availability zone (2.77; `null` unpins, 2.91). */
  availability_zone?: string | null;
}

export interface WaitOptions {
  timeoutMs?: number;
  intervalMs?: number;
  /** Give up with ResourceFailedError when the server goes to ERROR and the predicate does not accept it (default true). */
  failOnError?: boolean;
  signal?: AbortSignal;
}

export interface Aggregate {
  id: number;
  uuid: string;
  name: string;
  availability_zone: string | null;
  hosts: string[];
  metadata: Record<string, string>;
  created_at: string;
  updated_at: string | null;
  deleted_at: string | null;
  deleted: boolean;
}

export interface Hypervisor {
  /** A UUID since 2.53. */
  id: string;
  hypervisor_hostname: string;
  state: 'up' | 'down';
  status: 'enabled' | 'disabled';
  host_ip: string;
  hypervisor_type: string;
  hypervisor_version: number;
  service: { host: string; id: string; disabled_reason: string | null };
  /** Present up to microversion 2.87 (this client's default for hypervisor calls). */
  vcpus?: number;
  vcpus_used?: number;
  memory_mb?: number;
  memory_mb_used?: number;
  local_gb?: number;
  local_gb_used?: number;
  free_ram_mb?: number;
  free_disk_gb?: number;
  running_vms?: number;
  current_workload?: number;
  disk_available_least?: number | null;
  /** With `with_servers` (≥ 2.53). */
  servers?: Array<{ uuid: string; name: string }>;
}

export interface ComputeService {
  id: string;
  binary: string;
  host: string;
  zone: string;
  status: 'enabled' | 'disabled';
  state: 'up' | 'down';
  updated_at: string | null;
  disabled_reason: string | null;
  forced_down?: boolean;
}

export interface Flavor {
  id: string;
  name: string;
  vcpus: number;
  ram: number;
  disk: number;
  swap: number | '';
  'OS-FLV-EXT-DATA:ephemeral': number;
  'OS-FLV-DISABLED:disabled'?: boolean;
  'os-flavor-access:is_public': boolean;
  rxtx_factor: number;
  description?: string | null;
  /** Since 2.61. */
  extra_specs?: Record<string, string>;
  links: Link[];
}

export type ServerGroupPolicy = 'affinity' | 'anti-affinity';

export interface ServerGroup {
  id: string;
  name: string;
  policy: ServerGroupPolicy;
  members: string[];
  project_id?: string;
}

export interface CreateFlavorRequest {
  name: string;
  vcpus: number;
  ram: number;
  disk: number;
  /** Default: generated by Nova. */
  id?: string;
  ephemeral?: number;
  swap?: number;
  is_public?: boolean;
  rxtx_factor?: number;
  description?: string;
}

export interface NovaClientOptions {
  /** Default microversion for this client (default 2.91). */
  microversion?: string;
}

export class NovaClient {
  readonly http: ServiceHttp;

  constructor(session: Session, options: NovaClientOptions = {}) {
    this.http = new ServiceHttp('compute', session, {
      microversion: options.microversion ?? DEFAULT_COMPUTE_MICROVERSION,
      microversionName: 'compute',
      versionPath: '/v2.1',
    });
  }

  // --- servers -----------------------------------------------------------------------------

  async createServer(request: CreateServerRequest, options: CallOptions = {}): Promise<CreatedServer> {
    const { scheduler_hints: hints, ...server } = request;
    const body: Record<string, unknown> = { server };
    if (hints !== undefined) body['os:scheduler_hints'] = hints;
    return (await this.http.post<{ server: CreatedServer }>('/servers', body, options)).server;
  }

  async getServer(id: string, options: CallOptions = {}): Promise<Server> {
    return (await this.http.get<{ server: Server }>(`/servers/${seg(id)}`, undefined, options)).server;
  }

  /** `GET /servers/detail`, following the pages to the end. */
  async listServers(filters: ListServersFilters = {}, options: CallOptions = {}): Promise<Server[]> {
    const { all_tenants: allTenants, changes_since: changesSince, ...rest } = filters;
    const query: Record<string, string | number | undefined> = { ...rest, 'changes-since': changesSince, all_tenants: allTenants ? 1 : undefined };
    return this.paged<Server>('/servers/detail', 'servers', query, options);
  }

  async deleteServer(id: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/servers/${seg(id)}`, options);
  }

  /** `POST /servers/{id}/action`; returns the body when there is one. */
  async serverAction<T = undefined>(id: string, action: Record<string, unknown>, options: CallOptions & { microversion?: string } = {}): Promise<T> {
    return this.http.post<T>(`/servers/${seg(id)}/action`, action, options);
  }

  async shelve(id: string, options: CallOptions = {}): Promise<void> {
    await this.serverAction(id, { shelve: null }, options);
  }

  async shelveOffload(id: string, options: CallOptions = {}): Promise<void> {
    await this.serverAction(id, { shelveOffload: null }, options);
  }

  async unshelve(id: string, target: UnshelveOptions = {}, options: CallOptions = {}): Promise<void> {
    const body: Record<string, unknown> = {};
    if (target.host !== undefined) body.host = target.host;
    if (target.availability_zone !== undefined) body.availability_zone = target.availability_zone;
    await this.serverAction(id, { unshelve: Object.keys(body).length === 0 ? null : body }, options);
  }

  /** Snapshots a server into a Glance image (≥ 2.45 returns the image id). */
  async createImage(id: string, name: string, metadata: Record<string, string> = {}, options: CallOptions = {}): Promise<{ imageId: string }> {
    const body = await this.serverAction<{ image_id: string }>(id, { createImage: { name, metadata } }, options);
    return { imageId: body.image_id };
  }

  /**
   * Polls the server until `predicate` accepts it. Fails with ResourceFailedError when it goes to
   * ERROR (unless failOnError is false or the predicate accepts ERROR) and WaitTimeoutError after
   * timeoutMs (default 120 s); NotFoundError when it disappears.
   */
  async waitForServer(id: string, predicate: (server: Server) => boolean, options: WaitOptions = {}): Promise<Server> {
    const failOnError = options.failOnError ?? true;
    return pollUntil(() => this.getServer(id, { signal: options.signal }), predicate, {
      timeoutMs: options.timeoutMs ?? 120_000,
      intervalMs: options.intervalMs ?? 500,
      what: `server ${id}`,
      signal: options.signal,
      failed: (server) => (failOnError && server.status === 'ERROR' ? `went to ERROR${server.fault ? `: ${server.fault.message}` : ''}` : undefined),
    });
  }

  /** Polls until `GET /servers/{id}` answers 404 (or DELETED). */
  async waitForServerDeleted(id: string, options: Omit<WaitOptions, 'failOnError'> = {}): Promise<void> {
    await pollUntil(
      async () => {
        try {
          return await this.getServer(id, { signal: options.signal });
        } catch (error) {
          if (error instanceof NotFoundError) return undefined;
          throw error;
        }
      },
      (server) => server === undefined || server.status === 'DELETED',
      { timeoutMs: options.timeoutMs ?? 120_000, intervalMs: options.intervalMs ?? 500, what: `deleting server ${id}`, signal: options.signal },
    );
  }

  // --- aggregates ----------------------------------------------------------------------------

  async createAggregate(request: { name: string; availability_zone?: string }, options: CallOptions = {}): Promise<Aggregate> {
    return (await this.http.post<{ aggregate: Aggregate }>('/os-aggregates', { aggregate: request }, options)).aggregate;
  }

  async getAggregate(id: number | string, options: CallOptions = {}): Promise<Aggregate> {
    return (await this.http.get<{ aggregate: Aggregate }>(`/os-aggregates/${seg(id)}`, undefined, options)).aggregate;
  }

  async listAggregates(options: CallOptions = {}): Promise<Aggregate[]> {
    return (await this.http.get<{ aggregates: Aggregate[] }>('/os-aggregates', undefined, options)).aggregates;
  }

  async deleteAggregate(id: number | string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/os-aggregates/${seg(id)}`, options);
  }

  async addHostToAggregate(id: number | string, host: string, options: CallOptions = {}): Promise<Aggregate> {
    return this.aggregateAction(id, { add_host: { host } }, options);
  }

  async removeHostFromAggregate(id: number | string, host: string, options: CallOptions = {}): Promise<Aggregate> {
    return this.aggregateAction(id, { remove_host: { host } }, options);
  }

  /** Merges metadata into the aggregate's; a `null` value removes that key. */
  async setAggregateMetadata(id: number | string, metadata: Record<string, string | null>, options: CallOptions = {}): Promise<Aggregate> {
    return this.aggregateAction(id, { set_metadata: { metadata } }, options);
  }

  private async aggregateAction(id: number | string, action: Record<string, unknown>, options: CallOptions): Promise<Aggregate> {
    return (await this.http.post<{ aggregate: Aggregate }>(`/os-aggregates/${seg(id)}/action`, action, options)).aggregate;
  }

  // --- hypervisors and services ----------------------------------------------------------------

  /** `GET /os-hypervisors/detail` (microversion 2.87 by default, so the capacity fields are there). */
  async listHypervisors(
    filters: { hypervisor_hostname_pattern?: string; with_servers?: boolean } = {},
    options: CallOptions & { microversion?: string } = {},
  ): Promise<Hypervisor[]> {
    const query: QueryParams = { hypervisor_hostname_pattern: filters.hypervisor_hostname_pattern, with_servers: filters.with_servers };
    return this.paged<Hypervisor>('/os-hypervisors/detail', 'hypervisors', query, { microversion: HYPERVISOR_DETAILS_MICROVERSION, ...options });
  }

  async getHypervisor(id: string, filters: { with_servers?: boolean } = {}, options: CallOptions & { microversion?: string } = {}): Promise<Hypervisor> {
    const body = await this.http.get<{ hypervisor: Hypervisor }>(`/os-hypervisors/${seg(id)}`, { with_servers: filters.with_servers }, {
      microversion: HYPERVISOR_DETAILS_MICROVERSION,
      ...options,
    });
    return body.hypervisor;
  }

  async listServices(filters: { binary?: string; host?: string } = {}, options: CallOptions = {}): Promise<ComputeService[]> {
    return (await this.http.get<{ services: ComputeService[] }>('/os-services', filters, options)).services;
  }

  /**
   * `PUT /os-services/{id}` (by the service's UUID, microversion ≥ 2.53): enable or disable it (with
   * a reason), or force it down (a fenced host: Nova stops waiting for its heartbeat).
   */
  async updateService(id: string, change: { status?: 'enabled' | 'disabled'; disabled_reason?: string; forced_down?: boolean }, options: CallOptions = {}): Promise<ComputeService> {
    return (await this.http.put<{ service: ComputeService }>(`/os-services/${seg(id)}`, change, options)).service;
  }

  // --- flavors ---------------------------------------------------------------------------------

  /** `GET /flavors/detail`; `is_public: 'none'` lists public and private flavors (admin). */
  async listFlavors(filters: { is_public?: boolean | 'none'; minRam?: number; minDisk?: number } = {}, options: CallOptions = {}): Promise<Flavor[]> {
    const query: QueryParams = {
      is_public: filters.is_public === 'none' ? 'None' : filters.is_public,
      minRam: filters.minRam,
      minDisk: filters.minDisk,
    };
    return this.paged<Flavor>('/flavors/detail', 'flavors', query, options);
  }

  async getFlavor(id: string, options: CallOptions = {}): Promise<Flavor> {
    return (await this.http.get<{ flavor: Flavor }>(`/flavors/${seg(id)}`, undefined, options)).flavor;
  }

  async createFlavor(request: CreateFlavorRequest, options: CallOptions = {}): Promise<Flavor> {
    const { ephemeral, is_public: isPublic, ...rest } = request;
    const flavor: Record<string, unknown> = { ...rest };
    if (ephemeral !== undefined) flavor['OS-FLV-EXT-DATA:ephemeral'] = ephemeral;
    if (isPublic !== undefined) flavor['os-flavor-access:is_public'] = isPublic;
    return (await this.http.post<{ flavor: Flavor }>('/flavors', { flavor }, options)).flavor;
  }

  async deleteFlavor(id: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/flavors/${seg(id)}`, options);
  }

  async listFlavorAccess(id: string, options: CallOptions = {}): Promise<Array<{ flavor_id: string; tenant_id: string }>> {
    const body = await this.http.get<{ flavor_access: Array<{ flavor_id: string; tenant_id: string }> }>(`/flavors/${seg(id)}/os-flavor-access`, undefined, options);
    return body.flavor_access;
  }

  async addFlavorAccess(id: string, projectId: string, options: CallOptions = {}): Promise<Array<{ flavor_id: string; tenant_id: string }>> {
    const body = await this.http.post<{ flavor_access: Array<{ flavor_id: string; tenant_id: string }> }>(
      `/flavors/${seg(id)}/action`,
      { addTenantAccess: { tenant: projectId } },
      options,
    );
    return body.flavor_access;
  }

  async removeFlavorAccess(id: string, projectId: string, options: CallOptions = {}): Promise<Array<{ flavor_id: string; tenant_id: string }>> {
    const body = await this.http.post<{ flavor_access: Array<{ flavor_id: string; tenant_id: string }> }>(
      `/flavors/${seg(id)}/action`,
      { removeTenantAccess: { tenant: projectId } },
      options,
    );
    return body.flavor_access;
  }

  async getFlavorExtraSpecs(id: string, options: CallOptions = {}): Promise<Record<string, string>> {
    return (await this.http.get<{ extra_specs: Record<string, string> }>(`/flavors/${seg(id)}/os-extra_specs`, undefined, options)).extra_specs;
  }

  /** Creates or updates the given extra specs (others are kept). */
  async setFlavorExtraSpecs(id: string, specs: Record<string, string>, options: CallOptions = {}): Promise<Record<string, string>> {
    const body = await this.http.post<{ extra_specs: Record<string, string> }>(`/flavors/${seg(id)}/os-extra_specs`, { extra_specs: specs }, options);
    return body.extra_specs;
  }

  async deleteFlavorExtraSpec(id: string, key: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/flavors/${seg(id)}/os-extra_specs/${seg(key)}`, options);
  }

  // --- server groups ---------------------------------------------------------------------------

  /** Creates a server group in the caller's project (policy `affinity` or `anti-affinity`; 2.64+ takes `policy`). */
  async createServerGroup(request: { name: string; policy: ServerGroupPolicy }, options: CallOptions = {}): Promise<ServerGroup> {
    return (await this.http.post<{ server_group: ServerGroup }>('/os-server-groups', { server_group: request }, options)).server_group;
  }

  /** Server groups; `all_projects` (admin) lists every project's. */
  async listServerGroups(filters: { all_projects?: boolean } = {}, options: CallOptions = {}): Promise<ServerGroup[]> {
    return this.paged<ServerGroup>('/os-server-groups', 'server_groups', { all_projects: filters.all_projects ? 'True' : undefined }, options);
  }

  async deleteServerGroup(id: string, options: CallOptions = {}): Promise<void> {
    await this.http.delete(`/os-server-groups/${seg(id)}`, options);
  }

  // --- paging ----------------------------------------------------------------------------------

  /** Follows `<key>_links` rel=next by marker until the last page. */
  private async paged<T>(path: string, key: string, query: QueryParams, options: CallOptions & { microversion?: string }): Promise<T[]> {
    const items: T[] = [];
    let marker: string | undefined;
    for (let page = 0; page < 10_000; page++) {
      const body = await this.http.get<Record<string, unknown>>(path, { ...query, marker }, options);
      const batch = (body[key] ?? []) as T[];
      items.push(...batch);
      const links = body[`${key}_links`] as Link[] | undefined;
      const next = links?.find((link) => link.rel === 'next');
      const nextMarker = next ? (new URL(next.href).searchParams.get('marker') ?? undefined) : undefined;
      if (nextMarker === undefined || batch.length === 0 || nextMarker === marker) return items;
      marker = nextMarker;
    }
    return items;
  }
}
