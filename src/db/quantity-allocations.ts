/**
 * The quantity calendar's tables: `capacity_providers` (Placement resource providers and their
 * capacities, copied per kind: 'compute', 'bandwidth') and `quantity_allocations` (amounts booked
 * on one provider over a window `during`, blocking from the lead time before: `blocks`). The
 * exclusion constraint `quantity_allocations_one_booking_per_subject` keeps one subject (a server)
 * in one booking at a time. Instants cross this boundary as epoch milliseconds.
 */
import type { PoolClient } from 'pg';
import type { Amounts } from '../domain/quantity-calendar';
import { PROVIDER_ON_ENROLLED_HOST_SQL, PROVIDER_ON_FAILED_ENROLLED_HOST_SQL } from './hosts';
import type { Pool } from './pool';
import { BOOKING_LEASE_COLUMNS, cutPreemptibleBookings, HELD_BOOKING_JOIN, endReservationBookingsAt, WINDOW_PARAMS_RANGE, type BookingLeaseColumns, type CutBookingKey } from './range-bookings';
import { SLOT_LENDER_ROW_LENT_UNTIL, type LentSlotsOnProvider } from './quantity-lendings';
import { inTransaction } from './transaction';

type Queryable = Pool | PoolClient;

export interface CapacityProvider {
  uuid: string;
  name: string;
  host: string;
  capacity: Amounts;
  traits: string[];
}

/** A reservation's booking: on which provider, and the window it blocks. */
export interface QuantityBookingRecord {
  providerUuid: string;
  host: string;
  name: string;
  booking_key: string;
  startMs: number;
  endMs: number;
  /** What it books, on a provider of which kind. */
  amounts: Amounts;
  subject: string | null;
  kind: string;
}

/** A booking on a provider over [start_ms, end_ms) (end_ms Infinity: unbounded). */
export interface ProviderBookingRow {
  provider_uuid: string;
  reservation_id: string;
  amounts: Amounts;
  start_ms: number;
  end_ms: number;
}

/** A new booking: `amounts` on the provider over [startMs, endMs), blocking from `blocksFromMs`. */
export interface NewQuantityBooking {
  providerUuid: string;
  reservationId: string;
  leaseId: string;
  projectId: string;
  subject: string | null;
  amounts: Amounts;
  startMs: number;
  endMs: number;
  blocksFromMs: number;
  bookingKey: string;
  /** A preemptible slot (issue 43): a regular admission may cut it (cutPreemptibleQuantityBookings). */
  preemptible?: boolean;
  /** A borrower's slot (issue 43): inside this lending (its row id and exact `during`, quantity-lendings.ts). */
  lentBy?: { id: string; during: string };
}

/** Records the providers of `kind` as they are now; the others of the kind stay (old bookings refer to them) but are no longer usable. */
export async function syncCapacityProviders(pool: Pool, kind: string, providers: CapacityProvider[]): Promise<void> {
  await inTransaction(pool, async (client) => {
    for (const p of [...providers].sort((a, b) => a.uuid.localeCompare(b.uuid))) {
      await client.query(
        `INSERT INTO capacity_providers (uuid, name, host, kind, capacity, traits, usable, refreshed_at)
         VALUES ($1, $2, $3, $4, $5, $6, true, now())
         ON CONFLICT (uuid) DO UPDATE SET name = $2, host = $3, kind = $4, capacity = $5, traits = $6, usable = true, refreshed_at = now()`,
        [p.uuid, p.name, p.host, kind, JSON.stringify(p.capacity), p.traits],
      );
    }
    await client.query('UPDATE capacity_providers SET usable = false WHERE kind = $1 AND NOT (uuid = ANY($2))', [kind, providers.map((p) => p.uuid)]);
  });
}

