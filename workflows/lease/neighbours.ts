/**
 * Back-to-back leases on the same resources: a lease starts once every earlier lease on them has
 * ended, and tells the later ones when it ends.
 */
import { condition, getExternalWorkflowHandle, log, patched, setCurrentDetails } from '@temporalio/workflow';
import type { Lease } from '../../src/domain/lease';
import { DELETE_INTERRUPTS_PREDECESSOR_WAIT, LEASE_PREEMPTION, TELL_WAITING_SUCCESSORS } from '../patches';
import { recording } from './activity-options';
import { failureMessage } from './failures';
import { leaseWorkflowId, predecessorEnded } from './messages';
import type { LeaseState } from './state';
import { describeWaitingForPredecessors } from './web-ui';

/** How long to wait for a predecessor's signal before looking at its row again. */
const PREDECESSOR_RECHECK_MS = 60_000;

/**
 * Waits until every earlier lease on the same resources has ended, unless this one is deleted
 * meanwhile. Since the patch, preempted ones (issue 43) are waited for at most the eviction bound
 * (LK_PREEMPT_EVICTION_SECONDS) from when only they were left: then the lease starts anyway, as on a host
 * not yet clean (their end still runs, on the hosts' servers of theirs).
 */
export async function waitForPredecessors(s: LeaseState): Promise<'ready' | 'deleted'> {
  const keys = leaseResourceKeys(s.lease);
  if (keys.length === 0) return 'ready';
  // A delete used to wait for the predecessors to end (it needs the lock this wait holds).
  const deleteInterrupts = patched(DELETE_INTERRUPTS_PREDECESSOR_WAIT.id);
  const preempted = new Set<string>();
  const classified = new Set<string>();
  let evictionMs: number | undefined;
  let evictionUntil: number | undefined;
  for (;;) {
    if (deleteInterrupts && s.deletion !== 'none') return 'deleted';
    const waiting = (await recording.findPredecessors({ leaseId: s.lease.id, keys, startMs: s.lease.startMs })).filter((id) => !s.endedPredecessors.has(id));
    if (waiting.length === 0) return 'ready';
    const unclassified = waiting.filter((id) => !classified.has(id));
    if (unclassified.length > 0 && patched(LEASE_PREEMPTION.id)) {
      const answer = await recording.preemptedPredecessors({ ids: unclassified });
      for (const id of unclassified) classified.add(id);
      for (const id of answer.preempted) preempted.add(id);
      evictionMs = answer.evictionMs;
    }
    // The bound runs from when only preempted leases are left: a regular one still on a host is waited for in full first.
    if (evictionMs !== undefined && waiting.every((id) => preempted.has(id))) evictionUntil ??= Date.now() + evictionMs;
    const overdue = evictionUntil !== undefined && Date.now() >= evictionUntil;
    const blocking = waiting.filter((id) => !(overdue && preempted.has(id)));
    if (blocking.length === 0) {
      log.warn('starting before preempted leases on the same resources ended: the eviction bound passed', { leaseId: s.lease.id, preempted: waiting });
      return 'ready';
    }
    setCurrentDetails(describeWaitingForPredecessors(waiting));
    // A preempted one is waited for until the eviction bound at most.
    const bounded = !overdue && evictionUntil !== undefined && blocking.some((id) => preempted.has(id));
    const timeout = bounded ? Math.max(1, Math.min(PREDECESSOR_RECHECK_MS, evictionUntil! - Date.now())) : PREDECESSOR_RECHECK_MS;
    // Woken also when every regular one has ended with preempted ones left: the eviction bound starts then, not at the recheck.
    const boundDue = evictionMs !== undefined && evictionUntil === undefined && blocking.some((id) => preempted.has(id));
    const regularEnded = () => boundDue && blocking.every((id) => preempted.has(id) || s.endedPredecessors.has(id));
    await condition(() => blocking.every((id) => s.endedPredecessors.has(id)) || regularEnded() || (deleteInterrupts && s.deletion !== 'none'), timeout, {
      summary: 'until earlier leases end',
    });
  }
}

/**
 * Tells the later leases on the same resources that this one has ended. Since the patch, only
 * those already waiting (STARTING), and only after this lease's end is recorded: a later lease
 * that reads its predecessors before that record is STARTING before this query runs, so it is
 * told; one that reads after it sees this lease ended. Leases still PENDING find out from the
 * table when their start comes. Telling every later lease made deleting N leases on a host cost
 * N² signals (issue 23).
 */
export async function notifySuccessors(s: LeaseState): Promise<void> {
  const keys = leaseResourceKeys(s.lease);
  if (keys.length === 0) return;
  const waitingOnly = patched(TELL_WAITING_SUCCESSORS.id);
  const successors = await recording.findSuccessors({ leaseId: s.lease.id, keys, startMs: s.lease.startMs, ...(waitingOnly ? { waitingOnly } : {}) });
  for (const id of successors) {
    try {
      await getExternalWorkflowHandle(leaseWorkflowId(id)).signal(predecessorEnded, s.lease.id);
    } catch (err) {
      // A later lease that finished meanwhile (deleted) has nothing to wait for: not an error.
      if (waitingOnly) log.debug('a later lease was gone before it could be told', { successor: id, error: failureMessage(err) });
      else log.warn('could not tell a later lease that this one ended', { successor: id, error: failureMessage(err) });
    }
  }
}

function leaseResourceKeys(lease: Lease): string[] {
  return [...new Set(lease.reservations.flatMap((r) => r.resourceKeys ?? []))];
}
