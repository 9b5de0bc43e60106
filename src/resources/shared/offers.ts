/** How offers count a reservation whose count is its `amount` (instance slots, floating IPs, bandwidth ports). */
import type { OfferShape } from '../../domain/resource-plugin';

/** `amount` is both what it asks for and the least it accepts (an offer request's `min` may lower the latter). */
export function amountOffers<P extends { amount: number }>(shape: Pick<OfferShape<P>, 'describe' | 'footprint' | 'floor'>): OfferShape<P> {
  return {
    count: (params) => ({ asked: params.amount, least: params.amount }),
    withCount: (params, n) => ({ ...params, amount: n }),
    ...shape,
  };
}
