/**
 * Blazar's database, read once for the migration: its URL (SQLAlchemy's `mysql+pymysql://…` or
 * plain `mysql://…`), and the rows of the tables the import needs, as the schema is at Blazar's
 * latest alembic revision, or at the head of Chameleon's fork (ChameleonCloud/blazar), whose host
 * and lease tables read the same and which adds network segments (`network_segments`,
 * `networksegment_extra_capabilities`, `network_reservations`, `network_allocations`, soft-deleted
 * rows left out). Read only: nothing here writes to Blazar.
 */
import mysql, { type RowDataPacket } from 'mysql2/promise';

/** The alembic head of Blazar 14.0.0 and later (computehost_resource_inventory and computehost_trait): the schema read here. */
export const BLAZAR_SCHEMA_REVISION = '553383923ca0';
/**
 * The alembic head of Chameleon's fork (branch chameleoncloud/2023.1: ee3b2513b59f renames its
 * extra_capabilities to resource_properties, as upstream's): its host and lease tables are read as
 * upstream's, and its network segment tables too.
 */
export const CHAMELEON_SCHEMA_REVISION = 'ee3b2513b59f';
const READABLE_REVISIONS: readonly string[] = [BLAZAR_SCHEMA_REVISION, CHAMELEON_SCHEMA_REVISION];

export class BlazarSourceError extends Error {
  override readonly name = 'BlazarSourceError';
}

export interface BlazarConnection {
  host?: string;
  port?: number;
  socketPath?: string;
  user: string;
  password?: string;
  database: string;
}

/**
 * Blazar's `[database] connection` URL as its config file holds it: `mysql+pymysql://user:pw@host:port/db`
 * (any `+driver`), or `mysql://…`; `?unix_socket=/path` for a socket, as pymysql takes it.
 */
