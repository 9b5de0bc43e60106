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
}

const COLUMNS = `host_id::text, driver, address, port, username, password, node, manage, boot_seconds, power_state,
  (extract(epoch FROM power_state_at) * 1000)::float8 AS power_state_at_ms, (extract(epoch FROM powered_off_since) * 1000)::float8 AS powered_off_since_ms,
  (extract(epoch FROM woken_at) * 1000)::float8 AS woken_at_ms`;

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

/** Stores the host's settings whole (the caller merged them with the old ones); what is known of its power stays. */
export async function saveHostPowerSettings(db: Queryable, hostId: string, settings: HostPowerSettings): Promise<void> {
  await db.query(
    `INSERT INTO host_power (host_id, driver, address, port, username, password, node, manage, boot_seconds)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     ON CONFLICT (host_id) DO UPDATE SET driver = EXCLUDED.driver, address = EXCLUDED.address, port = EXCLUDED.port, username = EXCLUDED.username,
       password = EXCLUDED.password, node = EXCLUDED.node, manage = EXCLUDED.manage, boot_seconds = EXCLUDED.boot_seconds, updated_at = now()`,
    [hostId, settings.driver, settings.address, settings.port, settings.username, settings.password, settings.node, settings.manage, settings.bootSeconds],
  );
}

/**
 * Records the host's power as read or brought about at `atMs`. `powered_off_since` keeps its first
 * instant while the host stays off (a repeated record is no new sleep), and clears once it is not
 * (the period ended is added to `off_ms_total`);
 * `woken_at` is set when the host comes to on from another state, and cleared when it is off.
 */
export async function recordPowerState(db: Queryable, hostId: string, state: PowerState, atMs: number): Promise<void> {
  await db.query(
    `UPDATE host_power SET power_state = $2, power_state_at = to_timestamp($3::float8 / 1000),
       off_ms_total = off_ms_total + CASE WHEN $2 <> 'off' AND power_state = 'off' AND powered_off_since IS NOT NULL
         THEN greatest(0, round(extract(epoch FROM to_timestamp($3::float8 / 1000) - powered_off_since) * 1000))::bigint ELSE 0 END,
       powered_off_since = CASE WHEN $2 <> 'off' THEN NULL WHEN power_state = 'off' THEN powered_off_since ELSE to_timestamp($3::float8 / 1000) END,
       woken_at = CASE WHEN $2 = 'off' THEN NULL WHEN $2 = 'on' AND power_state <> 'on' THEN to_timestamp($3::float8 / 1000) ELSE woken_at END
     WHERE host_id = $1`,
    [hostId, state, atMs],
  );
}

/** The hosts with a power driver that are not known to be on (off, or unknown): the host calendar chooses them last. */
export async function sleepingHostIds(db: Queryable): Promise<Set<string>> {
  const { rows } = await db.query<{ host_id: string }>(`SELECT host_id::text FROM host_power WHERE driver <> 'none' AND power_state <> 'on'`);
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
