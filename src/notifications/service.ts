/**
 * Notices from the worker's side: who listens to an event (webhooks, oslo.messaging), starting a
 * notice's delivery, delivering it to one channel, and counting what was dropped.
 */
import type { Notice } from '../domain/notices';
import type { Pool } from '../db/pool';
import type { NoticeTargets } from '../domain/notices';
import { ProjectDeliveryCap, type DeliveryHeld } from './delivery-gates';
import { OsloPublisher } from './oslo';
import { noteDropped, noticeTargets, sendToWebhook, type NoticeSettings } from './webhooks';

export interface NoticeService {
  /** Starts the notice's delivery (its own workflow) when anyone listens to it; whether anyone does. */
  announce(notice: Notice): Promise<boolean>;
  /**
   * Throws NoticeRefusedError (final) or NoticeFailedError (to retry). With `mayHold` (the caller
   * waits and asks again), a project's webhook may be held instead: its project is at its cap in
   * flight, or its breaker holds it back.
   */
  deliverWebhook(webhookId: string, notice: Notice, mayHold?: boolean): Promise<DeliveryHeld | undefined>;
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
  // A delivery lasts at most its time-out (connecting is within it), and a moment to record it.
  const projectCap = new ProjectDeliveryCap(settings.delivery.projectInFlight, settings.timeoutMs + 1_000);
  const oslo = settings.oslo ? new OsloPublisher({ ...settings.oslo, timeoutMs: settings.timeoutMs }) : undefined;
  return {
    async announce(notice) {
      const targets = await noticeTargets(pool, settings, notice);
      if (targets.webhooks.length === 0 && !targets.oslo) return false;
      await deps.startDelivery(notice, targets);
      return true;
    },
    async deliverWebhook(webhookId, notice, mayHold = false) {
      const outcome = await sendToWebhook(pool, settings, webhookId, notice, mayHold ? { projectCap } : undefined);
      return typeof outcome === 'object' ? outcome : undefined;
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
