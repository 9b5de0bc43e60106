/**
 * A preemptible lease cut by a regular admission (issue 43), whichever calendar needed it: every
 * booking of the lease ends at the cut (one lease, one end), its whole hosts, its instance slots
 * and their shared host rows alike, and its workflow is owed the news (lease_preemptions), all in
 * the admission's transaction. A lending's reclaim (`kind: 'reclaimed'`) cuts its borrowers alike.
 */
import type { PoolClient } from 'pg';
import { cutPreemptibleHostBookings } from '../../db/host-allocations';
import { addOwedPreemption, type OwedPreemption } from '../../db/lease-preemptions';
import { cutPreemptibleQuantityBookings } from '../../db/quantity-allocations';
import type { CutBookingKey } from '../../db/range-bookings';
import { movedBookingKey } from './booking';

/** A cut booking's key: moved to its new window, as any booking the calendar moves alone. */
const cutKey: CutBookingKey = (booking, endMs) => movedBookingKey(booking.bookingKey, { startMs: booking.startMs, endMs, provisioningLeadMs: booking.leadMs });

export async function preemptLease(client: PoolClient, cut: OwedPreemption & { cleaningMs: number }): Promise<void> {
  await cutPreemptibleHostBookings(client, cut.leaseId, cut.endMs, cut.cleaningMs, cutKey);
  await cutPreemptibleQuantityBookings(client, cut.leaseId, cut.endMs, cutKey);
  await addOwedPreemption(client, { leaseId: cut.leaseId, endMs: cut.endMs, neededFromMs: cut.neededFromMs, kind: cut.kind });
}
