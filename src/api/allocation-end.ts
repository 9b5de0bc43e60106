/**
 * A project's allocation end moved earlier (`allocation_end` in `PUT /v1/projects/{id}/policy`):
 * its leases past it are ended through the normal paths, so that their workflows are told and the
 * usual notices go out. A lease that would start at or after the end is deleted (`lease.delete`);
 * one that starts before it has its end moved to the allocation end (`lease.update`; now, when the
 * allocation end has passed). Bounded (a batch per policy update) and idempotent: a lease done is no
 * longer past the end, so a repeated update goes on where one that failed stopped.
 */
import { ApiError } from './errors';
import { findLease, projectLeasesEndingAfter } from '../db/leases';
import type { Pool } from '../db/pool';
import type { Lease } from '../domain/lease';
import { changeLease, removeLease, type LeaseCommandOptions } from './lease-commands';

/** Leases ended per policy update: past it, the update answers 503 and repeating it goes on. */
export const ALLOCATION_END_BATCH = 100;

export interface AllocationEndOutcome {
  shortened: string[];
  deleted: string[];
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

export async function endLeasesPastAllocation(deps: { pool: Pool; enders: LeaseEnders }, projectId: string, allocationEndMs: number): Promise<AllocationEndOutcome> {
  const past = await projectLeasesEndingAfter(deps.pool, projectId, allocationEndMs, ALLOCATION_END_BATCH + 1);
  const outcome: AllocationEndOutcome = { shortened: [], deleted: [] };
  const unfinished = (lease: string, why: string) =>
    new ApiError(503, `The policy is saved, but the leases past its allocation_end are not all ended (${outcome.deleted.length} deleted, ${outcome.shortened.length} shortened): lease ${lease}: ${why}; repeat the PUT to finish.`);
  for (const lease of past.slice(0, ALLOCATION_END_BATCH)) {
    let failure: string | undefined;
    try {
      if (lease.startMs >= allocationEndMs) {
        if ((await deps.enders.remove(lease)) === 'past-deadline') failure = 'its deletion did not finish in time';
        else outcome.deleted.push(lease.id);
      } else {
        await deps.enders.shorten(lease, allocationEndMs > Date.now() ? allocationEndMs : 'now');
        outcome.shortened.push(lease.id);
      }
    } catch (err) {
      failure = err instanceof Error ? err.message : String(err);
    }
    if (failure !== undefined) throw unfinished(lease.id, failure);
  }
  if (past.length > ALLOCATION_END_BATCH) throw unfinished(past[ALLOCATION_END_BATCH].id, `more than ${ALLOCATION_END_BATCH} leases per update`);
  return outcome;
}
