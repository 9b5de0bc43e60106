/**
 * Projects' webhooks in PostgreSQL (016_webhooks.sql): the list a project sets as a whole, its
 * approvers' webhook (025_approvers_webhooks.sql: `audience` 'approvers', set by admins), the
 * targets of a notice, and how each webhook's deliveries went. Secrets are read only where a notice
 * is signed (webhookById); lists show whether one is set.
 */
import { randomUUID } from 'node:crypto';
import type { PoolClient } from 'pg';
import { refuseDuplicates, type Pool } from './pool';
import { inTransaction } from './transaction';

type Queryable = Pool | PoolClient;

export interface StoredWebhook {
  id: string;
  projectId: string;
  url: string;
  /** Lease event types it wants; null: all. */
  events: string[] | null;
  createdAt: Date;
  createdBy: string;
  deliveredCount: number;
  droppedCount: number;
  lastError: string | null;
  lastErrorAt: Date | null;
}

export interface WebhookWithSecret extends StoredWebhook {
  secret: string;
  /** `project`: one of the members' webhooks; `approvers`: the project's approvers' webhook, set by admins. */
  audience: 'project' | 'approvers';
}

/** One entry of a project's new list. */
export interface WebhookRow {
  url: string;
  events: string[] | null;
  /** Given by the caller: replaces the secret. */
  secret?: string;
  /** The secret when the entry is new (or its URL changed) and none was given: the caller made it, and shows it once. */
  generatedSecret: string;
}

const COLUMNS = `id, project_id, url, events, created_at, created_by, delivered_count::text, dropped_count::text, last_error, last_error_at`;

interface Row {
  id: string;
  project_id: string;
  url: string;
  events: string[] | null;
  created_at: Date;
  created_by: string;
  delivered_count: string;
  dropped_count: string;
  last_error: string | null;
  last_error_at: Date | null;
  secret?: string;
}

