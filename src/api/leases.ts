/**
 * Blazar v1 leases: `GET/POST /v1/leases`, `GET/PUT/DELETE /v1/leases/{id}`.
 * Reads come from PostgreSQL; changes go to the lease's workflow.
 */
import { randomUUID } from 'node:crypto';
import { Router, type Request } from 'express';
import { assertSettled, isUuid, newLease, type IdleLeasePolicy, type Lease, type LeaseUpdateRequest, type NewLeaseRequest } from '../domain/lease';
import { findLease, isLeaseDeleted, leaseBatches, listLeases } from '../db/leases';
import { isDatabaseUnavailable, type Pool } from '../db/pool';
import type { ResourceTypes } from '../domain/resource-plugin';
import { admitInApi, admitsInApi, type ApiAdmissionDeps } from './admission';
import { identityOf, type Identity } from './auth';
import { toBlazarLease } from '../domain/blazar-format';
import { DEFAULT_PREEMPT_WARNING_MS, isPreemptibleReservation } from '../domain/preemption';
import { ApiError, parseRequest } from './errors';
import { jsonArrayParts, sendJsonParts } from './json-stream';
import { answerApproval, changeLease, claimKeyFor, createLease, idempotentLeaseId, lendOrReclaim, noAnswerInTime, removeLease, requestHash, type LeaseCommandOptions } from './lease-commands';
import { approvalAnswerSchema, createLeaseSchema, lendSchema, listLeasesQuery, newLeaseRequest, reclaimSchema, requestDateSchema, updateLeaseSchema } from './lease-schemas';
import { lendingReservations, lendRefusal } from '../domain/lending';
import { formatRequestDate } from '../domain/dates';
import { refuseUnknownPropertyKeys } from './property-keys';
import { DEFAULT_OFFER_LIMIT, draftLease, extensionOffers, leaseExtensionOffers, makeOffers, refusedWithOffers, type OfferDeps, type OfferJson } from './offers';
import { wholeMinuteDown } from '../domain/dates';
import { createSeries } from './series';

/** Leases per query of a list without `limit` (~1 KB of JSON each). */
const LIST_BATCH_SIZE = 250;


function bodyOf(req: Request): unknown {
  if (req.body === undefined || req.body === null || typeof req.body !== 'object' || Array.isArray(req.body)) {
    throw new ApiError(400, 'expected a JSON object body (Content-Type: application/json)');
  }
  return req.body;
}

/** Others' leases do not exist for a non-admin (404, not 403: ids are not confirmed). Blazar's wording. */
async function visibleLease(pool: Pool, identity: Identity, id: string): Promise<Lease> {
  const lease = isUuid(id) ? await findLease(pool, id.toLowerCase()) : undefined;
  if (!lease || (!identity.isAdmin && lease.projectId !== identity.projectId)) throw new ApiError(404, `Object with {'lease_id': '${id}'} not found`);
  return lease;
}

/** End policies that give hosts away (to every project, for good): only admins may ask for them. */
const ADMIN_ONLY_END_POLICIES = new Set(['release']);

/** Blazar's policy refusal (403), plus what was refused. */
export function refuseAdminOnlyPolicies(identity: Identity, rule: string, reservations: Array<Record<string, unknown>> = []): void {
  if (identity.isAdmin) return;
  reservations.forEach((fields, i) => {
    if (typeof fields.on_end === 'string' && ADMIN_ONLY_END_POLICIES.has(fields.on_end)) {
      throw new ApiError(403, `Policy doesn't allow ${rule} to be performed: reservations[${i}].on_end ${JSON.stringify(fields.on_end)} gives the hosts away and is for admins only.`);
    }
  });
}

/** What creating a lease needs (POST /v1/leases, and an accept of an offer that is not held). */
export interface NewLeaseDeps {
  pool: Pool;
  types: ResourceTypes;
  commands: LeaseCommandOptions;
  admission?: ApiAdmissionDeps;
  provisioningLeadMs: number;
  notifyBeforeEndMs?: number[];
  idleLeases?: IdleLeasePolicy;
  maxReservationsPerLease?: number;
  /** Occurrences in one series at most (LK_MAX_OCCURRENCES). */
  maxOccurrences?: number;
  offers?: OfferDeps;
  /** The warning a lending's reclaim gives its borrowers (LK_PREEMPT_WARNING_MINUTES): a lending must outlast it (issue 43). */
  preemptionWarningMs?: number;
}

