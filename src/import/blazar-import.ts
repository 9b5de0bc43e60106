/**
 * The migration from a running Blazar: what its database holds becomes leasekeeper's — hosts with
 * their capabilities (already in Blazar's pool aggregate: nothing moves in Nova), bookings in the
 * host calendar, lease rows, and one lease workflow per pending or active lease, started with the
 * lease as it stands (`carried`), so that it sleeps until its next event like any other. The plan
 * is made first (every conflict and every lease that cannot come, with the reason); a dry run stops
 * there. Applying is idempotent: each step looks for its own result before it acts.
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import {
  beforeEndTime,
  bookingStartMs,
  EVENT_TYPES,
  type EventStatus,
  type Lease,
  type LeaseEvent,
  type LeaseStatus,
  type Reservation,
  type ReservationStatus,
} from '../domain/lease';
import { formatMessageDate } from '../domain/dates';
import { markdownText } from '../domain/markdown';
import { hostsOfReservation, insertHostBooking, listAllocations, deleteReservationHostBookings } from '../db/host-allocations';
import { findHostByHypervisor, hostExists, insertHost, isHostId, setCapabilityPrivate } from '../db/hosts';
import { findLease, isLeaseDeleted, listLeases, saveLease } from '../db/leases';
import { isExclusionViolation, type Pool } from '../db/pool';
import { inTransaction } from '../db/transaction';
import { carriedLeaseInput } from '../api/lease-commands';
import { startRecordedLease } from '../outbox';
import { leaseWorkflowId } from '../../workflows/lease/messages';
import { leaseAggregateFor } from '../resources/physical-host/aggregates';
import { hostBookingKey, PHYSICAL_HOST } from '../resources/physical-host/calendar';
import { endPolicyOf, physicalHostParams, type EndPolicy, type PhysicalHostParams } from '../resources/physical-host/params';
import { checkLeaseRow, escapeControls, hostProblem, printable, reservationProblem } from './blazar-rules';
import type { BlazarData, BlazarHost, BlazarLease } from './blazar-source';
import { bookingKey } from '../resources/shared/booking';
import { NETWORK } from '../resources/network-segment/params';
import { networkSegmentAllocations, networkSegmentBookings } from '../db/network-segment-allocations';
import { checkSegments, enrolSegment, newSegmentId, planNetworkReservation, segmentsPresent, type NetworkReservationPlan, type SegmentLeftOut, type SegmentPlan } from './blazar-networks';

export interface ImportDeps {
  pool: Pool;
  temporal: Client;
  taskQueue: string;
  /** The host calendar's settings (config.hosts): a booking blocks its host this long after its end; what `on_end: default` means. */
  hosts: { cleaningMs: number; onEndDefault: EndPolicy };
  /**
   * Adopts the network Blazar made for an active network reservation (Chameleon's: tagged with the
   * reservation in Neutron at --apply; false when Neutron has it no more). Without it (no OpenStack
   * credentials), such leases are left out saying why.
   */
  adoptNetwork?: (reservationId: string, networkId: string) => Promise<boolean>;
}

export interface ImportOptions {
  apply: boolean;
  /** Terminated and failed leases as rows (no bookings, no workflow). */
  withHistory: boolean;
  nowMs?: number;
}

/** The version an imported lease's row starts at: its workflow's first transition writes the next. */
export const IMPORTED_VERSION = 1;

export interface HostOutcome {
  name: string;
  blazarId: string;
  /** leasekeeper's id (unknown in a dry run for a host that gets a new one). */
  id?: string;
  action: 'create' | 'present';
  notes: string[];
}

export interface LeaseOutcome {
  id: string;
  name: string;
  projectId: string;
  status: LeaseStatus;
  startMs: number;
  endMs: number;
  hosts: string[];
  /** The network segments it books (Chameleon's network reservations). */
  networks: string[];
  /** import: bookings, row and workflow; history: the row alone; resume: its workflow was missing; present: already imported. */
  action: 'import' | 'history' | 'resume' | 'present';
}

export interface Conflict {
  leaseId: string;
  leaseName: string;
  /** Why this lease was left out. */
  message: string;
}

export interface LeftOut {
  leaseId: string;
  leaseName: string;
  status: string;
  reason: string;
}

/** A Blazar host whose row breaks the API's rules (blazar-rules.ts): not created, nor any lease that holds it. */
export interface HostLeftOut {
  blazarId: string;
  name: string;
  reason: string;
}

export interface ImportReport {
  applied: boolean;
  hosts: HostOutcome[];
  leases: LeaseOutcome[];
  /** Leases left out because they collide with another booking or lease name. */
  conflicts: Conflict[];
  /** Leases of kinds leasekeeper cannot take (yet), in a state it cannot carry on from, or breaking the API's rules. */
  notImportable: LeftOut[];
  /** Hosts breaking the API's rules. */
  hostsNotImportable: HostLeftOut[];
  /** Whether the schema has network segment tables (Chameleon's fork; upstream Blazar has none). */
  networkTables: boolean;
  /** Chameleon's network segments, found here or enrolled. */
  segments: SegmentPlan[];
  /** Network segments breaking the API's rules. */
  segmentsNotImportable: SegmentLeftOut[];
  /** Ended leases left out because --with-history was not given. */
  historySkipped: number;
  /** What this run created (hosts, leases, workflows): 0 on a second --apply. */
  changes: number;
}

// ─── From Blazar's rows to leasekeeper's lease ──────────────────────────────────────────────

