/**
 * The instance-slot calendar with lent slots (issue 43), against the real PostgreSQL, no workflow:
 * a preemptible slot lease books inside an open lending and nowhere else on the lender's slots;
 * regular asks and offer holds still see the lender's slots whole; a reclaim cuts the borrowers a
 * cleaning gap before the lender's need, owes them the news and says when each lending returns; a
 * lender cannot be shortened under a lending, nor a borrower extended past one; a lender's end
 * takes its slots back.
 */
import { randomUUID } from 'node:crypto';
import type { Reservation } from '../src/domain/lease';
import type { ReservationContext } from '../src/domain/resource-plugin';
import { syncCapacityProviders } from '../src/db/quantity-allocations';
import { openSlotLendingsOf } from '../src/db/quantity-lendings';
import { bookInTransaction } from '../src/resources/shared/booking';
import { COMPUTE_KIND } from '../src/resources/shared/compute-providers';
import { InstanceSlotCalendar, VIRTUAL_INSTANCE } from '../src/resources/virtual-instance/calendar';
import { virtualInstanceParams } from '../src/resources/virtual-instance/params';
import { virtualInstance } from '../src/resources/virtual-instance';
import { pendingReservation, refusal, reservationContext } from '../dev-stack/fixtures/builders';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';
import { slotBorrowersOutsideLendings, slotLendingsOverAmounts } from '../dev-stack/fixtures/slot-lendings';
import { eventually } from '../dev-stack/stack';
import { SearchReads } from '../src/domain/search-reads';

const H = 3_600_000;
const T0 = Date.UTC(2099, 2, 1);
const CLEANING = 30 * 60_000;
/** 4 slots of 2 vCPU per host. */
const CAPACITY = { VCPU: 8, MEMORY_MB: 16_384, DISK_GB: 100 };

