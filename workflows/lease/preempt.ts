/**
 * Preemption (issue 43), from the admission of a regular lease that needed this preemptible lease's
 * hosts: its bookings were cut in that admission's transaction; here the lease takes the new end
 * (the earliest cut: one lease, one end), says why, and tells its lessee (lease.preempting) at
 * once. Its before-end action and end then run at the new end as usual. A lease whose whole window
 * was taken before it started ends now.
 */
import { patched } from '@temporalio/workflow';
import { hasEnded, withEventTimes } from '../../src/domain/lease';
import { cutReason, preemptionDetails } from '../../src/domain/preemption';
import { LEASE_PREEMPTION } from '../patches';
import { announce, tellPolicyEnded } from './announce';
import type { LeaseApproval } from '../../src/domain/approval';
import { releaseAll } from './bookings';
import { settle, waitingChange } from './change-approval';
import type { LeasePreemption } from './messages';
import { notifySuccessors } from './neighbours';
import { transition } from './record';
import type { LeaseState } from './state';

/**
 * The leasePreempted signal's handler: applied under the lease's lock, after whatever change holds it.
 * The latest cut wins (its bookings end there); an older one told again is ignored.
 */
export async function preemptWhenFree(s: LeaseState, preemption: LeasePreemption): Promise<void> {
  if (preemption.sequence !== undefined) {
    if (s.preemptionSequence !== undefined && preemption.sequence <= s.preemptionSequence) return;
    s.preemptionSequence = preemption.sequence;
  }
  // Recorded at once: a start holding the lock meanwhile (startLease) must not start past the cut.
  s.preemption = preemption;
  await s.lock.run(() => preempt(s, preemption));
}

/**
 * An update booked the lease anew: the cuts told before it booked (`pending`, not applied yet, and
 * the one applied) are moot, its new bookings valid; one told while it booked is kept.
 */
export function forgetPreemptions(s: LeaseState, pending: LeasePreemption | undefined): void {
  if (s.preemption === pending) s.preemption = undefined;
  s.preempted = undefined;
}

/** What applying a cut did: moved the lease's end to it, or ended the lease (nothing of its window left); undefined: nothing. */
export type CutApplied = 'cut' | 'ended' | undefined;

/**
 * An update refused while a cut of the lease was owed and not applied (issue 43): its tell on the
 * way (`s.preemption`, waiting for the lock the update holds), or not sent yet (`latest`, the
 * lease's row in lease_preemptions, newer than any cut applied). Applied now, under the update's
 * lock, as the tell would be (new end, reason, `lease.preempting`); the tell, when it comes, is
 * ignored by its sequence. Answers what the cut did (undefined when none was owed, or it changed nothing).
 */
export async function preemptOwed(s: LeaseState, latest: LeasePreemption | undefined): Promise<CutApplied> {
  const newer = latest && (latest.sequence === undefined || s.preemptionSequence === undefined || latest.sequence > s.preemptionSequence) ? latest : undefined;
  const owed = newer ?? s.preemption;
  if (!owed || owed.endMs >= s.lease.endMs || hasEnded(s.lease.status)) return undefined;
  if (owed.sequence !== undefined) s.preemptionSequence = Math.max(s.preemptionSequence ?? owed.sequence, owed.sequence);
  s.preemption = owed;
  return preempt(s, owed);
}

/**
 * After its earlier leases ended, a preempted lease must not start when its (cut) end has come, or
 * when a cut not applied yet leaves nothing of its window: its hosts are another lease's now.
 */
export function preemptedBeforeStart(s: LeaseState): LeasePreemption | undefined {
  const preemption = s.preemption ?? s.preempted;
  if (!preemption) return undefined;
  const nowMs = Date.now();
  return nowMs >= s.lease.endMs || preemption.endMs <= Math.max(nowMs, s.lease.startMs) ? preemption : undefined;
}

/**
 * Ends a lease preempted before it started, nothing of it run (its other bookings freed), told as
 * every end is told. Its window becomes empty (its end at most its start) so that it is charged
 * nothing and counts against no policy; `fromStart`: its start_lease event was begun, and is undone.
 */
export async function endPreemptedUnstarted(s: LeaseState, preemption: LeasePreemption, fromStart = false): Promise<void> {
  const reason = cutReason(preemption);
  s.preemption = undefined;
  await releaseAll(s, s.lease, false);
  const reservations = s.lease.reservations.map((r) => ({ ...r, status: 'deleted' as const }));
  const endMs = Math.max(s.lease.startMs, Math.min(preemption.endMs, s.lease.endMs));
  const nowMs = Date.now();
  // Ended now (end_lease done); a start begun never ran (start_lease back to UNDONE); a wait for approval is answered.
  const events = s.lease.events.map((e) => {
    if (e.event_type === 'end_lease') return { ...e, status: 'DONE' as const, startedAt: nowMs, finishedAt: nowMs };
    return fromStart && e.event_type === 'start_lease' ? { id: e.id, event_type: e.event_type, time: e.time, status: 'UNDONE' as const } : e;
  });
  const waiting = s.lease.status === 'PENDING_APPROVAL' && s.lease.approval && !s.lease.approval.outcome ? s.lease.approval : undefined;
  const approval: LeaseApproval | undefined = waiting && { ...waiting, outcome: 'denied', answeredBy: 'preempted', answeredMs: nowMs };
  if (approval) s.approvalAnswer = undefined;
  await transition(s, { status: 'TERMINATED', statusReason: reason, reservations, endMs, events, ...(approval ? { approval } : {}) });
  s.endedEarly = true;
  s.revision++;
  await notifySuccessors(s);
  await announce(s, 'lease.preempting', preemptionDetails(preemption, reason, Date.now()), `preempt-${preemption.endMs}`);
  await announce(s, 'lease.event.end_lease');
  await tellPolicyEnded(s);
}

async function preempt(s: LeaseState, preemption: LeasePreemption): Promise<CutApplied> {
  if (!patched(LEASE_PREEMPTION.id)) return undefined;
  // A later cut came meanwhile (it is applied in its turn), or an update booked the lease anew.
  if (s.preemption !== preemption) return undefined;
  s.preemption = undefined;
  const lease = s.lease;
  // Told again (a sweep's retry), or ended meanwhile: nothing more to do.
  if (s.deletion !== 'none' || hasEnded(lease.status) || preemption.endMs >= lease.endMs) return undefined;
  const reason = cutReason(preemption);
  if ((lease.status === 'PENDING' || lease.status === 'PENDING_APPROVAL') && preemption.endMs <= lease.startMs) {
    // Nothing of its window is left, and nothing of it ran: it ends now (a wait for approval with it).
    await endPreemptedUnstarted(s, preemption);
    return 'ended';
  }
  const cut = withEventTimes({ ...lease, endMs: preemption.endMs, statusReason: reason });
  s.preempted = preemption;
  // A change waiting for approval is denied: approved later, it would move the end past the cut.
  const change = waitingChange(s);
  if (change) {
    // Its bookings go back to the cut lease (the cut already ended them there); should that fail, the cut stands.
    await settle(s, change, { ...change.approval, outcome: 'denied', answeredBy: 'preempted', answeredMs: Date.now() }, cut);
  } else {
    await transition(s, cut);
    s.revision++;
  }
  await announce(s, 'lease.preempting', preemptionDetails(preemption, reason, Date.now()), `preempt-${preemption.endMs}`);
  return 'cut';
}
