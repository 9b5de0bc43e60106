/**
 * Approval (issue 42): a lease admitted PENDING_APPROVAL, its capacity booked, waits for an admin's
 * approve or deny update, or for its rule's timeout (written on the lease at admission: the
 * workflow's input), or for its end, whichever comes first. Approved, it goes on PENDING (a start
 * already passed starts it at once, its end unchanged); denied, its bookings are freed and it ends
 * TERMINATED, its status_reason naming the denial.
 */
import { ApplicationFailure, condition, patched } from '@temporalio/workflow';
import { denialReason, type LeaseApproval } from '../../src/domain/approval';
import { leaseConflict, type Lease } from '../../src/domain/lease';
import { LEASE_APPROVAL } from '../patches';
import { announce, tellPolicyEnded } from './announce';
import { releaseAll } from './bookings';
import type { ApprovalAnswer } from './messages';
import { notifySuccessors } from './neighbours';
import { transition } from './record';
import { assertAdmitted, type LeaseState } from './state';

/** The approve and deny updates' validator: only a lease waiting for approval, or an active lease's change waiting (change-approval.ts), answered once. */
export function validateApprovalAnswer(s: LeaseState): void {
  assertAdmitted(s);
  if (s.deletion !== 'none') throw ApplicationFailure.create({ type: 'LeaseNotFound', message: `lease ${s.lease.id} not found`, nonRetryable: true });
  if (s.lease.pendingChange && (s.settlingChange || s.approvalAnswer)) {
    throw leaseConflict(`Lease ${s.lease.name}'s change is being settled (${s.approvalAnswer?.outcome ?? 'its deadline came'}): it is answered once.`);
  }
  if (s.lease.pendingChange) return;
  if (s.lease.status !== 'PENDING_APPROVAL' || s.approvalAnswer) {
    throw leaseConflict(`Lease ${s.lease.name} is not waiting for approval: it is ${s.lease.status}${s.lease.approval?.outcome ? ` (${s.lease.approval.outcome})` : ''}.`);
  }
}

/** The approve and deny updates' handler: hands the answer to the waiting lease (or change) and answers once it is acted on. */
export async function answerApproval(s: LeaseState, outcome: 'approved' | 'denied', answer: ApprovalAnswer): Promise<Lease> {
  const change = s.lease.pendingChange;
  // A change's answer names the change: only its own settle takes it (a later change is never answered by it).
  s.approvalAnswer = { outcome, ...(answer.reason !== undefined ? { reason: answer.reason } : {}), ...(change ? { of: change.approval.requestedMs } : {}) };
  if (change) {
    await condition(() => s.lease.pendingChange?.approval.requestedMs !== change.approval.requestedMs || s.deletion !== 'none');
    const settled = s.lease.changeApproval;
    // Settled otherwise first (an admin's update of the end denied it): the answer says so rather than a 200 that contradicts it.
    if (settled?.requestedMs === change.approval.requestedMs && settled.outcome !== outcome) {
      throw leaseConflict(`Lease ${s.lease.name}'s change was ${settled.outcome} before this answer was acted on${settled.answerReason ? `: ${settled.answerReason}` : ''}.`);
    }
    return s.lease;
  }
  await condition(() => s.lease.status !== 'PENDING_APPROVAL' || s.deletion !== 'none');
  return s.lease;
}

/**
 * While the lease waits for approval: until an answer, the timeout or the end. 'none': it was not
 * waiting; 'delete': a delete came first (it frees the bookings as for a pending lease).
 */
export async function untilApproved(s: LeaseState): Promise<'none' | 'approved' | 'denied' | 'delete'> {
  if (s.lease.status !== 'PENDING_APPROVAL' || !s.lease.approval || !patched(LEASE_APPROVAL.id)) return 'none';
  const asked = s.lease.approval;
  await announce(s, 'lease.approval_requested', approvalDetails(asked), `asked-${asked.requestedMs}`);
  for (;;) {
    if (s.deletion !== 'none') return 'delete';
    // Ended while it waited (preempted with nothing of its window left, preempt.ts): nothing left to approve.
    if (s.lease.status !== 'PENDING_APPROVAL') return 'denied';
    const remaining = Math.min(asked.deadlineMs, s.lease.endMs) - Date.now();
    if (s.approvalAnswer || remaining <= 0) break;
    const seen = s.revision;
    await condition(() => s.approvalAnswer !== undefined || s.deletion !== 'none' || s.revision !== seen, remaining, { summary: 'until the approval timeout' });
  }
  return s.lock.run(async () => {
    if (s.deletion !== 'none') return 'delete';
    // Settled while this waited for the lock (a cut that left nothing ended it, preempt.ts): not revived nor ended twice.
    if (s.lease.status !== 'PENDING_APPROVAL') return s.lease.status === 'PENDING' ? 'approved' : 'denied';
    const answered = answeredApproval(s.lease, s.approvalAnswer);
    s.approvalAnswer = undefined;
    if (answered.outcome === 'approved') {
      await transition(s, { status: 'PENDING', approval: answered });
      await announce(s, 'lease.approved', approvalDetails(answered));
      return 'approved';
    }
    await deny(s, answered);
    return 'denied';
  });
}

/** The answer as the lease keeps it: an admin's, or the timeout's (or the end's: nothing left to approve). */
function answeredApproval(lease: Lease, answer: LeaseState['approvalAnswer']): LeaseApproval {
  const asked = lease.approval!;
  const now = Date.now();
  if (answer) return { ...asked, outcome: answer.outcome, answeredBy: 'admin', ...(answer.reason !== undefined ? { answerReason: answer.reason } : {}), answeredMs: now };
  if (now >= lease.endMs) return { ...asked, outcome: 'denied', answeredBy: 'end', answeredMs: now };
  return { ...asked, outcome: asked.onTimeout === 'approve' ? 'approved' : 'denied', answeredBy: 'timeout', answeredMs: now };
}

/** Denied: its bookings freed, the later leases on its resources told, ended saying why. */
async function deny(s: LeaseState, answered: LeaseApproval): Promise<void> {
  await releaseAll(s, s.lease, false, true);
  const reservations = s.lease.reservations.map((r) => ({ ...r, status: 'deleted' as const }));
  await transition(s, { status: 'TERMINATED', statusReason: denialReason(answered), approval: answered, reservations });
  await notifySuccessors(s);
  await announce(s, 'lease.denied', approvalDetails(answered));
  await tellPolicyEnded(s);
}

/** What approval notices carry besides the lease: why it waited, the justification, and the answer. */
export function approvalDetails(approval: LeaseApproval): Record<string, unknown> {
  return {
    approval_rule: approval.rule,
    approval_reason: approval.reason,
    ...(approval.justification !== undefined ? { justification: approval.justification } : {}),
    timeout_at: new Date(approval.deadlineMs).toISOString(),
    on_timeout: approval.onTimeout,
    ...(approval.outcome ? { outcome: approval.outcome, answered_by: approval.answeredBy, ...(approval.answerReason !== undefined ? { answer_reason: approval.answerReason } : {}) } : {}),
  };
}
