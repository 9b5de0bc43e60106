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