const LIVE: ReadonlySet<string> = new Set(['PENDING', 'ACTIVE']);
const HISTORY: ReadonlySet<string> = new Set(['TERMINATED', 'ERROR']);
const EVENT_STATUSES: ReadonlySet<string> = new Set(['UNDONE', 'IN_PROGRESS', 'DONE', 'ERROR']);
const RESERVATION_STATUSES: ReadonlySet<string> = new Set(['pending', 'active', 'deleted', 'error']);

/** Blazar's naive UTC DATETIME text as epoch ms; undefined when absent or unreadable. */
function blazarTime(text: string | null): number | undefined {
  if (!text) return undefined;
  const ms = Date.parse(`${text.replace(' ', 'T')}Z`);
  return Number.isFinite(ms) ? ms : undefined;
}

/** A lease's host reservation, as it will be booked: parameters as the API would have validated them, and its hosts by name. */
interface HostReservationPlan {
  id: string;
  status: ReservationStatus;
  params: PhysicalHostParams;
  hostNames: string[];
  missingResources: boolean;
  resourcesChanged: boolean;
}

interface LeasePlan {
  blazar: BlazarLease;
  /** Its name as the API keeps one (trimmed). */
  name: string;
  kind: 'live' | 'history';
  status: LeaseStatus;
  projectId: string;
  userId: string;
  startMs: number;
  endMs: number;
  beforeEndMs?: number;
  createdMs: number;
  updatedMs: number;
  events: Map<string, { time: number; status: EventStatus }>;
  reservations: HostReservationPlan[];
  /** Its network reservations (Chameleon's), each holding one segment. */
  networkReservations: NetworkReservationPlan[];
}

class NotImportable extends Error {
  /** `rules`: its rows break the API's rules (to fix in Blazar), rather than needing what leasekeeper has not got yet. */
  constructor(message: string, readonly rules = false) {
    super(message);
  }
}

/** A status or id as the report shows it: as it is when plain, else quoted and escaped (Blazar's rows are not to be trusted). */
const plain = (text: string) => (/^[\w:-]{1,64}$/.test(text) ? text : printable(text));

/** A lease or host breaking the API's rules: what the report says of it. */
const brokenRules = (problem: string) => `it breaks the API's rules: ${problem}; fix it in Blazar and import again`;

/** Indexes Blazar's rows by what joins them. */
function group<T, K>(rows: T[], key: (row: T) => K): Map<K, T[]> {
  const map = new Map<K, T[]>();
  for (const row of rows) {
    const k = key(row);
    const list = map.get(k);
    if (list) list.push(row);
    else map.set(k, [row]);
  }
  return map;
}

/** The name leasekeeper knows a Blazar host by (its hosts are keyed by hypervisor name). */
const hostName = (host: BlazarHost): string | undefined => host.hypervisor_hostname ?? host.service_name ?? undefined;

/** What a reservation of a type leasekeeper does not have holds, for the report. */
function describeForeignReservation(data: Indexed, reservationId: string, type: string): string {
  const instance = data.instanceByReservation.get(reservationId);
  if (instance) return `${type} (${instance.amount} × ${instance.vcpus} vCPU, ${instance.memory_mb} MB, ${instance.disk_gb} GB)`;
  const fip = data.floatingIpByReservation.get(reservationId);
  if (fip) {
    const addresses = data.floatingIpsByReservation.get(reservationId)?.map((a) => a.floating_ip_address) ?? [];
    return `${type} (${fip.amount} on network ${fip.network_id}${addresses.length ? `: ${addresses.join(', ')}` : ''})`;
  }
  return type;
}

type Indexed = ReturnType<typeof indexData>;

function indexData(data: BlazarData) {
  const capabilitiesByHost = group(data.capabilities, (c) => c.computehost_id);
  return {
    reservationsByLease: group(data.reservations, (r) => r.lease_id),
    eventsByLease: group(data.events, (e) => e.lease_id),
    hostReservationByReservation: new Map(data.hostReservations.map((r) => [r.reservation_id, r])),
    allocationsByReservation: group(data.hostAllocations, (a) => a.reservation_id),
    hostsById: new Map(data.hosts.map((h) => [h.id, h])),
    capabilitiesByHost,
    /** Why a host cannot be imported, by Blazar's id: it breaks the API's rules. */
    hostProblems: new Map(
      data.hosts.flatMap((h) => {
        const name = hostName(h);
        const problem = name === undefined ? undefined : hostProblem(h, name, capabilitiesByHost.get(h.id) ?? []);
        return problem ? [[h.id, problem] as const] : [];
      }),
    ),
    instanceByReservation: new Map(data.instanceReservations.map((r) => [r.reservation_id, r])),
    floatingIpByReservation: new Map(data.floatingIpReservations.map((r) => [r.reservation_id, r])),
    floatingIpsByReservation: group(data.floatingIpAllocations, (a) => a.reservation_id),
    networkTables: data.networks,
    /** Chameleon's segments as the API's rules take them, and those they do not. */
    segments: checkSegments(data.networks),
  };
}

