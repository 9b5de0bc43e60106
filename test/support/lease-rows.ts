/** Lease rows written straight into PostgreSQL, as the workflows write them, without their workflows: for list tests and benchmarks. */
import type { Pool } from 'pg';
import type { Lease } from '../../src/domain/lease';

export async function insertLeaseRows(pool: Pool, leases: Lease[]): Promise<void> {
  await pool.query(
    `INSERT INTO leases (id, name, project_id, user_id, status, start_at, end_at, version, document, created_at, updated_at)
     SELECT l.id, l.name, l.project_id, l.user_id, l.status, to_timestamp(l.start_ms / 1000.0), to_timestamp(l.end_ms / 1000.0), 1, l.document,
            to_timestamp(l.created_ms / 1000.0), to_timestamp(l.created_ms / 1000.0)
     FROM jsonb_to_recordset($1::jsonb) AS l(id uuid, name text, project_id text, user_id text, status text, start_ms float8, end_ms float8, created_ms float8, document jsonb)`,
    [JSON.stringify(leases.map((l) => ({ id: l.id, name: l.name, project_id: l.projectId, user_id: l.userId, status: l.status, start_ms: l.startMs, end_ms: l.endMs, created_ms: l.createdMs, document: l })))],
  );
}

/** Host bookings straight into the calendar (host_allocations), for lease rows written as above: one row per host and lease, no lead or cleaning time. */
export async function insertHostBookingRows(pool: Pool, bookings: Array<{ hostId: string; lease: Lease }>): Promise<void> {
  await pool.query(
    `INSERT INTO host_allocations (host_id, reservation_id, lease_id, project_id, during, blocks, booking_key)
     SELECT b.host::bigint, gen_random_uuid(), b.lease::uuid, b.project, tstzrange(to_timestamp(b.s / 1000.0), to_timestamp(b.e / 1000.0)),
            tstzrange(to_timestamp(b.s / 1000.0), to_timestamp(b.e / 1000.0)), 'inserted'
     FROM jsonb_to_recordset($1::jsonb) AS b(host text, lease text, project text, s float8, e float8)`,
    [JSON.stringify(bookings.map((b) => ({ host: b.hostId, lease: b.lease.id, project: b.lease.projectId, s: b.lease.startMs, e: b.lease.endMs })))],
  );
}

/** A quantity booked on a Placement provider straight into the quantity calendar (quantity_allocations), no lead time. */
export async function insertQuantityBookingRow(pool: Pool, booking: { providerUuid: string; leaseId: string; projectId: string; amounts: Record<string, number>; startMs: number; endMs: number }): Promise<void> {
  await pool.query(
    `INSERT INTO quantity_allocations (provider_uuid, reservation_id, lease_id, project_id, amounts, during, blocks, booking_key)
     VALUES ($1, gen_random_uuid(), $2, $3, $4, tstzrange(to_timestamp($5 / 1000.0), to_timestamp($6 / 1000.0)), tstzrange(to_timestamp($5 / 1000.0), to_timestamp($6 / 1000.0)), 'inserted')`,
    [booking.providerUuid, booking.leaseId, booking.projectId, booking.amounts, booking.startMs, booking.endMs],
  );
}
