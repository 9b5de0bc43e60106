/**
 * Admission by the API: a lease whose every reservation books in the calendar alone (its type has
 * `bookAtAdmission`) is admitted in one PostgreSQL transaction: its bookings, the usage policy's
 * check, its row and its owed workflow start (lease_outbox). The answer then waits on PostgreSQL
 * only; the lease's workflow is started right after the commit (src/outbox), by a sweep if that
 * fails. The calendar's exclusion constraints stay the last word on capacity, as in the workflow's
 * admission, which the other leases keep.
 */
import { isGrpcServiceError, type Client } from '@temporalio/client';
import { ApplicationFailure, NamespaceNotFoundError } from '@temporalio/common';
import { awaitingApproval } from '../domain/approval';
import { LEASE_SEARCH_ATTRIBUTES } from '../domain/search-attributes';
import { leaseConflict, LeaseErrorType, newLease, type Lease, type NewLeaseRequest } from '../domain/lease';
import { bookedReservation, reservationContext, typedContext, type ResourceTypes, type ReserveResult } from '../domain/resource-plugin';
import { addOwedStart, admittedRequestHash } from '../db/lease-outbox';
import { findLease, holdLeaseIdForAdmission, saveLease } from '../db/leases';
import type { Pool } from '../db/pool';
import type { PoolClient } from 'pg';
import { bookInTransaction } from '../resources/shared/booking';
import { policyFailure, type UsagePolicyEnforcer } from '../policy/enforcement';
import type { LeaseOutbox } from '../outbox';
import type { LeaseWorkflowInput } from '../../workflows/lease/messages';
import { ApiError, failureAsApiError } from './errors';
import { missingSearchAttribute, toApiError } from './lease-commands';

export interface ApiAdmissionDeps {
  pool: Pool;
  types: ResourceTypes;
  outbox: LeaseOutbox;
  usagePolicy?: UsagePolicyEnforcer;
  /** Throws the named 503 while Temporal's namespace cannot take lease workflows (temporalSetupCheck). */
  temporalReady: () => Promise<void>;
}

/** How long a check that could not reach Temporal is trusted before the next create asks again. */
const UNREACHABLE_RECHECK_MS = 5_000;

/**
 * Whether Temporal's namespace can take lease workflows: it exists and has every lease search
 * attribute. A lease admitted here and started later must not wait on a namespace that will never
 * take it, so a create is refused (503 naming the fix) while that is so, as the workflow's
 * admission is. Temporal merely unreachable refuses nothing: the lease waits for its start as it
 * would for a worker. Known good after one answer; checked again after a start failed (`recheck`).
 */
export function temporalSetupCheck(client: Client, timeoutMs: number): { ready: () => Promise<void>; recheck: () => void } {
  let verified = false;
  let unreachableUntil = 0;
  const { namespace } = client.options;
  return {
    async ready() {
      if (verified || Date.now() < unreachableUntil) return;
      let known: Record<string, unknown>;
      try {
        const answer = await client.connection.withDeadline(Date.now() + Math.min(timeoutMs, 2_000), () => client.connection.operatorService.listSearchAttributes({ namespace }));
        known = answer.customAttributes ?? {};
      } catch (err) {
        if (isGrpcServiceError(err) && Number(err.code) === 5 /* NOT_FOUND */) throw toApiError(new NamespaceNotFoundError(namespace), timeoutMs);
        unreachableUntil = Date.now() + UNREACHABLE_RECHECK_MS;
        return;
      }
      const missing = LEASE_SEARCH_ATTRIBUTES.find((key) => !(key.name in known));
      if (missing) throw missingSearchAttribute(missing.name);
      verified = true;
    },
    recheck: () => {
      verified = false;
    },
  };
}

/**
 * Whether the API can admit this lease itself: every reservation's type books in the caller's
 * transaction, and no external policy service is to be asked. Blazar asks that service with the
 * hosts the lease would get, and it may take seconds: the workflow's admission asks it between
 * booking and recording, never under a transaction's locks.
 */
export function admitsInApi(deps: Pick<ApiAdmissionDeps, 'types' | 'usagePolicy'>, request: { reservations: ReadonlyArray<{ resource_type: string }> }): boolean {
  return !deps.usagePolicy?.asksExternalFilter() && request.reservations.every((r) => deps.types.get(r.resource_type)?.bookAtAdmission !== undefined);
}

/** Each type's work before an admission's transaction opens (ResourceType.beforeAdmission), once per type, outside any lock. */
export async function beforeAdmission(types: ResourceTypes, reservations: ReadonlyArray<{ resource_type: string }>): Promise<void> {
  for (const resourceType of new Set(reservations.map((r) => r.resource_type))) await types.get(resourceType)?.beforeAdmission?.();
}

