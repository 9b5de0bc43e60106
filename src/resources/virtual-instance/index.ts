/**
 * `virtual:instance` (Blazar's instance reservation): `amount` slots of one size (vcpus, memory_mb,
 * disk_gb) on enrolled hosts, booked in the instance-slot calendar, used through a flavor made for
 * the reservation.
 *
 * - reserve: the slots are booked (packed onto hosts already serving instance reservations; each
 *   on its own host with `affinity: False`, all on one with `True`); the flavor, aggregate, server
 *   group and resource class are made at once, so the user sees the flavor id in the lease. An
 *   active reservation keeps its slots in place, grows from now, and shrinks only down to the
 *   servers that use its flavor (Blazar's only grow).
 * - start: the lessee gets the flavor; hosts join the aggregate; each host's slots become Placement
 *   inventory of the reservation's class, so Nova schedules at most `amount` servers, on those hosts.
 * - before end (`before_end`): an image of every server of the flavor, or a notice, as for hosts.
 * - end: the flavor is taken away and every server of it deleted (the end looks again until all
 *   are gone, for at most the delete time-out after the end: then ERROR); then the inventory,
 *   aggregate, server group, flavor and class go.
 */
import { amountOffers } from '../shared/offers';
import type { z } from 'zod';
import { isLeaseConflict, leaseConflict, type Reservation } from '../../domain/lease';
import type { DriftCheck, HookContext, LendHostsRequest, LentHosts, ReservationContext, ResourcePlugin, ResourceType } from '../../domain/resource-plugin';
import { unusableHostsOf } from '../../db/host-allocations';
import { activeReservationsOfType } from '../../db/leases';
import { providersRefreshedAt, slotHostsEver } from '../../db/quantity-allocations';
import { slotLendingsOfRequest, type SlotLending } from '../../db/quantity-lendings';
import type { Pool } from '../../db/pool';
import { OpenStackConfigError, serverHost, type GlanceClient, type NovaClient, type PlacementClient } from '../../openstack';
import { beforeEndAction, refuseNotifyWithoutEndpoint, type BeforeEndAction, type beforeEndParam } from '../shared/params';
import { DEFAULT_SERVER_DELETE_TIMEOUT_MS, failIfDeletionOverdue } from '../shared/server-deletion';
import { snapshotServers } from '../shared/server-snapshots';
import { COMPUTE_KIND, readComputeProviders } from '../shared/compute-providers';
import { QuantityCalendar } from '../shared/quantity-bookings';
import { checkCapabilityKeys } from '../shared/booking';
import { InstanceSlotCalendar, VIRTUAL_INSTANCE, type SlotPlacement, type SlotSpec } from './calendar';
import {
  closeSlots,
  ensureReservationResources,
  lendSlotsOnHost,
  openSlots,
  removeReservationResources,
  serversOfFlavor,
  setReservationSlots,
  slotDrift,
  type FlavorShape,
  type HostSlots,
  type InstanceCloud,
  type InstanceSpec,
} from './nova-resources';
import { slotAmounts, virtualInstanceParams, type VirtualInstanceParams } from './params';
import { footprintOfAmounts } from '../../domain/usage';
import { preemptionWaitKeys } from '../../domain/preemption';

export { VIRTUAL_INSTANCE };

export interface VirtualInstanceDeps {
  pool: Pool;
  settings: {
    /** The gap between a whole-host lease and slots on one host (Blazar's cleaning_time). */
    cleaningMs: number;
    /** How old the copy of the hosts' capacities may be before a booking reads Placement again. */
    capacityRefreshMs?: number;
    /** What `before_end: default` means (the deployment's choice, the same as for hosts). */
    beforeEndDefault?: BeforeEndAction;
    /** How long from a lender's end its borrowers get (issue 43), as for hosts. */
    lenderEndNoticeMs?: number;
  };
  /** Nova, Placement and Glance (snapshots), for carrying leases out; 'calendar-only' for tests of booking alone. */
  cloud: (() => InstanceCloud & { glance: GlanceClient }) | 'calendar-only';
  /** Nova in a lessee's project (the server group is theirs, as Blazar makes it). */
  projectCloud?: (projectId: string) => { nova: NovaClient };
  /** Where `before_end: notify` posts (unset: `notify` is refused when the lease is created). */
  /** Whether the deployment has somewhere to send notices (a before-end `notify` needs it). */
  noticesConfigured?: boolean;
  /** How long the end waits for the flavor's deleted servers to be gone. */
  serverDeleteTimeoutMs?: number;
}

