/**
 * Blazar's wire formats, exactly: request dates `"now"` or `"YYYY-MM-DD HH:MM"` (UTC), response
 * dates `"YYYY-MM-DDTHH:MM:SS.ffffff"` (python-blazarclient parses exactly this) and
 * `created_at`/`updated_at` as `"YYYY-MM-DD HH:MM:SS"` (`updated_at` null until a change, as Blazar's).
 */
import { createHash } from 'node:crypto';
import { spanText, type Lease, type Reservation } from './lease';

const REQUEST_DATE = /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?Z?$/;

/** Parses Blazar's request date (also accepting seconds and ISO's `T`/`Z`); undefined when malformed or impossible. */
export function parseRequestDate(text: string): number | undefined {
  const m = REQUEST_DATE.exec(text.trim());
  if (!m) return undefined;
  const [year, month, day, hour, minute] = m.slice(1, 6).map(Number);
  const second = m[6] ? Number(m[6]) : 0;
  const fraction = m[7] ? Number(m[7].padEnd(3, '0').slice(0, 3)) : 0;
  const ms = Date.UTC(year, month - 1, day, hour, minute, second, fraction);
  const back = new Date(ms);
  // Reject dates that Date.UTC silently rolls over (2026-02-30, 24:61).
  if (back.getUTCFullYear() !== year || back.getUTCMonth() !== month - 1 || back.getUTCDate() !== day || back.getUTCHours() !== hour || back.getUTCMinutes() !== minute || second > 59) {
    return undefined;
  }
  return ms;
}

/** `2026-11-21T09:15:00.000000` */
export function formatLeaseDate(ms: number): string {
  return `${new Date(ms).toISOString().slice(0, 23)}000`;
}

/** `2026-11-21 09:15:00` */
export function formatTimestamp(ms: number): string {
  return new Date(ms).toISOString().slice(0, 19).replace('T', ' ');
}

function toBlazarReservation(lease: Lease, reservation: Reservation) {
  return {
    ...reservation.params,
    ...(reservation.allocation ?? {}),
    id: reservation.id,
    lease_id: lease.id,
    resource_type: reservation.resource_type,
    status: reservation.status,
    missing_resources: reservation.missing_resources ?? false,
    resources_changed: reservation.resources_changed ?? false,
    created_at: formatTimestamp(lease.createdMs),
    updated_at: formatTimestamp(lease.updatedMs),
  };
}

/** Blazar's `updated_at`: null until the lease changes after its creation (version 1 is the lease as admitted). */
function updatedAt(lease: Lease): string | null {
  return lease.version <= 1 ? null : formatTimestamp(lease.updatedMs);
}

/** The lease as Blazar's API shows it (plus `status_reason` when something failed). */
export function toBlazarLease(lease: Lease) {
  return {
    id: lease.id,
    name: lease.name,
    user_id: lease.userId,
    project_id: lease.projectId,
    start_date: formatLeaseDate(lease.startMs),
    end_date: formatLeaseDate(lease.endMs),
    status: lease.status,
    ...(lease.statusReason ? { status_reason: lease.statusReason } : {}),
    // As Blazar: a lease is degraded when one of its reservations lost or changed resources (what the plugins reported).
    degraded: lease.reservations.some((r) => r.missing_resources === true || r.resources_changed === true),
    // An extension: the warnings before the end it asked for (leases from before them have none).
    ...(lease.notifyBeforeEndMs ? { notify_before_end: lease.notifyBeforeEndMs.map(spanText) } : {}),
    trust_id: null,
    reservations: lease.reservations.map((r) => toBlazarReservation(lease, r)),
    events: lease.events.map((e) => ({
      id: eventUuid(lease.id, e.event_type),
      lease_id: lease.id,
      event_type: e.event_type,
      time: formatLeaseDate(e.time),
      status: e.status,
      created_at: formatTimestamp(lease.createdMs),
      updated_at: updatedAt(lease),
    })),
    created_at: formatTimestamp(lease.createdMs),
    updated_at: updatedAt(lease),
  };
}

/**
 * An event's id as Blazar shows it, a UUID: derived from the lease and the event type (a name-based
 * UUID, version 5's layout), so it is the same on every read and needs no storage.
 */
export function eventUuid(leaseId: string, eventType: string): string {
  return uuidShaped(createHash('sha1').update(`${leaseId}:${eventType}`).digest('hex'), 5);
}

/** A hash (hex, at least 32 digits) laid out as a UUID of the given version, so that clients matching UUIDs accept it. */
export function uuidShaped(hex: string, version: 4 | 5): string {
  const variant = ((parseInt(hex[16], 16) & 3) | 8).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${version}${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}
