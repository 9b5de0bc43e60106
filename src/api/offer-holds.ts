/**
 * Our extension: offer holds and accepts (docs/api.md, issue 41).
 * - `POST /v1/offers/{id}/hold` books the offer's reservations in the calendars for a few minutes
 *   (LK_OFFER_HOLD_MINUTES), under the hold's own id; a workflow (workflows/offer-hold) ends it at
 *   its expiry. As a create is admitted (`admitNewLease`): offers whose types all book at admission
 *   are booked here, in one transaction; any other (a type whose reserve may call the cloud, or any
 *   offer while Blazar's external filter is configured) is placed by the hold's workflow
 *   (Update-with-Start), with the same answers. The calendars' exclusion constraints settle races
 *   between holds and creates. `GET` shows it, `DELETE` releases it.
 * - `POST /v1/offers/{id}/accept` makes the offer a lease: a live hold becomes the lease with the
 *   hold's id, owning its bookings as they are (no new search); an offer not held, or whose hold
 *   ended, is admitted as a create is (201, or 409 with fresh offers).
 * A hold is no lease: lists, usage and the allocations API never show it.
 */
import { createHash, randomUUID } from 'node:crypto';
import { Router, type Request } from 'express';
import type { PoolClient } from 'pg';
import { z } from 'zod';
import { WithStartWorkflowOperation, type Client } from '@temporalio/client';
import { WorkflowIdConflictPolicy } from '@temporalio/common';
import { reuseEnd, reuseStart } from '../domain/dates';
import { toBlazarLease, uuidShaped } from '../domain/blazar-format';
import { isUuid, leaseConflict, newLease, type Lease, type NewLeaseRequest } from '../domain/lease';
import { bookedReservation, reservationContext, typedContext, type ReserveResult } from '../domain/resource-plugin';
import { addOwedStart } from '../db/lease-outbox';
import { awaitingApproval, type ApprovalNeed } from '../domain/approval';
import { findLease, saveLease } from '../db/leases';
import { unusableHostsOf } from '../db/host-allocations';
import { claimOfferForHold, endOfferHold, findOfferHold, isLiveOfferHold, lockOfferHold, markOfferHoldAccepted, type OfferHold } from '../db/offer-holds';
import { findOffer, type OfferRow } from '../db/offers';
import { inTransaction } from '../db/transaction';
import { bookInTransaction } from '../resources/shared/booking';
import type { UsagePolicyEnforcer } from '../policy/enforcement';
import { recordBookedOfferHold } from '../policy/offer-holds';
import type { LeaseOutbox } from '../outbox';
import type { LeaseWorkflowInput } from '../../workflows/lease/messages';
import { offerHoldEnded, offerHoldWorkflowId, offerHoldWorkflowType, placeOfferHold, type OfferHoldInput, type OfferHoldWorkflow } from '../../workflows/offer-hold/messages';
import { identityOf, type Identity } from './auth';
import { admissionError, beforeAdmission } from './admission';
import { ApiError, parseRequest } from './errors';
import { idempotentLeaseId, requestHash, toApiError } from './lease-commands';
import { admitNewLease, type NewLeaseDeps } from './leases';
import { DEFAULT_OFFER_LIMIT, makeOffers, offerLeaseRequest, refusedWithOffers, type OfferDeps } from './offers';

export interface OfferHoldDeps extends NewLeaseDeps {
  client: Client;
  taskQueue: string;
  /** How long a REST call waits on Temporal (LK_API_WORKFLOW_TIMEOUT_MS). */
  timeoutMs: number;
  offers: OfferDeps;
  usagePolicy?: UsagePolicyEnforcer;
  /** Starts the workflow of a lease an accept recorded (as the API's admission does). */
  outbox: LeaseOutbox;
  /** The longest (and default) hold (LK_OFFER_HOLD_MINUTES). */
  holdMs: number;
  /** Throws the named 503 while Temporal cannot take workflows (admission's temporalSetupCheck). */
  temporalReady?: () => Promise<void>;
}

const holdBody = (maxMinutes: number) =>
  z.strictObject({
    minutes: z.number({ error: 'expected a whole number of minutes' }).int('expected a whole number of minutes').min(1, 'must be at least 1 minute').max(maxMinutes, `must be at most ${maxMinutes} minutes (LK_OFFER_HOLD_MINUTES)`).optional(),
  });

