/**
 * Right after admission: reservations whose resources wait out of use until the start (a server
 * shelved, its host free for others) are set aside. If that cannot be done, the lease is ERROR;
 * but a reservation whose start makes the same resources again (`holdRedoneAtStart`) leaves the
 * lease PENDING, saying why, for its start to try again.
 */
import { isCancellation, log, patched } from '@temporalio/workflow';
import type { Lease, Reservation } from '../../src/domain/lease';
import { reservationContext as context } from '../../src/domain/resource-plugin';
import { HOLD_FAILURE_LEFT_TO_START } from '../patches';
import { patient } from './activity-options';
import { announce } from './announce';
import { releaseUnstarted } from './bookings';
import { failureMessage } from './failures';
import { transition } from './record';
import type { LeaseState } from './state';

/** How the status_reason of a lease whose hold failed and was left to its start begins (the start clears it). */
const HOLD_LEFT_TO_START = 'hold until start failed, the start tries again:';

/** The change that clears a hold's status_reason once the start made what the hold could not. */
export function clearedHoldReason(lease: Pick<Lease, 'statusReason'>): Partial<Lease> {
  return lease.statusReason?.startsWith(HOLD_LEFT_TO_START) ? { statusReason: undefined } : {};
}

export async function holdUntilStart(s: LeaseState): Promise<void> {
  await s.lock.run(async () => {
    if (s.deletion !== 'none') return; // the delete takes everything back as it is
    // What a hold reports joins its reservation's allocation (an older worker's hold reports nothing: the same commands).
    const reported = new Map<string, Record<string, unknown>>();
    const leftToStart = new Map<string, string>();
    try {
      for (const reservation of s.lease.reservations) {
        if (reservation.hold !== 'due') continue;
        try {
          const outcome = await patient.holdReservation(context(s.lease, reservation));
          if (outcome?.allocation) reported.set(reservation.id, outcome.allocation);
        } catch (err) {
          if (isCancellation(err) || !reservation.holdRedoneAtStart || !patched(HOLD_FAILURE_LEFT_TO_START.id)) throw err;
          leftToStart.set(reservation.id, failureMessage(err));
        }
      }
    } catch (err) {
      const reason = `hold until start failed: ${failureMessage(err)}`;
      log.error('lease hold failed', { leaseId: s.lease.id, reason });
      await releaseUnstarted(s);
      const reservations = s.lease.reservations.map((r) => ({ ...r, status: 'error' as const }));
      await transition(s, { status: 'ERROR', statusReason: reason, reservations });
      await announce(s, 'lease.error', { reason });
      return;
    }
    const held = (r: Reservation): Reservation => {
      if (leftToStart.has(r.id)) return { ...r, hold: 'at-start' };
      return { ...r, hold: 'done', ...(reported.has(r.id) ? { allocation: { ...r.allocation, ...reported.get(r.id) } } : {}) };
    };
    const reason = leftToStart.size > 0 ? `${HOLD_LEFT_TO_START} ${[...leftToStart.values()].join('; ')}` : undefined;
    if (reason) log.warn('lease hold failed: left to its start', { leaseId: s.lease.id, reason });
    await transition(s, { reservations: s.lease.reservations.map((r) => (r.hold === 'due' ? held(r) : r)), ...(reason ? { statusReason: reason } : {}) });
    // The lessee hears of it as of any part of a lease that could not be made and was not given up: degraded, the start to try again.
    if (reason) await announce(s, 'lease.degraded', { reason, reservation_ids: [...leftToStart.keys()], retried_at_start: true }, 'hold');
  });
}
