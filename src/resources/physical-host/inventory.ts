/**
 * The reservable host pool (Blazar's os-hosts). Enrolling a host asks Nova for the hypervisor,
 * refuses one that runs servers, and moves it into the reservable pool aggregate (`freepool`),
 * whose `filter_tenant_id` keeps ordinary servers off it (Nova's AggregateMultiTenancyIsolation).
 */
import { ApplicationFailure } from '@temporalio/common';
import { addHost, ensureAggregate, findAggregate, removeHost } from '../shared/aggregates';
import { ignoreNotFound, type Aggregate, type NovaClient } from '../../openstack';
import { isAlreadyExists, leaseConflict, invalidLease, type Lease } from '../../domain/lease';
import { parsePropertyQuery, queryKeys } from '../../domain/property-query';
import { computeHostName, deleteHost, findHostByHypervisor, insertHost, isHostId, listHosts, markReservableAgain, setHostCapabilities, setReservable, type HostRecord } from '../../db/hosts';
import { deleteHostBookings, endBlockedForGood, liveBookingsOfHost } from '../../db/host-allocations';
import type { Pool } from '../../db/pool';
import { liveReservationsOnHost } from '../../db/quantity-allocations';

export interface InventorySettings {
  /** The aggregate that holds reservable hosts while no lease has them. */
  freepoolAggregate: string;
  /** The project named in the pool's filter_tenant_id: nobody else's servers land there. */
  freepoolProjectId: string;
  /** Where hosts released at a lease's end sit (see the `release` end policy). */
  releasedAggregate: string;
}

export const MAX_CAPABILITY_NAME = 64;

/** What Nova accepts in `hypervisor_hostname_pattern`. */
const NOVA_HOSTNAME_PATTERN = /^[a-zA-Z0-9-._]*$/;

function notFound(message: string): ApplicationFailure {
  return ApplicationFailure.create({ type: 'LeaseNotFound', message, nonRetryable: true });
}

export function checkCapabilities(capabilities: Record<string, unknown>): Record<string, string> {
  const result: Record<string, string> = {};
  for (const [name, value] of Object.entries(capabilities)) {
    if (name.length === 0 || name.length > MAX_CAPABILITY_NAME) throw invalidLease(`Extra capability key too long. Capability names must be 1 to ${MAX_CAPABILITY_NAME} characters: ${JSON.stringify(name.slice(0, 80))}.`);
    if (typeof value !== 'string' && typeof value !== 'number' && typeof value !== 'boolean') {
      throw invalidLease(`capability ${name}: expected a string value`);
    }
    result[name] = String(value);
  }
  return result;
}

/** Nova gives cpu_info as an object since microversion 2.28 (a JSON string before): stored as JSON text. */
function cpuInfo(hypervisor: object): string | null {
  const value = (hypervisor as { cpu_info?: unknown }).cpu_info;
  if (value === undefined || value === null) return null;
  return typeof value === 'string' ? value : JSON.stringify(value);
}

export class HostInventory {
  constructor(
    private readonly pool: Pool,
    /** Nova, on first use: reading and updating hosts needs no cloud; enrolling and removing them does. */
    private readonly nova: () => NovaClient,
    private readonly settings: InventorySettings,
  ) {}

  /** The pool aggregate, created and set up if missing. */
  freepool(): Promise<Aggregate> {
    return ensureAggregate(this.nova(), this.settings.freepoolAggregate, { filter_tenant_id: this.settings.freepoolProjectId, 'blazar:owner': 'leasekeeper', 'leasekeeper:pool': 'free' });
  }

