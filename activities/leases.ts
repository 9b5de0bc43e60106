/**
 * The lease's row in PostgreSQL, written only by the lease's own workflow. Every write carries the
 * lease's version, so a retried or late write of an older state changes nothing (idempotent).
 */
import { ApplicationFailure } from '@temporalio/common';
import { awaitingApproval, awaitingChangeApproval, type LeaseApproval, type PendingLeaseChange } from '../src/domain/approval';
import { leaseConflict, LeaseErrorType, type Lease, type RecordPolicy } from '../src/domain/lease';
import * as leaseRows from '../src/db/leases';
import { lendersOfBorrower } from '../src/db/host-lendings';
import { latestCutOf, preemptedAmong } from '../src/db/lease-preemptions';
import { DEFAULT_PREEMPT_WARNING_MS, toLeasePreemption, waitingKeysOf, type ToldPreemption } from '../src/domain/preemption';
import { policyFailure } from '../src/policy/enforcement';
import type { ActivityDeps } from './deps';

/** LK_PREEMPT_EVICTION_SECONDS's default, for a worker built without the setting (tests). */
const DEFAULT_EVICTION_MS = 120_000;

export function leaseActivities({ pool, eventStarted, usagePolicy, preemptionEvictionMs, preemptionWarningMs }: ActivityDeps) {
  /** Saves the row; with `policy`, only if the usage policy allows the change (in the same transaction), stamped waiting for approval if it needs one. */
  async function save(lease: Lease, policy?: RecordPolicy): Promise<{ outcome: leaseRows.SaveLeaseOutcome; saved: Lease }> {
    if (!policy || !usagePolicy) return { outcome: await leaseRows.saveLease(pool, lease), saved: lease };
    try {
      const subject = { next: lease, previous: policy.previous, byAdmin: policy.byAdmin, justification: policy.justification };
      return await usagePolicy.recordWithinPolicy(subject, async (client, approval) => {
        // An active lease's change waits as a pending change (the lease recorded as it was); a lease not started waits as a whole.
        const saved = approval && policy.previous?.status === 'ACTIVE' ? awaitingChangeApproval(policy.previous, lease, approval, lease.updatedMs) : awaitingApproval(lease, approval, lease.updatedMs);
        return { outcome: await leaseRows.saveLease(client, saved), saved };
      });
    } catch (err) {
      // Final for this request (the caller tries again later): a retry here would hold the lease's lock for the service's time-outs.
      throw policyFailure(err);
    }
  }

  return {
    /**
     * Answers the approval the lease now waits for, when the usage policy asked for one (the workflow
     * stamps it too): the lease's, or its change's (`pendingChange`: the lease was recorded as it was).
     */
    async recordLease(lease: Lease, policy?: RecordPolicy): Promise<{ approval?: LeaseApproval; pendingChange?: PendingLeaseChange } | undefined> {
      const { outcome, saved } = await save(lease, policy);
      if (outcome === 'saved' && eventStarted) {
        // The write that began an event: the workflow stamps it with the version's own time, and a retry is `stale`.
        for (const event of lease.events) {
          if (event.status === 'IN_PROGRESS' && event.startedAt === lease.updatedMs) eventStarted(event.event_type, event.startedAt - event.time);
        }
      }
      // `stale`: a retried write (fine). `deleted`: a new workflow under a deleted lease's id (its
      // Idempotency-Key reused) must not live on with no row: final.
      if (outcome === 'deleted') {
        throw ApplicationFailure.nonRetryable(`Lease ${lease.id}, created with this Idempotency-Key, was deleted: use another key for a new lease`, LeaseErrorType.deleted);
      }
      if (outcome === 'name-taken') throw leaseConflict(`The lease with name: ${lease.name} already exists. Names are unique per project (${lease.projectId}).`);
      if (saved.pendingChange !== lease.pendingChange) return { pendingChange: saved.pendingChange };
      return saved.approval !== lease.approval ? { approval: saved.approval } : undefined;
    },

    async recordLeaseDeleted(lease: Lease): Promise<void> {
      await leaseRows.markLeaseDeleted(pool, lease);
    },

    /**
     * Live leases that hold one of `keys` and started before `startMs`: they must end before this
     * lease starts; a borrower's lenders hold its hosts around it (issue 43), never before it. Of
     * the preemption keys, only the leases this one cut (waitingKeysOf).
     */
    async findPredecessors(input: { leaseId: string; keys: string[]; startMs: number }): Promise<string[]> {
      const { shared, cutLeaseIds } = waitingKeysOf(input.leaseId, input.keys);
      return leaseRows.findPredecessors(pool, { ...input, keys: shared, alsoIds: cutLeaseIds, exceptIds: await lendersOfBorrower(pool, input.leaseId) });
    },

    /**
     * Of the earlier leases a start waits for, those preempted (issue 43), and how long the start
     * waits for them at most (LK_PREEMPT_EVICTION_SECONDS): then it starts anyway.
     */
    async preemptedPredecessors(input: { ids: string[] }): Promise<{ preempted: string[]; evictionMs: number }> {
      return { preempted: await preemptedAmong(pool, input.ids), evictionMs: preemptionEvictionMs ?? DEFAULT_EVICTION_MS };
    },

    /**
     * The lease's latest cut (issue 43), told or not, as its tell says it (the deployment's warning
     * with it), or undefined: an update refused while one was owed applies it and tries again (the
     * workflow knows one it applied already by its sequence).
     */
    async latestPreemption(input: { leaseId: string }): Promise<ToldPreemption | undefined> {
      const cut = await latestCutOf(pool, input.leaseId);
      return cut && toLeasePreemption(cut, preemptionWarningMs ?? DEFAULT_PREEMPT_WARNING_MS);
    },

    /**
     * Later leases on one of `keys` (starting after `startMs`): they are told when this lease has
     * ended. `waitingOnly`: just those already waiting in STARTING (few; the status index finds
     * them), not every PENDING lease booked after this one.
     */
    async findSuccessors(input: { leaseId: string; keys: string[]; startMs: number; waitingOnly?: boolean }): Promise<string[]> {
      return leaseRows.findSuccessors(pool, input);
    },
  };
}
