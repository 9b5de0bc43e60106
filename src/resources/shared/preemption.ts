/**
 * A preemptible lease cut by a regular admission (issue 43), whichever calendar needed it: every
 * booking of the lease ends at the cut (one lease, one end), its whole hosts, its instance slots
 * and their shared host rows alike, and its workflow is owed the news (lease_preemptions), all in
 * the admission's transaction. A lending's reclaim (`kind: 'reclaimed'`) cuts its borrowers alike.
 */
import type { PoolClient } from 'pg';
import { cutPreemptibleHostBookings, reservationsHostBookedAfter } from '../../db/host-allocations';
import { addOwedPreemption, settlePreemptionOnRebooking, type OwedPreemption } from '../../db/lease-preemptions';
import { cutPreemptibleQuantityBookings, reservationsQuantityBookedAfter } from '../../db/quantity-allocations';
import type { CutBookingKey } from '../../db/range-bookings';
import { isPreemptibleReservation } from '../../domain/preemption';
import type { ReservationContext } from '../../domain/resource-plugin';
import { movedBookingKey } from './booking';

/** A cut booking's key: moved to its new window, as any booking the calendar moves alone. */
const cutKey: CutBookingKey = (booking, endMs) => movedBookingKey(booking.bookingKey, { startMs: booking.startMs, endMs, provisioningLeadMs: booking.leadMs });

export async function preemptLease(client: PoolClient, cut: OwedPreemption & { cleaningMs: number }): Promise<void> {
  await cutPreemptibleHostBookings(client, cut.leaseId, cut.endMs, cut.cleaningMs, cutKey);
  await cutPreemptibleQuantityBookings(client, cut.leaseId, cut.endMs, cutKey);
  await addOwedPreemption(client, { leaseId: cut.leaseId, endMs: cut.endMs, neededFromMs: cut.neededFromMs, kind: cut.kind });
}

/**
 * The workflow's booking of a reservation (`bookedTogether`: the reservations its call books, the
 * host calendar's siblings), made or moved to end at `bookedToMs`, settles the lease's owed cut
 * (settlePreemptionOnRebooking) only when it ends after the cut (a booking at the cut, an update's
 * second try on the lease as cut, leaves it owed) and every other preemptible reservation of the
 * lease is booked past it too: one still booked only up to the cut (not moved yet by the same
 * update, or refused) keeps the cut for the whole lease, for its workflow to apply (one lease, one end).
 */
export function settleLeaseCut(client: PoolClient, ctx: ReservationContext, bookedTogether: readonly string[], bookedToMs: number): Promise<number | undefined> {
  const others = ctx.leaseReservations.filter((r) => isPreemptibleReservation(r) && !bookedTogether.includes(r.id)).map((r) => r.id);
  const othersStillCut = async (cutEndMs: number) => {
    const past = new Set([...(await reservationsHostBookedAfter(client, others, cutEndMs)), ...(await reservationsQuantityBookedAfter(client, others, cutEndMs))]);
    return others.some((id) => !past.has(id));
  };
  return settlePreemptionOnRebooking(client, ctx.leaseId, bookedToMs, others.length > 0 ? othersStillCut : undefined);
}

/** A lending row as a reclaim reads it (of hosts or of instance slots, issue 43). */
export interface ReclaimableLending {
  id: string;
  start_ms: number;
  end_ms: number;
  reclaimed_ms: number | null;
}

/** A borrower's booking inside a lending, as a reclaim reads it. */
export interface LendingBorrower {
  lending_row_id: string;
  lease_id: string;
  begun: boolean;
  start_ms: number;
  end_ms: number;
  blocked_until_ms: number;
}

/**
 * The reclaim both calendars run (hosts and slots), in the caller's transaction (which must retry
 * deadlocks), on `lendings` read locked: `choose` says which are taken back, of those still lent
 * (with no `count`, those a reclaim took already too, cutting further for a sooner need). Their
 * borrower leases whose blocked range runs past the need are cut, all their bookings, to end a
 * cleaning gap before it (a lease already begun never before now), and owed the news
 * (lease_preemptions, kind 'reclaimed'; their ids added to `cut`, for the caller to tell once
 * committed); each lending taken is shortened (`store.reclaim`) to when it returns: now (or its
 * start, not begun) if nobody holds it, else when its borrowers' blocked ranges end. Answers each
 * lending taken, its return and the time its borrowers booked in it.
 */
export async function reclaimLendings<L extends ReclaimableLending>(
  client: PoolClient,
  request: { lendings: L[]; count?: number; neededFromMs: number; cleaningMs: number },
  store: { borrowersOf: (lendingRowIds: string[], lock: boolean) => Promise<LendingBorrower[]>; reclaim: (lendingRowId: string, returnsAtMs: number) => Promise<void> },
  choose: (lent: L[], borrowersOf: (lendingRowId: string) => Array<{ leaseId: string; begun: boolean }>) => string[],
  cut: string[],
): Promise<Array<{ lending: L; returnsAtMs: number; borrowedMs: number }>> {
  const now = Date.now();
  const neededFromMs = Math.max(request.neededFromMs, now);
  const { lendings, cleaningMs } = request;
  if (lendings.length === 0) return [];
  const borrowers = await store.borrowersOf(lendings.map((g) => g.id), true);
  const borrowersOf = (lendingRowId: string) => borrowers.filter((b) => b.lending_row_id === lendingRowId).map((b) => ({ leaseId: b.lease_id, begun: b.begun }));
  const chosen = new Set(choose(lendings.filter((g) => request.count === undefined || g.reclaimed_ms === null), borrowersOf));
  const cutAtMs = neededFromMs - cleaningMs;
  const late = borrowers.filter((b) => chosen.has(b.lending_row_id) && b.blocked_until_ms > neededFromMs);
  for (const leaseId of [...new Set(late.map((b) => b.lease_id))].sort()) {
    const endMs = late.some((b) => b.lease_id === leaseId && b.begun) ? Math.max(cutAtMs, now) : cutAtMs;
    await preemptLease(client, { leaseId, endMs, neededFromMs, cleaningMs, kind: 'reclaimed' });
    cut.push(leaseId);
  }
  const left = await store.borrowersOf([...chosen], false);
  const reclaimed: Array<{ lending: L; returnsAtMs: number; borrowedMs: number }> = [];
  for (const lending of lendings.filter((g) => chosen.has(g.id))) {
    const inside = left.filter((b) => b.lending_row_id === lending.id);
    const returnsAtMs = Math.min(lending.end_ms, Math.max(now, lending.start_ms, ...inside.map((b) => b.blocked_until_ms)));
    await store.reclaim(lending.id, returnsAtMs);
    reclaimed.push({ lending, returnsAtMs, borrowedMs: inside.reduce((sum, b) => sum + Math.max(0, b.end_ms - b.start_ms), 0) });
  }
  return reclaimed;
}

/** Whether no borrower lease that began in these open lendings is still to end (hosts' or slots' `stillRunning`); none open: free. */
export async function lendingsFree(open: Array<{ id: string }>, stillRunning: (lendingRowIds: string[]) => Promise<string[]>): Promise<boolean> {
  return open.length === 0 || (await stillRunning(open.map((g) => g.id))).length === 0;
}