describe('instance-slot calendar with lent slots', () => {
  const database = useMigratedTestDatabase();
  let slots: InstanceSlotCalendar;
  let lender: ReservationContext<never>;

  type Fields = { amount?: number; vcpus?: number; preemptible?: boolean; leaseStatus?: ReservationContext['leaseStatus']; affinity?: string };
  const paramsOf = (fields: Fields) =>
    virtualInstanceParams.parse({ vcpus: fields.vcpus ?? 2, memory_mb: 1024, disk_gb: 10, amount: fields.amount ?? 1, affinity: fields.affinity ?? 'None', resource_properties: '', preemptible: fields.preemptible ?? false });
  /** A window in hours from `at` (T0 unless given). */
  const context = (from: number, to: number, fields: Fields = {}, at = T0) => {
    const reservation: Reservation = pendingReservation(VIRTUAL_INSTANCE, paramsOf(fields));
    return reservationContext({ reservation, startMs: at + from * H, endMs: at + to * H, leaseStatus: fields.leaseStatus ?? 'PENDING' });
  };
  /** The same reservation asked anew with other parameters (an update). */
  const updated = (ctx: ReservationContext<never>, fields: Fields): ReservationContext<never> => ({ ...ctx, reservation: { ...ctx.reservation, params: paramsOf(fields) as never } });
  const lendOf = (ctx: ReservationContext<never>, count: number, fromMs: number, untilMs: number) =>
    slots.lend({ lendingId: randomUUID(), reservationId: ctx.reservation.id, leaseId: ctx.leaseId, projectId: 'p', count, fromMs, untilMs });
  const amountsOf = async (leaseId: string) =>
    (await database().pool.query<{ vcpu: number; key: string }>("SELECT (amounts ->> 'VCPU')::int AS vcpu, booking_key AS key FROM quantity_allocations WHERE lease_id = $1 ORDER BY id", [leaseId])).rows;
  const specOf = async (ctx: ReservationContext<never>) => (await virtualInstance.describe(ctx.reservation, ctx.projectId)).spec;
  const book = async (ctx: ReservationContext<never>) => slots.book(ctx, await specOf(ctx));
  const lend = (count: number, from: number, until: number, perProvider?: Map<string, number>) =>
    slots.lend({ lendingId: randomUUID(), reservationId: lender.reservation.id, leaseId: lender.leaseId, projectId: 'p', count, fromMs: T0 + from * H, untilMs: T0 + until * H, ...(perProvider ? { perProvider } : {}) });
  const rowsOf = async (leaseId: string) =>
    (
      await database().pool.query<{ provider: string; end: number; lent: boolean }>(
        'SELECT provider_uuid AS provider, (extract(epoch FROM upper(during)) * 1000)::float8 AS "end", lent_by IS NOT NULL AS lent FROM quantity_allocations WHERE lease_id = $1 ORDER BY id',
        [leaseId],
      )
    ).rows;
  const conflict = async (work: Promise<unknown>) => {
    const err = await refusal(work);
    expect(err.type).toBe('LeaseConflict');
    return err;
  };

  beforeEach(async () => {
    const pool = database().pool;
    await pool.query('TRUNCATE host_allocations, quantity_allocations, quantity_lendings, capacity_providers, host_capabilities, hosts, lease_preemptions RESTART IDENTITY CASCADE');
    for (const name of ['node-1', 'node-2']) await insertHost(pool, { name });
    await syncCapacityProviders(pool, COMPUTE_KIND, ['node-1', 'node-2'].map((name) => ({ uuid: `uuid-${name}`, name, host: name, capacity: CAPACITY, traits: [] })));
    slots = new InstanceSlotCalendar(pool, { cleaningMs: CLEANING, lenderEndNoticeMs: H });
    // The lender holds every slot of both hosts from hour 0 to 10, and lends 2 on node-1 from hour 2 to 8.
    lender = context(0, 10, { amount: 8, leaseStatus: 'ACTIVE' });
    await book(lender);
    await lend(2, 2, 8, new Map([['uuid-node-1', 2]]));
  });

  afterEach(async () => {
    const pool = database().pool;
    expect(await doubleBookings(pool)).toEqual([]);
    expect(await slotBorrowersOutsideLendings(pool)).toEqual([]);
    expect(await slotLendingsOverAmounts(pool)).toEqual([]);
  });

  it('books a preemptible lease inside the lending only; a regular one, an offer hold, or one past the lending or over its slots finds no room', async () => {
    const preemptibleAsk = context(0, 1, { preemptible: true });
    expect((await slots.search([{ reservation: preemptibleAsk.reservation, spec: await specOf(preemptibleAsk) }], T0 + 2 * H, H, 0)).earliest).toBe(T0 + 2 * H);
    const regularAsk = context(0, 1);
    expect((await slots.search([{ reservation: regularAsk.reservation, spec: await specOf(regularAsk) }], T0 + 2 * H, H, 0)).earliest).toBe(T0 + 10 * H);

    const borrower = context(2, 5, { amount: 2, preemptible: true });
    await book(borrower);
    expect(await rowsOf(borrower.leaseId)).toEqual([
      { provider: 'uuid-node-1', end: T0 + 5 * H, lent: true },
      { provider: 'uuid-node-1', end: T0 + 5 * H, lent: true },
    ]);
    await conflict(book(context(3, 4, { preemptible: true })));
    await conflict(book(context(6, 9, { preemptible: true })));
    await conflict(book(context(5, 6)));
    const hold = context(5, 6, { preemptible: true });
    const spec = await specOf(hold);
    await conflict(bookInTransaction(database().pool, (client) => slots.bookWithin(client, hold, spec, { preempt: false, borrow: false }), { retryExclusion: true }));
    await book(context(5, 8, { amount: 2, preemptible: true }));
    // A preemptible reservation lends nothing.
    expect((await conflict(slots.lend({ lendingId: randomUUID(), reservationId: borrower.reservation.id, leaseId: borrower.leaseId, projectId: 'p', count: 1, fromMs: T0 + 2 * H, untilMs: T0 + 3 * H }))).details?.[0]).toEqual({ lendable: 0 });
    // Lent slots beyond what the lender holds there, or past its window, are refused.
    expect((await conflict(lend(3, 2, 8, new Map([['uuid-node-1', 4]])))).details?.[0]).toEqual({ lendable: 2 });
    await conflict(lend(1, 2, 11));
  });

  it('keeps "each on a different host" on the real hosts: two lendings of one host are one host', async () => {
    await lend(1, 2, 8, new Map([['uuid-node-1', 1]]));
    await conflict(book(context(2, 3, { amount: 2, preemptible: true, affinity: 'False' })));
    await lend(1, 2, 8, new Map([['uuid-node-2', 1]]));
    const apart = context(2, 3, { amount: 2, preemptible: true, affinity: 'False' });
    expect((await book(apart)).map((p) => ({ host: p.hypervisorHostname, slots: p.slots }))).toEqual([
      { host: 'node-1', slots: 1 },
      { host: 'node-2', slots: 1 },
    ]);
    expect((await rowsOf(apart.leaseId)).map((r) => r.lent)).toEqual([true, true]);
  });

  it('reclaims: borrowers cut a cleaning gap before the need and owed it, the unborrowed lending first, each saying when it returns', async () => {
    const borrower = context(3, 6, { preemptible: true });
    const later = context(6.5, 7.5, { preemptible: true });
    await book(borrower);
    await book(later);
    await lend(1, 2, 8, new Map([['uuid-node-2', 1]]));
    const reclaim = (count: number | undefined, cut: string[]) =>
      bookInTransaction(database().pool, (client) => slots.reclaimIn(client, { reservationId: lender.reservation.id, count, neededFromMs: T0 + 5 * H }, cut), { retryExclusion: false });
    const cut: string[] = [];
    expect((await reclaim(1, cut)).map((r) => ({ provider: r.providerUuid, slots: r.slots, returnsAt: r.returnsAtMs }))).toEqual([{ provider: 'uuid-node-2', slots: 1, returnsAt: T0 + 2 * H }]);
    expect(cut).toEqual([]);
    expect((await reclaim(1, cut)).map((r) => ({ provider: r.providerUuid, returnsAt: r.returnsAtMs, borrowedMs: r.borrowedMs }))).toEqual([
      { provider: 'uuid-node-1', returnsAt: T0 + 5 * H - CLEANING, borrowedMs: 2 * H - CLEANING },
    ]);
    expect(await reclaim(1, cut)).toEqual([]);
    expect(cut.sort()).toEqual([borrower.leaseId, later.leaseId].sort());
    expect(await rowsOf(borrower.leaseId)).toEqual([{ provider: 'uuid-node-1', end: T0 + 5 * H - CLEANING, lent: true }]);
    expect(await rowsOf(later.leaseId)).toEqual([]);
    const owed = await database().pool.query('SELECT lease_id::text, kind, (extract(epoch FROM needed_from) * 1000)::float8 AS needed_ms FROM lease_preemptions ORDER BY lease_id');
    expect(owed.rows).toEqual([borrower.leaseId, later.leaseId].sort().map((leaseId) => ({ lease_id: leaseId, kind: 'reclaimed', needed_ms: T0 + 5 * H })));
    // Being reclaimed, a lending is no longer borrowable.
    await conflict(book(context(2, 3, { preemptible: true })));
  });

  it("refuses a lender's shortening under a lending and a borrower's extension past it (latest_end); moves both otherwise", async () => {
    const borrower = context(3, 5, { preemptible: true, leaseStatus: 'ACTIVE' });
    await book(borrower);
    const refused = await conflict(slots.moveWindow({ ...lender, endMs: T0 + 6 * H }));
    expect(refused.message).toContain('reclaim them first');
    expect(await slots.moveWindow({ ...lender, endMs: T0 + 12 * H })).toBe(true);
    expect((await openSlotLendingsOf(database().pool, lender.reservation.id)).map((g) => g.end_ms)).toEqual([T0 + 8 * H]);
    expect(await rowsOf(lender.leaseId)).toEqual(Array.from({ length: 8 }, (_, i) => ({ provider: i < 4 ? 'uuid-node-1' : 'uuid-node-2', end: T0 + 12 * H, lent: false })));
    const past = await conflict(slots.moveWindow({ ...borrower, endMs: T0 + 9 * H }));
    expect(past.details?.[0]).toEqual({ latest_end: expect.stringContaining('2099-03-01 08:00') });
    expect(await slots.moveWindow({ ...borrower, endMs: T0 + 7 * H })).toBe(true);
    expect(await rowsOf(borrower.leaseId)).toEqual([{ provider: 'uuid-node-1', end: T0 + 7 * H, lent: true }]);
  });

  it("a lender's end takes its slots back: borrowers cut to be out by the notice, its rows kept until then, its lendings returned", async () => {
    const borrower = context(2, 6, { preemptible: true });
    await book(borrower);
    await slots.release(lender.reservation.id, true, T0 + 3 * H);
    expect(await rowsOf(borrower.leaseId)).toEqual([{ provider: 'uuid-node-1', end: T0 + 4 * H - CLEANING, lent: true }]);
    const ends = new Set((await rowsOf(lender.leaseId)).map((r) => r.end));
    expect(ends).toEqual(new Set([T0 + 3 * H, T0 + 4 * H - CLEANING]));
    expect(await openSlotLendingsOf(database().pool, lender.reservation.id)).toEqual([]);
  });

  it('refuses to resize a lender or a borrower moved in place: their rows keep their amounts', async () => {
    // A second lender after the first, on free hosts: the same count fits on the same hosts at 4 vCPU.
    const second = context(10, 20, { amount: 2, leaseStatus: 'ACTIVE' });
    await book(second);
    await lendOf(second, 1, T0 + 11 * H, T0 + 15 * H);
    const before = await amountsOf(second.leaseId);
    const bigger = updated(second, { amount: 2, vcpus: 4 });
    expect((await conflict(slots.book(bigger, await specOf(bigger)))).message).toContain('size of its slots');
    expect(await amountsOf(second.leaseId)).toEqual(before);

    const borrower = context(3, 5, { preemptible: true, leaseStatus: 'ACTIVE' });
    await book(borrower);
    const biggerBorrower = updated(borrower, { preemptible: true, vcpus: 4 });
    expect((await conflict(slots.book(biggerBorrower, await specOf(biggerBorrower)))).message).toContain('size of its slots');
    expect((await amountsOf(borrower.leaseId)).map((r) => r.vcpu)).toEqual([2]);
  });

  it('a lend waits for a booking holding the providers of its lender (a rebook deciding on its lendings)', async () => {
    const holder = await database().pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query("SELECT uuid FROM capacity_providers WHERE uuid = 'uuid-node-2' FOR UPDATE");
      const lending = lend(1, 2, 8, new Map([['uuid-node-2', 1]]));
      await eventually(
        async () => ((await database().pool.query("SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")).rowCount ? true : undefined),
        3_000,
        20,
        () => 'the lend never waited for the providers',
      );
      expect(await openSlotLendingsOf(database().pool, lender.reservation.id)).toHaveLength(1);
      await holder.query('COMMIT');
      expect((await lending).map((g) => g.provider_uuid)).toEqual(['uuid-node-2']);
    } finally {
      holder.release();
    }
  });

  it('a lend that waited for the providers while an overlapping try of the same request committed answers that try\'s rows, not a 409', async () => {
    const lendingId = randomUUID();
    const request = { lendingId, reservationId: lender.reservation.id, leaseId: lender.leaseId, projectId: 'p', count: 6, fromMs: T0 + 2 * H, untilMs: T0 + 8 * H };
    let twin: (() => Promise<unknown>) | undefined = () => slots.lend(request);
    // Its transaction's clients: the other try lends every slot left and commits just before this one locks the providers.
    const pool = database().pool;
    const racing = new Proxy(pool, {
      get: (target, key) => {
        if (key !== 'connect') return (Reflect.get(target, key) as (...a: unknown[]) => unknown).bind(target);
        return async () => {
          const client = await target.connect();
          return new Proxy(client, {
            get: (c, k) => {
              const value = Reflect.get(c, k) as (...a: unknown[]) => unknown;
              if (k !== 'query') return typeof value === 'function' ? value.bind(c) : value;
              return async (...args: unknown[]) => {
                const other = twin;
                if (other && typeof args[0] === 'string' && args[0].includes('FROM capacity_providers') && args[0].includes('FOR UPDATE')) {
                  twin = undefined;
                  await other();
                }
                return value.apply(c, args);
              };
            },
          });
        };
      },
    });
    const lent = await new InstanceSlotCalendar(racing, { cleaningMs: CLEANING, lenderEndNoticeMs: H }).lend(request);
    expect(twin).toBeUndefined(); // the other try did commit in between
    expect(lent.map((g) => g.slots).sort()).toEqual([2, 4]);
    expect((await openSlotLendingsOf(pool, lender.reservation.id)).filter((g) => g.lending_id === lendingId).map((g) => g.id).sort()).toEqual(lent.map((g) => g.id).sort());
  });

  it('a lender whose lending has run its course changes its count', async () => {
    // Around now (the rules ask "still lending?" of the clock): lent an hour, ended an hour ago.
    const now = Date.now();
    const current = context(-3, 10, { amount: 2, leaseStatus: 'ACTIVE' }, now);
    await book(current);
    await lendOf(current, 1, now - 2 * H, now - H);
    const fewer = updated(current, { amount: 1 });
    expect((await slots.book(fewer, await specOf(fewer))).reduce((n, p) => n + p.slots, 0)).toBe(1);
  });

  it('books a preemptible ask in free capacity before lent slots, even beside a lending already borrowed', async () => {
    // A second lender holding a whole host after the first, lending 2 of its 4 slots, the other host taken until hour 13.
    const second = context(10, 30, { amount: 4, affinity: 'True', leaseStatus: 'ACTIVE' });
    await book(second);
    await lendOf(second, 2, T0 + 11 * H, T0 + 15 * H);
    await book(context(11, 13, { amount: 4 }));
    const borrower = context(11, 14, { preemptible: true });
    await book(borrower);
    expect((await rowsOf(borrower.leaseId)).map((r) => r.lent)).toEqual([true]);
    // From hour 13 the other host is free again.
    const free = context(13, 14, { preemptible: true });
    await book(free);
    expect((await rowsOf(free.leaseId)).map((r) => r.lent)).toEqual([false]);
  });

  it('offers a borrower no end past its lending', async () => {
    // A second lender after the first, with room beside it on its host: only the lending bounds the borrower.
    const second = context(10, 30, { amount: 2, leaseStatus: 'ACTIVE' });
    await book(second);
    await lendOf(second, 2, T0 + 11 * H, T0 + 15 * H);
    await book(context(11, 13, { amount: 6 }));
    const borrower = context(11, 13, { preemptible: true, leaseStatus: 'ACTIVE' });
    await book(borrower);
    expect((await rowsOf(borrower.leaseId)).map((r) => r.lent)).toEqual([true]);
    expect(await slots.latestEnd(borrower.leaseId)).toBe(T0 + 15 * H);
    expect(await slots.moveWindow({ ...borrower, endMs: T0 + 15 * H })).toBe(true);
  });

  it('shares the reads of a search for a preemptible ask where nothing is lent, never where something is', async () => {
    const ask = context(0, 1, { preemptible: true });
    const asks = [{ reservation: ask.reservation, spec: await specOf(ask) }];
    const reads = new SearchReads();
    const shared = jest.spyOn(reads, 'read');
    // After the lending's end (hour 8) nothing is lent: the calendar is read as for a regular ask.
    expect((await slots.search(asks, T0 + 20 * H, H, 0, { reads })).earliest).toBe(T0 + 20 * H);
    const sharedReads = shared.mock.calls.length;
    expect(sharedReads).toBeGreaterThan(0);
    expect((await slots.search(asks, T0 + 2 * H, H, 0, { reads })).earliest).toBe(T0 + 2 * H);
    expect(shared.mock.calls.length).toBe(sharedReads);
  });
});
