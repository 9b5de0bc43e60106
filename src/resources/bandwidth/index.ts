/**
 * `network:bandwidth`: ports with guaranteed bandwidth (seed 05's "ideal workflow", carried out by
 * leasekeeper instead of Nova's conductor).
 *
 * - reserve: bandwidth is a quantity: `amount` × kbps is booked in the quantity calendar on one of
 *   Neutron's bandwidth providers in Placement (an agent's bridge, with the network's physnet and
 *   the vnic type as traits), on the host of a linked reservation when asked.
 * - start, in steps (each its own activity and retry policy): create the ports with a QoS policy
 *   holding minimum_bandwidth rules; read their resource requests; ask Placement for allocation
 *   candidates, the booked provider first; bind the ports on a candidate host, the next one when
 *   binding fails; write the allocations for the reservation (the consumer) against all providers
 *   in one PUT with the consumer generation; record them on the ports' binding profiles.
 * - end: allocations removed, ports unbound and deleted, the QoS policy deleted, booking freed.
 */
import { amountOffers } from '../shared/offers';
import { ApplicationFailure } from '@temporalio/common';
import {
  allocationCandidates,
  LEASE_CONSUMER_TYPE,
  removeAllocations,
  SERVER_CONSUMER_TYPE,
  writeAllocations,
  type Candidate,
  type RequestGroup,
} from './placement-allocations';
import { bindPorts, deletePorts, ensurePorts, recordAllocation, unbindPorts } from './ports';
import { invalidLease } from '../../domain/lease';
import type { Pool } from '../../db/pool';
import { resourceRequestGroups, type AllocationsByProvider, type NeutronClient, type PlacementClient } from '../../openstack';
import { earliestCommonFit } from '../../domain/fit-search';
import type { HookContext, ResourcePlugin, ResourceType, StartStep, StepOutcome } from '../../domain/resource-plugin';
import { placementCapacity, providerQuery, QuantityCalendar, traitProperties, type CapacityProvider, type QuantityRequest } from '../shared/quantity-bookings';
import { networkVisibleTo } from '../shared/visibility';
import { bandwidthParams, customTrait, type BandwidthParams } from './params';

export const NETWORK_BANDWIDTH = 'network:bandwidth';
const KIND = 'bandwidth';
const EGRESS = 'NET_BW_EGR_KILOBIT_PER_SEC';
const INGRESS = 'NET_BW_IGR_KILOBIT_PER_SEC';

/** The start's steps, in order, with what each may take and how often it is tried. */
export const BANDWIDTH_START_STEPS: StartStep[] = [
  { name: 'create-ports', timeoutSeconds: 60, maximumAttempts: 10, retryIntervalSeconds: 1 },
  { name: 'read-resource-requests', timeoutSeconds: 30, maximumAttempts: 10, retryIntervalSeconds: 1 },
  { name: 'allocation-candidates', timeoutSeconds: 30, maximumAttempts: 10, retryIntervalSeconds: 1 },
  { name: 'bind-ports', timeoutSeconds: 300, maximumAttempts: 5, retryIntervalSeconds: 2 },
  { name: 'write-allocations', timeoutSeconds: 30, maximumAttempts: 10, retryIntervalSeconds: 1 },
  { name: 'record-allocations-on-ports', timeoutSeconds: 30, maximumAttempts: 10, retryIntervalSeconds: 1 },
];

export interface BandwidthDeps {
  pool: Pool;
  cloud: () => { neutron: NeutronClient; placement: PlacementClient };
  settings?: {
    /** How many candidate hosts binding tries before the start fails (default 3). */
    bindAttempts?: number;
    /** How long providers' capacities copied from Placement serve admissions (default 60 s). */
    capacityRefreshMs?: number;
  };
}

/** What the steps hand on. */
type StartState = {
  policyId?: string;
  portIds?: string[];
  groups?: RequestGroup[];
  candidates?: Array<Candidate & { host: string; providerUuid: string }>;
  chosen?: Candidate & { host: string; providerUuid: string };
};

function providerProperties(p: CapacityProvider): Record<string, string> {
  return { host: p.host, name: p.name, ...traitProperties(p) };
}

/** Neutron's bandwidth providers in Placement: capacity, traits, and the host (their root provider's name). */
async function readBandwidthProviders(placement: PlacementClient): Promise<CapacityProvider[]> {
  const found = await placement.listResourceProviders({ resources: { [EGRESS]: 1 } });
  const rootNames = new Map<string, string>();
  const providers: CapacityProvider[] = [];
  for (const rp of found) {
    if (!rootNames.has(rp.root_provider_uuid)) rootNames.set(rp.root_provider_uuid, (await placement.getResourceProvider(rp.root_provider_uuid)).name);
    const [{ inventories }, { traits }] = await Promise.all([placement.getInventories(rp.uuid), placement.getProviderTraits(rp.uuid)]);
    providers.push({ uuid: rp.uuid, name: rp.name, host: rootNames.get(rp.root_provider_uuid)!, capacity: placementCapacity(inventories, [EGRESS, INGRESS]), traits });
  }
  return providers;
}

