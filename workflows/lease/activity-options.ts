/**
 * The lease workflow's activities, one proxy per retry policy: a step picks the policy its failure
 * calls for (answer a waiting caller fast, never give up, keep trying for a while…), whatever its phase.
 */
import { proxyActivities, proxyLocalActivities } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import type { Reservation } from '../../src/domain/lease';

/**
 * For a waiting REST call (admission, updates): local activities (run in the worker, no extra round
 * trip through the server), a few quick tries, then fail the request.
 */
export const quick = proxyLocalActivities<Activities>({
  startToCloseTimeout: '20 seconds',
  retry: { initialInterval: '200 milliseconds', maximumAttempts: 3, nonRetryableErrorTypes: ['LeaseConflict', 'InvalidLease'] },
});

/** Recording state must eventually succeed (the workflow is the source of truth): retry until it does. */
const RECORDING = { startToCloseTimeout: '15 seconds', retry: { initialInterval: '500 milliseconds', maximumInterval: '30 seconds' } } as const;
export const recording = proxyActivities<Activities>(RECORDING);
/**
 * The same as local activities: a transition is then one workflow task instead of three (schedule,
 * run, resume), which is most of what the server does per start or end (patch 'record-locally').
 */
export const recordingLocally = proxyLocalActivities<Activities>(RECORDING);

/**
 * Resource hooks heartbeat while they run (activities/reservations.ts): a worker that dies mid-hook
 * is noticed within this timeout and the hook runs again on another worker. The workers send a
 * hook's heartbeat at least every 3 s (worker/create-worker.ts), so 10 s leaves room for a slow
 * round trip; it was 20 s (a changed timeout replays: histories do not compare it).
 */
const HOOK_HEARTBEAT_TIMEOUT = '10 seconds';

/** A lend's time per host it may look at: it fences and looks at each (three Nova calls), and a busy host costs a move back. */
const LEND_MS_PER_HOST = 20_000;
/** Any lend's longest attempt (a lend of 1 000 hosts on a slow Nova is given up after this, and tried again). */
const LEND_MAX_MS = 3_600_000;

/** The start-to-close time of a lend that may look at `count` hosts (lendCandidateCount): a minute, then LEND_MS_PER_HOST per host, at most LEND_MAX_MS. */
export const lendTimeoutMs = (count: number): number => Math.min(LEND_MAX_MS, 60_000 + Math.max(1, Math.floor(count)) * LEND_MS_PER_HOST);

/** A lend's three tries. */
const LEND_TRIES = 3;
/** What a lend leaves before its lease's end: it holds the lease's lock, and the end (then the next lease on those hosts, maybe another project's) waits for it. */
const LEND_END_MARGIN_MS = 10 * 60_000;
/** A lend's shortest total time, however near its lease's end. */
const LEND_MIN_TOTAL_MS = 60_000;

/** A lend's total time, its tries included: their worth, but ending LEND_END_MARGIN_MS before its lease's end, `msToEnd` from now. */
export const lendTotalMs = (count: number, msToEnd: number): number => Math.min(LEND_TRIES * lendTimeoutMs(count), Math.max(LEND_MIN_TOTAL_MS, msToEnd - LEND_END_MARGIN_MS));

/**
 * A lend that may look at `count` hosts for its waiting REST call (patch LEND_AS_ACTIVITY): a regular activity with a time that fits
 * them and a heartbeat per host fenced, so that an attempt a dead worker held is tried
 * again within the heartbeat timeout, and one given up on stops fencing (its retry carries on from
 * the hosts it fenced: the hook is idempotent by lending id). A few tries, all over well before the
 * lease's end, `msToEnd` from now; a refusal is final.
 */
export function forLend(count: number, msToEnd: number) {
  return proxyActivities<Activities>({
    startToCloseTimeout: lendTimeoutMs(count),
    scheduleToCloseTimeout: lendTotalMs(count, msToEnd),
    heartbeatTimeout: HOOK_HEARTBEAT_TIMEOUT,
    retry: { initialInterval: '1 second', maximumAttempts: LEND_TRIES, nonRetryableErrorTypes: ['LeaseConflict', 'InvalidLease'] },
  });
}

/** Keep trying for a while (starting resources), then let the lease fail. */
export const patient = proxyActivities<Activities>({
  startToCloseTimeout: '5 minutes',
  scheduleToCloseTimeout: '30 minutes',
  heartbeatTimeout: HOOK_HEARTBEAT_TIMEOUT,
  retry: { initialInterval: '1 second', maximumInterval: '1 minute' },
});

/**
 * Healing after hosts failed: it holds the lease's lock, so it gives up within minutes (the lease
 * stays as it was, degraded) and the host monitor's next sweep asks again.
 */
export const healing = proxyActivities<Activities>({
  startToCloseTimeout: '2 minutes',
  scheduleToCloseTimeout: '5 minutes',
  heartbeatTimeout: HOOK_HEARTBEAT_TIMEOUT,
  retry: { initialInterval: '1 second', maximumInterval: '30 seconds', nonRetryableErrorTypes: ['LeaseConflict', 'InvalidLease'] },
});

/** Must finish (taking resources back): retry for a day before giving up. */
export const mustFinish = proxyActivities<Activities>({
  startToCloseTimeout: '15 minutes',
  scheduleToCloseTimeout: '24 hours',
  heartbeatTimeout: HOOK_HEARTBEAT_TIMEOUT,
  retry: { initialInterval: '1 second', maximumInterval: '5 minutes' },
});

/** One start step, with the time-out and retries its plugin chose for it. */
export function forStep(step: NonNullable<Reservation['startSteps']>[number]) {
  return proxyActivities<Activities>({
    startToCloseTimeout: step.timeoutSeconds * 1000,
    heartbeatTimeout: HOOK_HEARTBEAT_TIMEOUT,
    retry: { initialInterval: step.retryIntervalSeconds * 1000, maximumInterval: '1 minute', maximumAttempts: step.maximumAttempts },
  });
}

/**
 * A poll by retries: the activity fails while what it waits for is not done, and its retries, every
 * `intervalMs`, add nothing to the history however long the wait.
 */
export function polling(intervalMs: number) {
  return proxyActivities<Activities>({
    startToCloseTimeout: '5 minutes',
    heartbeatTimeout: HOOK_HEARTBEAT_TIMEOUT,
    retry: { initialInterval: intervalMs, backoffCoefficient: 1, maximumInterval: intervalMs },
  });
}

/**
 * Announcing a notice (its delivery runs in a workflow of its own) and telling the external policy
 * filter of an end: local, a few quick tries, never failing the lease.
 */
export const announcing = proxyLocalActivities<Activities>({
  startToCloseTimeout: '15 seconds',
  retry: { initialInterval: '500 milliseconds', maximumAttempts: 3 },
});

/**
 * A read given up within minutes: whether the lessee uses a lease's resources (idle-lease reaping:
 * then taken as in use); what a failed lend or reclaim left in the calendar, and a failed lend's
 * put-back (under the lease's lock: then the lend's or reclaim's own error is the answer).
 */
export const looking = proxyActivities<Activities>({
  startToCloseTimeout: '1 minute',
  scheduleToCloseTimeout: '3 minutes',
  retry: { initialInterval: '1 second', maximumInterval: '30 seconds' },
});
