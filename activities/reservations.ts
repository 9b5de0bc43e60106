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
import type { ReservationNotice } from '../src/domain/notices';
import { findLease } from '../src/db/leases';
import type { Pool } from '../src/db/pool';
import type { NoticeService } from '../src/notifications/service';
import { reserveFor, typedContext, type EndOutcome, type EndRequest, type HealOutcome, type HoldOutcome, type HookContext, type ReservationContext, type ReserveResult, type ResourcePlugin, type ResourcePlugins, type StartOutcome, type StepOutcome } from '../src/domain/resource-plugin';

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

export function reservationActivities({ plugins, notices, pool }: { plugins: ResourcePlugins; notices?: NoticeService; pool: Pool }) {
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
    /** The end hook again, as a poll: fails (to be retried by the workflow's policy) until nothing is left to wait for. */
    awaitReservationEnd: async (ctx: EndRequest): Promise<void> => {
      const { waitingFor } = await run(ctx, (plugin, hookCtx) => plugin.end(hookCtx));
      if (waitingFor) throw ApplicationFailure.retryable(waitingFor, 'ResourcesStillInUse');
    },
  };
}