/** What an accept may add to the offer's lease: the create's own fields, checked by the create's schema. */
const acceptBody = z.strictObject({ name: z.unknown(), before_end_date: z.unknown().optional(), notify_before_end: z.unknown().optional() });

/** A body that is absent (no JSON sent) counts as `{}`; anything but an object is a 400. */
function objectBody(req: Request): unknown {
  if (req.body === undefined || (typeof req.body === 'object' && req.body !== null && !Array.isArray(req.body) && Object.keys(req.body as object).length === 0)) return {};
  if (typeof req.body !== 'object' || req.body === null || Array.isArray(req.body)) throw new ApiError(400, 'expected a JSON object body (Content-Type: application/json)');
  return req.body;
}

/** The project's offer, not expired; another project's offers do not exist for it (404, as leases). */
async function visibleOffer(deps: OfferHoldDeps, identity: Identity, id: string): Promise<OfferRow> {
  const offer = isUuid(id) ? await findOffer(deps.pool, id.toLowerCase(), identity.projectId, Date.now()) : undefined;
  if (!offer) throw new ApiError(404, `Offer ${id} not found (offers expire: ask for new ones with POST /v1/offers)`);
  if (typeof offer.leaseBody.lease_id === 'string') throw new ApiError(400, `offer ${offer.id} extends lease ${offer.leaseBody.lease_id}: accept it with PUT /v1/leases/${offer.leaseBody.lease_id} and its end_date`);
  return offer;
}

/** The offer's lease as a create would ask it, under `id`; a start that has passed becomes now (the end stays). */
function requestOfOffer(deps: OfferHoldDeps, identity: Identity, offer: OfferRow, id: string, fields: Record<string, unknown>): NewLeaseRequest {
  return offerLeaseRequest(deps, identity, offer, id, fields);
}

function holdJson(deps: OfferHoldDeps, hold: OfferHold) {
  const expired = hold.state === 'held' && !isLiveOfferHold(hold, Date.now());
  return {
    id: hold.id,
    offer_id: hold.offerId,
    status: expired ? 'ended' : hold.state,
    ...(expired ? { end_reason: 'expired' } : hold.endReason ? { end_reason: hold.endReason } : {}),
    ...(hold.state === 'accepted' ? { lease_id: hold.id } : {}),
    start_date: reuseStart(hold.lease.startMs),
    end_date: reuseEnd(hold.lease.endMs),
    expires_at: new Date(hold.expiresAtMs).toISOString(),
    reservations: hold.lease.reservations.map((r) => ({ resource_type: r.resource_type, ...(deps.types.get(r.resource_type)?.offers?.describe(r.params) ?? {}) })),
  };
}

/** A concurrent request held the same offer first: answer its hold. */
class HeldMeanwhile extends Error {}

/** Books the offer's reservations under a new hold's id and records the hold, in one transaction; the policy's rules first (max_offer_holds, then the lease's own). */
async function bookHold(deps: OfferHoldDeps, identity: Identity, offer: OfferRow, expiresAtMs: number): Promise<OfferHold> {
  const holdId = randomUUID();
  const draft = newLease(requestOfOffer(deps, identity, offer, holdId, { name: `offer-hold-${holdId.slice(0, 8)}` }));
  await beforeAdmission(deps.types, draft.reservations);
  try {
    return await bookInTransaction(
      deps.pool,
      async (client) => {
        if (await claimOfferForHold(client, offer.id, identity.projectId)) throw new HeldMeanwhile();
        const reservations = [];
        for (const reservation of draft.reservations) {
          const type = deps.types.get(reservation.resource_type)!;
          const booked: ReserveResult = await type.bookAtAdmission!(client, typedContext(type, reservationContext(draft, reservation)), { borrow: false });
          reservations.push(bookedReservation(reservation, booked));
        }
        const lease: Lease = { ...draft, reservations };
        const hold = { id: holdId, offerId: offer.id, projectId: identity.projectId, userId: identity.userId, lease, expiresAtMs };
        const recorded = await recordBookedOfferHold(client, deps.usagePolicy, { hold, byAdmin: identity.isAdmin, keepOfferUntilMs: expiresAtMs + deps.offers.offerTtlMs });
        if (recorded !== 'recorded') throw new HeldMeanwhile();
        return { ...hold, state: 'held' as const, createdMs: Date.now() };
      },
      { retryExclusion: true },
    );
  } catch (err) {
    throw admissionError(err);
  }
}

