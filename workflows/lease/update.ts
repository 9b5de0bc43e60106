/** Blazar's lease update (rename, move dates, end now), at any point of the lease's life: validated, re-booked, recorded, or rolled back. */
import { isCancellation, log, patched } from '@temporalio/workflow';
import { isExtensionOnly, ONLY_EXTENSIONS_WAIT } from '../../src/domain/approval';
import { applyLeaseUpdate, assertSettled, bookingChanged, hasEnded, leaseConflict, LeaseErrorType, type Lease, type LeaseUpdateRequest, type Reservation } from '../../src/domain/lease';
import { isPreemptibleReservation, isPreemptionReason } from '../../src/domain/preemption';
import { ONE_ROLLBACK_FOR_UPDATES, ROLLBACK_ONLY_MOVED, UPDATE_AFTER_OWED_CUT } from '../patches';
import { mustFinish, quick } from './activity-options';
import { justification } from './admission';
import { announce } from './announce';
import { announceChangeAsked, refuseWhileChangeWaits, settle, waitingChange } from './change-approval';
import { book } from './bookings';
import { asFailure } from './failures';
import type { LeasePreemption } from './messages';
import { forgetPreemptions, preemptOwed, type CutApplied } from './preempt';
import { compensate, record } from './record';
import { assertAdmitted, type LeaseState } from './state';

/** The update's validator: refuses it before it is accepted (validators do not run on replay: old histories are unaffected). */
export function validateUpdate(s: LeaseState, update: LeaseUpdateRequest): void {
  assertAdmitted(s);
  assertSettled(s.lease);
  if (!adminEndsSooner(s.lease, update)) refuseWhileChangeWaits(s.lease);
  refuseJustifiedNonExtension(s.lease, applyLeaseUpdate(s.lease, update, Date.now()), update);
}

/** An admin's update of the end only, to now or sooner: it may go through while a change waits (denying it first). */
function adminEndsSooner(lease: Lease, update: LeaseUpdateRequest): boolean {
  const onlyEnd = Object.entries(update).every(([key, value]) => value === undefined || key === 'end' || key === 'byAdmin' || key === 'name');
  const sooner = update.end === 'now' || (typeof update.end === 'number' && update.end <= lease.endMs);
  return lease.pendingChange !== undefined && update.byAdmin === true && onlyEnd && sooner;
}

/**
 * A justification on a change of an active lease asks for an exception, which only an extension
 * may have (isExtensionOnly): anything else is refused before it books anything (409).
 */
function refuseJustifiedNonExtension(before: Lease, next: Lease, update: LeaseUpdateRequest): void {
  if (update.justification === undefined || before.status !== 'ACTIVE' || !bookingChanged(before, next) || isExtensionOnly(before, next)) return;
  throw leaseConflict(`Lease ${before.name} is active: ${ONLY_EXTENSIONS_WAIT}. Send the change without a justification, or extend the lease alone.`);
}

/** The update's handler (it runs under the lease's lock); `afterCut`: its second try, on the lease as an owed cut left it. */
export async function applyUpdate(s: LeaseState, update: LeaseUpdateRequest, afterCut = false): Promise<Lease> {
  const waiting = waitingChange(s);
  if (waiting && adminEndsSooner(s.lease, update)) {
    // An admin ending the lease sooner goes first: the waiting change is denied, then the update applies to the lease as it is.
    await settle(s, waiting, { ...waiting.approval, outcome: 'denied', answeredBy: 'admin', answerReason: 'the lease was changed by an admin', answeredMs: Date.now() });
  }
  const before = s.lease;
  refuseWhileChangeWaits(before); // queued behind the update that made one
  let next = applyLeaseUpdate(before, update, Date.now()); // again: the lease may have moved on while queued
  refuseJustifiedNonExtension(before, next, update);
  const rebook = bookingChanged(before, next) && !hasEnded(next.status);
  const moved: Reservation[] = [];
  const cutBefore = s.preemption;
  try {
    if (rebook) next = { ...next, reservations: await book(s, next, before, quick, moved) };
    // Booked anew, a preempted lease's cut no longer applies, nor its reason (an ended lease would say it was preempted);
    // but a second try after the cut was applied books the lease as cut, and it keeps saying why it ends there.
    if (rebook && !afterCut && isPreemptionReason(next.statusReason)) next = { ...next, statusReason: undefined };
    // The usage policy is checked with the record, in its transaction: refused, it rolls back below.
    await record(s, next, 'life', { previous: before, byAdmin: update.byAdmin ?? false, ...justification(update.justification) });
  } catch (err) {
    // The one rollback, whether booking or recording failed: the bookings that moved as they were. It
    // must finish (the lease's record says the old window), so since the patch it retries as cleanups do.
    if (rebook) await putBack(s, before, next, moved);
    const failure = asFailure(err);
    // Refused for capacity while a cut of the lease was owed and not applied (issue 43): its booking saw the
    // cut rows under the window as recorded. The cut applied first, the update tries again once on the lease as cut.
    if (!afterCut && rebook && failure.type === LeaseErrorType.conflict && before.reservations.some(isPreemptibleReservation) && patched(UPDATE_AFTER_OWED_CUT.id)) {
      const applied = await applyOwedCut(s);
      if (applied === 'cut') return applyUpdate(s, update, true);
      // Nothing of its window was left: it ended, and that is the answer.
      if (applied === 'ended') throw leaseConflict(`Lease ${before.name} was preempted and has ended (${s.lease.statusReason ?? 'preempted'}): nothing of its window is left to change.`);
    }
    throw failure;
  }
  // Booked anew: the cuts told before no longer apply (one made after this booking is told anew); the
  // second try booked the lease at the cut it just applied, which still stands (its start checks it).
  if (rebook && !afterCut) forgetPreemptions(s, cutBefore);
  s.revision++;
  // An active lease's change an exception made wait: booked, the lease as it was until an admin answers (change-approval.ts).
  const change = waitingChange(s);
  if (change) await announceChangeAsked(s, change);
  else await announce(s, 'lease.update');
  return s.lease;
}

/**
 * The owed cut (preemptOwed) read and applied for a refused update. The read is bounded (`quick`:
 * the lease's lock is held, and the caller waits); should it fail, the update answers its first
 * refusal (undefined here), never the read's error, and the tell applies the cut when it comes.
 */
async function applyOwedCut(s: LeaseState): Promise<CutApplied> {
  let latest: LeasePreemption | undefined;
  try {
    latest = await quick.latestPreemption({ leaseId: s.lease.id });
  } catch (err) {
    if (isCancellation(err)) throw err;
    log.warn('reading the owed cut of a refused update failed: the refusal answers', { leaseId: s.lease.id, error: String(err) });
    return undefined;
  }
  return preemptOwed(s, latest);
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
