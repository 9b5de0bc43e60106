/**
 * Our extension: series of recurring leases (docs/api.md, "Recurring leases").
 * - `POST /v1/leases` with `recurrence` (an RRULE subset, src/domain/recurrence.ts): one lease per
 *   occurrence, each with its own workflow, tied by `series_id`. All or nothing unless `partial`.
 * - `GET /v1/series/{id}`, `PUT /v1/series/{id}` (new time of day or duration from an occurrence
 *   on, or a new count or end), `DELETE /v1/series/{id}[?from=<lease id>]`.
 * - An Idempotency-Key on the create: the series id comes from it, and the create runs under the
 *   series's lock, so a retry (or a concurrent repeat) answers the series made first.
 * Where every type books in the API (admitsInApi), the occurrences are admitted in one
 * transaction; otherwise one after another through the lease workflows, and in all-or-nothing
 * mode the admitted ones are deleted again on the first refusal (a saga whose compensation's
 * failure is reported beside the refusal, never instead of it).
 */
import { createHash, randomUUID } from 'node:crypto';
import { Router } from 'express';
import { z } from 'zod';
import type { PoolClient } from 'pg';
import { formatRequestDate, wholeMinuteDown } from '../domain/dates';
import { isUuid, newLease, notStarted, type Lease, type NewLeaseRequest } from '../domain/lease';
import { expandRecurrence, formatRecurrence, parseRecurrence, RecurrenceError, RECURRENCE_HORIZON_MS, type Occurrence } from '../domain/recurrence';
import { toBlazarLease, uuidShaped } from '../domain/blazar-format';
import { findLease, leasesOfSeries } from '../db/leases';
import { findSeries, findSeriesEvenDeleted, forgetSeries, insertSeries, markSeriesDeleted, setRefusedOccurrences, setSeriesRule, settleSeries, withSeriesLock, type RefusedOccurrence, type SeriesRow } from '../db/series';
import { admissionError, admitSeriesInApi, admitsInApi } from './admission';
import { identityOf, type Identity } from './auth';
import { ApiError, BusyError, parseRequest } from './errors';
import { changeLease, claimKeyFor, createLease, idempotentSeriesId, removeLease, requestHash } from './lease-commands';
import { createLeaseSchema, newLeaseRequest, requestDateOrNowSchema, requestDateSchema } from './lease-schemas';
import { refuseAdminOnlyPolicies, type NewLeaseDeps } from './leases';
import { refuseUnknownPropertyKeys } from './property-keys';
import { makeOffers, refusalReason, type OfferJson } from './offers';

export const DEFAULT_MAX_OCCURRENCES = 50;
/**
 * Occurrences admitted in one transaction at most: its bookings stay uncommitted until the last
 * occurrence is checked, and another project's create on those hosts and hours waits on them
 * (bench:series: 100 occurrences held such creates up to 3 s, 50 up to 1 s). A longer series is
 * admitted one occurrence after another through the lease workflows (the saga below).
 */
const MAX_OCCURRENCES_IN_TRANSACTION = 50;
/** Refused occurrences an answer finds offers for (each costs a bounded search); the rest say so. */
const MAX_REFUSALS_WITH_OFFERS = 10;
const OFFERS_PER_REFUSAL = 3;
const MAX_DURATION_MINUTES = 366 * 1440;

type CreateBody = ReturnType<ReturnType<typeof createLeaseSchema>['parse']>;

/** An occurrence that was refused, as answers show it. */
interface RefusedJson {
  name: string;
  start_date: string;
  end_date: string;
  reason: string;
  error_message: string;
  offers: OfferJson[];
  offers_note?: string;
}

/** The name of a series's `index`th occurrence (from 0): unique per project as lease names are, and telling its place. */
const occurrenceName = (name: string, index: number) => `${name}-${index + 1}`;

/** The lease id of a create try's `index`th occurrence: a retry of the create finds what that try admitted. */
const occurrenceLeaseId = (seriesId: string, attempt: string, index: number) => uuidShaped(createHash('sha256').update(JSON.stringify(['occurrence', seriesId, attempt, index])).digest('hex'), 4);

function limitsOf(deps: NewLeaseDeps) {
  return { maxOccurrences: deps.maxOccurrences ?? DEFAULT_MAX_OCCURRENCES, horizonMs: RECURRENCE_HORIZON_MS };
}

/**
 * The occurrences of a rule for a lease, or a 400 naming the part of the rule that is wrong; or,
 * for a rule a PUT's `count` or `until` made (`field`), naming that field.
 */
function occurrencesOf(deps: NewLeaseDeps, rule: string, startMs: number, endMs: number, field?: 'count' | 'until'): Occurrence[] {
  try {
    return expandRecurrence(parseRecurrence(rule, limitsOf(deps)), startMs, endMs, limitsOf(deps));
  } catch (err) {
    if (err instanceof RecurrenceError) throw new ApiError(400, field === undefined ? `recurrence: ${err.part}: ${err.message}` : `${field}: ${err.message}`);
    throw err;
  }
}

