/**
 * What the usage report reads: the leases (of every project, or one) that may have been booked or
 * used within a span, deleted ones included (they are charged for what they used), a batch at a
 * time in (project_id, id) order, so that a report over every lease holds one batch in memory.
 */
import type { Lease } from '../domain/lease';
import type { Interval, MeteredLease } from '../domain/usage';
import type { Pool } from './pool';

/**
 * A lease's use can begin before its start (the provisioning lead time, at most a day) and end a
 * little after its end (the end's own work): the rows read reach this far either side of the span;
 * the report clips what it counts to the span exactly.
 */
const USE_BEYOND_WINDOW_MS = 2 * 86_400_000;

export async function* meteredLeaseBatches(pool: Pool, filter: { projectId?: string; span: Interval }, batchSize = 500): AsyncGenerator<MeteredLease[]> {
  let after: { projectId: string; id: string } | undefined;
  for (;;) {
    const { rows } = await pool.query<{ id: string; project_id: string; document: Lease; deleted_ms: string | null }>(
      `SELECT id::text, project_id, document, (extract(epoch FROM deleted_at) * 1000)::bigint::text AS deleted_ms FROM leases
       WHERE ($1::text IS NULL OR project_id = $1)
         AND end_at > to_timestamp($2 / 1000.0) AND start_at < to_timestamp($3 / 1000.0)
         AND (deleted_at IS NULL OR deleted_at > to_timestamp($4 / 1000.0))
         AND ($5::text IS NULL OR (project_id, id) > ($5::text, $6::uuid))
       ORDER BY project_id, id
       LIMIT $7`,
      [filter.projectId ?? null, filter.span.startMs - USE_BEYOND_WINDOW_MS, filter.span.endMs + USE_BEYOND_WINDOW_MS, filter.span.startMs, after?.projectId ?? null, after?.id ?? null, batchSize],
    );
    if (rows.length === 0) return;
    yield rows.map((row) => ({ lease: row.document, ...(row.deleted_ms !== null ? { deletedAtMs: Number(row.deleted_ms) } : {}) }));
    if (rows.length < batchSize) return;
    const last = rows[rows.length - 1];
    after = { projectId: last.project_id, id: last.id };
  }
}
