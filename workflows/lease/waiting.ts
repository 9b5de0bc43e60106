/** The lease at rest between its events: timers, woken by updates and deletes, and continuing as new while idle. */
import { allHandlersFinished, condition, continueAsNew, workflowInfo } from '@temporalio/workflow';
import type { EventType } from '../../src/domain/lease';
import type { LeaseWorkflow } from './messages';
import type { LeaseState } from './state';

/**
 * Sleeps until the next event is due, re-reading it after every accepted update, unless a
 * delete arrives first (or `interrupt` holds: 'interrupted'). Long lives with many updates continue as new here, at rest.
 */
export async function sleepUntil(s: LeaseState, next: () => { type: EventType; time: number }, interrupt: () => boolean = () => false): Promise<'due' | 'delete' | 'interrupted'> {
  for (;;) {
    if (s.deletion !== 'none') return 'delete';
    if (interrupt()) return 'interrupted';
    const { type, time } = next();
    const remaining = time - Date.now();
    if (remaining <= 0) return 'due';
    if (workflowInfo().continueAsNewSuggested) await continueAsNewWhenIdle(s);
    const seen = s.revision;
    await condition(() => s.revision !== seen || s.deletion !== 'none' || interrupt() || workflowInfo().continueAsNewSuggested, remaining, { summary: `until ${type}` });
  }
}

/** Ended (TERMINATED or ERROR): the lease can still be renamed and deleted; it waits for the delete. */
export async function waitForDelete(s: LeaseState): Promise<void> {
  for (;;) {
    await condition(() => s.deletion !== 'none' || workflowInfo().continueAsNewSuggested);
    if (s.deletion !== 'none') return;
    await continueAsNewWhenIdle(s);
  }
}

async function continueAsNewWhenIdle(s: LeaseState): Promise<never> {
  await condition(() => allHandlersFinished() && !s.lock.held);
  // The lease as it stands is all the next run needs (an admitted lease's first state goes), with its
  // kept cut and sequence (a cut told again after the new run began is still recognised as stale).
  const carriedPreemption = s.preempted !== undefined || s.preemptionSequence !== undefined ? { preempted: s.preempted, sequence: s.preemptionSequence } : undefined;
  return continueAsNew<LeaseWorkflow>({ ...s.input, admitted: undefined, carried: s.lease, carriedPreemption });
}
