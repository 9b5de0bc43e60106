/**
 * The leases table: one row per lease, the lease's JSON document with the columns that lists and
 * ordering need. The API reads it; only the lease's own workflow writes it (through its activities).
 * Also what the usage report and the usage policy read of it (leases over a span, deleted ones
 * included: they are charged for what they used), and the instance plugin's active reservations.
 */
import type { PoolClient } from 'pg';
import type { Lease, LeaseStatus } from '../domain/lease';
import type { Interval, MeteredLease } from '../domain/usage';
import { violatedUniqueConstraint, type Pool } from './pool';
import { CUT_END_COLUMN, CUT_END_JOIN } from './lease-preemptions';

type Queryable = Pool | PoolClient;

export interface LeaseFilter {
  /** Only this project's leases (non-admins always get their own project). */
  projectId?: string;
  status?: LeaseStatus;
  /** Only leases waiting for an admin's answer: PENDING_APPROVAL, or a change waiting (leases_awaiting_approval index). */
  awaitingApproval?: boolean;
  name?: string;
  /** Leases whose window overlaps [from, to]. */
  from?: number;
  to?: number;
  /** The id of the last lease of the previous page. */
  marker?: string;
  limit?: number;
}

/** Where a batch of the list ended: its last lease's (created_at, id), created_at as PostgreSQL's text (exact to the microsecond). */
interface LeaseListPosition {
  createdAt: string;
  id: string;
}

export async function findLease(pool: Pool, id: string): Promise<Lease | undefined> {
  const { rows } = await pool.query<{ document: Lease }>('SELECT document FROM leases WHERE id = $1 AND deleted_at IS NULL', [id]);
  return rows[0]?.document;
}

/** Whether the lease was deleted (its row stays, marked): an Idempotency-Key must not bring it back. */
export async function isLeaseDeleted(pool: Pool | PoolClient, id: string): Promise<boolean> {
  const { rowCount } = await pool.query('SELECT 1 FROM leases WHERE id = $1 AND deleted_at IS NOT NULL', [id]);
  return (rowCount ?? 0) > 0;
}

/**
 * Holds one lease id's admission until the transaction ends (concurrent retries with one
 * Idempotency-Key wait here for the first), then answers whether its row is recorded already (a
 * deleted one included: the key must not bring it back).
 */
export async function holdLeaseIdForAdmission(client: PoolClient, id: string): Promise<{ recorded: boolean }> {
  await client.query("SELECT pg_advisory_xact_lock(hashtextextended('lease-admission:' || $1, 0))", [id]);
  const { rowCount } = await client.query('SELECT 1 FROM leases WHERE id = $1', [id]);
  return { recorded: (rowCount ?? 0) > 0 };
}

/** How many leases (not deleted) have each status (for /metrics); a status no lease has is absent. */
export async function leaseCountsByStatus(pool: Pool): Promise<Map<string, number>> {
  const { rows } = await pool.query<{ status: string; count: string }>('SELECT status, count(*)::text AS count FROM leases WHERE deleted_at IS NULL GROUP BY status');
  return new Map(rows.map((r) => [r.status, Number(r.count)]));
}

/** Oldest first, paged by (created_at, id). Returns one lease more than `limit` when there are more. */
export async function listLeases(pool: Pool, filter: LeaseFilter): Promise<Lease[]> {
  const rows = await queryLeases(pool, filter, filter.limit === undefined ? undefined : filter.limit + 1);
  return rows.map((row) => row.document);
}

/**
 * Every lease the filter matches (its `limit` aside), oldest first, in batches of at most
 * `batchSize`. Each batch is one query resuming after the previous batch's last lease (keyset on
 * (created_at, id), served by the created_at indexes): memory holds one batch whatever the count,
 * and no connection is held between batches, so a slow reader ties up none of the pool. Like
 * paging by marker it is not one snapshot: leases created meanwhile come last.
 */
