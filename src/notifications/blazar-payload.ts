/**
 * What a notice says, in Blazar's shapes (pure). Blazar 17 (blazar/notification/api.py,
 * format_lease_payload, "the entire lease data") sends the whole lease as its payload:
 * lease_id, user_id, project_id, trust_id, start_date, end_date, status, reservations, events,
 * name, created_at, updated_at, degraded; its notifier (blazar/notification/notifier.py) sends
 * every lease event at priority INFO with publisher_id `blazar.lease` ([notifications] publisher_id).
 * oslo.messaging's messagingv2 driver wraps the message in its 2.0 envelope
 * (oslo_messaging/_drivers/common.py serialize_msg) whose inner message is a JSON string.
 */
import { createHash } from 'node:crypto';
import { toBlazarLease, uuidShaped } from '../domain/blazar-format';
import { pythonIsoformat } from '../domain/dates';
import type { Notice, NoticeType } from '../domain/notices';

/**
 * The payload: for a lease event Blazar's (the lease as it was, via toBlazarLease: Blazar's own date
 * formats), then the notice's details beside it (the hosts a warning is about, what healing
 * changed…), never over one of Blazar's fields; for a host event its details.
 */
export function noticePayload(notice: Notice): Record<string, unknown> {
  if (!notice.lease) return { ...notice.details };
  const lease = toBlazarLease(notice.lease);
  const blazar: Record<string, unknown> = {
    lease_id: lease.id,
    user_id: lease.user_id,
    project_id: lease.project_id,
    trust_id: lease.trust_id,
    start_date: lease.start_date,
    end_date: lease.end_date,
    status: lease.status,
    reservations: lease.reservations,
    events: lease.events,
    name: lease.name,
    created_at: lease.created_at,
    updated_at: lease.updated_at,
    degraded: lease.degraded,
    // Not Blazar's, as in our API: why the lease is in ERROR.
    ...(lease.status_reason ? { status_reason: lease.status_reason } : {}),
  };
  const details = Object.entries(notice.details ?? {}).filter(([key]) => !(key in blazar));
  return { ...blazar, ...Object.fromEntries(details) };
}

/**
 * The message id: a UUID derived from the notice's id, so that a notice delivered again (a retried
 * activity, a lost confirm) carries the same one and receivers can drop the duplicate.
 */
export function noticeMessageId(notice: Pick<Notice, 'id'>): string {
  return uuidShaped(createHash('sha1').update(`leasekeeper-notice:${notice.id}`).digest('hex'), 5);
}

/** The webhook's JSON body. */
export function noticeBody(notice: Notice): { event_type: NoticeType; message_id: string; timestamp: string; payload: Record<string, unknown> } {
  return { event_type: notice.eventType, message_id: noticeMessageId(notice), timestamp: new Date(notice.occurredMs).toISOString(), payload: noticePayload(notice) };
}

/** oslo's priority: Blazar sends every lease event as INFO; a lease gone to ERROR (ours) as ERROR. */
export function osloPriority(eventType: NoticeType): 'INFO' | 'ERROR' {
  return eventType === 'lease.error' ? 'ERROR' : 'INFO';
}

export interface OsloEnvelope {
  'oslo.version': '2.0';
  /** The message, JSON as Python's json.dumps writes it. */
  'oslo.message': string;
}

/**
 * The envelope Blazar's notifier would publish for this notice: oslo's message fields in oslo's
 * order (notify/notifier.py _notify), the driver's `_unique_id` (here the message id's hex: an oslo
 * listener drops a republished duplicate) and the request context flattened as `_context_<key>`
 * (amqpdriver pack_context): the lease's user and project, none for host events.
 */
export function osloEnvelope(notice: Notice, publisherId: string): OsloEnvelope {
  const messageId = noticeMessageId(notice);
  const message = {
    message_id: messageId,
    publisher_id: publisherId,
    event_type: notice.eventType,
    priority: osloPriority(notice.eventType),
    payload: noticePayload(notice),
    // oslo's `str(timeutils.utcnow())`: Python's isoformat with a space (`.000000` dropped).
    timestamp: pythonIsoformat(notice.occurredMs, ' '),
    _unique_id: messageId.replace(/-/g, ''),
    ...(notice.lease ? { _context_user_id: notice.lease.userId, _context_project_id: notice.lease.projectId } : {}),
  };
  return { 'oslo.version': '2.0', 'oslo.message': pythonJson(message) };
}

/**
 * JSON as Python's json.dumps writes it by default (oslo's jsonutils, kombu's serializer): `", "` and
 * `": "` between items, and everything outside printable ASCII escaped as \uXXXX.
 */
export function pythonJson(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'string') return JSON.stringify(value).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  if (typeof value === 'number') return Number.isFinite(value) ? JSON.stringify(value) : 'null';
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(', ')}]`;
  if (typeof value === 'object') {
    if (value instanceof Date) return pythonJson(value.toISOString());
    const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined && typeof v !== 'function');
    return `{${entries.map(([k, v]) => `${pythonJson(k)}: ${pythonJson(v)}`).join(', ')}}`;
  }
  return 'null';
}