export function parseBlazarUrl(text: string): BlazarConnection {
  if (text.length > 2048) throw new BlazarSourceError('--blazar-db: the URL is longer than 2048 characters');
  const match = /^(mysql|mariadb)(\+[a-z0-9_]+)?:\/\//i.exec(text);
  if (!match) throw new BlazarSourceError(`--blazar-db: expected mysql+pymysql://user:password@host:port/blazar or mysql://…, got ${JSON.stringify(text.slice(0, 80))}`);
  let url: URL;
  try {
    url = new URL(`mysql://${text.slice(match[0].length)}`);
  } catch {
    throw new BlazarSourceError('--blazar-db: not a valid URL');
  }
  const database = decodeURIComponent(url.pathname.replace(/^\//, ''));
  if (!/^[A-Za-z0-9_$-]{1,64}$/.test(database)) throw new BlazarSourceError('--blazar-db: the URL must name the database (…/blazar)');
  const socketPath = url.searchParams.get('unix_socket') ?? undefined;
  if (!url.hostname && !socketPath) throw new BlazarSourceError('--blazar-db: the URL must name a host (or ?unix_socket=)');
  const port = url.port ? Number(url.port) : undefined;
  return {
    ...(socketPath ? { socketPath } : { host: url.hostname, port: port ?? 3306 }),
    user: decodeURIComponent(url.username) || 'root',
    ...(url.password ? { password: decodeURIComponent(url.password) } : {}),
    database,
  };
}

/** The URL without its password, for what the import prints. */
export function describeConnection(c: BlazarConnection): string {
  return `mysql://${c.user}@${c.socketPath ? `[${c.socketPath}]` : `${c.host}:${c.port}`}/${c.database}`;
}

export interface BlazarLease {
  id: string;
  name: string;
  user_id: string | null;
  project_id: string | null;
  start_date: string;
  end_date: string;
  status: string | null;
  /** 1: Blazar's resource monitoring found a resource of the lease down. */
  degraded: number;
  created_at: string | null;
  updated_at: string | null;
}

export interface BlazarReservation {
  id: string;
  lease_id: string;
  resource_type: string | null;
  status: string | null;
  /** 1 or 0, as the flags below. */
  missing_resources: number;
  resources_changed: number;
}

export interface BlazarEvent {
  lease_id: string;
  event_type: string | null;
  time: string | null;
  status: string | null;
}

export interface BlazarHostReservation {
  reservation_id: string;
  resource_properties: string | null;
  count_range: string | null;
  hypervisor_properties: string | null;
  before_end: string | null;
}

export interface BlazarHost {
  id: string;
  vcpus: number;
  cpu_info: string;
  hypervisor_type: string;
  hypervisor_version: number;
  hypervisor_hostname: string | null;
  service_name: string | null;
  memory_mb: number;
  local_gb: number;
  availability_zone: string;
  /** 0: Blazar's resource monitoring took the host out of use. */
  reservable: number;
}

export interface BlazarCapability {
  computehost_id: string;
  property_name: string;
  /** 1: hidden from non-admins. */
  private: number;
  capability_value: string;
}

/** Chameleon's network segment tables (soft-deleted rows left out). */
export interface BlazarNetworkTables {
  segments: Array<{ id: string; network_type: string; physical_network: string | null; segment_id: string }>;
  capabilities: Array<{ network_id: string; property_name: string; capability_value: string }>;
  reservations: Array<{
    reservation_id: string;
    network_name: string | null;
    network_description: string | null;
    network_properties: string | null;
    resource_properties: string | null;
    /** Neutron's network, once Blazar started the reservation. */
    network_id: string | null;
  }>;
  /** Which segment (network_segments.id) each reservation holds. */
  allocations: Array<{ network_id: string; reservation_id: string }>;
}

export interface BlazarData {
  revision: string;
  /** Undefined: the schema has no network segment tables (upstream Blazar's has none). */
  networks?: BlazarNetworkTables;
  leases: BlazarLease[];
  reservations: BlazarReservation[];
  events: BlazarEvent[];
  hostReservations: BlazarHostReservation[];
  /** computehost_allocations: which host each reservation holds. */
  hostAllocations: Array<{ compute_host_id: string; reservation_id: string }>;
  hosts: BlazarHost[];
  capabilities: BlazarCapability[];
  /** instance_reservations, floatingip_reservations and floatingip_allocations: only to say what a lease that cannot be imported holds. */
  instanceReservations: Array<{ reservation_id: string; amount: number; vcpus: number; memory_mb: number; disk_gb: number }>;
  floatingIpReservations: Array<{ reservation_id: string; network_id: string; amount: number }>;
  floatingIpAllocations: Array<{ reservation_id: string; floating_ip_address: string }>;
}

/** How many rows of one table the import reads at most: a bound on memory, far above any Blazar's. */
const MAX_ROWS = 1_000_000;

/**
 * Reads every table the import needs, in one read-only transaction (one consistent snapshot while
 * Blazar keeps running). Dates come as Blazar stores them: naive UTC, `YYYY-MM-DD HH:MM:SS`.
 */
export async function readBlazar(connection: BlazarConnection): Promise<BlazarData> {
  let db: mysql.Connection;
  try {
    db = await mysql.createConnection({ ...connection, dateStrings: true, connectTimeout: 10_000, supportBigNumbers: true, bigNumberStrings: true });
  } catch (err) {
    throw new BlazarSourceError(`cannot connect to Blazar's database ${describeConnection(connection)}: ${err instanceof Error ? err.message : String(err)}`);
  }
  try {
    await db.query('SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ');
    await db.query('START TRANSACTION READ ONLY');
    const rows = async <T>(sql: string): Promise<T[]> => {
      const [result] = await db.query<RowDataPacket[]>(`${sql} LIMIT ${MAX_ROWS + 1}`);
      if (result.length > MAX_ROWS) throw new BlazarSourceError(`more than ${MAX_ROWS} rows in ${/FROM (\w+)/.exec(sql)?.[1]}: too many to import at once`);
      return result as T[];
    };
    const revision = await schemaRevision(db, connection);
    // Booleans as 0 or 1, whatever the column's type (TINYINT or BOOLEAN).
    const flag = (column: string) => `(${column} <> 0) AS ${column.replace(/^\w+\./, '')}`;
    const data: BlazarData = {
      revision,
      leases: await rows(`SELECT id, name, user_id, project_id, start_date, end_date, status, ${flag('degraded')}, created_at, updated_at FROM leases ORDER BY created_at, id`),
      reservations: await rows(`SELECT id, lease_id, resource_type, status, ${flag('missing_resources')}, ${flag('resources_changed')} FROM reservations ORDER BY created_at, id`),
      events: await rows('SELECT lease_id, event_type, time, status FROM events ORDER BY time, id'),
      hostReservations: await rows('SELECT reservation_id, resource_properties, count_range, hypervisor_properties, before_end FROM computehost_reservations ORDER BY id'),
      hostAllocations: await rows('SELECT compute_host_id, reservation_id FROM computehost_allocations ORDER BY reservation_id, compute_host_id'),
      hosts: await rows(
        `SELECT id, vcpus, cpu_info, hypervisor_type, hypervisor_version, hypervisor_hostname, service_name, memory_mb, local_gb, availability_zone, ${flag('reservable')}
         FROM computehosts ORDER BY created_at, id`,
      ),
      capabilities: await rows(
        `SELECT c.computehost_id, p.property_name, ${flag('p.private')}, c.capability_value
         FROM computehost_extra_capabilities c JOIN resource_properties p ON p.id = c.property_id ORDER BY c.computehost_id, p.property_name`,
      ),
      instanceReservations: await rows('SELECT reservation_id, amount, vcpus, memory_mb, disk_gb FROM instance_reservations ORDER BY id'),
      floatingIpReservations: await rows('SELECT reservation_id, network_id, amount FROM floatingip_reservations ORDER BY id'),
      floatingIpAllocations: await rows(
        'SELECT a.reservation_id, f.floating_ip_address FROM floatingip_allocations a JOIN floatingips f ON f.id = a.floatingip_id ORDER BY a.reservation_id, f.floating_ip_address',
      ),
    };
    if (await hasTable(db, 'network_segments')) {
      data.networks = {
        segments: await rows('SELECT id, network_type, physical_network, CAST(segment_id AS CHAR) AS segment_id FROM network_segments WHERE deleted IS NULL ORDER BY network_type, physical_network, segment_id'),
        capabilities: await rows(
          `SELECT c.network_id, p.property_name, c.capability_value
           FROM networksegment_extra_capabilities c JOIN resource_properties p ON p.id = c.property_id WHERE c.deleted IS NULL ORDER BY c.network_id, p.property_name`,
        ),
        reservations: await rows(
          'SELECT reservation_id, network_name, network_description, network_properties, resource_properties, network_id FROM network_reservations WHERE deleted IS NULL ORDER BY reservation_id',
        ),
        allocations: await rows('SELECT network_id, reservation_id FROM network_allocations WHERE deleted IS NULL ORDER BY reservation_id, network_id'),
      };
    }
    await db.query('COMMIT');
    return data;
  } catch (err) {
    if (err instanceof BlazarSourceError) throw err;
    throw new BlazarSourceError(`reading Blazar's database ${describeConnection(connection)} failed: ${err instanceof Error ? err.message : String(err)}`);
  } finally {
    await db.end().catch(() => undefined);
  }
}

/** Whether the schema has the table (Chameleon's network tables: upstream Blazar has none). */
async function hasTable(db: mysql.Connection, table: string): Promise<boolean> {
  const [rows] = await db.query<RowDataPacket[]>('SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?', [table]);
  return rows.length > 0;
}

/** The schema's alembic revision; any other than those read here is refused with what to do. */
async function schemaRevision(db: mysql.Connection, connection: BlazarConnection): Promise<string> {
  let revision: string | undefined;
  try {
    const [rows] = await db.query<RowDataPacket[]>('SELECT version_num FROM alembic_version');
    revision = rows.length === 1 ? String(rows[0].version_num) : undefined;
  } catch {
    revision = undefined;
  }
  if (revision === undefined || !READABLE_REVISIONS.includes(revision)) {
    throw new BlazarSourceError(
      `${describeConnection(connection)} is ${revision ? `at Blazar schema revision ${revision}` : 'not a Blazar database (no alembic_version)'}; ` +
        `the import reads revision ${BLAZAR_SCHEMA_REVISION} (Blazar 14.0.0 and later) or ${CHAMELEON_SCHEMA_REVISION} (Chameleon's fork): upgrade it first (blazar-db-manage upgrade head)`,
    );
  }
  return revision;
}
