/**
 * The lease as the workflow holds it, and Blazar's rules for changing it. Pure and deterministic:
 * the workflow, its update validators and the API all use these functions.
 * Times are epoch milliseconds (UTC); the API formats them the way Blazar does.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { LeaseApproval, PendingLeaseChange } from './approval';
import type { Footprint } from './usage';

/** Whether `text` is a UUID (the ids of leases, reservations, floating IPs): anything else names nothing, rather than being an error of the database. */
export const isUuid = (text: string): boolean => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(text);

/** PENDING_APPROVAL: admitted, its capacity booked, waiting for an admin's answer (src/domain/approval.ts). */
export const LEASE_STATUSES = ['PENDING', 'PENDING_APPROVAL', 'STARTING', 'ACTIVE', 'TERMINATING', 'TERMINATED', 'ERROR', 'DELETING'] as const;
export type LeaseStatus = (typeof LEASE_STATUSES)[number];

export const EVENT_TYPES = ['start_lease', 'before_end_lease', 'end_lease'] as const;
export type EventType = (typeof EVENT_TYPES)[number];
export type EventStatus = 'UNDONE' | 'IN_PROGRESS' | 'DONE' | 'ERROR';

export interface LeaseEvent {
  id: string;
  event_type: EventType;
  /** When the event is due. */
  time: number;
  status: EventStatus;
  /** When it actually began and finished: start lag = startedAt − time. */
  startedAt?: number;
  finishedAt?: number;
}

export type ReservationStatus = 'pending' | 'active' | 'deleted' | 'error';

/** P: the parameters as the resource type's schema produced them (its hooks see them typed: resource-plugin.ts). */
export interface Reservation<P = Record<string, unknown>> {
  id: string;
  resource_type: string;
  status: ReservationStatus;
  /** The request's parameters, as validated (and stored) at the API by the resource type's schema. */
  params: P;
  /** What the resource type reserved (hosts, amounts…): shown in the lease JSON. */
  allocation?: Record<string, unknown>;
  /** The resources this reservation holds (e.g. `host:3`), for back-to-back ordering. */
  resourceKeys?: string[];
  /** The start's steps, when its resource type starts in several (each its own activity). */
  startSteps?: Array<{ name: string; timeoutSeconds: number; maximumAttempts: number; retryIntervalSeconds: number }>;
  /** What it holds at once, as its resource type reported when it booked (metering and the usage policy). */
  footprint?: Footprint;
  /** Set aside between admission and start (its plugin's `hold`): due, done, or failed and left to the start (`holdRedoneAtStart`). */
  hold?: 'due' | 'done' | 'at-start';
  /** Its start makes what its hold makes: a failed hold leaves the lease PENDING (workflows/lease/hold.ts). */
  holdRedoneAtStart?: true;
  /** Set only from what the reservation's plugin reports (healing, in a later issue): some resources failed and were not replaced. */
  missing_resources?: boolean;
  /** Likewise: some resources failed and were replaced by others. */
  resources_changed?: boolean;
  /** Lendings of its idle hosts to preemptible leases (issue 43; src/domain/lending.ts), the latest last. */
  lendings?: ReservationLending[];
}

/**
 * One lend request of a reservation's hosts or instance slots (issue 43), as the lease records it:
 * `lent` until `untilMs`; `reclaiming` once reclaimed, its hosts back at `returnsAtMs`; `returned`
 * once back in the lease. `borrowed`: a preemptible lease booked some of it (known from the reclaim
 * or the return on). Never who borrowed: a borrower's lease and project are not the lender's to see.
 * A slot lending lends `slots[i]` slots on host `hosts[i]`; its `hostIds` name its lending rows (one
 * per host: two lendings may share a host), which is what a reclaim and a return take.
 */
export interface ReservationLending {
  id: string;
  hosts: string[];
  hostIds: string[];
  slots?: number[];
  lentAtMs: number;
  untilMs: number;
  state: 'lent' | 'reclaiming' | 'returned';
  returnsAtMs?: number;
  borrowed: boolean;
}

