/**
 * Recording an offer hold whose reservations are booked, in the caller's transaction: the one
 * sequence behind both ways a hold is placed, by the API (booked and recorded in one transaction,
 * src/api/offer-holds.ts) and by the hold's workflow (the recordOfferHold activity).
 */
import { ApplicationFailure } from '@temporalio/common';
import type { PoolClient } from 'pg';
import { insertOfferHold, lockOfferHold, type NewOfferHold } from '../db/offer-holds';
import { keepOfferFor } from '../db/offers';
import { LeaseErrorType } from '../domain/lease';
import type { UsagePolicyEnforcer } from './enforcement';

/** A hold whose reservations are booked, to be recorded. */
export interface BookedOfferHold {
  hold: NewOfferHold;
  byAdmin: boolean;
  /** The offer outlives its hold until then, so that an accept after the hold's expiry still finds it. */
  keepOfferUntilMs: number;
  /** The caller stops waiting then (a hold its workflow places): a hold recorded later would be held for no one. */
  placeByMs?: number;
}

/**
 * The usage policy's checks for one more hold (checkOfferHold: max_offer_holds, then the lease's
 * own rules), then the hold's row and its offer kept for it. 'recorded-before': this very hold is
 * recorded and holds (a retried record); 'offer-held': the offer has another hold, or this one
 * ended (an offer is held once, ever), and nothing was recorded. Throws UsagePolicyRefusal.
 */
export async function recordBookedOfferHold(client: PoolClient, usagePolicy: UsagePolicyEnforcer | undefined, booked: BookedOfferHold): Promise<'recorded' | 'recorded-before' | 'offer-held'> {
  const { hold, byAdmin, keepOfferUntilMs, placeByMs } = booked;
  await usagePolicy?.checkOfferHold(client, hold.lease, byAdmin);
  if (placeByMs !== undefined && Date.now() > placeByMs) {
    throw ApplicationFailure.nonRetryable('the offer hold was not placed before its caller stopped waiting (LK_API_WORKFLOW_TIMEOUT_MS): try again', LeaseErrorType.unavailable);
  }
  if ((await insertOfferHold(client, hold)) === 'offer-held') return (await lockOfferHold(client, hold.id))?.state === 'held' ? 'recorded-before' : 'offer-held';
  await keepOfferFor(client, hold.offerId, keepOfferUntilMs);
  return 'recorded';
}
