/**
 * The lending tables' constraints (037_host_lendings.sql, issue 43), against the real PostgreSQL:
 * whatever a statement does, borrowers stay apart from one another, inside their lending, which
 * stays inside its lender's window; a lent host takes no regular booking; a lender's row gone takes
 * its lendings and frees its borrowers' rows.
 */
import { randomUUID } from 'node:crypto';
import { DatabaseError } from 'pg';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { borrowersOutsideLendings, doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';
import { deleteHostBookings, endLenderBookingsAt, insertHostBooking, lenderRowsOf, type NewHostBooking } from '../src/db/host-allocations';
import { insertLendings, type HostLending } from '../src/db/host-lendings';
import { inTransaction } from '../src/db/transaction';

const H = 3_600_000;
const T0 = Date.UTC(2099, 0, 1);

describe('host lendings in PostgreSQL', () => {
  const database = useMigratedTestDatabase();
  let hostId: string;
  let lenderLease: string;
  let lenderReservation: string;
  let lending: HostLending;

  /** A booking of the host from `from` to `to` hours after T0 (no lead, no cleaning unless said). */
  const booking = (from: number, to: number, fields: Partial<NewHostBooking> = {}): NewHostBooking => ({
    hostId, reservationId: randomUUID(), leaseId: randomUUID(), projectId: 'p', fromMs: T0 + from * H, endMs: T0 + to * H, leadMs: 0, cleaningMs: 0, unbounded: false, bookingKey: 'k', ...fields,
  });
  const insert = (b: NewHostBooking) => inTransaction(database().pool, (client) => insertHostBooking(client, b));
  const borrower = (from: number, to: number, fields: Partial<NewHostBooking> = {}) => booking(from, to, { preemptible: true, lentBy: { id: lending.id, during: lending.during }, ...fields });
  const failure = async (work: Promise<unknown>): Promise<{ code?: string; constraint?: string }> => {
    const err = await work.then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(DatabaseError);
    return { code: (err as DatabaseError).code, constraint: (err as DatabaseError).constraint };
  };

  beforeEach(async () => {
    const pool = database().pool;
    await pool.query('TRUNCATE host_allocations, host_lendings, host_capabilities, hosts RESTART IDENTITY CASCADE');
    hostId = await insertHost(pool, { name: `lent-${randomUUID().slice(0, 8)}` });
    const lender = booking(0, 10);
    lenderLease = lender.leaseId;
    lenderReservation = lender.reservationId;
    await insert(lender);
    // Lent from hour 2 to hour 8 of the lender's 0–10 window.
    [lending] = await inTransaction(pool, async (client) =>
      insertLendings(client, { lendingId: randomUUID(), reservationId: lender.reservationId, leaseId: lender.leaseId, projectId: 'p', hosts: await lenderRowsOf(client, lender.reservationId, [hostId]), fromMs: T0 + 2 * H, untilMs: T0 + 8 * H }),
    );
  });

  afterEach(async () => {
    expect(await doubleBookings(database().pool)).toEqual([]);
    expect(await borrowersOutsideLendings(database().pool)).toEqual([]);
  });

  it('takes a borrower inside the lending, and refuses a second one overlapping it', async () => {
    await insert(borrower(2, 4, { cleaningMs: H / 2 }));
    expect(await failure(insert(borrower(4, 6)))).toEqual({ code: '23P01', constraint: 'host_allocations_borrowers_apart' });
    await insert(borrower(5, 8));
    const { rows } = await database().pool.query('SELECT count(*)::int AS n FROM host_allocations WHERE lent_by IS NOT NULL');
    expect(rows[0].n).toBe(2);
  });

  it('refuses a borrower outside its lending, by its window or its blocked range', async () => {
    expect(await failure(insert(borrower(7, 9)))).toEqual({ code: '23514', constraint: 'host_allocations_borrowing_shape' });
    expect(await failure(insert(borrower(2, 8, { cleaningMs: 1 })))).toEqual({ code: '23514', constraint: 'host_allocations_borrowing_shape' });
    expect(await failure(insert(borrower(3, 4, { leadMs: 2 * H })))).toEqual({ code: '23514', constraint: 'host_allocations_borrowing_shape' });
    // Only a preemptible whole-host booking may borrow.
    expect(await failure(insert(borrower(3, 4, { preemptible: false })))).toEqual({ code: '23514', constraint: 'host_allocations_borrowing_shape' });
  });

  it('refuses a lending shortened under its borrower, and a borrower grown out of it', async () => {
    await insert(borrower(3, 6));
    const pool = database().pool;
    expect(await failure(pool.query(`UPDATE host_lendings SET during = tstzrange(lower(during), lower(during) + interval '3 hours')`))).toMatchObject({ code: '23514' });
    expect(await failure(pool.query(`UPDATE host_allocations SET during = tstzrange(lower(during), upper(during) + interval '3 hours'), blocks = tstzrange(lower(blocks), upper(blocks) + interval '3 hours') WHERE lent_by IS NOT NULL`))).toEqual({ code: '23514', constraint: 'host_allocations_borrowing_shape' });
    // Shortened to where the borrower ends: allowed, and the borrower's copy of the range follows.
    await pool.query(`UPDATE host_lendings SET during = tstzrange(lower(during), lower(during) + interval '4 hours')`);
    const { rows } = await pool.query<{ same: boolean }>('SELECT a.lent_during = g.during AS same FROM host_allocations a JOIN host_lendings g ON g.id = a.lent_by');
    expect(rows).toEqual([{ same: true }]);
  });

  it("refuses the lender's booking shortened under its lending, and follows it when extended", async () => {
    const pool = database().pool;
    const shorten = (hours: number) => pool.query(`UPDATE host_allocations SET during = tstzrange(lower(during), to_timestamp($1 / 1000.0)), blocks = tstzrange(lower(blocks), to_timestamp($1 / 1000.0)) WHERE lease_id = $2`, [T0 + hours * H, lenderLease]);
    expect(await failure(shorten(7))).toEqual({ code: '23514', constraint: 'host_lendings_check' });
    await shorten(12);
    const { rows } = await pool.query<{ same: boolean }>('SELECT g.lender_during = a.during AS same FROM host_lendings g JOIN host_allocations a ON a.id = g.allocation_id');
    expect(rows).toEqual([{ same: true }]);
    await shorten(8);
  });

  it('refuses a regular booking, and a preemptible one not in the lending, on the lent host', async () => {
    expect(await failure(insert(booking(3, 4)))).toEqual({ code: '23P01', constraint: 'host_allocations_no_double_booking' });
    expect(await failure(insert(booking(3, 4, { preemptible: true })))).toEqual({ code: '23P01', constraint: 'host_allocations_no_double_booking' });
    // A lending is held inside its lender's window, and apart from the host's other lendings.
    const lender = await database().pool.query<{ reservation_id: string }>('SELECT reservation_id::text FROM host_allocations WHERE lease_id = $1', [lenderLease]);
    const lend = (from: number, until: number) =>
      inTransaction(database().pool, async (client) =>
        insertLendings(client, { lendingId: randomUUID(), reservationId: lender.rows[0].reservation_id, leaseId: lenderLease, projectId: 'p', hosts: await lenderRowsOf(client, lender.rows[0].reservation_id, [hostId]), fromMs: T0 + from * H, untilMs: T0 + until * H }),
      );
    expect(await failure(lend(8, 11))).toEqual({ code: '23514', constraint: 'host_lendings_check' });
    expect(await failure(lend(7, 9))).toEqual({ code: '23P01', constraint: 'host_lendings_apart' });
    expect(await lend(8, 10)).toHaveLength(1);
  });

  it("ends a lender's rows at its end, but a lent one (begun or not) when its lendings end; drops an unlent one not begun", async () => {
    const pool = database().pool;
    const [unlent, notBegun] = [await insertHost(pool, { name: 'unlent' }), await insertHost(pool, { name: 'not-begun' })];
    const ofLender = { reservationId: lenderReservation, leaseId: lenderLease };
    await insert(booking(0, 10, { ...ofLender, hostId: unlent, cleaningMs: H / 2 }));
    await insert(booking(5, 10, { ...ofLender, hostId: notBegun }));
    const lateRow = booking(5, 10, { ...ofLender, hostId: await insertHost(pool, { name: 'lent-not-begun' }) });
    await insert(lateRow);
    await inTransaction(pool, async (client) =>
      insertLendings(client, { lendingId: randomUUID(), reservationId: lenderReservation, leaseId: lenderLease, projectId: 'p', hosts: await lenderRowsOf(client, lenderReservation, [lateRow.hostId]), fromMs: T0 + 6 * H, untilMs: T0 + 9 * H }),
    );
    await inTransaction(pool, (client) => endLenderBookingsAt(client, lenderReservation, T0 + 4 * H, H / 2));
    const { rows } = await pool.query<{ host_id: string; end_h: number; blocked_h: number }>(
      `SELECT host_id::text, ((extract(epoch FROM upper(during)) * 1000 - $1) / $2)::float8 AS end_h, ((extract(epoch FROM upper(blocks)) * 1000 - $1) / $2)::float8 AS blocked_h
       FROM host_allocations WHERE reservation_id = $3 ORDER BY host_id`,
      [T0, H, lenderReservation],
    );
    expect(rows).toEqual([
      { host_id: hostId, end_h: 8, blocked_h: 8.5 },
      { host_id: unlent, end_h: 4, blocked_h: 4.5 },
      { host_id: lateRow.hostId, end_h: 9, blocked_h: 9.5 },
    ]);
  });

  it("drops the lendings with the lender's row and frees the borrowers' rows", async () => {
    const borrowed = borrower(3, 6);
    await insert(borrowed);
    await database().pool.query('DELETE FROM host_allocations WHERE lease_id = $1', [lenderLease]);
    expect((await database().pool.query('SELECT count(*)::int AS n FROM host_lendings')).rows[0].n).toBe(0);
    const { rows } = await database().pool.query('SELECT lease_id::text, lent_by, lent_during FROM host_allocations');
    expect(rows).toEqual([{ lease_id: borrowed.leaseId, lent_by: null, lent_during: null }]);
  });

  it('lets a host leaving the pool take its lender, lendings and borrowers with it in one statement', async () => {
    await insert(borrower(3, 6));
    await deleteHostBookings(database().pool, hostId);
    const { rows } = await database().pool.query('SELECT (SELECT count(*)::int FROM host_allocations) AS bookings, (SELECT count(*)::int FROM host_lendings) AS lendings');
    expect(rows).toEqual([{ bookings: 0, lendings: 0 }]);
  });
});