export interface Lease {
  id: string;
  name: string;
  projectId: string;
  userId: string;
  startMs: number;
  endMs: number;
  /** Set by the user; otherwise derived from the end date (see beforeEndTime). */
  beforeEndMs?: number;
  /** The deployment's provisioning lead time when the lease was created: it starts this long before startMs. */
  provisioningLeadMs?: number;
  status: LeaseStatus;
  statusReason?: string;
  reservations: Reservation[];
  events: LeaseEvent[];
  createdMs: number;
  updatedMs: number;
  /** Grows with every change recorded in PostgreSQL. */
  version: number;
  /** How many times the end was moved later once the lease had started (the usage policy limits it). */
  extensions?: number;
  /** Warnings before the end (`lease.event.before_end_lease` notices), this long before it. */
  notifyBeforeEndMs?: number[];
  /** The warnings sent: offset → the end they warned of (an extension re-arms them). */
  warnedBeforeEnd?: Record<string, number>;
  /** Idle-lease reaping, as the deployment set it when the lease was created (LK_IDLE_LEASE_*). */
  idle?: IdleLeasePolicy;
  /** Since when the lease has been seen idle (none while in use), when it was last looked at, and whether the lessee was warned. */
  idleSince?: number;
  idleCheckedMs?: number;
  idleWarned?: boolean;
  /** Lending (issue 43): since when some host of it has been idle and lendable, and when lending was last suggested. */
  lendableSince?: number;
  lendSuggestedMs?: number;
  /** The series this lease is an occurrence of (a recurring lease: POST /v1/leases with `recurrence`). */
  seriesId?: string;
  /** Approval asked (PENDING_APPROVAL) and, once given, the answer. */
  approval?: LeaseApproval;
  /** A change of the active lease waiting for an admin (an exception asked with a justification): booked, not in effect. */
  pendingChange?: PendingLeaseChange;
  /** The last such change's approval, once answered (the lease's own `approval` stays its create's). */
  changeApproval?: LeaseApproval;
}

/** An active lease nobody uses for `warnAfterMs` hears `lease.idle`; for `endAfterMs` it is ended early. */
export interface IdleLeasePolicy {
  warnAfterMs?: number;
  endAfterMs?: number;
}

export const BEFORE_END_LEAD_MS = 60 * 60 * 1000;

/** A span as messages and `notify_before_end` write it: `2h`, `90m`, `7s` (the largest unit that divides it, else seconds). */
export function spanText(ms: number): string {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0) return `${ms / 60_000}m`;
  return `${Math.round(ms / 1000)}s`;
}


/** Blazar's default: one hour before the end, but never before the start. */
export function beforeEndTime(lease: Pick<Lease, 'startMs' | 'endMs' | 'beforeEndMs'>): number {
  return lease.beforeEndMs ?? Math.max(lease.startMs, lease.endMs - BEFORE_END_LEAD_MS);
}

export function leaseResourceTypes(lease: Pick<Lease, 'reservations'>): string[] {
  return [...new Set(lease.reservations.map((r) => r.resource_type))].sort();
}

/** Error types carried by ApplicationFailure; the API maps them to HTTP statuses. */
export const LeaseErrorType = {
  invalid: 'InvalidLease', // 400
  conflict: 'LeaseConflict', // 409
  notFound: 'LeaseNotFound', // 404
  /** The lease (and its Idempotency-Key) was deleted: a new lease needs a new key. */
  deleted: 'LeaseDeleted', // 410
  unavailable: 'DatabaseUnavailable', // 503: try again
  /** The usage policy refuses the change (domain/usage-policy.ts). */
  policy: 'UsagePolicyRefused', // 403
  /** What was asked to be made exists already (a concurrent request made it first): a conflict. */
  duplicate: 'AlreadyExists', // 409
} as const;

export function invalidLease(message: string): ApplicationFailure {
  return ApplicationFailure.create({ type: LeaseErrorType.invalid, message, nonRetryable: true });
}

/** `details` (JSON) reaches the API's error body, e.g. the earliest start at which a request fits. */
export function leaseConflict(message: string, details?: Record<string, unknown>): ApplicationFailure {
  return ApplicationFailure.create({ type: LeaseErrorType.conflict, message, nonRetryable: true, details: details ? [details] : undefined });
}

/** The 409 of a record made twice: one with the same key (a host's name, an address) exists already. */
export function alreadyExists(message: string, cause?: Error): ApplicationFailure {
  return ApplicationFailure.create({ type: LeaseErrorType.duplicate, message, nonRetryable: true, cause });
}

/** Whether `err` is alreadyExists's: the caller lost a race to make the same record, and the winner's stands. */
export const isAlreadyExists = (err: unknown): boolean => err instanceof ApplicationFailure && err.type === LeaseErrorType.duplicate;

/** Whether `err` is the 409 of leaseConflict: what was asked does not fit. */
export const isLeaseConflict = (err: unknown): boolean => err instanceof ApplicationFailure && err.type === LeaseErrorType.conflict;

export interface NewLeaseRequest {
  id: string;
  name: string;
  projectId: string;
  userId: string;
  /** 'now' means the minute the request arrived in (`requestedMs`), as Blazar truncates it. */
  start: number | 'now';
  end: number;
  beforeEnd?: number;
  provisioningLeadMs?: number;
  reservations: Array<Pick<Reservation, 'id' | 'resource_type' | 'params'>>;
  requestedMs: number;
  /** Asked by an admin: the usage policy's rules do not apply to it unless they say so. */
  byAdmin?: boolean;
  notifyBeforeEndMs?: number[];
  idle?: IdleLeasePolicy;
  /** An occurrence of this series (Lease.seriesId). */
  seriesId?: string;
  /** A member's reason to admit the lease though a rule would refuse it: it then waits for approval. */
  justification?: string;
}

