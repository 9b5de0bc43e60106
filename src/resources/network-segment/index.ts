/**
 * `network` (issue 45, Chameleon's network segment reservations): one enrolled segment (a VLAN tag
 * of a physical network, or a VXLAN tag) booked whole in the segment calendar, and from start (less
 * the provisioning lead time) to end a Neutron network on exactly that segment in the lessee's project.
 *
 * - reserve / bookAtAdmission: one matching free segment (the calendar alone: the API admits it).
 * - start: the network made as admin, owned by the lessee, tagged with the reservation (a retry finds it).
 * - end: its ports deleted (servers detached), routers' interfaces removed, then the network; waits
 *   (bounded) for Neutron to let go, then fails naming what is left; the booking freed.
 * - heal: an active reservation whose network Neutron lost gets it again on the same tag, under the
 *   lease's lock (its new network_id recorded); checkDrift finds such reservations and has their leases told to heal.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { NetworkSegmentRecord } from '../../db/network-segments';
import { listNetworkSegments } from '../../db/network-segments';
import type { Pool } from '../../db/pool';
import { activeReservationsOfType } from '../../db/leases';
import { parsePropertyQuery } from '../../domain/property-query';
import type { DriftCheck, EndContext, EndOutcome, HookContext, OfferShape, ReservationContext, ReserveResult, ResourcePlugin, ResourceType } from '../../domain/resource-plugin';
import type { NeutronClient } from '../../openstack';
import { checkKeys } from '../shared/booking';
import { DEFAULT_SERVER_DELETE_TIMEOUT_MS, failIfDeletionOverdue } from '../shared/server-deletion';
import { NetworkSegmentCalendar, segmentName } from './calendar';
import { deleteReservedNetworks, ensureNetwork, reservedNetworks, type ReservationNetworkKey } from './networks';
import { NETWORK, networkSegmentParams, SEGMENT_FIELDS, type NetworkSegmentParams } from './params';

export { NETWORK };

export interface NetworkSegmentDeps {
  pool: Pool;
  /** Neutron, for carrying leases out; 'calendar-only' for tests of booking alone. */
  cloud: (() => { neutron: NeutronClient }) | 'calendar-only';
  /** How long the end waits for Neutron to let go of the network's ports before it fails naming them. */
  deleteTimeoutMs?: number;
}

/** One segment per reservation, always: offers may move it later or shorten it, never give fewer. */
const segmentOffers: OfferShape<NetworkSegmentParams> = {
  count: () => ({ asked: 1, least: 1 }),
  withCount: (params) => params,
  describe: () => ({ segments: 1 }),
  footprint: () => ({ networks: 1 }),
};

/** A 400 for a property query naming what no segment has: the segment's fields and the enrolled segments' capabilities are known. */
async function checkSegmentQueryKeys(pool: Pool, params: NetworkSegmentParams): Promise<void> {
  const known = new Set<string>([...SEGMENT_FIELDS, ...(await listNetworkSegments(pool)).flatMap((s) => Object.keys(s.capabilities))]);
  checkKeys(parsePropertyQuery(params.network_properties), known, 'network_properties');
  checkKeys(parsePropertyQuery(params.resource_properties), known, 'resource_properties');
}

/** Without OpenStack credentials the lease could never start: refused now (OpenStackConfigError, 503 naming the setting). */
function refuseWithoutCloud(deps: Pick<NetworkSegmentDeps, 'cloud'>): void {
  if (deps.cloud !== 'calendar-only') deps.cloud();
}

/** What pins a reservation's networks (networks.ts): its project, its booked segment, the network its allocation records. */
function networkKey(ctx: ReservationContext<NetworkSegmentParams>, segment: NetworkSegmentRecord | undefined): ReservationNetworkKey {
  const recorded = ctx.reservation.allocation?.network_id;
  return { reservationId: ctx.reservation.id, projectId: ctx.projectId, segment, networkId: typeof recorded === 'string' ? recorded : null };
}

/** The lease JSON's view of the booked segment; `network_id` comes with the start. */
function segmentReservation(segment: NetworkSegmentRecord, networkId: string | null = null): ReserveResult {
  return {
    allocation: { network_id: networkId, segment: { network_type: segment.network_type, physical_network: segment.physical_network, segment_id: segment.segment_id } },
    resourceKeys: [`network:${segment.id}`],
    footprint: { networks: 1 },
  };
}

/** What the API needs of `network`: the parameters, where segments are free, and its booking (the calendar alone). */
export function networkSegmentType(deps: Pick<NetworkSegmentDeps, 'pool' | 'cloud'>, calendar = new NetworkSegmentCalendar(deps.pool)): ResourceType<NetworkSegmentParams> {
  return {
    resourceType: NETWORK,
    paramsSchema: networkSegmentParams,
    checkPropertyKeys: (params) => checkSegmentQueryKeys(deps.pool, params),
    earliest: ({ reservations, startMs, durationMs, provisioningLeadMs, limits }) => calendar.search(reservations, startMs, durationMs, provisioningLeadMs, limits),
    latestEnd: (leaseId) => calendar.latestEnd(leaseId),
    offers: segmentOffers,
    async bookAtAdmission(client, ctx) {
      refuseWithoutCloud(deps);
      return segmentReservation(await calendar.bookWithin(client, ctx));
    },
  };
}