/** When the providers of `kind` were last copied (undefined: never). */
export async function providersRefreshedAt(db: Queryable, kind: string): Promise<number | undefined> {
  const { rows } = await db.query<{ ms: number | null }>(`SELECT (extract(epoch FROM max(refreshed_at)) * 1000)::float8 AS ms FROM capacity_providers WHERE kind = $1`, [kind]);
  return rows[0]?.ms ?? undefined;
}

/**
 * A provider `p` on a host the monitor found failed: a shared compute host (compute_host_health) or
 * an enrolled one (hosts.state, the hosts store's). The one definition for admission, healing and the monitor's sweep.
 */
const PROVIDER_ON_FAILED_HOST_SQL = `(
  EXISTS (SELECT 1 FROM compute_host_health f WHERE f.host = p.host AND f.state = 'failed')
  OR ${PROVIDER_ON_FAILED_ENROLLED_HOST_SQL})`;

/** The usable providers of `kind` (in Placement, on a host that has not failed), by name (as shown) or by uuid (the order bookings lock them in). */
export async function usableProviders(db: Queryable, kind: string, order: 'name' | 'uuid'): Promise<CapacityProvider[]> {
  const { rows } = await db.query<CapacityProvider>(
    `SELECT uuid, name, host, capacity, traits FROM capacity_providers p WHERE kind = $1 AND usable AND NOT ${PROVIDER_ON_FAILED_HOST_SQL}
     ORDER BY ${order === 'name' ? 'name' : 'uuid'}`,
    [kind],
  );
  return rows;
}

/** The providers of `kind` that are not usable now: on a failed host, or down, disabled or gone at the last copy from the cloud (why a request fits nowhere now), by name. */
export async function unusableProviders(db: Queryable, kind: string): Promise<CapacityProvider[]> {
  const { rows } = await db.query<CapacityProvider>(
    `SELECT uuid, name, host, capacity, traits FROM capacity_providers p WHERE kind = $1 AND (NOT usable OR ${PROVIDER_ON_FAILED_HOST_SQL}) ORDER BY name`,
    [kind],
  );
  return rows;
}

/** Whether the provider is on a failed host (its bookings cannot count on it). */
export async function providerOnFailedHost(db: Queryable, providerUuid: string): Promise<boolean> {
  const { rows } = await db.query<{ failed: boolean }>(`SELECT ${PROVIDER_ON_FAILED_HOST_SQL} AS failed FROM capacity_providers p WHERE p.uuid = $1`, [providerUuid]);
  return rows[0]?.failed ?? false;
}

/**
 * The compute hosts the monitor watches for the quantity calendar: hosts of providers in Placement
 * or still booked, that are not enrolled for whole-host leases (those are watched as hosts), with
 * their recorded state.
 */
export async function sharedComputeHosts(db: Queryable): Promise<Array<{ host: string; state: 'up' | 'failed' }>> {
  const { rows } = await db.query<{ host: string; state: 'up' | 'failed' }>(
    `SELECT DISTINCT p.host, COALESCE(f.state, 'up') AS state
     FROM capacity_providers p LEFT JOIN compute_host_health f ON f.host = p.host
     WHERE (p.usable OR EXISTS (SELECT 1 FROM quantity_allocations a WHERE a.provider_uuid = p.uuid AND upper(a.blocks) > now()))
       AND NOT ${PROVIDER_ON_ENROLLED_HOST_SQL}
     ORDER BY p.host`,
  );
  return rows;
}

/** Records a shared compute host's new state, once (a repeated record keeps the first `state_since`). */
export async function recordComputeHostState(db: Queryable, change: { host: string; state: 'up' | 'failed'; sinceMs: number; reason: string | null }): Promise<void> {
  await db.query(
    `INSERT INTO compute_host_health (host, state, state_since, state_reason) VALUES ($1, $2, to_timestamp($3::float8 / 1000), $4)
     ON CONFLICT (host) DO UPDATE SET state = EXCLUDED.state, state_since = EXCLUDED.state_since, state_reason = EXCLUDED.state_reason
     WHERE compute_host_health.state <> EXCLUDED.state`,
    [change.host.slice(0, 255), change.state, change.sinceMs, change.reason?.slice(0, 1024) ?? null],
  );
}

