/**
 * Notices to the deployment's webhook (LK_NOTIFY_URL): lease notices (`before_end: notify`), in the
 * shape of Blazar's notifications (`event_type` lease.event.<event>, a payload with the lease and
 * the reservation), and host notices (`host.failed`, `host.recovered`). Each carries an
 * Idempotency-Key (per lease, reservation and event; per host and change), so a retried activity
 * lets the receiver drop the duplicate. 5xx and network errors are retried by the
 * activity's policy; 4xx is final.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { ReservationContext } from '../../domain/resource-plugin';

export interface NoticeSettings {
  url: string;
  timeoutMs?: number;
}

export interface LeaseNotice {
  /**
   * `before_end_lease` (Blazar's lease.event.before_end_lease), `degraded` (lease.degraded:
   * resources it was promised are missing) or `healed` (lease.healed: healing replaced some).
   */
  event: 'before_end_lease' | 'degraded' | 'healed';
  ctx: ReservationContext;
  details: Record<string, unknown>;
  /** Tells apart notices of one event that recur (a lease degraded again, on other hosts). */
  keySuffix?: string;
}

export async function sendLeaseNotice(settings: NoticeSettings | undefined, notice: LeaseNotice): Promise<void> {
  if (!settings) throw ApplicationFailure.nonRetryable('notify needs a notification endpoint (LK_NOTIFY_URL), and none is set', 'NoticesNotConfigured');
  const { ctx } = notice;
  await sendNotice(settings, {
    eventType: notice.event === 'before_end_lease' ? `lease.event.${notice.event}` : `lease.${notice.event}`,
    payload: {
      lease_id: ctx.leaseId,
      lease_name: ctx.leaseName,
      project_id: ctx.projectId,
      user_id: ctx.userId,
      reservation_id: ctx.reservation.id,
      resource_type: ctx.reservation.resource_type,
      start_date: new Date(ctx.startMs).toISOString(),
      end_date: new Date(ctx.endMs).toISOString(),
      ...notice.details,
    },
    idempotencyKey: [ctx.leaseId, ctx.reservation.id, notice.event, ...(notice.keySuffix ? [notice.keySuffix] : [])].join(':'),
  });
}

/** Any notice: `{event_type, payload}` posted to the deployment's endpoint, with its Idempotency-Key. */
export async function sendNotice(settings: NoticeSettings, notice: { eventType: string; payload: Record<string, unknown>; idempotencyKey: string }): Promise<void> {
  let res: Response;
  try {
    res = await fetch(settings.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': notice.idempotencyKey },
      body: JSON.stringify({ event_type: notice.eventType, payload: notice.payload }),
      signal: AbortSignal.timeout(settings.timeoutMs ?? 10_000),
    });
  } catch (err) {
    throw new Error(`notice to ${settings.url} failed: ${(err as Error).message}`); // retried
  }
  await res.arrayBuffer().catch(() => undefined);
  if (res.status >= 400 && res.status < 500) throw ApplicationFailure.nonRetryable(`notice to ${settings.url} refused: HTTP ${res.status}`, 'NoticeRefused');
  if (!res.ok) throw new Error(`notice to ${settings.url} failed: HTTP ${res.status}`);
}