export async function* leaseBatches(pool: Pool, filter: Omit<LeaseFilter, 'limit'>, batchSize: number): AsyncGenerator<Lease[]> {
  let after: LeaseListPosition | undefined;
  // Ends: every batch starts strictly after the previous one, and a short batch is the last.
  for (;;) {
    const rows = await queryLeases(pool, after ? { ...filter, marker: undefined, after } : filter, batchSize);
    if (rows.length > 0) yield rows.map((row) => row.document);
    if (rows.length < batchSize) return;
    const last = rows[rows.length - 1];
    after = { createdAt: last.position_created_at, id: last.position_id };
  }
}

async function queryLeases(pool: Pool, filter: LeaseFilter & { after?: LeaseListPosition }, rowLimit: number | undefined) {
  const where = ['deleted_at IS NULL'];
  const params: unknown[] = [];
  const param = (value: unknown) => {
    params.push(value);
    return `$${params.length}`;
  };
  if (filter.projectId !== undefined) where.push(`project_id = ${param(filter.projectId)}`);
  if (filter.status !== undefined) where.push(`status = ${param(filter.status)}`);
  if (filter.name !== undefined) where.push(`name = ${param(filter.name)}`);
  // The same expression as the leases_awaiting_approval index.
  if (filter.awaitingApproval === true) where.push(`(status = 'PENDING_APPROVAL' OR document ? 'pendingChange')`);
  if (filter.awaitingApproval === false) where.push(`NOT (status = 'PENDING_APPROVAL' OR document ? 'pendingChange')`);
  if (filter.from !== undefined || filter.to !== undefined) {
    // The same expression as the leases_live_window index; a missing bound is open.
    const bound = (ms: number | undefined) => (ms === undefined ? 'NULL' : `to_timestamp(${param(ms)} / 1000.0)`);
    where.push(`tstzrange(start_at, end_at, '[]') && tstzrange(${bound(filter.from)}, ${bound(filter.to)}, '[]')`);
  }
  if (filter.marker !== undefined) {
    where.push(`(created_at, id) > (SELECT created_at, id FROM leases WHERE id = ${param(filter.marker)})`);
  }
  if (filter.after !== undefined) where.push(`(created_at, id) > (${param(filter.after.createdAt)}::timestamptz, ${param(filter.after.id)}::uuid)`);
  const limit = rowLimit !== undefined ? `LIMIT ${param(rowLimit)}` : '';
  // Aliases unlike the columns: ORDER BY a name would take the output column (text) over the table's.
  const { rows } = await pool.query<{ document: Lease; position_created_at: string; position_id: string }>(
    `SELECT document, created_at::text AS position_created_at, id::text AS position_id FROM leases WHERE ${where.join(' AND ')} ORDER BY created_at, id ${limit}`,
    params,
  );
  return rows;
}

/** What `saveLease` did: `stale` when the row already holds this version or a later one. */
export type SaveLeaseOutcome = 'saved' | 'stale' | 'deleted' | 'name-taken';

/** The keys of every resource the lease's reservations hold, each once, sorted. */
function resourceKeys(lease: Lease): string[] {
  return [...new Set(lease.reservations.flatMap((r) => r.resourceKeys ?? []))].sort();
}

/**
 * Writes the lease's row, unless it already holds this version or a later one (a retried or late
 * write of an older state changes nothing) or the lease was deleted. `name-taken`: another live
 * lease of the project has its name.
 */
export async function saveLease(pool: Pool | PoolClient, lease: Lease): Promise<SaveLeaseOutcome> {
  try {
    const { rowCount } = await pool.query(
      `INSERT INTO leases (id, name, project_id, user_id, status, start_at, end_at, version, resource_keys, document, created_at, updated_at, series_id)
       VALUES ($1, $2, $3, $4, $5, to_timestamp($6 / 1000.0), to_timestamp($7 / 1000.0), $8, $9, $10, to_timestamp($11 / 1000.0), to_timestamp($12 / 1000.0), $13)
       ON CONFLICT (id) DO UPDATE SET
         name = EXCLUDED.name, status = EXCLUDED.status, start_at = EXCLUDED.start_at, end_at = EXCLUDED.end_at,
         version = EXCLUDED.version, resource_keys = EXCLUDED.resource_keys, document = EXCLUDED.document, updated_at = EXCLUDED.updated_at
       WHERE leases.version < EXCLUDED.version AND leases.deleted_at IS NULL`,
      [lease.id, lease.name, lease.projectId, lease.userId, lease.status, lease.startMs, lease.endMs, lease.version, resourceKeys(lease), lease, lease.createdMs, lease.updatedMs, lease.seriesId ?? null],
    );
    if (rowCount !== 0) return 'saved';
    return (await isLeaseDeleted(pool, lease.id)) ? 'deleted' : 'stale';
  } catch (err) {
    if (violatedUniqueConstraint(err) === 'leases_live_name') return 'name-taken';
    throw err;
  }
}