  async enrol(name: string, capabilities: Record<string, unknown>): Promise<HostRecord> {
    const extra = checkCapabilities(capabilities);
    // Nova answers 404 when the pattern matches no hypervisor at all, and 400 to a pattern with other
    // characters than its own: such a name is looked for in the whole list.
    const filter = NOVA_HOSTNAME_PATTERN.test(name) ? { hypervisor_hostname_pattern: name } : {};
    const candidates = (await ignoreNotFound(this.nova().listHypervisors({ ...filter, with_servers: true }))) ?? [];
    const hypervisor = candidates.find((h) => h.hypervisor_hostname === name || h.service.host === name);
    if (!hypervisor) throw notFound(`Host '${name}' not found! Nova has no hypervisor of that name.`);
    if ((hypervisor.servers?.length ?? 0) > 0) {
      throw leaseConflict(`Servers [${hypervisor.servers!.map((server) => server.uuid).join(', ')}] found for host ${name}. Only an empty host can be made reservable.`);
    }
    const known = await findHostByHypervisor(this.pool, hypervisor.hypervisor_hostname);
    if (known && !known.released) throw leaseConflict(`host ${hypervisor.hypervisor_hostname} is already reservable`);
    // Server reservations book room on shared hosts: a host they still count on cannot become a whole-host one.
    const booked = await liveReservationsOnHost(this.pool, hypervisor.hypervisor_hostname, hypervisor.service.host);
    if (booked > 0) throw leaseConflict(`host ${name} is booked by ${booked} server reservation(s) that have not ended: it can be made reservable once they have`);
    if (known) return this.reenrol(known.id, hypervisor.service.host);

    const zone = (await this.nova().listServices({ binary: 'nova-compute', host: hypervisor.service.host }))[0]?.zone ?? null;
    const pool = await this.freepool();
    await addHost(this.nova(), pool, hypervisor.service.host);

    try {
      const id = await insertHost(
        this.pool,
        {
          hypervisor_hostname: hypervisor.hypervisor_hostname,
          nova_hypervisor_id: hypervisor.id,
          hypervisor_type: hypervisor.hypervisor_type,
          hypervisor_version: String(hypervisor.hypervisor_version),
          service_name: hypervisor.service.host,
          vcpus: hypervisor.vcpus ?? 0,
          memory_mb: hypervisor.memory_mb ?? 0,
          local_gb: hypervisor.local_gb ?? 0,
          cpu_info: cpuInfo(hypervisor),
          availability_zone: zone,
        },
        extra,
      );
      return (await listHosts(this.pool, { id }))[0];
    } catch (err) {
      // Undo: nothing half-enrolled. Unless a concurrent enrolment of this host won the race: the host is
      // its, in the pool, and taking it out would leave the winner's host outside its aggregate.
      if (!isAlreadyExists(err)) await this.nova().removeHostFromAggregate(pool.id, hypervisor.service.host).catch(() => undefined);
      throw err;
    }
  }

  /**
   * A host released at a lease's end, now empty, becomes reservable again: back into the pool, and
   * the releasing booking (which blocked it for good) ends with its lease.
   */
  private async reenrol(id: string, computeHost: string): Promise<HostRecord> {
    await addHost(this.nova(), await this.freepool(), computeHost);
    await removeHost(this.nova(), await findAggregate(this.nova(), this.settings.releasedAggregate), computeHost);
    await endBlockedForGood(this.pool, id);
    await markReservableAgain(this.pool, id);
    return this.get(id);
  }

  async get(id: string): Promise<HostRecord> {
    const host = isHostId(id) ? (await listHosts(this.pool, { id }))[0] : undefined;
    if (!host) throw notFound(`Object with {'host_id': '${id}'} not found`);
    return host;
  }

  /** Leases that hold the host now or later: it cannot leave the pool or lose what they rely on. */
  private liveReservations(hostId: string): Promise<Array<{ lease: Lease; reservationId: string }>> {
    return liveBookingsOfHost(this.pool, hostId);
  }

  /** Changes capabilities and, when given, whether new leases may book the host (its leases are told by the caller). */
  async update(id: string, capabilities: Record<string, unknown>, reservable?: boolean): Promise<HostRecord> {
    const host = await this.get(id);
    if (reservable === true && host.released_at !== null) {
      throw leaseConflict(`host ${host.hypervisor_hostname} was released by lease ${host.released_by_lease}: once it is empty, enrol it again (POST /v1/os-hosts) to make it reservable`);
    }
    const changes = checkCapabilities(capabilities);
    const changed = Object.keys(changes).filter((key) => host.capabilities[key] !== changes[key]);
    for (const { lease, reservationId } of await this.liveReservations(id)) {
      const reservation = lease.reservations.find((r) => r.id === reservationId);
      const relied = queryKeys(parsePropertyQuery(reservation?.params.resource_properties ?? ''));
      const hit = changed.find((key) => relied.includes(key));
      if (hit) throw leaseConflict(`capability ${hit} of host ${host.hypervisor_hostname} is used by lease ${lease.name} (${lease.id}), which holds the host now or later`);
    }
    await setHostCapabilities(this.pool, id, changes);
    if (reservable !== undefined && reservable !== host.reservable && host.released_at === null) await setReservable(this.pool, id, reservable);
    return this.get(id);
  }

  async remove(id: string): Promise<void> {
    const host = await this.get(id);
    const live = await this.liveReservations(id);
    if (live.length > 0) {
      throw leaseConflict(`Can't delete host ${id}. The host is reserved. Host ${host.hypervisor_hostname} is booked now or later by ${live.map((l) => `lease ${l.lease.name} (${l.lease.id})`).join(', ')}: end or move those leases first.`);
    }
    await removeHost(this.nova(), await findAggregate(this.nova(), this.settings.freepoolAggregate), computeHostName(host));
    // Past bookings stay in history only as long as the host does.
    await deleteHostBookings(this.pool, id);
    await deleteHost(this.pool, id);
  }
}
