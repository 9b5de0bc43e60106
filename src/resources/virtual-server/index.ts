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
  type UnshelveResult,
  findServer,
  LEASABLE_STATUSES,
  shelveAndOffload,
  shelveForOwner,
  snapshotAndDelete,
  unshelveAnywhere,
  unshelveOnto,
} from './servers';
import { invalidLease } from '../../domain/lease';
import type { Amounts } from '../../domain/quantity-calendar';
import { footprintOfAmounts } from '../../domain/usage';
import { enrolledHostNames } from '../../db/hosts';
import type { Pool } from '../../db/pool';
import { serverHost, type GlanceClient, type NeutronClient, type NovaClient, type PlacementClient, type Server } from '../../openstack';
import { earliestCommonFit } from '../../domain/fit-search';
import type { ReservationContext, ResourcePlugin, ResourceType, StartOutcome } from '../../domain/resource-plugin';
import { providerQuery, QuantityCalendar, traitProperties, type CapacityProvider, type QuantityBookingRow, type QuantityRequest } from '../shared/quantity-bookings';
import { capacityOf, COMPUTE_KIND, readComputeProviders } from '../shared/compute-providers';
import { flavorVisibleTo, imageVisibleTo, networkVisibleTo } from '../shared/visibility';
import { virtualServerParams, type VirtualServerParams } from './params';

export const VIRTUAL_SERVER = 'virtual:server';
const KIND = COMPUTE_KIND;

/** What to do at the start when on-demand servers took the reserved host's room. */
export type HostFullPolicy = 'move' | 'fail';

export interface VirtualServerDeps {
  pool: Pool;
  cloud: () => { nova: NovaClient; placement: PlacementClient; glance: GlanceClient; neutron: NeutronClient };
  /** Nova in a lessee's project, to create servers there (flavor_id + image_id); unset: that form is refused. */
  projectCloud?: (projectId: string) => { nova: NovaClient };
  settings?: {
    hostFullPolicy?: HostFullPolicy;
    /** How long the hosts' capacities copied from Placement serve admissions before being read again (default 60 s). */
    capacityRefreshMs?: number;
  };
}

/** The reservation's allocation, as shown in the lease JSON. */
interface ServerAllocation {
  /** The server (for a created one: from the start). */
  server_id: string | null;
  server_name: string | null;
  /** Created by leasekeeper from this image (flavor_id + image_id). */
  image_id?: string;
  flavor: string;
  footprint: Amounts;
  /** Where the server runs (from the start) or is to run. */
  host: string;
  on_end: string;
  host_full: HostFullPolicy;
  moved_from?: string;
  snapshot_image_id?: string | null;
}

const allocationOf = (ctx: ReservationContext<VirtualServerParams>) => (ctx.reservation.allocation ?? {}) as Partial<ServerAllocation>;

/** `server <name>`, or `a server of flavor <name>` before a created one exists: for messages. */
function describeServer(ctx: ReservationContext<VirtualServerParams>): string {
  const { server_id: id, server_name: name, flavor } = allocationOf(ctx);
  return id ? `server ${name ?? id}` : `a server of flavor ${flavor}`;
}

/** What a flavor takes on its host, as Nova allocates it in Placement. */
export function flavorFootprint(flavor: { vcpus: number; ram: number; disk: number; ephemeral?: number; swap?: number | '' }): Record<string, number> {
  const disk = flavor.disk + (flavor.ephemeral ?? 0) + Math.ceil((flavor.swap || 0) / 1024);
  const footprint: Record<string, number> = { VCPU: flavor.vcpus, MEMORY_MB: flavor.ram };
  if (disk > 0) footprint.DISK_GB = disk;
  return footprint;
}

/** The name of the server leasekeeper creates for a reservation (found again by it when a start is retried). */
export const createdServerName = (reservationId: string) => `lease-${reservationId}`;

function hostProperties(provider: CapacityProvider): Record<string, string> {
  return { hypervisor_hostname: provider.name, host: provider.host, ...traitProperties(provider) };
}

