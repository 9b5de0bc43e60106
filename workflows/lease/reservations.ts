/** Pure helpers on a lease's reservations: what their hooks reported, merged in. */
import type { Reservation } from '../../src/domain/lease';
import type { HealOutcome } from '../../src/domain/resource-plugin';

/** Reservations with what their hooks reported merged into their allocations. */
export function withAllocations(reservations: Reservation[], allocations: Map<string, Record<string, unknown>>): Reservation[] {
  return reservations.map((r) => (allocations.has(r.id) ? { ...r, allocation: { ...r.allocation, ...allocations.get(r.id) } } : r));
}

/** The reservation as its type's heal hook reports it now (flags present only when set). */
export function healed(reservation: Reservation, outcome: HealOutcome): Reservation {
  let next: Reservation = {
    ...reservation,
    allocation: { ...reservation.allocation, ...outcome.allocation },
    resourceKeys: outcome.resourceKeys ?? reservation.resourceKeys,
  };
  next = outcome.missingResources ? { ...next, missing_resources: true } : withoutFlag(next, 'missing_resources');
  return outcome.resourcesChanged ? { ...next, resources_changed: true } : withoutFlag(next, 'resources_changed');
}

export function withoutFlag(reservation: Reservation, flag: 'missing_resources' | 'resources_changed'): Reservation {
  if (!(flag in reservation)) return reservation;
  const copy = { ...reservation };
  delete copy[flag];
  return copy;
}
