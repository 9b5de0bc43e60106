/**
 * `physical:host`: whole compute hosts, booked in the host calendar and, from start (less the
 * provisioning lead time) to end, moved out of the reservable pool into the lease's own Nova
 * aggregate (its availability zone is what the lessee targets). Before the end: a snapshot of every
 * server, or a notice. At the end, per reservation (`on_end`): `delete` every server and return the
 * hosts; `recycle` — hosts wait in the lease's aggregate, closed, until their last server is gone (or a grace
 * period, or the host's next booking, comes); `release` — hosts and servers go to the shared cloud.
 */
import {
  deleteServersOnHosts,
  hostsOutOfLease,
  leaseAggregateFor,
  lendHostsOut,
  moveHostsIntoLease,
  putFencedHostsBack,
  recycleHosts,
  releaseHosts,
  returnHostsToPool,
  SERVER_DELETE_PASS_MS,
  type EndAggregates,
} from './aggregates';
import { beforeEndAction, refuseNotifyWithoutEndpoint, type BeforeEndAction } from '../shared/params';
import { DEFAULT_SERVER_DELETE_TIMEOUT_MS, failIfDeletionOverdue } from '../shared/server-deletion';
import { snapshotServersOnHosts } from '../shared/server-snapshots';
import { borrowersOfLendings, computeHostsOfReservation, unusableHostsOf } from '../../db/host-allocations';
import { lendingsOfRequest, openLendingsOf, type HostLending } from '../../db/host-lendings';
import { leaseConflict } from '../../domain/lease';
import { ConflictError } from '../../openstack';
import { computeHostName, HYPERVISOR_FIELDS, listHosts, markReleased } from '../../db/hosts';
import { parsePropertyQuery } from '../../domain/property-query';
import { preemptionWaitKeys } from '../../domain/preemption';
import { checkCapabilityKeys, checkKeys } from '../shared/booking';
import { windowsOverReservation } from '../../db/maintenance';
import { preemptedAmong } from '../../db/lease-preemptions';
import type { Pool } from '../../db/pool';
import type { GlanceClient, NovaClient } from '../../openstack';
import type { EndContext, EndOutcome, HookContext, LendHostsRequest, LentHosts, OfferShape, ReservationContext, ReserveResult, ResourcePlugin, ResourceType } from '../../domain/resource-plugin';
import { HostCalendar, PHYSICAL_HOST, type BookedHost, type CalendarSettings, type HostQuery } from './calendar';
import { setFailedHostAside } from './health';
import { endPolicyOf, physicalHostParams, type EndPolicy, type PhysicalHostParams } from './params';
import { bootWaitReason, hostsBooting, untilBooted, type HostPower } from './power';
import { START_BOOT_WAIT_MS } from '../../config';

export { PHYSICAL_HOST };

export interface PhysicalHostDeps {
  pool: Pool;
  settings: CalendarSettings & {
    /** What `before_end: default` means. */
    beforeEndDefault?: BeforeEndAction;
    /** `recycle`: how long hosts wait for their last servers when the reservation names no grace period (unset: until their next booking). */
    recycleGraceMs?: number;
  };
  /**
   * Nova and Glance, for carrying leases out; 'calendar-only' for tests of booking alone, where
   * start and end touch no cloud.
   */
  cloud: (() => { nova: NovaClient; glance: GlanceClient }) | 'calendar-only';
  freepool?: string;
  /** Where `release` puts hosts, and the project `recycle` names in the closed lease aggregate (defaults: leasekeeper-released, the pool's project). */
  endAggregates?: Partial<EndAggregates>;
  /** Where a failed host replaced in an active lease waits until it is up again (default: leasekeeper-failed). */
  failedAggregate?: string;
  /** Where `before_end: notify` posts (unset: `notify` is refused when the lease is created). */
  /** Whether the deployment has somewhere to send notices (a before-end `notify` needs it). */
  noticesConfigured?: boolean;
  /** How long the end waits for deleted servers to be gone. */
  serverDeleteTimeoutMs?: number;
  /** How often a recycling end looks at its hosts again. */
  recyclePollMs?: number;
  /**
   * The deployment's hosts' power (issue 48): a start wakes those of its hosts with a power driver
   * that are not on (a lease starting now beats the power planner's look), then waits for their
   * boots. Unset: a start wakes nothing (it still waits for the wakes the planner recorded).
   */
  power?: Pick<HostPower, 'wakeForStart' | 'wakesAhead'>;
}

