/**
 * What a lease's start waits for, of the preemption keys (issue 43): a regular lease waits for the
 * preemptible leases it cut, and for those alone (two leases that cut the same one share its key
 * but no resource); a preemptible lease never waits on its own key; an update keeps the waits of the
 * admission, a lease no longer preemptible drops its own key. Against the real database, as the
 * workflow asks it (the activity).
 */
import { randomUUID } from 'node:crypto';
import { leaseActivities } from '../activities/leases';
import type { ActivityDeps } from '../activities/deps';
import type { Lease } from '../src/domain/lease';
import { preemptibleLeaseKey, preemptionWaitKeys, waitingKeysOf } from '../src/domain/preemption';
import { pendingReservation } from '../dev-stack/fixtures/builders';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { insertLeaseRows } from '../dev-stack/fixtures/lease-rows';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { reservationContext } from '../dev-stack/fixtures/builders';
import { physicalHostPlugin } from '../src/resources/physical-host';
import type { HookContext } from '../src/domain/resource-plugin';
import type { PhysicalHostParams } from '../src/resources/physical-host/params';

const H = 3_600_000;
const T0 = Math.ceil(Date.now() / H) * H + 24 * H;

describe('preemption keys', () => {
  const database = useMigratedTestDatabase();

  it('keeps the waits of the admission on a booking made again, and drops its own key once no longer preemptible', () => {
    const [lent, other, self] = [randomUUID(), randomUUID(), randomUUID()];
    const regular = { ...pendingReservation('physical:host', { min: 1, max: 1 }), resourceKeys: ['host:1', preemptibleLeaseKey(lent), preemptibleLeaseKey(self)] };
    expect(preemptionWaitKeys(regular, self, [other])).toEqual([preemptibleLeaseKey(lent), preemptibleLeaseKey(other)]);
    const preemptible = pendingReservation('physical:host', { min: 1, max: 1, preemptible: true });
    expect(preemptionWaitKeys(preemptible, self, [other])).toEqual([preemptibleLeaseKey(self)]);
    expect(waitingKeysOf(self, ['host:1', preemptibleLeaseKey(self), preemptibleLeaseKey(lent)])).toEqual({ shared: ['host:1'], cutLeaseIds: [lent] });
  });

  it('two regular leases that cut the same preemptible lease wait for it, never for each other', async () => {
    const pool = database().pool;
    const lease = (id: string, startMs: number, keys: string[]) => ({
      lease: { id, name: `lease-${id.slice(0, 8)}`, projectId: 'p', userId: 'u', status: 'PENDING', startMs, endMs: startMs + 48 * H, createdMs: T0 - H } as unknown as Lease,
      keys,
    });
    const [lentId, firstId, secondId] = [randomUUID(), randomUUID(), randomUUID()];
    const lent = lease(lentId, T0 - 2 * H, ['host:7', preemptibleLeaseKey(lentId)]);
    // The first cut the lease on host 8 and starts first; the second cut it on host 9, a day later.
    const first = lease(firstId, T0, ['host:8', preemptibleLeaseKey(lentId)]);
    const second = lease(secondId, T0 + 24 * H, ['host:9', preemptibleLeaseKey(lentId)]);
    await insertLeaseRows(pool, [lent.lease, first.lease, second.lease]);
    for (const { lease: row, keys } of [lent, first, second]) await pool.query('UPDATE leases SET resource_keys = $2 WHERE id = $1', [row.id, keys]);
    const activities = leaseActivities({ pool } as unknown as ActivityDeps);
    expect(await activities.findPredecessors({ leaseId: secondId, keys: second.keys, startMs: second.lease.startMs })).toEqual([lentId]);
    expect(await activities.findPredecessors({ leaseId: firstId, keys: first.keys, startMs: first.lease.startMs })).toEqual([lentId]);
    // The preemptible lease, its own key aside, waits only on its host's earlier leases: none.
    expect(await activities.findPredecessors({ leaseId: lentId, keys: lent.keys, startMs: T0 + 30 * H })).toEqual([]);
  });

  it("a host lease's heal keeps the waits of its admission", async () => {
    const pool = database().pool;
    await insertHost(pool, { name: `wait-heal-${randomUUID().slice(0, 6)}` });
    const plugin = physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' });
    const lentId = randomUUID();
    const reservation = { ...pendingReservation('physical:host', { min: 1, max: 1, hypervisor_properties: '', resource_properties: '' }), resourceKeys: [preemptibleLeaseKey(lentId)] };
    const ctx = reservationContext({ reservation, startMs: T0 + 100 * H, endMs: T0 + 101 * H, projectId: 'p', leaseStatus: 'PENDING' });
    const booked = await plugin.reserve(ctx as never);
    const hookContext = {
      ...ctx,
      reservation: { ...ctx.reservation, allocation: booked.allocation, resourceKeys: [...(booked.resourceKeys ?? [])] },
      leaseStatus: 'PENDING',
      reportProgress: () => undefined,
      placementOf: () => Promise.resolve({ hosts: [] }),
      announce: () => Promise.resolve(),
    } as unknown as HookContext<PhysicalHostParams>;
    expect(booked.resourceKeys).toContain(preemptibleLeaseKey(lentId));
    const healed = await plugin.heal!(hookContext);
    expect(healed.resourceKeys).toEqual([expect.stringMatching(/^host:/), preemptibleLeaseKey(lentId)]);
  });
});
