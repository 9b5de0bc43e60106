/**
 * The contract every resource type (physical host, server, bandwidth; later instances and floating
 * IPs) plugs in behind, as Blazar's resource plugins do. Two faces:
 * - `ResourceType<P>`, what the API needs of a type: its parameter schema (raw JSON → `P`), and
 *   where a lease of it fits (availability search). The API builds only these.
 * Parameters are parsed once, by the type's schema at the API edge (lease create/update, search;
 * the Blazar import), and stored as that value: every hook gets `Reservation<P>` without parsing
 * again. The registry below is the one place where stored parameters become `P` (`typedContext`).
 * - `ResourcePlugin`, what the worker runs: the lease workflow calls each hook through one generic
 *   activity (activities/reservations.ts), so every hook runs with Temporal's timeouts and retries
 *   and must be idempotent, keyed by the reservation id. Only `reserve` and `end` are required.
 * - `HostWatch`, what the host monitor needs of the type that enrols compute hosts.
 */
import type { SearchReads } from './search-reads';
import type { PoolClient } from 'pg';
import type { z } from 'zod';
import type { HostObservation, HostStateChange } from './host-health';
import { bookingStartMs, type Lease, type LeaseStatus, type Reservation } from './lease';
import type { Notice, ReservationNotice } from './notices';
import type { Footprint } from './usage';

export interface ReservationContext<P = Record<string, unknown>> {
  leaseId: string;
  leaseName: string;
  projectId: string;
  userId: string;
  /** The lease's status when the hook runs: an ACTIVE lease keeps its resources when re-booked. */
  leaseStatus: LeaseStatus;
  reservation: Reservation<P>;
  /** Every reservation of the lease (this one included), for types that book them jointly (`sameTypeReservations`). */
  leaseReservations: Reservation[];
  startMs: number;
  endMs: number;
  /** Resources are made ready this long before startMs (and booked from then). */
  provisioningLeadMs: number;
}

/** What an end hook left to do. */
export interface EndOutcome {
  /**
   * Set while some resources are not back yet (e.g. recycling hosts that still run servers): the
   * workflow calls the hook again later, and with `force` when the lease is deleted meanwhile.
   */
  waitingFor?: string;
  /** When to look again (the workflow keeps it between 1 s and 5 min; 15 s when unset). */
  recheckAfterMs?: number;
  /** Merged into the reservation's allocation in the lease JSON (e.g. the snapshot image taken). */
  allocation?: Record<string, unknown>;
}

export interface StartOutcome {
  /** Merged into the reservation's allocation in the lease JSON (e.g. the host a server ended up on). */
  allocation?: Record<string, unknown>;
}

/** What the workflow sends an end hook: the reservation, and how far its lease got. */
export type EndRequest<P = Record<string, unknown>> = ReservationContext<P> & {
  /** False for a lease deleted before it started (or whose start failed: then undo what moved). */
  started: boolean;
  /** Do not wait for anything: take everything back now. */
  force?: boolean;
};

/** Where a reservation's resources are, for another reservation of its lease placed with it (`on_host_of`). */
export interface ReservationPlacement {
  /** The compute hosts (Nova's service host names) the reservation holds. */
  hosts: string[];
  /** The server it holds, once there is one: resources placed with it are allocated to the server in Placement. */
  serverId?: string;
}

/** Tells the worker a hook is still making progress (a long loop over hosts or servers): keeps its activity alive. */
export type ReportProgress = (details?: Record<string, unknown>) => void;

/**
 * What a hook is given besides the reservation: the ways it may reach beyond its own type, passed
 * in by the activity that runs it (so that no hook depends on running inside an activity).
 */
export interface HookContext<P = Record<string, unknown>> extends ReservationContext<P> {
  reportProgress: ReportProgress;
  /**
   * Aborted once the attempt running the hook was given up on (timed out, cancelled): a hook that
   * loops over hosts stops between them, so that it does not go on beside its retry. None: never.
   */
  signal?: AbortSignal;
  /** Where another reservation of the lease is, asked of its own resource type (no hosts: a type without placement). */
  placementOf(reservationId: string): Promise<ReservationPlacement>;
  /** Tells the lease's listeners (webhooks, oslo.messaging) something about this reservation; best effort, never fails the hook. */
  announce(notice: ReservationNotice): Promise<void>;
}

export type EndContext<P = Record<string, unknown>> = HookContext<P> & Pick<EndRequest, 'started' | 'force'>;

