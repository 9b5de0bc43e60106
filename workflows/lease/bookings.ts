/** Booking a lease's reservations for its window, and taking them back (the end hooks), for every phase. */
import { CancellationScope, condition, patched, setCurrentDetails, sleep } from '@temporalio/workflow';
import type { Lease, Reservation } from '../../src/domain/lease';
import { bookedReservation, reservationContext as context, type EndOutcome, type ReservationContext } from '../../src/domain/resource-plugin';
import { ONE_ROLLBACK_FOR_UPDATES } from '../patches';
import { mustFinish, polling, quick } from './activity-options';
import { compensate } from './record';
import { ignorePreemptionsUpTo, type LeaseState } from './state';
import { describeWaitingForEnd } from './web-ui';

/**
 * Books every reservation for `target`'s window (reserve is idempotent per reservation, so
 * booking again moves the booking). `movedFrom`: histories from before the patch put the bookings
 * already moved back to it here, before the update's own rollback did it again. `via`: quick
 * for a booking someone waits for, mustFinish for a rollback. `booked`: filled as they are booked
 * (after a failure: those that moved). `only`: book only these reservations (a rollback's).
 */
export async function book(s: LeaseState, target: Lease, movedFrom?: Lease, via: typeof quick = quick, booked: Reservation[] = [], only?: ReadonlySet<string>): Promise<Reservation[]> {
  try {
    for (const reservation of target.reservations) {
      if (only && !only.has(reservation.id)) continue;
      const result = await via.reserveReservation(context(target, reservation));
      if (result.preemptionSequence !== undefined) ignorePreemptionsUpTo(s, result.preemptionSequence);
      booked.push(bookedReservation(reservation, result));
    }
    return booked;
  } catch (err) {
    if (movedFrom && !patched(ONE_ROLLBACK_FOR_UPDATES.id)) {
      await compensate(s, 'putting moved bookings back', async () => {
        for (const reservation of booked) await mustFinish.reserveReservation(context(movedFrom, reservation));
      });
    }
    throw err;
  }
}

/**
 * Runs every reservation's end hook: takes resources back (if started) and frees the bookings.
 * A hook that is still waiting (e.g. recycling hosts until their last server is gone) is polled
 * until it is done; a delete meanwhile (or `force`) makes it take everything back at once.
 */
export async function releaseAll(s: LeaseState, of: Lease, started: boolean, force = false): Promise<Map<string, Record<string, unknown>>> {
  const allocations = new Map<string, Record<string, unknown>>();
  for (const reservation of of.reservations) {
    if (reservation.status === 'deleted') continue;
    const ctx = { ...context(of, reservation), started, force };
    let outcome: EndOutcome | undefined = await mustFinish.endReservation(ctx);
    if (outcome?.waitingFor) outcome = await waitForEnd(s, ctx, outcome); // (histories from before end outcomes carry none)
    if (outcome?.allocation) allocations.set(reservation.id, outcome.allocation);
  }
  return allocations;
}

/** Frees every booking of a lease that never started, whatever happens (cancellation included). */
export function releaseUnstarted(s: LeaseState): Promise<Map<string, Record<string, unknown>>> {
  return CancellationScope.nonCancellable(() => releaseAll(s, s.lease, false));
}

/** Polls a waiting end hook until it is done; returns its last outcome. */
async function waitForEnd(s: LeaseState, ctx: ReservationContext & { started: boolean; force: boolean }, outcome: EndOutcome): Promise<EndOutcome | undefined> {
  const show = (o: EndOutcome) => setCurrentDetails(describeWaitingForEnd(s.lease, o.waitingFor!));
  const intervalOf = (o: EndOutcome) => Math.min(Math.max(o.recheckAfterMs ?? 15_000, 1_000), 5 * 60_000);
  show(outcome);
  let next: EndOutcome | undefined = outcome;
  if (!ctx.force) {
    // Polled by retries of one activity until its owner lets go, unless a delete comes first.
    const scope = new CancellationScope();
    const done = scope.run(() => polling(intervalOf(outcome)).awaitReservationEnd(ctx));
    const deleted = condition(() => s.deletion !== 'none');
    if ((await Promise.race([done.then(() => 'done' as const), deleted.then(() => 'deleted' as const)])) === 'done') return undefined;
    scope.cancel();
    await done.catch(() => undefined);
    next = await mustFinish.endReservation({ ...ctx, force: true });
  }
  // Forced: nothing waits for its owner any more, only for what cannot be hurried (servers being deleted).
  while (next?.waitingFor) {
    show(next);
    await sleep(intervalOf(next));
    next = await mustFinish.endReservation({ ...ctx, force: true });
  }
  return next;
}