const MINUTE_MS = 60_000;

/**
 * Blazar's dates have minute precision, so a start within the current minute counts as "now"
 * rather than as the past.
 */
function startOfMinute(ms: number): number {
  return ms - (ms % MINUTE_MS);
}

// Blazar's sentences first (its clients and tests read them), then ours.
const START_IN_PAST = 'Start date must be later than current date. start_date must be "now" or a later date.';
const END_BEFORE_NOW_OR_START = 'End date must be later than current and start date.';
const BEFORE_END_OUTSIDE = 'Datetime is out of lease limits. before_end_date must be between start_date and end_date.';

/** Builds a PENDING lease from a create request, enforcing Blazar's date rules. */
export function newLease(request: NewLeaseRequest): Lease {
  const now = request.requestedMs;
  const startMs = request.start === 'now' ? startOfMinute(now) : request.start;
  if (startMs < startOfMinute(now)) throw invalidLease(START_IN_PAST);
  if (request.end <= startMs) throw invalidLease('End date must be later than start date.');
  if (request.beforeEnd !== undefined && (request.beforeEnd < startMs || request.beforeEnd > request.end)) throw invalidLease(BEFORE_END_OUTSIDE);
  const lease: Lease = {
    id: request.id,
    name: request.name,
    projectId: request.projectId,
    userId: request.userId,
    startMs,
    endMs: request.end,
    beforeEndMs: request.beforeEnd,
    ...(request.provisioningLeadMs ? { provisioningLeadMs: request.provisioningLeadMs } : {}),
    ...(request.notifyBeforeEndMs ? { notifyBeforeEndMs: request.notifyBeforeEndMs } : {}),
    ...(request.idle ? { idle: request.idle } : {}),
    ...(request.seriesId ? { seriesId: request.seriesId } : {}),
    status: 'PENDING',
    reservations: request.reservations.map((r) => ({ ...r, status: 'pending' })),
    events: [],
    createdMs: now,
    updatedMs: now,
    version: 0,
  };
  lease.events = EVENT_TYPES.map((type) => ({ id: `${request.id}:${type}`, event_type: type, time: 0, status: 'UNDONE' }));
  return withEventTimes(lease);
}

/**
 * Where a lease's resources are booked from: its start, or the moment it was asked for if it is
 * dated earlier. A "now" lease is dated from the start of the minute, as Blazar's; the part of
 * the minute already gone cannot be used, and a lease that ended in it may still hold the resources.
 */
export function bookingStartMs(lease: Pick<Lease, 'startMs' | 'createdMs'>): number {
  return Math.max(lease.startMs, lease.createdMs);
}

/** Keeps the due times of the events that have not run in step with the lease's dates. */
export function withEventTimes(lease: Lease): Lease {
  const due: Record<EventType, number> = { start_lease: lease.startMs, before_end_lease: beforeEndTime(lease), end_lease: lease.endMs };
  return { ...lease, events: lease.events.map((e) => (e.status === 'UNDONE' ? { ...e, time: due[e.event_type] } : e)) };
}

export interface LeaseUpdateRequest {
  name?: string;
  start?: number | 'now';
  end?: number | 'now';
  beforeEnd?: number;
  /** New parameters of existing reservations, by id: complete and already checked by the resource type's schema. */
  reservations?: Array<{ id: string; params: Record<string, unknown> }>;
  /** Asked by an admin (see NewLeaseRequest.byAdmin). */
  byAdmin?: boolean;
  notifyBeforeEndMs?: number[];
  /** See NewLeaseRequest.justification: a lease not started waits as a whole; an active lease's change waits as a pending change. */
  justification?: string;
}

/** A change a user asked for, checked against the usage policy as it is recorded: the lease before it (none: admission), and whether an admin asked. */
export interface RecordPolicy {
  previous?: Lease;
  byAdmin: boolean;
  /** An exception asked for: a refusing rule makes the lease wait for approval instead. */
  justification?: string;
}

/** Not started yet: waiting for its start, or for approval. */
export const notStarted = (status: LeaseStatus): boolean => status === 'PENDING' || status === 'PENDING_APPROVAL';

/** Where a lease in a transition is heading. */
const SETTLES_AS: Partial<Record<LeaseStatus, string>> = { STARTING: 'ACTIVE', TERMINATING: 'TERMINATED', DELETING: 'gone' };

/**
 * A lease that is starting, ending or being deleted cannot be changed now: its workflow is busy
 * with cloud work (or waits for an earlier lease to end) that may outlast any request, and a
 * change would queue behind it. Blazar refuses too ("Invalid lease status.").
 */