export interface ReserveResult {
  /** Shown in the lease JSON under the reservation (hosts, amounts, aggregate…). */
  allocation: Record<string, unknown>;
  /** The resources held, e.g. `host:3`: leases sharing a key start only after the earlier one ended. */
  resourceKeys: string[];
  /** The plugin's `hold` hook is to run right after admission (e.g. to shelve a server until start). */
  holdUntilStart?: boolean;
  /** Its start makes again (idempotently) what its hold makes: a hold that fails leaves the lease PENDING, its start tries again. */
  holdRedoneAtStart?: boolean;
  /** What the reservation holds at once, for metering and the usage policy. */
  footprint?: Footprint;
  /** Start in these steps (`startStep`), each its own activity with its own retries, instead of one `start`. */
  startSteps?: StartStep[];
  /** Booked anew, the lease's cut (issue 43) was dropped: that cut's sequence, for the workflow to ignore its tell. */
  preemptionSequence?: number;
}

/** One step of a start made of several: its own activity, time-out and retry policy. */
export interface StartStep {
  name: string;
  /** How long one try may take. */
  timeoutSeconds: number;
  /** Tries before the start fails (1: none again). */
  maximumAttempts: number;
  /** Pause before the first retry; it doubles after each. */
  retryIntervalSeconds: number;
}

/** What a step hands to the next (ids of what it made, choices), and what it shows in the lease JSON. */
export interface StepOutcome {
  state: Record<string, unknown>;
  allocation?: Record<string, unknown>;
}

/** Where a lease of some reservations of one type fits, from a given start (availability search, 409s). */
export interface FitSearch {
  /** The earliest start (from the one asked, on a whole minute) where they fit for the whole duration; undefined: never, or not within the search budget. */
  earliest?: number;
  /** How long they fit from the asked start (0: not at all; Infinity: without end). */
  longestMs: number;
  /** The search gave up within its work budget: `tried` candidate starts, the last at `searchedUntil`. */
  cutShort: boolean;
  tried: number;
  searchedUntil?: number;
  /**
   * Asked by `limits.laterWindows`, when `earliest` is later than the asked start: the starts of the
   * windows after it, each the earliest from the previous one's end (as a search from there would
   * answer), found in the same sweep. `resumeAt`: they stopped short (a search from there tells
   * more); absent, there are no more. Absent altogether: not found this way (search again).
   */
  laterWindows?: { starts: number[]; resumeAt?: number };
}

export interface FitQuery<P = Record<string, unknown>> {
  projectId: string;
  /** The lease's reservations of this type (the others are searched by their own types). */
  reservations: Array<Reservation<P>>;
  startMs: number;
  durationMs: number;
  /** The lead time a new lease gets (its resources are booked from start − lead). */
  provisioningLeadMs: number;
  /** What the caller needs to know at all (none: everything). */
  limits?: FitLimits;
}

/** Bounds a caller sets on a search, which a calendar may use to look less far (offers: src/domain/offers.ts). */
export interface FitLimits {
  /** How long a fit from the start matters: a longer one may be answered as any `longestMs` of at least this. */
  longestUpToMs?: number;
  /** The latest start that matters: with none up to it, `earliest` may be undefined (not `cutShort`) rather than later. */
  earliestUntilMs?: number;
  /** How many windows after a later `earliest` to find in the same sweep (FitSearch.laterWindows); a calendar may find none. */
  laterWindows?: number;
  /** Reads shared by the searches of one request (offers): a calendar reads a window once. */
  reads?: SearchReads;
  /**
   * The booking that follows may cut preemptible leases (issue 43: an API-admitted create that needs
   * no approval): a regular ask counts their bookings as free. Unset, they count as taken, for a
   * booking that never cuts (an update, an offer hold, a create held for approval or admitted by its workflow).
   */
  mayPreempt?: boolean;
}

/**
 * What a heal hook reports: the reservation as it is now after hosts failed or recovered. It reads
 * the hosts' states itself (the hosts table), so calling it again changes nothing more.
 */
export interface HealOutcome {
  /** Merged into the reservation's allocation in the lease JSON (the hosts it holds now). */
  allocation?: Record<string, unknown>;
  /** The resources held now, replacing the reservation's. */
  resourceKeys?: string[];
  /** Some resources failed and nothing replaced them (yet): the lease is degraded. */
  missingResources: boolean;
  /** A pending reservation was moved to other resources (shown until its start). */
  resourcesChanged: boolean;
}

