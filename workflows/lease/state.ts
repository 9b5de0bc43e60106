/**
 * The lease workflow's state, in one place: everything its phases, steps and message handlers share.
 * One object per run, created by initialState; every module of workflows/lease/ reads and changes it.
 */
import { ApplicationFailure } from '@temporalio/workflow';
import { newLease, type Lease } from '../../src/domain/lease';
import { Lock } from './lock';
import type { LeasePreemption, LeaseWorkflowInput } from './messages';

export interface LeaseState {
  readonly input: LeaseWorkflowInput;
  /** The lease as last recorded (or carried on unrecorded after a failed record); getLease answers it. */
  lease: Lease;
  /** The admit update's answer: the workflow waits for it before anything else. */
  admission: 'pending' | 'admitted' | 'rejected';
  rejection?: ApplicationFailure;
  deletion: 'none' | 'requested' | 'done';
  /** Bumped by every accepted update: sleeping loops recompute their deadlines. */
  revision: number;
  /** Delete updates not yet answered: the workflow ends only after them. */
  deletesAnswering: number;
  /** Earlier leases on the same resources that said they ended (predecessorEnded). */
  readonly endedPredecessors: Set<string>;
  /** A heal waits for the lock: signals arriving meanwhile join it. */
  healQueued: boolean;
  /** Preempted before its start with nothing of its window left (preempt.ts): it ended without starting. */
  endedEarly: boolean;
  /**
   * The latest cut told and not applied yet (preempt.ts), recorded as the signal arrives, before it
   * waits for the lock; cleared once applied, and when an update books the lease anew (the cut is moot then).
   */
  preemption?: LeasePreemption;
  /** The cut last applied, kept for the start (its reason); cleared as `preemption` is by a new booking. */
  preempted?: LeasePreemption;
  /** The latest cut's sequence seen: an older cut told again is ignored. */
  preemptionSequence?: number;
  /** An admin's answer to a lease waiting for approval, not yet acted on; `of`: the waiting change it answers (its requestedMs). */
  approvalAnswer?: { outcome: 'approved' | 'denied'; reason?: string; of?: number };
  /** A waiting change is being settled (change-approval.ts): answers are refused until it is done. */
  settlingChange?: boolean;
  /** One change at a time: transitions, updates and deletes never interleave. */
  readonly lock: Lock;
}

export function initialState(input: LeaseWorkflowInput): LeaseState {
  return {
    input,
    lease: input.carried ?? input.admitted ?? newLease(input.request),
    admission: input.carried || input.admitted ? 'admitted' : 'pending',
    deletion: 'none',
    revision: 0,
    deletesAnswering: 0,
    endedPredecessors: new Set<string>(),
    healQueued: false,
    endedEarly: false,
    preempted: input.carriedPreemption?.preempted,
    preemptionSequence: input.carriedPreemption?.sequence,
    lock: new Lock(),
  };
}

/** Updates reach only a lease that was admitted and is not yet deleted; otherwise it is not found (404). */
export function assertAdmitted(s: LeaseState): void {
  if (s.admission !== 'admitted' || s.deletion === 'done') {
    throw ApplicationFailure.create({ type: 'LeaseNotFound', message: `lease ${s.lease.id} not found`, nonRetryable: true });
  }
}

/**
 * A booking anew dropped the lease's owed cut (its row, up to `sequence`): a tell of it or of an
 * earlier one, waiting or still to come, is ignored.
 */
export function ignorePreemptionsUpTo(s: LeaseState, sequence: number): void {
  s.preemptionSequence = Math.max(s.preemptionSequence ?? sequence, sequence);
  if (s.preemption?.sequence !== undefined && s.preemption.sequence <= sequence) s.preemption = undefined;
}
