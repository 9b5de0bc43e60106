/**
 * Offer holds as activities: recording a hold its workflow placed (the policy's checks and the row
 * in one transaction), and ending one (idempotent: an accepted or ended hold is left as it is).
 */
import { leaseConflict } from '../src/domain/lease';
import { endOfferHold, findOfferHold, type OfferHoldEndReason, type OfferHoldState } from '../src/db/offer-holds';
import { inTransaction } from '../src/db/transaction';
import { policyFailure } from '../src/policy/enforcement';
import { recordBookedOfferHold, type BookedOfferHold } from '../src/policy/offer-holds';
import type { ActivityDeps } from './deps';

/** A hold its workflow booked, to be recorded by `placeByMs`, when the API's caller stops waiting. */
export interface PlacedOfferHold extends BookedOfferHold {
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
    async recordOfferHold(placed: PlacedOfferHold): Promise<void> {
      const { hold } = placed;
      const earlier = await findOfferHold(pool, hold.offerId, hold.projectId);
      if (earlier?.id === hold.id && earlier.state === 'held') return;
      try {
        await usagePolicy?.askExternalFilter(hold.lease);
        const recorded = await inTransaction(pool, (client) => recordBookedOfferHold(client, usagePolicy, placed));
        if (recorded === 'offer-held') throw leaseConflict(`offer ${hold.offerId} was held already: accept it (re-checked) or ask for new offers`);
      } catch (err) {
        throw policyFailure(err);
      }
    },
  };
}
