/**
 * What the lease routes accept, validated with zod at the edge. Every rejection names the field
 * and says what would be accepted.
 */
import { z } from 'zod';
import { LEASE_STATUSES } from '../domain/lease';
import type { ResourceTypes } from '../domain/resource-plugin';
import { parseRequestDate } from './blazar-format';

const DATE_HINT = 'expected "YYYY-MM-DD HH:MM" (UTC)';

/** A request date ("YYYY-MM-DD HH:MM", UTC) as epoch ms; the one parser for bodies and query strings. */
export const requestDate = z.string({ error: DATE_HINT }).transform((text, ctx) => {
  const ms = parseRequestDate(text);
  if (ms === undefined) {
    ctx.addIssue({ code: 'custom', message: `${DATE_HINT}, got ${JSON.stringify(text)}` });
    return z.NEVER;
  }
  return ms;
});

const requestDateOrNow = z.union([z.literal('now'), requestDate], { error: `expected "now" or "YYYY-MM-DD HH:MM" (UTC)` });

const leaseName = z.string({ error: 'expected a string' }).trim().min(1, 'must not be empty').max(80, 'must be at most 80 characters');

/** A reservation's parameters are checked by its resource type's own schema. */
function reservationSchema(types: ResourceTypes) {
  const supported = [...types.keys()].sort();
  return z.looseObject({ resource_type: z.string({ error: 'expected a resource type' }) }).transform((raw, ctx) => {
    const { resource_type: resourceType, ...params } = raw;
    const type = types.get(resourceType);
    if (!type) {
      ctx.addIssue({
        code: 'custom',
        path: ['resource_type'],
        message: `unsupported resource type ${JSON.stringify(resourceType)} (supported: ${supported.length ? supported.join(', ') : 'none in this deployment'})`,
      });
      return z.NEVER;
    }
    const parsed = type.paramsSchema.safeParse(params);
    if (!parsed.success) {
      for (const issue of parsed.error.issues) ctx.addIssue({ code: 'custom', path: issue.path, message: issue.message });
      return z.NEVER;
    }
    return { resource_type: resourceType, params: parsed.data };
  });
}

/** Reservations per lease unless configured (LK_MAX_RESERVATIONS_PER_LEASE): every one costs the calendar's search work. */
export const DEFAULT_MAX_RESERVATIONS_PER_LEASE = 50;

export function createLeaseSchema(types: ResourceTypes, maxReservations = DEFAULT_MAX_RESERVATIONS_PER_LEASE) {
  return z.strictObject({
    name: leaseName,
    start_date: requestDateOrNow,
    end_date: requestDate,
    before_end_date: requestDate.nullish(),
    // Counted before any reservation is parsed: 16 000 of them must cost nothing.
    reservations: z
      .array(z.unknown())
      .max(maxReservations, `at most ${maxReservations} reservations per lease`)
      .pipe(z.array(reservationSchema(types)))
      .nullish(),
    events: z.array(z.unknown()).nullish(), // accepted and ignored, as Blazar does
  });
}

export const updateLeaseSchema = z
  .strictObject({
    name: leaseName.optional(),
    start_date: requestDateOrNow.optional(),
    end_date: requestDateOrNow.optional(),
    before_end_date: requestDate.optional(),
    reservations: z.array(z.looseObject({ id: z.string({ error: 'expected the id of one of the lease\'s reservations' }) })).optional(),
  })
  .refine((body) => Object.keys(body).length > 0, { message: 'nothing to update: give name, start_date, end_date, before_end_date or reservations' });

export const listLeasesQuery = z.strictObject({
  limit: z.coerce.number({ error: 'expected a number' }).int('expected a whole number').min(1).max(1000).optional(),
  marker: z.uuid({ error: 'expected the id of a lease' }).optional(),
  status: z.enum(LEASE_STATUSES, { error: `expected one of ${LEASE_STATUSES.join(', ')}` }).optional(),
  project_id: z.string().min(1).optional(),
  name: z.string().min(1).optional(),
  /** Leases whose window overlaps [from, to]. */
  from: requestDate.optional(),
  to: requestDate.optional(),
}).refine((q) => q.from === undefined || q.to === undefined || q.from <= q.to, { path: ['to'], message: 'must not be earlier than from' });

/** The first problem, as "field: what is wrong", for Blazar's error body. */
export function describeIssues(error: z.ZodError, prefix = ''): string {
  const issue = error.issues[0];
  const path = issue.path.reduce<string>((text, part) => (typeof part === 'number' ? `${text}[${part}]` : text ? `${text}.${String(part)}` : String(part)), prefix);
  if (issue.code === 'unrecognized_keys') return `${path ? `${path}: ` : ''}unknown field(s) ${issue.keys.map((k) => JSON.stringify(k)).join(', ')}`;
  return path ? `${path}: ${issue.message}` : issue.message;
}
