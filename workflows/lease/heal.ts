/**
 * Healing, from the host monitor (hostsChanged): hosts the lease is booked on failed or came back;
 * each reservation's type heals it (re-books a pending one elsewhere, replaces failed hosts of an
 * active one) and says what is missing.
 */
import { log } from '@temporalio/workflow';
import type { Reservation } from '../../src/domain/lease';
import { reservationContext as context, type HealOutcome } from '../../src/domain/resource-plugin';
import { healing } from './activity-options';
import { failureMessage } from './failures';
import { transition } from './record';
import { healed } from './reservations';
import type { LeaseState } from './state';

/** The hostsChanged signal's handler: signals that arrive while a heal waits for the lock join it. */
export async function healWhenFree(s: LeaseState, hostIds: string[]): Promise<void> {
  if (s.healQueued) return;
  s.healQueued = true;
  await s.lock.run(async () => {
    s.healQueued = false;
    await heal(s, hostIds);
  });
}

/** Never fails the lease: a heal that cannot be done now leaves the reservation as it is (the monitor asks again). */
async function heal(s: LeaseState, hostIds: string[]): Promise<void> {
  if ((s.lease.status !== 'PENDING' && s.lease.status !== 'ACTIVE') || s.deletion !== 'none') return;
  // A change waiting for approval holds the bookings to its own end: healed to that end, or a
  // replacement would be booked only to the current end, and the approved change would hold less than it says.
  const change = s.lease.pendingChange;
  const booked = change ? { ...s.lease, endMs: change.endMs, reservations: change.reservations } : s.lease;
  const reservations: Reservation[] = [];
  for (const reservation of booked.reservations) {
    let outcome: HealOutcome | undefined;
    try {
      outcome = await healing.healReservation(context(booked, reservation));
    } catch (err) {
      log.warn('healing a reservation failed', { leaseId: s.lease.id, reservationId: reservation.id, hostIds, error: failureMessage(err) });
    }
    reservations.push(outcome ? healed(reservation, outcome) : reservation);
  }
  if (JSON.stringify(reservations) === JSON.stringify(booked.reservations)) return;
  log.info('lease healed', { leaseId: s.lease.id, hostIds, degraded: reservations.some((r) => r.missing_resources || r.resources_changed) });
  if (!change) {
    await transition(s, { reservations });
    return;
  }
  // The lease as it is holds the healed resources too (its own parameters kept).
  const now = s.lease.reservations.map((r) => {
    const healedOne = reservations.find((h) => h.id === r.id);
    return healedOne ? { ...healedOne, params: r.params } : r;
  });
  await transition(s, { reservations: now, pendingChange: { ...change, reservations } });
}