/** How often an end looks again while servers of the flavor are still being deleted. */
const SERVER_DELETE_RECHECK_MS = 2_000;

/** What a slot reservation is, as its type reads it from its parameters (and, for some types, the cloud). */
export interface SlotReservation {
  spec: SlotSpec;
  flavor: FlavorShape;
  /** Shown in the lease JSON besides what every slot reservation shows (e.g. the source flavor). */
  shown?: Record<string, unknown>;
}

/** What every slot type's parameters have. */
type SlotParams = { before_end: z.output<typeof beforeEndParam>; resource_properties: string; amount: number };

/**
 * A type of slot reservation (`virtual:instance`, `flavor:instance`): its parameters, and how a
 * reservation becomes slots and a flavor (`describe`, given Nova as the admin and as the lessee when
 * the deployment has a cloud).
 */
export interface SlotType<P extends SlotParams> {
  resourceType: string;
  /** Its `describe` needs no cloud: the API books it in its own transaction (bookAtAdmission), and a regular one may preempt there (issue 43). */
  describesWithoutCloud?: boolean;
  paramsSchema: z.ZodType<P>;
  describe(reservation: Reservation<P>, projectId: string, nova?: { admin: NovaClient; lessee: NovaClient }): Promise<SlotReservation>;
}

function slotCalendar(deps: VirtualInstanceDeps): { calendar: InstanceSlotCalendar; refresh: () => Promise<void> } {
  const calendar = new InstanceSlotCalendar(deps.pool, { cleaningMs: deps.settings.cleaningMs, ...(deps.settings.lenderEndNoticeMs !== undefined ? { lenderEndNoticeMs: deps.settings.lenderEndNoticeMs } : {}) });
  const capacities = new QuantityCalendar(deps.pool);
  const { cloud } = deps;
  const refresh = async () => {
    if (cloud === 'calendar-only') return;
    await capacities.refreshProviders(COMPUTE_KIND, deps.settings.capacityRefreshMs ?? 60_000, () => readComputeProviders(cloud()));
  };
  return { calendar, refresh };
}

function novaFor(deps: VirtualInstanceDeps, projectId: string): { admin: NovaClient; lessee: NovaClient } | undefined {
  if (deps.cloud === 'calendar-only') return undefined;
  const admin = deps.cloud().nova;
  return { admin, lessee: deps.projectCloud?.(projectId).nova ?? admin };
}

/** What the API needs of a slot type: the parameters, and where slots are free. */
export function slotReservationType<P extends SlotParams>(type: SlotType<P>, deps: VirtualInstanceDeps, made = slotCalendar(deps)): ResourceType<P> {
  return {
    resourceType: type.resourceType,
    paramsSchema: type.paramsSchema.superRefine(refuseNotifyWithoutEndpoint(deps.settings.beforeEndDefault, deps.noticesConfigured === true)),
    // Slots go on enrolled hosts: the query is over their capabilities, as a host lease's.
    checkPropertyKeys: (params, viewer) => checkCapabilityKeys(deps.pool, params.resource_properties, viewer),
    earliest: async ({ reservations, projectId, startMs, durationMs, provisioningLeadMs, limits }) => {
      await made.refresh();
      const described = await Promise.all(reservations.map(async (reservation) => ({ reservation, spec: (await type.describe(reservation, projectId, novaFor(deps, projectId))).spec })));
      return made.calendar.search(described, startMs, durationMs, provisioningLeadMs, limits);
    },
    offers: amountOffers<P>({ describe: (params) => ({ instances: params.amount }) }),
    latestEnd: (leaseId) => made.calendar.latestEnd(leaseId),
    ...(type.describesWithoutCloud ? admittedInApi(type, deps, made) : {}),
  };
}

/**
 * A slot type the API books in its own transaction: the hosts' capacities are read from Placement
 * before it opens (never under its locks), the slots are booked with the calendar's rows alone,
 * and the flavor and the rest are made right after admission by the workflow's hold step
 * (`holdUntilStart`), the flavor id being the reservation's.
 */