/** Starts the hold's timer; if Temporal cannot take it, the hold is ended at once (no hold outlives its expiry unseen) and the call fails. */
async function startHoldWorkflow(deps: OfferHoldDeps, hold: OfferHold): Promise<void> {
  const input: OfferHoldInput = { holdId: hold.id, offerId: hold.offerId, expiresAtMs: hold.expiresAtMs };
  try {
    await deps.client.connection.withDeadline(Date.now() + deps.timeoutMs, () =>
      deps.client.workflow.start(offerHoldWorkflowType, {
        workflowId: offerHoldWorkflowId(hold.id),
        taskQueue: deps.taskQueue,
        args: [input],
        workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
        staticSummary: `offer hold of offer ${hold.offerId} until ${new Date(hold.expiresAtMs).toISOString()}`,
      }),
    );
  } catch (err) {
    await inTransaction(deps.pool, (client) => endOfferHold(client, hold.id, 'refused'));
    throw toApiError(err, deps.timeoutMs);
  }
}

/** Tells a hold's workflow that the hold ended (released or accepted): best effort, its timer finds the row ended anyway. */
async function tellHoldEnded(deps: OfferHoldDeps, holdId: string): Promise<void> {
  await deps.client.connection
    .withDeadline(Date.now() + Math.min(deps.timeoutMs, 2_000), () => deps.client.workflow.getHandle(offerHoldWorkflowId(holdId)).signal(offerHoldEnded))
    .catch(() => undefined);
}

/** The offers a refused hold or accept carries: the offer's reservations and duration, from its start (or now). */
function offersLike(deps: OfferHoldDeps, identity: Identity, offer: OfferRow) {
  return async (refusal: ApiError) => {
    // More offers do not help a project at its cap on holds.
    if (refusal.extra?.rule === 'max_offer_holds') return { offers: [] };
    const body = offer.leaseBody as { reservations?: Array<{ resource_type: string } & Record<string, unknown>> };
    const reservations = (body.reservations ?? []).map(({ resource_type, ...params }) => ({ resource_type, params }));
    const durationMs = offer.endMs - offer.startMs;
    const startMs = Math.max(offer.startMs, Math.floor(Date.now() / 60_000) * 60_000);
    return makeOffers(deps.offers, identity, { reservations, mins: [], startMs, durationMs, minDurationMs: durationMs, limit: DEFAULT_OFFER_LIMIT });
  };
}

async function placeHold(deps: OfferHoldDeps, identity: Identity, offerId: string, body: unknown): Promise<{ status: 200 | 201; hold: OfferHold }> {
  const maxMinutes = Math.max(1, Math.floor(deps.holdMs / 60_000));
  const { minutes } = parseRequest(holdBody(maxMinutes), body);
  const offer = await visibleOffer(deps, identity, offerId);
  const earlier = await findOfferHold(deps.pool, offer.id, identity.projectId);
  if (earlier) return answerEarlierHold(earlier);
  await deps.temporalReady?.();
  const expiresAtMs = Date.now() + Math.min(deps.holdMs, (minutes ?? Infinity) * 60_000);
  if (!booksInApi(deps, offer)) return { status: 201, hold: await refusedWithOffers(() => placeByWorkflow(deps, identity, offer, expiresAtMs), offersLike(deps, identity, offer)) };
  let hold: OfferHold;
  try {
    hold = await refusedWithOffers(() => bookHold(deps, identity, offer, expiresAtMs), offersLike(deps, identity, offer));
  } catch (err) {
    if (!(err instanceof HeldMeanwhile)) throw err;
    return answerEarlierHold((await findOfferHold(deps.pool, offer.id, identity.projectId))!);
  }
  await startHoldWorkflow(deps, hold);
  return { status: 201, hold };
}

/**
 * Whether the API books the hold itself, in one transaction: every type of the offer books at
 * admission (no cloud call) and no external filter is to be asked (an HTTP call, never under a lock).
 */
function booksInApi(deps: OfferHoldDeps, offer: OfferRow): boolean {
  const reservations = (offer.leaseBody.reservations as Array<{ resource_type: string }> | undefined) ?? [];
  return reservations.every((r) => deps.types.get(r.resource_type)?.bookAtAdmission !== undefined) && !deps.usagePolicy?.asksExternalFilter();
}

/**
 * The id of the hold its workflow places for an offer: one per offer (an offer is held once, ever), so
 * that concurrent holds of one offer meet in one workflow and one update, and get one answer.
 */
export const placedHoldId = (offerId: string) => uuidShaped(createHash('sha256').update(JSON.stringify(['offer-hold', offerId])).digest('hex'), 4);

