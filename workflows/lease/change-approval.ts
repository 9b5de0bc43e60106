/**
 * A change of an active lease waiting for approval (issue 42): a member's exception to a rule of
 * ours, sent with a justification. The update booked it (others see it taken) and the record kept
 * the lease as it was, the change on it (`pendingChange`). It waits for an admin's approve or deny
 * (the same updates as a lease waiting for approval), or its deadline: the exception's timeout,
 * never later than the lease's current end. Approved, it takes effect (the active loop's timers
 * follow the new end); denied or timed out, its bookings go back to the lease as it is.
 */
import { patched } from '@temporalio/workflow';
import { changeDenialReason, withChangeApplied, type LeaseApproval, type PendingLeaseChange } from '../../src/domain/approval';
import { leaseConflict, type Lease } from '../../src/domain/lease';
import { LEASE_CHANGE_APPROVAL } from '../patches';
import { mustFinish } from './activity-options';
import { announce } from './announce';
import { approvalDetails } from './approval';
import { book } from './bookings';
import { compensate, transition } from './record';
import type { LeaseState } from './state';

/** The change waiting for approval, if there is one (only histories since the patch have one). */
export function waitingChange(s: LeaseState): PendingLeaseChange | undefined {
  return s.lease.pendingChange && patched(LEASE_CHANGE_APPROVAL.id) ? s.lease.pendingChange : undefined;
}

/** One change at a time: another update while one waits is refused, naming it (409). */
export function refuseWhileChangeWaits(lease: Lease): void {
  const change = lease.pendingChange;
  if (!change) return;
  throw leaseConflict(
    `Lease ${lease.name} has a change waiting for approval (end_date ${new Date(change.endMs).toISOString()}, ${change.approval.rule}, asked ${new Date(change.approval.requestedMs).toISOString()}): wait for an admin's answer, or its timeout at ${new Date(change.approval.deadlineMs).toISOString()}, before changing it again.`,
  );
}

/** Announced when the change is asked for (the update's answer carries it too). */
export async function announceChangeAsked(s: LeaseState, change: PendingLeaseChange): Promise<void> {
  await announce(s, 'lease.approval_requested', changeDetails(change, change.approval), `change-asked-${change.approval.requestedMs}`);
}

/** When the waiting change must be answered by the deadline: its timeout, or the lease's end if that comes first. */
export const changeDeadline = (s: LeaseState, change: PendingLeaseChange): number => Math.min(change.approval.deadlineMs, s.lease.endMs);

/**
 * Acts on the waiting change (from the active loop, once answered or due): approved, the lease
 * takes it; else its bookings are put back for the lease as it is, and status_reason says why.
 */
export async function settleChange(s: LeaseState): Promise<void> {
  await s.lock.run(async () => {
    const change = s.lease.pendingChange;
    if (!change || s.deletion !== 'none') return;
    const answer = s.approvalAnswer;
    s.approvalAnswer = undefined;
    const now = Date.now();
    const answered: LeaseApproval = answer
      ? { ...change.approval, outcome: answer.outcome, answeredBy: 'admin', ...(answer.reason !== undefined ? { answerReason: answer.reason } : {}), answeredMs: now }
      : { ...change.approval, outcome: 'denied', answeredBy: now >= s.lease.endMs ? 'end' : 'timeout', answeredMs: now };
    if (answered.outcome === 'approved') {
      // As an admin's update: the record moves the end; the active loop's next sleep follows it.
      await transition(s, { ...withChangeApplied(s.lease, now), changeApproval: answered, statusReason: undefined });
      s.revision++;
      await announce(s, 'lease.approved', changeDetails(change, answered));
      return;
    }
    // Booked again for the lease as it is: what the change took beyond it is freed. It must finish; should it not, the lease still goes on as it was.
    await compensate(s, "freeing a denied change's bookings", () => book(s, s.lease, undefined, mustFinish));
    await transition(s, { pendingChange: undefined, changeApproval: answered, statusReason: changeDenialReason(answered) });
    s.revision++;
    await announce(s, 'lease.denied', changeDetails(change, answered));
  });
}

/** What approval notices of a change carry besides the lease (as it is): the approval, and what the change sets. */
export function changeDetails(change: PendingLeaseChange, approval: LeaseApproval): Record<string, unknown> {
  return {
    ...approvalDetails(approval),
    approval_of: 'change',
    change: { end_date: new Date(change.endMs).toISOString(), reservations: change.reservations.map((r) => ({ id: r.id, ...r.params })) },
  };
}