/**
 * Admits a new lease, by the API in one transaction (host leases, and leases with no reservations)
 * or by its workflow; a refusal for capacity or a policy rule carries offers for the same reservations.
 */
export function admitNewLease(deps: NewLeaseDeps, identity: Identity, request: NewLeaseRequest, hash: string, idempotent: boolean): Promise<Lease> {
  return refusedWithOffers(
    async () => {
      const admitted = deps.admission && admitsInApi(deps.admission, request) ? await admitInApi(deps.admission, request, hash, idempotent) : 'admitted-by-workflow';
      return admitted === 'admitted-by-workflow' ? await createLease(deps.commands, request, hash, idempotent) : admitted;
    },
    async () => {
      if (!deps.offers) return { offers: [] };
      const startMs = request.start === 'now' ? wholeMinuteDown(request.requestedMs) : request.start;
      const durationMs = request.end - startMs;
      const reservations = request.reservations.map((r) => ({ resource_type: r.resource_type, params: r.params }));
      const mayPreempt = await createMayPreempt(deps, deps.offers, identity, request);
      return makeOffers(deps.offers, identity, { reservations, mins: [], startMs, durationMs, minDurationMs: durationMs, limit: DEFAULT_OFFER_LIMIT, mayPreempt });
    },
  );
}

/**
 * Whether a create like this one may cut preemptible leases (issue 43), so that its 409's offers count
 * their bookings as free: only an API admission does, and only for a lease no approval rule holds.
 */
async function createMayPreempt(deps: NewLeaseDeps, offers: OfferDeps, identity: Identity, request: NewLeaseRequest): Promise<boolean> {
  if (!deps.admission || !admitsInApi(deps.admission, request)) return false;
  const policy = offers.usagePolicy;
  if (!policy) return true;
  const subject = { next: draftLease(deps.types, request), byAdmin: identity.isAdmin, ...(request.justification !== undefined ? { justification: request.justification } : {}) };
  return (await policy.approvalNeedOf(offers.pool, subject, undefined)) === undefined;
}

