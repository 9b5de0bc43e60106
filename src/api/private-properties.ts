/**
 * Private host capabilities (`PATCH /v1/os-hosts/properties/{name} {"private": true}`) do not exist
 * for non-admins: a `resource_properties` query naming one is refused before any workflow or search
 * runs, with exactly the 400 of a property no host has (no message, and no answer, tells them apart).
 */
import { reservableCapabilityNames } from '../db/hosts';
import type { Pool } from '../db/pool';
import { parsePropertyQuery, queryKeys } from '../domain/property-query';
import { PHYSICAL_HOST } from '../resources/physical-host/calendar';
import { checkKeys } from '../resources/shared/booking';
import type { Identity } from './auth';

/** The `resource_properties` of a request's host reservations (other types query Placement traits, not capabilities). */
export function hostPropertyQueries(reservations: Array<{ resource_type: string; params?: unknown }>): unknown[] {
  return reservations.filter((r) => r.resource_type === PHYSICAL_HOST).map((r) => (r.params as { resource_properties?: unknown } | undefined)?.resource_properties);
}

export async function refusePrivateProperties(pool: Pool, identity: Identity, queries: unknown[]): Promise<void> {
  if (identity.isAdmin) return;
  const texts = queries.filter((q): q is string => typeof q === 'string' && q.trim() !== '');
  if (texts.length === 0) return;
  const names = await reservableCapabilityNames(pool);
  if (names.private.size === 0) return;
  for (const text of texts) {
    const query = parsePropertyQuery(text);
    if (queryKeys(query).some((key) => names.private.has(key))) checkKeys(query, names.public, 'resource_properties');
  }
}
