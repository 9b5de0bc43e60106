/**
 * What tests and benchmarks write again and again: a host reservation in a request body, a stored
 * reservation, the context a plugin hook gets for one, and the refusal a booking ends in.
 */
import { randomUUID } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import type { Reservation } from '../../src/domain/lease';
import type { ReservationContext } from '../../src/domain/resource-plugin';

/** A `physical:host` reservation for a request body: one host (`min`, `max` 1) unless `fields` say otherwise. */
export function hostReservation<F extends Record<string, unknown>>(fields: F = {} as F): Omit<{ resource_type: 'physical:host'; min: number; max: number }, keyof F> & F {
  return { resource_type: 'physical:host', min: 1, max: 1, ...fields };
}

/** The same as python3-blazarclient sends it: with both property queries, empty unless given. */
export function blazarHostReservation<F extends Record<string, unknown>>(fields: F = {} as F) {
  return hostReservation({ hypervisor_properties: '', resource_properties: '', ...fields });
}

/** A reservation as a lease stores it before admission (status `pending`), with an id of its own. */
export function pendingReservation(resourceType: string, params: Record<string, unknown> = {}, id: string = randomUUID()): Reservation {
  return { id, resource_type: resourceType, status: 'pending', params };
}

/**
 * The context the workflow gives a hook for `reservation`: of a PENDING lease (named by its id) of
 * project `p` and user `u`, with no other reservation and no lead time unless `fields` say otherwise.
 */
export function reservationContext(fields: Pick<ReservationContext, 'reservation' | 'startMs' | 'endMs'> & Partial<ReservationContext>): ReservationContext {
  const leaseId = fields.leaseId ?? randomUUID();
  return { leaseName: leaseId, projectId: 'p', userId: 'u', leaseStatus: 'PENDING', leaseReservations: [fields.reservation], provisioningLeadMs: 0, ...fields, leaseId };
}

/** The ApplicationFailure (e.g. a 409 LeaseConflict) that `promise` is refused with; anything else fails the test. */
export async function refusal(promise: Promise<unknown>): Promise<ApplicationFailure> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof ApplicationFailure) return err;
    throw err;
  }
  throw new Error('expected a refusal');
}
