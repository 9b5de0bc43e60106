/**
 * A change of an active lease waiting for approval (issue 42): a member's exception to a rule of
 * ours, sent with a justification. The update booked it (others see it taken) and the record kept
 * the lease as it was, the change on it (`pendingChange`). It waits for an admin's approve or deny
 * (the same updates as a lease waiting for approval), or its deadline: the exception's timeout,
 * never later than the lease's current end. Approved, it takes effect (the active loop's timers
 * follow the new end); denied or timed out, its bookings go back to the lease as it is.
 */
import { isCancellation, log, patched } from '@temporalio/workflow';
import { changeDenialReason, withChangeApplied, type LeaseApproval, type PendingLeaseChange } from '../../src/domain/approval';
import { leaseConflict, type Lease, type Reservation } from '../../src/domain/lease';
import { LEASE_CHANGE_APPROVAL } from '../patches';
import { quick } from './activity-options';
import { announce } from './announce';
import { approvalDetails } from './approval';
import { book } from './bookings';
import { failureMessage } from './failures';
import { transition } from './record';
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

/** An admin's answer to the waiting change (an answer of another change, none). */
export function changeAnswer(s: LeaseState): LeaseState['approvalAnswer'] {
  const change = s.lease.pendingChange;
  return change && s.approvalAnswer?.of === change.approval.requestedMs ? s.approvalAnswer : undefined;
}

/**
 * Acts on the waiting change (from the active loop, once answered or due): approved, the lease
 * takes it; else its bookings are put back for the lease as it is, and status_reason says why.
 * Answers arriving meanwhile are refused (settlingChange); the answer acted on is kept until the
 * settle is done, so that it can never answer the next change.
 */
export async function settleChange(s: LeaseState): Promise<void> {
  await s.lock.run(async () => {
    const change = s.lease.pendingChange;
    if (!change || s.deletion !== 'none') return;
    const answer = changeAnswer(s);
    const now = Date.now();
    const answered: LeaseApproval = answer
      ? { ...change.approval, outcome: answer.outcome, answeredBy: 'admin', ...(answer.reason !== undefined ? { answerReason: answer.reason } : {}), answeredMs: now }
      : { ...change.approval, outcome: 'denied', answeredBy: now >= s.lease.endMs ? 'end' : 'timeout', answeredMs: now };
    await settle(s, change, answered);
  });
}

/**
 * Settles the waiting change with `answered` (under the lease's lock). `instead` (a denial that
 * comes with another change, a preemption's cut): the lease as it becomes, its status_reason with it.
 */
export async function settle(s: LeaseState, change: PendingLeaseChange, answered: LeaseApproval, instead?: Lease): Promise<void> {
  s.settlingChange = true;
  try {
    if (answered.outcome === 'approved') {
      // As an admin's update: the record moves the end; the active loop's next sleep follows it.
      await transition(s, { ...withChangeApplied(s.lease, answered.answeredMs!), changeApproval: answered, statusReason: undefined });
      s.revision++;
      await announce(s, 'lease.approved', changeDetails(change, answered));
      return;
    }
    const unfreed = await freeChangeBookings(s, instead ?? s.lease, change, answered);
    const reason = instead?.statusReason ?? changeDenialReason(answered);
    await transition(s, { ...instead, pendingChange: undefined, changeApproval: answered, statusReason: unfreed ? `${reason}; ${unfreed}` : reason });
    s.revision++;
    await announce(s, 'lease.denied', { ...changeDetails(change, answered), ...(unfreed ? { bookings: unfreed } : {}) });
  } finally {
    s.settlingChange = false;
    s.approvalAnswer = undefined;
  }
}

/**
 * Books the reservations the change moved for `lease` (the lease as it stays) again: what the
 * change took beyond it is freed (an extension moves each booking's end). Not when its end came
 * (its end frees everything); a few quick tries, not the day a must-finish may retry under the
 * lease's lock: should they fail, the lease goes on as it was and the answer (what it returns)
 * says the extra hours stay booked until the lease ends.
 */
async function freeChangeBookings(s: LeaseState, lease: Lease, change: PendingLeaseChange, answered: LeaseApproval): Promise<string | undefined> {
  if (answered.answeredBy === 'end' || Date.now() >= lease.endMs) return undefined;
  const sameAsBooked = (r: Reservation) => change.endMs === lease.endMs && JSON.stringify(change.reservations.find((c) => c.id === r.id)?.params) === JSON.stringify(r.params);
  const moved = new Set(lease.reservations.filter((r) => !sameAsBooked(r)).map((r) => r.id));
  if (moved.size === 0) return undefined;
  try {
    await book(s, lease, undefined, quick, [], moved);
    return undefined;
  } catch (err) {
    if (isCancellation(err)) throw err;
    const unfreed = `freeing the change's bookings failed (${failureMessage(err)}): they stay booked until the lease ends`;
    log.error(unfreed, { leaseId: s.lease.id });
    return unfreed;
  }
}

/** What approval notices of a change carry besides the lease (as it is): the approval, and what the change sets. */
export function changeDetails(change: PendingLeaseChange, approval: LeaseApproval): Record<string, unknown> {
  return {
    ...approvalDetails(approval),
    approval_of: 'change',
    change: { end_date: new Date(change.endMs).toISOString(), reservations: change.reservations.map((r) => ({ id: r.id, ...r.params })) },
  };
}
