/** The `flavor:instance` reservation's parameters, as blazarclient's library sends them. */
import { z } from 'zod';
import { beforeEndParam, propertyQueryParam, whole } from '../shared/params';
import { affinityParam, MAX_SLOTS } from '../virtual-instance/params';

export const flavorInstanceParams = z.strictObject({
  /** An existing flavor the lessee may use (public, or shared with the project). */
  flavor_id: z
    .string({ error: 'expected the id of a flavor' })
    .min(1, 'expected the id of a flavor')
    .max(255, 'a flavor id has at most 255 characters')
    .regex(/^[^\p{Cc}]+$/u, 'a flavor id has no control characters'),
  amount: whole('instances', 1, MAX_SLOTS),
  affinity: affinityParam,
  resource_properties: propertyQueryParam('["==", "$gpu", "true"]'),
  /** Before the end: nothing (''), an image of every server of the flavor, a notice, or the deployment's default. */
  before_end: beforeEndParam,
});

export type FlavorInstanceParams = z.output<typeof flavorInstanceParams>;
