/**
 * The start: at its time (less the provisioning lead), once the earlier leases on the same
 * resources have ended, every reservation starts (its hook, or its steps); never half-started.
 */
import { CancellationScope, log, patched, setCurrentDetails } from '@temporalio/workflow';
import type { Reservation } from '../../src/domain/lease';
import { reservationContext as context, type ReservationContext } from '../../src/domain/resource-plugin';
import { START_SHOWS_BOOT_WAIT, TELL_WAITING_SUCCESSORS } from '../patches';
import { forStep, mustFinish, patient, quick } from './activity-options';
import { announce } from './announce';
import { untilApproved } from './approval';
import { failureMessage } from './failures';
import { clearedHoldReason } from './hold';
import { notifySuccessors, waitForPredecessors } from './neighbours';
import { endPreemptedUnstarted, preemptedBeforeStart } from './preempt';
import { transition } from './record';
import { withAllocations, withoutFlag } from './reservations';
import type { LeaseState } from './state';
import { sleepUntil } from './waiting';
import { describeStartStep } from './web-ui';

/**
 * Pending: sleeps until the start is due (resources are made ready a provisioning lead time before
 * it, 0 by default), unless deleted first. An update that made the lease wait for approval (an
 * exception, an approval rule) is answered first: 'ended' when it was denied, or when it was
 * preempted with nothing of its window left.
 */
export async function waitForStart(s: LeaseState): Promise<'due' | 'delete' | 'ended'> {
  for (;;) {
    const woke = await sleepUntil(s, () => ({ type: 'start_lease' as const, time: s.lease.startMs - (s.lease.provisioningLeadMs ?? 0) }), () => s.lease.status === 'PENDING_APPROVAL' || s.endedEarly);
    if (woke !== 'interrupted') return woke;
    if (s.endedEarly) return 'ended'; // preempted before its start (preempt.ts)
    if ((await untilApproved(s)) === 'delete') return 'delete';
    if (s.lease.status !== 'PENDING') return 'ended';
  }
}

export async function startLease(s: LeaseState): Promise<void> {
  await s.lock.run(async () => {
    await transition(s, { status: 'STARTING' }, 'start_lease', 'IN_PROGRESS');
    if ((await waitForPredecessors(s)) === 'deleted') {
      await transition(s, { status: 'PENDING' }); // nothing started: the delete frees the bookings as for a pending lease
      return;
    }
    // Preempted, and its (cut) end came while it waited for its earlier leases: starting would take hosts another lease holds.
    const preempted = preemptedBeforeStart(s);
    if (preempted) {
      await endPreemptedUnstarted(s, preempted, true);
      return;
    }
    const waitReason = patched(START_SHOWS_BOOT_WAIT.id) ? await showStartWait(s) : undefined;
    const started: Reservation[] = [];
    const allocations = new Map<string, Record<string, unknown>>();
    try {
      for (const reservation of s.lease.reservations) {
        // Later reservations see what earlier ones reported (e.g. the server a bandwidth reservation's ports are for).
        const ctx = context({ ...s.lease, reservations: withAllocations(s.lease.reservations, allocations) }, reservation);
        const outcome = reservation.startSteps?.length ? await runStartSteps(s, ctx, reservation.startSteps) : await patient.startReservation(ctx);
        if (outcome?.allocation) allocations.set(reservation.id, outcome.allocation);
        started.push(reservation);
      }
    } catch (err) {
      await failStart(s, err, started);
      return;
    }
    // A pending reservation moved by healing shows it until its start.
    const reservations = withAllocations(s.lease.reservations, allocations).map((r) => ({ ...withoutFlag(r, 'resources_changed'), status: 'active' as const }));
    const waitOver = waitReason !== undefined && s.lease.statusReason === waitReason ? { statusReason: undefined } : {};
    await transition(s, { status: 'ACTIVE', reservations, ...clearedHoldReason(s.lease), ...waitOver }, 'start_lease', 'DONE');
    await announce(s, 'lease.event.start_lease');
  });
}

/**
 * Asks each reservation why its start will wait, if it will (hosts still booting after a wake, issue
 * 48), and shows it as the lease's status_reason while the start runs (the start clears it). Only
 * shown: a question that fails costs nothing but the reason. Answers the reason shown.
 */
async function showStartWait(s: LeaseState): Promise<string | undefined> {
  const reasons: string[] = [];
  for (const reservation of s.lease.reservations) {
    try {
      const reason = await quick.startWaitReason(context(s.lease, reservation));
      if (reason) reasons.push(reason);
    } catch (err) {
      log.warn('could not ask why a start would wait', { leaseId: s.lease.id, reservationId: reservation.id, error: failureMessage(err) });
    }
  }
  if (reasons.length === 0) return undefined;
  const statusReason = reasons.join('; ');
  await transition(s, { statusReason });
  return statusReason;
}

/** Never half-started: take back what started, free every booking, and say why. */
async function failStart(s: LeaseState, err: unknown, started: Reservation[]): Promise<void> {
  const reason = `start failed: ${failureMessage(err)}`;
  log.error('lease start failed', { leaseId: s.lease.id, reason });
  await CancellationScope.nonCancellable(async () => {
    for (const reservation of s.lease.reservations) {
      await mustFinish.endReservation({ ...context(s.lease, reservation), started: started.includes(reservation) });
    }
  });
  const reservations = s.lease.reservations.map((r) => ({ ...r, status: 'error' as const }));
  await transition(s, { status: 'ERROR', statusReason: reason, reservations }, 'start_lease', 'ERROR');
  if (patched(TELL_WAITING_SUCCESSORS.id)) await notifySuccessors(s);
  await announce(s, 'lease.error', { reason });
}

/** A start made of steps: each its own activity with the step's time-out and retries; each hands its state to the next. */
async function runStartSteps(s: LeaseState, ctx: ReservationContext, steps: NonNullable<Reservation['startSteps']>): Promise<{ allocation: Record<string, unknown> }> {
  let state: Record<string, unknown> = {};
  let allocation: Record<string, unknown> = {};
  for (const [index, step] of steps.entries()) {
    setCurrentDetails(describeStartStep(s.lease, ctx.reservation.id, index, steps.length, step.name));
    const outcome = await forStep(step).startReservationStep({ ...ctx, step: step.name, state });
    state = outcome.state;
    allocation = { ...allocation, ...outcome.allocation };
  }
  return { allocation };
}
