/**
 * `virtual:server`: one existing server of the lessee, guaranteed a place for the lease window.
 *
 * - reserve: the server's flavor footprint (VCPU, MEMORY_MB, DISK_GB) is booked on one concrete
 *   compute host in the quantity calendar, against the host's Placement capacity less the other
 *   server reservations overlapping the window. Hosts enrolled for host leases are not used.
 * - hold (right after admission): the server is shelved and offloaded, so its host serves others
 *   until the start.
 * - start (at start − lead time): if on-demand servers took the reserved host's room meanwhile, the
 *   deployment's policy decides: move the booking to another host with room, or fail the start
 *   with the reason; never an unshelve left to fail silently. Then unshelve onto the host (2.91).
 * - end: `snapshot_and_delete`, `delete`, or `shelve`. Deleted before the start: the server is
 *   given back (unshelved wherever Nova chooses), or deleted with `on_cancel: delete`.
 */
import { ApplicationFailure } from '@temporalio/common';
import {
  deleteServerAndWait,
  findServer,
  LEASABLE_STATUSES,
  shelveAndOffload,
  shelveForOwner,
  snapshotAndDelete,
  unshelveAnywhere,
  unshelveOnto,
} from '../../../activities/servers';
import { invalidLease } from '../../domain/lease';
import { matchesQuery, parsePropertyQuery, queryKeys } from '../../domain/property-query';
import type { Amounts } from '../../domain/quantity-calendar';
import type { Pool } from '../../db/pool';
import { serverHost, type GlanceClient, type NovaClient, type PlacementClient, type Server } from '../../openstack';
import type { ReservationContext, ResourcePlugin, StartOutcome } from '../plugin';
import { QuantityCalendar, type CapacityProvider, type QuantityBookingRow, type QuantityRequest } from '../quantity-calendar';
import { virtualServerParams } from './params';

export const VIRTUAL_SERVER = 'virtual:server';
const KIND = 'compute';
const RESOURCE_CLASSES = ['VCPU', 'MEMORY_MB', 'DISK_GB'] as const;

/** What to do at the start when on-demand servers took the reserved host's room. */
export type HostFullPolicy = 'move' | 'fail';

export interface VirtualServerDeps {
  pool: Pool;
  cloud: () => { nova: NovaClient; placement: PlacementClient; glance: GlanceClient };
  settings?: {
    hostFullPolicy?: HostFullPolicy;
    /** How long the hosts' capacities copied from Placement serve admissions before being read again (default 60 s). */
    capacityRefreshMs?: number;
  };
}

/** The reservation's allocation, as shown in the lease JSON. */
interface ServerAllocation {
  server_id: string;
  server_name: string;
  flavor: string;
  footprint: Amounts;
  /** Where the server runs (from the start) or is to run. */
  host: string;
  on_end: string;
  host_full: HostFullPolicy;
  moved_from?: string;
  snapshot_image_id?: string | null;
}

const allocationOf = (ctx: ReservationContext) => (ctx.reservation.allocation ?? {}) as Partial<ServerAllocation>;

/** What a flavor takes on its host, as Nova allocates it in Placement. */
export function flavorFootprint(flavor: Server['flavor']): Record<string, number> {
  const disk = flavor.disk + (flavor.ephemeral ?? 0) + Math.ceil((flavor.swap || 0) / 1024);
  const footprint: Record<string, number> = { VCPU: flavor.vcpus, MEMORY_MB: flavor.ram };
  if (disk > 0) footprint.DISK_GB = disk;
  return footprint;
}

/** A provider's usable capacity per resource class: (total − reserved) × allocation ratio. */
function capacityOf(inventories: Record<string, { total: number; reserved?: number; allocation_ratio?: number }>): Record<string, number> {
  const capacity: Record<string, number> = {};
  for (const resourceClass of RESOURCE_CLASSES) {
    const inventory = inventories[resourceClass];
    if (inventory) capacity[resourceClass] = Math.floor((inventory.total - (inventory.reserved ?? 0)) * (inventory.allocation_ratio ?? 1));
  }
  return capacity;
}

function hostProperties(provider: CapacityProvider): Record<string, string> {
  return { hypervisor_hostname: provider.name, host: provider.host, ...Object.fromEntries(provider.traits.map((trait) => [trait, 'true'])) };
}

