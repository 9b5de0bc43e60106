/**
 * Approval (issue 42): usage-policy rules that admit a lease only once an admin approves it, and
 * exceptions (a member's lease a rule would refuse, sent with a justification). Such a lease waits
 * as PENDING_APPROVAL, its capacity booked, until an admin approves or denies it or its rule's
 * timeout answers for them. Pure: the rules and the lease in, what approval it needs out.
 */
import { beforeEndTime, spanText, withEventTimes, type Lease } from './lease';
import { matchesQuery, type PropertyQuery } from './property-query';
import { leaseFootprint, type MeteredLease } from './usage';

/** One approval rule: its condition (exactly one), how long an answer may take, and what the timeout decides. */
export interface ApprovalRule {
  hostsOver?: number;
  slotsOver?: number;
  durationOverMs?: number;
  /** A host class: the lease books a host whose properties match. */
  hostProperties?: PropertyQuery;
  always?: true;
  timeoutMs: number;
  onTimeout: 'deny' | 'approve';
}

export interface ApprovalPolicy {
  rules: ApprovalRule[];
  /** How long an exception waits for an answer before it is denied. */
  exceptionTimeoutMs: number;
}

/** Bounds of what users and admins write. */
export const MAX_JUSTIFICATION_CHARS = 2000;
export const MAX_ANSWER_REASON_CHARS = 1000;
export const DEFAULT_EXCEPTION_TIMEOUT_MINUTES = 1440;

/** What a lease waiting for approval carries, and once answered, the answer. */
export interface LeaseApproval {
  /** `rule`: an approval rule asks for it; `exception`: a rule would refuse the lease and its lessee asked for an exception. */
  kind: 'rule' | 'exception';
  /** The approval rule's condition (`approval.hosts_over`…) or the refusing rule (`max_hosts`…). */
  rule: string;
  /** In words, for admins: why it waits. */
  reason: string;
  justification?: string;
  requestedMs: number;
  /** When the timeout answers (`onTimeout`). */
  deadlineMs: number;
  onTimeout: 'deny' | 'approve';
  outcome?: 'approved' | 'denied';
  /** `admin`: an admin answered; `timeout`: nobody did in time; `end`: the lease's end came first; `preempted`: the lease was preempted (a change only). */
  answeredBy?: 'admin' | 'timeout' | 'end' | 'preempted';
  answerReason?: string;
  answeredMs?: number;
}

/** What a check found the lease needs, before it is stamped on the lease. */
export interface ApprovalNeed {
  kind: LeaseApproval['kind'];
  rule: string;
  reason: string;
  justification?: string;
  timeoutMs: number;
  onTimeout: 'deny' | 'approve';
}

/** Instance slots the lease asks for (virtual:instance `amount`). */
function slotsOf(lease: Lease): number {
  return lease.reservations.filter((r) => r.resource_type === 'virtual:instance').reduce((sum, r) => sum + (typeof r.params.amount === 'number' ? r.params.amount : 0), 0);
}

/** The host ids the lease's host reservations booked. */
export function bookedHostIds(lease: Lease): string[] {
  return lease.reservations.flatMap((r) => (r.resource_type === 'physical:host' && Array.isArray(r.allocation?.host_ids) ? (r.allocation.host_ids as string[]) : []));
}

/**
 * The first approval rule the lease meets, as a need, or undefined. `hostProperties`: the
 * properties of the hosts it booked (read only when a rule names a host class).
 */
export function approvalRuleNeed(policy: ApprovalPolicy | undefined, lease: Lease, hostProperties: Array<Record<string, string | undefined>> = []): ApprovalNeed | undefined {
  for (const rule of policy?.rules ?? []) {
    const met = ruleMet(rule, lease, hostProperties);
    if (met) return { kind: 'rule', rule: met.rule, reason: met.reason, timeoutMs: rule.timeoutMs, onTimeout: rule.onTimeout };
  }
  return undefined;
}

