/**
 * One notice's delivery (id `notice-<notice id>`): to every webhook that wants it and to
 * oslo.messaging, each retried with backoff until the deployment's retry span is over, then dropped
 * and counted. Its own workflow, on the notices task queue (the worker's notice worker, with slots
 * of its own), so that a dead receiver never holds up a lease.
 */
import { ApplicationFailure, log, patched, proxyActivities, proxyLocalActivities, sleep, type RetryPolicy } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import type { Notice, NoticeTargets } from '../../src/domain/notices';
import { failureMessage } from '../lease/failures';
import type { NoticeOutcome } from './messages';
import { NOTICE_DELIVERY_HOLDS } from '../patches';

const counting = proxyLocalActivities<Activities>({ startToCloseTimeout: '10 seconds', retry: { maximumAttempts: 5 } });

/** A busy project's deliveries back off from the activity's hint (how long its oldest delivery in flight has run) up to this between two asks. */
const MAX_BUSY_WAIT_MS = 30_000;
/** Holds per channel at most (with the waits above, far beyond any retry span's worth of asks): the loop's bound. */
const MAX_HOLDS = 5_000;

export async function noticeWorkflow(notice: Notice, targets: NoticeTargets): Promise<NoticeOutcome> {
  const retry: RetryPolicy = { initialInterval: '2 seconds', backoffCoefficient: 2, maximumInterval: '1 hour', nonRetryableErrorTypes: ['NoticeRefused'] };
  const delivering = proxyActivities<Activities>({ startToCloseTimeout: '1 minute', scheduleToCloseTimeout: Math.max(1_000, targets.retryForMs), retry });
  // Patch (../patches.ts): a held webhook delivery waits on a timer, holding no activity slot.
  const holds = patched(NOTICE_DELIVERY_HOLDS.id);
  const deadline = Date.now() + targets.retryForMs;
  /** A webhook delivered with holds: each ask gets what is left of the retry span. */
  const deliverHeld = async (webhookId: string) => {
    let busyWaitMs = 0;
    for (let hold = 0; hold < MAX_HOLDS; hold++) {
      const left = deadline - Date.now();
      const asking = proxyActivities<Activities>({ startToCloseTimeout: '1 minute', scheduleToCloseTimeout: Math.max(1_000, left), retry });
      const held = await asking.deliverWebhookNotice({ webhookId, notice, mayHold: true });
      if (!held) return;
      busyWaitMs = held.reason === 'busy' ? Math.min(MAX_BUSY_WAIT_MS, Math.max(held.heldForMs, busyWaitMs * 1.5)) : 0;
      // Spread (up to half again), so that the deliveries held together do not all ask again at once.
      const baseMs = held.reason === 'busy' ? busyWaitMs : held.heldForMs;
      const waitMs = baseMs + Math.floor(Math.random() * Math.min(baseMs / 2, MAX_BUSY_WAIT_MS));
      if (Date.now() + waitMs >= deadline) throw ApplicationFailure.nonRetryable(`held back (${held.reason === 'busy' ? 'its project had its deliveries in flight' : 'the webhook kept failing to answer'}) until the retry span was over`);
      await sleep(waitMs);
    }
    throw ApplicationFailure.nonRetryable(`held back ${MAX_HOLDS} times`);
  };
  const channels: Array<{ channel: string; send: () => Promise<unknown> }> = [
    ...targets.webhooks.map((webhookId) => ({ channel: webhookId, send: () => (holds ? deliverHeld(webhookId) : delivering.deliverWebhookNotice({ webhookId, notice })) })),
    ...(targets.oslo ? [{ channel: 'oslo', send: () => delivering.publishOsloNotice(notice) }] : []),
  ];
  const outcomes = await Promise.all(
    channels.map(async ({ channel, send }) => {
      try {
        await send();
        return 'delivered' as const;
      } catch (err) {
        const reason = failureMessage(err);
        log.warn('a notice was dropped', { noticeId: notice.id, eventType: notice.eventType, channel, reason });
        await counting.noticeDropped({ channel, noticeId: notice.id, eventType: notice.eventType, reason }).catch(() => undefined);
        return 'dropped' as const;
      }
    }),
  );
  return { delivered: outcomes.filter((o) => o === 'delivered').length, dropped: outcomes.filter((o) => o === 'dropped').length };
}