/** Whether an answer refuses an occurrence for what it asks (capacity, maintenance, a policy rule): then it carries offers. */
const isOccurrenceRefusal = (err: ApiError) => refusalReason(err) !== undefined;
/** An occurrence's refusal in a word: a refusal's reason, else `invalid` (400) or `conflict` (a lease not settled). */
const reasonOf = (err: ApiError) => refusalReason(err) ?? (err.status === 400 ? 'invalid' : 'conflict');

/** The refused occurrences as answers show them, with offers for the first MAX_REFUSALS_WITH_OFFERS. */
async function refusedJson(
  deps: NewLeaseDeps,
  identity: Identity,
  refused: Array<{ lease: Pick<Lease, 'name' | 'startMs' | 'endMs'> & { reservations: Array<Pick<Lease['reservations'][number], 'resource_type' | 'params'>> }; error: ApiError }>,
): Promise<RefusedJson[]> {
  const answers: RefusedJson[] = [];
  for (const [i, { lease, error }] of refused.entries()) {
    const base = { name: lease.name, start_date: formatRequestDate(lease.startMs), end_date: formatRequestDate(lease.endMs), reason: reasonOf(error), error_message: error.message };
    // A change refused for what it is (a started occurrence's start, a lease being deleted): nothing else would fit better.
    if (!isOccurrenceRefusal(error)) {
      answers.push({ ...base, offers: [] });
      continue;
    }
    if (!deps.offers || i >= MAX_REFUSALS_WITH_OFFERS) {
      answers.push({ ...base, offers: [], ...(deps.offers ? { offers_note: `offers are found for the first ${MAX_REFUSALS_WITH_OFFERS} refused occurrences only` } : {}) });
      continue;
    }
    const durationMs = lease.endMs - lease.startMs;
    const reservations = lease.reservations.map((r) => ({ resource_type: r.resource_type, params: r.params }));
    const startMs = Math.max(lease.startMs, wholeMinuteDown(Date.now()));
    // Finding offers never hides the refusal.
    const found = await makeOffers(deps.offers, identity, { reservations, mins: [], startMs, durationMs, minDurationMs: durationMs, limit: OFFERS_PER_REFUSAL }).catch(() => ({ offers: [] as OfferJson[], note: 'offers could not be found just now' }));
    answers.push({ ...base, offers: found.offers, ...(found.note ? { offers_note: found.note } : {}) });
  }
  return answers;
}

/** A refusal of the whole series (all or nothing): 409, or 403 when only policy rules refused; Blazar's body plus what failed. */
function seriesRefusal(refused: RefusedJson[], extra: Record<string, unknown> = {}, what: 'created' | 'changed' = 'created'): ApiError {
  const first = refused[0];
  const status = refused.every((r) => r.reason.startsWith('policy:')) ? 403 : 409;
  const more = refused.length > 1 ? ` (and ${refused.length - 1} more occurrence${refused.length > 2 ? 's' : ''})` : '';
  return new ApiError(status, `The series was not ${what}: occurrence ${first.name} (${first.start_date}) was refused${more}: ${first.error_message}`, status, {
    reason: first.reason,
    offers: first.offers,
    refused,
    ...extra,
  });
}

function seriesJson(series: SeriesRow, occurrences: Lease[]) {
  return {
    id: series.id,
    name: series.name,
    project_id: series.projectId,
    recurrence: series.recurrence,
    created_at: new Date(series.createdMs).toISOString(),
    occurrences: occurrences.map((l) => ({ lease_id: l.id, name: l.name, start_date: formatRequestDate(l.startMs), end_date: formatRequestDate(l.endMs), status: l.status })),
    refused: series.refused.map((r) => ({ name: r.name, start_date: formatRequestDate(r.startMs), end_date: formatRequestDate(r.endMs), reason: r.reason, error_message: r.message })),
  };
}

/**
 * The leases a create with `recurrence` asks for, one per occurrence (400 for a bad rule or a
 * name too long for the series), tied by `seriesId`; the create (below) and the policy's dry run
 * (POST /v1/policy/check) both make them so.
 */
export function occurrenceRequests(deps: NewLeaseDeps, identity: Identity, body: CreateBody, seriesId: string, attempt?: string): Array<{ request: NewLeaseRequest; occurrence: Occurrence }> {
  const first = newLeaseRequest(deps, identity, body, randomUUID());
  newLease(first); // Blazar's date rules (400) before anything starts
  const startMs = first.start === 'now' ? wholeMinuteDown(first.requestedMs) : first.start;
  const occurrences = occurrencesOf(deps, body.recurrence!, startMs, first.end);
  const lastName = occurrenceName(body.name, occurrences.length - 1);
  if (lastName.length > 80) throw new ApiError(400, `name: at most ${80 - (lastName.length - body.name.length)} characters for a series of ${occurrences.length} (each occurrence is named ${JSON.stringify(`${body.name.slice(0, 10)}…-N`)})`);
  return occurrences.map((o, i) => ({
    occurrence: o,
    request: {
      ...first,
      id: attempt === undefined ? randomUUID() : occurrenceLeaseId(seriesId, attempt, i),
      name: occurrenceName(body.name, i),
      // 'now' stays 'now' when the first occurrence is the lease asked for; a start on a day the rule does not name is no occurrence.
      start: first.start === 'now' && o.startMs === startMs ? 'now' : o.startMs,
      end: o.endMs,
      beforeEnd: first.beforeEnd === undefined ? undefined : first.beforeEnd + (o.startMs - startMs),
      reservations: first.reservations.map((r) => ({ ...r, id: randomUUID() })),
      seriesId,
    },
  }));
}

