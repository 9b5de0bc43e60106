/**
 * One notice's delivery (id `notice-<notice id>`): to every webhook that wants it and to
 * oslo.messaging, each retried with backoff until the deployment's retry span is over, then dropped
 * and counted. Its own workflow, so that a dead receiver never holds up a lease.
 */
import { log, proxyActivities, proxyLocalActivities } from '@temporalio/workflow';
import type { Activities } from '../../activities';
import type { Notice, NoticeTargets } from '../../src/domain/notices';
import { failureMessage } from '../lease/failures';
import type { NoticeOutcome } from './messages';

const counting = proxyLocalActivities<Activities>({ startToCloseTimeout: '10 seconds', retry: { maximumAttempts: 5 } });

export async function noticeWorkflow(notice: Notice, targets: NoticeTargets): Promise<NoticeOutcome> {
  const delivering = proxyActivities<Activities>({
    startToCloseTimeout: '1 minute',
    scheduleToCloseTimeout: Math.max(1_000, targets.retryForMs),
    retry: { initialInterval: '2 seconds', backoffCoefficient: 2, maximumInterval: '1 hour', nonRetryableErrorTypes: ['NoticeRefused'] },
  });
  const channels: Array<{ channel: string; send: () => Promise<void> }> = [
    ...targets.webhooks.map((webhookId) => ({ channel: webhookId, send: () => delivering.deliverWebhookNotice({ webhookId, notice }) })),
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