export function leasesRouter(deps: NewLeaseDeps): Router {
  const { pool, commands } = deps;
  const createSchema = createLeaseSchema(deps.types, deps.maxReservationsPerLease);
  const router = Router();

  router.get('/leases', async (req, res) => {
    const identity = identityOf(res);
    const query = parseRequest(listLeasesQuery, req.query);
    if (!identity.isAdmin && query.project_id !== undefined && query.project_id !== identity.projectId) {
      throw new ApiError(403, 'only admins can list other projects\' leases');
    }
    if (query.marker !== undefined) await visibleLease(pool, identity, query.marker);
    const filter = {
      projectId: identity.isAdmin ? query.project_id : identity.projectId,
      status: query.status,
      awaitingApproval: query.awaiting_approval,
      name: query.name,
      from: query.from,
      to: query.to,
      marker: query.marker,
    };
    if (query.limit === undefined) {
      // Every lease, as Blazar answers (blazarclient's lease-list follows no links): streamed, memory one batch.
      await sendJsonParts(res, jsonArrayParts('leases', leaseBatches(pool, filter, LIST_BATCH_SIZE), toBlazarLease));
      return;
    }
    const leases = await listLeases(pool, { ...filter, limit: query.limit });
    const more = query.limit !== undefined && leases.length > query.limit;
    const page = more ? leases.slice(0, query.limit) : leases;
    const links = more ? [{ rel: 'next', href: nextPageHref(req, page[page.length - 1].id) }] : undefined;
    res.json({ leases: page.map(toBlazarLease), ...(links ? { leases_links: links } : {}) });
  });

  router.get('/leases/:id', async (req, res) => {
    res.json({ lease: toBlazarLease(await visibleLease(pool, identityOf(res), req.params.id)) });
  });

  router.get('/leases/:id/extension-offers', async (req, res) => {
    const identity = identityOf(res);
    const lease = await visibleLease(pool, identity, req.params.id);
    if (!deps.offers) throw new ApiError(503, 'offers are not available in this deployment');
    res.json(await leaseExtensionOffers(deps.offers, identity, lease));
  });

  router.post('/leases', async (req, res) => {
    const identity = identityOf(res);
    const raw = bodyOf(req);
    const body = parseRequest(createSchema, raw);
    refuseAdminOnlyPolicies(identity, 'blazar:leases:post', body.reservations?.map((r) => r.params));
    const key = req.get('Idempotency-Key')?.trim();
    if (key !== undefined && (key.length === 0 || key.length > 255)) throw new ApiError(400, 'Idempotency-Key: expected 1 to 255 characters');
    if (body.recurrence !== undefined) {
      await refuseUnknownPropertyKeys(deps.types, identity, body.reservations ?? []);
      const created = await createSeries(deps, identity, body, raw, key);
      res.status(201).json(created);
      return;
    }
    if (body.partial !== undefined) throw new ApiError(400, 'partial: only with recurrence');
    const id = key ? idempotentLeaseId(identity.projectId, identity.userId, key) : randomUUID();
    const request = newLeaseRequest(deps, identity, body, id);
    newLease(request); // Blazar's date rules (400) before anything starts
    await refuseUnknownPropertyKeys(deps.types, identity, body.reservations ?? []);
    // The key's claim (a series created with it is a 409) and a fast answer for a deleted lease's key;
    // during a database outage the workflow rides the outage out and its record refuses a deleted
    // lease itself (activities/leases.ts): only a series create with the key in that outage is not seen.
    if (key) {
      await claimKeyFor(pool, 'lease', identity.projectId, identity.userId, key).catch((err: unknown) => {
        if (!isDatabaseUnavailable(err)) throw err;
      });
    }
    const keyOfDeletedLease = key
      ? await isLeaseDeleted(pool, id).catch((err: unknown) => {
          if (isDatabaseUnavailable(err)) return false;
          throw err;
        })
      : false;
    if (keyOfDeletedLease) throw new ApiError(410, `Lease ${id}, created with this Idempotency-Key, was deleted: use another key for a new lease`);
    const hash = requestHash(identity.projectId, raw);
    const lease = await admitNewLease(deps, identity, request, hash, key !== undefined);
    res.status(201).json({ lease: toBlazarLease(lease) });
  });

  router.put('/leases/:id', async (req, res) => {
    const identity = identityOf(res);
    const body = parseRequest(updateLeaseSchema, bodyOf(req));
    refuseAdminOnlyPolicies(identity, 'blazar:leases:put', body.reservations);
    const current = await visibleLease(pool, identity, req.params.id);
    assertSettled(current); // 409 at once rather than a 503 after the deadline, queued behind cloud work
    const changed = body.reservations?.map((change, i) => changedReservation(current, change, i, deps.types));
    await refuseUnknownPropertyKeys(deps.types, identity, changed ?? []);
    const update: LeaseUpdateRequest = {
      name: body.name,
      start: body.start_date,
      end: body.end_date,
      beforeEnd: body.before_end_date,
      reservations: changed?.map(({ id, params }) => ({ id, params })),
      byAdmin: identity.isAdmin,
      notifyBeforeEndMs: body.notify_before_end,
      ...(body.justification !== undefined ? { justification: body.justification } : {}),
    };
    const changedLease = await refusedWithOffers(
      () => changeLease(commands, current.id, update),
      async (refusal) => updateOffers(deps, identity, current, update, changed, refusal.extra?.latest_end),
    );
    res.json({ lease: toBlazarLease(changedLease) });
  });

  // Approval (issue 42): an admin answers a lease waiting for approval; the lease's workflow acts on it.
  for (const outcome of ['approve', 'deny'] as const) {
    router.post(`/leases/:id/${outcome}`, async (req, res) => {
      const identity = identityOf(res);
      if (!identity.isAdmin) throw new ApiError(403, `Policy doesn't allow blazar:leases:${outcome} to be performed: only admins answer leases waiting for approval.`);
      const answer = parseRequest(approvalAnswerSchema, req.body ?? {});
      const current = await visibleLease(pool, identity, req.params.id);
      // A lease waiting for approval, or an active lease whose change waits (pending_change).
      if (current.status !== 'PENDING_APPROVAL' && !current.pendingChange) throw new ApiError(409, `Lease ${current.name} is not waiting for approval: it is ${current.status}.`);
      res.json({ lease: toBlazarLease(await answerApproval(commands, current.id, outcome, answer)) });
    });
  }

  // Lending (issue 43): the lease's project (or an admin) lends idle hosts to preemptible leases, and takes them back.
  router.post('/leases/:id/lend', async (req, res) => {
    const body = parseRequest(lendSchema, bodyOf(req));
    const current = await visibleLease(pool, identityOf(res), req.params.id);
    const reservationId = lendingReservationOf(current, body.reservation_id);
    const warningMs = deps.preemptionWarningMs ?? DEFAULT_PREEMPT_WARNING_MS;
    if (body.until <= Date.now() + warningMs) throw new ApiError(400, `until: must be later than now plus the preemption warning (${formatRequestDate(Date.now() + warningMs)}): a borrower must be told that long before it ends`);
    if (body.until > current.endMs) throw new ApiError(400, `until: must be no later than the lease's end (${formatRequestDate(current.endMs)})`);
    refuseUnlessActive(current);
    res.json({ lease: toBlazarLease(await lendOrReclaim(commands, current.id, { lend: { reservationId, count: body.count, untilMs: body.until } })) });
  });

  router.post('/leases/:id/reclaim', async (req, res) => {
    const body = parseRequest(reclaimSchema, req.body ?? {});
    const current = await visibleLease(pool, identityOf(res), req.params.id);
    const reservationId = lendingReservationOf(current, body.reservation_id);
    // A minute's precision: a need "now" written as this minute is now.
    if (body.needed_at !== undefined && body.needed_at < Date.now() - 60_000) throw new ApiError(400, 'needed_at: must not be in the past');
    if (body.needed_at !== undefined && body.needed_at > current.endMs) throw new ApiError(400, `needed_at: must be no later than the lease's end (${formatRequestDate(current.endMs)})`);
    refuseUnlessActive(current);
    res.json({ lease: toBlazarLease(await lendOrReclaim(commands, current.id, { reclaim: { reservationId, count: body.count, neededFromMs: body.needed_at } })) });
  });

  router.delete('/leases/:id', async (req, res) => {
    const current = await visibleLease(pool, identityOf(res), req.params.id);
    if ((await removeLease(commands, current.id, () => findLease(pool, current.id))) === 'past-deadline') {
      const now = await findLease(pool, current.id);
      // The cleanup of an active lease outlasts the deadline (a slow cloud): accepted, still shown as
      // DELETING until its hosts are back, so that nobody wonders why they are still held.
      if (now?.status === 'DELETING') {
        res.status(202).json({ lease: toBlazarLease(now) });
        return;
      }
      if (now) throw noAnswerInTime(commands.timeoutMs);
    }
    res.status(204).end();
  });

  return router;
}

