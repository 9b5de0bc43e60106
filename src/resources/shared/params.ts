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
