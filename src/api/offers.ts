/**
 * Our extension: offers, what would work instead of a lease as asked (docs/api.md).
 * - `POST /v1/offers`: reservations (as a create takes them), a duration in minutes, a range
 *   (`start_after`, `end_before`), what the user accepts instead (`min` per reservation,
 *   `min_duration`), and `limit`: up to `limit` offers, best first (src/domain/offers.ts).
 * - A refused create or update answers Blazar's error body plus `reason` and the same `offers`
 *   (`offersOnRefusal`), computed only when refusing.
 * Offers are found by the calendars' own search (searchLease), checked by the usage policy's own
 * check (wouldRefuse), and stored (src/db/offers.ts) until they expire. Members see counts only;
 * admins also see what each would book (the hosts, by ResourceType.wouldBook).
 */
import { randomUUID } from 'node:crypto';
import { Router } from 'express';
import { z } from 'zod';
import { reuseEnd, reuseStart, wholeMinuteDown, wholeMinuteUp } from '../domain/dates';
import { searchLease } from '../domain/fit-search';
import { ApplicationFailure } from '@temporalio/common';
import { LeaseErrorType, newLease, type Lease, type NewLeaseRequest, type Reservation } from '../domain/lease';
import { EXTENSION_HORIZON_MS, extensionSteps, planOffers, sortOffers, type OfferCount, type PlannedOffer } from '../domain/offers';
import type { FitSearch, ResourceTypes } from '../domain/resource-plugin';
import { footprintOf } from '../domain/usage';
import { saveOffers, type OfferRow } from '../db/offers';
import { endExpiredOfferHolds } from '../db/offer-holds';
import { inTransaction } from '../db/transaction';
import type { Pool } from '../db/pool';
import type { UsagePolicyEnforcer } from '../policy';
import { identityOf, type Identity } from './auth';
import { ApiError, parseRequest } from './errors';
import { createLeaseSchema, DEFAULT_MAX_RESERVATIONS_PER_LEASE, leaseReservationsSchema, newLeaseRequest, requestDateOrNowSchema, requestDateSchema } from './lease-schemas';
import type { NewLeaseDeps } from './leases';
import { refuseUnknownPropertyKeys } from './property-keys';

/** The longest lease an offer is searched for: a year, as the availability window. */
const MAX_DURATION_MINUTES = 366 * 1440;
/** Offers per answer at most; each costs searches (MAX_OFFER_SEARCHES bounds them whatever the limit). */
export const MAX_OFFER_LIMIT = 20;
export const DEFAULT_OFFER_LIMIT = 5;

export interface OfferDeps {
  pool: Pool;
  types: ResourceTypes;
  usagePolicy?: UsagePolicyEnforcer;
  provisioningLeadMs: number;
  /** How long an offer is kept (LK_OFFER_TTL_MINUTES). */
  offerTtlMs: number;
  maxReservationsPerLease?: number;
}

/** What offers are asked for: parsed reservations, and what the user accepts instead. */
export interface OfferAsk {
  reservations: Array<{ resource_type: string; params: Record<string, unknown> }>;
  /** Per reservation: the least count accepted (undefined: its own parameters say). */
  mins: Array<number | undefined>;
  /** The booking that follows may cut preemptible leases (FitLimits.mayPreempt): unset, their bookings count as taken. */
  mayPreempt?: boolean;
  startMs: number;
  endBeforeMs?: number;
  durationMs: number;
  minDurationMs: number;
  limit: number;
}

export interface OfferJson {
  id: string;
  kind: string;
  start_date: string;
  end_date: string;
  reservations: Array<Record<string, unknown>>;
  reason: string;
  expires_at: string;
  /** The usage policy's rule that would refuse it (listed only when nothing else exists). */
  refused_by?: string;
}

const minutesParam = (what: string) => z.number({ error: `expected a whole number of minutes (${what})` }).int('expected a whole number of minutes').min(1, 'must be at least 1 minute').max(MAX_DURATION_MINUTES, `must be at most ${MAX_DURATION_MINUTES} minutes (366 days)`);