/** What a maintenance window's start did: whether it began (not withdrawn, not over), until when, the compute service it disabled, and the leases to tell. */
export interface MaintenanceBegun {
  begun: boolean;
  endMs: number;
  /** The compute service host it disabled (to enable at the end even if the host is removed meanwhile). */
  computeHost?: string;
  leaseIds: string[];
}

/** What the host monitor needs of the resource type that enrols compute hosts. */
export interface HostWatch {
  /** A maintenance window starts: disable the compute service if it asks; the leases booked on the host. */
  beginMaintenance(windowId: string): Promise<MaintenanceBegun>;
  /** A maintenance window ends (or is withdrawn): enable what its start disabled, return a host set aside to the pool; the leases booked on the host. */
  endMaintenance(end: { windowId: string; hostId: string; computeHost?: string }): Promise<{ leaseIds: string[] }>;
  /** Every enrolled host as Nova shows it now. */
  observe(): Promise<HostObservation[]>;
  /** Records a host's new state (a repeated record keeps the first). */
  record(change: HostStateChange): Promise<void>;
  /** A host up again: back where its bookings want it (out of the failed aggregate). */
  recovered(hostId: string): Promise<void>;
  /** A host's change as a notice to the deployment's listeners (`host.failed`, `host.recovered`). */
  noticeOf(change: HostStateChange, leaseIds: string[]): Notice;
  /** The leases booked on these hosts from now on (beginning before `untilMs`, when given). */
  leasesHolding(hostIds: string[], untilMs?: number): Promise<string[]>;
  /** The leases still booked on hosts they cannot count on (failed; pending on a host out of admission). */
  leasesToHeal(untilMs?: number): Promise<string[]>;
  /**
   * Hosts not in the aggregate the calendar says: those also seen at the previous check (`previous`,
   * host id → what was seen) are put back (`report`: only reported); aggregates of ended leases go.
   */
  checkDrift(previous: Record<string, string>, mode: 'repair' | 'report'): Promise<DriftCheck>;
}

/** What a drift check found and did. */
export interface DriftCheck {
  /** Host id → the drift seen now (the next check repairs those it sees again). */
  seen: Record<string, string>;
  repaired: string[];
  reported: string[];
  aggregatesRemoved: string[];
  /** Leases whose workflows are to heal (the repair done under the lease's lock, its allocation recorded): the monitor tells them. */
  leasesToHeal?: string[];
}

/**
 * How offers (POST /v1/offers, a refusal's offers) see a reservation of a type: the one place that
 * knows what "this reservation with n" means for the type, so that a `fewer` offer is searched by
 * the type's own calendar search with its count changed, never by a second search.
 */
export interface OfferShape<P = Record<string, unknown>> {
  /** What it asks for and the least it accepts by its own parameters (Blazar's min/max for hosts; otherwise the amount, both). */
  count(params: P): { asked: number; least: number };
  /** The least the parameters allow (e.g. the addresses named in required_floatingips): a request's `min` below it is refused. */
  floor?(params: P): number;
  /** The same reservation asking for exactly `n`. */
  withCount(params: P, n: number): P;
  /** What it would book, in counts any member may see (hosts, slots, addresses, ports and bandwidth). */
  describe(params: P): Record<string, unknown>;
  /** What it holds at once, for the usage policy's check of an offer (none: the policy sees none of it). */
  footprint?(params: P): Footprint;
}