/** The live occurrences of a series (leases.series_id), by start: at most LK_MAX_OCCURRENCES. */
export async function leasesOfSeries(db: Queryable, seriesId: string): Promise<Lease[]> {
  const { rows } = await db.query<{ document: Lease }>('SELECT document FROM leases WHERE series_id = $1 AND deleted_at IS NULL ORDER BY start_at, id', [seriesId]);
  return rows.map((r) => r.document);
}

/** Marks the lease's row deleted (it stays, so that its id is not reused); a second call changes nothing. */
export async function markLeaseDeleted(pool: Pool, lease: Pick<Lease, 'id' | 'version'>): Promise<void> {
  await pool.query(
    `UPDATE leases SET deleted_at = now(), status = 'DELETED', version = $2, updated_at = now()
     WHERE id = $1 AND deleted_at IS NULL`,
    [lease.id, lease.version],
  );
}

const ENDED: LeaseStatus[] = ['TERMINATED', 'ERROR'];

/**
 * Live leases other than `leaseId` that hold one of `keys`, or are among `alsoIds` (the preemptible
 * leases it cut, issue 43), and started before `startMs` (not ended): they must end before it starts;
 * but `exceptIds` (a borrower's lenders, issue 43: they hold the host around it).
 */
export async function findPredecessors(pool: Pool, input: { leaseId: string; keys: string[]; startMs: number; alsoIds?: string[]; exceptIds?: string[] }): Promise<string[]> {
  const { rows } = await pool.query<{ id: string }>(
    `SELECT id FROM leases
     WHERE deleted_at IS NULL AND id <> $1 AND (resource_keys && $2 OR id = ANY ($6::uuid[])) AND start_at < to_timestamp($3 / 1000.0)
       AND status <> ALL ($4) AND id <> ALL ($5::uuid[])`,
    [input.leaseId, input.keys, input.startMs, ENDED, input.exceptIds ?? [], input.alsoIds ?? []],
  );
  return rows.map((row) => row.id);
}

/**
 * Later leases on one of `keys` (starting after `startMs`) that wait for it: PENDING or STARTING
 * (`waitingOnly`: STARTING only, few, found by the status index).
 */
export async function findSuccessors(pool: Pool, input: { leaseId: string; keys: string[]; startMs: number; waitingOnly?: boolean }): Promise<string[]> {
  const { rows } = await pool.query<{ id: string }>(
    `SELECT id FROM leases
     WHERE deleted_at IS NULL AND id <> $1 AND resource_keys && $2 AND start_at > to_timestamp($3 / 1000.0)
       AND status = ANY ($4)`,
    [input.leaseId, input.keys, input.startMs, input.waitingOnly ? ['STARTING'] : ['PENDING', 'STARTING']],
  );
  return rows.map((row) => row.id);
}

/** Of these lease ids, those this deployment has (deleted ones too), with their status and whether deleted. */
export async function leaseStates(pool: Pool, ids: string[]): Promise<Map<string, { status: string; deleted: boolean; endMs: number }>> {
  if (ids.length === 0) return new Map();
  const { rows } = await pool.query<{ id: string; status: string; deleted: boolean; end_ms: number }>(
    'SELECT id::text, status, deleted_at IS NOT NULL AS deleted, (extract(epoch FROM end_at) * 1000)::float8 AS end_ms FROM leases WHERE id = ANY($1::uuid[])',
    [ids],
  );
  return new Map(rows.map((r) => [r.id, { status: r.status, deleted: r.deleted, endMs: r.end_ms }]));
}

