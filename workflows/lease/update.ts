/** Blazar's lease update (rename, move dates, end now), at any point of the lease's life: validated, re-booked, recorded, or rolled back. */
import { patched } from '@temporalio/workflow';
import { applyLeaseUpdate, assertSettled, bookingChanged, hasEnded, type Lease, type LeaseUpdateRequest } from '../../src/domain/lease';
import { ONE_ROLLBACK_FOR_UPDATES } from '../patches';
import { mustFinish, quick } from './activity-options';
import { announce } from './announce';
import { book } from './bookings';
import { asFailure } from './failures';
import { compensate, record } from './record';
import { assertAdmitted, type LeaseState } from './state';

/** The update's validator: refuses it before it is accepted (validators do not run on replay: old histories are unaffected). */
export function validateUpdate(s: LeaseState, update: LeaseUpdateRequest): void {
  assertAdmitted(s);
  assertSettled(s.lease);
  applyLeaseUpdate(s.lease, update, Date.now());
}

/** The update's handler (it runs under the lease's lock). */
export async function applyUpdate(s: LeaseState, update: LeaseUpdateRequest): Promise<Lease> {
  const before = s.lease;
  let next = applyLeaseUpdate(before, update, Date.now()); // again: the lease may have moved on while queued
  const rebook = bookingChanged(before, next) && !hasEnded(next.status);
  try {
    if (rebook) next = { ...next, reservations: await book(s, next, before) };
    // The usage policy is checked with the record, in its transaction: refused, it rolls back below.
    await record(s, next, 'life', { previous: before, byAdmin: update.byAdmin ?? false });
  } catch (err) {
    // The one rollback, whether booking or recording failed: every booking as it was. It must
    // finish (the lease's record says the old window), so since the patch it retries as cleanups do.
    if (rebook) await compensate(s, 'putting the bookings back', () => book(s, before, undefined, patched(ONE_ROLLBACK_FOR_UPDATES.id) ? mustFinish : quick));
    throw asFailure(err);
  }
  s.revision++;
  await announce(s, 'lease.update');
  return s.lease;
}