function offersRequestSchema(maxReservations: number) {
  return z.strictObject({
    reservations: z.array(z.unknown(), { error: 'expected a list of reservations' }).min(1, 'at least one reservation').max(maxReservations, `at most ${maxReservations} reservations per lease`),
    duration: minutesParam('the lease\'s length'),
    min_duration: minutesParam('the shortest lease accepted').optional(),
    start_after: requestDateOrNowSchema.optional(),
    end_before: requestDateSchema.optional(),
    limit: z.number({ error: 'expected a whole number' }).int('expected a whole number').min(1, 'must be at least 1').max(MAX_OFFER_LIMIT, `must be at most ${MAX_OFFER_LIMIT}`).optional(),
  });
}

/**
 * A reservation's `min`: Blazar's own parameter where its type has one (hosts), else the least
 * `amount` accepted, taken out before the type's schema (which refuses keys it does not know).
 */
function offerMinOf(types: ResourceTypes, raw: unknown): { reservation: unknown; min?: unknown } {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw) || !('min' in raw)) return { reservation: raw };
  const { resource_type: resourceType, min, ...params } = raw as Record<string, unknown>;
  const type = typeof resourceType === 'string' ? types.get(resourceType) : undefined;
  if (!type?.offers || type.paramsSchema.safeParse({ ...params, min }).success) return { reservation: raw };
  return { reservation: { resource_type: resourceType, ...params }, min };
}

/** The body of POST /v1/offers as an OfferAsk, or a 400 with Blazar's error body naming the problem. */
export async function parseOfferRequest(deps: OfferDeps, identity: Identity, body: unknown, nowMs: number): Promise<OfferAsk> {
  const maxReservations = deps.maxReservationsPerLease ?? DEFAULT_MAX_RESERVATIONS_PER_LEASE;
  const parsed = parseRequest(offersRequestSchema(maxReservations), body);
  const split = parsed.reservations.map((raw) => offerMinOf(deps.types, raw));
  const reservations = parseRequest(leaseReservationsSchema(deps.types, maxReservations), split.map((s) => s.reservation), 'reservations');
  const mins = split.map(({ min }, i) => {
    if (min === undefined) return undefined;
    const { offers } = deps.types.get(reservations[i].resource_type) ?? {};
    if (!offers) throw new ApiError(400, `reservations[${i}].min: ${reservations[i].resource_type} has no count to lower`);
    const { asked } = offers.count(reservations[i].params);
    const floor = offers.floor?.(reservations[i].params) ?? 1;
    if (typeof min !== 'number' || !Number.isInteger(min) || min < floor || min > asked) throw new ApiError(400, `reservations[${i}].min: expected a whole number from ${floor} to ${asked} (its amount)`);
    return min;
  });
  await refuseUnknownPropertyKeys(deps.types, identity, reservations);
  const startMs = parsed.start_after === undefined || parsed.start_after === 'now' ? wholeMinuteUp(nowMs) : parsed.start_after;
  if (startMs < wholeMinuteDown(nowMs)) throw new ApiError(400, 'start_after must not be in the past');
  const durationMs = parsed.duration * 60_000;
  if (parsed.end_before !== undefined && parsed.end_before < startMs + (parsed.min_duration ?? parsed.duration) * 60_000) {
    throw new ApiError(400, 'end_before must leave room for the lease after start_after (its duration, or min_duration)');
  }
  if (parsed.min_duration !== undefined && parsed.min_duration > parsed.duration) throw new ApiError(400, 'min_duration must not be longer than duration');
  return {
    reservations,
    mins,
    startMs,
    endBeforeMs: parsed.end_before,
    durationMs,
    minDurationMs: (parsed.min_duration ?? parsed.duration) * 60_000,
    limit: parsed.limit ?? DEFAULT_OFFER_LIMIT,
  };
}

/**
 * The offers for an ask, best first, stored until they expire. Offers the usage policy refuses are
 * left out, unless nothing else exists: then they are listed with the rule (`refused_by`).
 */
