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

const PREEMPTIBLE_LEASE_KEY_PREFIX = 'preemptible-lease:';

/** The resource key a preemptible lease's reservations hold, and a regular lease that cut it waits on. */
export const preemptibleLeaseKey = (leaseId: string) => `${PREEMPTIBLE_LEASE_KEY_PREFIX}${leaseId}`;

/**
 * The keys a reservation holds for preemption's sake (issue 43), besides those of what it books: a
 * preemptible one its own lease's; a regular one those of the leases its admission cut (`cut`), so
 * that its start waits for their ends (their servers gone from the capacity it takes), at most the
 * eviction bound, whatever the types (a host lease cutting a slot lease, or the reverse). A booking
 * made again (an update or a heal, which never cut) keeps the waits of the admission.
 */
export function preemptionWaitKeys(reservation: Pick<Reservation, 'params' | 'resourceKeys'>, leaseId: string, cut: readonly string[]): string[] {
  if (isPreemptibleReservation(reservation)) return [preemptibleLeaseKey(leaseId)];
  const own = preemptibleLeaseKey(leaseId);
  const kept = (reservation.resourceKeys ?? []).filter((key) => key.startsWith(PREEMPTIBLE_LEASE_KEY_PREFIX) && key !== own);
  return [...new Set([...kept, ...cut.map(preemptibleLeaseKey)])];
}

/**
 * What a lease's keys make it wait for: `shared` keys, held by whichever lease used the same
 * resource earlier; and the preemptible leases it cut (`cutLeaseIds`), those leases alone: two
 * leases that cut the same preemptible lease share its key but not a resource, and must not wait
 * for each other. A preemptible lease's own key is for the leases that cut it, never its own wait.
 */
export function waitingKeysOf(leaseId: string, keys: readonly string[]): { shared: string[]; cutLeaseIds: string[] } {
  const shared = keys.filter((key) => !key.startsWith(PREEMPTIBLE_LEASE_KEY_PREFIX));
  const cutLeaseIds = keys.filter((key) => key.startsWith(PREEMPTIBLE_LEASE_KEY_PREFIX) && key !== preemptibleLeaseKey(leaseId)).map((key) => key.slice(PREEMPTIBLE_LEASE_KEY_PREFIX.length));
  return { shared, cutLeaseIds };
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

/**
 * When a reclaim with no need given needs its hosts: the warning from now, plus the time the
 * borrower's telling takes (a signal, the borrower's lock, its record; a tenth of the warning, at
 * most 5 s), to the next whole second, so that the borrower hears the full warning, not a few
 * hundred ms less of it.
 */
export function defaultReclaimNeed(nowMs: number, warningMs: number): number {
  const tellingMs = Math.min(5_000, warningMs / 10);
  return Math.ceil((nowMs + warningMs + tellingMs) / 1000) * 1000;
}

/** LK_PREEMPT_WARNING_MINUTES's default: also the warning of a worker, API or outbox built without the setting (tests). */
export const DEFAULT_PREEMPT_WARNING_MS = 10 * 60_000;

/** A cut as its tell carries it to the lease's workflow (the leasePreempted signal): with the deployment's warning, a reclaim said so. */
export interface ToldPreemption {
  endMs: number;
  neededFromMs: number;
  warningMs: number;
  sequence: number;
  kind?: 'reclaimed';
}

/** An owed cut (its lease_preemptions row) as its tell carries it, whether the outbox sends it or an update applies it first. */
export function toLeasePreemption(cut: { endMs: number; neededFromMs: number; sequence: number; kind?: 'preempted' | 'reclaimed' }, warningMs: number): ToldPreemption {
  return { endMs: cut.endMs, neededFromMs: cut.neededFromMs, warningMs, sequence: cut.sequence, ...(cut.kind === 'reclaimed' ? { kind: 'reclaimed' as const } : {}) };
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
