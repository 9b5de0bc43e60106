/**
 * The quantity calendar's behaviours one by one, against the real PostgreSQL: the 409's earliest
 * start and longest end, the provisioning lead time, an active booking extended on its provider or
 * refused with the latest possible end, a booking moved to another provider, early ends, providers
 * that leave Placement, and hosts enrolled for whole-host leases refusing while servers count on them.
 */
import { randomUUID } from 'node:crypto';
import type { LeaseStatus } from '../src/domain/lease';
import type { ReservationContext } from '../src/domain/resource-plugin';
import { QuantityCalendar, type CapacityProvider, type QuantityRequest } from '../src/resources/shared/quantity-bookings';
import { pendingReservation, refusal, reservationContext } from '../dev-stack/fixtures/builders';
import { useMigratedTestDatabase } from '../dev-stack/db';

const H = 3_600_000;
const T0 = Date.UTC(2099, 5, 1);

function ctxFor(startH: number, endH: number, options: { status?: LeaseStatus; leadMs?: number; reservationId?: string } = {}): ReservationContext {
  return reservationContext({
    reservation: pendingReservation('virtual:server', {}, options.reservationId),
    leaseName: 'l',
    leaseStatus: options.status ?? 'PENDING',
    startMs: T0 + startH * H,
    endMs: T0 + endH * H,
    provisioningLeadMs: options.leadMs ?? 0,
  });
}

const vcpus = (n: number, subject?: string): QuantityRequest => ({ kind: 'compute', amounts: { VCPU: n }, subject, describe: `${n} vcpus`, matches: () => true });


