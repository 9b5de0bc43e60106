/** The `physical:host` reservation's parameters, as blazarclient sends them (numbers may come as strings). */
import { z } from 'zod';
import { beforeEndParam, preemptibleParam, propertyQueryParam } from '../shared/params';
import { isPreemptibleReservation } from '../../domain/preemption';

export const END_POLICIES = ['delete', 'recycle', 'release'] as const;
export type EndPolicy = (typeof END_POLICIES)[number];
const MAX_GRACE_SECONDS = 30 * 86_400;

const MAX_COUNT = 10_000;

/** A host count, with Blazar's sentences first ("Malformed parameter min", as its _convert_int_param and range check say). */
const count = (name: 'min' | 'max') =>
  z
    // An absent count is left to the API's wording (Blazar's "Missing parameter").
    .union([z.number(), z.string()], { error: (issue) => (issue.input === undefined ? undefined : 'expected a whole number') })
    .transform((input, ctx) => {
      const value = typeof input === 'number' ? input : /^\s*-?\d{1,16}\s*$/.test(input) ? Number(input) : NaN;
      const problem = !Number.isInteger(value)
        ? { message: 'expected a whole number', blazar: `Malformed parameter ${name}` }
        : value < 1
          ? { message: 'must be at least 1', blazar: 'Malformed parameter min and max (must be greater than or equal to 1)' }
          : value > MAX_COUNT
            ? { message: `must be at most ${MAX_COUNT}` }
            : undefined;
      if (!problem) return value;
      ctx.addIssue({ code: 'custom', message: problem.message, ...(problem.blazar ? { params: { blazar: problem.blazar } } : {}) });
      return z.NEVER;
    });

const query = propertyQueryParam('[">=", "$memory_mb", "4096"]');

export const physicalHostParams = z
  .strictObject({
    min: count('min'),
    max: count('max'),
    hypervisor_properties: query,
    resource_properties: query,
    /** Before the end: nothing (''), a snapshot of every server on the hosts, a notice, or the deployment's default. */
    before_end: beforeEndParam,
    /** At the end: delete the servers, recycle the hosts (wait for the servers to go), release the hosts with their servers. */
    on_end: z
      .enum(['default', ...END_POLICIES], { error: 'expected "default", "delete", "recycle" or "release"' })
      .nullish()
      .transform((v) => v ?? 'default'),
    /** `recycle` only: how long the hosts wait for their last servers before those are deleted. */
    recycle_grace_seconds: z
      .union([z.number(), z.string().regex(/^\s*\d+\s*$/, 'expected a whole number of seconds')], { error: 'expected a whole number of seconds' })
      .transform(Number)
      .pipe(z.number().int('expected a whole number of seconds').min(0).max(MAX_GRACE_SECONDS, `must be at most ${MAX_GRACE_SECONDS} (30 days)`))
      .nullish(),
    /**
     * Preemptible (issue 43): booked only into free hosts, and cut short by a regular lease that needs
     * them. Also as text, as key=value clients send it (blazarclient 3.5.0's `--reservation` cannot
     * send it for hosts: docs/api.md, "Preemptible leases").
     */
    preemptible: preemptibleParam,
  })
  .refine((p) => p.min <= p.max, {
    message: 'must not be greater than max',
    path: ['min'],
    params: { blazar: 'Invalid values for min/max of hosts. Max must be equal to or larger than min' },
  })
  .refine((p) => p.recycle_grace_seconds === null || p.recycle_grace_seconds === undefined || p.on_end === 'recycle' || p.on_end === 'default', {
    message: 'recycle_grace_seconds applies only to on_end "recycle"',
    path: ['recycle_grace_seconds'],
  })
  .refine((p) => !(p.preemptible && p.on_end === 'release'), {
    message: 'a preemptible reservation cannot keep its hosts for good (on_end "release")',
    path: ['preemptible'],
  });

export type PhysicalHostParams = z.output<typeof physicalHostParams>;

/**
 * The end policy a reservation gets: its own, or the deployment's default (`delete` unless
 * configured). Parameters are stored as the API parsed them: a reservation recorded before
 * `on_end` existed (2026-11-21) has none, and gets the default.
 */
export function endPolicyOf(params: Partial<Pick<PhysicalHostParams, 'on_end'>>, defaultPolicy: EndPolicy = 'delete'): EndPolicy {
  return params.on_end === undefined || params.on_end === 'default' ? defaultPolicy : params.on_end;
}

/** Whether a reservation is preemptible: recorded before the parameter existed (2026-11-27), it is not. */
export function isPreemptible(params: Partial<Pick<PhysicalHostParams, 'preemptible'>>): boolean {
  return isPreemptibleReservation({ params });
}
