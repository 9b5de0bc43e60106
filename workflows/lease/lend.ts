/**
 * Lending (issue 43): the owner of an active host or instance lease lends idle hosts or slots to
 * preemptible leases until a time (lend), takes them back with the preemption warning (reclaim), and the active loop brings
 * them back into the lease when their lending ends or their reclaim's return comes (returnLent).
 * The reservation's `lendings` record each request; the calendar keeps the borrowers inside.
 */
import { isCancellation, log, patched, uuid4 } from '@temporalio/workflow';
import { leaseConflict, invalidLease, LeaseErrorType, type Lease, type Reservation, type ReservationLending } from '../../src/domain/lease';
import { afterReclaim, isOpenLending, lendingDueMs, lendCandidateCount, lendingReservations, lendRefusal, lentCount, lentHostIds, MAX_OPEN_LENDINGS, reclaimedBy } from '../../src/domain/lending';
import { reservationContext as context, type ReclaimedHosts } from '../../src/domain/resource-plugin';
import { LEASE_LENDING, LEND_AS_ACTIVITY, LENDING_RECONCILED, RECLAIM_SOONER } from '../patches';
import { forLend, looking, mustFinish, polling, quick } from './activity-options';
import { announce } from './announce';
import type { LendRequest, ReclaimRequest } from './messages';
import { asFailure, failureMessage } from './failures';
import { transition } from './record';
import { assertAdmitted, type LeaseState } from './state';

/** How often the take-back looks whether the borrowers' ends are done. */
const RETURN_POLL_MS = 2_000;

/** The lend update's validator (and its handler's check, once its turn under the lock comes). */
export function validateLending(s: LeaseState, request: LendRequest): void {
  const reservation = lendingReservation(s, request.reservationId);
  if (!Number.isInteger(request.count) || request.count < 1 || request.count > 1000) throw invalidLease('count: expected an integer from 1 to 1000');
  if (!(request.untilMs > Date.now()) || request.untilMs > s.lease.endMs) throw invalidLease('until: expected a time after now and no later than the lease\'s end');
  if ((reservation.lendings ?? []).filter(isOpenLending).length >= MAX_OPEN_LENDINGS) {
    throw leaseConflict(`Reservation ${reservation.id} has ${MAX_OPEN_LENDINGS} lendings out: reclaim some first.`);
  }
}

/**
 * The reclaim update's validator: something lent and not being reclaimed, at least `count` hosts of
 * it; or, with nothing left lent, a reclaim of all with a need sooner than some reclaiming lending's
 * return (the calendar cuts its borrowers further and brings it back then).
 */
export function validateReclaim(s: LeaseState, request: ReclaimRequest, soonerAllowed = true): void {
  const reservation = lendingReservation(s, request.reservationId);
  const { count: lent, unit } = lentCount(reservation);
  if (lent === 0 && !(soonerAllowed && bringsReclaimingSooner(reservation, request))) throw leaseConflict(`Reservation ${reservation.id} lends no ${unit} now: nothing to reclaim.`);
  if (request.count !== undefined && request.count > lent) throw leaseConflict(`Reservation ${reservation.id} lends ${lent} ${unit}(s) now: cannot reclaim ${request.count}.`);
  if (request.neededFromMs !== undefined && request.neededFromMs > s.lease.endMs) throw invalidLease('needed_at: expected no later than the lease\'s end');
}

/** Whether a reclaim of all (no count) needs some host being reclaimed back sooner than its return. */
function bringsReclaimingSooner(reservation: Reservation, request: ReclaimRequest): boolean {
  const need = request.neededFromMs;
  if (request.count !== undefined || need === undefined) return false;
  return (reservation.lendings ?? []).some((g) => g.state === 'reclaiming' && g.returnsAtMs !== undefined && need < g.returnsAtMs);
}

/** The lease's reservation that may lend, of an active lease not being deleted (404, 409 or 400 otherwise). */
function lendingReservation(s: LeaseState, reservationId: string): Reservation {
  assertAdmitted(s);
  const lease = s.lease;
  if (lease.status !== 'ACTIVE' || s.deletion !== 'none') throw leaseConflict(`Lease ${lease.name} is ${s.deletion !== 'none' ? 'DELETING' : lease.status}: only an active lease lends or reclaims its hosts.`);
  const refusal = lendRefusal(lease, reservationId);
  if (refusal) throw invalidLease(refusal);
  return lease.reservations.find((r) => r.id === reservationId)!;
}

