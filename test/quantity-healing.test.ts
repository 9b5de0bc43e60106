/**
 * Healing of quantity bookings (a server's room, bandwidth) when the compute hosts that carry them
 * fail, against the real PostgreSQL: the host monitor's watch sees those hosts besides the enrolled
 * ones and records their state; a failed host takes no new booking; a pending booking on it moves
 * to a healthy host with room for its whole window (or stays, flagged by its type, when none has);
 * a begun one stays where it runs; an enrolled host that failed makes its providers failed too.
 */
import type { LeaseStatus } from '../src/domain/lease';
import type { ReservationContext } from '../src/domain/resource-plugin';
import { physicalHostWatch } from '../src/resources/physical-host/health';
import { QuantityCalendar, type CapacityProvider, type QuantityRequest } from '../src/resources/shared/quantity-bookings';
import { pendingReservation, reservationContext } from '../dev-stack/fixtures/builders';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { insertHost } from '../dev-stack/fixtures/hosts';

const H = 3_600_000;
const T0 = Date.UTC(2099, 5, 1);

function ctxFor(startH: number, endH: number, status: LeaseStatus = 'PENDING'): ReservationContext {
  return reservationContext({ reservation: pendingReservation('virtual:server', {}), leaseStatus: status, startMs: T0 + startH * H, endMs: T0 + endH * H });
}

const vcpus = (n: number): QuantityRequest => ({ kind: 'compute', amounts: { VCPU: n }, describe: `${n} vcpus`, matches: () => true });

describe('healing quantity bookings on failed compute hosts', () => {
  const database = useMigratedTestDatabase();
  const down = new Set<string>();
  let calendar: QuantityCalendar;
  let watch: ReturnType<typeof physicalHostWatch>;
  const providers: CapacityProvider[] = [
    { uuid: 'bbbbbbbb-0000-0000-0000-000000000001', name: 'node-1', host: 'node-1', capacity: { VCPU: 8 }, traits: [] },
    { uuid: 'bbbbbbbb-0000-0000-0000-000000000002', name: 'node-2', host: 'node-2', capacity: { VCPU: 4 }, traits: [] },
  ];
  const failNode = (name: string) => watch.record({ hostId: `compute:${name}`, host: name, state: 'failed', sinceMs: Date.UTC(2026, 0, 1), reason: 'forced down in the test' });
  const recoverNode = (name: string) => watch.record({ hostId: `compute:${name}`, host: name, state: 'up', sinceMs: Date.UTC(2026, 0, 2), reason: 'up again' });

  beforeAll(() => {
    calendar = new QuantityCalendar(database().pool);
    watch = physicalHostWatch({
      pool: database().pool,
      source: { calendarOnly: (host) => (down.has(host.hypervisor_hostname) ? 'forced down in the test' : undefined) },
      freepool: 'unused',
      failed: { name: 'unused', closedProjectId: 'nobody' },
    });
  });
  beforeEach(async () => {
    down.clear();
    await database().pool.query('TRUNCATE quantity_allocations, capacity_providers, compute_host_health, hosts CASCADE');
    await calendar.syncProviders('compute', providers);
  });

  it('watches the shared hosts, keeps a failed one out of new bookings and names the leases booked on it', async () => {
    const booked = ctxFor(0, 4);
    expect((await calendar.book(booked, vcpus(2))).name).toBe('node-1'); // the least loaded
    down.add('node-1');
    expect(await watch.observe()).toEqual([
      { hostId: 'compute:node-1', host: 'node-1', recorded: 'up', problem: 'forced down in the test' },
      { hostId: 'compute:node-2', host: 'node-2', recorded: 'up' },
    ]);

    await failNode('node-1');
    await watch.record({ hostId: 'compute:node-1', host: 'node-1', state: 'failed', sinceMs: Date.UTC(2026, 0, 3), reason: 'seen again' });
    const { rows } = await database().pool.query(`SELECT host, state, state_reason, to_char(state_since AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS since FROM compute_host_health`);
    expect(rows).toEqual([{ host: 'node-1', state: 'failed', state_reason: 'forced down in the test', since: '2026-01-01' }]); // the first record kept
    expect((await watch.observe())[0]).toMatchObject({ hostId: 'compute:node-1', recorded: 'failed' });
    expect(await watch.leasesHolding(['compute:node-1'])).toEqual([booked.leaseId]);
    expect(await watch.leasesHolding(['compute:node-2'])).toEqual([]);
    expect(await watch.leasesToHeal()).toEqual([booked.leaseId]);

    expect((await calendar.providers('compute')).map((p) => p.name)).toEqual(['node-2']);
    expect((await calendar.book(ctxFor(0, 1), vcpus(1))).name).toBe('node-2'); // node-1 has more room, but failed
    expect((await calendar.search(vcpus(6), T0, H, 0)).earliest).toBeUndefined(); // only node-1 could take 6

    await recoverNode('node-1');
    expect(await watch.leasesToHeal()).toEqual([]);
    expect((await calendar.providers('compute')).map((p) => p.name)).toEqual(['node-1', 'node-2']);
  });

  it('moves a pending booking off a failed host once, keeps it there when no host has room, and never moves a begun one', async () => {
    const pending = ctxFor(2, 4);
    const full = ctxFor(3, 5);
    const active = ctxFor(0, 6, 'ACTIVE');
    await calendar.book(active, vcpus(1));
    await calendar.book(pending, vcpus(3));
    expect((await calendar.bookingFor(pending.reservation.id))?.name).toBe('node-1');
    expect((await calendar.bookingFor(active.reservation.id))?.name).toBe('node-1');
    expect(await calendar.heal(pending, vcpus(3))).toMatchObject({ onFailedHost: false, moved: false });

    await failNode('node-1');
    expect(await calendar.heal(active, vcpus(1))).toMatchObject({ booking: { name: 'node-1' }, onFailedHost: true, moved: false });
    expect(await calendar.heal(pending, vcpus(3))).toMatchObject({ booking: { name: 'node-2' }, onFailedHost: false, moved: true, movedFrom: 'node-1' });
    expect((await calendar.bookingFor(pending.reservation.id))?.name).toBe('node-2');
    expect(await calendar.heal(pending, vcpus(3))).toMatchObject({ booking: { name: 'node-2' }, onFailedHost: false, moved: false }); // again: nothing more

    // node-2 now holds 3 of 4 VCPU from 02:00 to 04:00: a second pending booking of 2 on node-1 cannot follow.
    await recoverNode('node-1');
    await calendar.book(full, vcpus(2));
    expect((await calendar.bookingFor(full.reservation.id))?.name).toBe('node-1');
    await failNode('node-1');
    expect(await calendar.heal(full, vcpus(2))).toMatchObject({ booking: { name: 'node-1' }, onFailedHost: true, moved: false });
    expect(await watch.leasesToHeal()).toEqual([active.leaseId, full.leaseId].sort());
  });

  it('an enrolled host that failed fails the providers on it, and is watched as a host rather than as a shared one', async () => {
    const id = await insertHost(database().pool, { name: 'node-2' });
    expect((await watch.observe()).map((o) => o.hostId)).toEqual([id, 'compute:node-1']);
    await watch.record({ hostId: id, host: 'node-2', state: 'failed', sinceMs: Date.UTC(2026, 0, 1), reason: 'down' });
    expect((await calendar.providers('compute')).map((p) => p.name)).toEqual(['node-1']);
  });
});
