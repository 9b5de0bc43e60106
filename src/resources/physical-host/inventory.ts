/**
 * The reservable host pool (Blazar's os-hosts). Enrolling a host asks Nova for the hypervisor,
 * refuses one that runs servers, and moves it into the reservable pool aggregate (`freepool`),
 * whose `filter_tenant_id` keeps ordinary servers off it (Nova's AggregateMultiTenancyIsolation).
 */
import { ApplicationFailure } from '@temporalio/common';
import { ensureAggregate } from './aggregates';
import { ConflictError, ignoreNotFound, NotFoundError, type Aggregate, type NovaClient } from '../../openstack';
import { leaseConflict, invalidLease, type Lease } from '../../domain/lease';
import { parsePropertyQuery, queryKeys } from '../../domain/property-query';
import { isHostId, listHosts, type HostRecord } from '../../db/hosts';
import type { Pool } from '../../db/pool';
import { inTransaction } from '../../db/transaction';

export interface InventorySettings {
  /** The aggregate that holds reservable hosts while no lease has them. */
  freepoolAggregate: string;
  /** The project named in the pool's filter_tenant_id: nobody else's servers land there. */
  freepoolProjectId: string;
  /** Where hosts released at a lease's end sit (see the `release` end policy). */
  releasedAggregate: string;
}

export const MAX_CAPABILITY_NAME = 64;

function notFound(message: string): ApplicationFailure {
  return ApplicationFailure.create({ type: 'LeaseNotFound', message, nonRetryable: true });
}

