/**
 * The lease's messages: admit, update and delete (updates), the host monitor's and the earlier
 * leases' signals, and the getLease query. Registered before the workflow's first wait, so that
 * the admit update sent with the start finds its handler.
 */
import { setHandler } from '@temporalio/workflow';
import type { LeaseUpdateRequest } from '../../src/domain/lease';
import { admit } from './admission';
import { answerDelete } from './delete';
import { healWhenFree } from './heal';
import { answerApproval, validateApprovalAnswer } from './approval';
import { lend, reclaim, validateLending, validateReclaim } from './lend';
import { admitLease, approveLease, deleteLease, denyLease, type ApprovalAnswer, getLease, hostsChanged, leasePreempted, lendCapacity, predecessorEnded, reclaimCapacity, updateLease, type LendRequest, type ReclaimRequest } from './messages';
import { preemptWhenFree } from './preempt';
import { assertAdmitted, type LeaseState } from './state';
import { applyUpdate, validateUpdate } from './update';

export function answerMessages(s: LeaseState): void {
  setHandler(getLease, () => s.lease);
  setHandler(predecessorEnded, (leaseId) => void s.endedPredecessors.add(leaseId));
  setHandler(hostsChanged, ({ hostIds }) => healWhenFree(s, hostIds));
  setHandler(leasePreempted, (preemption) => preemptWhenFree(s, preemption));
  setHandler(admitLease, (request) => s.lock.run(() => admit(s, request)));
  setHandler(updateLease, (update) => s.lock.run(() => applyUpdate(s, update)), {
    validator: (update: LeaseUpdateRequest) => validateUpdate(s, update),
  });
  setHandler(lendCapacity, (request) => s.lock.run(() => lend(s, request)), { validator: (request: LendRequest) => validateLending(s, request) });
  setHandler(reclaimCapacity, (request) => s.lock.run(() => reclaim(s, request)), { validator: (request: ReclaimRequest) => validateReclaim(s, request) });
  setHandler(deleteLease, () => answerDelete(s), { validator: () => assertAdmitted(s) });
  setHandler(approveLease, (answer) => answerApproval(s, 'approved', answer), { validator: (_answer: ApprovalAnswer) => validateApprovalAnswer(s) });
  setHandler(denyLease, (answer) => answerApproval(s, 'denied', answer), { validator: (_answer: ApprovalAnswer) => validateApprovalAnswer(s) });
}