export function networkSegmentPlugin(deps: NetworkSegmentDeps): ResourcePlugin<NetworkSegmentParams> {
  const calendar = new NetworkSegmentCalendar(deps.pool);
  const neutron = () => (deps.cloud === 'calendar-only' ? undefined : deps.cloud().neutron);
  const deleteTimeoutMs = deps.deleteTimeoutMs ?? DEFAULT_SERVER_DELETE_TIMEOUT_MS;

  async function bookedSegment(ctx: ReservationContext<NetworkSegmentParams>): Promise<NetworkSegmentRecord> {
    const segment = await calendar.segmentOf(ctx.reservation.id);
    if (!segment) throw ApplicationFailure.nonRetryable(`reservation ${ctx.reservation.id} holds no network segment`, 'BookingMissing');
    return segment;
  }

  /** The network on the booked segment, made if missing (a start, its retry, a heal). */
  async function ensure(ctx: HookContext<NetworkSegmentParams>, client: NeutronClient) {
    const segment = await bookedSegment(ctx);
    const network = await ensureNetwork(client, {
      ...networkKey(ctx, segment),
      segment,
      name: ctx.reservation.params.network_name,
      description: ctx.reservation.params.network_description,
      progress: ctx.reportProgress,
    });
    return { segment, network };
  }

  return {
    ...networkSegmentType(deps, calendar),

    async reserve(ctx) {
      refuseWithoutCloud(deps);
      const segment = await calendar.book(ctx);
      const started = typeof ctx.reservation.allocation?.network_id === 'string' ? ctx.reservation.allocation.network_id : null;
      return segmentReservation(segment, ctx.leaseStatus === 'ACTIVE' ? started : null);
    },

    moveWindow: (ctx) => calendar.moveWindow(ctx),

    async start(ctx) {
      const client = neutron();
      if (!client) return;
      const { network } = await ensure(ctx, client);
      return { allocation: { network_id: network.id } };
    },

    async end(ctx: EndContext<NetworkSegmentParams>): Promise<EndOutcome> {
      const client = neutron();
      // Whether or not the lease started (a start that failed half way may have made the network): take back all there may be.
      if (client) {
        const left = await deleteReservedNetworks(client, networkKey(ctx, await calendar.segmentOf(ctx.reservation.id)), { started: ctx.started, progress: ctx.reportProgress });
        if (left.networks.length > 0) {
          const what = `network(s) ${left.networks.join(', ')} still in use${left.ports.length ? `: ${left.ports.join(', ')}` : ''}`;
          if (ctx.started) failIfDeletionOverdue(what, ctx.endMs, deleteTimeoutMs, 'NetworkNotDeleted');
          // A forced end (the lease deleted while its end waited) and a start undone are not polled: retried within the policy of ends that must finish.
          if (ctx.force || !ctx.started) throw ApplicationFailure.retryable(what, 'ResourcesStillInUse');
          return { waitingFor: what, recheckAfterMs: 2_000 };
        }
      }
      await calendar.release(ctx.reservation.id, ctx.started);
      return { allocation: { network_id: null } };
    },

    /** A lease told to heal (its hosts failed): an active reservation's network is made again if Neutron lost it; the segment never moves. */
    async heal(ctx) {
      const client = neutron();
      if (ctx.leaseStatus !== 'ACTIVE' || !client) return { missingResources: false, resourcesChanged: false };
      const { network } = await ensure(ctx, client);
      return { allocation: { network_id: network.id }, missingResources: false, resourcesChanged: false };
    },

    /**
     * Active reservations whose network Neutron lost (deleted by hand, a Neutron restored from an
     * old backup): one seen missing at two checks in a row (never a start or end under way) has its
     * lease told to heal, which makes it again on the same tag under the lease's lock (never racing
     * the end) and records its new network_id; `report` only says so.
     */
    async checkDrift(previous, mode) {
      const leasesToHeal: string[] = [];
      const check: DriftCheck = { seen: {}, repaired: [], reported: [], aggregatesRemoved: [], leasesToHeal };
      const client = neutron();
      if (!client) return check;
      for (const { reservationId, leaseId, projectId } of await activeReservationsOfType(deps.pool, NETWORK)) {
        const segment = await calendar.segmentOf(reservationId);
        if (!segment || (await reservedNetworks(client, { reservationId, projectId, segment })).length > 0) continue;
        const key = `network:${reservationId}`;
        const drift = `its network on ${segmentName(segment)} is gone from Neutron`;
        check.seen[key] = drift;
        if (previous[key] !== drift) continue;
        const line = `reservation ${reservationId}: ${drift}`;
        if (mode === 'report') {
          check.reported.push(line);
          continue;
        }
        leasesToHeal.push(leaseId);
        check.repaired.push(`${line} (lease ${leaseId} told to heal: it makes the network again)`);
      }
      return check;
    },
  };
}