/** The lend update's handler (under the lease's lock): idle hosts fenced and lent, recorded in the reservation. */
export async function lend(s: LeaseState, request: LendRequest): Promise<Lease> {
  patched(LEASE_LENDING.id);
  validateLending(s, request); // again: the lease may have moved on while queued
  const reservation = s.lease.reservations.find((r) => r.id === request.reservationId)!;
  const lendingId = uuid4();
  // A local activity's 20 s fit only small lends, and its timed-out attempt went on fencing beside its retry.
  const lender = patched(LEND_AS_ACTIVITY.id) ? forLend(lendCandidateCount(reservation, request.count), s.lease.endMs - Date.now()) : quick;
  const lent = await lender.lendReservation({ ...context(s.lease, reservation), lendingId, count: request.count, untilMs: request.untilMs }).catch(async (err: unknown) => {
    // Failed after it lent (its answer lost): what the calendar holds under this lending id is recorded, not left
    // behind it. Recorded rather than put back: the hosts are fenced and may be borrowed already, and the lending is
    // then the lender's to see and reclaim; the answer says what is true (a retried lend would lend more hosts).
    if (!mayHaveActed(err) || !patched(LENDING_RECONCILED.id)) throw asFailure(err);
    const found = await looking.lentByRequest({ ...context(s.lease, reservation), lendingId }).catch((readErr: unknown) => unread(s, err, readErr));
    if (!found) {
      // Lent nothing: a try given up on left what it fenced fenced for its retry, and no retry is left. A failed
      // put-back is logged, never the answer: the lend's own error is.
      const putBack = await looking.putBackFencedHosts(context(s.lease, reservation)).catch((undo: unknown) => {
        log.error('a failed lend\'s fenced hosts could not be put back into the lease', { leaseId: s.lease.id, lendingId, error: failureMessage(undo) });
        return [];
      });
      if (putBack.length > 0) log.warn('a failed lend\'s fenced hosts are back in the lease', { leaseId: s.lease.id, lendingId, hosts: putBack });
      throw asFailure(err);
    }
    log.warn('a lend failed after it lent: recorded as lent', { leaseId: s.lease.id, lendingId, error: asFailure(err).message });
    return found;
  });
  const lending: ReservationLending = {
    id: lendingId,
    hosts: lent.hosts.map((h) => h.name),
    hostIds: lent.hosts.map((h) => h.id),
    ...(lent.slots ? { slots: lent.slots } : {}),
    lentAtMs: lent.lentAtMs,
    untilMs: request.untilMs,
    state: 'lent',
    borrowed: false,
  };
  await transition(s, { reservations: withLendings(s.lease, reservation.id, (lendings) => [...lendings, lending]) });
  s.revision++; // the active loop's next event may be this lending's end
  return s.lease;
}

/** The reclaim update's handler (under the lease's lock): borrowers cut and told; each host due back when they are out. */
export async function reclaim(s: LeaseState, request: ReclaimRequest): Promise<Lease> {
  patched(LEASE_LENDING.id);
  // Replays of handlers run before the sooner reclaim check it as they did (validators do not run on replay).
  validateReclaim(s, request, patched(RECLAIM_SOONER.id));
  const reservation = s.lease.reservations.find((r) => r.id === request.reservationId)!;
  const taken = await quick
    .reclaimReservation({ ...context(s.lease, reservation), count: request.count, neededFromMs: request.neededFromMs, lentHostIds: lentHostIds(reservation) })
    .catch((err: unknown) => reclaimedAfterAll(s, reservation, request, err));
  if (taken.hosts.length === 0) throw leaseConflict(`Reservation ${reservation.id} lends no ${lentCount(reservation).unit} now: nothing to reclaim.`);
  await transition(s, { reservations: withLendings(s.lease, reservation.id, (lendings) => afterReclaim(lendings, taken.hosts)) });
  s.revision++;
  return s.lease;
}

/**
 * A reclaim whose activity failed: a cut it committed stands (its borrowers are cut, and told), so
 * the calendar's reclaiming hosts are recorded where the record is behind them; otherwise (nothing
 * taken) the failure is the answer.
 */
async function reclaimedAfterAll(s: LeaseState, reservation: Reservation, request: ReclaimRequest, err: unknown): Promise<{ hosts: ReclaimedHosts['hosts'] }> {
  if (!mayHaveActed(err) || !patched(LENDING_RECONCILED.id)) throw asFailure(err);
  const reclaiming = await looking.reclaimingHostsOf(context(s.lease, reservation)).catch((readErr: unknown) => unread(s, err, readErr));
  const taken = reclaimedBy(reservation.lendings ?? [], reclaiming, lentHostIds(reservation), request.neededFromMs);
  if (taken.length === 0) throw asFailure(err);
  log.warn('a reclaim failed after it took hosts back: recorded as reclaiming', { leaseId: s.lease.id, error: asFailure(err).message });
  return { hosts: taken };
}

/**
 * A failed lend's or reclaim's read of the calendar failed too (its bounded tries, under the lease's
 * lock, spent): logged, and the lend's or reclaim's own error is the answer.
 */