export function checkCapabilities(capabilities: Record<string, unknown>): Record<string, string> {
  const result: Record<string, string> = {};
  for (const [name, value] of Object.entries(capabilities)) {
    if (name.length === 0 || name.length > MAX_CAPABILITY_NAME) throw invalidLease(`capability names must be 1 to ${MAX_CAPABILITY_NAME} characters: ${JSON.stringify(name.slice(0, 80))}`);
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
    private readonly nova: NovaClient,
    private readonly settings: InventorySettings,
  ) {}

  /** The pool aggregate, created and set up if missing. */
  freepool(): Promise<Aggregate> {
    return ensureAggregate(this.nova, this.settings.freepoolAggregate, { filter_tenant_id: this.settings.freepoolProjectId, 'blazar:owner': 'leasekeeper', 'leasekeeper:pool': 'free' });
  }

  async enrol(name: string, capabilities: Record<string, unknown>): Promise<HostRecord> {
    const extra = checkCapabilities(capabilities);
    // Nova answers 404 when the pattern matches no hypervisor at all.
    const candidates = (await ignoreNotFound(this.nova.listHypervisors({ hypervisor_hostname_pattern: name, with_servers: true }))) ?? [];
    const hypervisor = candidates.find((h) => h.hypervisor_hostname === name || h.service.host === name);
    if (!hypervisor) throw notFound(`no hypervisor named ${name} in Nova`);
    if ((hypervisor.servers?.length ?? 0) > 0) {
      throw leaseConflict(`host ${name} runs ${hypervisor.servers!.length} server(s): only an empty host can be made reservable`);
    }
    const { rows: known } = await this.pool.query<{ id: string; released: boolean }>('SELECT id::text, released_at IS NOT NULL AS released FROM hosts WHERE hypervisor_hostname = $1', [
      hypervisor.hypervisor_hostname,
    ]);
    if (known[0] && !known[0].released) throw leaseConflict(`host ${hypervisor.hypervisor_hostname} is already reservable`);
    // Server reservations book room on shared hosts: a host they still count on cannot become a whole-host one.
    const { rows: booked } = await this.pool.query<{ n: number }>(
      `SELECT count(DISTINCT a.reservation_id)::int AS n FROM quantity_allocations a JOIN capacity_providers p ON p.uuid = a.provider_uuid
       WHERE (p.name = $1 OR p.host = $2) AND upper(a.blocks) > now()`,
      [hypervisor.hypervisor_hostname, hypervisor.service.host],
    );
    if (booked[0].n > 0) throw leaseConflict(`host ${name} is booked by ${booked[0].n} server reservation(s) that have not ended: it can be made reservable once they have`);
    if (known[0]) return this.reenrol(known[0].id, hypervisor.service.host);

    const zone = (await this.nova.listServices({ binary: 'nova-compute', host: hypervisor.service.host }))[0]?.zone ?? null;
    const pool = await this.freepool();
    if (!pool.hosts.includes(hypervisor.service.host)) {
      try {
        await this.nova.addHostToAggregate(pool.id, hypervisor.service.host);
      } catch (err) {
        if (!(err instanceof ConflictError)) throw err; // already there
      }
    }

    try {
      const id = await inTransaction(this.pool, async (client) => {
        const { rows } = await client.query<{ id: string }>(
          `INSERT INTO hosts (hypervisor_hostname, nova_hypervisor_id, hypervisor_type, hypervisor_version, service_name, vcpus, memory_mb, local_gb, cpu_info, availability_zone)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id::text`,
          [
            hypervisor.hypervisor_hostname, hypervisor.id, hypervisor.hypervisor_type, String(hypervisor.hypervisor_version), hypervisor.service.host,
            hypervisor.vcpus ?? 0, hypervisor.memory_mb ?? 0, hypervisor.local_gb ?? 0, cpuInfo(hypervisor), zone,
          ],
        );
        for (const [key, value] of Object.entries(extra)) {
          await client.query('INSERT INTO host_capabilities (host_id, name, value) VALUES ($1, $2, $3)', [rows[0].id, key, value]);
        }
        return rows[0].id;
      });
      return (await listHosts(this.pool, { id }))[0];
    } catch (err) {
      await this.nova.removeHostFromAggregate(pool.id, hypervisor.service.host).catch(() => undefined); // undo: nothing half-enrolled
      throw err;
    }
  }

  /**
   * A host released at a lease's end, now empty, becomes reservable again: back into the pool, and
   * the releasing booking (which blocked it for good) ends with its lease.
   */
  private async reenrol(id: string, computeHost: string): Promise<HostRecord> {
    const pool = await this.freepool();
    if (!pool.hosts.includes(computeHost)) {
      try {
        await this.nova.addHostToAggregate(pool.id, computeHost);
      } catch (err) {
        if (!(err instanceof ConflictError)) throw err;
      }
    }
    const released = (await this.nova.listAggregates()).find((a) => a.name === this.settings.releasedAggregate);
    if (released?.hosts.includes(computeHost)) await ignoreNotFound(this.nova.removeHostFromAggregate(released.id, computeHost));
    await this.pool.query('UPDATE host_allocations SET blocks = tstzrange(lower(blocks), upper(during)) WHERE host_id = $1 AND upper_inf(blocks)', [id]);
    await this.pool.query('UPDATE hosts SET reservable = true, released_at = NULL, released_by_lease = NULL, updated_at = now() WHERE id = $1', [id]);
    return this.get(id);
  }

  async get(id: string): Promise<HostRecord> {
    const host = isHostId(id) ? (await listHosts(this.pool, { id }))[0] : undefined;
    if (!host) throw notFound(`Host ${id} not found`);
    return host;
  }

  /** Leases that hold the host now or later: it cannot leave the pool or lose what they rely on. */
  private async liveReservations(hostId: string): Promise<Array<{ lease: Lease; reservationId: string }>> {
    const { rows } = await this.pool.query<{ document: Lease; reservation_id: string }>(
      `SELECT DISTINCT a.reservation_id::text, l.document FROM host_allocations a JOIN leases l ON l.id = a.lease_id
       WHERE a.host_id = $1 AND upper(a.during) > now() AND l.deleted_at IS NULL`,
      [hostId],
    );
    return rows.map((r) => ({ lease: r.document, reservationId: r.reservation_id }));
  }

  async update(id: string, capabilities: Record<string, unknown>): Promise<HostRecord> {
    const host = await this.get(id);
    const changes = checkCapabilities(capabilities);
    const changed = Object.keys(changes).filter((key) => host.capabilities[key] !== changes[key]);
    for (const { lease, reservationId } of await this.liveReservations(id)) {
      const reservation = lease.reservations.find((r) => r.id === reservationId);
      const relied = queryKeys(parsePropertyQuery(reservation?.params.resource_properties ?? ''));
      const hit = changed.find((key) => relied.includes(key));
      if (hit) throw leaseConflict(`capability ${hit} of host ${host.hypervisor_hostname} is used by lease ${lease.name} (${lease.id}), which holds the host now or later`);
    }
    await inTransaction(this.pool, async (client) => {
      for (const [key, value] of Object.entries(changes)) {
        await client.query(
          'INSERT INTO host_capabilities (host_id, name, value) VALUES ($1, $2, $3) ON CONFLICT (host_id, name) DO UPDATE SET value = EXCLUDED.value',
          [id, key, value],
        );
      }
      await client.query('UPDATE hosts SET updated_at = now() WHERE id = $1', [id]);
    });
    return this.get(id);
  }

  async remove(id: string): Promise<void> {
    const host = await this.get(id);
    const live = await this.liveReservations(id);
    if (live.length > 0) {
      throw leaseConflict(`host ${host.hypervisor_hostname} is booked now or later by ${live.map((l) => `lease ${l.lease.name} (${l.lease.id})`).join(', ')}: end or move those leases first`);
    }
    const pool = (await this.nova.listAggregates()).find((a) => a.name === this.settings.freepoolAggregate);
    if (pool?.hosts.includes(host.service_name ?? host.hypervisor_hostname)) {
      try {
        await this.nova.removeHostFromAggregate(pool.id, host.service_name ?? host.hypervisor_hostname);
      } catch (err) {
        if (!(err instanceof NotFoundError)) throw err;
      }
    }
    // Past bookings stay in history only as long as the host does.
    await this.pool.query('DELETE FROM host_allocations WHERE host_id = $1', [id]);
    await this.pool.query('DELETE FROM hosts WHERE id = $1', [id]);
  }
}
