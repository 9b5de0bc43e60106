/** The end: every reservation's end hook takes its resources back; the later leases on them are told; TERMINATED (or ERROR, saying why). */
import { patched } from '@temporalio/workflow';
import { TELL_WAITING_SUCCESSORS } from '../patches';
import { announce, tellPolicyEnded } from './announce';
import { releaseAll } from './bookings';
import { failureMessage } from './failures';
import { notifySuccessors } from './neighbours';
import { withLendingsReturned } from '../../src/domain/lending';
import { transition } from './record';
import { withAllocations } from './reservations';
import type { LeaseState } from './state';

export async function endLease(s: LeaseState): Promise<void> {
  await s.lock.run(async () => {
    await transition(s, { status: 'TERMINATING' }, 'end_lease', 'IN_PROGRESS');
    let allocations: Map<string, Record<string, unknown>>;
    try {
      allocations = await releaseAll(s, s.lease, true);
    } catch (err) {
      await failEnd(s, err);
      return;
    }
    const toldFirst = !patched(TELL_WAITING_SUCCESSORS.id);
    if (toldFirst) await notifySuccessors(s);
    // Lent hosts came back with the end (issue 43): its lendings are closed.
    const reservations = withAllocations(s.lease.reservations, allocations).map((r) => ({ ...withLendingsReturned(r), status: 'deleted' as const }));
    await transition(s, { status: 'TERMINATED', reservations }, 'end_lease', 'DONE');
    if (!toldFirst) await notifySuccessors(s);
    await announce(s, 'lease.event.end_lease');
    await tellPolicyEnded(s);
  });
}

async function failEnd(s: LeaseState, err: unknown): Promise<void> {
  const reservations = s.lease.reservations.map((r) => ({ ...r, status: 'error' as const }));
  await transition(s, { status: 'ERROR', statusReason: `end failed: ${failureMessage(err)}`, reservations }, 'end_lease', 'ERROR');
  // An ERROR lease no longer counts as a predecessor (findPredecessors): whoever waits may go.
  if (patched(TELL_WAITING_SUCCESSORS.id)) await notifySuccessors(s);
  await announce(s, 'lease.error', { reason: s.lease.statusReason });
  await tellPolicyEnded(s);
}
