/**
 * The host calendar with lent hosts (issue 43), against the real PostgreSQL, no workflow: a
 * preemptible lease books inside an open lending and nowhere else on the lender's hosts; regular
 * asks still see the lender's booking; a reclaim cuts the borrowers a cleaning gap before the need,
 * owes them the news and says when each host returns; a lender cannot be shortened under a lending,
 * nor a borrower extended past one; a lender's end takes its hosts back; a borrower never waits for
 * its lender to end.
 */
import { randomUUID } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { HostCalendar } from '../src/resources/physical-host/calendar';
import { bookInTransaction } from '../src/resources/shared/booking';
import { findPredecessors } from '../src/db/leases';
import { computeHostsOfReservation, currentBookings, lenderRowsOf, unusableHostsOf } from '../src/db/host-allocations';
import { insertLendings, lendersOfBorrower, lendingsInWindow, openLendingsOf } from '../src/db/host-lendings';
import { leaseActivities } from '../activities/leases';
import type { ActivityDeps } from '../activities/deps';
import { inTransaction } from '../src/db/transaction';
import type { Lease } from '../src/domain/lease';
import type { ReservationContext } from '../src/domain/resource-plugin';
import { pendingReservation, reservationContext } from '../dev-stack/fixtures/builders';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { borrowersOutsideLendings, doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';
import { insertLeaseRows } from '../dev-stack/fixtures/lease-rows';

const H = 3_600_000;
const T0 = Date.UTC(2099, 0, 1);
const CLEANING = 30 * 60_000;

describe('host calendar with lent hosts', () => {
  const database = useMigratedTestDatabase();
  let calendar: HostCalendar;
  let hosts: string[];

  const context = (from: number, to: number, fields: { preemptible?: boolean; min?: number; leaseId?: string; leaseStatus?: ReservationContext['leaseStatus']; reservationId?: string } = {}) => {
    const reservation = pendingReservation(
      'physical:host',
      { min: fields.min ?? 1, max: fields.min ?? 1, hypervisor_properties: '', resource_properties: '', before_end: 'default', preemptible: fields.preemptible ?? false },
      fields.reservationId,
    );
    return reservationContext({ leaseId: fields.leaseId ?? randomUUID(), reservation, leaseReservations: [reservation], startMs: T0 + from * H, endMs: T0 + to * H, leaseStatus: fields.leaseStatus ?? 'PENDING' });
  };
  const conflict = async (work: Promise<unknown>) => {
    const err = await work.then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect((err as ApplicationFailure).type).toBe('LeaseConflict');
    return err as ApplicationFailure;
  };
  /** The lender: both hosts from hour 0 to 10; host 1 lent from `from` to `until`. */
  const lend = async (lender: ReservationContext<never>, hostIds: string[], from: number, until: number) =>
    inTransaction(database().pool, async (client) =>
      insertLendings(client, { lendingId: randomUUID(), reservationId: lender.reservation.id, leaseId: lender.leaseId, projectId: 'p', hosts: await lenderRowsOf(client, lender.reservation.id, hostIds), fromMs: T0 + from * H, untilMs: T0 + until * H }),
    );
  const rowsOf = async (leaseId: string) =>
    (await database().pool.query<{ host: string; end: number; lent: boolean }>('SELECT host_id::text AS host, (extract(epoch FROM upper(during)) * 1000)::float8 AS "end", lent_by IS NOT NULL AS lent FROM host_allocations WHERE lease_id = $1 ORDER BY host_id', [leaseId])).rows;

  let lender: ReservationContext<never>;

  beforeEach(async () => {
    const pool = database().pool;
    await pool.query('TRUNCATE host_allocations, host_lendings, host_capabilities, hosts, lease_preemptions, leases RESTART IDENTITY CASCADE');
    hosts = [await insertHost(pool, { name: 'lend-1' }), await insertHost(pool, { name: 'lend-2' })];
    calendar = new HostCalendar(pool, { cleaningMs: CLEANING, randomChoice: false });
    lender = context(0, 10, { min: 2 });
    await calendar.book(lender);
    await lend(lender, [hosts[0]], 2, 8);
  });

  afterEach(async () => {
    expect(await doubleBookings(database().pool)).toEqual([]);
    expect(await borrowersOutsideLendings(database().pool)).toEqual([]);
  });

  it('books a preemptible lease inside the lending only; a regular one, or one past the lending, finds no host', async () => {
    // What a search answers: the lent time for a preemptible ask, not for a regular one.
    expect((await calendar.search([context(0, 1, { preemptible: true }).reservation], T0 + 2 * H, H / 2, 0)).earliest).toBe(T0 + 2 * H);
    expect((await calendar.search([context(0, 1).reservation], T0 + 2 * H, H / 2, 0)).earliest).toBe(T0 + 10 * H + CLEANING);
    // And what an admin's preview would book.
    expect([...((await calendar.wouldBook([context(0, 1, { preemptible: true }).reservation], T0 + 2 * H, T0 + 3 * H, 0)) ?? new Map()).values()].flat().map((h) => h.id)).toEqual([hosts[0]]);
    expect(await calendar.wouldBook([context(0, 1).reservation], T0 + 2 * H, T0 + 3 * H, 0)).toBeUndefined();
    const borrower = context(2, 5, { preemptible: true });
    expect((await calendar.book(borrower)).map((h) => h.id)).toEqual([hosts[0]]);
    expect(await rowsOf(borrower.leaseId)).toEqual([{ host: hosts[0], end: T0 + 5 * H, lent: true }]);
    // Past the lending's end (its cleaning gap included), or on the host lent to another already.
    await conflict(calendar.book(context(6, 8, { preemptible: true })));
    await conflict(calendar.book(context(3, 4, { preemptible: true })));
    await calendar.book(context(5.5, 7.5, { preemptible: true }));
    await conflict(calendar.book(context(3, 4)));
    // The lending is full now: the next room is after the lender's end, for any ask.
    expect((await calendar.search([context(0, 1, { preemptible: true }).reservation], T0 + 2 * H, H / 2, 0)).earliest).toBe(T0 + 10 * H + CLEANING);
  });

  it('never lends to an offer hold', async () => {
    const hold = context(2, 5, { preemptible: true });
    await conflict(bookInTransaction(database().pool, (client) => calendar.bookWithin(client, hold, { preempt: false, borrow: false }), { retryExclusion: true }));
    await bookInTransaction(database().pool, (client) => calendar.bookWithin(client, hold, { preempt: false }), { retryExclusion: true });
    expect(await rowsOf(hold.leaseId)).toEqual([{ host: hosts[0], end: T0 + 5 * H, lent: true }]);
  });

  it('reclaims: borrowers cut a cleaning gap before the need and owed it, the lending shortened, and says when each host returns', async () => {
    const borrower = context(3, 6, { preemptible: true });
    const later = context(6.5, 7.5, { preemptible: true });
    await calendar.book(borrower);
    await calendar.book(later);
    await lend(lender, [hosts[1]], 2, 8);
    const reclaim = (count: number | undefined, cut: string[]) =>
      bookInTransaction(database().pool, (client) => calendar.reclaimIn(client, { reservationId: lender.reservation.id, count, neededFromMs: T0 + 5 * H }, cut), { retryExclusion: false });
    const cut: string[] = [];
    // One host back: the one nobody borrows, with nobody to cut (not lent yet: back at its start).
    expect((await reclaim(1, cut)).map((r) => ({ host: r.hostId, returnsAt: r.returnsAtMs }))).toEqual([{ host: hosts[1], returnsAt: T0 + 2 * H }]);
    expect(cut).toEqual([]);
    // The other: its borrower ends a cleaning gap before the need; the later one (after it) loses its booking.
    expect((await reclaim(1, cut)).map((r) => ({ host: r.hostId, returnsAt: r.returnsAtMs, borrowedMs: r.borrowedMs }))).toEqual([{ host: hosts[0], returnsAt: T0 + 5 * H, borrowedMs: 1.5 * H }]);
    // Every host reclaimed already: a count finds none left; all (the lender's end) takes both again, nothing more to cut.
    expect(await reclaim(1, cut)).toEqual([]);
    expect((await reclaim(undefined, cut)).map((r) => r.returnsAtMs)).toEqual([T0 + 5 * H, T0 + 2 * H]);
    expect(cut.sort()).toEqual([borrower.leaseId, later.leaseId].sort());
    expect(await rowsOf(borrower.leaseId)).toEqual([{ host: hosts[0], end: T0 + 5 * H - CLEANING, lent: true }]);
    expect(await rowsOf(later.leaseId)).toEqual([]);
    const owed = await database().pool.query('SELECT lease_id::text, kind, (extract(epoch FROM end_at) * 1000)::float8 AS end_ms, (extract(epoch FROM needed_from) * 1000)::float8 AS needed_ms FROM lease_preemptions');
    expect(owed.rows).toContainEqual({ lease_id: borrower.leaseId, kind: 'reclaimed', end_ms: T0 + 5 * H - CLEANING, needed_ms: T0 + 5 * H });
    const lendings = await lendingsInWindow(database().pool, { fromMs: T0, toMs: T0 + 10 * H, hostIds: hosts, limit: 10 });
    expect(lendings.map((g) => ({ host: g.host_id, end: g.end_ms }))).toEqual([{ host: hosts[0], end: T0 + 5 * H }, { host: hosts[1], end: T0 + 2 * H + 0.001 }]);
    // Nothing is lent after the need: a new borrower finds no room; nor before it, in a lending being reclaimed.
    await conflict(calendar.book(context(5.5, 7, { preemptible: true })));
    await conflict(calendar.book(context(2, 2.5, { preemptible: true })));
  });

  it("refuses the lender's shortening under a lending (409), allows its extension, and refuses a borrower's extension past its lending with the latest end", async () => {
    const active = { ...lender, leaseStatus: 'ACTIVE' as const };
    const refused = await conflict(calendar.book({ ...active, endMs: T0 + 7 * H }));
    expect(refused.message).toMatch(/lends hosts until .*reclaim them first/);
    await calendar.book({ ...active, endMs: T0 + 12 * H });
    expect((await rowsOf(lender.leaseId)).map((r) => r.end)).toEqual([T0 + 12 * H, T0 + 12 * H]);

    const borrower = context(2, 5, { preemptible: true, leaseStatus: 'PENDING' });
    await calendar.book(borrower);
    const extension = await conflict(calendar.book({ ...borrower, leaseStatus: 'ACTIVE', endMs: T0 + 9 * H }));
    expect(extension.details?.[0]).toEqual({ latest_end: expect.stringMatching(/^2099-01-01 07:30/) });
    expect(await calendar.latestEnd(borrower.leaseId)).toBe(T0 + 8 * H - CLEANING);
    await calendar.book({ ...borrower, leaseStatus: 'ACTIVE', endMs: T0 + 7 * H });
    expect((await rowsOf(borrower.leaseId))[0].end).toBe(T0 + 7 * H);
  });

  it("a lender's end takes its lent hosts back: its borrowers cut, its booking kept until they are out, its lending returned", async () => {
    const borrower = context(2, 7, { preemptible: true });
    await calendar.book(borrower);
    await calendar.release(lender.reservation.id, true, T0 + 4 * H);
    expect(await rowsOf(borrower.leaseId)).toEqual([{ host: hosts[0], end: T0 + 4 * H - CLEANING, lent: true }]);
    expect((await rowsOf(lender.leaseId)).map((r) => r.end)).toEqual([T0 + 4 * H, T0 + 4 * H]);
    expect(await openLendingsOf(database().pool, lender.reservation.id)).toEqual([]);
    expect((await database().pool.query('SELECT kind FROM lease_preemptions WHERE lease_id = $1', [borrower.leaseId])).rows).toEqual([{ kind: 'reclaimed' }]);
  });

  it("answers a borrower's deadline by its lending, and leaves lent hosts out of the lender's aggregate and heal", async () => {
    const borrower = context(2, 5, { preemptible: true });
    await calendar.book(borrower);
    // Nothing booked after it but the lender's taking the host back at the lending's end.
    expect(await calendar.nextBookings(borrower.reservation.id)).toEqual(new Map([[hosts[0], T0 + 8 * H]]));
    // The lender's own borrower is not the next booking of its host (a recycle end would not wait its grace for it).
    expect(await calendar.nextBookings(lender.reservation.id)).toEqual(new Map());
    const pool = database().pool;
    expect((await computeHostsOfReservation(pool, lender.reservation.id)).map((h) => h.id)).toEqual(hosts);
    expect((await computeHostsOfReservation(pool, lender.reservation.id, { inLeaseAggregate: true })).map((h) => h.id)).toEqual([hosts[1]]);
    await pool.query("UPDATE hosts SET state = 'failed'");
    expect([...(await unusableHostsOf(pool, { leaseId: lender.leaseId }))]).toEqual([hosts[1]]);
    expect([...(await unusableHostsOf(pool, { leaseId: borrower.leaseId }))]).toEqual([hosts[0]]);
  });

  it('a borrower does not wait for its lender to end before it starts', async () => {
    const borrower = context(2, 5, { preemptible: true });
    await calendar.book(borrower);
    const lease = (ctx: ReservationContext<never>): Lease => ({ id: ctx.leaseId, name: ctx.leaseId, projectId: 'p', userId: 'u', status: 'ACTIVE', startMs: ctx.startMs, endMs: ctx.endMs, createdMs: T0 }) as unknown as Lease;
    await insertLeaseRows(database().pool, [lease(lender)]);
    await database().pool.query(`UPDATE leases SET resource_keys = ARRAY['host:${hosts[0]}']`);
    expect(await lendersOfBorrower(database().pool, borrower.leaseId)).toEqual([lender.leaseId]);
    const asked = { leaseId: borrower.leaseId, keys: [`host:${hosts[0]}`], startMs: borrower.startMs };
    expect(await findPredecessors(database().pool, asked)).toEqual([lender.leaseId]);
    // What the workflow asks (activities/leases.ts): its lender left out; another lease on the host still counted.
    const activities = leaseActivities({ pool: database().pool } as unknown as ActivityDeps);
    expect(await activities.findPredecessors(asked)).toEqual([]);
    const other = context(0, 1, { preemptible: true });
    await insertLeaseRows(database().pool, [lease(other)]);
    await database().pool.query(`UPDATE leases SET resource_keys = ARRAY['host:${hosts[0]}'] WHERE id = $1`, [other.leaseId]);
    expect(await activities.findPredecessors(asked)).toEqual([other.leaseId]);
  });

  it('tells drift repair which bookings in force lend their host now, and which wait for it back', async () => {
    const now = (Date.now() - T0) / H; // hours after T0 (negative): the bookings below hold now
    const active = context(now - 1, now + 9, { min: 2, leaseStatus: 'ACTIVE' });
    await calendar.book(active);
    await lend(active, [hosts[0]], now - 1, now + 4);
    await lend(active, [hosts[1]], now - 1, now - 0.5); // ended, the host not back yet
    const borrower = context(now - 0.5, now + 3, { preemptible: true, leaseStatus: 'ACTIVE' });
    expect((await calendar.book(borrower)).map((h) => h.id)).toEqual([hosts[0]]);
    const lease = (ctx: ReservationContext<never>): Lease => ({ id: ctx.leaseId, name: ctx.leaseId, projectId: 'p', userId: 'u', status: 'ACTIVE', startMs: ctx.startMs, endMs: ctx.endMs, createdMs: T0 }) as unknown as Lease;
    await insertLeaseRows(database().pool, [lease(active), lease(borrower)]);
    const inForce = (await currentBookings(database().pool)).map((b) => ({ lease: b.lease_id, host: b.host_id, lent: b.lent }));
    expect(inForce.sort((a, b) => `${a.lease}${a.host}`.localeCompare(`${b.lease}${b.host}`))).toEqual(
      [
        { lease: active.leaseId, host: hosts[0], lent: 'now' },
        { lease: active.leaseId, host: hosts[1], lent: 'returning' },
        { lease: borrower.leaseId, host: hosts[0], lent: null },
      ].sort((a, b) => `${a.lease}${a.host}`.localeCompare(`${b.lease}${b.host}`)),
    );
  });
});