/** Blazar's lease as leasekeeper will hold it, or NotImportable saying why it cannot. */
function planLease(index: Indexed, lease: BlazarLease, kind: 'live' | 'history'): LeasePlan {
  const status = lease.status as LeaseStatus;
  // Before anything reaches PostgreSQL: it cannot even be asked about a NUL.
  const row = checkLeaseRow(lease);
  if ('problem' in row) throw new NotImportable(brokenRules(row.problem), true);
  if (!lease.project_id) throw new NotImportable('it has no project_id');
  const startMs = blazarTime(lease.start_date);
  const endMs = blazarTime(lease.end_date);
  if (startMs === undefined || endMs === undefined) throw new NotImportable(`its dates cannot be read (${lease.start_date} → ${lease.end_date})`);
  if (endMs <= startMs) throw new NotImportable(`it ends (${lease.end_date}) before it starts (${lease.start_date})`);
  const createdMs = blazarTime(lease.created_at) ?? startMs;

  const all = index.reservationsByLease.get(lease.id) ?? [];
  // A network reservation comes with Chameleon's tables (without them Blazar could not have made one).
  const isNetwork = (r: (typeof all)[number]) => r.resource_type === NETWORK && index.networkTables !== undefined;
  const foreign = all.filter((r) => r.resource_type !== PHYSICAL_HOST && !isNetwork(r));
  if (foreign.length > 0) {
    const what = foreign.map((r) => describeForeignReservation(index, r.id, r.resource_type ?? 'an untyped reservation')).join('; ');
    throw new NotImportable(`leasekeeper has no such reservations yet: ${what}`);
  }
  const networkReservations = all.filter(isNetwork).map((r) => {
    const planned = planNetworkReservation(index.networkTables!, index.segments, r.id);
    if ('problem' in planned) throw new NotImportable(planned.rules ? brokenRules(planned.problem) : planned.problem, planned.rules);
    return planned.plan;
  });
  const reservations = all.filter((r) => r.resource_type === PHYSICAL_HOST);
  const planned = reservations.map((r): HostReservationPlan => {
    const row = index.hostReservationByReservation.get(r.id);
    if (!row) throw new NotImportable(`reservation ${r.id} has no computehost_reservations row`);
    const range = /^(\d+)-(\d+)$/.exec(row.count_range ?? '');
    if (!range) throw new NotImportable(`reservation ${r.id} has an unreadable count_range ${JSON.stringify(row.count_range)}`);
    const params = {
      min: Number(range[1]),
      max: Number(range[2]),
      hypervisor_properties: row.hypervisor_properties ?? '',
      resource_properties: row.resource_properties ?? '',
      before_end: row.before_end ?? 'default',
    };
    const problem = reservationProblem(r.id, params);
    if (problem) throw new NotImportable(brokenRules(problem), true);
    const parsed = physicalHostParams.safeParse(params);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new NotImportable(`reservation ${r.id}: ${issue.path.join('.') || 'parameters'}: ${issue.message}`);
    }
    const hostNames = (index.allocationsByReservation.get(r.id) ?? []).map((a) => {
      const host = index.hostsById.get(a.compute_host_id);
      const name = host && hostName(host);
      if (!name) throw new NotImportable(`reservation ${r.id} holds host ${a.compute_host_id}, which Blazar's computehosts does not have (or has no name)`);
      const hostProblem = index.hostProblems.get(host.id);
      if (hostProblem) throw new NotImportable(`reservation ${r.id} holds host ${printable(name)} (Blazar id ${plain(host.id)}), which is not importable: ${brokenRules(hostProblem)}`, true);
      return name;
    });
    if (kind === 'live' && hostNames.length < parsed.data.min) {
      throw new NotImportable(`reservation ${r.id} holds ${hostNames.length} host(s), fewer than its min ${parsed.data.min}`);
    }
    const fallback: ReservationStatus = status === 'PENDING' ? 'pending' : status === 'ACTIVE' ? 'active' : status === 'ERROR' ? 'error' : 'deleted';
    return {
      id: r.id,
      status: kind === 'live' ? fallback : r.status && RESERVATION_STATUSES.has(r.status) ? (r.status as ReservationStatus) : fallback,
      params: parsed.data,
      hostNames: [...new Set(hostNames)].sort(),
      missingResources: r.missing_resources !== 0,
      resourcesChanged: r.resources_changed !== 0,
    };
  });

  const events = new Map<string, { time: number; status: EventStatus }>();
  for (const e of index.eventsByLease.get(lease.id) ?? []) {
    const time = blazarTime(e.time);
    if (e.event_type && time !== undefined && e.status && EVENT_STATUSES.has(e.status)) events.set(e.event_type, { time, status: e.status as EventStatus });
  }
  // Blazar's before-end time, kept only where it is not the default both share (end − 1 h, not before the start).
  const beforeEnd = events.get('before_end_lease')?.time;
  const beforeEndMs = beforeEnd !== undefined && beforeEnd !== beforeEndTime({ startMs, endMs }) && beforeEnd >= startMs && beforeEnd <= endMs ? beforeEnd : undefined;
  return {
    blazar: lease,
    name: row.name,
    kind,
    status,
    projectId: lease.project_id,
    userId: lease.user_id ?? '',
    startMs,
    endMs,
    beforeEndMs,
    createdMs,
    updatedMs: blazarTime(lease.updated_at) ?? createdMs,
    events,
    reservations: planned,
    networkReservations,
  };
}

