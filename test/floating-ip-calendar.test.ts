/**
 * The floating IP calendar against the real PostgreSQL: required addresses first, then idle ones;
 * 409s with the earliest start; an active reservation extended, grown and shrunk (never losing an
 * address in use); the lead time; and no double booking under concurrent admissions.
 */
import { randomUUID } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import type { LeaseStatus, Reservation } from '../src/domain/lease';
import type { ReservationContext } from '../src/domain/resource-plugin';
import { insertFloatingIp } from '../src/db/floating-ips';
import { FloatingIpCalendar, VIRTUAL_FLOATINGIP } from '../src/resources/floating-ip/calendar';
import { floatingIpParams } from '../src/resources/floating-ip/params';
import { pendingReservation, refusal, reservationContext } from '../dev-stack/fixtures/builders';
import { useMigratedTestDatabase } from '../dev-stack/db';

const H = 3_600_000;
const T0 = Date.UTC(2099, 5, 1);
const NETWORK = '11111111-1111-4111-8111-111111111111';
const OTHER_NETWORK = '22222222-2222-4222-8222-222222222222';
const ADDRESSES = ['203.0.113.100', '203.0.113.101', '203.0.113.102'];

function fipReservation(params: Record<string, unknown>, id?: string): Reservation {
  return pendingReservation(VIRTUAL_FLOATINGIP, floatingIpParams.parse({ network_id: NETWORK, ...params }), id);
}

function ctxFor(reservation: Reservation, startH: number, endH: number, options: { status?: LeaseStatus; leadMs?: number; leaseId?: string } = {}): ReservationContext<never> {
  return reservationContext({
    reservation,
    leaseId: options.leaseId,
    leaseName: 'l',
    leaseStatus: options.status ?? 'PENDING',
    startMs: T0 + startH * H,
    endMs: T0 + endH * H,
    provisioningLeadMs: options.leadMs ?? 0,
  });
}


const addressesOf = (booked: Array<{ floating_ip_address: string }>) => booked.map((b) => b.floating_ip_address).sort();