/**
 * POST /v1/leases with `recurrence`: the series and its admitted occurrences (201), or the refusal
 * of the whole series with every occurrence that failed and offers for each. With an
 * Idempotency-Key, as a lease create: the same request again answers the series made first (no
 * second one, even when both arrive together: the second waits on the series's lock); another
 * request with the key is a 409, and the key of a deleted series a 410. A refused create leaves
 * no series, so its retry is admitted afresh; one whose series row could not be removed answers
 * its refusal again. A create cut short (the API stopped during the saga, or its undo failed) left
 * its row `creating`: its retry deletes what that try admitted, then creates the series anew.
 */
export async function createSeries(deps: NewLeaseDeps, identity: Identity, body: CreateBody, raw: unknown, idempotencyKey?: string) {
  if (idempotencyKey === undefined) return createNewSeries(deps, identity, body, raw, randomUUID());
  const seriesId = idempotentSeriesId(identity.projectId, identity.userId, idempotencyKey);
  const hash = requestHash(identity.projectId, raw);
  await claimKeyFor(deps.pool, 'series', identity.projectId, identity.userId, idempotencyKey);
  const outcome = await withSeriesLock(deps.pool, { seriesId, projectId: identity.projectId }, deps.commands.timeoutMs, async () => {
    const earlier = await findSeriesEvenDeleted(deps.pool, seriesId);
    if (!earlier) return createNewSeries(deps, identity, body, raw, seriesId, hash);
    if (earlier.deleted) throw new ApiError(410, `Series ${seriesId}, created with this Idempotency-Key, was deleted: use another key for a new series`);
    if (earlier.requestHash !== hash) throw new ApiError(409, 'this Idempotency-Key was already used for a different request');
    if (earlier.state === 'refused') throw seriesRefusal(await storedRefusalsJson(deps, identity, earlier, body.reservations ?? []));
    if (earlier.state === 'creating') {
      await undoCutShortCreate(deps, identity, body, earlier);
      return createNewSeries(deps, identity, body, raw, seriesId, hash);
    }
    return seriesCreatedAnswer(deps, identity, earlier, await leasesOfSeries(deps.pool, seriesId), body.reservations ?? []);
  });
  // The holder may be this key's first create, or a change or delete of its series.
  if (!outcome.ran) throw new BusyError('the series of this Idempotency-Key is being created, changed or deleted by another request: try again shortly');
  return outcome.value;
}

/** A refused occurrence the series keeps (a gap), as its refusal was answered (offers are found again). */
function storedRefusal(refused: RefusedOccurrence): ApiError {
  if (refused.reason.startsWith('policy:')) return new ApiError(403, refused.message, 403, { rule: refused.reason.slice('policy:'.length) });
  return refused.reason === 'invalid' ? new ApiError(400, refused.message) : new ApiError(409, refused.message, 409, { reason: refused.reason });
}

/** The series's refused occurrences, answered as when they were refused (offers are found again). */
function storedRefusalsJson(deps: NewLeaseDeps, identity: Identity, series: SeriesRow, reservations: Array<{ resource_type: string; params: Record<string, unknown> }>) {
  return refusedJson(
    deps,
    identity,
    series.refused.map((r) => ({ lease: { name: r.name, startMs: r.startMs, endMs: r.endMs, reservations }, error: storedRefusal(r) })),
  );
}

/**
 * A create with this Idempotency-Key was cut short (its row is still `creating`): the leases its try
 * may have admitted (their ids derive from its attempt) are deleted and its row removed, so that the
 * create can start again; a delete that fails is a 503 (nothing is created twice).
 */
async function undoCutShortCreate(deps: NewLeaseDeps, identity: Identity, body: CreateBody, earlier: SeriesRow) {
  const leaseIds = earlier.attempt === undefined ? (await leasesOfSeries(deps.pool, earlier.id)).map((l) => l.id) : occurrenceRequests(deps, identity, body, earlier.id, earlier.attempt).map((o) => o.request.id);
  const compensation = await compensate(deps, leaseIds);
  if (Object.keys(compensation).length > 0) {
    throw new ApiError(503, 'an earlier try of this create was cut short, and the occurrences it admitted could not all be deleted yet: try again', 503, compensation);
  }
  await forgetSeries(deps.pool, earlier.id);
}

/** A create's answer for a series made before (a retry with its Idempotency-Key): its occurrences and gaps as they stand. */
async function seriesCreatedAnswer(deps: NewLeaseDeps, identity: Identity, series: SeriesRow, occurrences: Lease[], reservations: Array<{ resource_type: string; params: Record<string, unknown> }>) {
  const refused = await storedRefusalsJson(deps, identity, series, reservations);
  return { ...(occurrences[0] ? { lease: toBlazarLease(occurrences[0]) } : {}), series: seriesJson(series, occurrences), leases: occurrences.map(toBlazarLease), refused };
}

