/**
 * The resource plugins' hooks as activities: the lease workflow calls these with the reservation,
 * and each dispatches to the plugin for the reservation's resource type.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { HealResult, ReservationContext, ReserveResult, ResourcePlugin, ResourcePlugins } from '../src/resources/plugin';

export function reservationActivities({ plugins }: { plugins: ResourcePlugins }) {
  function pluginFor(ctx: ReservationContext): ResourcePlugin {
    const plugin = plugins.get(ctx.reservation.resource_type);
    if (!plugin) {
      throw ApplicationFailure.nonRetryable(`no resource plugin for ${ctx.reservation.resource_type} on this worker`, 'UnknownResourceType');
    }
    return plugin;
  }
  return {
    reserveReservation: (ctx: ReservationContext): Promise<ReserveResult> => pluginFor(ctx).reserve(ctx),
    startReservation: (ctx: ReservationContext): Promise<void> => pluginFor(ctx).start(ctx),
    beforeEndReservation: (ctx: ReservationContext): Promise<void> => pluginFor(ctx).beforeEnd(ctx),
    endReservation: (ctx: ReservationContext & { started: boolean }): Promise<void> => pluginFor(ctx).end(ctx),
    healReservation: (ctx: ReservationContext): Promise<HealResult> => pluginFor(ctx).heal(ctx),
  };
}
