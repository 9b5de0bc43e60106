/**
 * The slot lending table's constraints (038_quantity_lendings.sql, issue 43), against the real
 * PostgreSQL: whatever a statement does, a borrower's slot stays inside its lending, which stays
 * inside its lender's row's window; a lender's row gone takes its lendings and frees its borrowers'
 * rows; a lender's end keeps the rows it lends until its lendings end. Sums are not constraints:
 * lendingsOverAmounts finds a lending whose borrowers hold more than it lends.
 */
import { randomUUID } from 'node:crypto';
import { DatabaseError } from 'pg';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { slotBorrowersOutsideLendings } from '../dev-stack/fixtures/slot-lendings';
import { endReservationQuantityBookingsAt, insertQuantityBooking, lenderSlotRowsOf, moveLiveSlotsEnd, syncCapacityProviders, type NewQuantityBooking } from '../src/db/quantity-allocations';
import { insertSlotLendings, lendingsOverAmounts, reclaimSlotLending, type SlotLending } from '../src/db/quantity-lendings';
import { inTransaction } from '../src/db/transaction';
import { COMPUTE_KIND } from '../src/resources/shared/compute-providers';

const H = 3_600_000;
const T0 = Date.UTC(2099, 0, 1);
const SLOT = { VCPU: 2, MEMORY_MB: 1024, DISK_GB: 10 };
const PROVIDER = 'uuid-lend-1';