/** The events as the workflow keeps them: Blazar's statuses; those a live lease has not run yet are due at our times. */
function leaseEvents(plan: LeasePlan): LeaseEvent[] {
  const due: Record<string, number> = { start_lease: plan.startMs, before_end_lease: beforeEndTime(plan), end_lease: plan.endMs };
  const startDone = plan.status !== 'PENDING';
  return EVENT_TYPES.map((type) => {
    const blazar = plan.events.get(type);
    const status: EventStatus = plan.kind === 'live' ? (type === 'start_lease' ? (startDone ? 'DONE' : 'UNDONE') : blazar?.status === 'DONE' && startDone ? 'DONE' : 'UNDONE') : (blazar?.status ?? 'DONE');
    return { id: `${plan.blazar.id}:${type}`, event_type: type, time: status === 'UNDONE' ? due[type] : (blazar?.time ?? due[type]), status };
  });
}

/**
 * The lease as leasekeeper would hold it had its physical-host plugin booked it (`reserve`): the
 * allocation's hosts, ids, aggregate and zone (Blazar's own, adopted as they are), end policy, and
 * the resource keys `host:<id>`. `idOf`: leasekeeper's id of a host, by name. Its network
 * reservations as the network type's `reserve` shows them: the segment, and Blazar's network once
 * started; `segmentIdOf`: leasekeeper's id of a segment, by Blazar's.
 */
export function leaseOf(plan: LeasePlan, idOf: (hostName: string) => string, onEndDefault: EndPolicy, segmentIdOf: (blazarId: string) => string = () => ''): Lease {
  const reservations = plan.reservations.map((r): Reservation => {
    const aggregate = leaseAggregateFor(r.id);
    const ids = r.hostNames.map(idOf);
    return {
      id: r.id,
      resource_type: PHYSICAL_HOST,
      status: r.status,
      params: r.params,
      allocation: { hosts: r.hostNames, host_ids: ids, aggregate: aggregate.name, availability_zone: aggregate.availabilityZone, on_end: endPolicyOf(r.params, onEndDefault) },
      resourceKeys: ids.map((id) => `host:${id}`),
      ...(r.missingResources ? { missing_resources: true } : {}),
      ...(r.resourcesChanged ? { resources_changed: true } : {}),
    };
  });
  const reservationStatus: ReservationStatus = plan.status === 'PENDING' ? 'pending' : plan.status === 'ACTIVE' ? 'active' : plan.status === 'ERROR' ? 'error' : 'deleted';
  for (const r of plan.networkReservations) {
    reservations.push({
      id: r.id,
      resource_type: NETWORK,
      status: reservationStatus,
      params: r.params,
      allocation: { network_id: plan.status === 'ACTIVE' ? r.networkId : null, segment: r.segment },
      resourceKeys: [`network:${segmentIdOf(r.segmentBlazarId)}`],
      footprint: { networks: 1 },
    });
  }
  return {
    id: plan.blazar.id,
    name: plan.name,
    projectId: plan.projectId,
    userId: plan.userId,
    startMs: plan.startMs,
    endMs: plan.endMs,
    ...(plan.beforeEndMs !== undefined ? { beforeEndMs: plan.beforeEndMs } : {}),
    status: plan.status,
    ...(plan.blazar.degraded !== 0 ? { statusReason: 'degraded in Blazar: some of its resources were down when it was imported' } : {}),
    reservations,
    events: leaseEvents(plan),
    createdMs: plan.createdMs,
    updatedMs: plan.updatedMs,
    version: IMPORTED_VERSION,
  };
}

// ─── The plan: hosts, leases, conflicts ─────────────────────────────────────────────────────

/** One host's time taken, by a lease already in leasekeeper or planned in this run. */
interface Taken {
  leaseId: string;
  leaseName: string;
  fromMs: number;
  untilMs: number;
}

const when = (ms: number) => (ms === Infinity ? 'for good' : formatMessageDate(ms));

/** Live leases first (active before pending: an active lease has its hosts right now), then by creation. */
function importOrder(a: BlazarLease, b: BlazarLease): number {
  const rank = (l: BlazarLease) => (l.status === 'ACTIVE' ? 0 : l.status === 'PENDING' ? 1 : 2);
  return rank(a) - rank(b) || (a.created_at ?? '').localeCompare(b.created_at ?? '') || a.id.localeCompare(b.id);
}

/** Whether the lease's workflow exists (running or closed, within Temporal's retention). */
async function workflowExists(client: Client, leaseId: string): Promise<boolean> {
  try {
    await client.workflow.getHandle(leaseWorkflowId(leaseId)).describe();
    return true;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return false;
    throw err;
  }
}

/**
 * Plans the import and, with `apply`, carries it out; either way answers what it did (or would
 * do), every conflict, and every lease left out with the reason.
 */
