/**
 * Property queries are checked against the keys their resource type knows at the API, before any
 * workflow, booking or search runs: a key nobody knows is a 400 naming it (the booking's own words).
 * Private host capabilities (`PATCH /v1/os-hosts/properties/{name} {"private": true}`) do not exist
 * for non-admins: a query naming one answers exactly as for a key no host has. A host query of a
 * read (availability, calendar) is checked as a host reservation's (checkHostQueryKeys).
 */
import type { ResourceTypes } from '../domain/resource-plugin';
import type { Identity } from './auth';

/** Each reservation's queries, checked by its own type (parameters as its schema parsed them). */
export async function refuseUnknownPropertyKeys(types: ResourceTypes, identity: Identity, reservations: ReadonlyArray<{ resource_type: string; params: Record<string, unknown> }>): Promise<void> {
  for (const reservation of reservations) await types.get(reservation.resource_type)?.checkPropertyKeys?.(reservation.params, identity);
}