/** A concurrent request with the same Idempotency-Key recorded the lease first: answer as a retry of it. */
class AdmittedMeanwhile extends Error {}

/**
 * Admits the lease: answers it as recorded (its workflow starts right after), or throws the
 * ApiError the workflow's admission would have given. `idempotent`: the id comes from an
 * Idempotency-Key, and a retry of the same request answers the lease admitted first.
 */
export function admitInApi(deps: ApiAdmissionDeps, request: NewLeaseRequest, requestHash: string, idempotent: boolean): Promise<Lease | 'admitted-by-workflow'> {
  // The workflows of leases admitted meanwhile are started once the admissions in flight are answered.
  return deps.outbox.whileAdmitting(() => admit(deps, request, requestHash, idempotent));
}

async function admit(deps: ApiAdmissionDeps, request: NewLeaseRequest, requestHash: string, idempotent: boolean): Promise<Lease | 'admitted-by-workflow'> {
  if (idempotent) {
    const retried = await earlierAdmission(deps.pool, request.id, requestHash);
    if (retried) return retried;
  }
  const draft = newLease(request);
  await deps.temporalReady();
  await beforeAdmission(deps.types, request.reservations);
  try {
    // A concurrent booking took a chosen host first: choose again, seeing the winner's booking.
    const admitted = await bookInTransaction(
      deps.pool,
      async (client) => {
        if (idempotent) {
          // Retries with one Idempotency-Key, concurrent: one admits, the others wait here, then answer its lease.
          if ((await holdLeaseIdForAdmission(client, request.id)).recorded) throw new AdmittedMeanwhile();
        }
        return bookAndRecord(deps, client, request, requestHash, draft);
      },
      { retryExclusion: true },
    );
    deps.outbox.startSoon(admitted.input);
    // Leases this admission preempted (issue 43) are told now; the sweeps tell them should this fail.
    deps.outbox.tellPreemptedSoon(admitted.cut);
    return admitted.lease;
  } catch (err) {
    if (err instanceof AdmittedMeanwhile) {
      const retried = await earlierAdmission(deps.pool, request.id, requestHash);
      if (retried) return retried;
      throw new ApiError(410, `Lease ${request.id}, created with this Idempotency-Key, was deleted: use another key for a new lease`);
    }
    throw admissionError(err);
  }
}

/**
 * Books and records one lease in the caller's transaction: its bookings, the usage policy's check
 * (which sees what the transaction recorded before), its row and its owed workflow start. Throws
 * the refusal (a lease failure, or UsagePolicyRefusal) with nothing of this lease written. `cut`:
 * the preemptible leases its booking cut (issue 43), to be told once committed.
 */
async function bookAndRecord(deps: ApiAdmissionDeps, client: PoolClient, request: NewLeaseRequest, requestHash: string, draft = newLease(request)): Promise<{ lease: Lease; input: LeaseWorkflowInput; cut: string[] }> {
  await client.query('SAVEPOINT lease_booking');
  let { booked, cut } = await bookReservations(deps, client, draft, true);
  // A lease an approval rule (or an exception asked with a justification) holds is recorded waiting for approval.
  const check = (next: Lease) => deps.usagePolicy?.checkWithin(client, { next, byAdmin: request.byAdmin ?? false, justification: request.justification });
  let approval = await check(booked);
  if (approval && cut.length > 0) {
    // A lease admins may still refuse never preempts: its cuts undone, it is booked on what is free, or refused for capacity.
    await client.query('ROLLBACK TO SAVEPOINT lease_booking');
    ({ booked, cut } = await bookReservations(deps, client, draft, false));
    approval = await check(booked);
  }
  // No RELEASE: the commit (or an enclosing occurrence's release or rollback) drops the savepoint, and every admission is spared a round trip.
  const lease = awaitingApproval(booked, approval, booked.updatedMs);
  const saved = await saveLease(client, lease);
  if (saved === 'name-taken') throw leaseConflict(`The lease with name: ${lease.name} already exists. Names are unique per project (${lease.projectId}).`);
  if (saved === 'deleted') throw ApplicationFailure.nonRetryable(`Lease ${lease.id}, created with this Idempotency-Key, was deleted: use another key for a new lease`, LeaseErrorType.deleted);
  if (saved === 'stale') throw new AdmittedMeanwhile();
  const input: LeaseWorkflowInput = { request, requestHash, admitted: lease };
  await addOwedStart(client, lease.id, requestHash, input);
  return { lease, input, cut };
}

