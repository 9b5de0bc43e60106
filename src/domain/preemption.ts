/**
 * Preemptible leases (issue 43), what the preempted lessee is told: why its lease ends early (the
 * other lease's need, never its owner or id), and how much warning it got against the deployment's.
 */
import { formatMessageDate } from './dates';
import type { Lease, Reservation } from './lease';

/**
 * A preemptible reservation: its parameters say `preemptible: true`, whatever its type (each type's
 * parameters decide whether it may; one recorded before the parameter existed is regular).
 */
export function isPreemptibleReservation(reservation: Pick<Reservation, 'params'>): boolean {
  return (reservation.params as { preemptible?: unknown } | undefined)?.preemptible === true;
}

/** A preemptible lease: it has reservations, and every one is preemptible (a mixed lease is regular). */
export function isPreemptibleLease(lease: Pick<Lease, 'reservations'>): boolean {
  return lease.reservations.length > 0 && lease.reservations.every(isPreemptibleReservation);
}

/** How a preempted lease's status_reason begins (the calendar tells an ended one by it once its cut's row is purged). */
export const PREEMPTION_REASON_PREFIX = 'preempted:';

/** How a borrower's status_reason begins when its lender took the host back (reclaimReason). */
const RECLAIM_REASON_PREFIX = 'reclaimed:';

/** Whether a status_reason is a preemption's (preemptionReason) or a reclaim's (reclaimReason). */
export const isPreemptionReason = (reason: string | undefined): boolean => (reason?.startsWith(PREEMPTION_REASON_PREFIX) || reason?.startsWith(RECLAIM_REASON_PREFIX)) ?? false;

/** The status_reason of a preempted lease. */
export function preemptionReason(neededFromMs: number): string {
  return `${PREEMPTION_REASON_PREFIX} host needed by another lease from ${formatMessageDate(neededFromMs)}`;
}

/** The status_reason of a borrower whose lender takes its host back (a lending's reclaim, issue 43), never naming the lender. */
export function reclaimReason(neededFromMs: number): string {
  return `${RECLAIM_REASON_PREFIX} the lending lease takes its host back from ${formatMessageDate(neededFromMs)}`;
}

/** The reason a cut of this kind gives (lease_preemptions.kind). */
export function cutReason(cut: { neededFromMs: number; kind?: 'preempted' | 'reclaimed' }): string {
  return cut.kind === 'reclaimed' ? reclaimReason(cut.neededFromMs) : preemptionReason(cut.neededFromMs);
}

/** The `lease.preempting` notice's details, told at `nowMs` of an end at `endMs`. */
export function preemptionDetails(preemption: { endMs: number; neededFromMs: number; warningMs: number }, reason: string, nowMs: number): Record<string, unknown> {
  const warningSeconds = Math.max(0, Math.round((preemption.endMs - nowMs) / 1000));
  const configured = Math.round(preemption.warningMs / 1000);
  return {
    ends_at: new Date(preemption.endMs).toISOString(),
    reason,
    warning_seconds: warningSeconds,
    warning_configured_seconds: configured,
    // Less than the deployment's warning: the other lease's start came sooner (it waits for this lease's end, bounded).
    warning_short: warningSeconds < configured,
  };
}