async function createNewSeries(deps: NewLeaseDeps, identity: Identity, body: CreateBody, raw: unknown, seriesId: string, idempotentHash?: string) {
  const partial = body.partial ?? false;
  // Each try of a create has its own lease ids (a retry of one cut short deletes that try's leases first).
  const attempt = randomUUID();
  const expanded = occurrenceRequests(deps, identity, body, seriesId, attempt);
  const occurrences = expanded.map((e) => e.occurrence);
  const requests = expanded.map(({ request }, i) => ({ request, requestHash: requestHash(identity.projectId, { series: seriesId, occurrence: i }) }));
  const template = Object.fromEntries(Object.entries(raw as Record<string, unknown>).filter(([key]) => key !== 'recurrence' && key !== 'partial'));
  // A `now` start is kept as the minute its occurrences were counted from: a grow rebuilds the window from it.
  if (body.start_date === 'now') template.start_date = formatRequestDate(wholeMinuteDown(expanded[0].request.requestedMs));
  const series: Omit<SeriesRow, 'createdMs'> = { id: seriesId, projectId: identity.projectId, name: body.name, recurrence: body.recurrence!, template, refused: [], state: 'created', attempt, ...(idempotentHash ? { requestHash: idempotentHash } : {}) };
  const refusedRows = (refused: Array<{ index: number; error: ApiError }>): RefusedOccurrence[] =>
    refused.map(({ index, error }) => ({ name: requests[index].request.name, startMs: occurrences[index].startMs, endMs: occurrences[index].endMs, reason: reasonOf(error), message: error.message }));

  let admitted: Lease[];
  let refused: Array<{ index: number; error: ApiError }>;
  let compensation: Record<string, unknown> = {};
  if (deps.admission && requests.length <= MAX_OCCURRENCES_IN_TRANSACTION && requests.every((r) => admitsInApi(deps.admission!, r.request))) {
    const outcome = await admitSeriesInApi(deps.admission, requests, {
      partial,
      isRefusal: isOccurrenceRefusal,
      record: async (client: PoolClient, refusedNow) => insertSeries(client, { ...series, refused: refusedRows(refusedNow) }),
    });
    ({ admitted, refused } = outcome);
  } else {
    // `creating` until the saga ends: a retry never answers a series whose create did not end (a crash, an undo that failed).
    await insertSeries(deps.pool, { ...series, state: 'creating' });
    // A refused series was never answered: it goes with its occurrences. Marked refused first: a row
    // that cannot be removed answers the refusal again; after an outage it stays `creating`.
    ({ admitted, refused, compensation } = await admitOneByOne(deps, requests, partial, async (leaseIds, refusedNow) => {
      if (refusedNow) await settleSeries(deps.pool, seriesId, 'refused', refusedRows(refusedNow));
      return compensate(deps, leaseIds, () => forgetSeries(deps.pool, seriesId));
    }));
    if (refused.length === 0 || partial) await settleSeries(deps.pool, seriesId, 'created', refusedRows(refused));
  }
  const refusedLeases = refused.map(({ index, error }) => ({ lease: { ...newLease(requests[index].request), startMs: occurrences[index].startMs }, error }));
  const refusedAnswers = await refusedJson(deps, identity, refusedLeases);
  if (refused.length > 0 && !partial) throw seriesRefusal(refusedAnswers, compensation);
  const stored = (await findSeries(deps.pool, seriesId)) ?? { ...series, createdMs: Date.now() };
  return {
    // The first occurrence, for clients that read a create's `lease`.
    ...(admitted[0] ? { lease: toBlazarLease(admitted[0]) } : {}),
    series: seriesJson(stored, admitted),
    leases: admitted.map(toBlazarLease),
    refused: refusedAnswers,
  };
}

/**
 * The saga: each occurrence through the normal create path (its workflow admits it). All or
 * nothing: the first refusal stops, and the admitted ones are deleted again; a delete that fails
 * is reported (`compensation_failed`) beside the refusal. Partial: every occurrence is tried.
 */
async function admitOneByOne(
  deps: NewLeaseDeps,
  requests: Array<{ request: NewLeaseRequest; requestHash: string }>,
  partial: boolean,
  /** `refused`: what was refused, when the undo follows a refusal (else an outage). */
  undo: (leaseIds: string[], refused?: Array<{ index: number; error: ApiError }>) => Promise<Record<string, unknown>>,
) {
  const admitted: Lease[] = [];
  const refused: Array<{ index: number; error: ApiError }> = [];
  for (const [index, { request, requestHash: hash }] of requests.entries()) {
    try {
      admitted.push(await createLease(deps.commands, request, hash, false));
    } catch (err) {
      const answered = admissionError(err);
      if (!(answered instanceof ApiError) || !isOccurrenceRefusal(answered)) {
        // Not a refusal (an outage, no answer in time): the series is not made, partial or not. The
        // occurrence in flight may still be admitted by its workflow: its lease is deleted too.
        const compensation = await undo([...admitted.map((l) => l.id), request.id]);
        throw withCompensation(answered, compensation);
      }
      refused.push({ index, error: answered });
      if (!partial) break;
    }
  }
  if (refused.length === 0 || partial) return { admitted, refused, compensation: {} };
  return { admitted: [], refused, compensation: await undo(admitted.map((l) => l.id), refused) };
}

