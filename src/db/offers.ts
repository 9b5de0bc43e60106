/**
 * Offers (019_offers.sql): each stands for a lease body its project could book, until it expires.
 * Written when offers are made (POST /v1/offers, a refusal's offers); a hold or an accept finds one
 * by id. Expired rows go by a bounded delete each time offers are written: no sweep of its own.
 */
import type { PoolClient } from 'pg';
import type { Pool } from './pool';

type Queryable = Pool | PoolClient;

export interface OfferRow {
  id: string;
  projectId: string;
  kind: string;
  startMs: number;
  endMs: number;
  /** The lease-create body the offer stands for (name left to whoever accepts it). */
  leaseBody: Record<string, unknown>;
  expiresAtMs: number;
}

/** Expired rows removed per write of offers: a write never waits on a large backlog, which the next writes finish. */
export const EXPIRED_OFFERS_PER_WRITE = 500;

/** Records the offers in one statement, then removes up to EXPIRED_OFFERS_PER_WRITE expired ones (any project's). */
export async function saveOffers(db: Queryable, offers: OfferRow[], nowMs: number): Promise<void> {
  if (offers.length > 0) {
    await db.query(
      `INSERT INTO offers (id, project_id, kind, start_ms, end_ms, lease_body, expires_at)
       SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::jsonb[], $7::timestamptz[])`,
      [
        offers.map((o) => o.id),
        offers.map((o) => o.projectId),
        offers.map((o) => o.kind),
        offers.map((o) => o.startMs),
        offers.map((o) => o.endMs),
        offers.map((o) => JSON.stringify(o.leaseBody)),
        offers.map((o) => new Date(o.expiresAtMs).toISOString()),
      ],
    );
  }
  await db.query('DELETE FROM offers WHERE id IN (SELECT id FROM offers WHERE expires_at < $1 LIMIT $2)', [new Date(nowMs).toISOString(), EXPIRED_OFFERS_PER_WRITE]);
}

/** An offer of the project's that has not expired (another project's offers do not exist for it). */
export async function findOffer(db: Queryable, id: string, projectId: string, nowMs: number): Promise<OfferRow | undefined> {
  const { rows } = await db.query<{ id: string; project_id: string; kind: string; start_ms: string; end_ms: string; lease_body: Record<string, unknown>; expires_at: Date }>(
    'SELECT id, project_id, kind, start_ms, end_ms, lease_body, expires_at FROM offers WHERE id = $1 AND project_id = $2 AND expires_at >= $3',
    [id, projectId, new Date(nowMs).toISOString()],
  );
  const row = rows[0];
  return row && { id: row.id, projectId: row.project_id, kind: row.kind, startMs: Number(row.start_ms), endMs: Number(row.end_ms), leaseBody: row.lease_body, expiresAtMs: row.expires_at.getTime() };
}

/** Keeps an offer findable until at least `untilMs` (a hold's expiry plus the offers' own time): an accept after the hold still finds it. */
export async function keepOfferFor(db: Queryable, id: string, untilMs: number): Promise<void> {
  await db.query('UPDATE offers SET expires_at = greatest(expires_at, $2) WHERE id = $1', [id, new Date(untilMs).toISOString()]);
}