describe('quantity calendar', () => {
  const database = useMigratedTestDatabase();
  let calendar: QuantityCalendar;
  const providers: CapacityProvider[] = [
    { uuid: 'aaaaaaaa-0000-0000-0000-000000000001', name: 'node-1', host: 'node-1', capacity: { VCPU: 8 }, traits: [] },
    { uuid: 'aaaaaaaa-0000-0000-0000-000000000002', name: 'node-2', host: 'node-2', capacity: { VCPU: 4 }, traits: [] },
  ];

  beforeAll(() => {
    calendar = new QuantityCalendar(database().pool);
  });
  beforeEach(async () => {
    await database().pool.query('TRUNCATE quantity_lendings, quantity_allocations, capacity_providers');
    await calendar.syncProviders('compute', providers);
  });

  it('copies the providers once for callers at the same moment, and a failed copy answers the next callers at once instead of each waiting on the cloud', async () => {
    const fresh = new QuantityCalendar(database().pool);
    let reads = 0;
    let answer!: () => void;
    let readStarted!: () => void;
    const started = new Promise<void>((resolve) => (readStarted = resolve));
    const slowRead = () => {
      reads++;
      readStarted();
      return new Promise<CapacityProvider[]>((resolve) => (answer = () => resolve([{ uuid: 'bbbbbbbb-0000-0000-0000-000000000001', name: 'other-1', host: 'node-1', capacity: { VCPU: 1 }, traits: [] }])));
    };
    const callers = Array.from({ length: 5 }, () => fresh.refreshProviders('other-kind', 60_000, slowRead));
    await started;
    answer();
    await Promise.all(callers);
    expect(reads).toBe(1);
    // Placement down: the first caller waits for its answer, the next ones get that error at once.
    const down = new Error('placement unreachable');
    let failingReads = 0;
    const failingRead = () => {
      failingReads++;
      return Promise.reject(down);
    };
    await expect(fresh.refreshProviders('down-kind', 0, failingRead)).rejects.toBe(down);
    await expect(fresh.refreshProviders('down-kind', 60_000, failingRead)).rejects.toBe(down);
    expect(failingReads).toBe(1);
  });

  it('spreads bookings, refuses what fits nowhere with the earliest start and the longest end, and books it then', async () => {
    expect((await calendar.book(ctxFor(0, 4), vcpus(6))).name).toBe('node-1');
    expect((await calendar.book(ctxFor(0, 2), vcpus(3))).name).toBe('node-2'); // node-1 would be fuller
    const refused = await refusal(calendar.book(ctxFor(1, 3), vcpus(4)));
    expect(refused.type).toBe('LeaseConflict');
    expect(refused.message).toContain('not enough room for 4 vcpus (VCPU 4) on any of 2 matching host(s) from 2099-06-01 01:00 to 2099-06-01 03:00');
    expect(refused.message).toContain('the same lease fits from 2099-06-01 02:00 to 2099-06-01 04:00');
    expect(refused.details).toEqual([{ earliest_start: '2099-06-01 02:00', earliest_end: '2099-06-01 04:00', longest_end: null }]);
    expect((await calendar.book(ctxFor(2, 4), vcpus(4))).name).toBe('node-2');
    // Never: bigger than any host.
    const never = await refusal(calendar.book(ctxFor(0, 1), vcpus(9)));
    expect(never.details).toEqual([{ earliest_start: null, earliest_end: null, longest_end: null }]);
  });

  it('books from the start less the lead time, so a booking right after another must leave room for it', async () => {
    await calendar.book(ctxFor(0, 2), vcpus(8));
    await calendar.book(ctxFor(0, 2), vcpus(4));
    const tight = await refusal(calendar.book(ctxFor(2, 3, { leadMs: H / 2 }), vcpus(4)));
    expect(tight.details).toEqual([{ earliest_start: '2099-06-01 02:30', earliest_end: '2099-06-01 03:30', longest_end: null }]);
    const fitting = ctxFor(2.5, 3.5, { leadMs: H / 2 });
    await calendar.book(fitting, vcpus(4));
    const { rows } = await database().pool.query<{ blocks: string }>(`SELECT to_char(lower(blocks) AT TIME ZONE 'UTC', 'HH24:MI') AS blocks FROM quantity_allocations WHERE reservation_id = $1`, [
      fitting.reservation.id,
    ]);
    expect(rows).toEqual([{ blocks: '02:00' }]);
  });

  it('an active booking keeps its provider when extended, and a collision gives the latest possible end', async () => {
    const active = ctxFor(0, 2);
    const held = await calendar.book(active, vcpus(6));
    await calendar.book(ctxFor(3, 5), vcpus(8)); // node-1 is full from 03:00 (node-2 has only 4)
    const extended = await calendar.book({ ...active, leaseStatus: 'ACTIVE', endMs: T0 + 3 * H }, vcpus(6));
    expect(extended.providerUuid).toBe(held.providerUuid);
    const refused = await refusal(calendar.book({ ...active, leaseStatus: 'ACTIVE', endMs: T0 + 4 * H }, vcpus(6)));
    expect(refused.message).toContain('Not enough hosts available. Cannot extend lease l to 2099-06-01 04:00: host node-1 has no room for 6 vcpus after that; the latest possible end is 2099-06-01 03:00');
    expect(refused.details).toEqual([{ latest_end: '2099-06-01 03:00' }]);
  });

  it('moves a booking to the first candidate with room for the rest of the window, or reports none', async () => {
    const ctx = ctxFor(0, 4);
    const held = await calendar.book(ctx, vcpus(4));
    expect(held.name).toBe('node-1');
    await calendar.book(ctxFor(1, 2), vcpus(1)); // node-2 has 3 left from 01:00 to 02:00
    expect(await calendar.move(ctx, vcpus(4), [providers[1].uuid], T0)).toBeUndefined();
    const moved = await calendar.move(ctx, vcpus(4), [providers[1].uuid], T0 + 2 * H);
    expect(moved?.name).toBe('node-2');
    expect((await calendar.bookingFor(ctx.reservation.id))?.name).toBe('node-2');
  });

  it('an early end frees the rest of the window; a booking never begun is removed', async () => {
    const ctx = ctxFor(0, 4);
    await calendar.book(ctx, vcpus(8));
    await calendar.release(ctx.reservation.id, true, T0 + H);
    expect((await calendar.book(ctxFor(1, 2), vcpus(8))).name).toBe('node-1');
    const later = ctxFor(10, 12);
    await calendar.book(later, vcpus(1));
    await calendar.release(later.reservation.id, true, T0 + H);
    expect(await calendar.bookingFor(later.reservation.id)).toBeUndefined();
  });

  it('one server is never in two overlapping bookings', async () => {
    const server = randomUUID();
    await calendar.book(ctxFor(0, 2), vcpus(1, server));
    const twice = await refusal(calendar.book(ctxFor(1, 3), vcpus(1, server)));
    expect(twice.message).toBe('this server is already booked by another lease over an overlapping window');
    expect((await calendar.book(ctxFor(2, 3), vcpus(1, server))).name).toBeDefined();
  });

  it('a provider gone from Placement takes no new bookings, and its old ones stay', async () => {
    const ctx = ctxFor(0, 2);
    await calendar.book(ctx, vcpus(2));
    await calendar.syncProviders('compute', [providers[1]]);
    expect((await calendar.providers('compute')).map((p) => p.name)).toEqual(['node-2']);
    expect((await calendar.bookingFor(ctx.reservation.id))?.name).toBe('node-1');
    const refused = await refusal(calendar.book(ctxFor(0, 2), vcpus(5)));
    expect(refused.message).toContain('on any of 1 matching host(s)');
  });
});