/** The error as answered, with the compensation's failures beside it (an error that is no ApiError stays as it is: a 500). */
function withCompensation(err: unknown, compensation: Record<string, unknown>): unknown {
  if (!(err instanceof ApiError) || Object.keys(compensation).length === 0) return err;
  return new ApiError(err.status, err.message, err.errorName, { ...err.extra, ...compensation }, err.cause);
}

/**
 * Deletes the occurrences admitted before a refusal, then (all gone) runs `afterAll`; answers which
 * could not be (their delete's failure never hides the refusal).
 */
async function compensate(deps: NewLeaseDeps, leaseIds: string[], afterAll: () => Promise<void> = () => Promise.resolve()): Promise<Record<string, unknown>> {
  const failed: Array<{ lease_id: string; error_message: string }> = [];
  for (const leaseId of leaseIds) {
    try {
      if ((await removeLease(deps.commands, leaseId, () => findLease(deps.pool, leaseId))) === 'past-deadline') failed.push({ lease_id: leaseId, error_message: 'its delete did not finish in time: it is still being deleted' });
    } catch (err) {
      // A lease never made (its workflow refused or never started it) is no failure.
      if (err instanceof ApiError && err.status === 404 && !(await findLease(deps.pool, leaseId))) continue;
      failed.push({ lease_id: leaseId, error_message: err instanceof Error ? err.message : String(err) });
    }
  }
  if (failed.length === 0) await afterAll().catch(() => undefined);
  return failed.length > 0 ? { compensation_failed: failed } : {};
}

/** A series of the caller's project (any, for an admin); others' do not exist (404, as leases). */
async function visibleSeries(deps: NewLeaseDeps, identity: Identity, id: string): Promise<SeriesRow> {
  const series = isUuid(id) ? await findSeries(deps.pool, id.toLowerCase()) : undefined;
  if (!series || (!identity.isAdmin && series.projectId !== identity.projectId)) throw new ApiError(404, `Object with {'series_id': '${id}'} not found`);
  return series;
}

/**
 * Runs a change or delete of a visible series holding its lock: concurrent ones run one after
 * another, each on the occurrences as the one before left them (a 409 when the wait exceeds the
 * API's workflow timeout). The series is read again under the lock (deleted meanwhile: 404).
 */
async function underSeriesLock<T>(deps: NewLeaseDeps, identity: Identity, id: string, use: (series: SeriesRow) => Promise<T>): Promise<T> {
  const series = await visibleSeries(deps, identity, id);
  const outcome = await withSeriesLock(deps.pool, { seriesId: series.id, projectId: series.projectId }, deps.commands.timeoutMs, async () => use(await visibleSeries(deps, identity, id)));
  if (!outcome.ran) throw new ApiError(409, `series ${series.id} is being changed or deleted by another request: try again`);
  return outcome.value;
}

/** The occurrences from `from` on: an occurrence's lease id, or a date (those starting at or after it). */
function occurrencesFrom(occurrences: Lease[], from: string | undefined): Lease[] {
  if (from === undefined) return occurrences;
  if (isUuid(from)) {
    const index = occurrences.findIndex((l) => l.id === from.toLowerCase());
    if (index < 0) throw new ApiError(400, `from: ${from} is not an occurrence of this series (GET the series for its occurrences)`);
    return occurrences.slice(index);
  }
  const date = requestDateSchema.safeParse(from);
  if (!date.success) throw new ApiError(400, 'from: expected the lease id of one of the series\'s occurrences, or a date "YYYY-MM-DD HH:MM" (UTC)');
  return occurrences.filter((l) => l.startMs >= date.data);
}

const TIME_OF_DAY = /^([01]\d|2[0-3]):([0-5]\d)$/;

const changeSeriesSchema = z
  .strictObject({
    from: z.string({ error: 'expected the lease id of an occurrence, or a date "YYYY-MM-DD HH:MM"' }).max(40, 'must be at most 40 characters').optional(),
    start_time: z.string({ error: 'expected a time of day "HH:MM" (UTC)' }).regex(TIME_OF_DAY, 'expected a time of day "HH:MM" (UTC)').optional(),
    duration: z.number({ error: 'expected a whole number of minutes' }).int('expected a whole number of minutes').min(1, 'must be at least 1 minute').max(MAX_DURATION_MINUTES, `must be at most ${MAX_DURATION_MINUTES} minutes`).optional(),
    partial: z.boolean({ error: 'expected true or false' }).optional(),
    // The rule's COUNT or UNTIL, counted from the series's first occurrence (LK_MAX_OCCURRENCES bounds it below).
    count: z.number({ error: 'expected a whole number of occurrences' }).int('expected a whole number of occurrences').min(1, 'must be at least 1').max(10_000, 'must be at most 10000').optional(),
    until: z.string({ error: 'expected a date "YYYY-MM-DD HH:MM" (UTC)' }).max(40, 'must be at most 40 characters').pipe(requestDateSchema).optional(),
  })
  .refine((b) => b.start_time !== undefined || b.duration !== undefined || b.count !== undefined || b.until !== undefined, {
    message: 'nothing to change: give start_time ("HH:MM", UTC) and/or duration (minutes), or count or until',
  })
  .refine((b) => b.count === undefined || b.until === undefined, { message: 'give count or until, not both (the rule has one of COUNT and UNTIL)' })
  .refine((b) => (b.count === undefined && b.until === undefined) || (b.from === undefined && b.start_time === undefined && b.duration === undefined), {
    message: 'count and until change where the series ends, counted from its first occurrence: give them without from, start_time or duration (in a PUT of their own)',
  });