/** What the API needs of a resource type; `P`: its parameters as its schema produces them. */
export interface ResourceType<P = Record<string, unknown>> {
  /** Blazar's resource_type, e.g. `physical:host`. */
  readonly resourceType: string;
  /** Parses a reservation's raw parameters at the API edge, once (zod issues become a 400); its output is what is stored and what the hooks get. */
  readonly paramsSchema: z.ZodType<P>;
  /**
   * Refuses (a 400 naming the key) a property query naming a key that is not known, at the API,
   * before any booking; `isAdmin`: private host capabilities are known to admins only.
   */
  checkPropertyKeys?(params: P, viewer: { isAdmin: boolean }): Promise<void>;
  /** Where these reservations fit: the earliest start from `startMs` and the longest lease from it. */
  earliest(query: FitQuery<P>): Promise<FitSearch>;
  /**
   * Books a new lease's reservation inside `client`'s open transaction, with no cloud call, as the
   * worker's `reserve` would: the API then admits the lease in that one transaction (its row and
   * its owed workflow start with it) and answers at once. Types that must ask the cloud to book
   * leave it out; their leases are admitted by the lease workflow. It must book calendar rows
   * only (under the lease's id): an offer hold books with it, and frees what it booked by deleting
   * the rows with that lease_id (src/db/offer-holds.ts). `preempt` (issue 43): a regular lease
   * may cut preemptible bookings; only the lease create path asks it, whose policy check and record
   * commit in the same transaction (an offer hold does not); the ids of the leases it cut are added
   * to `cut`, for the caller to tell once committed. `borrow: false` (an offer hold): a preemptible
   * lease never books lent time (a reclaim would have to cut a hold, which has no workflow to tell).
   */
  bookAtAdmission?(client: PoolClient, ctx: ReservationContext<P>, options?: { preempt?: boolean; cut?: string[]; borrow?: boolean }): Promise<ReserveResult>;
  /** What a type with bookAtAdmission must do before the transaction opens (no lock held), e.g. read capacities from the cloud when its copy is stale. */
  beforeAdmission?(): Promise<void>;
  /**
   * The latest end the lease's bookings of this type can move to keeping their resources (extension
   * offers): Infinity when nothing follows; undefined when the lease holds none of this type. Types
   * without it cannot preview an extension (its PUT still answers with latest_end).
   */
  latestEnd?(leaseId: string): Promise<number | undefined>;
  /** Counts for offers; a type without it is offered only as asked (later or shorter, never fewer). */
  readonly offers?: OfferShape<P>;
  /**
   * For an admin's offers: what these reservations would book over [startMs, endMs) now, per
   * reservation id, as fields beside its counts (hosts: `would_book`, their ids and names). Members
   * never see it. Types without it show counts only.
   */
  wouldBook?(reservations: Array<Reservation<P>>, startMs: number, endMs: number, provisioningLeadMs: number): Promise<Map<string, Record<string, unknown>>>;
}

/** What a hold may report: merged into the reservation's allocation (an instance reservation's flavor, aggregate and server group). */
export interface HoldOutcome {
  allocation?: Record<string, unknown>;
}

/** A lend request (issue 43): how many hosts (or slots), until when; its id makes a retry find what it lent. */
export interface LendHostsRequest {
  lendingId: string;
  count: number;
  untilMs: number;
}

/** What a lend lent: the hosts (id, name) from `lentAtMs`; a slot lend, its lending rows (one per host: id, the host's name) and the slots lent on each. */
export interface LentHosts {
  hosts: Array<{ id: string; name: string }>;
  slots?: number[];
  lentAtMs: number;
}

/**
 * A reclaim (issue 43): `count` lent hosts or slots (all when absent), needed from `neededFromMs`. `lentHostIds`:
 * the hosts (a slot lending's rows) the lease records as lent and not reclaimed; one of them found reclaimed already means a
 * retry of this same reclaim (the lease's lock lets one reclaim through at a time): answered as it was.
 */
export interface ReclaimHostsRequest {
  count?: number;
  neededFromMs: number;
  lentHostIds: string[];
}

/** The hosts a reclaim took: when each comes back, whether anyone borrowed it; `cut`: the borrower leases cut. */
export interface ReclaimedHosts {
  hosts: Array<{ hostId: string; returnsAtMs: number; borrowed: boolean }>;
  cut: string[];
}

