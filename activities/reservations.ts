/**
 * The resource plugins' hooks as activities: the lease workflow calls these with the reservation,
 * and each dispatches to the plugin for the reservation's resource type. An OpenStack failure that
 * cannot succeed by trying again (4xx, missing settings) becomes non-retryable here; 5xx, time-outs
 * and Placement generation conflicts are left to the workflow's retry policies.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { OpenStackConfigError, OpenStackError, publicMessage, ResourceFailedError, WaitTimeoutError, withoutInternals } from '../src/openstack/errors';
import { invalidLease } from '../src/domain/lease';
import { DEFAULT_PREEMPT_WARNING_MS, defaultReclaimNeed } from '../src/domain/preemption';
import type { ReservationNotice } from '../src/domain/notices';
import { findLease } from '../src/db/leases';
import type { ActivityDeps } from './deps';
import { reserveFor, typedContext, type LendHostsRequest, type LentHosts, type EndOutcome, type ReclaimedHosts, type EndRequest, type HealOutcome, type HoldOutcome, type HookContext, type ReservationContext, type ReserveResult, type ResourcePlugin, type StartOutcome, type StepOutcome } from '../src/domain/resource-plugin';

/** How often a running hook tells the server its worker is alive (the workflow sets a heartbeat timeout a few times longer). */
export const LIVENESS_HEARTBEAT_MS = 2_000;

async function classified<T>(hook: () => Promise<T>): Promise<T> {
  // A worker killed mid-hook is noticed by its missing heartbeats, and the hook retried elsewhere
  // within the heartbeat timeout instead of after the whole start-to-close timeout.
  const context = Context.current();
  const alive = context.info.isLocal ? undefined : setInterval(() => context.heartbeat(), LIVENESS_HEARTBEAT_MS);
  try {
    return await hook();
  } catch (err) {
    if (err instanceof OpenStackConfigError) throw ApplicationFailure.nonRetryable(err.message, err.name);
    if (err instanceof OpenStackError) {
      // The lease's status_reason and the API's errors get the class, status and reason; the log gets where the call went.
      context.log.warn('OpenStack call failed', { error: err.message, service: err.service, requestId: err.requestId, retryable: err.retryable });
      throw ApplicationFailure.create({ message: publicMessage(err), type: err.name, nonRetryable: !err.retryable });
    }
    if (err instanceof WaitTimeoutError || err instanceof ResourceFailedError) {
      context.log.warn('waiting for an OpenStack resource failed', { error: err.message, lastSeen: err.lastSeen });
      throw ApplicationFailure.create({ message: withoutInternals(err.message), type: err.name, nonRetryable: !err.retryable });
    }
    throw err;
  } finally {
    clearInterval(alive);
  }
}

/** LK_PREEMPT_EVICTION_SECONDS's default, for a worker built without the setting (tests). */
const DEFAULT_EVICTION_MS = 120_000;

