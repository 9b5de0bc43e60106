/**
 * Maintenance windows (table host_maintenance, migration 013): an operator's booking of one host
 * over [start, end), which the host calendar reads as blocked time. Instants cross this boundary
 * as epoch milliseconds.
 */
import type { PoolClient } from 'pg';
import type { HostNeedRow } from '../domain/power-plan';
import type { Pool } from './pool';

type Queryable = Pool | PoolClient;

export interface MaintenanceWindow {
  id: string;
  host_id: string;
  hypervisor_hostname: string;
  /** Nova's compute service host for the host (what os-services and aggregates name). */
  compute_host: string;
  start_ms: number;
  end_ms: number;
  reason: string;
  disable_compute: boolean;
  /** When the window's start disabled the compute service (null: not disabled by it, or enabled again). */
  compute_disabled_at: Date | null;
  created_at: Date;
}

const WINDOW_COLUMNS = `w.id::text, w.host_id::text, h.hypervisor_hostname, COALESCE(h.service_name, h.hypervisor_hostname) AS compute_host,
  (extract(epoch FROM lower(w.during)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(w.during)) * 1000)::float8 AS end_ms,
  w.reason, w.disable_compute, w.compute_disabled_at, w.created_at`;

/**
 * SQL (for a booking aliased `a`, its host `h`) that is true when the lease cannot count on the
 * host for what is left of the booking: the host failed; or, for a booking not begun, the host was
 * taken out of admission (not released: a released host's own lease keeps it) or a maintenance
 * window overlaps the booking; or, for a begun one, a window is in force now.
 * The one definition for the heal hook and for the monitor's sweep.
 */
export const UNUSABLE_BOOKING_SQL = `(
  h.state = 'failed'
  OR (lower(a.during) > now() AND NOT h.reservable AND h.released_at IS NULL)
  OR EXISTS (SELECT 1 FROM host_maintenance m WHERE m.host_id = a.host_id
             AND CASE WHEN lower(a.during) > now() THEN m.during && a.during ELSE m.during @> now() END))`;

/** The windows overlapping [fromMs, toMs + cleaningMs) (toMs null: from `fromMs` on), of every host or only of `hostIds`, as the host calendar's blocked intervals. */
export async function maintenanceBlocks(db: Queryable, window: { fromMs: number; toMs: number | null; cleaningMs: number; hostIds?: string[] }): Promise<Array<{ host_id: string; start_ms: number; end_ms: number }>> {
  const { rows } = await db.query<{ host_id: string; start_ms: number; end_ms: number }>(
    `SELECT host_id::text, (extract(epoch FROM lower(during)) * 1000)::float8 AS start_ms, (extract(epoch FROM upper(during)) * 1000)::float8 AS end_ms
     FROM host_maintenance
     WHERE during && tstzrange(to_timestamp($1 / 1000.0), to_timestamp($2::numeric / 1000.0) + $3 * interval '1 millisecond')
       AND ($4::bigint[] IS NULL OR host_id = ANY($4::bigint[]))`,
    [window.fromMs, window.toMs, window.cleaningMs, window.hostIds ?? null],
  );
  return rows;
}

/** Per host (of `hostIds`, or all), its maintenance windows not ended at `atMs`: the earliest start, and the end of the one in force (nextHostNeeds' shape). */
export async function nextMaintenanceNeeds(db: Queryable, atMs: number, hostIds?: string[]): Promise<HostNeedRow[]> {
  const { rows } = await db.query<HostNeedRow>(
    `SELECT host_id::text, (extract(epoch FROM min(lower(during))) * 1000)::float8 AS start_ms,
            max((extract(epoch FROM upper(during)) * 1000)::float8) FILTER (WHERE lower(during) <= to_timestamp($1::float8 / 1000)) AS busy_until_ms
     FROM host_maintenance
     WHERE upper(during) > to_timestamp($1::float8 / 1000) AND ($2::bigint[] IS NULL OR host_id = ANY($2::bigint[]))
     GROUP BY host_id`,
    [atMs, hostIds ?? null],
  );
  return rows;
}

export interface NewWindow {
  id: string;
  hostId: string;
  startMs: number;
  endMs: number;
  reason: string;
  disableCompute: boolean;
}

/** Inserts the window; the exclusion constraint refuses (23P01) one overlapping another window of the host. */
export async function insertWindow(db: Queryable, window: NewWindow): Promise<void> {
  await db.query(
    `INSERT INTO host_maintenance (id, host_id, during, reason, disable_compute)
     VALUES ($1, $2, tstzrange(to_timestamp($3::float8 / 1000), to_timestamp($4::float8 / 1000)), $5, $6)`,
    [window.id, window.hostId, window.startMs, window.endMs, window.reason, window.disableCompute],
  );
}