/**
 * A lease's use can begin before its start (the provisioning lead time, at most a day) and end a
 * little after its end (the end's own work): the rows read reach this far either side of the span;
 * the report clips what it counts to the span exactly.
 */
const USE_BEYOND_WINDOW_MS = 2 * 86_400_000;

/** A metered lease's row: its document, its deletion, and its cut not yet applied (a preempted lease's). */
interface MeteredRow {
  document: Lease;
  deleted_ms: string | null;
  cut_end_ms: number | null;
}

/**
 * A lease as the usage report and policy count it: deleted ones with when (they are charged for
 * what they used until then), preempted ones with their cut (charged up to it).
 */
function meteredLease(row: MeteredRow): MeteredLease {
  return { lease: row.document, ...(row.deleted_ms !== null ? { deletedAtMs: Number(row.deleted_ms) } : {}), ...(row.cut_end_ms !== null ? { cutEndMs: row.cut_end_ms } : {}) };
}

/**
 * The leases (of every project, or one) that may have been booked or used within the span, deleted
 * ones included, a batch at a time in (project_id, id) order: a report over every lease holds one
 * batch in memory.
 */
export async function* meteredLeaseBatches(pool: Pool, filter: { projectId?: string; span: Interval }, batchSize = 500): AsyncGenerator<MeteredLease[]> {
  let after: { projectId: string; id: string } | undefined;
  for (;;) {
    const { rows } = await pool.query<MeteredRow & { id: string; project_id: string }>(
      `SELECT l.id::text, l.project_id, l.document, (extract(epoch FROM l.deleted_at) * 1000)::bigint::text AS deleted_ms, ${CUT_END_COLUMN} FROM leases l ${CUT_END_JOIN}
       WHERE ($1::text IS NULL OR l.project_id = $1)
         AND l.end_at > to_timestamp($2 / 1000.0) AND l.start_at < to_timestamp($3 / 1000.0)
         AND (l.deleted_at IS NULL OR l.deleted_at > to_timestamp($4 / 1000.0))
         AND ($5::text IS NULL OR (l.project_id, l.id) > ($5::text, $6::uuid))
       ORDER BY l.project_id, l.id
       LIMIT $7`,
      [filter.projectId ?? null, filter.span.startMs - USE_BEYOND_WINDOW_MS, filter.span.endMs + USE_BEYOND_WINDOW_MS, filter.span.startMs, after?.projectId ?? null, after?.id ?? null, batchSize],
    );
    if (rows.length === 0) return;
    yield rows.map(meteredLease);
    if (rows.length < batchSize) return;
    const last = rows[rows.length - 1];
    after = { projectId: last.project_id, id: last.id };
  }
}

/**
 * The project's leases other than `exceptLeaseId` whose window overlaps `span`: live ones, and
 * deleted ones deleted within it (they are charged for what they used); `limit`: the earliest that many.
 */
export async function projectLeasesWithin(db: Queryable, projectId: string, span: Interval, exceptLeaseId?: string, limit?: number): Promise<MeteredLease[]> {
  const { rows } = await db.query<MeteredRow>(
    `SELECT l.document, (extract(epoch FROM l.deleted_at) * 1000)::bigint::text AS deleted_ms, ${CUT_END_COLUMN} FROM leases l ${CUT_END_JOIN}
     WHERE l.project_id = $1 AND ($2::uuid IS NULL OR l.id <> $2::uuid)
       AND l.end_at > to_timestamp($3 / 1000.0) AND l.start_at < to_timestamp($4 / 1000.0)
       AND (l.deleted_at IS NULL OR l.deleted_at > to_timestamp($3 / 1000.0))
     ORDER BY l.start_at, l.id LIMIT $5`,
    [projectId, exceptLeaseId ?? null, span.startMs, span.endMs, limit ?? null],
  );
  return rows.map(meteredLease);
}

/**
 * The project's leases (other than `exceptLeaseId`) that hold something within the span: not
 * deleted, or deleted after they started (they count for what they used): stacking's read, the
 * earliest `limit` by start. A lease deleted before it started holds nothing and is not read.
 */
