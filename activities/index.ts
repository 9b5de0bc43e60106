/** The activities, thin: each runs one hook of one resource plugin (reservations.ts), records the lease (leases.ts), or serves the host monitor (hosts.ts) or the power planner (power.ts). */
import { ApplicationFailure } from '@temporalio/common';
import { Context } from '@temporalio/activity';
import { databaseDataError, isDatabaseUnavailable } from '../src/db/pool';
import { LeaseErrorType } from '../src/domain/lease';
import type { ActivityDeps } from './deps';
import { hostActivities } from './hosts';
import { leaseActivities } from './leases';
import { noticeActivities } from './notices';
import { offerHoldActivities } from './offer-holds';
import { powerActivities } from './power';
import { reservationActivities } from './reservations';
import { selfCheckActivities } from './selfcheck';

export type { ActivityDeps };

/** Every activity the worker registers; workflows import only the type. */
export function createActivities(deps: ActivityDeps) {
  return databaseOutagesNamed({
    ...selfCheckActivities(deps),
    ...leaseActivities(deps),
    ...reservationActivities(deps),
    ...hostActivities(deps),
    ...noticeActivities(deps),
    ...offerHoldActivities(deps),
    ...powerActivities(deps),
  });
}

/**
 * Records of the lease's state are retried without end by the workflow (it is the source of
 * truth); an outage stays retryable, but any other failure of one ends after this many attempts
 * (about 2 minutes with the workflow's backoff), so that no step holds a lease's lock for ever.
 */
const RECORD_ATTEMPTS = 10;
const BOUNDED_RETRIES = new Set(['recordLease', 'recordLeaseDeleted']);

/** The running activity's context; undefined when called outside an activity (tests). */
function activityContext(): Context | undefined {
  try {
    return Context.current();
  } catch {
    return undefined;
  }
}

/**
 * A PostgreSQL outage (restart, failover) fails any activity the same way: retryable, with a type
 * the API answers as 503 when it is still failing after the retries a waiting REST call allows.
 * Values PostgreSQL refuses (a data error) fail it for good, as an invalid lease (400).
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
function databaseOutagesNamed<T extends Record<string, (...args: any[]) => Promise<unknown>>>(activities: T): T {
  const wrapped: Record<string, unknown> = {};
  for (const [name, activity] of Object.entries(activities)) {
    wrapped[name] = async (...args: unknown[]) => {
      try {
        return await activity(...args);
      } catch (err) {
        if (isDatabaseUnavailable(err)) {
          activityContext()?.log.warn('the database is unavailable', { activity: name, error: (err as Error).message });
          throw ApplicationFailure.retryable('the database is unavailable: try again shortly', LeaseErrorType.unavailable);
        }
        const dataError = databaseDataError(err);
        if (dataError) {
          // Final: the same values are refused again, and a retrying step would hold the lease's lock for ever.
          activityContext()?.log.warn('the database refused a value', { activity: name, error: (err as Error).message, code: (err as { code?: string }).code });
          throw ApplicationFailure.nonRetryable(`the database refused a value: ${dataError}`, LeaseErrorType.invalid);
        }
        const attempt = activityContext()?.info.attempt ?? 0;
        if (BOUNDED_RETRIES.has(name) && attempt >= RECORD_ATTEMPTS && !(err instanceof ApplicationFailure)) {
          activityContext()?.log.error('giving up on a record that keeps failing', { activity: name, attempt, error: (err as Error).message });
          throw ApplicationFailure.nonRetryable(`the lease could not be recorded (failed ${attempt} times): see the worker log`, 'RecordFailed');
        }
        throw err;
      }
    };
  }
  return wrapped as T;
}

export type Activities = ReturnType<typeof createActivities>;
