/**
 * Notices as activities: announcing one (its delivery workflow started when anyone listens),
 * delivering it to one webhook or to oslo.messaging (retried by the notice workflow's policy; a
 * refusal is final), and counting what was dropped. Also the end of a lease told to Blazar's
 * external policy filter.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { Lease } from '../src/domain/lease';
import type { Notice } from '../src/domain/notices';
import type { DeliveryHeld } from '../src/notifications/delivery-gates';
import { NoticeRefusedError } from '../src/notifications/errors';
import type { ActivityDeps } from './deps';

export function noticeActivities({ notices, usagePolicy }: ActivityDeps) {
  return {
    /** Starts the notice's delivery if anyone listens to it; whether anyone does. */
    async announceNotice(notice: Notice): Promise<boolean> {
      return notices ? notices.announce(notice) : false;
    },

    /**
     * Delivers, or (`mayHold`: workflows since patch 'notice-delivery-holds') says how long to wait
     * first: the project has its cap in flight, or the webhook's breaker holds it back.
     */
    async deliverWebhookNotice({ webhookId, notice, mayHold }: { webhookId: string; notice: Notice; mayHold?: boolean }): Promise<DeliveryHeld | undefined> {
      if (!notices) throw ApplicationFailure.nonRetryable('this worker delivers no notices', 'NoticeRefused');
      try {
        return await notices.deliverWebhook(webhookId, notice, mayHold === true);
      } catch (err) {
        if (err instanceof NoticeRefusedError) throw ApplicationFailure.nonRetryable(err.message, 'NoticeRefused');
        throw err;
      }
    },

    async publishOsloNotice(notice: Notice): Promise<void> {
      if (!notices) throw ApplicationFailure.nonRetryable('this worker delivers no notices', 'NoticeRefused');
      await notices.publishOslo(notice);
    },

    async noticeDropped(drop: { channel: string; noticeId: string; eventType: string; reason: string }): Promise<void> {
      await notices?.dropped(drop);
    },

    /** Blazar's external filter hears that the lease ended (best effort: its failure is only logged). */
    async leaseEndedForPolicy(lease: Lease): Promise<string | undefined> {
      return usagePolicy?.leaseEnded(lease);
    },
  };
}