/** What the worker runs for a resource type: the hooks of a reservation's life, each given the parameters typed (`P`). */
export interface ResourcePlugin<P = Record<string, unknown>> extends ResourceType<P> {
  /** Books capacity for [start, end] (again, for a new window, when the lease is updated); 409 when it is not free. */
  reserve(ctx: HookContext<P>): Promise<ReserveResult>;
  /**
   * A started lease's reservation that holds its booking, made for its parameters: moves the
   * booking to the new window (an early end, an extension; 409 when another is in the way) in the
   * calendar alone, keeping what it holds, with no cloud call. False when that is not the case:
   * `reserve` books it. Types whose reserve reads the cloud have it (see `reserveFor`).
   */
  moveWindow?(ctx: HookContext<P>, settled?: { preemptionSequence?: number }): Promise<boolean>;
  /**
   * Right after admission, when reserve (or bookAtAdmission) asked for it: sets the resources aside
   * until the start, so that others can use the capacity meanwhile (a server is shelved and
   * offloaded), or makes in the cloud what the API's booking could not (an instance reservation's flavor).
   */
  hold?(ctx: HookContext<P>): Promise<HoldOutcome | void>;
  /** Makes the reserved resources usable by the lessee (unless reserve listed `startSteps`). */
  start?(ctx: HookContext<P>): Promise<StartOutcome | void>;
  /**
   * Why the start will wait before its resources are usable, if it will (hosts still booting after a
   * wake, issue 48): the lease's status_reason while its start runs; undefined: it will not. Asked
   * right before the start; types without it never say.
   */
  startWaitReason?(ctx: HookContext<P>): Promise<string | undefined>;
  /** One of the steps reserve listed in `startSteps`, given what the earlier steps handed on. */
  startStep?(step: string, ctx: HookContext<P>, state: Record<string, unknown>): Promise<StepOutcome>;
  /** The before-end action (snapshot, notify…). */
  beforeEnd?(ctx: HookContext<P>): Promise<void>;
  /** Takes the resources back and frees the booking, or says what it is still waiting for. */
  end(ctx: EndContext<P>): Promise<EndOutcome>;
  /**
   * Hosts the reservation holds failed, or came back: re-book a pending reservation elsewhere,
   * replace failed hosts of an active one, or report what is missing. Types without it are never degraded.
   */
  heal?(ctx: HookContext<P>): Promise<HealOutcome>;
  /** Where the reservation's resources are (for `on_host_of`); types without hosts leave it out. */
  placementOf?(ctx: HookContext<P>): Promise<ReservationPlacement>;
  /**
   * Whether the lessee uses the reservation's resources now (a server of theirs on them), for
   * reaping idle leases; `undefined` when it cannot tell. Types without it are never idle.
   */
  inUse?(ctx: HookContext<P>): Promise<boolean | undefined>;
  /**
   * Lending (issue 43): lends `count` idle hosts (or slots) of an active reservation to preemptible leases until
   * `untilMs` (409 with `idle` when fewer are idle), idempotent by `lendingId`. Types without it cannot lend.
   */
  lend?(ctx: HookContext<P>, request: LendHostsRequest): Promise<LentHosts>;
  /** Takes lent hosts back (see ReclaimHostsRequest); the leases cut are owed the news, and named for the caller to tell. */
  reclaim?(ctx: HookContext<P>, request: ReclaimHostsRequest): Promise<ReclaimedHosts>;
  /** What the lend request `lendingId` lent, as `lend` answers it; undefined when it lent nothing (a lend whose answer was lost). */
  lentBy?(ctx: HookContext<P>, lendingId: string): Promise<LentHosts | undefined>;
  /** After a lend that lent nothing and whose tries were all given up on: hosts it left fenced go back into the lease; answers them. */
  putBackFenced?(ctx: HookContext<P>): Promise<string[]>;
  /** The reservation's hosts being reclaimed and not back yet, each with its return and whether borrowed (a reclaim whose answer was lost). */
  reclaimingHosts?(ctx: HookContext<P>): Promise<ReclaimedHosts['hosts']>;
  /** How many hosts could be lent now (usable, not lent, running no server): the idle check's suggestion. */
  idleHosts?(ctx: HookContext<P>): Promise<number>;
  /** Whether no borrower lease runs on these lent hosts any more (its end done): they can come back. */
  lentHostsFree?(ctx: HookContext<P>, hostIds: string[]): Promise<boolean>;
  /** The lent hosts come back into the reservation (in the cloud: its aggregate), their lendings returned. */
  returnLentHosts?(ctx: HookContext<P>, hostIds: string[]): Promise<void>;
  /**
   * For the host monitor's drift check: what the cloud holds for this type's active reservations
   * against what the calendar says, repaired (`report`: only reported) when the previous check saw
   * the same (`previous`: key → what was seen; each type keys under a prefix of its own).
   */
  checkDrift?(previous: Record<string, string>, mode: 'repair' | 'report'): Promise<DriftCheck>;
}

/**
 * The registries hold every type whatever its parameters (as `ResourceType`, parameters a record):
 * a type's own hooks are checked against its `P` where it is written, and are handed stored
 * parameters as `P` through `typedContext` (the API's schema produced them).
 */
