import { ApplicationFailure } from '@temporalio/common';
import { isDatabaseUnavailable } from '../src/db/pool';
import { LeaseErrorType } from '../src/domain/lease';
import type { ActivityDeps } from './deps';
import { leaseActivities } from './leases';
import { reservationActivities } from './reservations';
import { selfCheckActivities } from './selfcheck';

export type { ActivityDeps };

/** Every activity the worker registers; workflows import only the type. */
export function createActivities(deps: ActivityDeps) {
  return databaseOutagesNamed({
    ...selfCheckActivities(deps),
    ...leaseActivities(deps),
    ...reservationActivities(deps),
  });
}

/**
 * A PostgreSQL outage (restart, failover) fails any activity the same way: retryable, with a type
 * the API answers as 503 when it is still failing after the retries a waiting REST call allows.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
function databaseOutagesNamed<T extends Record<string, (...args: any[]) => Promise<unknown>>>(activities: T): T {
  const wrapped: Record<string, unknown> = {};
  for (const [name, activity] of Object.entries(activities)) {
    wrapped[name] = async (...args: unknown[]) => {
      try {
        return await activity(...args);
      } catch (err) {
        if (isDatabaseUnavailable(err)) throw ApplicationFailure.retryable(`the database is unavailable (${(err as Error).message})`, LeaseErrorType.unavailable);
        throw err;
      }
    };
  }
  return wrapped as T;
}

export type Activities = ReturnType<typeof createActivities>;