export async function importFromBlazar(data: BlazarData, deps: ImportDeps, options: ImportOptions): Promise<ImportReport> {
  const nowMs = options.nowMs ?? Date.now();
  const index = indexData(data);
  const report: ImportReport = {
    applied: options.apply, hosts: [], leases: [], conflicts: [], notImportable: [], hostsNotImportable: [],
    networkTables: data.networks !== undefined, segments: [], segmentsNotImportable: [...index.segments.problems.values()], historySkipped: 0, changes: 0,
  };

  // Hosts: by name, ours if already enrolled; otherwise created, keeping Blazar's id where ours can (a free whole number).
  const hostIdByName = new Map<string, string>();
  const hostsToCreate: Array<{ host: BlazarHost; name: string; keepId?: string; outcome: HostOutcome }> = [];
  for (const host of data.hosts) {
    const name = hostName(host);
    if (!name) continue; // a row Blazar could never have booked: nothing refers to it by name
    const problem = index.hostProblems.get(host.id);
    if (problem) {
      report.hostsNotImportable.push({ blazarId: host.id, name, reason: problem });
      continue;
    }
    const known = await findHostByHypervisor(deps.pool, name);
    const notes: string[] = [];
    if (host.reservable === 0) notes.push('not reservable in Blazar (its resource monitoring took it out); reservable in leasekeeper');
    if (known) {
      hostIdByName.set(name, known.id);
      report.hosts.push({ name, blazarId: host.id, id: known.id, action: 'present', notes: known.id === host.id ? notes : [...notes, `Blazar's id ${host.id} is ${known.id} here`] });
      continue;
    }
    const keepId = isHostId(host.id) && !(await hostExists(deps.pool, host.id)) && !hostsToCreate.some((h) => h.keepId === host.id) ? host.id : undefined;
    if (!keepId) notes.push(isHostId(host.id) ? `Blazar's id ${host.id} is taken here: a new id` : `Blazar's id ${host.id} is not a number, as leasekeeper's host ids are: a new id`);
    const outcome: HostOutcome = { name, blazarId: host.id, id: keepId, action: 'create', notes };
    if (keepId) hostIdByName.set(name, keepId);
    hostsToCreate.push({ host, name, keepId, outcome });
    report.hosts.push(outcome);
  }

  // Network segments (Chameleon's): by tag, ours if already enrolled; otherwise enrolled, keeping Blazar's id where free.
  const segmentIdByBlazar = new Map<string, string>();
  const present = await segmentsPresent(deps.pool, index.segments.segments.values());
  for (const segment of index.segments.segments.values()) {
    const known = present.get(segment.blazarId);
    if (known) {
      segmentIdByBlazar.set(segment.blazarId, known.id);
      report.segments.push({ ...segment, id: known.id, action: 'present', notes: known.id === segment.blazarId ? [] : [`Blazar's id ${segment.blazarId} is ${known.id} here`] });
      continue;
    }
    const keepId = await newSegmentId(deps.pool, segment.blazarId);
    if (keepId) segmentIdByBlazar.set(segment.blazarId, keepId);
    report.segments.push({ ...segment, id: keepId, action: 'create', notes: keepId ? [] : [`Blazar's id ${segment.blazarId} is not a free UUID here: a new id`] });
  }
  // Time already taken on each segment (by Blazar's id), by leasekeeper's own bookings, then by each lease planned here.
  const segmentTaken = new Map<string, Taken[]>();
  for (const [blazarId, segment] of present) {
    for (const a of await networkSegmentAllocations(deps.pool, { networkSegmentId: segment.id })) {
      const taken = { leaseId: a.lease_id, leaseName: (await findLease(deps.pool, a.lease_id))?.name ?? '?', fromMs: a.start_ms, untilMs: a.end_ms };
      segmentTaken.set(blazarId, [...(segmentTaken.get(blazarId) ?? []), taken]);
    }
  }

  // Time already taken on each host (by name), by leasekeeper's own bookings, then by each lease planned here.
  const taken = new Map<string, Taken[]>();
  const nameById = new Map([...hostIdByName].map(([name, id]) => [id, name]));
  const existing = await listAllocations(deps.pool, { from: nowMs - 366 * 86_400_000 });
  const leaseNames = new Map<string, string>();
  for (const a of existing) {
    const name = nameById.get(a.host_id);
    if (!name) continue;
    if (!leaseNames.has(a.lease_id)) leaseNames.set(a.lease_id, (await findLease(deps.pool, a.lease_id))?.name ?? '?');
    const list = taken.get(name) ?? [];
    list.push({ leaseId: a.lease_id, leaseName: leaseNames.get(a.lease_id)!, fromMs: a.start_ms, untilMs: a.blocked_until_ms ?? Infinity });
    taken.set(name, list);
  }
  // Live lease names per project: leasekeeper refuses two live leases of one project with one name (Blazar allows it).
  const namesPlanned = new Set<string>();

  const planned: Array<{ plan: LeasePlan; action: LeaseOutcome['action'] }> = [];
  for (const lease of [...data.leases].sort(importOrder)) {
    const status = lease.status ?? '';
    const leaveOut = (reason: string) => report.notImportable.push({ leaseId: lease.id, leaseName: lease.name, status, reason });
    const kind = LIVE.has(status) ? 'live' : HISTORY.has(status) ? 'history' : undefined;
    if (!kind) {
      leaveOut(`it is ${status ? plain(status) : 'without a status'} in Blazar, between two states: import again once it has settled (stop Blazar's manager first, so that nothing moves meanwhile)`);
      continue;
    }
    if (kind === 'history' && !options.withHistory) {
      report.historySkipped++;
      continue;
    }
    let plan: LeasePlan;
    try {
      plan = planLease(index, lease, kind);
    } catch (err) {
      if (!(err instanceof NotImportable)) throw err;
      leaveOut(err.rules ? `not importable: ${err.message}` : `not importable yet: ${err.message}`);
      continue;
    }

    const mine = await findLease(deps.pool, lease.id);
    if (mine || (await isLeaseDeleted(deps.pool, lease.id))) {
      // Imported before. Only a live lease whose workflow never started (a run cut short) is taken up again.
      const resume = kind === 'live' && mine?.version === IMPORTED_VERSION && !(await workflowExists(deps.temporal, lease.id));
      planned.push({ plan, action: resume ? 'resume' : 'present' });
      continue;
    }
    const toAdopt = networksToAdopt(plan);
    if (toAdopt.length > 0 && !deps.adoptNetwork) {
      leaveOut(
        `not importable yet: its network${toAdopt.length > 1 ? 's' : ''} ${toAdopt.map((r) => r.networkId).join(', ')} (made by Blazar at its start) can be adopted only with OpenStack credentials, ` +
          'to tag it with its reservation: set OS_CLOUD (or OS_*) for the import',
      );
      continue;
    }

    const nameKey = JSON.stringify([plan.projectId, plan.name]);
    const sameName = namesPlanned.has(nameKey) || (await findLeaseByName(deps.pool, plan.projectId, plan.name));
    if (sameName) {
      report.conflicts.push({ leaseId: lease.id, leaseName: plan.name, message: `project ${plan.projectId} already has a lease named ${JSON.stringify(plan.name)} in leasekeeper (names are unique per project there): rename one in Blazar and import again` });
      continue;
    }

    if (kind === 'live') {
      const fromMs = bookingStartMs(plan);
      const clash = plan.reservations.flatMap((r) => {
        const untilMs = endPolicyOf(r.params, deps.hosts.onEndDefault) === 'release' ? Infinity : plan.endMs + deps.hosts.cleaningMs;
        return r.hostNames.flatMap((host) => (taken.get(host) ?? []).filter((t) => t.fromMs < untilMs && fromMs < t.untilMs).map((t) => ({ host, t, untilMs })));
      });
      const segmentClash = plan.networkReservations.flatMap((r) => (segmentTaken.get(r.segmentBlazarId) ?? []).filter((t) => t.fromMs < plan.endMs && fromMs < t.untilMs).map((t) => ({ r, t })));
      if (segmentClash.length > 0 && clash.length === 0) {
        const { r, t } = segmentClash[0];
        report.conflicts.push({
          leaseId: lease.id,
          leaseName: plan.name,
          message:
            `network segment ${r.segmentName} is booked twice: this lease (${status}, ${when(fromMs)} → ${when(plan.endMs)}) overlaps lease ${t.leaseId} ${JSON.stringify(t.leaseName)} (${when(t.fromMs)} → ${when(t.untilMs)}); ` +
            'the other one is kept (active leases first, then the earlier created): end or move one of them in Blazar and import again',
        });
        continue;
      }
      if (clash.length > 0) {
        const { host, t, untilMs } = clash[0];
        report.conflicts.push({
          leaseId: lease.id,
          leaseName: plan.name,
          message:
            `host ${host} is booked twice: this lease (${status}, ${when(fromMs)} → ${when(untilMs)}) overlaps lease ${t.leaseId} ${JSON.stringify(t.leaseName)} (${when(t.fromMs)} → ${when(t.untilMs)}) ` +
            `from ${when(Math.max(fromMs, t.fromMs))} to ${when(Math.min(untilMs, t.untilMs))}; the other one is kept (active leases first, then the earlier created): end or move one of them in Blazar and import again`,
        });
        continue;
      }
      for (const r of plan.reservations) {
        const untilMs = endPolicyOf(r.params, deps.hosts.onEndDefault) === 'release' ? Infinity : plan.endMs + deps.hosts.cleaningMs;
        for (const host of r.hostNames) taken.set(host, [...(taken.get(host) ?? []), { leaseId: lease.id, leaseName: plan.name, fromMs, untilMs }]);
      }
      for (const r of plan.networkReservations) segmentTaken.set(r.segmentBlazarId, [...(segmentTaken.get(r.segmentBlazarId) ?? []), { leaseId: lease.id, leaseName: plan.name, fromMs, untilMs: plan.endMs }]);
    }
    namesPlanned.add(nameKey);
    planned.push({ plan, action: kind === 'live' ? 'import' : 'history' });
  }

  for (const { plan, action } of planned) {
    report.leases.push({
      id: plan.blazar.id,
      name: plan.name,
      projectId: plan.projectId,
      status: plan.status,
      startMs: plan.startMs,
      endMs: plan.endMs,
      hosts: plan.reservations.flatMap((r) => r.hostNames),
      networks: plan.networkReservations.map((r) => r.segmentName),
      action,
    });
  }
  if (!options.apply) return report;

  // ─── Apply ───
  // Hosts keeping their ids first: one given a new id takes the next of the sequence, which must not be a kept one.
  for (const { host, name, keepId, outcome } of [...hostsToCreate].sort((x, y) => Number(y.keepId !== undefined) - Number(x.keepId !== undefined))) {
    const capabilities = index.capabilitiesByHost.get(host.id) ?? [];
    const id = await insertHost(
      deps.pool,
      {
        hypervisor_hostname: name,
        nova_hypervisor_id: '', // Blazar does not keep Nova's hypervisor id, and nothing after enrolment reads it
        hypervisor_type: host.hypervisor_type,
        hypervisor_version: String(host.hypervisor_version),
        service_name: host.service_name,
        vcpus: host.vcpus,
        memory_mb: host.memory_mb,
        local_gb: host.local_gb,
        cpu_info: host.cpu_info,
        availability_zone: host.availability_zone || null,
      },
      Object.fromEntries(capabilities.map((c) => [c.property_name, c.capability_value])),
      keepId,
    );
    for (const c of capabilities.filter((c) => c.private !== 0)) await setCapabilityPrivate(deps.pool, c.property_name, true);
    hostIdByName.set(name, id);
    outcome.id = id;
    report.changes++;
  }
  const idOf = (name: string) => {
    const id = hostIdByName.get(name);
    if (!id) throw new Error(`host ${name} has no leasekeeper id`); // every booked host was planned above
    return id;
  };
  for (const segment of report.segments.filter((s) => s.action === 'create')) {
    segment.id = await enrolSegment(deps.pool, segment);
    segmentIdByBlazar.set(segment.blazarId, segment.id);
    report.changes++;
  }
  const segmentIdOf = (blazarId: string) => {
    const id = segmentIdByBlazar.get(blazarId);
    if (!id) throw new Error(`network segment ${blazarId} has no leasekeeper id`); // every booked segment was planned above
    return id;
  };

  for (const { plan, action } of planned) {
    if (action === 'present') continue;
    const lease = leaseOf(plan, idOf, deps.hosts.onEndDefault, segmentIdOf);
    if (plan.kind === 'live') {
      // Blazar's networks first (idempotent): a Neutron that fails leaves nothing booked here.
      for (const r of networksToAdopt(plan)) await deps.adoptNetwork!(r.id, r.networkId!);
      const refused = await bookResources(deps, lease, plan.networkReservations.map((r) => ({ reservationId: r.id, segmentId: segmentIdOf(r.segmentBlazarId) })));
      if (refused) {
        report.conflicts.push({ leaseId: lease.id, leaseName: lease.name, message: refused });
        report.leases.splice(report.leases.findIndex((l) => l.id === lease.id), 1);
        continue;
      }
    }
    const saved = await saveLease(deps.pool, lease);
    if (saved === 'name-taken') {
      for (const r of lease.reservations) {
        await deleteReservationHostBookings(deps.pool, r.id);
        await networkSegmentBookings.deleteReservation(deps.pool, r.id);
      }
      report.conflicts.push({ leaseId: lease.id, leaseName: lease.name, message: `project ${lease.projectId} got a lease named ${JSON.stringify(lease.name)} in leasekeeper meanwhile: rename one and import again` });
      report.leases.splice(report.leases.findIndex((l) => l.id === lease.id), 1);
      continue;
    }
    if (plan.kind === 'live') await startWorkflow(deps, lease);
    report.changes++;
  }
  return report;
}