export type ResourceTypes = ReadonlyMap<string, ResourceType>;
export type ResourcePlugins = ReadonlyMap<string, ResourcePlugin>;

/**
 * Resource types (or plugins) by resource_type. A `ResourcePlugin<P>` enters as a `ResourcePlugin`
 * (hooks are methods, so TypeScript accepts the wider context): its hooks are to be called only
 * through `typedContext` below, as the activities and the API's admission do.
 */
export function registry<T extends ResourceType>(types: T[]): ReadonlyMap<string, T> {
  return new Map(types.map((type) => [type.resourceType, type]));
}

export const pluginRegistry = (plugins: ResourcePlugin[]): ResourcePlugins => registry(plugins);

/**
 * A reservation's context with its parameters as its type's `P`, for a hook of that type. No parse:
 * the parameters were parsed by the same type's schema at the edge (API, import) and stored as that
 * JSON value; the one cast from stored to typed parameters is here.
 */
export function typedContext<P, C extends ReservationContext>(type: ResourceType<P>, ctx: C): C & ReservationContext<P> {
  if (ctx.reservation.resource_type !== type.resourceType) throw new Error(`reservation ${ctx.reservation.id} is ${ctx.reservation.resource_type}, not ${type.resourceType}`);
  return ctx as C & ReservationContext<P>;
}

/** The reservations of `type` among `reservations` (a lease's, a search's), their parameters as its `P` (see `typedContext`). */
export function reservationsOfType<P>(type: Pick<ResourceType<P>, 'resourceType'>, reservations: readonly Reservation[]): Array<Reservation<P>> {
  return reservations.filter((r) => r.resource_type === type.resourceType) as Array<Reservation<P>>;
}

/** The lease's reservations of the same type as the context's (booked jointly), typed as its own. */
export function sameTypeReservations<P>(ctx: ReservationContext<P>): Array<Reservation<P>> {
  return reservationsOfType<P>({ resourceType: ctx.reservation.resource_type }, ctx.leaseReservations);
}

/** What a reservation's hooks are told of it and its lease. */
export function reservationContext(lease: Lease, reservation: Reservation): ReservationContext {
  return {
    leaseId: lease.id,
    leaseName: lease.name,
    projectId: lease.projectId,
    userId: lease.userId,
    // A lease waiting for approval is, to its resources, one not started.
    leaseStatus: lease.status === 'PENDING_APPROVAL' ? 'PENDING' : lease.status,
    reservation,
    leaseReservations: lease.reservations,
    startMs: bookingStartMs(lease),
    endMs: lease.endMs,
    provisioningLeadMs: lease.provisioningLeadMs ?? 0,
  };
}

/**
 * Books a reservation through its type. A started lease's reservation whose window alone changed is
 * moved by its calendar (`moveWindow`) and keeps what it reserved: an early end or an extension
 * needs no cloud, so none failing can hold the lease's update. Any other goes through `reserve`.
 */
export async function reserveFor(plugin: ResourcePlugin, ctx: HookContext): Promise<ReserveResult> {
  // A preemptible lease's move settles its owed cut (its bookings now end where the lease does), as a booking anew does.
  const settled: { preemptionSequence?: number } = {};
  if (ctx.leaseStatus !== 'PENDING' && plugin.moveWindow && (await plugin.moveWindow(ctx, settled))) {
    const { resourceKeys, footprint, startSteps } = ctx.reservation;
    const { preemptionSequence } = settled;
    return { allocation: {}, resourceKeys: resourceKeys ?? [], ...(footprint ? { footprint } : {}), ...(startSteps ? { startSteps } : {}), ...(preemptionSequence !== undefined ? { preemptionSequence } : {}) };
  }
  return plugin.reserve(ctx);
}

/** The reservation as booked: what `reserve` (or `bookAtAdmission`) reported merged in. */
export function bookedReservation(reservation: Reservation, booked: ReserveResult): Reservation {
  const { allocation, resourceKeys, holdUntilStart, holdRedoneAtStart, startSteps, footprint } = booked;
  return {
    ...reservation,
    allocation: { ...reservation.allocation, ...allocation },
    resourceKeys,
    ...(footprint ? { footprint } : {}),
    ...(startSteps ? { startSteps } : {}),
    ...(holdUntilStart && !reservation.hold ? { hold: 'due' as const } : {}),
    ...(holdUntilStart && holdRedoneAtStart ? { holdRedoneAtStart: true as const } : {}),
  };
}