/**
 * Has the hold's workflow book the offer's reservations (each type's reserve, in the worker) and
 * record the hold after the external filter and the usage policy (Update-with-Start, as a create).
 * Refusals come back as a create's (409 with the calendar's reason, 403 policy). No answer within
 * LK_API_WORKFLOW_TIMEOUT_MS: 503, and the hold is ended (the workflow undoes a placement that
 * finishes later, told here and by its own deadline).
 */
async function placeByWorkflow(deps: OfferHoldDeps, identity: Identity, offer: OfferRow, expiresAtMs: number): Promise<OfferHold> {
  const holdId = placedHoldId(offer.id);
  const draft = newLease(requestOfOffer(deps, identity, offer, holdId, { name: `offer-hold-${holdId.slice(0, 8)}` }));
  const placeByMs = Date.now() + deps.timeoutMs;
  const input: OfferHoldInput = { holdId, offerId: offer.id, expiresAtMs, placement: { draft, byAdmin: identity.isAdmin, keepOfferUntilMs: expiresAtMs + deps.offers.offerTtlMs, placeByMs } };
  const start = new WithStartWorkflowOperation<OfferHoldWorkflow>(offerHoldWorkflowType, {
    workflowId: offerHoldWorkflowId(holdId),
    taskQueue: deps.taskQueue,
    args: [input],
    workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
    staticSummary: `offer hold of offer ${offer.id} until ${new Date(expiresAtMs).toISOString()}`,
  });
  try {
    await deps.client.connection.withDeadline(placeByMs, () => deps.client.workflow.executeUpdateWithStart(placeOfferHold, { updateId: `place-${holdId}`, startWorkflowOperation: start }));
  } catch (err) {
    const refusal = toApiError(err, deps.timeoutMs);
    if (refusal.status === 503) await abandonPlacement(deps, holdId);
    throw refusal;
  }
  // The row says whether it still holds (a release may have come between the update's answer and this).
  const hold = await findOfferHold(deps.pool, offer.id, identity.projectId);
  if (!hold) throw new ApiError(503, `the hold of offer ${offer.id} was placed but not found: try again`);
  return answerEarlierHold(hold).hold;
}

/** A placement its caller stops waiting for is ended: in the database now, and by its workflow once told (it may still be booking). */
async function abandonPlacement(deps: OfferHoldDeps, holdId: string): Promise<void> {
  await inTransaction(deps.pool, (client) => endOfferHold(client, holdId, 'refused')).catch(() => undefined);
  await tellHoldEnded(deps, holdId);
}

/** The same hold asked again while it holds answers it (no renewal); one that ended is never held again. */
function answerEarlierHold(hold: OfferHold): { status: 200; hold: OfferHold } {
  if (isLiveOfferHold(hold, Date.now())) return { status: 200, hold };
  const how = hold.state === 'accepted' ? `accepted: it is lease ${hold.id}` : `ended (${hold.endReason ?? 'expired'})`;
  throw new ApiError(409, `offer ${hold.offerId} was held already (${how}): accept it (re-checked) or ask for new offers`);
}

/** A live hold could not become the lease (expired meanwhile, or a held host failed): the accept is admitted afresh. */
class HoldGone extends Error {}

/** A live hold becomes the lease with its id, owning its bookings; HoldGone when it no longer holds. */
async function convertHold(deps: OfferHoldDeps, identity: Identity, hold: OfferHold, request: NewLeaseRequest, hash: string): Promise<Lease> {
  const reservations = hold.lease.reservations;
  const draft = newLease({ ...request, id: hold.id, reservations: reservations.map(({ id, resource_type, params }) => ({ id, resource_type, params })) });
  const booked: Lease = { ...draft, reservations, version: draft.version + 1, updatedMs: Date.now() };
  // A lease an approval rule holds waits for approval, whether it came from a held offer or not.
  const convert = async (client: PoolClient, approval?: ApprovalNeed): Promise<LeaseWorkflowInput & { admitted: Lease }> => {
    const lease = awaitingApproval(booked, approval, booked.updatedMs);
    const locked = await lockOfferHold(client, hold.id);
    if (!locked || !isLiveOfferHold(locked, Date.now())) throw new HoldGone();
    if ((await unusableHostsOf(client, { leaseId: hold.id })).size > 0) throw new HoldGone();
    const saved = await saveLease(client, lease);
    if (saved === 'name-taken') throw leaseConflict(`The lease with name: ${lease.name} already exists. Names are unique per project (${lease.projectId}).`);
    if (saved !== 'saved') throw new HoldGone();
    await markOfferHoldAccepted(client, hold.id);
    const admitted = { request: { ...request, id: hold.id }, requestHash: hash, admitted: lease };
    await addOwedStart(client, lease.id, hash, admitted);
    return admitted;
  };
  // The usage policy as at a create: Blazar's external filter first (outside any lock), then the rules in the transaction.
  const input = deps.usagePolicy ? await deps.usagePolicy.recordWithinPolicy({ next: booked, byAdmin: identity.isAdmin }, convert) : await inTransaction(deps.pool, (client) => convert(client));
  deps.outbox.startSoon(input);
  await tellHoldEnded(deps, hold.id);
  return input.admitted;
}

