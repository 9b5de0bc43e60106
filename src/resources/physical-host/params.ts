/** The `physical:host` reservation's parameters, as blazarclient sends them (numbers may come as strings). */
import { z } from 'zod';
import { parsePropertyQuery, PropertyQueryError } from '../../domain/property-query';

const count = z
  .union([z.number(), z.string().regex(/^\s*\d+\s*$/, 'expected a whole number')], { error: 'expected a whole number' })
  .transform(Number)
  .pipe(z.number().int('expected a whole number').min(1, 'must be at least 1').max(10_000, 'must be at most 10000'));

/** A property query, kept as the JSON text the user gave (shown back in the lease), checked for syntax here. */
const query = z
  .union([z.string(), z.array(z.unknown())], { error: 'expected a JSON query such as [">=", "$memory_mb", "4096"]' })
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

export const physicalHostParams = z
  .strictObject({
    min: count,
    max: count,
    hypervisor_properties: query,
    resource_properties: query,
    /** Before the end: nothing (''), a snapshot of every server on the hosts, or the deployment's default. */
    before_end: z.enum(['', 'default', 'snapshot'], { error: 'expected "", "default" or "snapshot"' }).nullish().transform((v) => v ?? 'default'),
  })
  .refine((p) => p.min <= p.max, { message: 'min must not be greater than max', path: ['min'] });

export type PhysicalHostParams = z.output<typeof physicalHostParams>;
