/**
 * The active lease: it sleeps until its next event (a warning before the end, an idle check, the
 * before-end action, the end) and runs it.
 */
import { log, patched } from '@temporalio/workflow';
import { spanText, withEventTimes, type EventType } from '../../src/domain/lease';
import { reservationContext as context } from '../../src/domain/resource-plugin';
import { BEFORE_END_WARNINGS, IDLE_LEASES, LEASE_LENDING } from '../patches';
import { looking, patient } from './activity-options';
import { announce } from './announce';
import { changeAnswer, changeDeadline, settleChange, waitingChange } from './change-approval';
import { endLease } from './end';
import { failureMessage } from './failures';
import { nextLendingReturn, returnLent, suggestLending } from './lend';
import { transition } from './record';
import type { LeaseState } from './state';
import { sleepUntil } from './waiting';

interface ActiveEvent {
  type: EventType;
  time: number;
  /** A warning before the end: its offset. */
  warning?: number;
  idleCheck?: true;
  /** The deadline of a change waiting for approval (its timeout, or the end if that comes first). */
  changeDue?: true;
  /** Lent hosts are due back (their lending's end, or their reclaim's return: lend.ts). */
  lendingReturn?: true;
}

/**
 * Sleeps until the active lease's next event, then runs it; answers 'delete' when a delete came
 * first. A change waiting for approval is settled first when answered or due (change-approval.ts).
 */
export async function nextActiveStep(s: LeaseState): Promise<'done' | 'delete'> {
  const answered = () => changeAnswer(s) !== undefined;
  if ((await sleepUntil(s, () => nextActiveEvent(s), answered)) === 'delete') return 'delete';
  const next = nextActiveEvent(s);
  if (answered() || next.changeDue) {
    await settleChange(s);
    return 'done';
  }
  if (next.warning !== undefined) await warnBeforeEnd(s, next.warning);
  else if (next.idleCheck) await checkIdle(s);
  else if (next.lendingReturn) await returnLent(s);
  else if (next.type === 'before_end_lease') await runBeforeEnd(s);
  else await endLease(s);
  return 'done';
}

/** While active: the lease's next event, or a waiting change's deadline when it comes first (never after the end). */
function nextActiveEvent(s: LeaseState): ActiveEvent {
  const event = nextLeaseEvent(s);
  const change = waitingChange(s);
  if (!change) return event;
  const due = changeDeadline(s, change);
  return due <= event.time ? { type: 'end_lease', time: due, changeDue: true } : event;
}

/**
 * The before-end action if it has not run (it is never due after the end), else the end; a warning
 * before the end (`warning`: its offset) when one is due earlier.
 */
function nextLeaseEvent(s: LeaseState): ActiveEvent {
  const lease = s.lease;
  const beforeEnd = lease.events.find((e) => e.event_type === 'before_end_lease')!;
  const actionDue = beforeEnd.status === 'UNDONE' && beforeEnd.time <= lease.endMs;
  const due = actionDue ? { type: 'before_end_lease' as const, time: beforeEnd.time } : { type: 'end_lease' as const, time: lease.endMs };
  const idleCheckAt = nextIdleCheck(s);
  const idleOrDue = idleCheckAt !== undefined && idleCheckAt < due.time ? { type: due.type, time: idleCheckAt, idleCheck: true as const } : due;
  const event = lendingReturnBefore(s, idleOrDue);
  if (!lease.notifyBeforeEndMs?.length || !patched(BEFORE_END_WARNINGS.id)) return event;
  // Not warned yet of this end; not before the start; not when the before-end event's own notice says it at that moment.
  const warnings = lease.notifyBeforeEndMs
    .filter((offset) => lease.warnedBeforeEnd?.[String(offset)] !== lease.endMs)
    .map((offset) => ({ offset, time: lease.endMs - offset }))
    .filter((w) => w.time >= lease.startMs && w.time < lease.endMs && !(actionDue && w.time === beforeEnd.time))
    .sort((a, b) => a.time - b.time);
  const first = warnings[0];
  return first && first.time < event.time ? { type: 'before_end_lease', time: first.time, warning: first.offset } : event;
}

/** A lending's return when it comes before `event` (only a lease that lent asks the patch: old histories replay as they were). */
function lendingReturnBefore(s: LeaseState, event: ActiveEvent): ActiveEvent {
  const back = nextLendingReturn(s.lease);
  if (!back || back.time >= event.time || !patched(LEASE_LENDING.id)) return event;
  return { type: event.type, time: back.time, lendingReturn: true };
}

