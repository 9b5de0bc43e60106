/** How the lease workflow tells a failure: as a message (log, Web UI, status reason) or to an update's caller. */
import { ActivityFailure, ApplicationFailure } from '@temporalio/workflow';

export function failureMessage(err: unknown): string {
  if (err instanceof ActivityFailure && err.cause) return err.cause.message;
  return err instanceof Error ? err.message : String(err);
}

/** Surfaces an activity's ApplicationFailure (its type maps to an HTTP status) to an update's caller. */
export function asFailure(err: unknown): ApplicationFailure {
  if (err instanceof ApplicationFailure) return err;
  if (err instanceof ActivityFailure && err.cause instanceof ApplicationFailure) {
    // Its details too (e.g. a lend's `idle`): the API answers them beside Blazar's three fields.
    return ApplicationFailure.create({ type: err.cause.type ?? 'LeaseError', message: err.cause.message, nonRetryable: true, details: err.cause.details ?? undefined });
  }
  return ApplicationFailure.create({ type: 'LeaseError', message: failureMessage(err), nonRetryable: true });
}