/** The leases with quantity bookings from now on on these compute hosts (beginning before `untilMs`, when given). */
export async function leasesBookedOnComputeHosts(db: Queryable, hosts: string[], untilMs?: number): Promise<string[]> {
  if (hosts.length === 0) return [];
  const { rows } = await db.query<{ lease_id: string }>(
    `SELECT DISTINCT a.lease_id::text FROM quantity_allocations a JOIN capacity_providers p ON p.uuid = a.provider_uuid
     WHERE p.host = ANY($1) AND upper(a.during) > now() AND ($2::float8 IS NULL OR lower(a.during) < to_timestamp($2::float8 / 1000))
     ORDER BY 1`,
    [hosts, untilMs ?? null],
  );
  return rows.map((r) => r.lease_id);
}

/** The leases with quantity bookings from now on on failed hosts (pending ones only if they begin before `untilMs`, when given): the sweep tells them again. */
export async function leasesBookedOnFailedProviders(db: Queryable, untilMs?: number): Promise<string[]> {
  const { rows } = await db.query<{ lease_id: string }>(
    `SELECT DISTINCT a.lease_id::text FROM quantity_allocations a JOIN capacity_providers p ON p.uuid = a.provider_uuid
     WHERE upper(a.during) > now() AND ($1::float8 IS NULL OR lower(a.during) < to_timestamp($1::float8 / 1000)) AND ${PROVIDER_ON_FAILED_HOST_SQL}
     ORDER BY 1`,
    [untilMs ?? null],
  );
  return rows.map((r) => r.lease_id);
}

/** The providers among `uuids` still usable, locked for the transaction in uuid order (concurrent bookings queue instead of deadlocking). */
export async function lockProviders(client: PoolClient, uuids: string[]): Promise<CapacityProvider[]> {
  const { rows } = await client.query<CapacityProvider>(`SELECT uuid, name, host, capacity, traits FROM capacity_providers WHERE uuid = ANY($1) AND usable ORDER BY uuid FOR UPDATE`, [uuids]);
  return rows;
}

export async function bookingOfReservation(db: Queryable, reservationId: string): Promise<QuantityBookingRecord | undefined> {
  const { rows } = await db.query<QuantityBookingRecord>(
    `SELECT a.provider_uuid AS "providerUuid", p.host, p.name, a.booking_key, a.amounts, a.subject, p.kind,
            (extract(epoch FROM lower(a.blocks)) * 1000)::float8 AS "startMs", (extract(epoch FROM upper(a.blocks)) * 1000)::float8 AS "endMs"
     FROM quantity_allocations a JOIN capacity_providers p ON p.uuid = a.provider_uuid WHERE a.reservation_id = $1 LIMIT 1`,
    [reservationId],
  );
  return rows[0];
}

/**
 * The bookings on the providers blocking within [fromMs, toMs) (toMs Infinity: from `fromMs` on),
 * but borrowers' slots (issue 43): they lie inside their lender's rows, which count whole.
 */
export async function bookingsOnProviders(db: Queryable, providerUuids: string[], fromMs: number, toMs: number, withoutPreemptible = false): Promise<ProviderBookingRow[]> {
  // `withoutPreemptible`: a regular admission's view (issue 43), where preemptible slots are free.
  const { rows } = await db.query<ProviderBookingRow>(
    `SELECT provider_uuid, reservation_id::text, amounts, (extract(epoch FROM lower(blocks)) * 1000)::float8 AS start_ms,
            COALESCE((extract(epoch FROM upper(blocks)) * 1000)::float8, 'Infinity') AS end_ms
     FROM quantity_allocations
     WHERE provider_uuid = ANY($1) AND blocks && tstzrange(to_timestamp($2 / 1000.0), to_timestamp($3::numeric / 1000.0)) AND NOT ($4 AND preemptible) AND lent_by IS NULL`,
    [providerUuids, fromMs, toMs === Infinity ? null : toMs, withoutPreemptible],
  );
  return rows;
}

