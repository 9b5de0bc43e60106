/**
 * Offer holds (020_offer_holds.sql): an offer's reservations booked for a few minutes under the
 * hold's id, which an accept makes the lease's id. This table alone says what is held: the
 * calendars' rows of a hold look like a lease's. Ending a hold deletes those rows, which is the
 * release of an unstarted booking (ResourceType.bookAtAdmission books calendar rows only); a hold
 * its workflow placed (types that reserve in the worker) also has that workflow run the types' end hooks.
 */
import type { PoolClient } from 'pg';
import type { Lease } from '../domain/lease';
import { floatingIpBookings } from './floating-ips';
import { deleteLeaseHostRows } from './host-allocations';
import type { Pool } from './pool';
import { deleteLeaseQuantityBookings } from './quantity-allocations';
import { networkSegmentBookings } from './network-segment-allocations';

type Queryable = Pool | PoolClient;

export type OfferHoldState = 'held' | 'accepted' | 'ended';
export type OfferHoldEndReason = 'expired' | 'released' | 'refused';

export interface OfferHold {
  id: string;
  offerId: string;
  projectId: string;
  userId: string;
  state: OfferHoldState;
  endReason?: OfferHoldEndReason;
  /** The lease as booked (its reservations with their allocations): an accept records it as it is. */
  lease: Lease;
  expiresAtMs: number;
  createdMs: number;
  endedMs?: number;
}

interface OfferHoldRow {
  id: string;
  offer_id: string;
  project_id: string;
  user_id: string;
  state: OfferHoldState;
  end_reason: OfferHoldEndReason | null;
  lease: Lease;
  expires_at: Date;
  created_at: Date;
  ended_at: Date | null;
}

const COLUMNS = 'id::text, offer_id::text, project_id, user_id, state, end_reason, lease, expires_at, created_at, ended_at';

function toOfferHold(row: OfferHoldRow): OfferHold {
  return {
    id: row.id,
    offerId: row.offer_id,
    projectId: row.project_id,
    userId: row.user_id,
    state: row.state,
    ...(row.end_reason ? { endReason: row.end_reason } : {}),
    lease: row.lease,
    expiresAtMs: row.expires_at.getTime(),
    createdMs: row.created_at.getTime(),
    ...(row.ended_at ? { endedMs: row.ended_at.getTime() } : {}),
  };
}

/** A hold as it is recorded: what the database adds (state, times) left out. */
export type NewOfferHold = Pick<OfferHold, 'id' | 'offerId' | 'projectId' | 'userId' | 'lease' | 'expiresAtMs'>;

/** Records a hold; 'offer-held' when the offer was held before (one hold per offer, ever). */
export async function insertOfferHold(client: PoolClient, hold: NewOfferHold): Promise<'inserted' | 'offer-held'> {
  const { rowCount } = await client.query(
    `INSERT INTO offer_holds (id, offer_id, project_id, user_id, state, lease, expires_at)
     VALUES ($1, $2, $3, $4, 'held', $5, $6) ON CONFLICT (offer_id) DO NOTHING`,
    [hold.id, hold.offerId, hold.projectId, hold.userId, JSON.stringify(hold.lease), new Date(hold.expiresAtMs).toISOString()],
  );
  return rowCount === 1 ? 'inserted' : 'offer-held';
}

/** The hold of a project's offer (another project's holds do not exist for it). */
export async function findOfferHold(db: Queryable, offerId: string, projectId: string): Promise<OfferHold | undefined> {
  const { rows } = await db.query<OfferHoldRow>(`SELECT ${COLUMNS} FROM offer_holds WHERE offer_id = $1 AND project_id = $2`, [offerId, projectId]);
  return rows[0] && toOfferHold(rows[0]);
}

/**
 * Takes the offer for a hold in the caller's transaction: concurrent holds of one offer wait here
 * one after the other, and each after the first finds the hold recorded (answered, not booked again).
 */
export async function claimOfferForHold(client: PoolClient, offerId: string, projectId: string): Promise<OfferHold | undefined> {
  await client.query("SELECT pg_advisory_xact_lock(hashtext('leasekeeper:offer-hold'), hashtext($1))", [offerId]);
  return findOfferHold(client, offerId, projectId);
}

