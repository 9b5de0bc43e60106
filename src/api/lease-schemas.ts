/**
 * What the lease routes accept, validated with zod at the edge. Every rejection names the field
 * and says what would be accepted.
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { MAX_ANSWER_REASON_CHARS, MAX_JUSTIFICATION_CHARS } from '../domain/approval';
import { LEASE_STATUSES, type NewLeaseRequest } from '../domain/lease';
import type { Identity } from './auth';
import type { NewLeaseDeps } from './leases';
import type { ResourceTypes } from '../domain/resource-plugin';
import { parseRequestDate } from '../domain/dates';
import { durationMs, durationText } from '../policy/rules';

const DATE_HINT = 'expected "YYYY-MM-DD HH:MM" (UTC)';
const DATE_OR_NOW_HINT = 'expected "now" or "YYYY-MM-DD HH:MM" (UTC)';

/** Marks an absent required field; describeIssues turns it into Blazar's "Missing parameter <field>". */
const MISSING = 'missing';

/** A field's own wording for a wrong value; an absent one falls through to the wording below. */
const unlessMissing = (message: string) => (issue: { input?: unknown }) => (issue.input === undefined ? undefined : message);

const KINDS: Record<string, string> = { array: 'a list', object: 'an object', string: 'a string', number: 'a number', boolean: 'true or false' };

/**
 * Our wording wherever a schema gives none, so that no library text reaches a caller. Given to
 * every parse of a request (parseRequest in errors.ts, a reservation's parameters below), not set globally: other modules' schemas
 * (configuration, clouds.yaml) keep their own words.
 */
export const requestWording = (issue: { input?: unknown; code?: string; expected?: string }): string | undefined => {
  if (issue.input === undefined) return MISSING;
  if (issue.code === 'invalid_type' && issue.expected) return `expected ${KINDS[issue.expected] ?? issue.expected}`;
  return undefined;
};

/** Blazar's words for a malformed date, then ours. */
function dateOf(text: string, hint: string, ctx: z.RefinementCtx): number {
  const ms = parseRequestDate(text);
  if (ms === undefined) ctx.addIssue({ code: 'custom', message: hint, params: { blazar: `${text} is an invalid date. Required format: %Y-%m-%d %H:%M` } });
  return ms ?? z.NEVER;
}

/** A request date ("YYYY-MM-DD HH:MM", UTC) as epoch ms; the one parser for bodies and query strings. */
export const requestDateSchema = z.string({ error: unlessMissing(DATE_HINT) }).transform((text, ctx) => dateOf(text, DATE_HINT, ctx));

export const requestDateOrNowSchema = z
  .string({ error: unlessMissing(DATE_OR_NOW_HINT) })
  .transform((text, ctx): number | 'now' => (text === 'now' ? 'now' : dateOf(text, DATE_OR_NOW_HINT, ctx)));

/**
 * An extension: when an active lease warns its listeners before its end (lease.event.before_end_lease
 * notices), e.g. `["48h", "1h"]`; `[]` for never. Unset: the deployment's (LK_NOTIFY_BEFORE_END).
 */
export const notifyBeforeEnd = z
  .array(durationText, { error: 'expected a list of durations such as ["48h", "1h"]' })
  .max(5, 'at most 5 warnings')
  .transform((offsets) => [...new Set(offsets.map(durationMs))].sort((a, b) => b - a));

/** A lease's name as the API takes it (trimmed), in creates, updates and the Blazar import. */
export const leaseName = z.string({ error: unlessMissing('expected a string') }).trim().min(1, 'must not be empty').max(80, 'must be at most 80 characters');

/**
 * `resource_type`s a request may name for a preemptible reservation, each with the type it makes
 * (shown as that type, preemptible). blazarclient 3.5.0's --reservation keeps only the keys it
 * knows when the text contains "physical:host" or "virtual:instance" (an unknown `preemptible=…`
 * is glued to the value before it), and fails on any non-number value otherwise: the
 * `…:preemptible` names are the ones it can send.
 */
export const PREEMPTIBLE_ALIASES: ReadonlyMap<string, string> = new Map([
  ['physical:host:preemptible', 'physical:host'],
  ['preemptible:host', 'physical:host'],
  ['virtual:instance:preemptible', 'virtual:instance'],
  ['preemptible:instance', 'virtual:instance'],
]);

