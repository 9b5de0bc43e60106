/** Telling the world about the lease: notices of its events, and Blazar's external filter of its end. Best effort, never failing the lease. */
import { isCancellation, log, patched } from '@temporalio/workflow';
import { leaseNoticeId, type Notice, type NoticeType } from '../../src/domain/notices';
import { LEASE_NOTICES } from '../patches';
import { announcing } from './activity-options';
import { failureMessage } from './failures';
import type { LeaseState } from './state';

/**
 * Announces a lease event to whoever listens (one notice per event and lease version). Never
 * fails nor holds up the lease: delivery runs in a workflow of its own, and an announce that
 * cannot be made is logged.
 */
export async function announce(s: LeaseState, eventType: NoticeType, details?: Record<string, unknown>, key?: string): Promise<void> {
  if (!patched(LEASE_NOTICES.id)) return;
  const lease = s.lease;
  const notice: Notice = { id: leaseNoticeId(lease.id, eventType, lease.version, key), eventType, occurredMs: Date.now(), projectId: lease.projectId, lease, ...(details ? { details } : {}) };
  try {
    await announcing.announceNotice(notice);
  } catch (err) {
    if (isCancellation(err)) throw err;
    log.warn('a lease notice could not be announced', { leaseId: lease.id, eventType, error: failureMessage(err) });
  }
}

/** Blazar's external filter hears that the lease ended (its `on-end`), best effort. */
export async function tellPolicyEnded(s: LeaseState): Promise<void> {
  if (!patched(LEASE_NOTICES.id)) return;
  try {
    const problem = await announcing.leaseEndedForPolicy(s.lease);
    if (problem) log.warn('the external policy service was not told of the end', { leaseId: s.lease.id, problem });
  } catch (err) {
    if (isCancellation(err)) throw err;
    log.warn('the external policy service was not told of the end', { leaseId: s.lease.id, error: failureMessage(err) });
  }
}
