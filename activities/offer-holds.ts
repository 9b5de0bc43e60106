/** Offer holds as activities: ending one at its expiry (idempotent: an accepted or ended hold is left as it is). */
import { endOfferHold, type OfferHoldEndReason } from '../src/db/offer-holds';
import { inTransaction } from '../src/db/transaction';
import type { ActivityDeps } from './deps';

export function offerHoldActivities({ pool }: ActivityDeps) {
  return {
    async endOfferHold({ holdId, reason }: { holdId: string; reason: OfferHoldEndReason }): Promise<void> {
      await inTransaction(pool, (client) => endOfferHold(client, holdId, reason));
    },
  };
}