export async function makeOffers(deps: OfferDeps, identity: Identity, ask: OfferAsk, nowMs = Date.now()): Promise<{ offers: OfferJson[]; note?: string }> {
  // Holds past their expiry free their capacity before it is searched, whether or not a worker ended them.
  await inTransaction(deps.pool, (client) => endExpiredOfferHolds(client));
  const reservations: Reservation[] = ask.reservations.map((r, i) => ({ id: `offer-${i}`, resource_type: r.resource_type, status: 'pending', params: r.params }));
  const shapeOf = (r: Reservation) => deps.types.get(r.resource_type)?.offers;
  const counts = reservations.map((r, i): OfferCount | undefined => {
    const own = shapeOf(r)?.count(r.params);
    return own && { asked: own.asked, least: ask.mins[i] ?? own.least };
  });
  const plan = await planOffers(
    {
      counts,
      withCounts: (wanted) => reservations.map((r, i) => (wanted[i] === undefined ? r : { ...r, params: shapeOf(r)!.withCount(r.params, wanted[i]) })),
      startMs: ask.startMs,
      endBeforeMs: ask.endBeforeMs,
      durationMs: ask.durationMs,
      minDurationMs: ask.minDurationMs,
      limit: ask.limit,
    },
    (searched, startMs, durationMs, limits) => searchLease(deps.types, identity.projectId, searched, startMs, durationMs, deps.provisioningLeadMs, ask.mayPreempt ? { ...limits, mayPreempt: true } : limits).catch(neverFits),
  );
  // One after another: a request's checks take one database connection at a time, never the pool's
  // slots other projects' admissions need.
  const checked: Array<{ offer: PlannedOffer; refusal: Awaited<ReturnType<typeof policyRefusalOf>> }> = [];
  for (const offer of plan.offers) checked.push({ offer, refusal: await policyRefusalOf(deps, identity, offer, nowMs) });
  const allowed = checked.filter((c) => !c.refusal);
  const listed = sortOffers((allowed.length > 0 ? allowed : checked).map((c) => ({ ...c.offer, refusal: c.refusal })));
  const expiresAtMs = nowMs + deps.offerTtlMs;
  const rows: OfferRow[] = listed.map((offer) => ({
    id: randomUUID(),
    projectId: identity.projectId,
    kind: offer.kind,
    startMs: offer.startMs,
    endMs: offer.endMs,
    leaseBody: leaseBodyOf(offer),
    expiresAtMs,
  }));
  await saveOffers(deps.pool, rows, nowMs);
  // What each offer would book, for admins only (members see counts): one offer after another, as the checks above.
  const booked: Array<Map<string, Record<string, unknown>>> = [];
  if (identity.isAdmin) for (const offer of listed) booked.push(await wouldBook(deps, offer));
  const offers = listed.map((offer, i): OfferJson => ({
    id: rows[i].id,
    kind: offer.kind,
    start_date: reuseStart(offer.startMs),
    end_date: reuseEnd(offer.endMs),
    reservations: offer.reservations.map((r) => ({ resource_type: r.resource_type, ...(shapeOf(r)?.describe(r.params) ?? {}), ...booked[i]?.get(r.id) })),
    reason: offer.refusal ? `${offer.reason}; but the usage policy refuses it (${offer.refusal.rule}): ${offer.refusal.message}` : offer.reason,
    expires_at: new Date(expiresAtMs).toISOString(),
    ...(offer.refusal ? { refused_by: offer.refusal.rule } : {}),
  }));
  return { offers, ...(plan.cutShort ? { note: `the search stopped at its work bound (${plan.searches} searches): there may be more than these offers` } : {}) };
}

/** What an offer's reservations would book now, per reservation id, from the types that can tell (ResourceType.wouldBook). */
async function wouldBook(deps: OfferDeps, offer: PlannedOffer): Promise<Map<string, Record<string, unknown>>> {
  const found = new Map<string, Record<string, unknown>>();
  for (const resourceType of new Set(offer.reservations.map((r) => r.resource_type))) {
    const type = deps.types.get(resourceType);
    if (!type?.wouldBook) continue;
    const ofType = offer.reservations.filter((r) => r.resource_type === resourceType);
    for (const [id, fields] of await type.wouldBook(ofType, offer.startMs, offer.endMs, deps.provisioningLeadMs)) found.set(id, fields);
  }
  return found;
}

/** A search a calendar refuses outright (more hosts than are enrolled): for offers, a count that never fits. */
export function neverFits(err: unknown): FitSearch {
  if (err instanceof ApplicationFailure && err.type === LeaseErrorType.conflict) return { longestMs: 0, cutShort: false, tried: 0 };
  throw err;
}