export async function insertQuantityBooking(client: PoolClient, booking: NewQuantityBooking): Promise<void> {
  await client.query(
    `INSERT INTO quantity_allocations (provider_uuid, reservation_id, lease_id, project_id, subject, amounts, during, blocks, booking_key, preemptible, lent_by, lent_during)
     VALUES ($1, $2, $3, $4, $5, $6, tstzrange(to_timestamp($7 / 1000.0), to_timestamp($8 / 1000.0)),
             tstzrange(to_timestamp($9 / 1000.0), to_timestamp($8 / 1000.0)), $10, $11, $12, $13::tstzrange)`,
    [
      booking.providerUuid,
      booking.reservationId,
      booking.leaseId,
      booking.projectId,
      booking.subject,
      JSON.stringify(booking.amounts),
      booking.startMs,
      booking.endMs,
      booking.blocksFromMs,
      booking.bookingKey,
      booking.preemptible ?? false,
      booking.lentBy?.id ?? null,
      booking.lentBy?.during ?? null,
    ],
  );
}

/** A preemptible slot on a provider over [start_ms, end_ms) (its blocked interval), with its lease. */
export interface PreemptibleSlotRow extends ProviderBookingRow {
  lease_id: string;
  /** When the lease's window begins (the earliest of its slots). */
  lease_start_ms: number;
  /** A cut of its lease at the asked instant would drop a slot already begun (servers may run there). */
  drops_begun: boolean;
}

/**
 * The preemptible slots on these providers whose blocked interval overlaps [fromMs, toMs) (issue
 * 43). `lock` (a transaction about to cut): the rows stay locked until it ends; the caller holds
 * the providers' locks too, so no slot on them comes or goes meanwhile but by a cut.
 */
export async function preemptibleSlotsOnProviders(db: Queryable, window: { providerUuids: string[]; fromMs: number; toMs: number; cutAtMs: number; lock: boolean }): Promise<PreemptibleSlotRow[]> {
  // Borrowers' slots are left out: they lie inside their lender's rows, so cutting them frees nothing a regular ask sees.
  // What each lease's rows say (its start, whether a cut would drop a slot begun) once per lease, not per slot:
  // a preemptible lease may hold a thousand slots, read while other projects' admissions wait on the providers' locks.
  const { rows } = await db.query<PreemptibleSlotRow>(
    `WITH found AS (
       SELECT a.id, a.provider_uuid, a.reservation_id, a.lease_id, a.amounts, a.blocks FROM quantity_allocations a
       WHERE a.preemptible AND a.lent_by IS NULL AND a.provider_uuid = ANY($1) AND a.blocks && tstzrange(to_timestamp($2 / 1000.0), to_timestamp($3 / 1000.0))
       ORDER BY a.provider_uuid, a.id${window.lock ? ' FOR UPDATE OF a' : ''}
     ), per_lease AS (
       SELECT o.lease_id, (extract(epoch FROM min(lower(o.during))) * 1000)::float8 AS lease_start_ms,
              bool_or(o.preemptible AND lower(o.during) <= now() AND lower(o.during) >= to_timestamp($4 / 1000.0)) AS drops_begun
       FROM quantity_allocations o WHERE o.lease_id IN (SELECT lease_id FROM found) GROUP BY o.lease_id
     )
     SELECT f.provider_uuid, f.reservation_id::text, f.lease_id::text, f.amounts,
            (extract(epoch FROM lower(f.blocks)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(f.blocks)) * 1000)::float8 AS end_ms,
            p.lease_start_ms, p.drops_begun
     FROM found f JOIN per_lease p ON p.lease_id = f.lease_id
     ORDER BY f.provider_uuid, f.id`,
    [window.providerUuids, window.fromMs, window.toMs, window.cutAtMs],
  );
  return rows;
}