/**
 * Offers for a change of `current` that is refused (or, in a dry run, would not fit): an extension's
 * ends its resources allow (up to `latestEnd` when a refusal named one), else the lease's
 * reservations as changed, searched anew from the asked start.
 */
export async function updateOffers(
  deps: Pick<NewLeaseDeps, 'offers'>,
  identity: Identity,
  current: Lease,
  update: LeaseUpdateRequest,
  changed: Array<{ id: string; resource_type: string; params: Record<string, unknown> }> | undefined,
  refusedLatestEnd?: unknown,
): Promise<{ offers: OfferJson[]; note?: string }> {
  if (!deps.offers) return { offers: [] };
  // An extension refused: the ends its resources allow, up to the latest the refusal named.
  const latestEnd = requestDateSchema.safeParse(refusedLatestEnd);
  if (latestEnd.success) return extensionOffers(deps.offers, identity, current, latestEnd.data);
  // An extension refused without a latest end (a pending lease is booked anew): how far its resources allow.
  const extendsOnly = update.end !== undefined && update.end !== 'now' && update.end > current.endMs && (update.start === undefined || update.start === current.startMs) && !changed;
  const steps = extendsOnly ? await leaseExtensionOffers(deps.offers, identity, current) : undefined;
  if (steps && steps.offers.length > 0) return steps;
  const asDate = (date: number | 'now' | undefined, otherwise: number) => (date === undefined ? otherwise : date === 'now' ? wholeMinuteDown(Date.now()) : date);
  const startMs = asDate(update.start, current.startMs);
  const durationMs = Math.max(60_000, asDate(update.end, current.endMs) - startMs);
  const reservations = current.reservations.map((r) => ({ resource_type: r.resource_type, params: changed?.find((c) => c.id === r.id)?.params ?? r.params }));
  // The lease's own bookings still count as taken in this search: these offers err on the safe side.
  return makeOffers(deps.offers, identity, { reservations, mins: [], startMs: Math.max(startMs, wholeMinuteDown(Date.now())), durationMs, minDurationMs: durationMs, limit: DEFAULT_OFFER_LIMIT });
}