/** A stored rule, read back with no occurrence bound (LK_MAX_OCCURRENCES may have been lowered since). */
const storedRule = (rule: string) => parseRecurrence(rule, { maxOccurrences: 999_999, horizonMs: RECURRENCE_HORIZON_MS });

/** The lease a series repeats, as its create asked: the rule's first start and end (a 'now' start is stored as its minute; a series stored before that: the create's minute). */
function templateWindow(series: SeriesRow): { startMs: number; endMs: number; beforeEndMs?: number } {
  const start = requestDateOrNowSchema.parse(series.template.start_date);
  const startMs = start === 'now' ? wholeMinuteDown(series.createdMs) : start;
  const end = requestDateOrNowSchema.parse(series.template.end_date);
  const before = series.template.before_end_date;
  return { startMs, endMs: end === 'now' ? startMs : end, ...(typeof before === 'string' ? { beforeEndMs: requestDateSchema.parse(before) } : {}) };
}

const dayOf = (ms: number) => Math.floor(ms / DAY_MS);

/**
 * The leases of new occurrences (their window and place in the series), made from the series's
 * create body as a create by the caller would make them: the create's checks of what the caller
 * may ask (admin-only end policies, property keys) run again with the caller's identity, and the
 * new occurrences are the caller's, in the series's project.
 * Their before-end is as far before their end as the last occurrence's (the create's, if none is
 * left), dropped (the default) where it would fall outside their window, as a lease update drops it.
 */
async function extensionRequests(deps: NewLeaseDeps, identity: Identity, series: SeriesRow, last: Lease | undefined, added: Array<{ index: number } & Occurrence>, field: 'count' | 'until') {
  const window = templateWindow(series);
  const beforeEndOffsetMs = last ? (last.beforeEndMs === undefined ? undefined : last.endMs - last.beforeEndMs) : window.beforeEndMs === undefined ? undefined : window.endMs - window.beforeEndMs;
  const beforeEndOf = (o: Occurrence) => (beforeEndOffsetMs === undefined || o.endMs - beforeEndOffsetMs < o.startMs ? undefined : o.endMs - beforeEndOffsetMs);
  const body = parseRequest(createLeaseSchema(deps.types, deps.maxReservationsPerLease), {
    ...Object.fromEntries(Object.entries(series.template).filter(([key]) => key !== 'before_end_date')),
    start_date: formatRequestDate(added[0].startMs),
    end_date: formatRequestDate(added[0].endMs),
  });
  refuseAdminOnlyPolicies(identity, 'blazar:leases:post', body.reservations?.map((r) => r.params));
  await refuseUnknownPropertyKeys(deps.types, identity, body.reservations ?? []);
  const first = newLeaseRequest(deps, { ...identity, projectId: series.projectId }, body, randomUUID());
  const lastName = occurrenceName(series.name, added[added.length - 1].index);
  if (lastName.length > 80) throw new ApiError(400, `${field}: the series's name is too long for occurrence ${added[added.length - 1].index + 1} (names are at most 80 characters)`);
  return added.map((o) => ({
    request: {
      ...first,
      id: randomUUID(),
      name: occurrenceName(series.name, o.index),
      start: o.startMs,
      end: o.endMs,
      beforeEnd: beforeEndOf(o),
      reservations: first.reservations.map((r) => ({ ...r, id: randomUUID() })),
      seriesId: series.id,
    },
    requestHash: requestHash(series.projectId, { series: series.id, occurrence: o.index }),
  }));
}

/**
 * PUT with `count` or `until`: the series's rule gets that COUNT or UNTIL, counted from its first
 * occurrence (LK_MAX_OCCURRENCES bounds the total). Fewer: the occurrences on days past the new
 * last one are deleted, and the gaps there dropped; one started or ended is never touched (the
 * answer lists it in `untouched`). More: the occurrences after the series's last one are admitted
 * as a create admits them (all or nothing, or `partial`; the policy counts each), with the time of
 * day and duration of the last occurrence; the rule and gaps are written in the admission's
 * transaction where the API admits, else after the saga.
 */