describe('slot lendings in PostgreSQL', () => {
  const database = useMigratedTestDatabase();
  let lender: { reservationId: string; leaseId: string };
  let lending: SlotLending;

  /** One slot from `from` to `to` hours after T0 (no lead). */
  const slot = (from: number, to: number, fields: Partial<NewQuantityBooking> = {}): NewQuantityBooking => ({
    providerUuid: PROVIDER, reservationId: randomUUID(), leaseId: randomUUID(), projectId: 'p', subject: null, amounts: SLOT,
    startMs: T0 + from * H, endMs: T0 + to * H, blocksFromMs: T0 + from * H, bookingKey: 'k', ...fields,
  });
  const insert = (b: NewQuantityBooking) => inTransaction(database().pool, (client) => insertQuantityBooking(client, b));
  const borrower = (from: number, to: number, fields: Partial<NewQuantityBooking> = {}) => slot(from, to, { preemptible: true, lentBy: { id: lending.id, during: lending.during }, ...fields });
  const failure = async (work: Promise<unknown>): Promise<{ code?: string; constraint?: string }> => {
    const err = await work.then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(DatabaseError);
    return { code: (err as DatabaseError).code, constraint: (err as DatabaseError).constraint };
  };
  const lendingRow = async () =>
    (await database().pool.query<{ end_ms: number; lender_end_ms: number }>(`SELECT (extract(epoch FROM upper(during)) * 1000)::float8 AS end_ms, (extract(epoch FROM upper(lender_during)) * 1000)::float8 AS lender_end_ms FROM quantity_lendings`)).rows;

  beforeEach(async () => {
    const pool = database().pool;
    await pool.query('TRUNCATE quantity_allocations, quantity_lendings, capacity_providers RESTART IDENTITY CASCADE');
    await syncCapacityProviders(pool, COMPUTE_KIND, [{ uuid: PROVIDER, name: 'lend-1', host: 'lend-1', capacity: { VCPU: 8, MEMORY_MB: 16_384, DISK_GB: 100 }, traits: [] }]);
    lender = { reservationId: randomUUID(), leaseId: randomUUID() };
    // The lender's 3 slots from hour 0 to 10; 2 of them lent from hour 2 to 8.
    for (let i = 0; i < 3; i++) await insert(slot(0, 10, lender));
    [lending] = await inTransaction(pool, async (client) => {
      const [row] = await lenderSlotRowsOf(client, lender.reservationId, T0 + 2 * H);
      expect(row.held).toBe(3);
      return insertSlotLendings(client, { lendingId: randomUUID(), ...lender, projectId: 'p', providers: [{ ...row, slots: 2 }], fromMs: T0 + 2 * H, untilMs: T0 + 8 * H });
    });
  });

  afterEach(async () => {
    expect(await slotBorrowersOutsideLendings(database().pool)).toEqual([]);
  });

  it('lends k times the slot, and takes borrowers inside the lending only, preemptible ones', async () => {
    expect({ slots: lending.slots, amounts: lending.amounts }).toEqual({ slots: 2, amounts: { VCPU: 4, MEMORY_MB: 2048, DISK_GB: 20 } });
    await insert(borrower(2, 8));
    expect(await failure(insert(borrower(7, 9)))).toEqual({ code: '23514', constraint: 'quantity_allocations_borrowing_shape' });
    expect(await failure(insert(borrower(3, 4, { blocksFromMs: T0 + H })))).toEqual({ code: '23514', constraint: 'quantity_allocations_borrowing_shape' });
    expect(await failure(insert(borrower(3, 4, { preemptible: false })))).toEqual({ code: '23514', constraint: 'quantity_allocations_borrowing_shape' });
    // A borrower naming the lending with another range (a reclaim since) finds no lending.
    expect(await failure(insert(borrower(3, 4, { lentBy: { id: lending.id, during: `["${new Date(T0 + 2 * H).toISOString()}","${new Date(T0 + 9 * H).toISOString()}")` } })))).toMatchObject({ code: '23503' });
  });

  it('refuses a lending outside its lender row, and shortening the lender or the lending under what it holds', async () => {
    await insert(borrower(3, 6));
    const [row] = await inTransaction(database().pool, (client) => lenderSlotRowsOf(client, lender.reservationId, T0));
    expect(await failure(inTransaction(database().pool, (client) => insertSlotLendings(client, { lendingId: randomUUID(), ...lender, projectId: 'p', providers: [{ ...row, slots: 1 }], fromMs: T0 + 9 * H, untilMs: T0 + 11 * H })))).toMatchObject({ code: '23514' });
    expect(await failure(inTransaction(database().pool, (client) => moveLiveSlotsEnd(client, lender.reservationId, T0, T0 + 7 * H, 'k')))).toMatchObject({ code: '23514' });
    expect(await failure(inTransaction(database().pool, (client) => reclaimSlotLending(client, lending.id, T0 + 5 * H)))).toEqual({ code: '23514', constraint: 'quantity_allocations_borrowing_shape' });
    // A reclaim that waits for the borrower is fine; so is a lender's extension, which the lending follows.
    await inTransaction(database().pool, (client) => reclaimSlotLending(client, lending.id, T0 + 6 * H));
    await inTransaction(database().pool, (client) => moveLiveSlotsEnd(client, lender.reservationId, T0, T0 + 12 * H, 'k'));
    expect(await lendingRow()).toEqual([{ end_ms: T0 + 6 * H, lender_end_ms: T0 + 12 * H }]);
  });

  it("keeps a lender's rows on the provider until its lendings end when it ends; a row deleted takes its lendings and frees its borrowers", async () => {
    await insert(borrower(2, 5));
    await endReservationQuantityBookingsAt(database().pool, lender.reservationId, T0 + H);
    const ends = await database().pool.query<{ end_ms: number }>('SELECT (extract(epoch FROM upper(during)) * 1000)::float8 AS end_ms FROM quantity_allocations WHERE reservation_id = $1', [lender.reservationId]);
    expect(ends.rows.map((r) => r.end_ms)).toEqual([T0 + 8 * H, T0 + 8 * H, T0 + 8 * H]);
    await database().pool.query('DELETE FROM quantity_allocations WHERE reservation_id = $1', [lender.reservationId]);
    expect(await lendingRow()).toEqual([]);
    const freed = await database().pool.query<{ lent_by: string | null }>('SELECT lent_by FROM quantity_allocations');
    expect(freed.rows).toEqual([{ lent_by: null }]);
  });

  it('finds a lending whose borrowers hold more than it lends at some instant', async () => {
    await insert(borrower(2, 5));
    await insert(borrower(4, 8));
    await insert(borrower(5, 8));
    expect(await inTransaction(database().pool, (client) => lendingsOverAmounts(client, [lending.id]))).toEqual([]);
    await insert(borrower(4.5, 6));
    expect(await inTransaction(database().pool, (client) => lendingsOverAmounts(client, [lending.id]))).toEqual([lending.id]);
    await database().pool.query('DELETE FROM quantity_allocations WHERE lent_by IS NOT NULL');
  });
});
