/**
 * Steps every phase shares: recording the lease (PostgreSQL, search attributes, the Web UI's
 * details), a transition (a change and an event's status, recorded), and compensations.
 */
import { isCancellation, log, patched, setCurrentDetails, upsertSearchAttributes } from '@temporalio/workflow';
import { withPendingChange } from '../../src/domain/approval';
import { leaseResourceTypes, type EventType, type Lease, type RecordPolicy } from '../../src/domain/lease';
import { LeaseEndKey, LeaseStartKey, LeaseStatusKey, ProjectIdKey, ResourceTypesKey } from '../../src/domain/search-attributes';
import { COMPENSATION_KEEPS_ORIGINAL_ERROR, RECORD_LOCALLY, TRANSITION_SURVIVES_FAILED_RECORD } from '../patches';
import { quick, recording, recordingLocally } from './activity-options';
import { failureMessage } from './failures';
import type { LeaseState } from './state';
import { describe } from './web-ui';

/** Changes the lease, marks an event, and records it everywhere (PostgreSQL, search attributes, Web UI). */
export async function transition(s: LeaseState, change: Partial<Lease>, eventType?: EventType, eventStatus?: Lease['events'][number]['status']): Promise<void> {
  const now = Date.now();
  const next: Lease = { ...s.lease, ...change };
  if (eventType && eventStatus) {
    next.events = next.events.map((e) => {
      if (e.event_type !== eventType) return e;
      return eventStatus === 'IN_PROGRESS' ? { ...e, status: eventStatus, startedAt: now } : { ...e, status: eventStatus, finishedAt: now };
    });
  }
  try {
    await record(s, next);
  } catch (err) {
    // A state that cannot be stored (refused by the database, or failing record after record) must not stop the
    // lease's life: the end must still free its resources. It carries on unrecorded; the row keeps the last state
    // stored, and a delete still removes it. (Before the patch a record never failed: it was retried for ever.)
    if (isCancellation(err) || !patched(TRANSITION_SURVIVES_FAILED_RECORD.id)) throw err;
    log.error('a lease transition could not be recorded', { leaseId: s.lease.id, status: next.status, error: failureMessage(err) });
    s.lease = { ...next, version: s.lease.version + 1, updatedMs: Date.now() };
  }
}

/**
 * Writes `next` (one version up) to PostgreSQL, then makes it the lease. `policy`: a change a user
 * asked for, checked against the usage policy in the same transaction (refused: nothing written).
 */
export async function record(s: LeaseState, next: Lease, phase: 'admission' | 'life' = 'life', policy?: RecordPolicy): Promise<void> {
  const versioned: Lease = { ...next, version: s.lease.version + 1, updatedMs: Date.now() };
  const recorded = await (phase === 'admission' ? quick : recorder()).recordLease(versioned, ...(policy ? [policy] : []));
  // The usage policy asked for approval (histories from before approval answer nothing here): of the
  // lease, or of an active lease's change (recorded as the lease was, the change waiting on it).
  if (recorded?.pendingChange) s.lease = withPendingChange(s.lease, versioned, recorded.pendingChange);
  else s.lease = recorded?.approval ? { ...versioned, status: 'PENDING_APPROVAL', approval: recorded.approval } : versioned;
  upsertSearchAttributes([
    { key: LeaseStatusKey, value: s.lease.status },
    { key: ProjectIdKey, value: s.lease.projectId },
    { key: LeaseStartKey, value: new Date(s.lease.startMs) },
    { key: LeaseEndKey, value: new Date(s.lease.endMs) },
    { key: ResourceTypesKey, value: leaseResourceTypes(s.lease) },
  ]);
  setCurrentDetails(describe(s.lease));
}

/** Histories from before the patch recorded transitions with (remote) activities. */
export function recorder() {
  return patched(RECORD_LOCALLY.id) ? recordingLocally : recording;
}

/**
 * Runs a compensation (freeing or putting back bookings after a failure). Should it fail too, the
 * failure is logged and the original error is what the caller gets (before the patch the
 * compensation's error replaced it).
 */
export async function compensate(s: LeaseState, what: string, undo: () => Promise<unknown>): Promise<void> {
  try {
    await undo();
  } catch (err) {
    if (isCancellation(err) || !patched(COMPENSATION_KEEPS_ORIGINAL_ERROR.id)) throw err;
    log.error(`${what} failed`, { leaseId: s.lease.id, error: failureMessage(err) });
  }
}