async function changeSeriesEnd(deps: NewLeaseDeps, identity: Identity, series: SeriesRow, change: { count?: number; untilMs?: number; partial: boolean }) {
  const old = storedRule(series.recurrence);
  const rule = formatRecurrence({ freq: old.freq, interval: old.interval, ...(old.byDay ? { byDay: old.byDay } : {}), ...(change.count !== undefined ? { count: change.count } : { untilMs: change.untilMs }) });
  const window = templateWindow(series);
  const field = change.count !== undefined ? 'count' : 'until';
  const slots = occurrencesOf(deps, rule, window.startMs, window.endMs, field);
  const lastDay = dayOf(slots[slots.length - 1].startMs);
  // The rule's instants are at the create's time of day; `until` bounds each occurrence's own start (a change may have moved it later).
  const startsAfterUntil = (startMs: number) => change.untilMs !== undefined && startMs > change.untilMs;
  const all = await leasesOfSeries(deps.pool, series.id);
  const pastLeases = all.filter((l) => dayOf(l.startMs) > lastDay || startsAfterUntil(l.startMs));
  const keptRefused = series.refused.filter((r) => dayOf(r.startMs) <= lastDay && !startsAfterUntil(r.startMs));
  const untouched: Array<{ lease_id: string; name: string; status: string; reason: string }> = [];
  for (const past of pastLeases) {
    // Read again right before its delete: the deletes before it take seconds, and it may have started meanwhile.
    const lease = await findLease(deps.pool, past.id);
    if (!lease) continue;
    if (!notStarted(lease.status)) {
      untouched.push({ lease_id: lease.id, name: lease.name, status: lease.status, reason: 'started: an occurrence started or ended is never deleted by a change' });
      continue;
    }
    const outcome = await removeLease(deps.commands, lease.id, () => findLease(deps.pool, lease.id));
    if (outcome === 'past-deadline' && (await findLease(deps.pool, lease.id))?.status !== 'DELETING') {
      throw new ApiError(503, `the delete of occurrence ${lease.name} did not finish in time; the occurrences before it in the series are deleted: try again`);
    }
  }
  // More: the rule's occurrences after the last the series has (live or a gap), as long and at the time of day of its last one.
  const seriesLastDay = Math.max(-1, ...all.map((l) => dayOf(l.startMs)), ...series.refused.map((r) => dayOf(r.startMs)));
  const last = all[all.length - 1];
  const timeOfDay = last ? last.startMs - dayOf(last.startMs) * DAY_MS : window.startMs - dayOf(window.startMs) * DAY_MS;
  const durationMs = last ? last.endMs - last.startMs : window.endMs - window.startMs;
  const added = slots.flatMap((slot, index) => (dayOf(slot.startMs) > seriesLastDay && !startsAfterUntil(dayOf(slot.startMs) * DAY_MS + timeOfDay) ? [{ index, startMs: dayOf(slot.startMs) * DAY_MS + timeOfDay, endMs: dayOf(slot.startMs) * DAY_MS + timeOfDay + durationMs }] : []));
  const untouchedJson = untouched.length > 0 ? { untouched } : {};
  if (added.length === 0) {
    await setSeriesRule(deps.pool, series.id, rule, keptRefused);
    return { series: seriesJson({ ...series, recurrence: rule, refused: keptRefused }, await leasesOfSeries(deps.pool, series.id)), refused: [], ...untouchedJson };
  }
  const after = [...all, ...added].sort((a, b) => a.startMs - b.startMs);
  for (let i = 1; i < after.length; i++) if (after[i].startMs < after[i - 1].endMs) throw new ApiError(400, 'the new occurrences would overlap the ones before them: occurrences must not overlap');
  const requests = await extensionRequests(deps, identity, series, last, added, field);
  const refusedRows = (refused: Array<{ index: number; error: ApiError }>): RefusedOccurrence[] =>
    refused.map(({ index, error }) => ({ name: requests[index].request.name, startMs: added[index].startMs, endMs: added[index].endMs, reason: reasonOf(error), message: error.message }));
  let refused: Array<{ index: number; error: ApiError }>;
  let compensation: Record<string, unknown> = {};
  if (deps.admission && requests.length <= MAX_OCCURRENCES_IN_TRANSACTION && requests.every((r) => admitsInApi(deps.admission!, r.request))) {
    ({ refused } = await admitSeriesInApi(deps.admission, requests, {
      partial: change.partial,
      isRefusal: isOccurrenceRefusal,
      record: async (client: PoolClient, refusedNow) => setSeriesRule(client, series.id, rule, [...keptRefused, ...refusedRows(refusedNow)]),
    }));
  } else {
    // The saga: the occurrences admitted before a refusal (all or nothing) are deleted again; the series stays as it was.
    ({ refused, compensation } = await admitOneByOne(deps, requests, change.partial, (leaseIds) => compensate(deps, leaseIds)));
    if (refused.length === 0 || change.partial) await setSeriesRule(deps.pool, series.id, rule, [...keptRefused, ...refusedRows(refused)]);
  }
  const refusedAnswers = await refusedJson(deps, identity, refused.map(({ index, error }) => ({ lease: { ...newLease(requests[index].request), startMs: added[index].startMs }, error })));
  if (refused.length > 0 && !change.partial) throw seriesRefusal(refusedAnswers, compensation, 'changed');
  return { series: seriesJson((await findSeries(deps.pool, series.id)) ?? series, await leasesOfSeries(deps.pool, series.id)), refused: refusedAnswers, ...untouchedJson };
}