function ruleMet(rule: ApprovalRule, lease: Lease, hostProperties: Array<Record<string, string | undefined>>): { rule: string; reason: string } | undefined {
  const hosts = leaseFootprint(lease).hosts ?? 0;
  if (rule.hostsOver !== undefined && hosts > rule.hostsOver) return { rule: 'approval.hosts_over', reason: `the lease books ${hosts} hosts, over ${rule.hostsOver}` };
  const slots = slotsOf(lease);
  if (rule.slotsOver !== undefined && slots > rule.slotsOver) return { rule: 'approval.slots_over', reason: `the lease books ${slots} instance slots, over ${rule.slotsOver}` };
  const duration = lease.endMs - lease.startMs;
  if (rule.durationOverMs !== undefined && duration > rule.durationOverMs) return { rule: 'approval.duration_over', reason: `the lease lasts ${spanText(duration)}, over ${spanText(rule.durationOverMs)}` };
  if (rule.hostProperties && hostProperties.some((p) => matchesQuery(rule.hostProperties!, p))) return { rule: 'approval.host_properties', reason: 'the lease books hosts of a class that needs approval' };
  if (rule.always) return { rule: 'approval.always', reason: `every lease of project ${lease.projectId} needs approval` };
  return undefined;
}

/** Whether a rule names a host class (the caller then reads the booked hosts' properties). */
export const namesHostClass = (policy: ApprovalPolicy | undefined): boolean => (policy?.rules ?? []).some((r) => r.hostProperties !== undefined);

/** The lease waiting for approval (a lease not started only: a started one has nothing left to approve). */
export function awaitingApproval(lease: Lease, need: ApprovalNeed | undefined, nowMs: number): Lease {
  if (!need || (lease.status !== 'PENDING' && lease.status !== 'PENDING_APPROVAL')) return lease;
  if (lease.status === 'PENDING_APPROVAL' && lease.approval && !lease.approval.outcome) return lease; // already waiting: the first request's deadline stands
  const approval: LeaseApproval = {
    kind: need.kind,
    rule: need.rule,
    reason: need.reason,
    ...(need.justification !== undefined ? { justification: need.justification } : {}),
    requestedMs: nowMs,
    deadlineMs: nowMs + need.timeoutMs,
    onTimeout: need.onTimeout,
  };
  return { ...lease, status: 'PENDING_APPROVAL', approval };
}

/** The status_reason of a denied lease. */
export function denialReason(approval: LeaseApproval): string {
  if (approval.answeredBy === 'end') return 'denied: the lease reached its end while waiting for approval';
  if (approval.answeredBy === 'timeout') return `denied: no approval within ${spanText(approval.deadlineMs - approval.requestedMs)} (the approval's timeout)`;
  return `denied by an admin${approval.answerReason ? `: ${approval.answerReason}` : ''}`;
}

/** A denied lease holds nothing: neither the usage policy nor the meter count it. */
export const wasDenied = (lease: Pick<Lease, 'approval'>): boolean => lease.approval?.outcome === 'denied';

/**
 * A change of an active lease that a rule of ours refused and its lessee asked an exception for:
 * its bookings are made (others see them taken) while the lease goes on as it was, until an admin
 * approves (the change takes effect) or denies it, or its timeout, never later than the lease's
 * current end, denies it. What the change sets, as the update made it, and the approval it waits for.
 */
export interface PendingLeaseChange {
  endMs: number;
  beforeEndMs?: number;
  /** As booked for the change. */
  reservations: Lease['reservations'];
  extensions?: number;
  notifyBeforeEndMs?: number[];
  approval: LeaseApproval;
}

/** Why a justified change of an active lease that is not an extension is refused. */
export const ONLY_EXTENSIONS_WAIT = 'only an extension of an active lease (the same reservations, a later end) can ask for an exception';

/**
 * Whether a change of an active lease may wait for approval: an extension only (the same
 * reservations with the same parameters, a later end). Its bookings can be given back exactly when
 * it is denied; hosts a grown reservation took cannot (an active lease never loses hosts it holds).
 */