/** A reservation's parameters are checked by its resource type's own schema. */
function reservationSchema(types: ResourceTypes) {
  const supported = [...types.keys()].sort();
  return z.looseObject({ resource_type: z.string({ error: unlessMissing('expected a resource type') }) }, { error: unlessMissing('expected an object') }).transform((raw, ctx) => {
    const { resource_type: asked, ...sent } = raw;
    // blazarclient 3.5.0 cannot send a preemptible key in a --reservation: the alias carries it (issue 43).
    const aliasOf = PREEMPTIBLE_ALIASES.get(asked);
    const aliased = aliasOf !== undefined && types.has(aliasOf);
    const resourceType = aliased ? aliasOf : asked;
    const params = aliased ? { ...sent, preemptible: sent.preemptible ?? true } : sent;
    const type = types.get(resourceType);
    if (!type) {
      ctx.addIssue({
        code: 'custom',
        path: ['resource_type'],
        message: `supported: ${supported.length ? supported.join(', ') : 'none in this deployment'}`,
        params: { blazar: `The ${resourceType} resource type is not supported` },
      });
      return z.NEVER;
    }
    const parsed = type.paramsSchema.safeParse(params, { error: requestWording });
    if (!parsed.success) {
      for (const issue of parsed.error.issues) ctx.addIssue({ code: 'custom', path: issue.path, message: issue.message, params: issue.code === 'custom' ? issue.params : undefined });
      return z.NEVER;
    }
    if (aliased && (parsed.data as { preemptible?: boolean }).preemptible !== true) {
      // The alias says preemptible: a request saying otherwise is contradictory, not silently either.
      ctx.addIssue({ code: 'custom', path: ['preemptible'], message: `must be true (or left out) with resource_type ${asked}` });
      return z.NEVER;
    }
    return { resource_type: resourceType, params: parsed.data };
  });
}

/** Reservations per lease unless configured (LK_MAX_RESERVATIONS_PER_LEASE): every one costs the calendar's search work. */
export const DEFAULT_MAX_RESERVATIONS_PER_LEASE = 50;

/** A lease's reservations, each checked by its type's schema (a create, an offers request). */
export function leaseReservationsSchema(types: ResourceTypes, maxReservations = DEFAULT_MAX_RESERVATIONS_PER_LEASE) {
  // Counted before any reservation is parsed: 16 000 of them must cost nothing.
  return z
    .array(z.unknown())
    .max(maxReservations, `at most ${maxReservations} reservations per lease`)
    .pipe(z.array(reservationSchema(types)));
}

/** An exception asked for (issue 42): a lease a rule would refuse waits for approval instead. */
const justification = z
  .string({ error: 'expected a string saying why the lease needs an exception' })
  .trim()
  .min(1, 'must not be empty')
  .max(MAX_JUSTIFICATION_CHARS, `must be at most ${MAX_JUSTIFICATION_CHARS} characters`)
  .optional();

export function createLeaseSchema(types: ResourceTypes, maxReservations = DEFAULT_MAX_RESERVATIONS_PER_LEASE) {
  return z.strictObject({
    name: leaseName,
    start_date: requestDateOrNowSchema,
    end_date: requestDateSchema,
    before_end_date: requestDateSchema.nullish(),
    notify_before_end: notifyBeforeEnd.nullish(),
    reservations: leaseReservationsSchema(types, maxReservations).nullish(),
    events: z.array(z.unknown()).nullish(), // accepted and ignored, as Blazar does
    // Our extension: a series of recurring leases (src/api/series.ts); its length bounded again by its parser.
    recurrence: z.string({ error: 'expected a rule such as "FREQ=WEEKLY;BYDAY=MO;COUNT=10"' }).max(200, 'must be at most 200 characters').optional(),
    partial: z.boolean({ error: 'expected true or false' }).optional(),
    justification,
  });
}

type CreateLeaseBody = ReturnType<ReturnType<typeof createLeaseSchema>['parse']>;

/** A create's request from its checked body, under `id` (a create, and an offer's lease: offerLeaseRequest). */
export function newLeaseRequest(deps: Pick<NewLeaseDeps, 'provisioningLeadMs' | 'notifyBeforeEndMs' | 'idleLeases'>, identity: Identity, body: CreateLeaseBody, id: string): NewLeaseRequest {
  return {
    id,
    name: body.name,
    projectId: identity.projectId,
    userId: identity.userId,
    start: body.start_date,
    end: body.end_date,
    beforeEnd: body.before_end_date ?? undefined,
    provisioningLeadMs: deps.provisioningLeadMs,
    // A retry with the same Idempotency-Key reaches the first request's workflow, with its reservation ids.
    reservations: (body.reservations ?? []).map((r) => ({ id: randomUUID(), resource_type: r.resource_type, params: r.params })),
    requestedMs: Date.now(),
    // The usage policy (its limits on duration, advance, amounts, budgets) is checked by whoever admits.
    byAdmin: identity.isAdmin,
    notifyBeforeEndMs: body.notify_before_end ?? deps.notifyBeforeEndMs,
    idle: deps.idleLeases,
    ...(body.justification !== undefined ? { justification: body.justification } : {}),
  };
}

