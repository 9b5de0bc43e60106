/**
 * What the API knows of the lease workflow, and all it imports from workflows: the messages it sends,
 * the workflow's input and outcome, its id and type name, and the Web UI summary it is started with.
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { Lease, LeaseUpdateRequest, NewLeaseRequest } from '../../src/domain/lease';

export { staticSummary } from './web-ui';

export interface AdmitRequest {
  /** Hash of the create request: a reused Idempotency-Key with another body is refused. */
  requestHash: string;
}
/** Sent with Update-with-Start: books the reservations and records the lease, or fails with 409/400. */
export const admitLease = defineUpdate<Lease, [AdmitRequest]>('admit');
/** Blazar's lease update (rename, move dates, end now); validated synchronously before it is accepted. */
export const updateLease = defineUpdate<Lease, [LeaseUpdateRequest]>('updateLease');
/** Deletes the lease, running the cleanup its phase needs; returns once the lease is gone (bookings freed, row removed). */
export const deleteLease = defineUpdate<Lease, []>('deleteLease');
export const getLease = defineQuery<Lease>('getLease');

/** An admin's answer to a lease waiting for approval (PENDING_APPROVAL): the reason is kept and shown. */
export interface ApprovalAnswer {
  reason?: string;
}
/** An admin approves a lease waiting for approval; answered once the lease waits for its start (or has started). */
export const approveLease = defineUpdate<Lease, [ApprovalAnswer]>('approveLease');
/** An admin denies a lease waiting for approval; answered once its capacity is freed and it is ended. */
export const denyLease = defineUpdate<Lease, [ApprovalAnswer]>('denyLease');
/** From a lease on the same resources that has just ended: this lease may start. */
export const predecessorEnded = defineSignal<[string]>('predecessorEnded');
/** From the host monitor: hosts this lease is booked on failed or came back; the lease heals its reservations. */
export const hostsChanged = defineSignal<[{ hostIds: string[] }]>('hostsChanged');

/**
 * From the admission of a regular lease that needed this preemptible lease's hosts (issue 43, sent
 * after its commit from lease_preemptions): the lease's bookings now end at `endMs`, the other lease
 * needs the hosts from `neededFromMs`; `warningMs`: the deployment's warning (LK_PREEMPT_WARNING_MINUTES);
 * `sequence`: the cut's order (its lease_preemptions row's time, ms): the workflow keeps the latest
 * cut and ignores an older one told again (absent from signals sent before it: taken as news).
 */
export interface LeasePreemption {
  endMs: number;
  neededFromMs: number;
  warningMs: number;
  sequence?: number;
  /** A lending's reclaim (issue 43): the lender takes its host back (the reason says so); absent: a regular lease's need. */
  kind?: 'reclaimed';
}
export const leasePreempted = defineSignal<[LeasePreemption]>('leasePreempted');

/**
 * Lending (issue 43): the owner of an active lease lends `count` idle hosts of a host reservation to
 * preemptible leases until `untilMs`; answered with the lease, the lending in the reservation's `lendings`.
 */
export interface LendRequest {
  reservationId: string;
  count: number;
  untilMs: number;
}
export const lendCapacity = defineUpdate<Lease, [LendRequest]>('lend');

/** Takes `count` lent hosts back (all when absent), needed from `neededFromMs` (now + the preemption warning when absent). */
export interface ReclaimRequest {
  reservationId: string;
  count?: number;
  neededFromMs?: number;
}
export const reclaimCapacity = defineUpdate<Lease, [ReclaimRequest]>('reclaim');

export interface LeaseWorkflowInput {
  request: NewLeaseRequest;
  requestHash: string;
  /** Set when the workflow continues as new: the lease as it was. */
  carried?: Lease;
  /** Set when the workflow continues as new (absent from older inputs): the cut last applied and the latest cut's sequence seen (preempt.ts). */
  carriedPreemption?: { preempted?: LeasePreemption; sequence?: number };
  /**
   * Set when the API admitted the lease itself (its bookings, row and owed start in one
   * transaction): the lease as recorded. The workflow starts admitted and announces it created.
   */
  admitted?: Lease;
}

export interface LeaseOutcome {
  id: string;
  status: Lease['status'] | 'REJECTED' | 'NOT_ADMITTED' | 'DELETED';
  reason?: string;
}

/** The workflow's signature and registered name (lease.ts exports it under this name), to start it without loading its code. */
export type LeaseWorkflow = (input: LeaseWorkflowInput) => Promise<LeaseOutcome>;
export const leaseWorkflowType = 'leaseWorkflow';

export const leaseWorkflowId = (leaseId: string) => `lease-${leaseId}`;
