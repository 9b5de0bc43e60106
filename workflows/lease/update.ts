/** Blazar's lease update (rename, move dates, end now), at any point of the lease's life: validated, re-booked, recorded, or rolled back. */
import { patched } from '@temporalio/workflow';
import { applyLeaseUpdate, assertSettled, bookingChanged, hasEnded, type Lease, type LeaseUpdateRequest, type Reservation } from '../../src/domain/lease';
import { ONE_ROLLBACK_FOR_UPDATES, ROLLBACK_ONLY_MOVED } from '../patches';
import { mustFinish, quick } from './activity-options';
import { justification } from './admission';
import { announce } from './announce';
import { announceChangeAsked, refuseWhileChangeWaits, waitingChange } from './change-approval';
import { book } from './bookings';
import { asFailure } from './failures';
import { compensate, record } from './record';
import { assertAdmitted, type LeaseState } from './state';

/** The update's validator: refuses it before it is accepted (validators do not run on replay: old histories are unaffected). */
export function validateUpdate(s: LeaseState, update: LeaseUpdateRequest): void {
  assertAdmitted(s);
  assertSettled(s.lease);
  refuseWhileChangeWaits(s.lease);
  applyLeaseUpdate(s.lease, update, Date.now());
}

/** The update's handler (it runs under the lease's lock). */
export async function applyUpdate(s: LeaseState, update: LeaseUpdateRequest): Promise<Lease> {
  const before = s.lease;
  refuseWhileChangeWaits(before); // queued behind the update that made one
  let next = applyLeaseUpdate(before, update, Date.now()); // again: the lease may have moved on while queued
  const rebook = bookingChanged(before, next) && !hasEnded(next.status);
  const moved: Reservation[] = [];
  try {
    if (rebook) next = { ...next, reservations: await book(s, next, before, quick, moved) };
    // The usage policy is checked with the record, in its transaction: refused, it rolls back below.
    await record(s, next, 'life', { previous: before, byAdmin: update.byAdmin ?? false, ...justification(update.justification) });
  } catch (err) {
    // The one rollback, whether booking or recording failed: the bookings that moved as they were. It
    // must finish (the lease's record says the old window), so since the patch it retries as cleanups do.
    if (rebook) await putBack(s, before, next, moved);
    throw asFailure(err);
  }
  s.revision++;
  // An active lease's change an exception made wait: booked, the lease as it was until an admin answers (change-approval.ts).
  const change = waitingChange(s);
  if (change) await announceChangeAsked(s, change);
  else await announce(s, 'lease.update');
  return s.lease;
}

/**
 * The rollback of a failed update's re-booking (`next`'s): the reservations booked for it (`moved`)
 * booked for `before` again. Since the patch only those, and the one whose re-booking failed if
 * its parameters changed (its type's reserve may have moved the booking before the cloud failed it);
 * a window's move alone fails whole (the calendar's one transaction): nothing to put back then, and
 * the lease's lock is not held for the day a rollback may retry.
 */
async function putBack(s: LeaseState, before: Lease, next: Lease, moved: Reservation[]): Promise<void> {
  if (!patched(ROLLBACK_ONLY_MOVED.id)) {
    await compensate(s, 'putting the bookings back', () => book(s, before, undefined, patched(ONE_ROLLBACK_FOR_UPDATES.id) ? mustFinish : quick));
    return;
  }
  const failed = next.reservations[moved.length]; // none when all were booked and the record failed
  const paramsOf = (r: Reservation | undefined) => JSON.stringify(r?.params);
  const failedMidway = failed !== undefined && paramsOf(failed) !== paramsOf(before.reservations.find((r) => r.id === failed.id));
  const back = new Set([...moved.map((r) => r.id), ...(failedMidway ? [failed.id] : [])]);
  if (back.size === 0) return;
  await compensate(s, 'putting the bookings back', () => book(s, before, undefined, mustFinish, [], back));
}