/** Blazar's own min/max: `max` hosts asked, `min` accepted; an offer books exactly its count (min = max). Counts only: which hosts is the booking's choice. */
const hostOffers: OfferShape<PhysicalHostParams> = {
  count: (params) => ({ asked: params.max, least: params.min }),
  withCount: (params, n) => ({ ...params, min: n, max: n }),
  describe: (params) => ({ hosts: params.min === params.max ? params.max : { min: params.min, max: params.max } }),
  footprint: (params) => ({ hosts: params.max }),
};

/** What the API needs of `physical:host`: the parameters, and where hosts are free (no cloud). */
export function physicalHostType(deps: Pick<PhysicalHostDeps, 'pool' | 'settings' | 'noticesConfigured' | 'cloud'>, calendar = new HostCalendar(deps.pool, deps.settings)): ResourceType<PhysicalHostParams> {
  return {
    resourceType: PHYSICAL_HOST,
    paramsSchema: physicalHostParams.superRefine(refuseNotifyWithoutEndpoint(deps.settings.beforeEndDefault, deps.noticesConfigured === true)),
    checkPropertyKeys: (params, viewer) => checkHostQueryKeys(deps.pool, params, viewer),
    earliest: ({ reservations, startMs, durationMs, limits }) => calendar.search(reservations, startMs, durationMs, undefined, limits),
    offers: hostOffers,
    latestEnd: (leaseId) => calendar.latestEnd(leaseId),
    async wouldBook(reservations, startMs, endMs, provisioningLeadMs) {
      const hosts = await calendar.wouldBook(reservations, startMs, endMs, provisioningLeadMs);
      return new Map([...(hosts ?? [])].map(([id, booked]) => [id, { would_book: booked.map((h) => ({ id: h.id, hypervisor_hostname: h.hypervisor_hostname })) }]));
    },
    // Booking hosts is the calendar's alone: the API admits host leases in its own transaction.
    async bookAtAdmission(client, ctx, options) {
      refuseWithoutCloud(deps);
      const cutBefore = options?.cut?.length ?? 0;
      const hosts = await calendar.bookWithin(client, ctx, { preempt: options?.preempt ?? false, cut: options?.cut, borrow: options?.borrow ?? true });
      return hostReservation(ctx, hosts, deps.settings.onEndDefault, options?.cut?.slice(cutBefore) ?? []);
    },
  };
}

/**
 * A host query's keys, at the API before any booking: `hypervisor_properties` over the fixed
 * hypervisor fields, `resource_properties` over the reservable hosts' capabilities (see
 * checkCapabilityKeys); an unknown key is the booking's own 400, naming it.
 */
export async function checkHostQueryKeys(pool: Pool, query: HostQuery, viewer: { isAdmin: boolean }): Promise<void> {
  checkKeys(parsePropertyQuery(query.hypervisor_properties ?? ''), new Set(HYPERVISOR_FIELDS), 'hypervisor_properties');
  await checkCapabilityKeys(pool, query.resource_properties ?? '', viewer);
}

/** Without OpenStack credentials the lease could never start: refused now (OpenStackConfigError, 503 naming the setting). */
function refuseWithoutCloud(deps: Pick<PhysicalHostDeps, 'cloud'>): void {
  if (deps.cloud !== 'calendar-only') deps.cloud();
}