/** What both faces of the type need: the hosts' capacities, and what a reservation books (read-only lookups in the cloud). */
function serverBookings(deps: VirtualServerDeps) {
  const calendar = new QuantityCalendar(deps.pool);
  /** Copies the compute hosts' capacities from Nova and Placement again when the copy is older than the refresh interval. */
  const refreshProviders = () =>
    calendar.refreshProviders(KIND, deps.settings?.capacityRefreshMs ?? 60_000, () => readComputeProviders(deps.cloud()));

  /** What a reservation of `params` books in the quantity calendar, on which hosts. */
  async function requestFor(params: VirtualServerParams, footprint: Amounts, describe: string): Promise<QuantityRequest> {
    const matchesQuery = providerQuery(params.resource_properties, await calendar.providers(KIND), hostProperties);
    // Hosts enrolled for whole-host leases (and not released): their capacity is not shared.
    const enrolled = await enrolledHostNames(deps.pool);
    return {
      kind: KIND,
      amounts: footprint,
      subject: params.server_id ?? undefined,
      describe,
      matches: (p) => !enrolled.has(p.name) && !enrolled.has(p.host) && matchesQuery(p),
    };
  }

  /**
   * The flavor, image and networks of a server to create, as the lessee's project sees them: the
   * server is created there with the service user's admin role, which would see every project's.
   * Missing and invisible are answered alike (another project's private things are not confirmed).
   * Returns the flavor; `fail` makes the error (invalid lease at admission, final failure at the start).
   */
  async function usableByLessee(params: VirtualServerParams, projectId: string, fail: (message: string) => Error): Promise<{ name: string; footprint: Amounts }> {
    const { nova, glance, neutron } = deps.cloud();
    const hidden = (field: string, what: string, id: string) => fail(`${field}: ${what} ${id} not found or not visible to project ${projectId}`);
    const [flavor, image] = await Promise.all([flavorVisibleTo(nova, params.flavor_id!, projectId), imageVisibleTo(glance, params.image_id!, projectId)]);
    if (!flavor) throw hidden('flavor_id', 'flavor', params.flavor_id!);
    if (!image) throw hidden('image_id', 'image', params.image_id!);
    for (const networkId of Array.isArray(params.networks) ? params.networks : []) {
      if (!(await networkVisibleTo(neutron, networkId, projectId))) throw hidden('networks', 'network', networkId);
    }
    return { name: flavor.name, footprint: flavorFootprint({ ...flavor, ephemeral: flavor['OS-FLV-EXT-DATA:ephemeral'] }) };
  }

  /**
   * The flavor a reservation books: its server's (the server must be the project's; `leasable`:
   * and in a state that can be leased), or that of the server to create, as the lessee sees it.
   */
  async function flavorFor(params: VirtualServerParams, projectId: string, leasable: boolean): Promise<{ server?: Server; flavor: { name: string; footprint: Amounts } }> {
    if (!params.server_id) return { flavor: await usableByLessee(params, projectId, invalidLease) };
    const server = await findServer(deps.cloud().nova, params.server_id);
    // Another project's server is reported as missing: its existence is not the lessee's business.
    if (!server || server.tenant_id !== projectId) throw invalidLease(`server ${params.server_id} not found in project ${projectId}`);
    if (leasable && !LEASABLE_STATUSES.includes(server.status)) {
      throw invalidLease(`server ${params.server_id} is ${server.status}: only a server that is ${LEASABLE_STATUSES.join(', ')} can be leased`);
    }
    return { server, flavor: { name: server.flavor.original_name, footprint: flavorFootprint(server.flavor) } };
  }

  const describeRequest = (server: Server | undefined, flavor: { name: string }) => (server ? `server ${server.name} (flavor ${flavor.name})` : `a server of flavor ${flavor.name}`);

  return { calendar, refreshProviders, requestFor, usableByLessee, flavorFor, describeRequest };
}

/** What the API needs of `virtual:server`: the parameters, and where the servers' flavors fit. */
export function virtualServerType(deps: VirtualServerDeps, bookings = serverBookings(deps)): ResourceType<VirtualServerParams> {
  const { calendar, refreshProviders, requestFor, flavorFor, describeRequest } = bookings;
  return {
    resourceType: VIRTUAL_SERVER,
    paramsSchema: virtualServerParams.superRefine((params, issues) => {
      if (!params.server_id && !deps.projectCloud) {
        issues.addIssue({ code: 'custom', path: ['flavor_id'], message: 'this deployment cannot create servers in your project: give the server_id of an existing server' });
      }
    }),
    async checkPropertyKeys(params) {
      if (!params.resource_properties) return;
      await refreshProviders();
      providerQuery(params.resource_properties, await calendar.providers(KIND), hostProperties);
    },
    async earliest({ projectId, reservations, startMs, durationMs, provisioningLeadMs }) {
      await refreshProviders();
      const requests = await Promise.all(
        reservations.map(async (reservation) => {
          const params = reservation.params;
          const { server, flavor } = await flavorFor(params, projectId, true);
          return requestFor(params, flavor.footprint, describeRequest(server, flavor));
        }),
      );
      // Each server on its own host's calendar; several servers of one lease are searched one by one (not jointly).
      return earliestCommonFit(requests.map((request) => (from: number) => calendar.search(request, from, durationMs, provisioningLeadMs)), startMs);
    },
    latestEnd: (leaseId) => calendar.latestEnd(leaseId, KIND),
  };
}

