/**
 * What leasekeeper tells the world (webhooks, oslo.messaging): every lease event and the host
 * monitor's, in Blazar's event types where Blazar has one. A notice is made once, in the workflow
 * where the event happens, and delivered by activities that retry for a day without ever holding
 * up the lease (workflows/notices). Pure types: the workflows hand notices on.
 */
import type { Lease } from './lease';

export const LEASE_NOTICE_TYPES = [
  'lease.create',
  'lease.update',
  'lease.delete',
  'lease.event.start_lease',
  'lease.event.before_end_lease',
  'lease.event.end_lease',
  'lease.error',
  'lease.degraded',
  'lease.healed',
  'lease.idle',
  // Approval (issue 42): asked, granted, refused (by an admin or the timeout).
  'lease.approval_requested',
  'lease.approved',
  'lease.denied',
  // Preemptible leases (issue 43): cut short by a regular lease that needs the hosts (or whose lender takes them back).
  'lease.preempting',
  // Lending (issue 43): an active lease's hosts sit idle; they could be lent (never lent by itself).
  'lease.lend_suggested',
] as const;
/** The approval notices: what the approvers' webhooks (the deployment's and projects') hear. */
export const APPROVAL_NOTICE_TYPES = ['lease.approval_requested', 'lease.approved', 'lease.denied'] as const satisfies ReadonlyArray<(typeof LEASE_NOTICE_TYPES)[number]>;
export const HOST_NOTICE_TYPES = ['host.failed', 'host.recovered'] as const;
export const NOTICE_TYPES = [...LEASE_NOTICE_TYPES, ...HOST_NOTICE_TYPES] as const;
export type NoticeType = (typeof NOTICE_TYPES)[number];

/** One event, as the workflow that saw it hands it on (no secrets: it is kept in Temporal's history). */
export interface Notice {
  /** Unique per event: the webhooks' Idempotency-Key, and the oslo message id's seed. */
  id: string;
  eventType: NoticeType;
  occurredMs: number;
  /** The project whose webhooks hear it (lease events); none for host events (the deployment's only). */
  projectId?: string;
  /** Lease events: the lease as it was then; the payload is made from it as Blazar makes its own. */
  lease?: Lease;
  /** More for the payload: a host event's fields, a warning's offset, what healing changed… */
  details?: Record<string, unknown>;
}

/** Where a notice goes, named by id only: secrets stay in the deployment's settings and the database. */
export interface NoticeTargets {
  /** Webhook ids: `deployment:<n>` (LK_WEBHOOK_URLS) or a project webhook's uuid. */
  webhooks: string[];
  /** Whether oslo.messaging is set up (LK_NOTIFICATION_TRANSPORT_URL). */
  oslo: boolean;
  /** How long deliveries are retried before the notice is dropped (LK_NOTICE_RETRY_HOURS). */
  retryForMs: number;
}

/** What a resource type tells the lessee from one of its hooks (the activity makes it a notice of the lease). */
export interface ReservationNotice {
  eventType: 'lease.degraded' | 'lease.healed' | 'lease.event.before_end_lease';
  details: Record<string, unknown>;
  /** Tells apart notices of one event that recur (degraded again, on other hosts). */
  key?: string;
}

/** A lease event's notice id: one per lease, event and lease version (a retried announce is the same notice). */
export const leaseNoticeId = (leaseId: string, eventType: NoticeType, version: number, key?: string): string =>
  [leaseId, eventType, `v${version}`, ...(key ? [key] : [])].join(':');

/** A host's change of state as a notice (the deployment's listeners only). */
export function hostNotice(change: { hostId: string; host: string; state: string; sinceMs: number; reason?: string }, leaseIds: string[], enrolled: boolean): Notice {
  return {
    id: `host:${change.hostId}:${change.state}:${change.sinceMs}`,
    eventType: change.state === 'failed' ? 'host.failed' : 'host.recovered',
    occurredMs: change.sinceMs,
    details: { host_id: enrolled ? change.hostId : null, host: change.host, state: change.state, state_since: new Date(change.sinceMs).toISOString(), reason: change.reason ?? null, lease_ids: leaseIds },
  };
}