/** What both faces of the type need: the bandwidth providers' capacities, and what a reservation books. */
function bandwidthBookings(deps: BandwidthDeps) {
  const calendar = new QuantityCalendar(deps.pool);
  /** Copies the bandwidth providers from Placement again when the copy is older than the refresh interval. */
  const refreshProviders = () => calendar.refreshProviders(KIND, deps.settings?.capacityRefreshMs ?? 60_000, () => readBandwidthProviders(deps.cloud().placement));

  /** What a reservation of `params` books in the quantity calendar: on providers with its network's physnet and vnic type, on `hosts` when given. */
  async function requestFor(params: BandwidthParams, projectId: string, hosts?: Set<string>): Promise<QuantityRequest> {
    const { neutron } = deps.cloud();
    // Another project's private network is reported as missing.
    const network = await networkVisibleTo(neutron, params.network_id, projectId);
    if (!network) throw invalidLease(`network ${params.network_id} not found`);
    const physnet = network['provider:physical_network'];
    if (!physnet) throw invalidLease(`network ${params.network_id} has no physical network: guaranteed bandwidth needs a flat or VLAN network`);
    const traits = [customTrait('PHYSNET', physnet), customTrait('VNIC_TYPE', params.vnic_type)];
    const matchesQuery = providerQuery(params.resource_properties, await calendar.providers(KIND), providerProperties);
    const amounts: Record<string, number> = { [EGRESS]: params.amount * params.egress_kbps };
    if (params.ingress_kbps) amounts[INGRESS] = params.amount * params.ingress_kbps;
    return {
      kind: KIND,
      amounts,
      describe: `${params.amount} port(s) of ${params.egress_kbps} kbps${params.ingress_kbps ? ` out, ${params.ingress_kbps} kbps in` : ''} on network ${network.name || network.id}`,
      matches: (p) => traits.every((t) => p.traits.includes(t)) && (!hosts || hosts.has(p.host)) && matchesQuery(p),
    };
  }

  return { calendar, refreshProviders, requestFor };
}

/** What the API needs of `network:bandwidth`: the parameters, and where the bandwidth fits. */
export function bandwidthType(deps: BandwidthDeps, bookings = bandwidthBookings(deps)): ResourceType<BandwidthParams> {
  const { calendar, refreshProviders, requestFor } = bookings;
  return {
    resourceType: NETWORK_BANDWIDTH,
    paramsSchema: bandwidthParams,
    async checkPropertyKeys(params) {
      if (!params.resource_properties) return;
      await refreshProviders();
      providerQuery(params.resource_properties, await calendar.providers(KIND), providerProperties);
    },
    async earliest({ projectId, reservations, startMs, durationMs, provisioningLeadMs }) {
      await refreshProviders();
      // A reservation placed with another one (on_host_of) is searched on any host: the other is not booked yet.
      const requests = await Promise.all(reservations.map((reservation) => requestFor(reservation.params, projectId)));
      return earliestCommonFit(requests.map((request) => (from: number) => calendar.search(request, from, durationMs, provisioningLeadMs)), startMs);
    },
    offers: amountOffers<BandwidthParams>({
      describe: (params) => ({ ports: params.amount, egress_kbps: params.egress_kbps, ...(params.ingress_kbps ? { ingress_kbps: params.ingress_kbps } : {}) }),
      footprint: (params) => ({ bandwidth_kbps: params.amount * params.egress_kbps }),
    }),
    latestEnd: (leaseId) => calendar.latestEnd(leaseId, KIND),
  };
}