export function virtualServerPlugin(deps: VirtualServerDeps): ResourcePlugin<VirtualServerParams> {
  const bookings = serverBookings(deps);
  const { calendar, refreshProviders, requestFor, usableByLessee, flavorFor, describeRequest } = bookings;
  const hostFullPolicy = deps.settings?.hostFullPolicy ?? 'move';

  /** The booked footprint, as reserve recorded it in the allocation. */
  function bookedRequest(ctx: ReservationContext<VirtualServerParams>): Promise<QuantityRequest> {
    return requestFor(ctx.reservation.params, allocationOf(ctx).footprint ?? {}, describeServer(ctx));
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
  async function relocate(ctx: ReservationContext<VirtualServerParams>, from: QuantityBookingRow, why: string): Promise<QuantityBookingRow> {
    const { host_full: policy } = allocationOf(ctx);
    const what = describeServer(ctx);
    if (policy === 'fail') {
      throw ApplicationFailure.nonRetryable(`reserved host ${from.host} has no room for ${what} any more (${why}); the policy is to fail the start`, 'ReservedHostFull');
    }
    const request = await bookedRequest(ctx);
    const others = (await calendar.providers(KIND)).filter((p) => p.uuid !== from.providerUuid && request.matches(p));
    const withRoom: string[] = [];
    for (const p of others) if ((await roomNow(p.uuid, request.amounts)).ok) withRoom.push(p.uuid);
    const moved = withRoom.length > 0 ? await calendar.move(ctx, request, withRoom, Date.now()) : undefined;
    if (!moved) {
      throw ApplicationFailure.nonRetryable(
        `reserved host ${from.host} has no room for ${what} any more (${why}), and no other matching host has room until the lease's end`,
        'NoHostWithRoom',
      );
    }
    return moved;
  }

  /** The server leasekeeper created for the reservation, if any. */
  async function createdServer(ctx: ReservationContext<VirtualServerParams>): Promise<Server | undefined> {
    const name = createdServerName(ctx.reservation.id);
    const found = await deps.cloud().nova.listServers({ all_tenants: true, name: `^${name}$` });
    return found.find((s) => s.metadata.leasekeeper_reservation === ctx.reservation.id && s.status !== 'DELETED');
  }

  /** The reservation's server id: given, or created at the start (undefined before). */
  async function serverIdOf(ctx: ReservationContext<VirtualServerParams>): Promise<string | undefined> {
    const params = ctx.reservation.params;
    return params.server_id ?? allocationOf(ctx).server_id ?? (await createdServer(ctx))?.id;
  }

  /** The room check at the start: on the reserved host, or where the policy moves the booking (also when the host failed and healing found no room before). */
  async function hostWithRoom(ctx: ReservationContext<VirtualServerParams>, reserved: QuantityBookingRow): Promise<QuantityBookingRow> {
    if (await calendar.onFailedHost(reserved.providerUuid)) return relocate(ctx, reserved, 'the host has failed');
    const room = await roomNow(reserved.providerUuid, allocationOf(ctx).footprint ?? {});
    return room.ok ? reserved : relocate(ctx, reserved, `${room.short}: taken by on-demand servers`);
  }

  /**
   * Puts the server on `target` (unshelve, or create) and retries there or elsewhere when Nova
   * refuses the host: between the room check and Nova's scheduling an on-demand server may still
   * take the room, and then the policy is applied again on what Placement says.
   */
  async function placeOnHost(ctx: ReservationContext<VirtualServerParams>, first: QuantityBookingRow, place: (host: string) => Promise<UnshelveResult>): Promise<{ server: Server; host: QuantityBookingRow }> {
    let target = first;
    for (let attempt = 1; ; attempt++) {
      const result = await place(target.host);
      if (result.ok) return { server: result.server, host: target };
      const now = await roomNow(target.providerUuid, allocationOf(ctx).footprint ?? {});
      if (now.ok && attempt < 3) continue;
      if (now.ok) throw ApplicationFailure.retryable(`Nova did not place the server on ${target.host}: ${result.reason}`, 'PlacementRefused');
      target = await relocate(ctx, target, `${now.short}; Nova: ${result.reason}`);
    }
  }

  /** Creates the reservation's server in the lessee's project on `host` (or finds the one an earlier try made) and waits for it. */
  async function createOn(ctx: ReservationContext<VirtualServerParams>, host: string): Promise<UnshelveResult> {
    const params = ctx.reservation.params;
    if (!deps.projectCloud) throw ApplicationFailure.nonRetryable('this deployment cannot create servers in lessee projects', 'NoProjectCredentials');
    const { nova } = deps.cloud();
    let server = await createdServer(ctx);
    if (server?.status === 'ERROR') {
      await deleteServerAndWait(nova, server.id); // a failed build on a refused host: start over
      server = undefined;
    }
    if (!server) {
      // Again at the start: a share withdrawn since the admission no longer lets the lessee use them.
      await usableByLessee(params, ctx.projectId, (message) => ApplicationFailure.nonRetryable(message, 'NotVisibleToLessee'));
      const created = await deps.projectCloud(ctx.projectId).nova.createServer({
        name: createdServerName(ctx.reservation.id),
        flavorRef: params.flavor_id!,
        imageRef: params.image_id!,
        networks: params.networks ? (Array.isArray(params.networks) ? params.networks.map((uuid) => ({ uuid })) : params.networks) : 'auto',
        host,
        metadata: { leasekeeper_lease: ctx.leaseId, leasekeeper_reservation: ctx.reservation.id },
      });
      server = await nova.getServer(created.id);
    }
    const built = await nova.waitForServer(server.id, (s) => s.status === 'ACTIVE' || s.status === 'ERROR', { timeoutMs: 5 * 60_000, failOnError: false });
    if (built.status === 'ACTIVE') return { ok: true, server: built };
    return { ok: false, reason: built.fault?.message ?? 'the build failed' };
  }

  return {
    ...virtualServerType(deps, bookings),

    async reserve(ctx) {
      const params = ctx.reservation.params;
      const running = ctx.leaseStatus !== 'PENDING'; // an active lease's server is running: it is only re-booked
      let server: Server | undefined;
      let flavor: { name: string; footprint: Amounts };
      if (params.server_id || !running) ({ server, flavor } = await flavorFor(params, ctx.projectId, !running));
      // Its server exists already: the booked flavor stays, and nothing more is created.
      else flavor = { name: allocationOf(ctx).flavor ?? params.flavor_id!, footprint: allocationOf(ctx).footprint ?? {} };
      await refreshProviders();
      const footprint = allocationOf(ctx).footprint ?? flavor.footprint;
      const booking = await calendar.book(ctx, await requestFor(params, footprint, describeRequest(server, flavor)));
      const allocation: ServerAllocation = {
        server_id: server?.id ?? allocationOf(ctx).server_id ?? null,
        server_name: server?.name ?? allocationOf(ctx).server_name ?? null,
        ...(params.image_id ? { image_id: params.image_id } : {}),
        flavor: flavor.name,
        footprint,
        host: booking.host,
        on_end: params.on_end,
        // Decided at booking, so a changed deployment default does not change a booked lease.
        host_full: params.host_full === 'default' ? hostFullPolicy : params.host_full,
      };
      return {
        allocation: { ...allocation },
        resourceKeys: server ? [`server:${server.id}`] : [],
        // An existing server is shelved until the start; a server to create does not exist yet.
        holdUntilStart: Boolean(server),
        footprint: footprintOfAmounts(footprint),
      };
    },

    moveWindow: (ctx) => calendar.moveWindow(ctx),

    async hold(ctx) {
      const { server_id: serverId } = ctx.reservation.params;
      if (serverId) await shelveAndOffload(deps.cloud().nova, serverId);
    },

    async start(ctx): Promise<StartOutcome> {
      const { server_id: serverId } = ctx.reservation.params;
      const { nova } = deps.cloud();
      const reserved = await calendar.bookingFor(ctx.reservation.id);
      if (!reserved) throw ApplicationFailure.nonRetryable(`reservation ${ctx.reservation.id} has no booking`, 'BookingMissing');
      const movedFrom = (placed: QuantityBookingRow) => (placed.providerUuid !== reserved.providerUuid ? { moved_from: reserved.host } : {});

      if (!serverId) {
        const existing = await createdServer(ctx);
        if (existing?.status === 'ACTIVE') return { allocation: { server_id: existing.id, server_name: existing.name, host: serverHost(existing) } }; // an earlier try made it
        const placed = await placeOnHost(ctx, existing ? reserved : await hostWithRoom(ctx, reserved), (host) => createOn(ctx, host));
        return { allocation: { server_id: placed.server.id, server_name: placed.server.name, host: serverHost(placed.server) ?? placed.host.host, ...movedFrom(placed.host) } };
      }

      const server = await findServer(nova, serverId);
      if (!server) throw ApplicationFailure.nonRetryable(`server ${serverId} no longer exists (deleted by its owner before the lease started?)`, 'ServerGone');
      if (server.status === 'ACTIVE' && serverHost(server)) return { allocation: { host: serverHost(server) } }; // already started
      const placed = await placeOnHost(ctx, await hostWithRoom(ctx, reserved), (host) => unshelveOnto(nova, serverId, host));
      return { allocation: { host: serverHost(placed.server) ?? placed.host.host, ...movedFrom(placed.host) } };
    },

    async end(ctx) {
      const params = ctx.reservation.params;
      const { nova, glance } = deps.cloud();
      const serverId = await serverIdOf(ctx);
      let allocation: Record<string, unknown> | undefined;
      if (!ctx.started) {
        if (!params.server_id) {
          // A start that failed half way may have created the server: it was never the lessee's.
          if (serverId) await deleteServerAndWait(nova, serverId);
        } else if (ctx.reservation.hold !== undefined) {
          // Only an admitted reservation (which set the server aside) gives it back: a refused
          // admission never touched the server, which may be another lease's.
          if (params.on_cancel === 'delete') await deleteServerAndWait(nova, params.server_id);
          else await unshelveAnywhere(nova, params.server_id);
        }
      } else if (!serverId) {
        // Started without a server: nothing in the cloud to take back.
      } else if (params.on_end === 'snapshot_and_delete') {
        const name = allocationOf(ctx).server_name ?? (await findServer(nova, serverId))?.name ?? serverId;
        const imageId = await snapshotAndDelete(nova, glance, serverId, name, { leaseId: ctx.leaseId, leaseName: ctx.leaseName, reservationId: ctx.reservation.id });
        allocation = { snapshot_image_id: imageId ?? null };
      } else if (params.on_end === 'delete') {
        await deleteServerAndWait(nova, serverId);
      } else {
        await shelveForOwner(nova, serverId);
      }
      await calendar.release(ctx.reservation.id, ctx.started);
      return allocation ? { allocation } : {};
    },

    /**
     * The server's host failed (or came back). Before the start the booking moves to another
     * matching host with room for the whole window (the server is shelved: the start unshelves it
     * there). After the start the server runs on the failed host: the reservation is flagged
     * `missing_resources` until the host is back. A real cloud would evacuate it here (Nova's
     * `evacuate` action onto a host with room, the booking moved with it); Nova's fake driver
     * cannot show that it works, so it is left as this hook's next step.
     */
    async heal(ctx) {
      const healed = await calendar.heal(ctx, await bookedRequest(ctx));
      if (!healed) return { missingResources: false, resourcesChanged: false };
      const { booking, moved, movedFrom, onFailedHost } = healed;
      return {
        allocation: { host: booking.host, ...(moved ? { moved_from: movedFrom } : {}) },
        missingResources: onFailedHost,
        resourcesChanged: ctx.leaseStatus === 'PENDING' && (ctx.reservation.resources_changed === true || moved),
      };
    },

    /** The host the server is booked on (its allocation once started: a start may have moved it). */
    async placementOf(ctx) {
      const booking = await calendar.bookingFor(ctx.reservation.id);
      const serverId = allocationOf(ctx).server_id ?? undefined;
      return { hosts: booking ? [booking.host] : [], ...(serverId ? { serverId } : {}) };
    },
  };
}
