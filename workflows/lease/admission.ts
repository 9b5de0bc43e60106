/**
 * Admission: the admit update, sent with the workflow's start (Update-with-Start), books the
 * reservations and records the lease, or refuses it (409/400). Nothing else happens before it.
 */
import { condition } from '@temporalio/workflow';
import { leaseConflict, LeaseErrorType, type Lease } from '../../src/domain/lease';
import { announce } from './announce';
import { book, releaseUnstarted } from './bookings';
import { asFailure } from './failures';
import type { AdmitRequest, LeaseOutcome } from './messages';
import { compensate, record } from './record';
import type { LeaseState } from './state';

/** An exception asked for, passed to the policy only when there is one (records as before otherwise). */
export const justification = (text: string | undefined) => (text !== undefined ? { justification: text } : {});

/** Admission tries again after a database outage, this many times in all. */
const ADMISSION_ATTEMPTS = 5;
/** How long a started workflow waits for its admit update before giving up (the REST call died). */
const ADMISSION_WAIT_MS = 5 * 60_000;

/** The admit update's handler (it runs under the lease's lock). */
export async function admit(s: LeaseState, { requestHash }: AdmitRequest): Promise<Lease> {
  if (requestHash !== s.input.requestHash) throw leaseConflict('this Idempotency-Key was already used for a different request');
  if (s.admission === 'admitted') return s.lease;
  if (s.admission === 'rejected') throw s.rejection!;
  for (let attempt = 1; ; attempt++) {
    try {
      await record(s, { ...s.lease, reservations: await book(s, s.lease) }, 'admission', { byAdmin: s.input.request.byAdmin ?? false, ...justification(s.input.request.justification) });
      s.admission = 'admitted';
      return s.lease;
    } catch (err) {
      await compensate(s, 'freeing the bookings of a refused admission', () => releaseUnstarted(s));
      const failure = asFailure(err);
      // PostgreSQL was unreachable: freeing the bookings above waited until it answered again, so try again.
      if (failure.type === LeaseErrorType.unavailable && attempt < ADMISSION_ATTEMPTS) continue;
      s.admission = 'rejected';
      s.rejection = failure;
      throw failure;
    }
  }
}

/**
 * Waits for the admission; answers the outcome when the lease was not admitted. An admitted lease
 * is announced here, once the admission's caller has its answer (a lease continued as new was announced before).
 */
export async function awaitAdmission(s: LeaseState): Promise<LeaseOutcome | undefined> {
  // Admission comes with the start (Update-with-Start); a start without it means the REST call died.
  if (!(await condition(() => s.admission !== 'pending', ADMISSION_WAIT_MS))) {
    return { id: s.lease.id, status: 'NOT_ADMITTED', reason: 'no admit update arrived' };
  }
  if (s.admission !== 'admitted') return { id: s.lease.id, status: 'REJECTED', reason: s.rejection?.message };
  if (!s.input.carried) await announce(s, 'lease.create');
  return undefined;
}