/** The lease body an offer stands for, as a create takes it (stored with the offer: what a hold or accept books). */
function leaseBodyOf(offer: Pick<PlannedOffer, 'startMs' | 'endMs' | 'reservations'>): Record<string, unknown> {
  return { start_date: reuseStart(offer.startMs), end_date: reuseEnd(offer.endMs), reservations: offer.reservations.map((r) => ({ resource_type: r.resource_type, ...r.params })) };
}

/**
 * The lease an offer stands for, as a create of its body would ask it, under `id` with `fields`
 * (the name, and what an accept adds): parsed by the create's own schema and date rules (400), a
 * start that has passed made now (the end stays). The one draft behind an offer's policy check
 * and its accept (src/api/offer-holds.ts).
 */
export function offerLeaseRequest(
  deps: Pick<NewLeaseDeps, 'types' | 'maxReservationsPerLease' | 'provisioningLeadMs' | 'notifyBeforeEndMs' | 'idleLeases'>,
  identity: Identity,
  offer: { startMs: number; leaseBody: Record<string, unknown> },
  id: string,
  fields: Record<string, unknown>,
  nowMs = Date.now(),
): NewLeaseRequest {
  const body = parseRequest(createLeaseSchema(deps.types, deps.maxReservationsPerLease), { ...offer.leaseBody, ...(offer.startMs <= nowMs ? { start_date: 'now' } : {}), ...fields });
  const request = newLeaseRequest(deps, identity, body, id);
  newLease(request); // Blazar's date rules (400)
  return request;
}

/** The usage policy's refusal of the lease an offer stands for, by the create's own check (its footprint the type's, as nothing is booked). */
async function policyRefusalOf(deps: OfferDeps, identity: Identity, offer: PlannedOffer, nowMs: number) {
  if (!deps.usagePolicy) return undefined;
  const request = offerLeaseRequest(deps, identity, { startMs: offer.startMs, leaseBody: leaseBodyOf(offer) }, randomUUID(), { name: 'offer' }, nowMs);
  return deps.usagePolicy.wouldRefuse(deps.pool, { next: draftLease(deps.types, request), byAdmin: identity.isAdmin });
}

/** The lease a request would make, nothing booked: each reservation's footprint as its type tells from its parameters (the policy's previews). */
export function draftLease(types: ResourceTypes, request: NewLeaseRequest): Lease {
  const reservations = request.reservations.map((r) => ({ ...r, footprint: types.get(r.resource_type)?.offers?.footprint?.(r.params) ?? footprintOf(r) }));
  return newLease({ ...request, reservations });
}

export function offersRouter(deps: OfferDeps): Router {
  const router = Router();
  router.post('/offers', async (req, res) => {
    const identity = identityOf(res);
    const nowMs = Date.now();
    const ask = await parseOfferRequest(deps, identity, req.body, nowMs);
    // Asked before a create, which may cut preemptible leases (issue 43); a hold of such an offer cannot, and is refused with offers of its own.
    res.json(await makeOffers(deps, identity, { ...ask, mayPreempt: true }, nowMs));
  });
  return router;
}

/**
 * What a refusal was about, for its `reason`: a usage policy rule (its details name it), hosts
 * failed, or capacity (a calendar's 409, which says when the lease would fit). Undefined for the
 * other refusals (a name taken, a lease not settled): those carry no offers.
 */
export function refusalReason(err: ApiError): string | undefined {
  const extra = err.extra ?? {};
  if (typeof extra.rule === 'string') return `policy:${extra.rule}`;
  if (err.status !== 409) return undefined;
  if (typeof extra.reason === 'string') return extra.reason;
  return 'earliest_start' in extra || 'latest_end' in extra ? 'capacity' : undefined;
}

/**
 * Runs a create or an update; a refusal for capacity or a usage policy rule is answered as it was
 * (Blazar's error body, its fields) plus `reason` and `offers`, computed only then. Finding offers
 * never hides the refusal: if that fails, the refusal goes out with no offers.
 */
