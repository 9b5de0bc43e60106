/**
 * One lease, its whole life, as one durable workflow (id `lease-<uuid>`):
 *
 *   admission ─ PENDING ──(start)── STARTING ── ACTIVE ──(before end)──(end)── TERMINATING ── TERMINATED
 *                  │                   │           │                               │
 *                  └──── delete ───────┴──── DELETING (cleanup for the phase) ─────┴─── row removed, done
 *
 * A lease the usage policy holds for approval is admitted PENDING_APPROVAL first (approval.ts): approved,
 * it goes on PENDING; denied (or timed out, per its rule), it ends TERMINATED, its capacity freed.
 * An active lease's change may wait for approval too (change-approval.ts): booked at once, in
 * effect once approved; denied, timed out or overtaken by the end, the lease goes on as it was.
 *
 * Timers, not polling: the workflow sleeps until each event is due and wakes early when an update
 * moves a date or a delete arrives. Every transition is written to PostgreSQL (the API reads
 * leases from there) and to search attributes and the Web UI's current details.
 * Resource types act through the reservation hooks (reserve / start / before-end / end); a lease
 * with no reservations is valid and goes through the same life.
 *
 * Each phase is a module of its own, all sharing one LeaseState (state.ts): admission.ts, hold.ts,
 * start.ts, active.ts (warnings, idle checks, before-end), end.ts, delete.ts; the messages in
 * handlers.ts (update.ts, heal.ts); the steps they share in record.ts, bookings.ts, neighbours.ts,
 * announce.ts and waiting.ts. Every patch they take is in ../patches.ts.
 */
import { CancellationScope, isCancellation, setCurrentDetails } from '@temporalio/workflow';
import { nextActiveStep } from './active';
import { awaitAdmission } from './admission';
import { untilApproved } from './approval';
import { remove } from './delete';
import { answerMessages } from './handlers';
import { holdUntilStart } from './hold';
import type { LeaseOutcome, LeaseWorkflowInput } from './messages';
import { startLease, waitForStart } from './start';
import { initialState } from './state';
import { waitForDelete } from './waiting';
import { describe } from './web-ui';

export async function leaseWorkflow(input: LeaseWorkflowInput): Promise<LeaseOutcome> {
  const s = initialState(input);
  answerMessages(s);
  if (input.admitted) setCurrentDetails(describe(s.lease));

  const notAdmitted = await awaitAdmission(s);
  if (notAdmitted) return notAdmitted;

  try {
    if ((await untilApproved(s)) === 'delete') return await remove(s);
    if (s.lease.status === 'PENDING' && s.lease.reservations.some((r) => r.hold === 'due')) await holdUntilStart(s);
    if (s.lease.status === 'PENDING') {
      const woke = await waitForStart(s);
      if (woke === 'delete') return await remove(s);
      if (woke === 'due') await startLease(s);
    }
    while (s.lease.status === 'ACTIVE') {
      if ((await nextActiveStep(s)) === 'delete') return await remove(s);
    }
    // TERMINATED or ERROR: the lease can still be renamed and deleted.
    await waitForDelete(s);
    return await remove(s);
  } catch (err) {
    if (!isCancellation(err)) throw err;
    // Cancelled from the Web UI or CLI: treat as a delete, and finish it whatever happens.
    await CancellationScope.nonCancellable(() => remove(s));
    throw err;
  }
}