export async function projectLeasesHeldWithin(db: Queryable, projectId: string, span: Interval, exceptLeaseId: string, limit: number): Promise<MeteredLease[]> {
  const { rows } = await db.query<MeteredRow>(
    `SELECT l.document, (extract(epoch FROM l.deleted_at) * 1000)::bigint::text AS deleted_ms, ${CUT_END_COLUMN} FROM leases l ${CUT_END_JOIN}
     WHERE l.project_id = $1 AND l.id <> $2::uuid
       AND l.end_at > to_timestamp($3 / 1000.0) AND l.start_at < to_timestamp($4 / 1000.0)
       AND (l.deleted_at IS NULL OR (l.deleted_at > to_timestamp($3 / 1000.0) AND l.document->'events' @> '[{"event_type": "start_lease", "status": "DONE"}]'::jsonb))
     ORDER BY l.start_at, l.id LIMIT $5`,
    [projectId, exceptLeaseId, span.startMs, span.endMs, limit],
  );
  return rows.map(meteredLease);
}

/** The project's leases not deleted (other than `exceptLeaseId`) that begin after `afterMs` (lead_time's): the earliest `limit`, by start. */
export async function projectLeasesStartingAfter(db: Queryable, projectId: string, afterMs: number, exceptLeaseId: string, limit: number): Promise<MeteredLease[]> {
  const { rows } = await db.query<MeteredRow>(
    `SELECT l.document, NULL::text AS deleted_ms, ${CUT_END_COLUMN} FROM leases l ${CUT_END_JOIN}
     WHERE l.project_id = $1 AND l.id <> $2::uuid AND l.deleted_at IS NULL AND l.start_at > to_timestamp($3 / 1000.0)
     ORDER BY l.start_at, l.id LIMIT $4`,
    [projectId, exceptLeaseId, afterMs, limit],
  );
  return rows.map(meteredLease);
}

/**
 * The project's live leases not ended that end after `endMs` (an allocation end): the earliest
 * `limit`, by start. `exceptPreemptible`: not the preemptible ones (isPreemptibleLease's rule: some
 * reservations, each with `preemptible: true`), which the project's policy exempts from it.
 */
export async function projectLeasesEndingAfter(db: Queryable, projectId: string, endMs: number, limit: number, exceptPreemptible = false): Promise<Lease[]> {
  const { rows } = await db.query<{ document: Lease }>(
    `SELECT document FROM leases
     WHERE project_id = $1 AND deleted_at IS NULL AND status NOT IN ('TERMINATED', 'ERROR') AND end_at > to_timestamp($2 / 1000.0)
       AND NOT ($4 AND jsonb_array_length(document->'reservations') > 0
                AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(document->'reservations') r WHERE r->'params'->'preemptible' IS DISTINCT FROM 'true'::jsonb))
     ORDER BY start_at, id LIMIT $3`,
    [projectId, endMs, limit, exceptPreemptible],
  );
  return rows.map((r) => r.document);
}

/** How many of the project's leases (other than `exceptLeaseId`) are live and not ended. */
export async function liveLeaseCount(db: Queryable, projectId: string, exceptLeaseId: string): Promise<number> {
  const { rows } = await db.query<{ n: string }>(
    `SELECT count(*)::text AS n FROM leases WHERE project_id = $1 AND id <> $2::uuid AND deleted_at IS NULL AND status NOT IN ('TERMINATED', 'ERROR')`,
    [projectId, exceptLeaseId],
  );
  return Number(rows[0].n);
}

/** The reservations of `resourceType` whose leases are ACTIVE (not starting, changing or ending): those whose slots must be in Nova and Placement now. */
export async function activeReservationsOfType(db: Queryable, resourceType: string): Promise<Array<{ reservationId: string; leaseId: string; projectId: string }>> {
  const { rows } = await db.query<{ reservationId: string; leaseId: string; projectId: string }>(
    `SELECT r->>'id' AS "reservationId", l.id::text AS "leaseId", l.project_id AS "projectId"
     FROM leases l CROSS JOIN LATERAL jsonb_array_elements(l.document->'reservations') r
     WHERE l.status = 'ACTIVE' AND l.deleted_at IS NULL AND r->>'resource_type' = $1
     ORDER BY 1`,
    [resourceType],
  );
  return rows;
}