/** The host's window overlapping [startMs, endMs), if any (why a new one is refused). */
export async function overlappingWindow(db: Queryable, hostId: string, startMs: number, endMs: number): Promise<MaintenanceWindow | undefined> {
  const { rows } = await db.query<MaintenanceWindow>(
    `SELECT ${WINDOW_COLUMNS} FROM host_maintenance w JOIN hosts h ON h.id = w.host_id
     WHERE w.host_id = $1 AND w.during && tstzrange(to_timestamp($2::float8 / 1000), to_timestamp($3::float8 / 1000)) ORDER BY lower(w.during) LIMIT 1`,
    [hostId, startMs, endMs],
  );
  return rows[0];
}

export async function getWindow(db: Queryable, id: string): Promise<MaintenanceWindow | undefined> {
  const { rows } = await db.query<MaintenanceWindow>(`SELECT ${WINDOW_COLUMNS} FROM host_maintenance w JOIN hosts h ON h.id = w.host_id WHERE w.id = $1`, [id]);
  return rows[0];
}

/**
 * Windows by start, then id: of one host or all; those not yet over unless `includeEnded`; at most
 * `limit`, after `after` (the last window of the previous page).
 */
export async function listWindows(
  db: Queryable,
  filter: { hostId?: string; includeEnded: boolean; limit: number; after?: { startMs: number; id: string } },
): Promise<MaintenanceWindow[]> {
  const { rows } = await db.query<MaintenanceWindow>(
    `SELECT ${WINDOW_COLUMNS} FROM host_maintenance w JOIN hosts h ON h.id = w.host_id
     WHERE ($1::bigint IS NULL OR w.host_id = $1) AND ($2 OR upper(w.during) > now())
       AND ($4::float8 IS NULL OR (lower(w.during), w.id) > (to_timestamp($4::float8 / 1000), $5::uuid))
     ORDER BY lower(w.during), w.id LIMIT $3`,
    [filter.hostId ?? null, filter.includeEnded, filter.limit, filter.after?.startMs ?? null, filter.after?.id ?? null],
  );
  return rows;
}

/**
 * Withdraws a window: one not begun is deleted; one in force is cut at now (its row kept, so the
 * record shows when it really ended). Answers what happened (`over`: it had ended already; `none`: no such window).
 */
export async function withdrawWindow(db: Queryable, id: string): Promise<'deleted' | 'ended' | 'over' | 'none'> {
  const { rows } = await db.query<{ outcome: 'deleted' | 'ended' | 'over' }>(
    `WITH target AS (SELECT id, during FROM host_maintenance WHERE id = $1 FOR UPDATE),
     deleted AS (DELETE FROM host_maintenance m USING target t WHERE m.id = t.id AND lower(t.during) > now() RETURNING 1),
     ended AS (UPDATE host_maintenance m SET during = tstzrange(lower(t.during), now()) FROM target t
               WHERE m.id = t.id AND lower(t.during) <= now() AND upper(t.during) > now() RETURNING 1)
     SELECT CASE WHEN EXISTS (SELECT 1 FROM deleted) THEN 'deleted' WHEN EXISTS (SELECT 1 FROM ended) THEN 'ended' ELSE 'over' END AS outcome FROM target`,
    [id],
  );
  return rows[0]?.outcome ?? 'none';
}

/** Records that the window's start disabled the compute service (`atMs`), or that its end enabled it again (null). */
export async function recordComputeDisabled(db: Queryable, id: string, atMs: number | null): Promise<void> {
  await db.query('UPDATE host_maintenance SET compute_disabled_at = to_timestamp($2::float8 / 1000) WHERE id = $1', [id, atMs]);
}

/** The maintenance windows that overlap the reservation's bookings (why its hosts cannot serve it), by start. */
export async function windowsOverReservation(db: Queryable, reservationId: string): Promise<MaintenanceWindow[]> {
  const { rows } = await db.query<MaintenanceWindow>(
    `SELECT DISTINCT ${WINDOW_COLUMNS} FROM host_maintenance w JOIN hosts h ON h.id = w.host_id
     JOIN host_allocations a ON a.host_id = w.host_id AND a.reservation_id = $1 AND a.during && w.during
     ORDER BY start_ms, id LIMIT 50`,
    [reservationId],
  );
  return rows;
}