const DAY_MS = 86_400_000;

export function seriesRouter(deps: NewLeaseDeps): Router {
  const router = Router();

  router.get('/series/:id', async (req, res) => {
    const series = await visibleSeries(deps, identityOf(res), req.params.id);
    res.json({ series: seriesJson(series, await leasesOfSeries(deps.pool, series.id)) });
  });

  router.put('/series/:id', async (req, res) => {
    const identity = identityOf(res);
    const body = parseRequest(changeSeriesSchema, req.body ?? {});
    await underSeriesLock(deps, identity, req.params.id, async (series) => {
      if (body.count !== undefined || body.until !== undefined) {
        res.json(await changeSeriesEnd(deps, identity, series, { count: body.count, untilMs: body.until, partial: body.partial ?? false }));
        return;
      }
      const all = await leasesOfSeries(deps.pool, series.id);
      // Without `from`: the occurrences not started yet (a started one's start cannot move).
      const changing = body.from === undefined ? all.filter((l) => notStarted(l.status)) : occurrencesFrom(all, body.from);
      if (changing.length === 0) throw new ApiError(400, 'from: no occurrence of the series starts then or later');
      const moved = new Map(
        changing.map((l) => {
          const startMs = body.start_time === undefined ? l.startMs : Math.floor(l.startMs / DAY_MS) * DAY_MS + (Number(body.start_time.slice(0, 2)) * 60 + Number(body.start_time.slice(3))) * 60_000;
          return [l.id, { startMs, endMs: startMs + (body.duration === undefined ? l.endMs - l.startMs : body.duration * 60_000) }];
        }),
      );
      // The series as it would be: no occurrence still running when the next starts.
      const after = all.map((l) => ({ ...l, ...moved.get(l.id) })).sort((a, b) => a.startMs - b.startMs);
      for (let i = 1; i < after.length; i++) if (after[i].startMs < after[i - 1].endMs) throw new ApiError(400, `the change makes ${after[i - 1].name} still run when ${after[i].name} starts: occurrences must not overlap`);
      const changed: Lease[] = [];
      const refused: Array<{ lease: Lease; error: ApiError }> = [];
      // All or nothing: the occurrences changed already go back to their dates; a revert that fails is reported, never instead of the error.
      const revert = async (leases: Lease[]) => {
        const failed: Array<{ lease_id: string; error_message: string }> = [];
        for (const lease of leases) {
          const before = changing.find((l) => l.id === lease.id)!;
          await changeLease(deps.commands, lease.id, { start: before.startMs, end: before.endMs, byAdmin: identity.isAdmin }).catch((err: unknown) => failed.push({ lease_id: lease.id, error_message: err instanceof Error ? err.message : String(err) }));
        }
        return failed.length > 0 ? { compensation_failed: failed } : {};
      };
      for (const lease of changing) {
        const to = moved.get(lease.id)!;
        try {
          changed.push(await changeLease(deps.commands, lease.id, { start: to.startMs, end: to.endMs, byAdmin: identity.isAdmin }));
        } catch (err) {
          if (!(err instanceof ApiError) || err.status >= 500) {
            // Not a refusal (an outage, no answer in time), partial or not: the series goes back as it was.
            // The occurrence in flight may still take its change (its workflow answers updates in order): it goes back too.
            throw withCompensation(err, await revert([...changed, lease]));
          }
          refused.push({ lease: { ...lease, ...to }, error: err });
          if (!body.partial) break;
        }
      }
      if (refused.length > 0 && !body.partial) {
        const compensation = await revert(changed);
        throw seriesRefusal(await refusedJson(deps, identity, refused), compensation, 'changed');
      }
      res.json({ series: seriesJson(series, await leasesOfSeries(deps.pool, series.id)), refused: await refusedJson(deps, identity, refused) });
    });
  });

  router.delete('/series/:id', async (req, res) => {
    const identity = identityOf(res);
    const from = req.query.from;
    if (from !== undefined && (typeof from !== 'string' || !isUuid(from))) throw new ApiError(400, 'from: expected the lease id of one of the series\'s occurrences');
    await underSeriesLock(deps, identity, req.params.id, async (series) => {
      const all = await leasesOfSeries(deps.pool, series.id);
      const deleting = occurrencesFrom(all, from);
      for (const lease of deleting) {
        const outcome = await removeLease(deps.commands, lease.id, () => findLease(deps.pool, lease.id));
        if (outcome === 'past-deadline' && (await findLease(deps.pool, lease.id))?.status !== 'DELETING') {
          throw new ApiError(503, `the delete of occurrence ${lease.name} did not finish in time; the occurrences before it in the series are deleted: try again`);
        }
      }
      if (deleting.length === all.length) await markSeriesDeleted(deps.pool, series.id);
      else if (deleting.length > 0) {
        // The gaps among the deleted occurrences go with them.
        const fromMs = deleting[0].startMs;
        if (series.refused.some((r) => r.startMs >= fromMs)) await setRefusedOccurrences(deps.pool, series.id, series.refused.filter((r) => r.startMs < fromMs));
      }
      res.status(204).end();
    });
  });

  return router;
}
