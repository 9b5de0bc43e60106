/**
 * Hosts' power settings and what is known of their power (host_power, migration 041): the one
 * store of that table. The password leaves it only in `HostPowerRecord.settings`, for the driver.
 */
import type { PoolClient } from 'pg';
import type { HostPowerSettings, PowerState } from '../domain/host-power';
import type { Pool } from './pool';

type Queryable = Pool | PoolClient;

export interface HostPowerRecord {
  hostId: string;
  settings: HostPowerSettings;
  powerState: PowerState;
  powerStateAtMs: number | null;
  poweredOffSinceMs: number | null;
  /** When it was last woken (brought to on from another state): its boot's start; null when off. */
  wokenAtMs: number | null;
  /** Since when a power-off is under way (claimPowerOff); null: none. */
  poweringOffAtMs: number | null;
  /** The last wake asked of its driver and by when its compute service must be up; null once it was seen up (or the host is off). */
  wake: { requestedAtMs: number; bootDeadlineMs: number } | null;
  /** The driver's last failure, unless a call succeeded since (or the settings changed). */
  error: { message: string; atMs: number; count: number; retryAtMs: number | null } | null;
}

interface Row {
  host_id: string;
  driver: HostPowerSettings['driver'];
  address: string | null;
  port: number | null;
  username: string | null;
  password: string | null;
  node: string | null;
  manage: boolean;
  boot_seconds: number | null;
  power_state: PowerState;
  power_state_at_ms: number | null;
  powered_off_since_ms: number | null;
  woken_at_ms: number | null;
  powering_off_at_ms: number | null;
  wake_requested_at_ms: number | null;
  boot_deadline_at_ms: number | null;
  power_error: string | null;
  power_error_at_ms: number | null;
  power_error_count: number;
  power_retry_at_ms: number | null;
}

const ms = (column: string) => `(extract(epoch FROM ${column}) * 1000)::float8 AS ${column}_ms`;
const COLUMNS = `host_id::text, driver, address, port, username, password, node, manage, boot_seconds, power_state, power_error, power_error_count,
  ${['power_state_at', 'powered_off_since', 'woken_at', 'powering_off_at', 'wake_requested_at', 'boot_deadline_at', 'power_error_at', 'power_retry_at'].map(ms).join(', ')}`;

function fromRow(row: Row): HostPowerRecord {
  return {
    hostId: row.host_id,
    settings: {
      driver: row.driver,
      address: row.address,
      port: row.port,
      username: row.username,
      password: row.password,
      node: row.node,
      manage: row.manage,
      bootSeconds: row.boot_seconds,
    },
    powerState: row.power_state,
    powerStateAtMs: row.power_state_at_ms,
    poweredOffSinceMs: row.powered_off_since_ms,
    wokenAtMs: row.woken_at_ms,
    poweringOffAtMs: row.powering_off_at_ms,
    wake: row.wake_requested_at_ms === null || row.boot_deadline_at_ms === null ? null : { requestedAtMs: row.wake_requested_at_ms, bootDeadlineMs: row.boot_deadline_at_ms },
    error: row.power_error === null || row.power_error_at_ms === null ? null : { message: row.power_error, atMs: row.power_error_at_ms, count: row.power_error_count, retryAtMs: row.power_retry_at_ms },
  };
}

/** The host's power settings and state; undefined when it has none (the `none` driver). */
export async function hostPowerOf(db: Queryable, hostId: string): Promise<HostPowerRecord | undefined> {
  const { rows } = await db.query<Row>(`SELECT ${COLUMNS} FROM host_power WHERE host_id = $1`, [hostId]);
  return rows[0] ? fromRow(rows[0]) : undefined;
}

/** Every host's power settings and state, by host id (the os-hosts list, the planner). */
export async function allHostPower(db: Queryable): Promise<Map<string, HostPowerRecord>> {
  const { rows } = await db.query<Row>(`SELECT ${COLUMNS} FROM host_power ORDER BY host_id`);
  return new Map(rows.map((row) => [row.host_id, fromRow(row)]));
}