function fromRow(row: Row): StoredWebhook {
  return {
    id: row.id,
    projectId: row.project_id,
    url: row.url,
    events: row.events,
    createdAt: row.created_at,
    createdBy: row.created_by,
    deliveredCount: Number(row.delivered_count),
    droppedCount: Number(row.dropped_count),
    lastError: row.last_error,
    lastErrorAt: row.last_error_at,
  };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export async function listWebhooks(db: Queryable, projectId: string): Promise<StoredWebhook[]> {
  const { rows } = await db.query<Row>(`SELECT ${COLUMNS} FROM project_webhooks WHERE project_id = $1 AND audience = 'project' ORDER BY position`, [projectId]);
  return rows.map(fromRow);
}

/**
 * Replaces the project's list with `rows`, in one transaction (one PUT at a time per project): an
 * entry whose URL was listed before keeps its id, counters and (unless one is given) its secret;
 * the others are new. Returns the new list, saying which entries got their generated secret.
 */
export async function replaceWebhooks(pool: Pool, projectId: string, rows: WebhookRow[], userId: string): Promise<Array<StoredWebhook & { secretGenerated: boolean }>> {
  // The project's lock serialises its PUTs; the constraint stays the last word should anything write around it.
  const duplicates = { project_webhooks_project_id_audience_url_key: `project ${projectId}'s webhooks were changed meanwhile to list one of these URLs: read them and try again` };
  return refuseDuplicates(() => inTransaction(pool, async (client) => {
    await client.query("SELECT pg_advisory_xact_lock(hashtext('leasekeeper:webhooks'), hashtext($1))", [projectId]);
    const { rows: before } = await client.query<{ id: string; url: string }>("SELECT id, url FROM project_webhooks WHERE project_id = $1 AND audience = 'project'", [projectId]);
    const kept = new Map(before.map((row) => [row.url, row.id]));
    const listed = new Set(rows.map((row) => row.url));
    const gone = before.filter((row) => !listed.has(row.url)).map((row) => row.id);
    if (gone.length > 0) await client.query('DELETE FROM project_webhooks WHERE id = ANY($1::uuid[])', [gone]);
    const generated = new Set<string>();
    for (const [position, row] of rows.entries()) {
      const id = kept.get(row.url);
      if (id) {
        await client.query('UPDATE project_webhooks SET position = $2, events = $3, secret = coalesce($4, secret) WHERE id = $1', [id, position, row.events, row.secret ?? null]);
        continue;
      }
      const newId = randomUUID();
      if (row.secret === undefined) generated.add(newId);
      await client.query('INSERT INTO project_webhooks (id, project_id, position, url, secret, events, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7)', [
        newId,
        projectId,
        position,
        row.url,
        row.secret ?? row.generatedSecret,
        row.events,
        userId,
      ]);
    }
    const { rows: after } = await client.query<Row>(`SELECT ${COLUMNS} FROM project_webhooks WHERE project_id = $1 AND audience = 'project' ORDER BY position`, [projectId]);
    return after.map((row) => ({ ...fromRow(row), secretGenerated: generated.has(row.id) }));
  }), duplicates);
}

/** The project's approvers' webhook, if admins set one. */
export async function approversWebhookOf(db: Queryable, projectId: string): Promise<StoredWebhook | undefined> {
  const { rows } = await db.query<Row>(`SELECT ${COLUMNS} FROM project_webhooks WHERE project_id = $1 AND audience = 'approvers'`, [projectId]);
  return rows[0] && fromRow(rows[0]);
}

/**
 * Sets the project's approvers' webhook (it hears `events`): the same URL keeps its id, counters
 * and (unless one is given) its secret; another URL replaces it, with `row.secret` or the generated one.
 */
export async function setApproversWebhook(pool: Pool, projectId: string, row: Omit<WebhookRow, 'events'> & { events: string[] }, userId: string): Promise<StoredWebhook & { secretGenerated: boolean }> {
  return inTransaction(pool, async (client) => {
    await client.query("SELECT pg_advisory_xact_lock(hashtext('leasekeeper:approvers-webhook'), hashtext($1))", [projectId]);
    const { rows: before } = await client.query<{ id: string; url: string }>("SELECT id, url FROM project_webhooks WHERE project_id = $1 AND audience = 'approvers'", [projectId]);
    const kept = before.find((found) => found.url === row.url);
    let id = kept?.id;
    if (id) {
      await client.query('UPDATE project_webhooks SET events = $2, secret = coalesce($3, secret) WHERE id = $1', [id, row.events, row.secret ?? null]);
    } else {
      if (before.length) await client.query('DELETE FROM project_webhooks WHERE id = ANY($1::uuid[])', [before.map((found) => found.id)]);
      id = randomUUID();
      await client.query("INSERT INTO project_webhooks (id, project_id, position, url, secret, events, created_by, audience) VALUES ($1, $2, 0, $3, $4, $5, $6, 'approvers')", [id, projectId, row.url, row.secret ?? row.generatedSecret, row.events, userId]);
    }
    const { rows } = await client.query<Row>(`SELECT ${COLUMNS} FROM project_webhooks WHERE id = $1`, [id]);
    return { ...fromRow(rows[0]), secretGenerated: !kept && row.secret === undefined };
  });
}

/** Removes the project's approvers' webhook; false when it had none. */
export async function deleteApproversWebhook(db: Queryable, projectId: string): Promise<boolean> {
  const { rowCount } = await db.query("DELETE FROM project_webhooks WHERE project_id = $1 AND audience = 'approvers'", [projectId]);
  return (rowCount ?? 0) > 0;
}

/** One webhook with its secret (to sign a delivery), or undefined when there is none (removed meanwhile). */
export async function webhookById(db: Queryable, id: string): Promise<WebhookWithSecret | undefined> {
  if (!UUID.test(id)) return undefined;
  const { rows } = await db.query<Row & { audience: 'project' | 'approvers' }>(`SELECT ${COLUMNS}, secret, audience FROM project_webhooks WHERE id = $1`, [id]);
  return rows[0] ? { ...fromRow(rows[0]), secret: rows[0].secret!, audience: rows[0].audience } : undefined;
}

/** A delivery's outcome, counted on its webhook: delivered, or dropped (refused, or given up on) with why. */
export async function countDelivery(db: Queryable, id: string, outcome: 'delivered' | { dropped: string }): Promise<void> {
  if (!UUID.test(id)) return;
  if (outcome === 'delivered') {
    // An answer closes its breaker.
    await db.query('UPDATE project_webhooks SET delivered_count = delivered_count + 1, failures_in_row = 0, held_until = NULL WHERE id = $1', [id]);
    return;
  }
  await db.query('UPDATE project_webhooks SET dropped_count = dropped_count + 1, last_error = left($2, 1024), last_error_at = now() WHERE id = $1', [id, outcome.dropped]);
}

/** Whether a webhook's delivery may go now: `open` (breaker closed), `probe` (this one is the probe after a hold), or held for `heldForMs` more. */
export type WebhookGate = { state: 'open' | 'probe' } | { state: 'held'; heldForMs: number };

/**
 * Asks a webhook's breaker for a delivery: held while `held_until` is ahead; once it has passed
 * (and `failures` failed in a row), the first caller becomes the probe and holds the others back
 * for `probeMs` (the probe's longest run) by moving `held_until` on. Times are the database's.
 */
export async function claimWebhookDelivery(db: Queryable, id: string, failures: number, probeMs: number): Promise<WebhookGate> {
  if (!UUID.test(id)) return { state: 'open' };
  const { rows } = await db.query<{ probing: boolean; held_ms: number | null }>(
    `WITH probe AS (
       UPDATE project_webhooks SET held_until = now() + $3 * interval '1 millisecond'
        WHERE id = $1 AND failures_in_row >= $2 AND (held_until IS NULL OR held_until <= now()) RETURNING id)
     SELECT EXISTS (SELECT 1 FROM probe) AS probing,
            (SELECT ceil(extract(epoch FROM held_until - now()) * 1000)::float8 FROM project_webhooks WHERE id = $1 AND failures_in_row >= $2 AND held_until > now()) AS held_ms`,
    [id, failures, probeMs],
  );
  if (rows[0]?.probing) return { state: 'probe' };
  const heldMs = rows[0]?.held_ms;
  return heldMs === null || heldMs === undefined ? { state: 'open' } : { state: 'held', heldForMs: Math.max(1, heldMs) };
}

/**
 * A delivery the webhook left unanswered: one more in a row. From the `failures`-th on, it is held
 * back for `cooldownMs`, doubled by each further failure (a failed probe), at most `maxCooldownMs`;
 * last_error then says so. A delivery that began before the hold and failed after it began (not
 * the probe) changes nothing: it would lengthen the hold for a failure already counted in kind.
 * Returns until when it is held, if it is.
 */
export async function countWebhookFailure(db: Queryable, id: string, reason: string, breaker: { failures: number; cooldownMs: number; maxCooldownMs: number; probe: boolean }): Promise<Date | undefined> {
  if (!UUID.test(id)) return undefined;
  const { rows } = await db.query<{ failures_in_row: number; held_until: Date | null }>(
    `UPDATE project_webhooks SET failures_in_row = failures_in_row + 1,
            held_until = CASE WHEN failures_in_row + 1 >= $2 THEN now() + least($4::float8, $3::float8 * power(2, least(failures_in_row + 1 - $2, 20))) * interval '1 millisecond' ELSE held_until END
      WHERE id = $1 AND ($5 OR held_until IS NULL OR held_until <= now()) RETURNING failures_in_row, held_until`,
    [id, breaker.failures, breaker.cooldownMs, breaker.maxCooldownMs, breaker.probe],
  );
  const row = rows[0];
  if (!row || row.failures_in_row < breaker.failures || !row.held_until) return undefined;
  const message = `held back until ${row.held_until.toISOString()} (then probed once): ${row.failures_in_row} deliveries in a row got no answer; the last: ${reason}`;
  await db.query('UPDATE project_webhooks SET last_error = left($2, 1024), last_error_at = now() WHERE id = $1', [id, message]);
  return row.held_until;
}

/** The ids of the project's webhooks that want this event type, in the list's order; none without a project (host events). */
export async function webhookTargets(db: Queryable, projectId: string | undefined, eventType: string): Promise<string[]> {
  if (projectId === undefined) return [];
  const { rows } = await db.query<{ id: string }>('SELECT id FROM project_webhooks WHERE project_id = $1 AND (events IS NULL OR $2 = ANY(events)) ORDER BY position', [projectId, eventType]);
  return rows.map((row) => row.id);
}