/**
 * A preemptible lease cut to end at `endMs` (issue 43): its slots end there (no cleaning gap), with
 * the key `cutKey` gives them, as the host rows' (cutPreemptibleHostBookings); those beginning at or
 * after it go.
 */
export async function cutPreemptibleQuantityBookings(client: PoolClient, leaseId: string, endMs: number, cutKey: CutBookingKey): Promise<void> {
  await cutPreemptibleBookings(client, 'quantity_allocations', leaseId, endMs, 0, cutKey);
}

export async function moveBookingToProvider(client: PoolClient, reservationId: string, providerUuid: string): Promise<void> {
  await client.query('UPDATE quantity_allocations SET provider_uuid = $2 WHERE reservation_id = $1', [reservationId, providerUuid]);
}

/** Moves the end of the reservation's booking to `endMs`, for the request `bookingKey` names. */
export async function moveBookingEnd(client: PoolClient, reservationId: string, endMs: number, bookingKey: string): Promise<void> {
  await client.query(
    `UPDATE quantity_allocations SET during = tstzrange(lower(during), to_timestamp($2 / 1000.0)), blocks = tstzrange(lower(blocks), to_timestamp($2 / 1000.0)), booking_key = $3
     WHERE reservation_id = $1`,
    [reservationId, endMs, bookingKey],
  );
}

/** Of these reservations, those with a quantity row that ends after `afterMs`. */
export async function reservationsQuantityBookedAfter(db: Queryable, reservationIds: string[], afterMs: number): Promise<Set<string>> {
  const { rows } = await db.query<{ reservation_id: string }>('SELECT DISTINCT reservation_id::text FROM quantity_allocations WHERE reservation_id = ANY($1::uuid[]) AND upper(during) > to_timestamp($2 / 1000.0)', [reservationIds, afterMs]);
  return new Set(rows.map((r) => r.reservation_id));
}

export async function deleteReservationQuantityBookings(db: Queryable, reservationId: string): Promise<void> {
  await db.query('DELETE FROM quantity_allocations WHERE reservation_id = $1', [reservationId]);
}

/** Every booking under a lease id (an offer hold's, ended: src/db/offer-holds.ts). */
export async function deleteLeaseQuantityBookings(db: Queryable, leaseId: string): Promise<void> {
  await db.query('DELETE FROM quantity_allocations WHERE lease_id = $1', [leaseId]);
}

/**
 * Ends the reservation's booking at `atMs`; a booking that had not begun by then is dropped whole. A
 * lender's rows on a provider where it lends (issue 43) end no sooner than its lendings there.
 */
export const endReservationQuantityBookingsAt = (db: Queryable, reservationId: string, atMs: number) =>
  endReservationBookingsAt(db, 'quantity_allocations', reservationId, atMs, 0, SLOT_LENDER_ROW_LENT_UNTIL);