export function reservationActivities({ plugins, notices, pool, preemptionWarningMs, preemptionEvictionMs, tellPreempted }: Pick<ActivityDeps, 'plugins' | 'notices' | 'pool' | 'preemptionWarningMs' | 'preemptionEvictionMs' | 'tellPreempted'>) {
  /** A hook's notice as one of its lease: the lease as last recorded in the payload, the reservation named. */
  async function announce(ctx: ReservationContext, { eventType, details, key }: ReservationNotice): Promise<void> {
    if (!notices) return;
    try {
      const lease = await findLease(pool, ctx.leaseId);
      await notices.announce({
        id: [ctx.leaseId, ctx.reservation.id, eventType, ...(key ? [key] : [])].join(':'),
        eventType,
        occurredMs: Date.now(),
        projectId: ctx.projectId,
        ...(lease ? { lease } : {}),
        details: { reservation_id: ctx.reservation.id, resource_type: ctx.reservation.resource_type, ...details },
      });
    } catch (err) {
      // Best effort: the hook's work (a heal, a before-end action) must not be undone by a notice.
      Context.current().log.warn('a reservation notice could not be announced', { leaseId: ctx.leaseId, eventType, error: (err as Error).message });
    }
  }

  function pluginFor(ctx: ReservationContext): ResourcePlugin {
    const plugin = plugins.get(ctx.reservation.resource_type);
    if (!plugin) {
      throw ApplicationFailure.nonRetryable(`no resource plugin for ${ctx.reservation.resource_type} on this worker`, 'UnknownResourceType');
    }
    return plugin;
  }

  /** The hook's view of the world beyond its reservation: progress reports to this activity, and the other reservations' types. */
  function hookContext<T extends ReservationContext>(ctx: T): T & HookContext {
    return {
      ...ctx,
      announce: (notice) => announce(ctx, notice),
      reportProgress: (details) => {
        const activity = Context.current();
        if (!activity.info.isLocal) activity.heartbeat(details);
      },
      // A local attempt is never told it was given up on (its retry may run beside it): no signal.
      ...(Context.current().info.isLocal ? {} : { signal: Context.current().cancellationSignal }),
      placementOf: async (reservationId) => {
        const other = ctx.leaseReservations.find((r) => r.id === reservationId);
        if (!other) throw invalidLease(`the lease has no reservation ${reservationId}`);
        const type = pluginFor({ ...ctx, reservation: other });
        return type.placementOf ? type.placementOf(typedContext(type, hookContext({ ...ctx, reservation: other }))) : { hosts: [] };
      },
    };
  }

  /** Runs one hook of the reservation's plugin, classified and kept alive (see `classified`). */
  // The reservation's parameters were parsed by its type's schema at the API and stored so: handed
  // to the hook as that type's parameters (typedContext), not parsed again.
  const run = <C extends ReservationContext, T>(ctx: C, hook: (plugin: ResourcePlugin, ctx: C & HookContext) => Promise<T>): Promise<T> =>
    classified(() => {
      const plugin = pluginFor(ctx);
      return hook(plugin, typedContext(plugin, hookContext(ctx)));
    });

  return {
    reserveReservation: (ctx: ReservationContext): Promise<ReserveResult> => run(ctx, reserveFor),
    holdReservation: (ctx: ReservationContext): Promise<HoldOutcome> => run(ctx, async (plugin, hookCtx) => (await plugin.hold?.(hookCtx)) ?? {}),
    startReservation: (ctx: ReservationContext): Promise<StartOutcome> =>
      run(ctx, async (plugin, hookCtx) => {
        if (!plugin.start) throw ApplicationFailure.nonRetryable(`${ctx.reservation.resource_type} starts in steps, not in one`, 'NoStartHook');
        return (await plugin.start(hookCtx)) ?? {};
      }),
    /** Why the reservation's start will wait, if it will (its type's `startWaitReason`): shown as the lease's status_reason meanwhile. */
    startWaitReason: (ctx: ReservationContext): Promise<string | undefined> => run(ctx, async (plugin, hookCtx) => (plugin.startWaitReason ? plugin.startWaitReason(hookCtx) : undefined)),
    startReservationStep: ({ step, state, ...ctx }: ReservationContext & { step: string; state: Record<string, unknown> }): Promise<StepOutcome> =>
      run(ctx, (plugin, hookCtx) => {
        if (!plugin.startStep) throw ApplicationFailure.nonRetryable(`${ctx.reservation.resource_type} has no start steps`, 'UnknownStartStep');
        return plugin.startStep(step, hookCtx, state);
      }),
    beforeEndReservation: (ctx: ReservationContext): Promise<void> => run(ctx, async (plugin, hookCtx) => void (await plugin.beforeEnd?.(hookCtx))),
    endReservation: (ctx: EndRequest): Promise<EndOutcome> => run(ctx, (plugin, hookCtx) => plugin.end(hookCtx)),
    /** Whether the lessee uses the reservation's resources now (idle-lease reaping); undefined: its type cannot tell. */
    reservationInUse: (ctx: ReservationContext): Promise<boolean | undefined> => run(ctx, async (plugin, hookCtx) => (plugin.inUse ? plugin.inUse(hookCtx) : undefined)),
    /** After hosts failed or recovered; a type without a heal hook has nothing to heal (undefined). */
    healReservation: (ctx: ReservationContext): Promise<HealOutcome | undefined> => run(ctx, async (plugin, hookCtx) => (plugin.heal ? plugin.heal(hookCtx) : undefined)),
    /** Lending (issue 43): lends idle hosts of the reservation (its type's `lend`; a type without it cannot lend: 400). */
    lendReservation: ({ lendingId, count, untilMs, ...ctx }: ReservationContext & LendHostsRequest): Promise<LentHosts> =>
      run(ctx, (plugin, hookCtx) => {
        if (!plugin.lend) throw invalidLease(`reservation ${ctx.reservation.id} is ${ctx.reservation.resource_type}, which cannot lend`);
        return plugin.lend(hookCtx, { lendingId, count, untilMs });
      }),
    /**
     * Takes lent hosts back, needed from `neededFromMs` (now + the preemption warning and the telling when absent;
     * never before now); the borrowers cut are told right after the commit (the sweeps cover a crash).
     */
    reclaimReservation: async ({ count, neededFromMs, lentHostIds, ...ctx }: ReservationContext & { count?: number; neededFromMs?: number; lentHostIds: string[] }) => {
      const now = Date.now();
      const need = Math.max(neededFromMs ?? defaultReclaimNeed(now, preemptionWarningMs ?? DEFAULT_PREEMPT_WARNING_MS), now);
      const reclaimed = await run(ctx, (plugin, hookCtx) => {
        if (!plugin.reclaim) throw invalidLease(`reservation ${ctx.reservation.id} is ${ctx.reservation.resource_type}, which cannot lend`);
        return plugin.reclaim(hookCtx, { count, neededFromMs: need, lentHostIds });
      });
      tellPreempted?.(reclaimed.cut);
      return { hosts: reclaimed.hosts, neededFromMs: need };
    },
    /** What a lend request lent, none when nothing (a lend whose answer was lost: the workflow records what it finds). */
    lentByRequest: ({ lendingId, ...ctx }: ReservationContext & { lendingId: string }): Promise<LentHosts | undefined> =>
      run(ctx, async (plugin, hookCtx) => (plugin.lentBy ? plugin.lentBy(hookCtx, lendingId) : undefined)),
    /** After a lend that lent nothing, its every try given up on: the hosts its tries left fenced go back into the lease. */
    putBackFencedHosts: (ctx: ReservationContext): Promise<string[]> => run(ctx, async (plugin, hookCtx) => (plugin.putBackFenced ? plugin.putBackFenced(hookCtx) : [])),
    /** The reservation's hosts being reclaimed and not back yet (a reclaim whose answer was lost: the workflow records what it finds). */
    reclaimingHostsOf: (ctx: ReservationContext): Promise<ReclaimedHosts['hosts']> =>
      run(ctx, async (plugin, hookCtx) => (plugin.reclaimingHosts ? plugin.reclaimingHosts(hookCtx) : [])),
    /**
     * A poll (retried by the workflow's policy) until no borrower runs on these lent hosts, due back
     * at `dueMs`; never past the eviction bound after it (LK_PREEMPT_EVICTION_SECONDS): then the hosts come back anyway.
     */
    awaitLentHostsFree: async ({ hostIds, dueMs, ...ctx }: ReservationContext & { hostIds: string[]; dueMs: number }): Promise<void> => {
      if (Date.now() >= dueMs + (preemptionEvictionMs ?? DEFAULT_EVICTION_MS)) return;
      const free = await run(ctx, async (plugin, hookCtx) => (plugin.lentHostsFree ? plugin.lentHostsFree(hookCtx, hostIds) : true));
      if (!free) throw ApplicationFailure.retryable(`borrowers still run on lent hosts ${hostIds.join(', ')}`, 'LentHostsInUse');
    },
    /**
     * How many of the reservation's hosts could be lent now (the idle check's suggestion); 0 when less
     * than twice the preemption warning is left (a lending must outlast it), or its type cannot lend.
     */
    idleHostsOf: async (ctx: ReservationContext): Promise<number> => {
      if (ctx.endMs - Date.now() < 2 * (preemptionWarningMs ?? DEFAULT_PREEMPT_WARNING_MS)) return 0;
      return run(ctx, async (plugin, hookCtx) => (plugin.idleHosts ? plugin.idleHosts(hookCtx) : 0));
    },
    /** The lent hosts back into the reservation, their lendings returned. */
    returnLentHosts: ({ hostIds, ...ctx }: ReservationContext & { hostIds: string[] }): Promise<void> =>
      run(ctx, async (plugin, hookCtx) => void (await plugin.returnLentHosts?.(hookCtx, hostIds))),
    /** The end hook again, as a poll: fails (to be retried by the workflow's policy) until nothing is left to wait for. */
    awaitReservationEnd: async (ctx: EndRequest): Promise<void> => {
      const { waitingFor } = await run(ctx, (plugin, hookCtx) => plugin.end(hookCtx));
      if (waitingFor) throw ApplicationFailure.retryable(waitingFor, 'ResourcesStillInUse');
    },
  };
}
