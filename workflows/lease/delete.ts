/** Deletion, from any phase: the delete update (answered once the lease is gone) and the removal itself. */
import { condition, patched, setCurrentDetails, upsertSearchAttributes } from '@temporalio/workflow';
import { hasEnded, notStarted, type Lease } from '../../src/domain/lease';
import { LeaseStatusKey } from '../../src/domain/search-attributes';
import { DELETE_ANSWERED_WHEN_GONE, TELL_WAITING_SUCCESSORS } from '../patches';
import { announce, tellPolicyEnded } from './announce';
import { releaseAll } from './bookings';
import type { LeaseOutcome } from './messages';
import { notifySuccessors } from './neighbours';
import { recorder, transition } from './record';
import type { LeaseState } from './state';
import { describeDeleted } from './web-ui';

/** The delete update's handler: asks for the deletion and answers once it is done (before the patch: once it began). */
export async function answerDelete(s: LeaseState): Promise<Lease> {
  if (s.deletion === 'none') s.deletion = 'requested';
  const untilGone = patched(DELETE_ANSWERED_WHEN_GONE.id);
  s.deletesAnswering++;
  try {
    await condition(() => s.deletion === 'done' || (!untilGone && s.lease.status === 'DELETING'));
  } finally {
    s.deletesAnswering--;
  }
  return s.lease;
}

/** Deletion from any phase: take back what the phase holds, then remove the lease's row. */
export async function remove(s: LeaseState): Promise<LeaseOutcome> {
  await s.lock.run(async () => {
    const wasActive = s.lease.status === 'ACTIVE';
    const holdsBookings = notStarted(s.lease.status) || wasActive;
    // As Blazar: a lease deleted before its end is told to the external filter as ended.
    const endsNow = !hasEnded(s.lease.status);
    await transition(s, { status: 'DELETING' });
    const toldFirst = !patched(TELL_WAITING_SUCCESSORS.id);
    if (holdsBookings) {
      await releaseAll(s, s.lease, wasActive, true);
      if (toldFirst) await notifySuccessors(s);
    }
    s.lease = { ...s.lease, version: s.lease.version + 1, updatedMs: Date.now() };
    await recorder().recordLeaseDeleted(s.lease);
    if (holdsBookings && !toldFirst) await notifySuccessors(s);
    s.deletion = 'done';
    upsertSearchAttributes([{ key: LeaseStatusKey, value: 'DELETED' }]);
    setCurrentDetails(describeDeleted(Date.now()));
    await announce(s, 'lease.delete');
    if (endsNow) await tellPolicyEnded(s);
  });
  // Whoever asked for the delete hears that it is done before the workflow ends.
  if (patched(DELETE_ANSWERED_WHEN_GONE.id)) await condition(() => s.deletesAnswering === 0);
  return { id: s.lease.id, status: 'DELETED' };
}