export async function refusedWithOffers<T>(work: () => Promise<T>, offersFor: (refusal: ApiError) => Promise<{ offers: OfferJson[]; note?: string }>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    const reason = refusalReason(err);
    if (reason === undefined) throw err;
    const found = await offersFor(err).catch(() => ({ offers: [] as OfferJson[], note: 'offers could not be found just now' }));
    throw new ApiError(err.status, err.message, err.errorName, { ...err.extra, reason, offers: found.offers, ...(found.note ? { offers_note: found.note } : {}) }, err.cause);
  }
}

/**
 * Extension offers for a lease: up to `latestEndMs` (the latest end its resources allow), and
 * shorter steps (extensionSteps), each an `end_date` to PUT; those the usage policy refuses are
 * left out (or listed with the rule when none is allowed). Stored as offers are, for the lease's project.
 */
export async function extensionOffers(deps: OfferDeps, identity: Identity, lease: Lease, latestEndMs: number, nowMs = Date.now()): Promise<{ offers: OfferJson[] }> {
  const expiresAtMs = nowMs + deps.offerTtlMs;
  const ends = extensionSteps(lease.endMs, Math.min(latestEndMs, lease.endMs + EXTENSION_HORIZON_MS));
  const checked: Array<{ endMs: number; refusal: Awaited<ReturnType<UsagePolicyEnforcer['wouldRefuse']>> }> = [];
  for (const endMs of ends) checked.push({ endMs, refusal: await deps.usagePolicy?.wouldRefuse(deps.pool, { next: { ...lease, endMs }, previous: lease, byAdmin: identity.isAdmin }) });
  const allowed = checked.filter((c) => !c.refusal);
  const listed = allowed.length > 0 ? allowed : checked;
  const rows: OfferRow[] = listed.map(({ endMs }) => ({ id: randomUUID(), projectId: lease.projectId, kind: 'extension', startMs: lease.startMs, endMs, leaseBody: { lease_id: lease.id, end_date: reuseEnd(endMs) }, expiresAtMs }));
  await saveOffers(deps.pool, rows, nowMs);
  const described = lease.reservations.map((r) => ({ resource_type: r.resource_type, ...(deps.types.get(r.resource_type)?.offers?.describe(r.params) ?? {}) }));
  return {
    offers: rows.map((row, i) => {
      const { refusal } = listed[i];
      const reason = row.endMs === ends[0] ? 'the longest extension possible now: its resources are free until then' : `a shorter extension, by ${Math.round((row.endMs - lease.endMs) / 60_000)} min`;
      return {
        id: row.id,
        kind: 'extension',
        start_date: reuseStart(lease.startMs),
        end_date: reuseEnd(row.endMs),
        reservations: described,
        reason: refusal ? `${reason}; but the usage policy refuses it (${refusal.rule}): ${refusal.message}` : reason,
        expires_at: new Date(expiresAtMs).toISOString(),
        ...(refusal ? { refused_by: refusal.rule } : {}),
      };
    }),
  };
}

/**
 * GET /v1/leases/{id}/extension-offers: how far the lease can be extended now (the earliest of its
 * types' latest ends, keeping its resources), and shorter steps. A type that cannot tell leaves a note.
 */
export async function leaseExtensionOffers(deps: OfferDeps, identity: Identity, lease: Lease): Promise<{ offers: OfferJson[]; note?: string }> {
  if (lease.status !== 'ACTIVE' && lease.status !== 'PENDING') throw new ApiError(409, `Lease ${lease.name} is ${lease.status}: only a pending or active lease can be extended`);
  const types = [...new Set(lease.reservations.map((r) => r.resource_type))];
  const silent = types.filter((type) => !deps.types.get(type)?.latestEnd);
  if (silent.length > 0) return { offers: [], note: `extensions of ${silent.join(', ')} reservations cannot be previewed: PUT the end_date you want; a refusal names the latest possible end` };
  const ends = await Promise.all(types.map((type) => deps.types.get(type)!.latestEnd!(lease.id)));
  const latest = Math.min(Infinity, ...ends.map((end) => end ?? Infinity));
  const found = await extensionOffers(deps, identity, lease, latest);
  return found.offers.length > 0 ? found : { ...found, note: 'its resources are booked right after its end: it cannot be extended now' };
}