/** Whether a live lease of the project already has this name in leasekeeper. */
async function findLeaseByName(pool: Pool, projectId: string, name: string): Promise<boolean> {
  return (await listLeases(pool, { projectId, name, limit: 1 })).length > 0;
}

/** An active lease's network reservations whose network Blazar made: adopted at --apply. */
const networksToAdopt = (plan: LeasePlan) => (plan.kind === 'live' && plan.status === 'ACTIVE' ? plan.networkReservations.filter((r) => r.networkId !== null) : []);

/**
 * Books the lease's hosts and network segments in their calendars, all or none, unless they are
 * booked already (a run cut short); the exclusion constraints are the last word against anything
 * booked since the plan. Answers why it was refused, or undefined.
 */
async function bookResources(deps: ImportDeps, lease: Lease, segments: Array<{ reservationId: string; segmentId: string }>): Promise<string | undefined> {
  const hostReservations = lease.reservations.filter((r) => r.resource_type === PHYSICAL_HOST);
  if (hostReservations.length === 0 && segments.length === 0) return undefined;
  const fromMs = bookingStartMs(lease);
  const key = hostBookingKey({ startMs: fromMs, endMs: lease.endMs }, hostReservations);
  // As the segment calendar keys its bookings: the type's reservations and the lease's window.
  const segmentKey = bookingKey(lease.reservations.filter((r) => r.resource_type === NETWORK).map((r) => [r.id, r.params]), [lease.startMs, lease.endMs]);
  try {
    await inTransaction(deps.pool, async (client) => {
      if (segments.length > 0 && (await networkSegmentBookings.lockLease(client, lease.id)).length === 0) {
        for (const { reservationId, segmentId } of segments) {
          await networkSegmentBookings.insert(client, { resourceId: segmentId, reservationId, leaseId: lease.id, projectId: lease.projectId, fromMs, endMs: lease.endMs, leadMs: 0, bookingKey: segmentKey });
        }
      }
      for (const r of hostReservations) {
        if ((await hostsOfReservation(client, r.id)).length > 0) continue;
        const unbounded = r.allocation?.on_end === 'release';
        for (const hostId of r.allocation?.host_ids as string[]) {
          await insertHostBooking(client, {
            hostId, reservationId: r.id, leaseId: lease.id, projectId: lease.projectId,
            fromMs, endMs: lease.endMs, leadMs: 0, cleaningMs: deps.hosts.cleaningMs, unbounded, bookingKey: key,
          });
        }
      }
    });
    return undefined;
  } catch (err) {
    if (isExclusionViolation(err)) {
      const held = hostReservations.flatMap((r) => r.allocation?.hosts as string[]);
      const what = [...(held.length ? [`hosts (${held.join(', ')})`] : []), ...(segments.length ? ['network segments'] : [])].join(' or ');
      return `its ${what} were booked in leasekeeper since the plan was made, ${formatMessageDate(fromMs)} → ${formatMessageDate(lease.endMs)}: import again to see by whom`;
    }
    throw err;
  }
}