/** When to look next whether anyone uses the lease: a quarter of its shortest idle limit, between 1 s and 15 min. */
function nextIdleCheck(s: LeaseState): number | undefined {
  const limits = [s.lease.idle?.warnAfterMs, s.lease.idle?.endAfterMs].filter((ms): ms is number => ms !== undefined && ms > 0);
  if (limits.length === 0 || !patched(IDLE_LEASES.id)) return undefined;
  const step = Math.min(Math.max(Math.min(...limits) / 4, 1_000), 15 * 60_000);
  return (s.lease.idleCheckedMs ?? s.lease.startMs) + step;
}

/** A warning before the end: a notice only (the lease's state is unchanged), once per offset and end. */
async function warnBeforeEnd(s: LeaseState, offset: number): Promise<void> {
  await s.lock.run(async () => {
    s.lease = { ...s.lease, warnedBeforeEnd: { ...s.lease.warnedBeforeEnd, [String(offset)]: s.lease.endMs } };
    await announce(s, 'lease.event.before_end_lease', { notify_before_end: spanText(offset), time_left_seconds: Math.max(0, Math.round((s.lease.endMs - Date.now()) / 1000)) }, `warning-${offset}-${s.lease.endMs}`);
  });
}

/**
 * Idle-lease reaping (Chameleon's reaper, in the lease's own life): idle when no reservation that
 * can tell is in use. Idle for warnAfterMs: `lease.idle`, once per idle spell; for endAfterMs: the
 * lease ends now, saying why. A look that fails counts as in use: nothing is ended on a doubt.
 */
async function checkIdle(s: LeaseState): Promise<void> {
  await s.lock.run(async () => {
    let seen: Array<boolean | undefined>;
    try {
      seen = [];
      for (const reservation of s.lease.reservations) seen.push(await looking.reservationInUse(context(s.lease, reservation)));
    } catch (err) {
      log.warn('could not tell whether the lease is in use', { leaseId: s.lease.id, error: failureMessage(err) });
      seen = [true];
    }
    await suggestLending(s);
    const now = Date.now();
    const idle = seen.some((v) => v === false) && !seen.some((v) => v === true);
    s.lease = idle ? { ...s.lease, idleSince: s.lease.idleSince ?? now, idleCheckedMs: now } : { ...s.lease, idleSince: undefined, idleWarned: undefined, idleCheckedMs: now };
    const since = s.lease.idleSince;
    if (since === undefined) return;
    const { warnAfterMs, endAfterMs } = s.lease.idle ?? {};
    if (warnAfterMs !== undefined && now - since >= warnAfterMs && !s.lease.idleWarned) {
      s.lease = { ...s.lease, idleWarned: true };
      await announce(s, 'lease.idle', { idle_since: new Date(since).toISOString(), ...(endAfterMs !== undefined ? { ends_at: new Date(Math.min(s.lease.endMs, since + endAfterMs)).toISOString() } : {}) }, `idle-${since}`);
    }
    if (endAfterMs !== undefined && now - since >= endAfterMs && now < s.lease.endMs) {
      const reason = `ended early: nothing of project ${s.lease.projectId} has used the lease since ${new Date(since).toISOString()} (idle for ${spanText(Math.round((now - since) / 1000) * 1000)}; the deployment ends idle leases after ${spanText(endAfterMs)})`;
      log.info('ending an idle lease', { leaseId: s.lease.id, idleSince: since });
      await transition(s, withEventTimes({ ...s.lease, endMs: now, statusReason: reason }));
    }
  });
}

/** The before-end action (snapshot, notice): a courtesy, whose failure does not end the lease. */
async function runBeforeEnd(s: LeaseState): Promise<void> {
  await s.lock.run(async () => {
    await transition(s, {}, 'before_end_lease', 'IN_PROGRESS');
    try {
      for (const reservation of s.lease.reservations) await patient.beforeEndReservation(context(s.lease, reservation));
      await transition(s, {}, 'before_end_lease', 'DONE');
      await announce(s, 'lease.event.before_end_lease');
    } catch (err) {
      await transition(s, { statusReason: `before_end failed: ${failureMessage(err)}` }, 'before_end_lease', 'ERROR');
    }
  });
}
