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

export async function preemptLease(client: PoolClient, cut: OwedPreemption & { cleaningMs: number }): Promise<void> {
  await cutPreemptibleHostBookings(client, cut.leaseId, cut.endMs, cut.cleaningMs);
  await cutPreemptibleQuantityBookings(client, cut.leaseId, cut.endMs);
  await addOwedPreemption(client, { leaseId: cut.leaseId, endMs: cut.endMs, neededFromMs: cut.neededFromMs, kind: cut.kind });
}
