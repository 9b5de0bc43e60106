/**
 * The resource plugins' hooks as activities: the lease workflow calls these with the reservation,
 * and each dispatches to the plugin for the reservation's resource type. An OpenStack failure that
 * cannot succeed by trying again (4xx, missing settings) becomes non-retryable here; 5xx, time-outs
 * and Placement generation conflicts are left to the workflow's retry policies.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { OpenStackConfigError, OpenStackError, publicMessage, ResourceFailedError, WaitTimeoutError, withoutInternals } from '../src/openstack/errors';
import type { EndContext, EndOutcome, HealResult, ReservationContext, ReserveResult, ResourcePlugin, ResourcePlugins, StartOutcome, StepOutcome } from '../src/domain/resource-plugin';

/** How often a running hook tells the server its worker is alive (the workflow sets a heartbeat timeout a few times longer). */
export const LIVENESS_HEARTBEAT_MS = 5_000;

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

export function reservationActivities({ plugins }: { plugins: ResourcePlugins }) {
  function pluginFor(ctx: ReservationContext): ResourcePlugin {
    const plugin = plugins.get(ctx.reservation.resource_type);
    if (!plugin) {
      throw ApplicationFailure.nonRetryable(`no resource plugin for ${ctx.reservation.resource_type} on this worker`, 'UnknownResourceType');
    }
    return plugin;
  }
  return {
    reserveReservation: (ctx: ReservationContext): Promise<ReserveResult> => classified(() => pluginFor(ctx).reserve(ctx)),
    holdReservation: (ctx: ReservationContext): Promise<void> =>
      classified(async () => {
        await pluginFor(ctx).hold?.(ctx);
      }),
    startReservation: (ctx: ReservationContext): Promise<StartOutcome> => classified(async () => (await pluginFor(ctx).start(ctx)) ?? {}),
    startReservationStep: (input: ReservationContext & { step: string; state: Record<string, unknown> }): Promise<StepOutcome> =>
      classified(() => {
        const { step, state, ...ctx } = input;
        const plugin = pluginFor(ctx);
        if (!plugin.startStep) throw ApplicationFailure.nonRetryable(`${ctx.reservation.resource_type} has no start steps`, 'UnknownStartStep');
        return plugin.startStep(step, ctx, state);
      }),
    beforeEndReservation: (ctx: ReservationContext): Promise<void> => classified(() => pluginFor(ctx).beforeEnd(ctx)),
    endReservation: (ctx: EndContext): Promise<EndOutcome> => classified(() => pluginFor(ctx).end(ctx)),
    /** The end hook again, as a poll: fails (to be retried by the workflow's policy) until nothing is left to wait for. */
    awaitReservationEnd: async (ctx: EndContext): Promise<void> => {
      const { waitingFor } = await classified(() => pluginFor(ctx).end(ctx));
      if (waitingFor) throw ApplicationFailure.retryable(waitingFor, 'ResourcesStillInUse');
    },
    healReservation: (ctx: ReservationContext): Promise<HealResult> => classified(() => pluginFor(ctx).heal(ctx)),
  };
}