function admittedInApi<P extends SlotParams>(type: SlotType<P>, deps: VirtualInstanceDeps, made: ReturnType<typeof slotCalendar>): Pick<ResourceType<P>, 'beforeAdmission' | 'bookAtAdmission'> {
  return {
    async beforeAdmission() {
      try {
        await made.refresh();
      } catch (err) {
        // Without a cloud the lease could never start: refused (503 naming the setting), as a host lease is.
        if (err instanceof OpenStackConfigError) throw err;
        // Placement unreachable: the copy read before is still the calendar's (the worker refreshes it); with none, nothing can be booked.
        if ((await providersRefreshedAt(deps.pool, COMPUTE_KIND)) === undefined) throw err;
      }
    },
    async bookAtAdmission(client, ctx, options) {
      const { spec } = await type.describe(ctx.reservation, ctx.projectId);
      const cutBefore = options?.cut?.length ?? 0;
      const placement = await made.calendar.bookWithin(client, ctx, spec, { preempt: options?.preempt ?? false, cut: options?.cut, borrow: options?.borrow ?? true });
      const withCloud = deps.cloud !== 'calendar-only';
      return {
        allocation: { ...(withCloud ? { flavor_id: ctx.reservation.id } : {}), ...shownPlacement(placement) },
        resourceKeys: preemptionWaitKeys(ctx.reservation, ctx.leaseId, options?.cut?.slice(cutBefore) ?? []),
        footprint: footprintOfAmounts(spec.slot, spec.amount),
        // The start makes them again (ensureReservationResources): a failed hold leaves the lease PENDING for it.
        ...(withCloud ? { holdUntilStart: true, holdRedoneAtStart: true } : {}),
      };
    },
  };
}

/** Where the slots are, as the lease shows them. */
function shownPlacement(placement: SlotPlacement[]): Record<string, unknown> {
  return {
    hosts: placement.map((p) => p.hypervisorHostname),
    slots_per_host: Object.fromEntries(placement.map((p) => [p.hypervisorHostname, p.slots])),
  };
}

