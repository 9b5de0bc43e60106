import type { ActivityDeps } from './deps';
import { leaseActivities } from './leases';
import { reservationActivities } from './reservations';
import { selfCheckActivities } from './selfcheck';

export type { ActivityDeps };

/** Every activity the worker registers; workflows import only the type. */
export function createActivities(deps: ActivityDeps) {
  return {
    ...selfCheckActivities(deps),
    ...leaseActivities(deps),
    ...reservationActivities(deps),
  };
}

export type Activities = ReturnType<typeof createActivities>;