/** Starts the lease's workflow carrying the lease on from where it stands; a workflow already there is left alone. */
async function startWorkflow(deps: ImportDeps, lease: Lease): Promise<void> {
  const input = carriedLeaseInput(lease, { importedFromBlazar: lease.id });
  await startRecordedLease(deps.temporal, deps.taskQueue, input, `imported from Blazar (${markdownText(lease.status)} then), for user ${markdownText(lease.userId)}`);
}

// ─── The report ─────────────────────────────────────────────────────────────────────────────

/** The report as the command prints it: what was (or would be) done, then every conflict and every lease left out. */
export function formatReport(report: ImportReport, source: string): string {
  const lines: string[] = [];
  const verb = (done: string, would: string) => (report.applied ? done : would);
  lines.push(`Blazar database ${source}`);
  lines.push(report.applied ? 'APPLY: changes are made.' : 'DRY RUN: nothing is changed; run again with --apply to import.');
  lines.push('', `Hosts (${report.hosts.length}):`);
  for (const h of report.hosts) {
    const id = h.id ? `id ${h.id}` : 'a new id';
    const what = h.action === 'create' ? `${verb('created', 'to create')} with ${id}` : `already in leasekeeper (${id})`;
    lines.push(`  ${h.name} (Blazar id ${plain(h.blazarId)}): ${what}${h.notes.length ? ` — ${h.notes.join('; ')}` : ''}`);
  }
  if (report.hostsNotImportable.length > 0) {
    lines.push('', `Hosts not importable (${report.hostsNotImportable.length}):`);
    for (const h of report.hostsNotImportable) lines.push(`  ${printable(h.name)} (Blazar id ${plain(h.blazarId)}): not importable: ${brokenRules(h.reason)}`);
  }
  if (!report.networkTables) {
    lines.push('', "Network segments: this schema has no network tables (upstream Blazar has no network reservations; Chameleon's fork keeps them in network_segments): none to import.");
  } else {
    lines.push('', `Network segments (${report.segments.length}):`);
    for (const s of report.segments) {
      const id = s.id ? `id ${s.id}` : 'a new id';
      const what = s.action === 'create' ? `${verb('enrolled', 'to enrol')} with ${id}` : `already in leasekeeper (${id})`;
      lines.push(`  ${s.name} (Blazar id ${plain(s.blazarId)}): ${what}${s.notes.length ? ` — ${s.notes.join('; ')}` : ''}`);
    }
    if (report.segmentsNotImportable.length > 0) {
      lines.push('', `Network segments not importable (${report.segmentsNotImportable.length}):`);
      for (const s of report.segmentsNotImportable) lines.push(`  ${printable(s.name)} (Blazar id ${plain(s.blazarId)}): not importable: ${brokenRules(s.reason)}`);
    }
  }
  lines.push('', `Leases (${report.leases.length}):`);
  for (const l of report.leases) {
    const what = {
      import: verb('imported: bookings, row, and a workflow carrying it on', 'to import: bookings, row, and a workflow carrying it on'),
      history: verb('imported as history (row only)', 'to import as history (row only)'),
      resume: verb('its workflow was missing (a run cut short): started', 'its workflow is missing (a run cut short): to start'),
      present: 'already imported',
    }[l.action];
    const held = [...l.hosts, ...l.networks.map((n) => `network segment ${n}`)];
    const hosts = held.length ? ` on ${held.join(', ')}` : '';
    lines.push(`  ${l.id} ${JSON.stringify(l.name)} (project ${l.projectId}, ${l.status}, ${formatMessageDate(l.startMs)} → ${formatMessageDate(l.endMs)}${hosts}): ${what}`);
  }
  if (report.historySkipped > 0) lines.push(`  (${report.historySkipped} terminated or failed lease(s) left out: --with-history imports them as rows)`);
  lines.push('', `Conflicts (${report.conflicts.length}):${report.conflicts.length ? '' : ' none'}`);
  for (const c of report.conflicts) lines.push(`  lease ${c.leaseId} ${JSON.stringify(c.leaseName)} is not imported: ${c.message}`);
  lines.push('', `Not importable (${report.notImportable.length}):${report.notImportable.length ? '' : ' none'}`);
  for (const n of report.notImportable) lines.push(`  lease ${plain(n.leaseId)} ${printable(n.leaseName)} (${plain(n.status)}): ${n.reason}`);
  lines.push('');
  const count = (action: LeaseOutcome['action']) => report.leases.filter((l) => l.action === action).length;
  const segments = report.networkTables ? `, ${report.segments.filter((s) => s.action === 'create').length} network segment(s)` : '';
  const summary = `${count('import') + count('resume')} live lease(s) and ${count('history')} as history, ${report.hosts.filter((h) => h.action === 'create').length} host(s)${segments}`;
  if (!report.applied) lines.push(`Would import ${summary}.`);
  else if (report.changes === 0) lines.push('Nothing new: every importable host and lease was already imported.');
  else lines.push(`Imported ${summary}.`);
  if (report.conflicts.length || report.notImportable.length) {
    lines.push(`${report.conflicts.length + report.notImportable.length} lease(s) left out (above): they stay in Blazar only.`);
  }
  if (report.hostsNotImportable.length) lines.push(`${report.hostsNotImportable.length} host(s) left out (above): they stay in Blazar only.`);
  if (report.segmentsNotImportable.length) lines.push(`${report.segmentsNotImportable.length} network segment(s) left out (above): they stay in Blazar only.`);
  // Blazar's own text (reasons quote its ids and types) is escaped on every line: nothing it holds can drive the terminal.
  return `${lines.map(escapeControls).join('\n')}\n`;
}
