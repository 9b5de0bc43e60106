/**
 * Nova's aggregates, servers and compute services in memory, for the physical-host plugin's lend,
 * starts, ends and moves (test/host-lending-end.test.ts, test/host-lending.test.ts): what they list,
 * delete, image and move; and for the power planner (test/power-planner.test.ts): compute services
 * disabled and enabled, up or down as the test says (e.g. by a simulated BMC's power).
 */
import type { ComputeService, GlanceClient } from '../../src/openstack';

/** A Glance with no images, whose waits end at once. */
export const glance = { listImages: () => Promise.resolve([]), waitForImage: () => Promise.resolve() } as unknown as GlanceClient;

export interface FakeServer {
  id: string;
  name: string;
  host: string;
  project: string;
}

/** Nova's aggregates and servers in memory. */
export class FakeNova {
  readonly aggregates: Array<{ id: number; name: string; hosts: string[]; metadata: Record<string, string>; availability_zone?: string }> = [];
  /** A host whose server listing fails (a Nova error in the middle of a lend). */
  failListingOn?: string;
  /** Called after each server listing of a host (a lend's look at a fenced host). */
  afterListing?: (host: string) => void;
  /** Each aggregate membership change, as `add host` or `remove host`. */
  readonly moves: string[] = [];
  servers: FakeServer[] = [];
  readonly imaged: string[] = [];
  /** Compute services by host (`service(host)` adds one, enabled); their `state` comes from `serviceState` when set. */
  readonly services: ComputeService[] = [];
  serviceState?: (host: string) => 'up' | 'down';
  /** Each service change, as `<host> enabled` or `<host> disabled: <reason>`. */
  readonly serviceChanges: string[] = [];

  service(host: string, change: Partial<ComputeService> = {}): ComputeService {
    const added: ComputeService = { id: `service-${host}`, binary: 'nova-compute', host, zone: 'nova', status: 'enabled', state: 'up', updated_at: null, disabled_reason: null, ...change };
    this.services.push(added);
    return added;
  }
  private shownService(s: ComputeService): ComputeService {
    return { ...s, state: this.serviceState?.(s.host) ?? s.state };
  }
  listServices(filter: { binary?: string; host?: string } = {}) {
    return Promise.resolve(this.services.filter((s) => (filter.binary === undefined || s.binary === filter.binary) && (filter.host === undefined || s.host === filter.host)).map((s) => this.shownService(s)));
  }
  /** A hypervisor for each compute service (the host monitor looks for both). */
  listHypervisors() {
    return Promise.resolve(this.services.map((s) => ({ id: `hypervisor-${s.host}`, hypervisor_hostname: s.host, state: this.shownService(s).state, status: s.status, host_ip: '127.0.0.1', hypervisor_type: 'fake', hypervisor_version: 1, service: { host: s.host, id: s.id, disabled_reason: s.disabled_reason } })));
  }
  updateService(id: string, change: { status?: 'enabled' | 'disabled'; disabled_reason?: string; forced_down?: boolean }) {
    const found = this.services.find((s) => s.id === id);
    if (!found) return Promise.reject(new Error(`no service ${id}`));
    if (change.status === 'enabled') Object.assign(found, { status: 'enabled', disabled_reason: null });
    if (change.status === 'disabled') Object.assign(found, { status: 'disabled', disabled_reason: change.disabled_reason ?? null });
    if (change.forced_down !== undefined) found.forced_down = change.forced_down;
    if (change.status) this.serviceChanges.push(`${found.host} ${change.status}${change.status === 'disabled' ? `: ${found.disabled_reason ?? ''}` : ''}`);
    return Promise.resolve(this.shownService(found));
  }

  /** Adds an aggregate (a test's setup, or Nova's create); answers its id, never one an aggregate had before. */
  aggregate(name: string, hosts: string[], metadata: Record<string, string> = {}, zone?: string): number {
    const id = Math.max(0, ...this.aggregates.map((a) => a.id)) + 1;
    this.aggregates.push({ id, name, hosts, metadata, ...(zone ? { availability_zone: zone } : {}) });
    return id;
  }
  /** Nova's create: an empty aggregate (a lease's start makes its own). */
  createAggregate(request: { name: string; availability_zone?: string }) {
    return this.getAggregate(this.aggregate(request.name, [], {}, request.availability_zone));
  }
  private find(id: number | string) {
    const found = this.aggregates.find((a) => a.id === Number(id));
    if (!found) throw new Error(`no aggregate ${id}`);
    return found;
  }
  listAggregates() {
    return Promise.resolve(this.aggregates.map((a) => ({ ...a, hosts: [...a.hosts] })));
  }
  getAggregate(id: number | string) {
    return Promise.resolve({ ...this.find(id), hosts: [...this.find(id).hosts] });
  }
  setAggregateMetadata(id: number | string, metadata: Record<string, string>) {
    Object.assign(this.find(id).metadata, metadata);
    return this.getAggregate(id);
  }
  addHostToAggregate(id: number | string, host: string) {
    this.moves.push(`add ${host}`);
    if (!this.find(id).hosts.includes(host)) this.find(id).hosts.push(host);
    return this.getAggregate(id);
  }
  removeHostFromAggregate(id: number | string, host: string) {
    this.moves.push(`remove ${host}`);
    this.find(id).hosts = this.find(id).hosts.filter((h) => h !== host);
    return this.getAggregate(id);
  }
  deleteAggregate(id: number | string) {
    this.aggregates.splice(this.aggregates.indexOf(this.find(id)), 1);
    return Promise.resolve();
  }
  listServers(filter: { host?: string; project_id?: string }) {
    if (filter.host === this.failListingOn) return Promise.reject(new Error('Nova is down'));
    const servers = this.servers.filter((s) => s.host === filter.host && (filter.project_id === undefined || s.project === filter.project_id));
    if (filter.host !== undefined) this.afterListing?.(filter.host);
    return Promise.resolve(servers.map((s) => ({ id: s.id, name: s.name, status: 'ACTIVE', 'OS-EXT-STS:task_state': null })));
  }
  deleteServer(id: string) {
    this.servers = this.servers.filter((s) => s.id !== id);
    return Promise.resolve();
  }
  createImage(serverId: string) {
    this.imaged.push(serverId);
    return Promise.resolve({ imageId: `image-${serverId}` });
  }
  waitForServer() {
    return Promise.resolve();
  }
}
