/**
 * One offer hold (id `offer-hold-<hold id>`). It waits until the hold's expiry, then ends the hold:
 * its bookings go, unless it was accepted meanwhile (then they are the lease's). A release or an
 * accept by the API ends it early. The database decides between an accept and the expiry
 * (src/db/offer-holds.ts); every booking also ends expired holds first, so capacity frees on time
 * even while no worker runs this timer.
 *
 * Two beginnings. The API books most host holds itself, then starts this workflow (no `placement`).
 * Any other hold the workflow places (`placement`, the placeOfferHold update sent with the start):
 * each reservation's reserve hook (it may call the cloud), Blazar's external filter and the usage
 * policy, then the row; on any failure what was booked is ended at once and the update fails as a
 * create would. A placement its caller stopped waiting for (placeByMs) is undone, never left held.
 */
import { ApplicationFailure, CancellationScope, condition, log, proxyActivities, setHandler } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import { LeaseErrorType, type Lease } from '../../src/domain/lease';
import { bookedReservation, reservationContext } from '../../src/domain/resource-plugin';
import { mustFinish, quick } from '../lease/activity-options';
import { asFailure, failureMessage } from '../lease/failures';
import { offerHoldEnded, placeOfferHold, type OfferHoldInput, type OfferHoldOutcome, type OfferHoldPlacement } from './messages';

/** Ending a hold must happen (else its capacity stays booked until the next booking's cleanup): retried for a day. */
const ending = proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  scheduleToCloseTimeout: '1 day',
  retry: { initialInterval: '1 second', maximumInterval: '1 minute' },
});

type Placement = { step: 'waiting' | 'placing' } | { step: 'placed'; lease: Lease } | { step: 'refused'; failure: ApplicationFailure };

export async function offerHoldWorkflow(input: OfferHoldInput): Promise<OfferHoldOutcome> {
  let ended = false;
  setHandler(offerHoldEnded, () => void (ended = true));
  if (input.placement) {
    const placed = await awaitPlacement(input, input.placement, () => ended);
    if (placed !== 'placed') return placed;
  }
  if (input.expiresAtMs > Date.now()) await condition(() => ended, input.expiresAtMs - Date.now(), { summary: 'until the offer hold expires' });
  if (input.placement) return endPlaced(input, input.placement, ended ? 'released' : 'expired');
  if (ended) return 'ended';
  // A no-op when the hold was accepted or released meanwhile (its row says so).
  await ending.endOfferHold({ holdId: input.holdId, reason: 'expired' });
  return 'expired';
}

/** Answers placeOfferHold (once: a retried update gets the same answer) and waits until the placement is settled. */
async function awaitPlacement(input: OfferHoldInput, placement: OfferHoldPlacement, isEnded: () => boolean): Promise<'placed' | 'refused' | 'not-placed'> {
  let state: Placement = { step: 'waiting' };
  const current = (): Placement => state;
  const settled = () => current().step === 'placed' || current().step === 'refused';
  setHandler(placeOfferHold, async () => {
    if (current().step === 'waiting') {
      state = { step: 'placing' };
      state = await place(input, placement, isEnded);
    }
    await condition(settled);
    const outcome = current();
    if (outcome.step === 'refused') throw outcome.failure;
    return (outcome as { lease: Lease }).lease;
  });
  // The update comes with the start; without it by placeByMs, its caller is gone and nothing was booked.
  if (!(await condition(() => current().step !== 'waiting', Math.max(1, placement.placeByMs - Date.now())))) return 'not-placed';
  await condition(settled);
  return current().step === 'placed' ? 'placed' : 'refused';
}

/** Books each reservation, then records the hold; on any failure ends what was booked (whatever happens) and refuses. */
async function place(input: OfferHoldInput, { draft, byAdmin, keepOfferUntilMs, placeByMs }: OfferHoldPlacement, isEnded: () => boolean): Promise<Placement> {
  const inTime = () => {
    if (isEnded() || Date.now() > placeByMs) throw ApplicationFailure.nonRetryable('the offer hold was not placed before its caller stopped waiting (LK_API_WORKFLOW_TIMEOUT_MS): try again', LeaseErrorType.unavailable);
  };
  try {
    const reservations = [];
    for (const reservation of draft.reservations) {
      inTime();
      reservations.push(bookedReservation(reservation, await quick.reserveReservation(reservationContext(draft, reservation))));
    }
    inTime();
    const lease: Lease = { ...draft, reservations };
    const { projectId, userId } = draft;
    await quick.recordOfferHold({ hold: { id: input.holdId, offerId: input.offerId, projectId, userId, lease, expiresAtMs: input.expiresAtMs }, byAdmin, keepOfferUntilMs, placeByMs });
    return { step: 'placed', lease };
  } catch (err) {
    const failure = asFailure(err);
    await CancellationScope.nonCancellable(() => endPlaced(input, { draft, byAdmin, keepOfferUntilMs, placeByMs }, 'refused')).catch((undo: unknown) => {
      // Its own failure must not hide why the hold was refused; the expiry and the next bookings' cleanup end it still.
      log.error('ending a refused offer hold failed', { holdId: input.holdId, error: failureMessage(undo) });
    });
    return { step: 'refused', failure };
  }
}

/**
 * Ends a hold its workflow placed: the row and the calendars' rows (nothing once accepted), then
 * each reservation's end hook, which takes back what its reserve made beyond the rows.
 */
async function endPlaced(input: OfferHoldInput, { draft }: OfferHoldPlacement, reason: 'released' | 'expired' | 'refused'): Promise<OfferHoldOutcome> {
  const state = await ending.endOfferHold({ holdId: input.holdId, reason });
  if (state === 'accepted') return 'ended';
  // The reservations as drafted, as a refused admission ends them: a hold never set anything aside (no `hold` hook ran).
  for (const reservation of draft.reservations) {
    const outcome = await mustFinish.endReservation({ ...reservationContext(draft, reservation), started: false, force: true });
    if (outcome?.waitingFor) log.warn('an ended offer hold left something behind', { holdId: input.holdId, reservationId: reservation.id, waitingFor: outcome.waitingFor });
  }
  return reason === 'expired' ? 'expired' : reason === 'refused' ? 'refused' : 'ended';
}