function unread(s: LeaseState, err: unknown, readErr: unknown): never {
  log.error('a failed lend or reclaim could not be reconciled with the calendar', { leaseId: s.lease.id, error: failureMessage(err), readError: failureMessage(readErr) });
  throw asFailure(err);
}

/** Whether a lend's or reclaim's failure may come after it acted: not a refusal (those change nothing), nor a cancellation. */
function mayHaveActed(err: unknown): boolean {
  const type = asFailure(err).type;
  return !isCancellation(err) && type !== LeaseErrorType.conflict && type !== LeaseErrorType.invalid;
}

/** The earliest return of lent hosts due before the lease's end (a lending to the end closes with the end), if any. */
export function nextLendingReturn(lease: Lease): { time: number; reservationId: string } | undefined {
  const due = lease.reservations
    .flatMap((r) => (r.lendings ?? []).filter(isOpenLending).map((g) => ({ time: lendingDueMs(g), reservationId: r.id })))
    .filter((d) => d.time < lease.endMs)
    .sort((a, b) => a.time - b.time);
  return due[0];
}

/**
 * The active loop's `lendingReturn` event: waits (outside the lock: bounded by the eviction bound
 * past the return) for the borrowers on the due hosts to be out, then, under the lock, brings the
 * hosts back into the lease and records the lendings returned.
 */
export async function returnLent(s: LeaseState): Promise<void> {
  const next = nextLendingReturn(s.lease);
  if (!next) return;
  const dueOf = (lease: Lease) => (lease.reservations.find((r) => r.id === next.reservationId)?.lendings ?? []).filter((g) => isOpenLending(g) && lendingDueMs(g) <= next.time);
  const hostIds = dueOf(s.lease).flatMap((g) => g.hostIds);
  const reservation = s.lease.reservations.find((r) => r.id === next.reservationId)!;
  await polling(RETURN_POLL_MS).awaitLentHostsFree({ ...context(s.lease, reservation), hostIds, dueMs: next.time });
  await s.lock.run(async () => {
    // Ended or deleted meanwhile: the lease's end took its hosts back.
    if (s.lease.status !== 'ACTIVE' || s.deletion !== 'none') return;
    const current = s.lease.reservations.find((r) => r.id === next.reservationId)!;
    await mustFinish.returnLentHosts({ ...context(s.lease, current), hostIds });
    // Those whose hosts were waited for and moved (a lending due meanwhile comes back at its own event).
    const moved = new Set(hostIds);
    const returned = new Set(dueOf(s.lease).filter((g) => g.hostIds.every((id) => moved.has(id))));
    await transition(s, { reservations: withLendings(s.lease, current.id, (lendings) => lendings.map((g) => (returned.has(g) ? { ...g, state: 'returned' as const } : g))) });
  });
}

/** Lending is suggested at most this often per lease. */
const SUGGESTION_INTERVAL_MS = 86_400_000;

/**
 * The idle check's suggestion (`lease.lend_suggested`; it never lends): some host of a reservation
 * that may lend has been idle for the deployment's idle warning (LK_IDLE_LEASE_WARN_HOURS; none set,
 * no suggestion); once per idle spell, at most once a day. A look that fails counts as nothing idle.
 */
export async function suggestLending(s: LeaseState): Promise<void> {
  const warnAfterMs = s.lease.idle?.warnAfterMs;
  const lendable = lendingReservations(s.lease);
  if (warnAfterMs === undefined || lendable.length === 0 || !patched(LEASE_LENDING.id)) return;
  let idle: { reservationId: string; hosts: number } | undefined;
  for (const reservation of lendable) {
    const hosts = await looking.idleHostsOf(context(s.lease, reservation)).catch(() => 0);
    if (hosts > 0) {
      idle = { reservationId: reservation.id, hosts };
      break;
    }
  }
  const now = Date.now();
  if (!idle) {
    s.lease = { ...s.lease, lendableSince: undefined };
    return;
  }
  const since = s.lease.lendableSince ?? now;
  s.lease = { ...s.lease, lendableSince: since };
  const last = s.lease.lendSuggestedMs;
  if (now - since < warnAfterMs || (last !== undefined && (last >= since || now - last < SUGGESTION_INTERVAL_MS))) return;
  s.lease = { ...s.lease, lendSuggestedMs: now };
  const details = { reservation_id: idle.reservationId, idle_hosts: idle.hosts, idle_since: new Date(since).toISOString(), until_latest: new Date(s.lease.endMs).toISOString(), lend: `POST /v1/leases/${s.lease.id}/lend` };
  await announce(s, 'lease.lend_suggested', details, `lend-suggested-${since}`);
}

/** The lease's reservations with one reservation's lendings changed. */
function withLendings(lease: Lease, reservationId: string, change: (lendings: ReservationLending[]) => ReservationLending[]): Reservation[] {
  return lease.reservations.map((r) => (r.id === reservationId ? { ...r, lendings: change(r.lendings ?? []) } : r));
}