export function bandwidthPlugin(deps: BandwidthDeps): ResourcePlugin<BandwidthParams> {
  const bookings = bandwidthBookings(deps);
  const { calendar, refreshProviders } = bookings;
  const bindAttempts = deps.settings?.bindAttempts ?? 3;

  /** The hosts of the linked reservation (booked earlier in the same admission, asked of its own type), if the reservation names one. */
  async function linkedHosts(ctx: HookContext<BandwidthParams>, params: BandwidthParams): Promise<Set<string> | undefined> {
    if (params.on_host_of === null || params.on_host_of === undefined) return undefined;
    const own = ctx.leaseReservations.findIndex((r) => r.id === ctx.reservation.id);
    const position = typeof params.on_host_of === 'number' ? params.on_host_of : ctx.leaseReservations.findIndex((r) => r.id === params.on_host_of);
    const linked = ctx.leaseReservations[position];
    if (!linked || position === own) throw invalidLease(`on_host_of: the lease has no other reservation ${String(params.on_host_of)}`);
    if (position > own) throw invalidLease('on_host_of: the linked reservation must come before this one in the lease');
    const { hosts } = await ctx.placementOf(linked.id);
    if (hosts.length === 0) throw invalidLease(`on_host_of: reservation ${linked.id} (${linked.resource_type}) holds no host`);
    return new Set(hosts);
  }

  /** The request of the reservation in `ctx`, on its linked reservation's hosts when it names one. */
  async function requestOf(ctx: HookContext<BandwidthParams>): Promise<QuantityRequest> {
    const params = ctx.reservation.params;
    return bookings.requestFor(params, ctx.projectId, await linkedHosts(ctx, params));
  }

  /**
   * Whose allocations the ports' bandwidth joins: the server of a linked server reservation (as
   * Nova allocates a server's ports with it), else the reservation itself.
   */
  async function consumerOf(ctx: HookContext<BandwidthParams>): Promise<{ id: string; type: string }> {
    const { on_host_of: link } = ctx.reservation.params;
    const linked = typeof link === 'number' ? ctx.leaseReservations[link] : ctx.leaseReservations.find((r) => r.id === link);
    const serverId = linked && linked.id !== ctx.reservation.id ? (await ctx.placementOf(linked.id)).serverId : undefined;
    return serverId ? { id: serverId, type: SERVER_CONSUMER_TYPE } : { id: ctx.reservation.id, type: LEASE_CONSUMER_TYPE };
  }

  const portSpec = (ctx: HookContext<BandwidthParams>, params: BandwidthParams) => ({
    reservationId: ctx.reservation.id,
    projectId: ctx.projectId,
    networkId: params.network_id,
    amount: params.amount,
    egressKbps: params.egress_kbps,
    ingressKbps: params.ingress_kbps,
    vnicType: params.vnic_type,
  });

  const steps: Record<string, (ctx: HookContext<BandwidthParams>, state: StartState, params: BandwidthParams) => Promise<StepOutcome>> = {
    async 'create-ports'(ctx, state, params) {
      const { policyId, portIds } = await ensurePorts(deps.cloud().neutron, portSpec(ctx, params));
      return { state: { ...state, policyId, portIds }, allocation: { ports: portIds, qos_policy_id: policyId } };
    },

    async 'read-resource-requests'(_ctx, state) {
      const { neutron } = deps.cloud();
      const groups: RequestGroup[] = [];
      for (const portId of state.portIds ?? []) {
        const port = await neutron.getPort(portId);
        const portGroups = resourceRequestGroups(port.resource_request);
        if (portGroups.length === 0) {
          throw ApplicationFailure.nonRetryable(`port ${portId} has no resource request: Neutron's QoS placement support is off for its network`, 'NoResourceRequest');
        }
        portGroups.forEach((g, i) => groups.push({ portId, groupId: g.id ?? `${portId}-${i}`, resources: g.resources, required: g.required }));
      }
      return { state: { ...state, groups } };
    },

    async 'allocation-candidates'(ctx, state) {
      const { placement } = deps.cloud();
      const booked = await calendar.bookingFor(ctx.reservation.id);
      if (!booked) throw ApplicationFailure.nonRetryable(`reservation ${ctx.reservation.id} has no booking`, 'BookingMissing');
      // Only providers the reservation may use (traits, linked host, resource_properties).
      const request = await requestOf(ctx);
      const providers = new Map((await calendar.providers(KIND)).filter(request.matches).map((p) => [p.uuid, p]));
      // Ports for a linked reservation's (single) host: ask Placement within that host's tree only.
      const hosts = new Set([...providers.values()].map((p) => p.host));
      const tree = hosts.size === 1 ? (await placement.listResourceProviders({ name: [...hosts][0] }))[0]?.uuid : undefined;
      // Every group of every port on one bandwidth provider (the calendar books one), on a host it knows.
      const candidates = (await allocationCandidates(placement, state.groups ?? [], tree))
        .map((c) => ({ ...c, providerUuid: Object.values(c.groupProviders)[0] }))
        .filter((c) => Object.values(c.groupProviders).every((rp) => rp === c.providerUuid) && providers.has(c.providerUuid))
        .map((c) => ({ ...c, host: providers.get(c.providerUuid)!.host }));
      // The weighing: the booked provider first, then the others with the most room left in Placement.
      const freeEgress = (c: (typeof candidates)[number]) => c.free[c.providerUuid]?.[EGRESS] ?? 0;
      const unique = [...new Map(candidates.map((c) => [c.providerUuid, c])).values()].sort(
        (a, b) => Number(b.providerUuid === booked.providerUuid) - Number(a.providerUuid === booked.providerUuid) || freeEgress(b) - freeEgress(a),
      );
      if (unique.length === 0) throw ApplicationFailure.nonRetryable('Placement has no allocation candidate for the ports', 'NoAllocationCandidates');
      return { state: { ...state, candidates: unique } };
    },

    async 'bind-ports'(ctx, state) {
      const { neutron } = deps.cloud();
      const portIds = state.portIds ?? [];
      const request = await requestOf(ctx);
      const booked = await calendar.bookingFor(ctx.reservation.id);
      const failures: string[] = [];
      let tried = 0;
      for (const candidate of state.candidates ?? []) {
        if (tried >= bindAttempts) break;
        // Another host than the booked one must have room in the calendar too, until the end.
        if (candidate.providerUuid !== booked?.providerUuid && !(await calendar.move(ctx, request, [candidate.providerUuid], Date.now()))) {
          failures.push(`${candidate.host}: no room booked there until the end`);
          continue;
        }
        tried++;
        const result = await bindPorts(neutron, portIds, candidate.host);
        if (result.bound) return { state: { ...state, chosen: candidate }, allocation: { host: candidate.host, provider: candidate.providerUuid } };
        failures.push(result.reason ?? candidate.host);
      }
      await unbindPorts(neutron, portIds);
      throw ApplicationFailure.nonRetryable(`no host could bind the ports (${tried} tried): ${failures.join('; ')}`, 'PortBindingFailed');
    },

    async 'write-allocations'(ctx, state) {
      const consumer = await consumerOf(ctx);
      const owner = { projectId: ctx.projectId, userId: ctx.userId, consumerType: consumer.type };
      const writes = await writeAllocations(deps.cloud().placement, consumer.id, state.chosen!.allocations, owner);
      return { state, allocation: { consumer: consumer.id, allocations: state.chosen!.allocations, allocation_writes: writes } };
    },

    async 'record-allocations-on-ports'(_ctx, state) {
      const groups = state.groups ?? [];
      const byPort = (state.portIds ?? []).map((portId) => ({
        portId,
        groupProviders: Object.fromEntries(groups.filter((g) => g.portId === portId).map((g) => [g.groupId, state.chosen!.groupProviders[g.groupId]])),
      }));
      await recordAllocation(deps.cloud().neutron, byPort);
      return { state };
    },
  };

  function runStep(name: string, ctx: HookContext<BandwidthParams>, state: Record<string, unknown>): Promise<StepOutcome> {
    const step = steps[name];
    if (!step) throw ApplicationFailure.nonRetryable(`network:bandwidth has no start step ${name}`, 'UnknownStartStep');
    return step(ctx, state, ctx.reservation.params);
  }

  return {
    ...bandwidthType(deps, bookings),

    async reserve(ctx) {
      await refreshProviders();
      const request = await requestOf(ctx);
      const booking = await calendar.book(ctx, request);
      return {
        allocation: { host: booking.host, provider: booking.providerUuid, bandwidth: request.amounts },
        resourceKeys: [],
        startSteps: BANDWIDTH_START_STEPS,
        footprint: { bandwidth_kbps: request.amounts[EGRESS] ?? 0 },
      };
    },

    moveWindow: (ctx) => calendar.moveWindow(ctx),

    // No `start`: reserve always lists the start's steps, each its own activity.
    startStep: runStep,

    /**
     * The provider's host failed (or came back). Before the start the booking moves to another
     * provider of the same physical network and vnic type (on the linked reservation's host, where
     * that one is now) with room for the whole window. After the start the ports are bound there:
     * the reservation is flagged `missing_resources` until the host is back.
     */
    async heal(ctx) {
      const healed = await calendar.heal(ctx, await requestOf(ctx));
      if (!healed) return { missingResources: false, resourcesChanged: false };
      const { booking, moved, onFailedHost } = healed;
      return {
        allocation: ctx.leaseStatus === 'PENDING' ? { host: booking.host, provider: booking.providerUuid } : {},
        missingResources: onFailedHost,
        resourcesChanged: ctx.leaseStatus === 'PENDING' && (ctx.reservation.resources_changed === true || moved),
      };
    },

    async end(ctx) {
      const params = ctx.reservation.params;
      const { neutron, placement } = deps.cloud();
      // Whatever phase the lease was in, take back all there may be: allocations first (they name the ports' providers).
      // What the start wrote (or, if it failed before the lease recorded it, what it would have written).
      const booked = ctx.reservation.allocation ?? {};
      const ours = (booked.allocations as AllocationsByProvider | undefined) ?? { [String(booked.provider)]: { resources: (booked.bandwidth as Record<string, number>) ?? {} } };
      const consumer = await consumerOf(ctx);
      await removeAllocations(placement, consumer.id, ours, consumer.type);
      await deletePorts(neutron, portSpec(ctx, params));
      await calendar.release(ctx.reservation.id, ctx.started);
      return {};
    },
  };
}
