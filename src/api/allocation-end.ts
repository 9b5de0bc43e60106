/**
 * A project's allocation end moved earlier (`allocation_end` in `PUT /v1/projects/{id}/policy`):
 * its leases past it are ended through the normal paths, so that their workflows are told and the
 * usual notices go out. A lease that would start at or after the end is deleted (`lease.delete`);
 * one that starts before it has its end moved to the allocation end (`lease.update`; now, when the
 * allocation end has passed). Bounded (a batch and a time budget per policy update) and idempotent:
 * a lease done is no longer past the end, so a repeated update goes on with the leases skipped
 * (failed) or not reached; the answer lists both. Kept in the request (not a workflow of its own)
 * so that the admin's PUT answers what was ended; the bounds keep the request short.
 */
import { findLease, projectLeasesEndingAfter } from '../db/leases';
import type { Pool } from '../db/pool';
import type { Lease } from '../domain/lease';
import { changeLease, removeLease, type LeaseCommandOptions } from './lease-commands';

/**
 * Leases ended per policy update, one workflow update after another: at most this many, and none
 * started past the time budget (endLeasesPastAllocation's `budgetMs`); the rest are left for a repeat.
 */
export const ALLOCATION_END_BATCH = 100;

export interface AllocationEndOutcome {
  shortened: string[];
  deleted: string[];
  /** Leases that could not be ended (skipped, each with why): a repeat of the update tries them again. */
  failed: Array<{ lease_id: string; reason: string }>;
  /** Leases past the end not tried (past the batch or the time budget): a repeat goes on with them. */
  remaining: number;
}

/** How a lease is ended: by default its workflow's delete and update (the API's own paths). */
export interface LeaseEnders {
  remove(lease: Lease): Promise<'gone' | 'past-deadline'>;
  shorten(lease: Lease, end: number | 'now'): Promise<unknown>;
}

export function workflowEnders(deps: { pool: Pool; commands: LeaseCommandOptions }): LeaseEnders {
  return {
    remove: (lease) => removeLease(deps.commands, lease.id, () => findLease(deps.pool, lease.id)),
    shorten: (lease, end) => changeLease(deps.commands, lease.id, { end, byAdmin: true }),
  };
}

/**
 * Ends the project's leases past `allocationEndMs` (a whole minute: allocationEndMs), one at a time,
 * until ALLOCATION_END_BATCH are done or `budgetMs` has gone by (each update is itself bounded by
 * the API's timeout, so the whole takes at most budgetMs plus one such timeout). A lease that fails
 * is skipped and reported, so that one lease that cannot be ended never keeps the others past the end.
 * `preemptibleExempt`: the project's `preemptible_exempt` names allocation_end: its preemptible leases are left as they are.
 */
export async function endLeasesPastAllocation(deps: { pool: Pool; enders: LeaseEnders }, projectId: string, allocationEndMs: number, budgetMs: number, preemptibleExempt = false): Promise<AllocationEndOutcome> {
  const startedMs = Date.now();
  const past = await projectLeasesEndingAfter(deps.pool, projectId, allocationEndMs, ALLOCATION_END_BATCH + 1, preemptibleExempt);
  const outcome: AllocationEndOutcome = { shortened: [], deleted: [], failed: [], remaining: 0 };
  const batch = past.slice(0, ALLOCATION_END_BATCH);
  for (const [i, lease] of batch.entries()) {
    if (Date.now() - startedMs > budgetMs) {
      outcome.remaining = past.length - i;
      return outcome;
    }
    try {
      if (lease.startMs >= allocationEndMs) {
        if ((await deps.enders.remove(lease)) === 'past-deadline') outcome.failed.push({ lease_id: lease.id, reason: 'its deletion did not finish in time' });
        else outcome.deleted.push(lease.id);
      } else {
        await deps.enders.shorten(lease, allocationEndMs > Date.now() ? allocationEndMs : 'now');
        outcome.shortened.push(lease.id);
      }
    } catch (err) {
      outcome.failed.push({ lease_id: lease.id, reason: err instanceof Error ? err.message : String(err) });
    }
  }
  // One more was read than the batch: more may be past the end (a repeat counts them anew).
  outcome.remaining = past.length - batch.length;
  return outcome;
}
