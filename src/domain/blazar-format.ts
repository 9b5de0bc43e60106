/**
 * Blazar's wire formats, exactly: its records as its API shows them, dates as src/domain/dates.ts
 * writes them (response dates `"YYYY-MM-DDTHH:MM:SS.ffffff"`, `created_at`/`updated_at` as
 * `"YYYY-MM-DD HH:MM:SS"`, `updated_at` null until a change, as Blazar's).
 */
import { createHash } from 'node:crypto';
import { formatBlazarDate, formatBlazarTimestamp } from './dates';
import type { LeaseApproval, PendingLeaseChange } from './approval';
import { spanText, type Lease, type Reservation, type ReservationLending } from './lease';

/** A reservation's lendings shown (issue 43): the latest ones, never their borrowers. */
const LENDINGS_SHOWN = 20;

function toBlazarReservation(lease: Lease, reservation: Reservation) {
  return {
    ...reservation.params,
    ...(reservation.allocation ?? {}),
    // An extension (issue 43): the lendings of its hosts, the 20 latest.
    ...(reservation.lendings?.length ? { lendings: reservation.lendings.slice(-LENDINGS_SHOWN).map(lendingJson) } : {}),
    id: reservation.id,
    lease_id: lease.id,
    resource_type: reservation.resource_type,
    status: reservation.status,
    missing_resources: reservation.missing_resources ?? false,
    resources_changed: reservation.resources_changed ?? false,
    created_at: formatBlazarTimestamp(lease.createdMs),
    updated_at: formatBlazarTimestamp(lease.updatedMs),
  };
}

/** Blazar's `updated_at`: null until the lease changes after its creation (version 1 is the lease as admitted). */
function updatedAt(lease: Lease): string | null {
  return lease.version <= 1 ? null : formatBlazarTimestamp(lease.updatedMs);
}

/** The lease as Blazar's API shows it (plus `status_reason` when something failed). */
export function toBlazarLease(lease: Lease) {
  return {
    id: lease.id,
    name: lease.name,
    user_id: lease.userId,
    project_id: lease.projectId,
    start_date: formatBlazarDate(lease.startMs),
    end_date: formatBlazarDate(lease.endMs),
    status: lease.status,
    ...(lease.statusReason ? { status_reason: lease.statusReason } : {}),
    // As Blazar: a lease is degraded when one of its reservations lost or changed resources (what the plugins reported).
    degraded: lease.reservations.some((r) => r.missing_resources === true || r.resources_changed === true),
    // An extension: the warnings before the end it asked for (leases from before them have none).
    ...(lease.notifyBeforeEndMs ? { notify_before_end: lease.notifyBeforeEndMs.map(spanText) } : {}),
    // An extension: the series the lease is an occurrence of (GET /v1/series/{id}).
    ...(lease.seriesId ? { series_id: lease.seriesId } : {}),
    // An extension (issue 42): why the lease waits (or waited) for approval, and the answer.
    ...(lease.approval ? { approval: approvalJson(lease.approval) } : {}),
    // An extension (issue 42): an active lease's change waiting for approval (booked, not in effect), and the last such change's answer.
    ...(lease.pendingChange ? { pending_change: pendingChangeJson(lease, lease.pendingChange) } : {}),
    ...(lease.changeApproval ? { change_approval: approvalJson(lease.changeApproval) } : {}),
    trust_id: null,
    reservations: lease.reservations.map((r) => toBlazarReservation(lease, r)),
    events: lease.events.map((e) => ({
      id: eventUuid(lease.id, e.event_type),
      lease_id: lease.id,
      event_type: e.event_type,
      time: formatBlazarDate(e.time),
      status: e.status,
      created_at: formatBlazarTimestamp(lease.createdMs),
      updated_at: updatedAt(lease),
    })),
    created_at: formatBlazarTimestamp(lease.createdMs),
    updated_at: updatedAt(lease),
  };
}

function lendingJson(lending: ReservationLending) {
  return {
    id: lending.id,
    hosts: lending.hosts,
    // A slot lending: how many slots, on those hosts together.
    ...(lending.slots ? { slots: lending.slots.reduce((n, k) => n + k, 0) } : {}),
    lent_at: formatBlazarDate(lending.lentAtMs),
    until: formatBlazarDate(lending.untilMs),
    state: lending.state,
    returns_at: lending.returnsAtMs !== undefined ? formatBlazarDate(lending.returnsAtMs) : null,
    borrowed: lending.borrowed,
  };
}

function pendingChangeJson(lease: Lease, change: PendingLeaseChange) {
  return {
    end_date: formatBlazarDate(change.endMs),
    reservations: change.reservations.map((r) => toBlazarReservation({ ...lease, endMs: change.endMs }, r)),
    ...approvalJson(change.approval),
  };
}

function approvalJson(a: LeaseApproval) {
  return {
    kind: a.kind,
    rule: a.rule,
    reason: a.reason,
    justification: a.justification ?? null,
    requested_at: formatBlazarTimestamp(a.requestedMs),
    timeout_at: formatBlazarTimestamp(a.deadlineMs),
    on_timeout: a.onTimeout,
    outcome: a.outcome ?? null,
    answered_by: a.answeredBy ?? null,
    answer_reason: a.answerReason ?? null,
    answered_at: a.answeredMs !== undefined ? formatBlazarTimestamp(a.answeredMs) : null,
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