/** Stores the host's settings whole (the caller merged them with the old ones); what is known of its power stays, its driver's last error goes (new settings are tried afresh). */
export async function saveHostPowerSettings(db: Queryable, hostId: string, settings: HostPowerSettings): Promise<void> {
  await db.query(
    `INSERT INTO host_power (host_id, driver, address, port, username, password, node, manage, boot_seconds)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     ON CONFLICT (host_id) DO UPDATE SET driver = EXCLUDED.driver, address = EXCLUDED.address, port = EXCLUDED.port, username = EXCLUDED.username,
       password = EXCLUDED.password, node = EXCLUDED.node, manage = EXCLUDED.manage, boot_seconds = EXCLUDED.boot_seconds, updated_at = now(),
       power_error = NULL, power_error_at = NULL, power_error_count = 0, power_retry_at = NULL`,
    [hostId, settings.driver, settings.address, settings.port, settings.username, settings.password, settings.node, settings.manage, settings.bootSeconds],
  );
}

/** The SET list recording `power_state` = $2 at $3 (ms): powered_off_since and off_ms_total and woken_at follow it. */
const RECORD_STATE = `power_state = $2, power_state_at = to_timestamp($3::float8 / 1000),
       off_ms_total = off_ms_total + CASE WHEN $2 <> 'off' AND power_state = 'off' AND powered_off_since IS NOT NULL
         THEN greatest(0, round(extract(epoch FROM to_timestamp($3::float8 / 1000) - powered_off_since) * 1000))::bigint ELSE 0 END,
       powered_off_since = CASE WHEN $2 <> 'off' THEN NULL WHEN power_state = 'off' THEN powered_off_since ELSE to_timestamp($3::float8 / 1000) END,
       woken_at = CASE WHEN $2 = 'off' THEN NULL WHEN $2 = 'on' AND power_state <> 'on' THEN to_timestamp($3::float8 / 1000) ELSE woken_at END,
       power_error = NULL, power_error_at = NULL, power_error_count = 0, power_retry_at = NULL`;

/**
 * Records the host's power as brought about at `atMs` (its driver's change succeeded).
 * `powered_off_since` keeps its first instant while the host stays off (a repeated record is no new
 * sleep), and clears once it is not (the period ended is added to `off_ms_total`); `woken_at` is
 * set when the host comes to on from another state, and cleared when it is off. A power-off under
 * way is over; the driver's last error is cleared; off ends the wake awaited.
 */
export async function recordPowerState(db: Queryable, hostId: string, state: PowerState, atMs: number): Promise<void> {
  await db.query(
    `UPDATE host_power SET ${RECORD_STATE}, powering_off_at = NULL,
       wake_requested_at = CASE WHEN $2 = 'off' THEN NULL ELSE wake_requested_at END, boot_deadline_at = CASE WHEN $2 = 'off' THEN NULL ELSE boot_deadline_at END
     WHERE host_id = $1`,
    [hostId, state, atMs],
  );
}

/**
 * Records the host's power as its driver read it (a host whose state was unknown, or whose
 * power-off was left unfinished): as recordPowerState, but a wake awaited stays awaited (a BMC that
 * says off after a wake is what the monitor's deadline is for).
 */
export async function recordReadPowerState(db: Queryable, hostId: string, state: PowerState, atMs: number): Promise<void> {
  await db.query(`UPDATE host_power SET ${RECORD_STATE}, powering_off_at = NULL WHERE host_id = $1`, [hostId, state, atMs]);
}

/** Records a wake asked of the host's driver at `atMs`: on (its boot starts), its compute service due up by `bootDeadlineMs`. */
export async function recordWake(db: Queryable, hostId: string, atMs: number, bootDeadlineMs: number): Promise<void> {
  await db.query(
    `UPDATE host_power SET ${RECORD_STATE}, powering_off_at = NULL,
       wake_requested_at = to_timestamp($3::float8 / 1000), boot_deadline_at = to_timestamp($4::float8 / 1000)
     WHERE host_id = $1`,
    [hostId, 'on', atMs, bootDeadlineMs],
  );
}

/** The wake awaited is over: Nova reported the host's compute service up. */
export async function recordWakeSettled(db: Queryable, hostId: string): Promise<void> {
  await db.query('UPDATE host_power SET wake_requested_at = NULL, boot_deadline_at = NULL WHERE host_id = $1', [hostId]);
}

