/**
 * Notices from the worker's side: who listens to an event (webhooks, oslo.messaging), starting a
 * notice's delivery, delivering it to one channel, and counting what was dropped.
 */
import type { Notice } from '../domain/notices';
import type { Pool } from '../db/pool';
import type { NoticeTargets } from '../domain/notices';
import { OsloPublisher } from './oslo';
import { noteDropped, noticeTargets, sendToWebhook, type NoticeSettings } from './webhooks';

export interface NoticeService {
  /** Starts the notice's delivery (its own workflow) when anyone listens to it; whether anyone does. */
  announce(notice: Notice): Promise<boolean>;
  /** Throws NoticeRefusedError (final) or NoticeFailedError (to retry). */
  deliverWebhook(webhookId: string, notice: Notice): Promise<void>;
  publishOslo(notice: Notice): Promise<void>;
  dropped(drop: { channel: string; noticeId: string; eventType: string; reason: string }): Promise<void>;
  close(): Promise<void>;
}

export interface NoticeServiceDeps {
  pool: Pool;
  settings: NoticeSettings;
  /** Starts the notice's delivery workflow (idempotent by the notice's id): the worker's Temporal client. */
  startDelivery: (notice: Notice, targets: NoticeTargets) => Promise<void>;
  /** Told of every notice dropped (the worker's metrics). */
  onDropped?: (eventType: string, channel: 'webhook' | 'oslo') => void;
}

export function noticeService(deps: NoticeServiceDeps): NoticeService {
  const { pool, settings } = deps;
  const oslo = settings.oslo ? new OsloPublisher({ ...settings.oslo, timeoutMs: settings.timeoutMs }) : undefined;
  return {
    async announce(notice) {
      const targets = await noticeTargets(pool, settings, notice);
      if (targets.webhooks.length === 0 && !targets.oslo) return false;
      await deps.startDelivery(notice, targets);
      return true;
    },
    async deliverWebhook(webhookId, notice) {
      await sendToWebhook(pool, settings, webhookId, notice);
    },
    async publishOslo(notice) {
      if (!oslo) return; // oslo.messaging was switched off since the notice was announced
      await oslo.publish(notice);
    },
    async dropped({ channel, eventType, reason }) {
      deps.onDropped?.(eventType, channel === 'oslo' ? 'oslo' : 'webhook');
      if (channel !== 'oslo') await noteDropped(pool, channel, reason);
    },
    async close() {
      await oslo?.close();
    },
  };
}