export const updateLeaseSchema = z
  .strictObject({
    name: leaseName.optional(),
    start_date: requestDateOrNowSchema.optional(),
    end_date: requestDateOrNowSchema.optional(),
    before_end_date: requestDateSchema.optional(),
    notify_before_end: notifyBeforeEnd.optional(),
    reservations: z.array(z.looseObject({ id: z.string({ error: 'expected the id of one of the lease\'s reservations' }) })).optional(),
    justification,
  })
  .refine((body) => Object.keys(body).some((key) => key !== 'justification'), { message: 'nothing to update: give name, start_date, end_date, before_end_date, notify_before_end or reservations' });

/** An admin's approve or deny (issue 42): a reason, optional, bounded. */
export const approvalAnswerSchema = z.strictObject({
  reason: z.string({ error: 'expected a string' }).trim().max(MAX_ANSWER_REASON_CHARS, `must be at most ${MAX_ANSWER_REASON_CHARS} characters`).optional(),
});

/** Hosts or slots one lend or reclaim names at most. */
const MAX_LENT_HOSTS = 1000;
const lentHostCount = z.number({ error: 'expected a whole number' }).int('expected a whole number').min(1).max(MAX_LENT_HOSTS);
const lendingReservationId = z.uuid({ error: 'expected the id of a reservation of the lease' }).transform((id) => id.toLowerCase());

/** POST /v1/leases/{id}/lend (issue 43): how many idle hosts, until when; the reservation when the lease has more than one that lends. */
export const lendSchema = z.strictObject({
  reservation_id: lendingReservationId.optional(),
  count: lentHostCount,
  until: requestDateSchema,
});

/** POST /v1/leases/{id}/reclaim (issue 43): how many lent hosts (all when absent), needed from when (now + the warning when absent). */
export const reclaimSchema = z.strictObject({
  reservation_id: lendingReservationId.optional(),
  count: lentHostCount.optional(),
  needed_at: requestDateSchema.optional(),
});

/** Unknown parameters (`?detail=true`) are dropped, as Blazar does; their values were still checked by the input check. */
export const listLeasesQuery = z.object({
  limit: z.coerce.number({ error: 'expected a number' }).int('expected a whole number').min(1).max(1000).optional(),
  marker: z.uuid({ error: 'expected the id of a lease' }).optional(),
  status: z.enum(LEASE_STATUSES, { error: `expected one of ${LEASE_STATUSES.join(', ')}` }).optional(),
  /** Only leases an admin's answer is waited for: PENDING_APPROVAL, or an active lease's `pending_change`. */
  awaiting_approval: z.enum(['true', 'false'], { error: 'expected true or false' }).transform((v) => v === 'true').optional(),
  project_id: z.string().min(1).optional(),
  name: z.string().min(1).optional(),
  /** Leases whose window overlaps [from, to]. */
  from: requestDateSchema.optional(),
  to: requestDateSchema.optional(),
}).refine((q) => q.from === undefined || q.to === undefined || q.from <= q.to, { path: ['to'], message: 'must not be earlier than from' });

/**
 * The first problem for Blazar's error body: Blazar's own sentence where it has one for the case
 * ("Missing parameter end_date", "x is an invalid date. …"), then ours as "field: what is wrong".
 */
export function describeIssues(error: z.ZodError, prefix = ''): string {
  const issue = error.issues[0];
  const path = issue.path.reduce<string>((text, part) => (typeof part === 'number' ? `${text}[${part}]` : text ? `${text}.${String(part)}` : String(part)), prefix);
  if (issue.code === 'unrecognized_keys') return `${path ? `${path}: ` : ''}unknown field(s) ${issue.keys.map((k) => JSON.stringify(k)).join(', ')}`;
  if (issue.message === MISSING) return `Missing parameter ${path || 'body'}`;
  const ours = path ? `${path}: ${issue.message}` : issue.message;
  const blazar: unknown = issue.code === 'custom' ? issue.params?.blazar : undefined;
  return typeof blazar === 'string' ? `${blazar}. ${ours}` : ours;
}
