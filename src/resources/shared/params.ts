/** Reservation parameters that several resource types share, as blazarclient sends them. */
import { z } from 'zod';
import { parsePropertyQuery, PropertyQueryError } from '../../domain/property-query';

/** A property query, kept as the JSON text the user gave (shown back in the lease), checked for syntax here. */
export function propertyQueryParam(example: string) {
  return z
    .union([z.string(), z.array(z.unknown())], { error: `expected a JSON query such as ${example}` })
    .nullish()
    .transform((value, ctx) => {
      const text = value === null || value === undefined ? '' : typeof value === 'string' ? value : JSON.stringify(value);
      try {
        parsePropertyQuery(text);
      } catch (err) {
        if (!(err instanceof PropertyQueryError)) throw err;
        ctx.addIssue({ code: 'custom', message: err.message });
        return z.NEVER;
      }
      return text;
    });
}

/** A whole number within [min, max], as a number or as the digits blazarclient's CLI may send. */
export const whole = (what: string, min: number, max: number) =>
  z
    .union([z.number(), z.string().regex(/^\s*\d+\s*$/, `expected a whole number of ${what}`)], { error: `expected a whole number of ${what}` })
    .transform(Number)
    .pipe(z.number().int(`expected a whole number of ${what}`).min(min, `must be at least ${min}`).max(max, `must be at most ${max}`));

/**
 * `preemptible` (issue 43): booked only into capacity no regular booking holds, and cut short by a
 * regular lease that needs it. Also as text, as key=value clients send it.
 */
export const preemptibleParam = z
  .union([z.boolean(), z.enum(['true', 'false', 'True', 'False'])], { error: 'expected true or false' })
  .nullish()
  .transform((v) => v === true || v === 'true' || v === 'True');

/** What a reservation does before its end: nothing (''), an image of each of its servers, or a notice. */
export type BeforeEndAction = '' | 'snapshot' | 'notify';

/** `before_end`: an action, or `default` (also when absent): the deployment's choice. */
export const beforeEndParam = z
  .enum(['', 'default', 'snapshot', 'notify'], { error: 'expected "", "default", "snapshot" or "notify"' })
  .nullish()
  .transform((v) => v ?? 'default');

/**
 * `requested` may be absent: parameters are stored as the API parsed them, and a reservation
 * recorded before `before_end` had its default (2026-11-24) has none; absent is `default`.
 */
export function beforeEndAction(requested: z.output<typeof beforeEndParam> | undefined, deploymentDefault: BeforeEndAction | undefined): BeforeEndAction {
  return requested === undefined || requested === 'default' ? (deploymentDefault ?? '') : requested;
}

/**
 * Refuses `notify` (asked, or the deployment's default) at admission when the deployment has no
 * endpoint: the notice could never go out.
 */
export function refuseNotifyWithoutEndpoint(deploymentDefault: BeforeEndAction | undefined, hasEndpoint: boolean) {
  return (params: { before_end: z.output<typeof beforeEndParam> }, issues: z.RefinementCtx) => {
    if (beforeEndAction(params.before_end, deploymentDefault) === 'notify' && !hasEndpoint) {
      issues.addIssue({ code: 'custom', path: ['before_end'], message: 'notify needs a notification endpoint, and this deployment has none (LK_NOTIFY_URL)' });
    }
  };
}