/** Books every reservation of the draft in the caller's transaction; `preempt`: may cut preemptible leases (their ids in `cut`). */
async function bookReservations(deps: ApiAdmissionDeps, client: PoolClient, draft: Lease, preempt: boolean): Promise<{ booked: Lease; cut: string[] }> {
  const reservations = [];
  const cut: string[] = [];
  for (const reservation of draft.reservations) {
    const type = deps.types.get(reservation.resource_type)!;
    // This transaction also checks the policy and records the lease: a refusal undoes any cut with the rest (issue 43).
    const booked: ReserveResult = await type.bookAtAdmission!(client, typedContext(type, reservationContext(draft, reservation)), { preempt, cut });
    reservations.push(bookedReservation(reservation, booked));
  }
  return { booked: { ...draft, reservations, version: draft.version + 1, updatedMs: Date.now() }, cut };
}

/** A lease admission's failure as the API answers it (ApiError), if it is one; anything else as it is. */
export function admissionError(err: unknown): unknown {
  const failure = policyFailure(err);
  return (failure instanceof ApplicationFailure ? failureAsApiError(failure) : undefined) ?? failure;
}

/** The occurrences of a series the API admits in one transaction: what fits, and what was refused (as the API answers it). */
export interface SeriesAdmission {
  admitted: Lease[];
  refused: Array<{ index: number; error: ApiError }>;
  /** All or nothing, and something was refused: nothing was written. */
  rolledBack: boolean;
}

class SeriesRefused extends Error {
  constructor(readonly refused: SeriesAdmission['refused']) {
    super('an occurrence of the series was refused');
  }
}

/**
 * Admits the occurrences of a series in one transaction, one after another (each checked by the
 * usage policy with the earlier ones recorded), each in a savepoint: a refused one leaves nothing
 * behind, and the others are still tried, so that the answer names every occurrence that does not
 * fit. All or nothing (`partial` false): one refusal rolls everything back. `record` writes the
 * series itself in the same transaction (told what was refused). `isRefusal`: which of the
 * answers (ApiError) refuse one occurrence rather than the whole request.
 */
export function admitSeriesInApi(
  deps: ApiAdmissionDeps,
  occurrences: Array<{ request: NewLeaseRequest; requestHash: string }>,
  options: { partial: boolean; record: (client: PoolClient, refused: SeriesAdmission['refused']) => Promise<void>; isRefusal: (err: ApiError) => boolean },
): Promise<SeriesAdmission> {
  return deps.outbox.whileAdmitting(async () => {
    await deps.temporalReady();
    await beforeAdmission(deps.types, occurrences.flatMap((o) => o.request.reservations));
    try {
      const outcome = await bookInTransaction(
        deps.pool,
        async (client) => {
          const admitted: Array<{ lease: Lease; input: LeaseWorkflowInput; cut: string[] }> = [];
          const refused: SeriesAdmission['refused'] = [];
          for (const [index, occurrence] of occurrences.entries()) {
            await client.query('SAVEPOINT occurrence');
            try {
              admitted.push(await bookAndRecord(deps, client, occurrence.request, occurrence.requestHash));
              await client.query('RELEASE SAVEPOINT occurrence');
            } catch (err) {
              const answered = admissionError(err);
              // A lost race (a database error) runs the whole transaction again; a refusal of this occurrence is undone alone.
              if (!(answered instanceof ApiError) || !options.isRefusal(answered)) throw answered;
              await client.query('ROLLBACK TO SAVEPOINT occurrence');
              refused.push({ index, error: answered });
            }
          }
          if (refused.length > 0 && !options.partial) throw new SeriesRefused(refused);
          await options.record(client, refused);
          return { admitted, refused };
        },
        { retryExclusion: true },
      );
      for (const { input } of outcome.admitted) deps.outbox.startSoon(input);
      deps.outbox.tellPreemptedSoon(outcome.admitted.flatMap((a) => a.cut));
      return { admitted: outcome.admitted.map((a) => a.lease), refused: outcome.refused, rolledBack: false };
    } catch (err) {
      if (err instanceof SeriesRefused) return { admitted: [], refused: err.refused, rolledBack: true };
      throw err;
    }
  });
}

/**
 * A lease already recorded under this id (an Idempotency-Key used before): the same request
 * answers it; another request is refused, as the workflow's admission refuses it. A lease the
 * workflow admitted (no outbox row) is its workflow's to answer.
 */
async function earlierAdmission(pool: Pool, leaseId: string, requestHash: string): Promise<Lease | 'admitted-by-workflow' | undefined> {
  const lease = await findLease(pool, leaseId);
  if (!lease) return undefined;
  const hash = await admittedRequestHash(pool, leaseId);
  if (hash === undefined) return 'admitted-by-workflow';
  if (hash !== requestHash) throw new ApiError(409, 'this Idempotency-Key was already used for a different request');
  return lease;
}
