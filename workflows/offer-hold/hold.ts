/**
 * One offer hold (id `offer-hold-<hold id>`), started by the API once the hold is booked and
 * recorded. It waits until the hold's expiry, then ends the hold: its bookings go, unless it was
 * accepted meanwhile (then they are the lease's). A release or an accept by the API ends it early.
 * The database decides between an accept and the expiry (src/db/offer-holds.ts); every booking also
 * ends expired holds first, so capacity frees on time even while no worker runs this timer.
 */
import { condition, proxyActivities, setHandler } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import { offerHoldEnded, type OfferHoldInput, type OfferHoldOutcome } from './messages';

/** Ending a hold must happen (else its capacity stays booked until the next booking's cleanup): retried for a day. */
const ending = proxyActivities<Activities>({
  startToCloseTimeout: '30 seconds',
  scheduleToCloseTimeout: '1 day',
  retry: { initialInterval: '1 second', maximumInterval: '1 minute' },
});

export async function offerHoldWorkflow(input: OfferHoldInput): Promise<OfferHoldOutcome> {
  let ended = false;
  setHandler(offerHoldEnded, () => void (ended = true));
  if (input.expiresAtMs > Date.now()) await condition(() => ended, input.expiresAtMs - Date.now(), { summary: 'until the offer hold expires' });
  if (ended) return 'ended';
  // A no-op when the hold was accepted or released meanwhile (its row says so).
  await ending.endOfferHold({ holdId: input.holdId, reason: 'expired' });
  return 'expired';
}