export function assertSettled(lease: Pick<Lease, 'name' | 'status'>): void {
  const next = SETTLES_AS[lease.status];
  if (next) throw leaseConflict(`Invalid lease status. Lease ${lease.name} is ${lease.status}: ${next === 'gone' ? 'it is being deleted' : `try again once it is ${next}`}.`);
}

export function hasEnded(status: LeaseStatus): boolean {
  return status === 'TERMINATED' || status === 'ERROR' || status === 'DELETING';
}

/**
 * Blazar's update rules: the name can always change; the start only before the lease starts, and
 * not into the past; the end not before now nor before the start ("now" ends an active lease
 * early); an ended lease can only be renamed. Returns the changed lease (events re-timed), or
 * throws an ApplicationFailure of type InvalidLease.
 */
export function applyLeaseUpdate(lease: Lease, update: LeaseUpdateRequest, nowMs: number): Lease {
  const changesDates = update.start !== undefined || update.end !== undefined || update.beforeEnd !== undefined;
  if (hasEnded(lease.status) && (changesDates || update.reservations?.length)) {
    throw invalidLease(`Terminated leases can only be renamed. Lease ${lease.name} is ${lease.status}.`);
  }
  if (update.name !== undefined && update.name.trim() === '') throw invalidLease('name must not be empty');

  let startMs = lease.startMs;
  if (update.start !== undefined) {
    const requested = update.start === 'now' ? nowMs : update.start;
    if (requested !== lease.startMs) {
      if (!notStarted(lease.status)) throw invalidLease(`Cannot modify the start date of already started leases. Lease ${lease.name} is ${lease.status}.`);
      if (requested < startOfMinute(nowMs)) throw invalidLease(START_IN_PAST);
      startMs = Math.max(requested, nowMs);
    }
  }

  let endMs = lease.endMs;
  if (update.end !== undefined) {
    const requested = update.end === 'now' ? nowMs : update.end;
    if (requested !== lease.endMs) {
      if (update.end === 'now' && notStarted(lease.status)) {
        throw invalidLease('end_date "now" ends an active lease early; to drop a pending lease, delete it');
      }
      if (requested < startOfMinute(nowMs)) throw invalidLease(`${END_BEFORE_NOW_OR_START} end_date must be "now" or a later date.`);
      endMs = Math.max(requested, nowMs);
    }
  }
  if (endMs <= startMs) throw invalidLease(`${END_BEFORE_NOW_OR_START} end_date must be later than start_date.`);

  let beforeEndMs = lease.beforeEndMs;
  if (update.beforeEnd !== undefined) beforeEndMs = update.beforeEnd;
  if (beforeEndMs !== undefined && (beforeEndMs < startMs || beforeEndMs > endMs)) {
    if (update.beforeEnd !== undefined) throw invalidLease(BEFORE_END_OUTSIDE);
    beforeEndMs = undefined; // a user-set before-end that the new dates exclude falls back to the default
  }

  const changes = new Map((update.reservations ?? []).map((change) => [change.id, change.params]));
  for (const id of changes.keys()) {
    if (!lease.reservations.some((r) => r.id === id)) throw invalidLease(`Please enter valid reservation IDs. Invalid reservation IDs are: ${id}. Lease ${lease.name} has no such reservation.`);
  }
  const reservations = lease.reservations.map((r) => (changes.has(r.id) ? { ...r, params: changes.get(r.id)! } : r));

  const extended = lease.status === 'ACTIVE' && endMs > lease.endMs;
  const next: Lease = {
    ...lease,
    name: update.name ?? lease.name,
    startMs,
    endMs,
    beforeEndMs,
    reservations,
    ...(extended ? { extensions: (lease.extensions ?? 0) + 1 } : {}),
    ...(update.notifyBeforeEndMs ? { notifyBeforeEndMs: update.notifyBeforeEndMs } : {}),
  };
  // A before-end action that already ran runs again if an extension moved its time into the future.
  next.events = next.events.map((e) =>
    e.event_type === 'before_end_lease' && e.status !== 'UNDONE' && lease.status === 'ACTIVE' && beforeEndTime(next) > nowMs && endMs > lease.endMs
      ? { id: e.id, event_type: e.event_type, time: e.time, status: 'UNDONE' }
      : e,
  );
  return withEventTimes(next);
}

/** Whether an update changes what the reservations must hold: their window or their parameters. */
export function bookingChanged(before: Lease, after: Lease): boolean {
  return (
    before.startMs !== after.startMs ||
    before.endMs !== after.endMs ||
    before.reservations.some((r, i) => JSON.stringify(r.params) !== JSON.stringify(after.reservations[i]?.params))
  );
}