/**
 * Claims the host for a power-off (`powering_off_at`), in the caller's transaction: the caller holds
 * the host's row against new bookings (lockHostAgainstBookings) and found it free.
 */
export async function claimPowerOff(client: PoolClient, hostId: string, atMs: number): Promise<void> {
  await client.query('UPDATE host_power SET powering_off_at = to_timestamp($2::float8 / 1000) WHERE host_id = $1', [hostId, atMs]);
}

/** The power-off claimed did not happen (kept on, or its driver failed): the host is on as before. */
export async function releasePowerOff(db: Queryable, hostId: string): Promise<void> {
  await db.query('UPDATE host_power SET powering_off_at = NULL WHERE host_id = $1', [hostId]);
}

/**
 * Records a failure of the host's driver at `atMs`. `backoff` (a failure no retry changes): the
 * planner tries again only after base × 2^(failures in a row − 1), at most `capMs`; none: at its next look.
 */
export async function recordPowerError(db: Queryable, hostId: string, message: string, atMs: number, backoff?: { baseMs: number; capMs: number }): Promise<void> {
  await db.query(
    `UPDATE host_power SET power_error = left($2, 1024), power_error_at = to_timestamp($3::float8 / 1000), power_error_count = power_error_count + 1,
       power_retry_at = CASE WHEN $4::float8 IS NULL THEN NULL
         ELSE to_timestamp(($3::float8 + least($5::float8, $4::float8 * power(2, least(power_error_count, 30)))) / 1000) END
     WHERE host_id = $1`,
    [hostId, message, atMs, backoff?.baseMs ?? null, backoff?.capMs ?? null],
  );
}

/** The hosts (of `hostIds`, all when undefined) with a wake awaited (their compute service not yet seen up), by host id. */
export async function awaitedWakes(db: Queryable, hostIds?: readonly string[]): Promise<Array<{ hostId: string; requestedAtMs: number; bootDeadlineMs: number }>> {
  const { rows } = await db.query<{ host_id: string; requested_ms: number; deadline_ms: number }>(
    `SELECT host_id::text, (extract(epoch FROM wake_requested_at) * 1000)::float8 AS requested_ms, (extract(epoch FROM boot_deadline_at) * 1000)::float8 AS deadline_ms
     FROM host_power WHERE wake_requested_at IS NOT NULL AND ($1::bigint[] IS NULL OR host_id = ANY($1::bigint[])) ORDER BY host_id`,
    [hostIds ?? null],
  );
  return rows.map((row) => ({ hostId: row.host_id, requestedAtMs: row.requested_ms, bootDeadlineMs: row.deadline_ms }));
}

/** The hosts with a power driver recorded on and no power-off under way (those whose compute service the planner may enable again). */
export async function awakeHostIds(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ host_id: string }>(`SELECT host_id::text FROM host_power WHERE driver <> 'none' AND power_state = 'on' AND powering_off_at IS NULL ORDER BY host_id`);
  return rows.map((row) => row.host_id);
}

/** The hosts with a power driver that are not known to be on (off, unknown, or a power-off under way): the host calendar chooses them last. */
export async function sleepingHostIds(db: Queryable): Promise<Set<string>> {
  const { rows } = await db.query<{ host_id: string }>(`SELECT host_id::text FROM host_power WHERE driver <> 'none' AND (power_state <> 'on' OR powering_off_at IS NOT NULL)`);
  return new Set(rows.map((row) => row.host_id));
}

/** Hosts off now, and the hours every host has been powered off in all (ended periods and the current ones up to `nowMs`): /metrics. */
export async function poweredOffTotals(db: Queryable, nowMs: number): Promise<{ hostsOff: number; offHours: number }> {
  const { rows } = await db.query<{ hosts_off: number; off_ms: number }>(
    `SELECT count(*) FILTER (WHERE power_state = 'off')::int AS hosts_off,
       COALESCE(sum(off_ms_total + CASE WHEN power_state = 'off' AND powered_off_since IS NOT NULL
         THEN greatest(0, extract(epoch FROM to_timestamp($1::float8 / 1000) - powered_off_since) * 1000) ELSE 0 END), 0)::float8 AS off_ms
     FROM host_power`,
    [nowMs],
  );
  return { hostsOff: rows[0].hosts_off, offHours: rows[0].off_ms / 3_600_000 };
}