/** How many reservations book room on the host (by hypervisor or compute host name) and have not ended. */
export async function liveReservationsOnHost(db: Queryable, hypervisorHostname: string, computeHost: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(DISTINCT a.reservation_id)::int AS n FROM quantity_allocations a JOIN capacity_providers p ON p.uuid = a.provider_uuid
     WHERE (p.name = $1 OR p.host = $2) AND upper(a.blocks) > now()`,
    [hypervisorHostname, computeHost],
  );
  return rows[0].n;
}

// ─── Instance slots ─────────────────────────────────────────────────────────────────────────
// A `virtual:instance` reservation books one row per slot here (on the host's compute provider,
// the slot's VCPU / MEMORY_MB / DISK_GB) and one `shared` row per host in host_allocations. An
// active reservation that changes ends its rows now and books anew from now: the rows live at an
// instant are the reservation's slots then.

/** The reservation's slots on one host at an instant. */
export interface LiveSlots {
  /** The enrolled host (its id in `hosts`), and Nova's compute service host for it. */
  hostId: string;
  computeHost: string;
  providerUuid: string;
  /** The provider's name: the hypervisor host name. */
  name: string;
  /** Nova's compute service host. */
  host: string;
  slots: number;
  /** One slot's amounts (a reservation's slots are all of one size). */
  slot: Amounts;
  bookingKey: string;
}

/** The reservation's slots live at `atMs` (those whose window ends after it), per host, by name. */
export async function liveSlots(db: Queryable, reservationId: string, atMs: number): Promise<LiveSlots[]> {
  const { rows } = await db.query<LiveSlots>(
    `SELECT h.id::text AS "hostId", COALESCE(h.service_name, p.host) AS "computeHost", a.provider_uuid AS "providerUuid", p.name, p.host,
            count(*)::int AS slots, (array_agg(a.amounts))[1] AS slot, min(a.booking_key) AS "bookingKey"
     FROM quantity_allocations a JOIN capacity_providers p ON p.uuid = a.provider_uuid JOIN hosts h ON h.hypervisor_hostname = p.name
     WHERE a.reservation_id = $1 AND upper(a.during) > to_timestamp($2 / 1000.0)
     GROUP BY h.id, a.provider_uuid, p.name, p.host ORDER BY p.name`,
    [reservationId, atMs],
  );
  return rows;
}

/** A lease's bookings of `kind` that have not ended: what it holds on which provider (with the provider's capacity), until when. */
export async function liveLeaseBookings(db: Queryable, leaseId: string, kind: string): Promise<Array<{ reservationId: string; provider: CapacityProvider; amounts: Amounts; endMs: number }>> {
  const { rows } = await db.query<CapacityProvider & { reservation_id: string; amounts: Amounts; end_ms: number }>(
    `SELECT a.reservation_id::text, a.amounts, (extract(epoch FROM upper(a.during)) * 1000)::float8 AS end_ms, p.uuid, p.name, p.host, p.capacity, p.traits
     FROM quantity_allocations a JOIN capacity_providers p ON p.uuid = a.provider_uuid
     WHERE a.lease_id = $1 AND p.kind = $2 AND upper(a.during) > now()`,
    [leaseId, kind],
  );
  return rows.map(({ reservation_id, amounts, end_ms, ...provider }) => ({ reservationId: reservation_id, provider, amounts, endMs: end_ms }));
}

/** Every host the reservation ever had slots on (an end cleans them all), by name. */
export async function slotHostsEver(db: Queryable, reservationId: string): Promise<Array<{ providerUuid: string; name: string; host: string }>> {
  const { rows } = await db.query<{ providerUuid: string; name: string; host: string }>(
    `SELECT DISTINCT a.provider_uuid AS "providerUuid", p.name, p.host
     FROM quantity_allocations a JOIN capacity_providers p ON p.uuid = a.provider_uuid WHERE a.reservation_id = $1 ORDER BY p.name`,
    [reservationId],
  );
  return rows;
}

// ─── The calendar page ──────────────────────────────────────────────────────────────────────

export interface ProviderInWindow {
  uuid: string;
  name: string;
  host: string;
  kind: string;
  capacity: Amounts;
  usable: boolean;
}

/** Quantities booked on a provider, as the calendar page draws them. */
export interface QuantityBookingInWindow extends BookingLeaseColumns {
  provider_uuid: string;
  amounts: Amounts;
}

/** The providers (every kind) and the quantities booked on them over [fromMs, toMs), by provider then start; at most `limit` bookings. */
export async function quantityBookingsInWindow(pool: Pool, window: { fromMs: number; toMs: number; limit: number }): Promise<{ providers: ProviderInWindow[]; bookings: QuantityBookingInWindow[] }> {
  const [providers, bookings] = await Promise.all([
    pool.query<ProviderInWindow>('SELECT uuid, name, host, kind, capacity, usable FROM capacity_providers ORDER BY kind, name'),
    pool.query<QuantityBookingInWindow>(
      `SELECT a.provider_uuid, a.amounts, ${BOOKING_LEASE_COLUMNS}
       FROM quantity_allocations a LEFT JOIN leases l ON l.id = a.lease_id AND l.deleted_at IS NULL ${HELD_BOOKING_JOIN}
       WHERE a.blocks && ${WINDOW_PARAMS_RANGE} AND a.during && ${WINDOW_PARAMS_RANGE}
       ORDER BY a.provider_uuid, lower(a.during), a.id LIMIT $3`,
      [window.fromMs, window.toMs, window.limit],
    ),
  ]);
  return { providers: providers.rows, bookings: bookings.rows };
}

// ─── Lending (issue 43) ─────────────────────────────────────────────────────────────────────

/**
 * A lender's slots live at `atMs` per provider, each provider's rows locked FOR UPDATE: how many,
 * of which size, and one row (the lowest id) a lending there names (they share one window). A
 * preemptible reservation's slots are never lent (none answered).
 */
export async function lenderSlotRowsOf(client: PoolClient, reservationId: string, atMs: number): Promise<Array<Omit<LentSlotsOnProvider, 'slots'> & { held: number }>> {
  const { rows } = await client.query<{ id: string; provider_uuid: string; during: string; amounts: Amounts }>(
    `SELECT a.id::text, a.provider_uuid, a.during::text AS during, a.amounts FROM quantity_allocations a
     WHERE a.reservation_id = $1 AND NOT a.preemptible AND a.during @> to_timestamp($2 / 1000.0) ORDER BY a.provider_uuid, a.id FOR UPDATE`,
    [reservationId, atMs],
  );
  const byProvider = new Map<string, Omit<LentSlotsOnProvider, 'slots'> & { held: number }>();
  for (const r of rows) {
    const found = byProvider.get(r.provider_uuid);
    if (found) found.held++;
    else byProvider.set(r.provider_uuid, { allocationId: r.id, providerUuid: r.provider_uuid, during: r.during, slot: r.amounts, held: 1 });
  }
  return [...byProvider.values()];
}

/** A borrower's slot row inside a lending. */
export interface BorrowedSlotRow {
  lending_row_id: string;
  lease_id: string;
  reservation_id: string;
  amounts: Amounts;
  start_ms: number;
  end_ms: number;
  /** Where its blocked range ends (what a lending must still hold). */
  blocked_until_ms: number;
  begun: boolean;
}

/** The borrowers' slot rows in these lendings (`lock`: FOR UPDATE, a reclaim about to cut them), by lending then lease. */
export async function borrowedSlotsOfLendings(client: Queryable, lendingRowIds: string[], lock: boolean): Promise<BorrowedSlotRow[]> {
  if (lendingRowIds.length === 0) return [];
  const { rows } = await client.query<BorrowedSlotRow>(
    `SELECT a.lent_by::text AS lending_row_id, a.lease_id::text, a.reservation_id::text, a.amounts,
            (extract(epoch FROM lower(a.during)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(a.during)) * 1000)::float8 AS end_ms,
            (extract(epoch FROM upper(a.blocks)) * 1000)::float8 AS blocked_until_ms, lower(a.during) <= now() AS begun
     FROM quantity_allocations a WHERE a.lent_by = ANY($1::bigint[]) ORDER BY a.lent_by, a.lease_id, a.id${lock ? ' FOR UPDATE' : ''}`,
    [lendingRowIds],
  );
  return rows;
}

/** The borrower leases, begun and not ended (nor deleted), whose slots lie in these lendings: while any is, the lent slots are not free. */
export async function slotBorrowersStillRunning(db: Queryable, lendingRowIds: string[]): Promise<string[]> {
  if (lendingRowIds.length === 0) return [];
  const { rows } = await db.query<{ lease_id: string }>(
    `SELECT DISTINCT a.lease_id::text FROM quantity_allocations a JOIN leases l ON l.id = a.lease_id
     WHERE a.lent_by = ANY($1::bigint[]) AND lower(a.during) <= now() AND l.deleted_at IS NULL AND l.status NOT IN ('TERMINATED', 'ERROR') ORDER BY 1`,
    [lendingRowIds],
  );
  return rows.map((r) => r.lease_id);
}

/**
 * A borrower reservation's slots live at `atMs` inside lendings: which lendings, the soonest end
 * among them, where its live slots end now, and whether it holds free slots too (undefined: it borrows none).
 */
export async function borrowedSlotsOf(db: Queryable, reservationId: string, atMs: number): Promise<{ lendingRowIds: string[]; untilMs: number; endMs: number; alsoFree: boolean } | undefined> {
  const { rows } = await db.query<{ ids: string[] | null; until_ms: number | null; end_ms: number; also_free: boolean }>(
    `SELECT array_agg(DISTINCT a.lent_by::text) FILTER (WHERE a.lent_by IS NOT NULL) AS ids,
            (extract(epoch FROM min(upper(a.lent_during))) * 1000)::float8 AS until_ms,
            (extract(epoch FROM max(upper(a.during))) * 1000)::float8 AS end_ms, bool_or(a.lent_by IS NULL) AS also_free
     FROM quantity_allocations a WHERE a.reservation_id = $1 AND upper(a.during) > to_timestamp($2 / 1000.0)`,
    [reservationId, atMs],
  );
  const r = rows[0];
  return r?.ids && r.until_ms !== null ? { lendingRowIds: r.ids, untilMs: r.until_ms, endMs: r.end_ms, alsoFree: r.also_free } : undefined;
}

/** A borrower lease's live slots: the soonest end of the lendings that hold them (Infinity: it borrows none). */
export async function slotsBorrowedUntil(db: Queryable, leaseId: string): Promise<number> {
  const { rows } = await db.query<{ until_ms: number | null }>(
    'SELECT (extract(epoch FROM min(upper(lent_during))) * 1000)::float8 AS until_ms FROM quantity_allocations WHERE lease_id = $1 AND lent_by IS NOT NULL AND upper(during) > now()',
    [leaseId],
  );
  return rows[0]?.until_ms ?? Infinity;
}

/**
 * The borrowers' slot rows of these lendings, as a slot calendar reads them (blocked interval), but `ownReservationId`'s
 * (compared as text: an offer's search names its asks `offer-0`…, no uuid).
 */
export async function bookingsInLendings(db: Queryable, lendingRowIds: string[], ownReservationId?: string): Promise<Array<ProviderBookingRow & { lending_row_id: string }>> {
  if (lendingRowIds.length === 0) return [];
  const { rows } = await db.query<ProviderBookingRow & { lending_row_id: string }>(
    `SELECT a.provider_uuid, a.reservation_id::text, a.amounts, a.lent_by::text AS lending_row_id,
            (extract(epoch FROM lower(a.blocks)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(a.blocks)) * 1000)::float8 AS end_ms
     FROM quantity_allocations a WHERE a.lent_by = ANY($1::bigint[]) AND a.reservation_id::text IS DISTINCT FROM $2::text`,
    [lendingRowIds, ownReservationId ?? null],
  );
  return rows;
}

/**
 * The reservation's slots live at `atMs` end at `endMs` instead, in place (a lender's or a borrower's
 * move, issue 43: its rows are what lendings name, or lie inside one), with the key `bookingKey`.
 */
export async function moveLiveSlotsEnd(client: PoolClient, reservationId: string, atMs: number, endMs: number, bookingKey: string): Promise<void> {
  await client.query(
    `UPDATE quantity_allocations SET during = tstzrange(lower(during), to_timestamp($3 / 1000.0)), blocks = tstzrange(lower(blocks), to_timestamp($3 / 1000.0)), booking_key = $4
     WHERE reservation_id = $1 AND upper(during) > to_timestamp($2 / 1000.0)`,
    [reservationId, atMs, endMs, bookingKey],
  );
}
