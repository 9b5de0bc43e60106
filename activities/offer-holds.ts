/**
 * Offer holds as activities: recording a hold its workflow placed (the policy's checks and the row
 * in one transaction), and ending one (idempotent: an accepted or ended hold is left as it is).
 */
import { ApplicationFailure } from '@temporalio/common';
import type { PoolClient } from 'pg';
import { leaseConflict, LeaseErrorType, type Lease } from '../src/domain/lease';
import { endOfferHold, findOfferHold, insertOfferHold, lockOfferHold, type OfferHoldEndReason, type OfferHoldState } from '../src/db/offer-holds';
import { keepOfferFor } from '../src/db/offers';
import { inTransaction } from '../src/db/transaction';
import { policyFailure } from '../src/policy/enforcement';
import type { ActivityDeps } from './deps';

/** A hold its workflow booked, to be recorded. */
export interface PlacedOfferHold {
  hold: { id: string; offerId: string; projectId: string; userId: string; lease: Lease; expiresAtMs: number };
  byAdmin: boolean;
  /** The offer outlives its hold until then, so that an accept after the hold's expiry still finds it. */
  keepOfferUntilMs: number;
  /** The API's caller has stopped waiting by then: a hold recorded later would be held for no one. */
  placeByMs: number;
}

export function offerHoldActivities({ pool, usagePolicy }: ActivityDeps) {
  return {
    /** The hold's state afterwards (undefined: no such hold), so that its workflow leaves an accepted hold's bookings to the lease. */
    async endOfferHold({ holdId, reason }: { holdId: string; reason: OfferHoldEndReason }): Promise<OfferHoldState | undefined> {
      return inTransaction(pool, (client) => endOfferHold(client, holdId, reason));
    },

    /**
     * Records a hold whose reservations its workflow booked: Blazar's external filter (if
     * configured), then max_offer_holds and the lease's own rules, the row and the offer's new
     * expiry in one transaction. Refusals are final (policyFailure); a retry of a record that
     * committed finds its row and does nothing.
     */
    async recordOfferHold({ hold, byAdmin, keepOfferUntilMs, placeByMs }: PlacedOfferHold): Promise<void> {
      const earlier = await findOfferHold(pool, hold.offerId, hold.projectId);
      if (earlier?.id === hold.id && earlier.state === 'held') return;
      const record = async (client: PoolClient) => {
        if (Date.now() > placeByMs) {
          throw ApplicationFailure.nonRetryable('the offer hold was not placed before its caller stopped waiting (LK_API_WORKFLOW_TIMEOUT_MS): try again', LeaseErrorType.unavailable);
        }
        if ((await insertOfferHold(client, hold)) === 'offer-held') {
          if ((await lockOfferHold(client, hold.id))?.state === 'held') return;
          throw leaseConflict(`offer ${hold.offerId} was held already: accept it (re-checked) or ask for new offers`);
        }
        await keepOfferFor(client, hold.offerId, keepOfferUntilMs);
      };
      try {
        await (usagePolicy ? usagePolicy.recordOfferHold(hold.lease, byAdmin, record) : inTransaction(pool, record));
      } catch (err) {
        throw policyFailure(err);
      }
    },
  };
}