describe('floating IP calendar', () => {
  const database = useMigratedTestDatabase();
  let calendar: FloatingIpCalendar;

  beforeAll(() => {
    calendar = new FloatingIpCalendar(database().pool);
  });
  beforeEach(async () => {
    await database().pool.query('TRUNCATE floating_ip_allocations, floating_ips');
    for (const address of ADDRESSES) await insertFloatingIp(database().pool, { id: randomUUID(), networkId: NETWORK, subnetId: 'subnet-1', address });
    await insertFloatingIp(database().pool, { id: randomUUID(), networkId: OTHER_NETWORK, subnetId: 'subnet-2', address: '198.51.100.100' });
  });

  it('gives the required addresses, the rest from the network, and prefers addresses with nothing booked ahead', async () => {
    const booked = await calendar.book(ctxFor(fipReservation({ amount: 2, required_floatingips: ['203.0.113.102'] }), 0, 2));
    expect(addressesOf(booked)).toContain('203.0.113.102');
    expect(booked).toHaveLength(2);
    expect(booked.every((b) => b.floating_network_id === NETWORK)).toBe(true);
    // Later, one address: the one with nothing booked, though the other two are free then too.
    const later = await calendar.book(ctxFor(fipReservation({ amount: 1 }), 10, 12));
    const idle = ADDRESSES.find((a) => !addressesOf(booked).includes(a));
    expect(addressesOf(later)).toEqual([idle]);
  });

  it('refuses with 409, the earliest start, and books it there', async () => {
    await calendar.book(ctxFor(fipReservation({ amount: 3 }), 0, 4));
    const refused = await refusal(calendar.book(ctxFor(fipReservation({ amount: 1 }), 1, 3)));
    expect(refused.type).toBe('LeaseConflict');
    expect(refused.message).toMatch(/^Not enough floating IPs available\. Not enough addresses free from 2099-06-01 01:00 to 2099-06-01 03:00: needs 1 address\(es\) for reservation .* \(0 of 3 free\); the same lease fits from 2099-06-01 04:00 to 2099-06-01 06:00\.$/);
    expect(refused.details?.[0]).toEqual({ earliest_start: '2099-06-01 04:00', earliest_end: '2099-06-01 06:00', longest_end: null });
    // Back to back: free the moment the other ends (no cleaning gap for addresses).
    expect(await calendar.book(ctxFor(fipReservation({ amount: 3 }), 4, 6))).toHaveLength(3);
  });

  it('refuses a busy required address with 409, an address not enrolled with 400, more than enrolled as never fitting', async () => {
    await calendar.book(ctxFor(fipReservation({ amount: 1, required_floatingips: ['203.0.113.101'] }), 0, 2));
    const busy = await refusal(calendar.book(ctxFor(fipReservation({ amount: 1, required_floatingips: ['203.0.113.101'] }), 1, 3)));
    expect(busy.type).toBe('LeaseConflict');
    expect(busy.message).toMatch(/needs 1 required address\(es\) for reservation .* \(0 of 1 free; booked: 203\.0\.113\.101\); the same lease fits from 2099-06-01 02:00 to 2099-06-01 04:00/);
    const unknown = await refusal(calendar.book(ctxFor(fipReservation({ amount: 1, required_floatingips: ['198.51.100.100'] }), 5, 6)));
    expect(unknown.type).toBe('InvalidLease');
    expect(unknown.message).toBe(`required_floatingips: 198.51.100.100 not enrolled as reservable on network ${NETWORK} (see GET /v1/floatingips)`);
    const never = await refusal(calendar.book(ctxFor(fipReservation({ amount: 4 }), 5, 6)));
    expect(never.type).toBe('LeaseConflict');
    expect(never.message).toMatch(/^Not enough floating IPs available\. It never fits: reservation .* needs 4 address\(es\) of network .*, which has 3 reservable address\(es\) enrolled\.$/);
    expect(never.details?.[0]).toEqual({ earliest_start: null, earliest_end: null, longest_end: null });
  });

  it('books from the lead time before the start', async () => {
    await calendar.book(ctxFor(fipReservation({ amount: 3 }), 0, 2));
    // Starts at 2 h with a 30 min lead: the addresses are needed from 1:30, while the first lease holds them.
    const refused = await refusal(calendar.book(ctxFor(fipReservation({ amount: 1 }), 2, 3, { leadMs: H / 2 })));
    expect(refused.details?.[0]).toMatchObject({ earliest_start: '2099-06-01 02:30' });
  });

  it('an active reservation is extended until another booking, then refused with the latest end', async () => {
    const mine = fipReservation({ amount: 3 });
    const leaseId = randomUUID();
    await calendar.book(ctxFor(mine, 0, 2, { leaseId }));
    await calendar.book(ctxFor(fipReservation({ amount: 1 }), 5, 6));
    expect(await calendar.book(ctxFor(mine, 0, 4, { leaseId, status: 'ACTIVE' }))).toHaveLength(3);
    const refused = await refusal(calendar.book(ctxFor(mine, 0, 8, { leaseId, status: 'ACTIVE' })));
    expect(refused.message).toMatch(/^Not enough floating IPs available\. Cannot extend lease l to 2099-06-01 08:00: address 203\.0\.113\.10\d is booked from 2099-06-01 05:00; the latest possible end is 2099-06-01 05:00$/);
    expect(refused.details?.[0]).toEqual({ latest_end: '2099-06-01 05:00' });
  });

  it('an active reservation grows from now and shrinks by addresses not in use, never those in use', async () => {
    const leaseId = randomUUID();
    const id = randomUUID();
    const now = Date.now();
    const active = (params: Record<string, unknown>, inUse: string[] = []) =>
      calendar.book(
        { ...ctxFor(fipReservation(params, id), 0, 1, { leaseId, status: 'ACTIVE' }), startMs: now - H, endMs: now + H },
        { inUse: new Map([[id, new Set(inUse)]]) },
      );
    // Booked while pending (an hour ago), now active.
    const first = await calendar.book({ ...ctxFor(fipReservation({ amount: 1 }, id), 0, 1, { leaseId }), startMs: now - H, endMs: now + H });
    const grown = await active({ amount: 3 });
    expect(grown).toHaveLength(3);
    expect(addressesOf(grown)).toContain(first[0].floating_ip_address);
    const [{ from }] = (
      await database().pool.query<{ from: Date }>('SELECT min(lower(during)) FILTER (WHERE floating_ip_id <> $1) AS from FROM floating_ip_allocations WHERE reservation_id = $2', [first[0].id, id])
    ).rows;
    expect(from.getTime()).toBeGreaterThanOrEqual(now); // the new ones from now, not from the start

    // Shrink to 1 with two addresses in use: refused; with one in use: that one stays.
    const [a, b, c] = addressesOf(grown);
    const refused = await refusal(active({ amount: 1 }, [a, b]));
    expect(refused.type).toBe('LeaseConflict');
    expect(refused.message).toContain(`(${a}, ${b} associated with a port: disassociate them first)`);
    expect(addressesOf(await calendar.addresses(id))).toEqual([a, b, c]); // nothing lost
    expect(addressesOf(await active({ amount: 1 }, [c]))).toEqual([c]);
    // Changing the network of an active reservation is refused.
    const moved = await refusal(
      calendar.book({ ...ctxFor(pendingReservation(VIRTUAL_FLOATINGIP, floatingIpParams.parse({ network_id: OTHER_NETWORK, amount: 1 }), id), 0, 1, { leaseId, status: 'ACTIVE' }), startMs: now - H, endMs: now + H }),
    );
    expect(moved.type).toBe('InvalidLease');
    expect(moved.message).toMatch(/Updating network_id is not supported/);
  });

  it('ends early and frees the rest of the window; a lease deleted before its start frees all', async () => {
    const early = fipReservation({ amount: 3 });
    await calendar.book(ctxFor(early, 0, 10));
    await calendar.release(early.id, true, T0 + 4 * H);
    expect(await calendar.book(ctxFor(fipReservation({ amount: 3 }), 4, 6))).toHaveLength(3);
    const never = fipReservation({ amount: 3 });
    await calendar.book(ctxFor(never, 20, 22));
    await calendar.release(never.id, false);
    expect(await calendar.addresses(never.id)).toEqual([]);
  });

  it('never books an address twice under concurrent admissions', async () => {
    const attempts = await Promise.allSettled(Array.from({ length: 8 }, () => calendar.book(ctxFor(fipReservation({ amount: 1 }), 30, 32))));
    const booked = attempts.filter((a) => a.status === 'fulfilled');
    expect(booked).toHaveLength(3);
    const refused = attempts.filter((a): a is PromiseRejectedResult => a.status === 'rejected');
    expect(refused.every((r) => r.reason instanceof ApplicationFailure && r.reason.type === 'LeaseConflict')).toBe(true);
    const { rows } = await database().pool.query('SELECT count(DISTINCT floating_ip_id)::int AS n, count(*)::int AS total FROM floating_ip_allocations');
    expect(rows[0]).toEqual({ n: 3, total: 3 });
  });

  it('checks the parameters as Blazar does', () => {
    const invalid = floatingIpParams.safeParse({ network_id: NETWORK, amount: 1, required_floatingips: ['300.1.1.1'] });
    expect(invalid.success).toBe(false);
    expect(invalid.error?.issues[0].message).toBe('IP address 300.1.1.1 is invalid form.');
    const tooMany = floatingIpParams.safeParse({ network_id: NETWORK, amount: 1, required_floatingips: ['203.0.113.100', '203.0.113.101'] });
    expect(tooMany.error?.issues[0].message).toMatch(/^Invalid values for required_floatingips and amount\./);
    expect(floatingIpParams.parse({ network_id: NETWORK, amount: '2', required_floatingips: ['2001:DB8:0:0::1'] })).toEqual({ network_id: NETWORK, amount: 2, required_floatingips: ['2001:db8::1'] });
    expect(floatingIpParams.safeParse({ network_id: NETWORK, amount: 1, required_floatingips: ['10.1'] }).success).toBe(false);
  });
});