export function isExtensionOnly(previous: Lease, next: Lease): boolean {
  const paramsOf = (lease: Lease) => JSON.stringify(lease.reservations.map((r) => [r.id, r.params]));
  return next.endMs > previous.endMs && next.startMs === previous.startMs && paramsOf(next) === paramsOf(previous);
}

/**
 * The active lease `previous` as recorded while the change to `next` waits for approval: as it was
 * (a rename aside), one version up, the change and its approval on it. The deadline is the need's
 * timeout, but never past the lease's current end (then the lease ends as it was).
 */
export function awaitingChangeApproval(previous: Lease, next: Lease, need: ApprovalNeed, nowMs: number): Lease {
  const approval: LeaseApproval = {
    kind: need.kind,
    rule: need.rule,
    reason: need.reason,
    ...(need.justification !== undefined ? { justification: need.justification } : {}),
    requestedMs: nowMs,
    deadlineMs: Math.min(nowMs + need.timeoutMs, previous.endMs),
    onTimeout: 'deny',
  };
  const pendingChange: PendingLeaseChange = {
    endMs: next.endMs,
    ...(next.beforeEndMs !== undefined ? { beforeEndMs: next.beforeEndMs } : {}),
    reservations: next.reservations,
    ...(next.extensions !== undefined ? { extensions: next.extensions } : {}),
    ...(next.notifyBeforeEndMs ? { notifyBeforeEndMs: next.notifyBeforeEndMs } : {}),
    approval,
  };
  return withPendingChange(previous, next, pendingChange);
}

/** `previous` as recorded with a change waiting (what the record answered): as it was, renamed as `next`, one version up. */
export function withPendingChange(previous: Lease, next: Lease, pendingChange: PendingLeaseChange): Lease {
  return { ...previous, name: next.name, version: next.version, updatedMs: next.updatedMs, pendingChange };
}

/**
 * A lease as the usage rules count it beside another: with a change waiting, the larger of the two,
 * so that a project cannot stack waiting extensions past its limits (each admitted on the lease as
 * it is). Only an extension waits: the change is the larger (the same reservations, a later end).
 */
export function countedWithWaitingChange(metered: MeteredLease): MeteredLease {
  const change = metered.lease.pendingChange;
  if (!change || change.endMs < metered.lease.endMs) return metered;
  return { ...metered, lease: { ...metered.lease, endMs: change.endMs, reservations: change.reservations } };
}

/** The lease with its waiting change applied (approved): its end and bookings as the change made them. */
export function withChangeApplied(lease: Lease, nowMs: number): Lease {
  const change = lease.pendingChange;
  if (!change) return lease;
  const next: Lease = {
    ...lease,
    endMs: change.endMs,
    beforeEndMs: change.beforeEndMs,
    reservations: change.reservations,
    ...(change.extensions !== undefined ? { extensions: change.extensions } : {}),
    ...(change.notifyBeforeEndMs ? { notifyBeforeEndMs: change.notifyBeforeEndMs } : {}),
    pendingChange: undefined,
  };
  // As an update's extension: a before-end action that already ran runs again if its time moved into the future.
  const rearm = change.endMs > lease.endMs && beforeEndTime(next) > nowMs;
  return withEventTimes({ ...next, events: next.events.map((e) => (e.event_type === 'before_end_lease' && e.status !== 'UNDONE' && rearm ? { id: e.id, event_type: e.event_type, time: e.time, status: 'UNDONE' } : e)) });
}

/** The status_reason of an active lease whose change was denied (it goes on as it was). */
export function changeDenialReason(approval: LeaseApproval): string {
  if (approval.answeredBy === 'end') return 'change denied: the lease reached its end while the change waited for approval; it ended as it was';
  if (approval.answeredBy === 'preempted') return 'change denied: the lease was preempted while the change waited for approval; it ends at the preempted end';
  if (approval.answeredBy === 'timeout') return `change denied: no approval within ${spanText(approval.deadlineMs - approval.requestedMs)} (the approval's timeout); the lease goes on as it was`;
  return `change denied by an admin${approval.answerReason ? `: ${approval.answerReason}` : ''}; the lease goes on as it was`;
}