/** What a host reservation reports once its hosts are booked. */
function hostReservation(ctx: ReservationContext<PhysicalHostParams>, hosts: BookedHost[], onEndDefault: PhysicalHostDeps['settings']['onEndDefault'], cut: readonly string[] = []): ReserveResult {
  // A booking moved keeps the names it was given (a lease started under legacy names is in that aggregate).
  const { allocation: booked } = ctx.reservation;
  const aggregate = typeof booked?.aggregate === 'string' && typeof booked.availability_zone === 'string' ? { name: booked.aggregate, availabilityZone: booked.availability_zone } : leaseAggregateFor(ctx.reservation.id);
  return {
    allocation: {
      hosts: hosts.map((h) => h.hypervisor_hostname),
      host_ids: hosts.map((h) => h.id),
      aggregate: aggregate.name,
      availability_zone: aggregate.availabilityZone,
      on_end: endPolicyOf(ctx.reservation.params, onEndDefault),
    },
    // Its hosts' keys order it after their earlier leases; the preemption keys after the slot leases it cut.
    resourceKeys: [...hosts.map((h) => `host:${h.id}`), ...preemptionWaitKeys(ctx.reservation, ctx.leaseId, cut)],
    footprint: { hosts: hosts.length },
  };
}

export function physicalHostPlugin(deps: PhysicalHostDeps): ResourcePlugin<PhysicalHostParams> {
  const calendar = new HostCalendar(deps.pool, deps.settings);
  const freepool = deps.freepool ?? 'freepool';
  const endAggregates: EndAggregates = {
    released: 'leasekeeper-released',
    closedProjectId: 'leasekeeper-freepool',
    ...deps.endAggregates,
  };
  const failedAggregate = deps.failedAggregate ?? 'leasekeeper-failed';
  const serverDeleteTimeoutMs = deps.serverDeleteTimeoutMs ?? DEFAULT_SERVER_DELETE_TIMEOUT_MS;
  const beforeEndOf = (ctx: ReservationContext<PhysicalHostParams>) => beforeEndAction(ctx.reservation.params.before_end, deps.settings.beforeEndDefault);

  /**
   * The reservation's hosts (id and compute host name) in its current booking, without those it
   * lends (issue 43): those are in the pool or a borrower's aggregate until back, their servers the
   * borrowers' (a borrower of the lender's own project too). `borrowed`: a host this reservation
   * borrows, where only its own project's servers are its own.
   */
  function bookedHosts(ctx: ReservationContext<PhysicalHostParams>): Promise<Array<{ id: string; host: string; borrowed: boolean }>> {
    return computeHostsOfReservation(deps.pool, ctx.reservation.id, { inLeaseAggregate: true });
  }

  type BookedHost = Awaited<ReturnType<typeof bookedHosts>>[number];

  /** The hosts a borrowing reservation may touch only its own project's servers on (of `booked`, when read already). */
  const ownServersOnlyOn = async (ctx: ReservationContext<PhysicalHostParams>, booked?: BookedHost[]) => ({
    projectId: ctx.projectId,
    hosts: new Set((booked ?? (await bookedHosts(ctx))).filter((h) => h.borrowed).map((h) => h.host)),
  });

  /** The reservation's hosts as a move takes them (`booked`: the hosts when read already). */
  const move = async (ctx: HookContext<PhysicalHostParams>, booked?: BookedHost[]) => ({
    reservationId: ctx.reservation.id,
    leaseId: ctx.leaseId,
    projectId: ctx.projectId,
    hosts: (booked ?? (await bookedHosts(ctx))).map((h) => h.host),
    freepool,
    progress: ctx.reportProgress,
    ...(ctx.signal ? { signal: ctx.signal } : {}),
  });

  /** The policy decided at booking (shown in the lease JSON), so a changed default does not change a booked lease. */
  function endPolicy(ctx: ReservationContext<PhysicalHostParams>): EndPolicy {
    const booked = ctx.reservation.allocation?.on_end;
    return booked === 'delete' || booked === 'recycle' || booked === 'release' ? booked : endPolicyOf(ctx.reservation.params, deps.settings.onEndDefault);
  }

  /** `recycle`: per host, when waiting stops: the grace period's end, or the host's next booking, whichever is first. */
  async function recycleDeadlines(ctx: ReservationContext<PhysicalHostParams>, booked: BookedHost[]): Promise<Map<string, number>> {
    const params = ctx.reservation.params;
    const graceMs = params.recycle_grace_seconds !== null && params.recycle_grace_seconds !== undefined ? params.recycle_grace_seconds * 1000 : deps.settings.recycleGraceMs;
    const next = await calendar.nextBookings(ctx.reservation.id);
    const deadlines = new Map<string, number>();
    for (const { id, host } of booked) {
      const candidates = [graceMs === undefined ? Infinity : ctx.endMs + graceMs, next.get(id) ?? Infinity];
      const deadline = Math.min(...candidates);
      if (deadline !== Infinity) deadlines.set(host, deadline);
    }
    return deadlines;
  }

  /** Servers being deleted: progress for the workflow to show, bounded by the delete time-out after `since` (when given). */
  function stillDeleting(left: number, on: string[], since?: number): EndOutcome {
    if (since !== undefined) failIfDeletionOverdue(`${left} server(s) still on ${on.join(', ')}`, since, serverDeleteTimeoutMs);
    return { waitingFor: `deleting servers: ${left} still on ${on.join(', ')}`, recheckAfterMs: 2_000 };
  }

  async function endInCloud(ctx: EndContext<PhysicalHostParams>, nova: NovaClient): Promise<EndOutcome> {
    // Hosts it lends are not its to touch until back: their servers are the borrowers' (of any project, its own too).
    // Read once for the whole end (the move, the own-servers rule, the release's record, the recycle's deadlines).
    const booked = await bookedHosts(ctx);
    const hosts = await move(ctx, booked);
    // Not started (deleted while pending, or a start that failed half way): put back whatever moved.
    if (!ctx.started) return returnHostsToPool(nova, hosts).then(() => ({}));
    switch (endPolicy(ctx)) {
      case 'delete': {
        // On a host another lease's start took (past the eviction bound), or one borrowed inside a lending (a server its lender
        // had scheduled before lending it), only this lessee's servers are its to delete.
        const borrowed = await ownServersOnlyOn(ctx, booked);
        const taken = new Set([...(await hostsOutOfLease(nova, hosts)), ...borrowed.hosts]);
        const left = await deleteServersOnHosts(nova, hosts.hosts, SERVER_DELETE_PASS_MS, ctx.reportProgress, { projectId: hosts.projectId, hosts: taken });
        if (left > 0) return stillDeleting(left, hosts.hosts, ctx.endMs);
        await returnHostsToPool(nova, hosts);
        return {};
      }
      case 'release':
        // (A reservation that releases its hosts cannot lend them: all are in its aggregate.)
        await releaseHosts(nova, hosts, endAggregates);
        await markReleased(deps.pool, booked.map((h) => h.id), ctx.leaseId);
        return {};
      case 'recycle': {
        // A host another lease's start took (past the eviction bound) is that lease's: this lessee's servers there go now, not at its recycle deadline.
        const taken = await hostsOutOfLease(nova, hosts, 'none');
        if (taken.size > 0) {
          const left = await deleteServersOnHosts(nova, [...taken], SERVER_DELETE_PASS_MS, ctx.reportProgress, { projectId: hosts.projectId, hosts: taken });
          if (left > 0) return stillDeleting(left, [...taken], ctx.endMs);
        }
        // A borrowed host waits for this lessee's servers only, and only those go at its deadline.
        const { waiting } = await recycleHosts(nova, { ...hosts, aggregates: endAggregates, deleteServersAt: await recycleDeadlines(ctx, booked), force: ctx.force ?? false, onlyProject: await ownServersOnlyOn(ctx, booked) });
        if (waiting.length === 0) return {};
        const deleting = waiting.filter((w) => w.deleting);
        if (deleting.length > 0) return stillDeleting(deleting.reduce((n, w) => n + w.servers, 0), deleting.map((w) => w.host));
        const what = waiting.map((w) => `${w.host} (${w.servers} server(s)${w.deleteAt ? `, deleted at ${new Date(w.deleteAt).toISOString()}` : ''})`).join(', ');
        const soonest = Math.min(...waiting.map((w) => w.deleteAt ?? Infinity));
        return {
          waitingFor: `recycling: waiting for the last servers on ${what}`,
          recheckAfterMs: Math.max(1_000, Math.min(deps.recyclePollMs ?? 15_000, soonest - Date.now())),
        };
      }
    }
  }

  /**
   * Lending (issue 43): the reservation's usable hosts in its aggregate (not lent, not failed), by
   * id, until `count` are idle. In the cloud each is fenced and checked (lendHostsOut): one running a
   * server goes back; fewer idle than asked puts back all fenced (409 with `idle`). Calendar-only:
   * no servers to run, every such host is idle. Then the lendings, in the calendar.
   */
  /** The hosts a lend may take: usable, in the lease's aggregate (not lent), by id. */
  async function lendCandidates(ctx: HookContext<PhysicalHostParams>): Promise<Array<{ id: string; host: string }>> {
    const unusable = await unusableHostsOf(deps.pool, { reservationId: ctx.reservation.id });
    return (await computeHostsOfReservation(deps.pool, ctx.reservation.id, { inLeaseAggregate: true })).filter((h) => !unusable.has(h.id)).sort((a, b) => Number(a.id) - Number(b.id));
  }

  /** A lend request's lending rows as the lend answers them: its hosts, by name, and when it began. */
  async function lentHostsOf(ctx: HookContext<PhysicalHostParams>, rows: Array<{ host_id: string; start_ms: number }>): Promise<LentHosts> {
    const names = new Map((await computeHostsOfReservation(deps.pool, ctx.reservation.id)).map((h) => [h.id, h.host]));
    return { hosts: rows.map((g) => ({ id: g.host_id, name: names.get(g.host_id) ?? g.host_id })), lentAtMs: Math.min(...rows.map((g) => g.start_ms)) };
  }

  async function lend(ctx: HookContext<PhysicalHostParams>, request: LendHostsRequest): Promise<LentHosts> {
    const named = (rows: Array<{ host_id: string; start_ms: number }>) => lentHostsOf(ctx, rows);
    const earlier = await lendingsOfRequest(deps.pool, request.lendingId);
    if (earlier.length > 0) return named(earlier); // a retry: what it lent
    const all = await computeHostsOfReservation(deps.pool, ctx.reservation.id);
    const candidates = await lendCandidates(ctx);
    const nova = deps.cloud === 'calendar-only' ? undefined : deps.cloud().nova;
    const hostMove = await move(ctx);
    const idle = nova ? new Set(await lendHostsOut(nova, hostMove, candidates.map((h) => h.host), request.count)) : undefined;
    const fenced = candidates.filter((h) => !idle || idle.has(h.host)).slice(0, request.count);
    /** The fenced hosts back into the lease, but none that the lending id lent: a commit whose reply was lost lent them after all. */
    const putBackUnlent = async (lentRows: HostLending[]) => {
      if (ctx.signal?.aborted) return; // given up on: another try works on these hosts now
      const lentIds = new Set(lentRows.map((g) => g.host_id));
      const back = fenced.filter((h) => !lentIds.has(h.id));
      if (nova && back.length > 0) await moveHostsIntoLease(nova, { ...hostMove, hosts: back.map((h) => h.host) });
    };
    if (fenced.length < request.count) {
      // Given up on: another try works on these hosts now. Another try may have lent under this id meanwhile: that is the lend.
      ctx.signal?.throwIfAborted();
      const lentMeanwhile = await lendingsOfRequest(deps.pool, request.lendingId);
      await putBackUnlent(lentMeanwhile);
      if (lentMeanwhile.length > 0) return named(lentMeanwhile);
      throw leaseConflict(`Only ${fenced.length} of the ${all.length} hosts of reservation ${ctx.reservation.id} can be lent now: the others run servers or are lent already.`, { idle: fenced.length });
    }
    ctx.signal?.throwIfAborted(); // given up on: its hosts stay fenced for the try that carries on
    let lent: HostLending[];
    try {
      lent = await calendar.lend({ lendingId: request.lendingId, reservationId: ctx.reservation.id, leaseId: ctx.leaseId, projectId: ctx.projectId, hostIds: fenced.map((h) => h.id), fromMs: Date.now(), untilMs: request.untilMs });
    } catch (err) {
      // The hosts go back into the lease unless the calendar holds them lent (then the retry or the workflow's reconcile
      // records them); should the check or the put-back fail too, the lend's own error is what the caller gets.
      await lendingsOfRequest(deps.pool, request.lendingId)
        .then(putBackUnlent)
        .catch((undo: unknown) => ctx.reportProgress({ putBackFailed: (undo as Error).message }));
      throw err;
    }
    // An overlapping try lent under this id first: the calendar answers its rows, and the hosts this try fenced beside them go back.
    await putBackUnlent(lent).catch((undo: unknown) => ctx.reportProgress({ putBackFailed: (undo as Error).message }));
    return named(lent); // outside the try: once the calendar committed, a failure here must not put lent hosts back
  }

  /**
   * The take-back (issue 43): returned hosts join the lease's aggregate again (out of the pool, or
   * taken from a reclaimed borrower's zone past the eviction bound, as a start takes them), then their
   * lendings are returned. A host still in another zone (a borrower's end not done): Nova's 409 is tried again.
   * The take-back runs past the borrowers' ends and the eviction bound: a borrower of these lendings
   * whose zone still holds the host (its end slow or failed, cut or not) gives it up, as a preempted
   * lease does to a start, so that the lender's lock is never held waiting on a borrower.
   */
  async function returnLentHosts(ctx: HookContext<PhysicalHostParams>, hostIds: string[]): Promise<void> {
    if (deps.cloud !== 'calendar-only') {
      const hosts = (await computeHostsOfReservation(deps.pool, ctx.reservation.id)).filter((h) => hostIds.includes(h.id)).map((h) => h.host);
      const returning = (await openLendingsOf(deps.pool, ctx.reservation.id)).filter((g) => hostIds.includes(g.host_id)).map((g) => g.id);
      const borrowers = new Set((await borrowersOfLendings(deps.pool, returning, false)).map((b) => b.lease_id));
      const takeFromLeases = async (leaseIds: string[]) => [...new Set([...(await preemptedAmong(deps.pool, leaseIds)), ...leaseIds.filter((id) => borrowers.has(id))])];
      try {
        await moveHostsIntoLease(deps.cloud().nova, { ...(await move(ctx)), hosts, takeFromLeases });
      } catch (err) {
        // Retryable (a plain error): the workflow's policy tries again until the borrower's end moved the host out.
        if (err instanceof ConflictError) throw new Error(`lent hosts ${hosts.join(', ')} are still in a borrower's aggregate: trying again`);
        throw err;
      }
    }
    await calendar.returnLent(ctx.reservation.id, hostIds);
  }

  /**
   * Tells the lessee, once per degradation, which booked hosts it cannot count on, why (failed, out
   * of admission, or the maintenance windows), and where the same lease would fit instead.
   */
  async function tellDegraded(ctx: HookContext<PhysicalHostParams>, lost: Array<{ id: string; hypervisor_hostname: string }>, alternative?: Record<string, unknown>): Promise<void> {
    const lostIds = new Set(lost.map((h) => h.id));
    const windows = (await windowsOverReservation(deps.pool, ctx.reservation.id)).filter((w) => lostIds.has(w.host_id));
    await ctx.announce({
      eventType: 'lease.degraded',
      key: lost.map((h) => h.id).sort().join(','),
      details: {
        hosts: lost.map((h) => h.hypervisor_hostname),
        maintenance: windows.map((w) => ({ id: w.id, host: w.hypervisor_hostname, start_date: new Date(w.start_ms).toISOString(), end_date: new Date(w.end_ms).toISOString(), reason: w.reason })),
        ...(alternative ? { alternative } : {}),
      },
    });
  }

  return {
    ...physicalHostType(deps, calendar),
    async reserve(ctx) {
      refuseWithoutCloud(deps);
      const settled: { preemptionSequence?: number } = {};
      const reserved = hostReservation(ctx, await calendar.book(ctx, settled), deps.settings.onEndDefault);
      return settled.preemptionSequence === undefined ? reserved : { ...reserved, preemptionSequence: settled.preemptionSequence };
    },
    /** In use while a server of the lessee's project runs on one of its hosts (a calendar-only deployment cannot tell). */
    async inUse(ctx) {
      if (deps.cloud === 'calendar-only') return undefined;
      const { nova } = deps.cloud();
      for (const { host } of await bookedHosts(ctx)) {
        const servers = await nova.listServers({ all_tenants: true, host, project_id: ctx.projectId });
        if (servers.some((s) => s.status !== 'DELETED' && s.status !== 'SOFT_DELETED')) return true;
      }
      return false;
    },
    async startWaitReason(ctx) {
      const booked = await bookedHosts(ctx);
      const nowMs = Date.now();
      // Hosts woken and still booting, and hosts the start will wake (asleep still: a lease starting now).
      const booting = await hostsBooting(deps.pool, booked, nowMs, deps.cloud === 'calendar-only' ? undefined : deps.cloud().nova, START_BOOT_WAIT_MS);
      const ahead = deps.power ? await deps.power.wakesAhead(booked.map((h) => h.id), nowMs) : [];
      return bootWaitReason([...booting, ...ahead.map((wake) => ({ host: booked.find((h) => h.id === wake.hostId)!.host, bootDeadlineMs: wake.bootDeadlineMs }))]);
    },
    async start(ctx) {
      const booked = await bookedHosts(ctx);
      // A host of this lease still asleep (issue 48; a lease starting now comes before the planner's wake) is woken by the start itself.
      await deps.power?.wakeForStart(booked.map((h) => h.id), { signal: ctx.signal });
      // A host woken for this lease may still be booting: its start waits for it, until its boot deadline and at most START_BOOT_WAIT_MS from its wake (the activity's time).
      await untilBooted(deps.pool, booked, { nova: deps.cloud === 'calendar-only' ? undefined : deps.cloud().nova, signal: ctx.signal, progress: ctx.reportProgress, waitAtMostMs: START_BOOT_WAIT_MS });
      if (deps.cloud === 'calendar-only') return;
      await moveHostsIntoLease(deps.cloud().nova, { ...(await move(ctx)), takeFromLeases: (leaseIds) => preemptedAmong(deps.pool, leaseIds) });
    },
    async beforeEnd(ctx) {
      const action = beforeEndOf(ctx);
      if (action === 'notify') {
        await ctx.announce({ eventType: 'lease.event.before_end_lease', details: { hosts: (await bookedHosts(ctx)).map((h) => h.host) } });
        return;
      }
      if (action !== 'snapshot' || deps.cloud === 'calendar-only') return;
      const { nova, glance } = deps.cloud();
      const booked = await bookedHosts(ctx);
      await snapshotServersOnHosts(nova, glance, { hosts: booked.map((h) => h.host), onlyProject: await ownServersOnlyOn(ctx, booked), leaseId: ctx.leaseId, leaseName: ctx.leaseName, reservationId: ctx.reservation.id, progress: ctx.reportProgress });
    },
    async end(ctx) {
      if (deps.cloud !== 'calendar-only') {
        const outcome = await endInCloud(ctx, deps.cloud().nova);
        if (outcome.waitingFor) return outcome; // the booking holds the hosts until they are back
      }
      await calendar.release(ctx.reservation.id, ctx.started);
      return {};
    },
    async heal(ctx) {
      const recorded = Array.isArray(ctx.reservation.allocation?.host_ids) ? (ctx.reservation.allocation.host_ids as string[]) : [];
      const { hosts, stillFailed, alternative } = await calendar.heal(ctx);
      const ids = hosts.map((h) => h.id);
      const changed = ids.length !== recorded.length || ids.some((id) => !recorded.includes(id));
      if (changed && ctx.leaseStatus !== 'PENDING' && deps.cloud !== 'calendar-only') {
        // Replacements join the lease's aggregate first; then the hosts they replace are set aside (as at start: never in no aggregate).
        const nova = deps.cloud().nova;
        await moveHostsIntoLease(nova, await move(ctx));
        const aggregate = typeof ctx.reservation.allocation?.aggregate === 'string' ? ctx.reservation.allocation.aggregate : leaseAggregateFor(ctx.reservation.id).name;
        for (const id of recorded.filter((r) => !ids.includes(r))) {
          const host = (await listHosts(deps.pool, { id }))[0];
          if (host) await setFailedHostAside(nova, computeHostName(host), aggregate, { name: failedAggregate, closedProjectId: endAggregates.closedProjectId });
          ctx.reportProgress({ setAside: id });
        }
      }
      if (stillFailed.length > 0 && ctx.reservation.missing_resources !== true) await tellDegraded(ctx, stillFailed, alternative);
      if (changed) {
        // Once per new set of hosts: which left the reservation and which replaced them.
        const before = Array.isArray(ctx.reservation.allocation?.hosts) ? (ctx.reservation.allocation.hosts as string[]) : [];
        const after = hosts.map((h) => h.hypervisor_hostname);
        await ctx.announce({
          eventType: 'lease.healed',
          key: [...ids].sort().join(','),
          details: { hosts: after, hosts_removed: before.filter((h) => !after.includes(h)), hosts_added: after.filter((h) => !before.includes(h)), status: ctx.leaseStatus },
        });
      }
      return {
        allocation: { hosts: hosts.map((h) => h.hypervisor_hostname), host_ids: ids },
        resourceKeys: [...ids.map((id) => `host:${id}`), ...preemptionWaitKeys(ctx.reservation, ctx.leaseId, [])],
        missingResources: stillFailed.length > 0,
        // Shown on a pending reservation until its start (the workflow clears it then).
        resourcesChanged: ctx.leaseStatus === 'PENDING' && (ctx.reservation.resources_changed === true || changed),
      };
    },
    lend,
    /** Lendable hosts with no server of any project (calendar-only: every one). */
    async idleHosts(ctx) {
      const candidates = await lendCandidates(ctx);
      if (deps.cloud === 'calendar-only') return candidates.length;
      const { nova } = deps.cloud();
      let idle = 0;
      for (const { host } of candidates) {
        const servers = await nova.listServers({ all_tenants: true, host });
        if (!servers.some((s) => s.status !== 'DELETED' && s.status !== 'SOFT_DELETED')) idle++;
      }
      return idle;
    },
    async reclaim(ctx, request) {
      return calendar.reclaim({ reservationId: ctx.reservation.id, ...request });
    },
    async lentBy(ctx, lendingId) {
      const rows = await lendingsOfRequest(deps.pool, lendingId);
      return rows.length > 0 ? lentHostsOf(ctx, rows) : undefined;
    },
    reclaimingHosts: (ctx) => calendar.reclaimingHosts(ctx.reservation.id),
    putBackFenced: async (ctx) => (deps.cloud === 'calendar-only' ? [] : putFencedHostsBack(deps.cloud().nova, await move(ctx))),
    lentHostsFree: (ctx, hostIds) => calendar.lentHostsFree(ctx.reservation.id, hostIds),
    returnLentHosts,
    async placementOf(ctx) {
      return { hosts: (await bookedHosts(ctx)).map((h) => h.host) };
    },
  };
}