async function acceptOffer(deps: OfferHoldDeps, identity: Identity, offerId: string, raw: unknown, key: string | undefined): Promise<Lease> {
  const fields = parseRequest(acceptBody, raw);
  const offer = await visibleOffer(deps, identity, offerId);
  const hash = requestHash(identity.projectId, { accept: offer.id, ...fields });
  const hold = await findOfferHold(deps.pool, offer.id, identity.projectId);
  if (hold?.state === 'accepted') {
    const lease = await findLease(deps.pool, hold.id);
    if (!lease) throw new ApiError(409, `offer ${offer.id} was accepted as lease ${hold.id}, which was deleted since: ask for new offers`);
    return lease;
  }
  if (hold && isLiveOfferHold(hold, Date.now())) {
    const request = requestOfOffer(deps, identity, offer, hold.id, fields);
    try {
      return await refusedWithOffers(() => asApiError(convertHold(deps, identity, hold, request, hash)), offersLike(deps, identity, offer));
    } catch (err) {
      if (!(err instanceof HoldGone)) throw err;
      await inTransaction(deps.pool, (client) => endOfferHold(client, hold.id, 'expired'));
    }
  }
  // Not held, or the hold ended: admitted as a create, whose checks see the calendars as they are now.
  const id = key ? idempotentLeaseId(identity.projectId, identity.userId, key) : randomUUID();
  const request = requestOfOffer(deps, identity, offer, id, fields);
  return admitNewLease(deps, identity, request, hash, key !== undefined);
}

/** Lease failures (ApplicationFailure: a conflict, a policy refusal) as the API answers them. */
async function asApiError<T>(work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (err) {
    throw admissionError(err);
  }
}

export function offerHoldsRouter(deps: OfferHoldDeps): Router {
  const router = Router();
  router.post('/offers/:id/hold', async (req, res) => {
    const { status, hold } = await placeHold(deps, identityOf(res), req.params.id, objectBody(req));
    res.status(status).json({ hold: holdJson(deps, hold) });
  });

  router.get('/offers/:id/hold', async (req, res) => {
    const identity = identityOf(res);
    const hold = isUuid(req.params.id) ? await findOfferHold(deps.pool, req.params.id.toLowerCase(), identity.projectId) : undefined;
    if (!hold) throw new ApiError(404, `offer ${req.params.id} is not held`);
    res.json({ hold: holdJson(deps, hold) });
  });

  router.delete('/offers/:id/hold', async (req, res) => {
    const identity = identityOf(res);
    const hold = isUuid(req.params.id) ? await findOfferHold(deps.pool, req.params.id.toLowerCase(), identity.projectId) : undefined;
    if (!hold) throw new ApiError(404, `offer ${req.params.id} is not held`);
    // In the database, so that a release works with no worker running; the workflow is told after.
    const state = await inTransaction(deps.pool, (client) => endOfferHold(client, hold.id, 'released'));
    if (state === 'accepted') throw new ApiError(409, `offer ${hold.offerId} was accepted: it is lease ${hold.id}; delete the lease (DELETE /v1/leases/${hold.id})`);
    await tellHoldEnded(deps, hold.id);
    res.status(204).end();
  });

  router.post('/offers/:id/accept', async (req, res) => {
    const key = req.get('Idempotency-Key')?.trim();
    if (key !== undefined && (key.length === 0 || key.length > 255)) throw new ApiError(400, 'Idempotency-Key: expected 1 to 255 characters');
    const lease = await acceptOffer(deps, identityOf(res), req.params.id, objectBody(req), key);
    res.status(201).json({ lease: toBlazarLease(lease) });
  });
  return router;
}