/** The life of a slot reservation, whichever type describes it. */
export function slotReservationPlugin<P extends SlotParams>(type: SlotType<P>, deps: VirtualInstanceDeps): ResourcePlugin<P> {
  const made = slotCalendar(deps);
  const { calendar } = made;
  const serverDeleteTimeoutMs = deps.serverDeleteTimeoutMs ?? DEFAULT_SERVER_DELETE_TIMEOUT_MS;
  const cloud = () => (deps.cloud === 'calendar-only' ? undefined : deps.cloud());

  const specOf = async (ctx: ReservationContext<P>): Promise<{ slots: SlotSpec; instance: InstanceSpec; shown: Record<string, unknown> }> => {
    const { spec, flavor, shown } = await type.describe(ctx.reservation, ctx.projectId, novaFor(deps, ctx.projectId));
    return { slots: spec, instance: { reservationId: ctx.reservation.id, projectId: ctx.projectId, affinity: spec.affinity, flavor }, shown: shown ?? {} };
  };
  const lesseeNova = (ctx: ReservationContext<P>) => novaFor(deps, ctx.projectId)!.lessee;
  const hostSlots = (placement: SlotPlacement[]): HostSlots[] =>
    placement.map((p) => ({ computeHost: p.computeHost, hypervisorHostname: p.hypervisorHostname, computeNodeUuid: p.providerUuid, slots: p.slots }));
  /** Every host the reservation ever had slots on (with no slots: where an end or a heal closes them). */
  const slotHostsOf = async (reservationId: string): Promise<HostSlots[]> =>
    (await slotHostsEver(deps.pool, reservationId)).map((h) => ({ computeHost: h.host, hypervisorHostname: h.name, computeNodeUuid: h.providerUuid, slots: 0 }));
  const shown = shownPlacement;
  /**
   * Lending (issue 43): the reservation's slots per host as its inventory should be: booked, less
   * those its open lendings lend there (lent, or reclaimed and not back yet), but for the lendings
   * `returning`. Every write of its inventory (start, growth, heal, drift repair) goes through it,
   * so none puts lent slots back.
   */
  const inventoryOf = async (reservationId: string, placement: SlotPlacement[], returning: string[] = []): Promise<HostSlots[]> => {
    const lent = new Map<string, number>();
    for (const g of await calendar.openLendings(reservationId)) if (!returning.includes(g.id)) lent.set(g.provider_uuid, (lent.get(g.provider_uuid) ?? 0) + g.slots);
    return hostSlots(placement).map((h) => ({ ...h, slots: Math.max(0, h.slots - (lent.get(h.computeNodeUuid) ?? 0)) }));
  };

  /**
   * The servers of the reservation's flavor that hold one of its slots, whether Placement counts
   * them or not (a shelved-offloaded server, or one building before its claim, holds no allocation
   * but gets its slot back): all but those that failed to schedule (ERROR, no host).
   */
  async function serversHoldingSlots(nova: NovaClient, reservationId: string) {
    return (await serversOfFlavor(nova, reservationId)).filter((s) => s.status !== 'ERROR' || serverHost(s) !== null);
  }

  /**
   * An active reservation shrinking: never below the servers its flavor runs (409), and the slots
   * it keeps are where they run (host id → servers).
   */
  async function serversInUse(ctx: ReservationContext<P>, nova: NovaClient, current: SlotPlacement[], amount: number): Promise<Map<string, number>> {
    const servers = await serversHoldingSlots(nova, ctx.reservation.id);
    const held = current.reduce((n, p) => n + p.slots, 0);
    // Only a shrink is checked: the same or more slots (a refused update put back) never are.
    if (amount < held && servers.length > amount) {
      throw leaseConflict(
        `Instance reservation ${ctx.reservation.id} cannot shrink to ${amount} instance(s): ${servers.length} server(s) use its flavor ${ctx.reservation.id}; delete some first (none is deleted for you).`,
      );
    }
    const hostIdOf = new Map(current.map((p) => [p.computeHost, p.hostId]));
    const perHost = new Map<string, number>();
    for (const server of servers) {
      const hostId = hostIdOf.get(serverHost(server) ?? '');
      if (hostId !== undefined) perHost.set(hostId, (perHost.get(hostId) ?? 0) + 1);
    }
    return perHost;
  }

  /** A lend request's lending rows as the lend answers them: one entry per row (its host, by name), its slots, and when it began. */
  async function lentSlotsOf(ctx: HookContext<P>, rows: SlotLending[]): Promise<LentHosts> {
    const names = new Map((await slotHostsEver(deps.pool, ctx.reservation.id)).map((h) => [h.providerUuid, h.name]));
    return {
      hosts: rows.map((g) => ({ id: g.id, name: names.get(g.provider_uuid) ?? g.provider_uuid })),
      slots: rows.map((g) => g.slots),
      lentAtMs: Math.min(...rows.map((g) => g.start_ms)),
    };
  }

  /**
   * Lending (issue 43): `count` slots no server of the reservation's flavor uses, from the hosts
   * with the most lendable first. In the cloud each host's inventory is lowered first
   * (lendSlotsOnHost: the idle check and the lowering in one guarded write), so Nova schedules no
   * server of the lender on them; fewer idle than asked puts every host's inventory back (409
   * with `idle`). Calendar-only: every slot not lent is idle. Then the lendings, in the calendar,
   * with what each host lowered. A retry (same `lendingId`) answers the rows it made. The lease
   * records each row (one per host) as a host of the lending: what a reclaim and a return name.
   * Once lent (now or by an earlier attempt), every host's inventory is written as inventoryOf
   * says: an attempt given up on may have lowered a host its retry did not lend. An attempt given
   * up on neither lends nor puts back (the retry carries on from what it lowered; should no try
   * lend, the workflow's putBackFenced writes the inventory back).
   */
  async function lend(ctx: HookContext<P>, request: LendHostsRequest): Promise<LentHosts> {
    const clients = cloud();
    const settled = async (rows: SlotLending[]): Promise<LentHosts> => {
      // Given up on: the try carrying on writes the inventory (this one's answer goes nowhere).
      if (clients && !ctx.signal?.aborted) await writeInventory(clients.placement, ctx.reservation.id);
      return lentSlotsOf(ctx, rows);
    };
    const earlier = await slotLendingsOfRequest(deps.pool, request.lendingId);
    if (earlier.length > 0) return settled(earlier);
    const placement = await calendar.placement(ctx.reservation.id);
    const expected = (await inventoryOf(ctx.reservation.id, placement)).sort((a, b) => b.slots - a.slots || a.computeNodeUuid.localeCompare(b.computeNodeUuid));
    const total = placement.reduce((n, p) => n + p.slots, 0);
    /**
     * The 409, unless another try of this request committed meanwhile (tries overlap): its rows then
     * count as lent here, and they are the lend, answered rather than refused (a refusal is not reconciled).
     * A failed read is no refusal either: its error (retried, then reconciled by the workflow) is the answer.
     */
    const refuse = async (idle: number): Promise<LentHosts> => {
      const lentMeanwhile = await slotLendingsOfRequest(deps.pool, request.lendingId);
      if (lentMeanwhile.length > 0) return settled(lentMeanwhile);
      throw leaseConflict(`Only ${idle} of the ${total} instance slots of reservation ${ctx.reservation.id} can be lent now: the others run servers or are lent already.`, { idle });
    };
    const lowered = new Map<string, number>();
    // A put-back that fails is reported; the lend's own answer (its error, or the 409) is what the caller gets.
    const putBackFailed = (undo: unknown) => ctx.reportProgress({ putBackFailed: (undo as Error).message });
    const putBack = async () => {
      if (ctx.signal?.aborted) return; // given up on: another try lowers these hosts now (the workflow's putBackFenced, should none lend)
      // A lend that committed (its answer lost, or by an attempt beside this one) keeps its hosts lowered.
      if ((await slotLendingsOfRequest(deps.pool, request.lendingId)).length > 0) return;
      for (const host of expected.filter((h) => lowered.has(h.computeNodeUuid))) await setReservationSlots(clients!.placement, host, ctx.reservation.id);
    };
    if (!clients) {
      const idle = expected.reduce((n, h) => n + h.slots, 0);
      if (idle < request.count) return refuse(idle);
    } else {
      // Placement's usage misses servers that hold no allocation now: none of the slots they come back to is lent.
      const lendable = Math.max(0, expected.reduce((n, h) => n + h.slots, 0) - (await serversHoldingSlots(clients.nova, ctx.reservation.id)).length);
      if (lendable < request.count) return refuse(lendable);
      let idle = 0;
      let left = request.count;
      try {
        for (const host of expected) {
          ctx.signal?.throwIfAborted(); // given up on: what it lowered stays lowered for the try that carries on
          const outcome = await lendSlotsOnHost(clients.placement, { ...host, expected: host.slots }, ctx.reservation.id, left);
          idle += outcome.idle;
          if (outcome.lent > 0) lowered.set(host.computeNodeUuid, outcome.lent);
          left -= outcome.lent;
          if (left === 0) break;
        }
      } catch (err) {
        await putBack().catch(putBackFailed);
        throw err;
      }
      if (left > 0) {
        await putBack().catch(putBackFailed);
        return refuse(Math.min(idle, lendable));
      }
    }
    let lent: SlotLending[];
    try {
      ctx.signal?.throwIfAborted();
      lent = await calendar.lend({
        lendingId: request.lendingId,
        reservationId: ctx.reservation.id,
        leaseId: ctx.leaseId,
        projectId: ctx.projectId,
        count: request.count,
        fromMs: Date.now(),
        untilMs: request.untilMs,
        ...(clients ? { perProvider: lowered } : {}),
      });
    } catch (err) {
      // Rows under this id (this try's commit whose answer was lost, or another try's) are the lend; else the slots go back
      // to the lessee. Should the read or the put-back fail, the lend's own error is what the caller gets.
      const lentAfterAll = await slotLendingsOfRequest(deps.pool, request.lendingId).catch(() => []);
      if (lentAfterAll.length > 0) return settled(lentAfterAll);
      if (clients) await putBack().catch(putBackFailed);
      throw err;
    }
    return settled(lent);
  }

  /** The reservation's inventory on every host it holds slots on written as inventoryOf says (absolute: lent slots out, the rest in); answers those hosts. */
  async function writeInventory(placement: PlacementClient, reservationId: string): Promise<string[]> {
    const hosts = await inventoryOf(reservationId, await calendar.placement(reservationId));
    for (const host of hosts) await setReservationSlots(placement, host, reservationId);
    return hosts.map((h) => h.hypervisorHostname);
  }

  /**
   * The take-back (issue 43), once the borrowers in these lendings are out (or the eviction bound
   * passed): the reservation's inventory on their hosts is raised to its booked slots less what it
   * still lends there, then the lendings are returned. Absolute writes: a retry writes the same.
   */
  async function returnLentSlots(ctx: HookContext<P>, lendingRowIds: string[]): Promise<void> {
    const clients = cloud();
    if (clients) {
      const returning = (await calendar.openLendings(ctx.reservation.id)).filter((g) => lendingRowIds.includes(g.id));
      const providers = new Set(returning.map((g) => g.provider_uuid));
      const hosts = (await inventoryOf(ctx.reservation.id, await calendar.placement(ctx.reservation.id), lendingRowIds)).filter((h) => providers.has(h.computeNodeUuid));
      for (const host of hosts) await setReservationSlots(clients.placement, host, ctx.reservation.id);
    }
    await calendar.returnLent(ctx.reservation.id, lendingRowIds);
  }

  return {
    ...slotReservationType(type, deps, made),

    async reserve(ctx: HookContext<P>) {
      await made.refresh();
      const clients = cloud();
      const active = ctx.leaseStatus === 'ACTIVE';
      const { slots, instance, shown: described } = await specOf(ctx);
      const before = active ? await calendar.placement(ctx.reservation.id) : [];
      const keepOn = active && clients ? await serversInUse(ctx, clients.nova, before, slots.amount) : undefined;
      const settled: { preemptionSequence?: number } = {};
      const placement = await calendar.book(ctx, slots, { keepOn, settled });
      let resources = {};
      if (clients) {
        resources = await ensureReservationResources(clients, lesseeNova(ctx), instance);
        // An active reservation's new slots are the lessee's at once (and those it gave up are gone).
        if (active) await openSlots(clients, instance, await inventoryOf(ctx.reservation.id, placement), hostSlots(before), ctx.reportProgress);
      }
      const reserved = { allocation: { ...described, ...resources, ...shown(placement) }, resourceKeys: preemptionWaitKeys(ctx.reservation, ctx.leaseId, []), footprint: footprintOfAmounts(slots.slot, slots.amount) };
      return settled.preemptionSequence === undefined ? reserved : { ...reserved, preemptionSequence: settled.preemptionSequence };
    },

    /** A reservation the API admitted (bookAtAdmission): its flavor, aggregate, server group and resource class, made right after (their ids join the lease's reservation). */
    async hold(ctx) {
      const clients = cloud();
      if (!clients) return {};
      return { allocation: { ...(await ensureReservationResources(clients, lesseeNova(ctx), (await specOf(ctx)).instance)) } };
    },

    moveWindow: (ctx, settled) => calendar.moveWindow(ctx, settled),

    /** In use while a server of the reservation's flavor exists (only the lessee's project may use it); without a cloud it cannot tell. */
    async inUse(ctx) {
      const clients = cloud();
      if (!clients) return undefined;
      return (await serversOfFlavor(clients.nova, ctx.reservation.id)).some((s) => s.status !== 'DELETED' && s.status !== 'SOFT_DELETED');
    },

    async start(ctx) {
      const clients = cloud();
      const placement = await calendar.placement(ctx.reservation.id);
      if (!clients) return { allocation: shown(placement) };
      const { instance } = await specOf(ctx);
      // Made at admission; made again here if an operator removed them meanwhile.
      const resources = await ensureReservationResources(clients, lesseeNova(ctx), instance);
      await openSlots(clients, instance, await inventoryOf(ctx.reservation.id, placement), [], ctx.reportProgress);
      return { allocation: { ...resources, ...shown(placement) } };
    },

    async beforeEnd(ctx) {
      const action = beforeEndAction(ctx.reservation.params.before_end, deps.settings.beforeEndDefault);
      if (action === 'notify') {
        const placement = await calendar.placement(ctx.reservation.id);
        await ctx.announce({ eventType: 'lease.event.before_end_lease', details: { flavor_id: ctx.reservation.id, hosts: placement.map((p) => p.hypervisorHostname) } });
        return;
      }
      const clients = cloud();
      if (action !== 'snapshot' || !clients) return;
      // The servers of the flavor, in every project (the lessee may have shared it): as for hosts, all of them.
      const servers = (await serversOfFlavor(clients.nova, ctx.reservation.id)).filter((s) => s.status !== 'ERROR' && s['OS-EXT-STS:task_state'] !== 'deleting');
      await snapshotServers(clients.nova, clients.glance, servers, { leaseId: ctx.leaseId, leaseName: ctx.leaseName, reservationId: ctx.reservation.id }, ctx.reportProgress);
    },

    async end(ctx) {
      const clients = cloud();
      if (clients) {
        // Not described again: the end must not depend on the source flavor (deleted meanwhile, it must not block the end).
        const spec = { reservationId: ctx.reservation.id, projectId: ctx.projectId };
        const left = await closeSlots(clients.nova, spec);
        ctx.reportProgress({ serversLeft: left });
        // Even a forced end waits for these: servers being deleted cannot be hurried, and the slots cannot go before them.
        if (left > 0) {
          failIfDeletionOverdue(`${left} server(s) of flavor reservation:${ctx.reservation.id} still there`, ctx.endMs, serverDeleteTimeoutMs);
          return { waitingFor: `${left} server(s) of flavor reservation:${ctx.reservation.id} to be deleted`, recheckAfterMs: SERVER_DELETE_RECHECK_MS };
        }
        const removed = await removeReservationResources(clients, spec, await slotHostsOf(ctx.reservation.id));
        // Nova frees a deleted server's Placement allocation just after the server is gone from its list.
        if (!removed) {
          failIfDeletionOverdue(`Placement still counts servers on the slots of reservation ${ctx.reservation.id}`, ctx.endMs, serverDeleteTimeoutMs);
          return { waitingFor: `Placement to free the slots of reservation ${ctx.reservation.id}`, recheckAfterMs: SERVER_DELETE_RECHECK_MS };
        }
      }
      await calendar.release(ctx.reservation.id, ctx.started);
      return {};
    },

    /**
     * Hosts of its slots failed, left admission or went into maintenance (or came back): the slots
     * are booked again on hosts that are up, the healthy hosts they held first. Before the start
     * that is all (the inventory is written at the start). After it, the new hosts join the
     * aggregate with their slots as inventory, and the hosts left leave it with only the slots
     * their servers still hold (a failed host's servers are there). With no room the slots stay
     * and the reservation is flagged until its hosts are back. An active reservation's inventory
     * is made to match its booking at every heal, so a heal cut short is finished by the next.
     */
    async heal(ctx) {
      const before = await calendar.placement(ctx.reservation.id);
      const unusable = await unusableHostsOf(deps.pool, { reservationId: ctx.reservation.id });
      const pending = ctx.leaseStatus === 'PENDING';
      const wasChanged = pending && ctx.reservation.resources_changed === true;
      let placement = before;
      const clients = cloud();
      // Described once, when first needed (flavor:instance reads its flavor from Nova).
      let spec: ReturnType<typeof specOf> | undefined;
      const described = () => (spec ??= specOf(ctx));
      if (before.some((p) => unusable.has(p.hostId))) {
        await made.refresh();
        try {
          placement = await calendar.book(ctx, (await described()).slots, { rebook: true });
        } catch (err) {
          if (!isLeaseConflict(err)) throw err;
          return { allocation: shown(before), missingResources: true, resourcesChanged: wasChanged };
        }
      }
      if (!pending && clients) {
        const { instance } = await described();
        await openSlots(clients, instance, await inventoryOf(ctx.reservation.id, placement), await slotHostsOf(ctx.reservation.id), ctx.reportProgress);
      }
      const moved = placement.some((p) => !before.some((b) => b.hostId === p.hostId && b.slots === p.slots)) || placement.length !== before.length;
      return { allocation: shown(placement), missingResources: placement.some((p) => unusable.has(p.hostId)), resourcesChanged: wasChanged || (pending && moved) };
    },

    async placementOf(ctx) {
      return { hosts: (await calendar.placement(ctx.reservation.id)).map((p) => p.computeHost) };
    },

    lend,
    async reclaim(ctx, request) {
      const { taken, cut } = await calendar.reclaim({ reservationId: ctx.reservation.id, count: request.count, neededFromMs: request.neededFromMs, lentRowIds: request.lentHostIds });
      return { hosts: taken.map((g) => ({ hostId: g.lendingRowId, returnsAtMs: g.returnsAtMs, borrowed: g.borrowed })), cut };
    },
    async lentBy(ctx, lendingId) {
      const rows = await slotLendingsOfRequest(deps.pool, lendingId);
      return rows.length > 0 ? lentSlotsOf(ctx, rows) : undefined;
    },
    reclaimingHosts: (ctx) => calendar.reclaimingSlots(ctx.reservation.id),
    /** The slots that could be lent now (the suggestion's count): as the lend counts them; without a cloud it cannot tell (none). */
    async idleHosts(ctx) {
      const clients = cloud();
      if (!clients) return 0;
      const notLent = (await inventoryOf(ctx.reservation.id, await calendar.placement(ctx.reservation.id))).reduce((n, h) => n + h.slots, 0);
      return Math.max(0, notLent - (await serversHoldingSlots(clients.nova, ctx.reservation.id)).length);
    },
    /** After a lend whose every try was given up on: every host's inventory as inventoryOf says (what its tries lowered and nothing lent under is back); answers the hosts written. */
    async putBackFenced(ctx) {
      const clients = cloud();
      return clients ? writeInventory(clients.placement, ctx.reservation.id) : [];
    },
    lentHostsFree: (ctx, lendingRowIds) => calendar.lentSlotsFree(ctx.reservation.id, lendingRowIds),
    returnLentHosts: returnLentSlots,

    /**
     * Active reservations' slots in Nova and Placement against the booking (hosts in the
     * aggregate, slots as inventory; hosts left out of it). One seen drifting the same way at two
     * checks in a row (so a heal or an update in progress is never fought) is put back as a heal
     * does; `report` only says so.
     */
    async checkDrift(previous, mode) {
      const check: DriftCheck = { seen: {}, repaired: [], reported: [], aggregatesRemoved: [] };
      const clients = cloud();
      if (!clients) return check;
      for (const { reservationId, projectId } of await activeReservationsOfType(deps.pool, type.resourceType)) {
        const booked = await inventoryOf(reservationId, await calendar.placement(reservationId));
        const drift = await slotDrift(clients, reservationId, booked, await slotHostsOf(reservationId));
        if (!drift) continue;
        const key = `slots:${reservationId}`;
        check.seen[key] = drift;
        if (previous[key] !== drift) continue;
        const line = `reservation ${reservationId}: ${drift}`;
        if (mode === 'report') {
          check.reported.push(line);
          continue;
        }
        try {
          // Read again: a lend or a return may have moved it during slotDrift's Placement reads.
          const now = await inventoryOf(reservationId, await calendar.placement(reservationId));
          await openSlots(clients, { reservationId, projectId }, now, await slotHostsOf(reservationId), () => undefined);
          check.repaired.push(line);
        } catch (err) {
          check.reported.push(`${line} (not repaired: ${(err as Error).message})`);
        }
      }
      return check;
    },
  };
}

/** `virtual:instance`: the slot's size is in its parameters. */
export const virtualInstance: SlotType<VirtualInstanceParams> = {
  resourceType: VIRTUAL_INSTANCE,
  describesWithoutCloud: true,
  paramsSchema: virtualInstanceParams,
  describe(reservation) {
    const { params } = reservation;
    return Promise.resolve({
      spec: { slot: slotAmounts(params), amount: params.amount, affinity: params.affinity, resourceProperties: params.resource_properties },
      flavor: { vcpus: params.vcpus, ram: params.memory_mb, disk: params.disk_gb, ephemeral: 0, swap: 0, extraSpecs: {} },
    });
  },
};

export const virtualInstanceType = (deps: VirtualInstanceDeps): ResourceType<VirtualInstanceParams> => slotReservationType(virtualInstance, deps);
export const virtualInstancePlugin = (deps: VirtualInstanceDeps): ResourcePlugin<VirtualInstanceParams> => slotReservationPlugin(virtualInstance, deps);