/** The hold, locked until the transaction ends: an accept and an end of one hold take turns. */
export async function lockOfferHold(client: PoolClient, id: string): Promise<OfferHold | undefined> {
  const { rows } = await client.query<OfferHoldRow>(`SELECT ${COLUMNS} FROM offer_holds WHERE id = $1 FOR UPDATE`, [id]);
  return rows[0] && toOfferHold(rows[0]);
}

/** Whether the hold still holds at `nowMs`: held, and not past its expiry. */
export const isLiveOfferHold = (hold: OfferHold, nowMs: number): boolean => hold.state === 'held' && hold.expiresAtMs > nowMs;

/** The project's holds that still hold (the max_offer_holds rule counts them). */
export async function countLiveOfferHolds(db: Queryable, projectId: string, nowMs: number): Promise<number> {
  const { rows } = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM offer_holds WHERE project_id = $1 AND state = 'held' AND expires_at > $2", [projectId, new Date(nowMs).toISOString()]);
  return rows[0].n;
}

/** A held hold became the lease with its id: its rows are the lease's now, and stay. */
export async function markOfferHoldAccepted(client: PoolClient, id: string): Promise<void> {
  await client.query("UPDATE offer_holds SET state = 'accepted', ended_at = now() WHERE id = $1 AND state = 'held'", [id]);
}

/**
 * Deletes the calendars' rows booked under a hold's id (hosts, instance slots and their shared host
 * rows, addresses, network segments, quantities): no lease ever has that id unless the hold was accepted. What a type's
 * reserve made beyond its rows (a hold placed by its workflow) the workflow's end hooks take back.
 */
async function deleteHeldBookings(client: PoolClient, id: string): Promise<void> {
  await deleteLeaseHostRows(client, id);
  await floatingIpBookings.deleteLease(client, id);
  await networkSegmentBookings.deleteLease(client, id);
  await deleteLeaseQuantityBookings(client, id);
}

/**
 * Ends a hold in the caller's transaction and frees what it booked; nothing once accepted (the rows
 * are the lease's). With no row at all (a hold refused before it was recorded), its rows go anyway.
 * Answers the hold's state afterwards (undefined: no such hold).
 */
export async function endOfferHold(client: PoolClient, id: string, reason: OfferHoldEndReason): Promise<OfferHoldState | undefined> {
  const hold = await lockOfferHold(client, id);
  if (hold?.state === 'accepted') return 'accepted';
  if (hold?.state === 'held') await client.query("UPDATE offer_holds SET state = 'ended', end_reason = $2, ended_at = now() WHERE id = $1", [id, reason]);
  await deleteHeldBookings(client, id);
  return hold ? 'ended' : undefined;
}

/**
 * Whether some hold is still held past its expiry: a probe of the partial index on live holds,
 * prepared once per connection (named), run before every booking. The UPDATE below, run each
 * time instead, cost PostgreSQL ~0.1 ms of CPU per booking with no hold to end (a tenth of
 * what a whole booking costs it); the prepared probe costs about as much as an empty statement.
 */
async function expiredOfferHoldExists(client: PoolClient): Promise<boolean> {
  const { rows } = await client.query<{ found: boolean }>({
    name: 'leasekeeper-expired-offer-hold',
    text: "SELECT EXISTS (SELECT 1 FROM offer_holds WHERE state = 'held' AND expires_at <= now()) AS found",
  });
  return rows[0].found;
}

/** Expired holds ended per call at most: a booking never waits on a large backlog, which the next ones finish. */
export const EXPIRED_HOLDS_PER_CALL = 50;

/**
 * Ends holds past their expiry and frees their rows, in the caller's transaction: run before each
 * booking (bookInTransaction), so that capacity is free at a hold's expiry even when no worker
 * runs its timer. Holds another transaction has locked are left to it.
 */
export async function endExpiredOfferHolds(client: PoolClient, limit = EXPIRED_HOLDS_PER_CALL): Promise<number> {
  if (!(await expiredOfferHoldExists(client))) return 0;
  const { rows } = await client.query<{ id: string }>(
    `UPDATE offer_holds SET state = 'ended', end_reason = 'expired', ended_at = now()
     WHERE id IN (SELECT id FROM offer_holds WHERE state = 'held' AND expires_at <= now() ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
     RETURNING id::text`,
    [limit],
  );
  for (const { id } of rows) await deleteHeldBookings(client, id);
  return rows.length;
}