export function virtualServerPlugin(deps: VirtualServerDeps): ResourcePlugin {
  const calendar = new QuantityCalendar(deps.pool);
  const hostFullPolicy = deps.settings?.hostFullPolicy ?? 'move';
  const refreshMs = deps.settings?.capacityRefreshMs ?? 60_000;

  /** Copies the compute hosts' capacities from Nova and Placement when the copy is older than refreshMs. */
  async function refreshProviders(): Promise<void> {
    const last = await calendar.refreshedAt(KIND);
    if (last !== undefined && Date.now() - last < refreshMs) return;
    const { nova, placement } = deps.cloud();
    const hypervisors = (await nova.listHypervisors()).filter((h) => h.state === 'up' && h.status === 'enabled');
    const providers = await Promise.all(
      hypervisors.map(async (h): Promise<CapacityProvider> => {
        // Since compute microversion 2.53 a hypervisor's id is its compute node's UUID, which is its Placement provider's.
        const [{ inventories }, { traits }] = await Promise.all([placement.getInventories(h.id), placement.getProviderTraits(h.id)]);
        return { uuid: h.id, name: h.hypervisor_hostname, host: h.service.host, capacity: capacityOf(inventories), traits };
      }),
    );
    await calendar.syncProviders(KIND, providers);
  }

  /** Hosts enrolled for whole-host leases (and not released): their capacity is not shared. */
  async function enrolledHosts(): Promise<Set<string>> {
    const { rows } = await deps.pool.query<{ name: string }>(
      `SELECT hypervisor_hostname AS name FROM hosts WHERE released_at IS NULL UNION SELECT service_name FROM hosts WHERE released_at IS NULL AND service_name IS NOT NULL`,
    );
    return new Set(rows.map((r) => r.name));
  }

  async function requestFor(ctx: ReservationContext, footprint: Amounts, describe: string): Promise<QuantityRequest> {
    const params = virtualServerParams.parse(ctx.reservation.params);
    const query = parsePropertyQuery(params.resource_properties);
    const providers = await calendar.providers(KIND);
    const known = new Set(['hypervisor_hostname', 'host', ...providers.flatMap((p) => p.traits)]);
    const unknown = queryKeys(query).filter((key) => !known.has(key));
    if (unknown.length > 0) {
      throw invalidLease(`resource_properties: unknown property ${unknown.map((k) => `$${k}`).join(', ')} (known: $hypervisor_hostname, $host and the hosts' Placement traits)`);
    }
    const enrolled = await enrolledHosts();
    return {
      kind: KIND,
      amounts: footprint,
      subject: params.server_id,
      describe,
      matches: (p) => !enrolled.has(p.name) && !enrolled.has(p.host) && matchesQuery(query, hostProperties(p)),
    };
  }

  /** The booked footprint, as reserve recorded it in the allocation. */
  function bookedRequest(ctx: ReservationContext): Promise<QuantityRequest> {
    const allocation = allocationOf(ctx);
    return requestFor(ctx, allocation.footprint ?? {}, `server ${allocation.server_name ?? allocation.server_id}`);
  }

  /** Whether the host has room for the footprint right now, as Placement counts it (on-demand servers included). */
  async function roomNow(providerUuid: string, footprint: Amounts): Promise<{ ok: boolean; short: string }> {
    const { placement } = deps.cloud();
    const [{ inventories }, { usages }] = await Promise.all([placement.getInventories(providerUuid), placement.getProviderUsages(providerUuid)]);
    const capacity = capacityOf(inventories);
    const short = Object.entries(footprint)
      .filter(([resourceClass, wanted]) => (usages[resourceClass] ?? 0) + wanted > (capacity[resourceClass] ?? 0))
      .map(([resourceClass, wanted]) => `${resourceClass} ${Math.max(0, (capacity[resourceClass] ?? 0) - (usages[resourceClass] ?? 0))} free of ${wanted} needed`);
    return { ok: short.length === 0, short: short.join(', ') };
  }

  /** The reserved host lost its room: the policy moves the booking to a host with room now and for the rest of the window, or fails. */
  async function relocate(ctx: ReservationContext, from: QuantityBookingRow, why: string): Promise<QuantityBookingRow> {
    const { server_id: serverId, host_full: policy } = allocationOf(ctx);
    if (policy === 'fail') {
      throw ApplicationFailure.nonRetryable(`reserved host ${from.host} has no room for server ${serverId} any more (${why}); the policy is to fail the start`, 'ReservedHostFull');
    }
    const request = await bookedRequest(ctx);
    const others = (await calendar.providers(KIND)).filter((p) => p.uuid !== from.providerUuid && request.matches(p));
    const withRoom: string[] = [];
    for (const p of others) if ((await roomNow(p.uuid, request.amounts)).ok) withRoom.push(p.uuid);
    const moved = withRoom.length > 0 ? await calendar.move(ctx, request, withRoom, Date.now()) : undefined;
    if (!moved) {
      throw ApplicationFailure.nonRetryable(
        `reserved host ${from.host} has no room for server ${serverId} any more (${why}), and no other matching host has room until the lease's end`,
        'NoHostWithRoom',
      );
    }
    return moved;
  }

  return {
    resourceType: VIRTUAL_SERVER,
    paramsSchema: virtualServerParams,

    async reserve(ctx) {
      const params = virtualServerParams.parse(ctx.reservation.params);
      const { nova } = deps.cloud();
      const server = await findServer(nova, params.server_id);
      // Another project's server is reported as missing: its existence is not the lessee's business.
      if (!server || server.tenant_id !== ctx.projectId) throw invalidLease(`server ${params.server_id} not found in project ${ctx.projectId}`);
      const running = ctx.leaseStatus !== 'PENDING'; // an active lease's server is running: it is only re-booked
      if (!running && !LEASABLE_STATUSES.includes(server.status)) {
        throw invalidLease(`server ${params.server_id} is ${server.status}: only a server that is ${LEASABLE_STATUSES.join(', ')} can be leased`);
      }
      await refreshProviders();
      const footprint = allocationOf(ctx).footprint ?? flavorFootprint(server.flavor);
      const booking = await calendar.book(ctx, await requestFor(ctx, footprint, `server ${server.name} (flavor ${server.flavor.original_name})`));
      const allocation: ServerAllocation = {
        server_id: server.id,
        server_name: server.name,
        flavor: server.flavor.original_name,
        footprint,
        host: booking.host,
        on_end: params.on_end,
        // Decided at booking, so a changed deployment default does not change a booked lease.
        host_full: params.host_full === 'default' ? hostFullPolicy : params.host_full,
      };
      return {
        allocation: { ...allocation },
        resourceKeys: [`server:${server.id}`],
        holdUntilStart: true,
      };
    },

    async hold(ctx) {
      await shelveAndOffload(deps.cloud().nova, virtualServerParams.parse(ctx.reservation.params).server_id);
    },

    async start(ctx): Promise<StartOutcome> {
      const { server_id: serverId } = virtualServerParams.parse(ctx.reservation.params);
      const { nova } = deps.cloud();
      const reserved = await calendar.bookingFor(ctx.reservation.id);
      if (!reserved) throw ApplicationFailure.nonRetryable(`reservation ${ctx.reservation.id} has no booking`, 'BookingMissing');
      const server = await findServer(nova, serverId);
      if (!server) throw ApplicationFailure.nonRetryable(`server ${serverId} no longer exists (deleted by its owner before the lease started?)`, 'ServerGone');
      if (server.status === 'ACTIVE' && serverHost(server)) return { allocation: { host: serverHost(server) } }; // already started

      const footprint = allocationOf(ctx).footprint ?? {};
      let target = reserved;
      const room = await roomNow(target.providerUuid, footprint);
      if (!room.ok) target = await relocate(ctx, target, `${room.short}: taken by on-demand servers`);
      // Between the check and the unshelve an on-demand server may still take the room: Nova then
      // refuses the host, and the policy is applied again on what Placement says then.
      for (let attempt = 1; ; attempt++) {
        const result = await unshelveOnto(nova, serverId, target.host);
        if (result.ok) {
          const moved = target.providerUuid !== reserved.providerUuid;
          return { allocation: { host: serverHost(result.server) ?? target.host, ...(moved ? { moved_from: reserved.host } : {}) } };
        }
        const now = await roomNow(target.providerUuid, footprint);
        if (now.ok && attempt < 3) continue;
        if (now.ok) throw ApplicationFailure.retryable(`Nova did not unshelve server ${serverId} onto ${target.host}: ${result.reason}`, 'UnshelveRefused');
        target = await relocate(ctx, target, `${now.short}; Nova: ${result.reason}`);
      }
    },

    async beforeEnd() {
      // Nothing before the end: the end itself snapshots (on_end) while the server still exists.
    },

    async end(ctx) {
      const params = virtualServerParams.parse(ctx.reservation.params);
      const { nova, glance } = deps.cloud();
      let allocation: Record<string, unknown> | undefined;
      if (!ctx.started) {
        // Only a reservation that was admitted (and so set the server aside) gives it back: a
        // refused admission never touched the server, which may be another lease's.
        if (ctx.reservation.hold === undefined) {
          // nothing to give back
        } else if (params.on_cancel === 'delete') await deleteServerAndWait(nova, params.server_id);
        else await unshelveAnywhere(nova, params.server_id);
      } else if (params.on_end === 'snapshot_and_delete') {
        const name = allocationOf(ctx).server_name ?? params.server_id;
        const imageId = await snapshotAndDelete(nova, glance, params.server_id, name, { leaseId: ctx.leaseId, leaseName: ctx.leaseName, reservationId: ctx.reservation.id });
        allocation = { snapshot_image_id: imageId ?? null };
      } else if (params.on_end === 'delete') {
        await deleteServerAndWait(nova, params.server_id);
      } else {
        await shelveForOwner(nova, params.server_id);
      }
      await calendar.release(ctx.reservation.id, ctx.started);
      return allocation ? { allocation } : {};
    },

    heal() {
      return Promise.resolve({ missingResources: false, resourcesChanged: false });
    },
  };
}
