/**
 * Right after admission: reservations whose resources wait out of use until the start (a server
 * shelved, its host free for others) are set aside. If that cannot be done, the lease is ERROR.
 */
import { log } from '@temporalio/workflow';
import { reservationContext as context } from '../../src/domain/resource-plugin';
import { patient } from './activity-options';
import { announce } from './announce';
import { releaseUnstarted } from './bookings';
import { failureMessage } from './failures';
import { transition } from './record';
import type { LeaseState } from './state';

export async function holdUntilStart(s: LeaseState): Promise<void> {
  await s.lock.run(async () => {
    if (s.deletion !== 'none') return; // the delete takes everything back as it is
    // What a hold reports joins its reservation's allocation (an older worker's hold reports nothing: the same commands).
    const reported = new Map<string, Record<string, unknown>>();
    try {
      for (const reservation of s.lease.reservations) {
        if (reservation.hold !== 'due') continue;
        const outcome = await patient.holdReservation(context(s.lease, reservation));
        if (outcome?.allocation) reported.set(reservation.id, outcome.allocation);
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
    const held = (r: (typeof s.lease.reservations)[number]) => ({ ...r, hold: 'done' as const, ...(reported.has(r.id) ? { allocation: { ...r.allocation, ...reported.get(r.id) } } : {}) });
    await transition(s, { reservations: s.lease.reservations.map((r) => (r.hold === 'due' ? held(r) : r)) });
  });
}