/** A reservation's parameters with the change applied, checked by its resource type as at creation. */
export function changedReservation(lease: Lease, change: { id: string } & Record<string, unknown>, index: number, types: ResourceTypes) {
  const { id, ...fields } = change;
  const reservation = lease.reservations.find((r) => r.id === id);
  if (!reservation) throw new ApiError(400, `Please enter valid reservation IDs. Invalid reservation IDs are: ${id}. reservations[${index}].id: lease ${lease.name} has no such reservation.`);
  delete fields.resource_type; // a reservation keeps its type
  const type = types.get(reservation.resource_type);
  if (!type) throw new ApiError(400, `reservations[${index}]: resource type ${reservation.resource_type} is not supported by this deployment`);
  const params = parseRequest(type.paramsSchema, { ...reservation.params, ...fields }, `reservations[${index}]`);
  // A lease's bookings take `preemptible` when booked anew, which only a lease not started is (issue 43):
  // a started regular lease turned preemptible would keep its hosts and shed the rules preemptible_exempt lifts.
  if (isPreemptibleReservation({ params }) !== isPreemptibleReservation(reservation) && lease.status !== 'PENDING') {
    throw new ApiError(400, `reservations[${index}].preemptible: can change only while the lease is PENDING (lease ${lease.name} is ${lease.status})`);
  }
  return { id, resource_type: reservation.resource_type, params };
}


/** The reservation a lend or reclaim names, or the lease's one that may lend when it names none (400 when that is not one). */
function lendingReservationOf(lease: Lease, reservationId: string | undefined): string {
  if (reservationId !== undefined) {
    const refusal = lendRefusal(lease, reservationId);
    if (refusal) throw new ApiError(400, refusal);
    return reservationId;
  }
  const lendable = lendingReservations(lease);
  if (lendable.length === 1) return lendable[0].id;
  throw new ApiError(400, lendable.length === 0 ? `lease ${lease.name} has no reservation that can lend: only regular physical:host reservations without on_end: release lend` : `reservation_id: lease ${lease.name} has ${lendable.length} reservations that can lend: name one`);
}

/** Only an active lease lends or reclaims (409 at once, rather than queued behind its other changes). */
function refuseUnlessActive(lease: Lease): void {
  if (lease.status !== 'ACTIVE') throw new ApiError(409, `Lease ${lease.name} is ${lease.status}: only an active lease lends or reclaims its hosts.`);
}

function nextPageHref(req: Request, marker: string): string {
  const url = new URL(req.originalUrl, 'http://placeholder');
  url.searchParams.set('marker', marker);
  return `${url.pathname}${url.search}`;
}
