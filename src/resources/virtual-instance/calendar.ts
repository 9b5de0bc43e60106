/**
 * The instance-slot calendar in PostgreSQL: `amount` slots of one flavor size on enrolled hosts,
 * counted against each host's Placement capacity (allocation ratios and reserved amounts applied:
 * the compute providers the server type copies from Placement), never on a host a whole-host lease
 * holds (cleaning gap included). A booking locks the candidate hosts' provider rows (instance
 * admissions on a host go one by one) and writes one shared host row per host: the exclusion
 * constraints of host_allocations keep host leases off it, whatever races. The decisions are
 * src/domain/instance-slots.ts.
 */
import type { PoolClient } from 'pg';
import { formatMessageDate as when, wholeMinuteUp } from '../../domain/dates';
import { invalidLease, leaseConflict } from '../../domain/lease';
import { isPreemptibleReservation } from '../../domain/preemption';
import { canEverPlace, freeSlots, longestSlots, placePreempting, placeSlots, searchEarliestSlots, type PreemptibleSlotLease, type SlotCalendar, type SlotHost, type SlotRequest } from '../../domain/instance-slots';
import { matchesQuery, parsePropertyQuery } from '../../domain/property-query';
import type { Calendar } from '../../domain/calendar';
import type { FitLimits, FitSearch, ReservationContext } from '../../domain/resource-plugin';
import type { Reservation } from '../../domain/lease';
import { blockedIntervals, deleteReservationHostBookings, endReservationHostBookingsAt, endSharedHostRowsAt, insertHostBooking, liveSharedHosts, moveSharedHostRowsEnd, preemptibleBookingsOverlapping } from '../../db/host-allocations';
import { settlePreemptionOnRebooking } from '../../db/lease-preemptions';
import { computeHostName, listHosts, type HostRecord } from '../../db/hosts';
import type { Pool } from '../../db/pool';
import {
  bookingsOnProviders,
  deleteReservationQuantityBookings,
  endReservationQuantityBookingsAt,
  insertQuantityBooking,
  liveSlots,
  lockProviders,
  preemptibleSlotsOnProviders,
  usableProviders,
  type CapacityProvider,
  type LiveSlots,
} from '../../db/quantity-allocations';
import { bookedFor, bookInTransaction, bookingKey, checkKeys, extensionRefused, fitNearFirst, movedBookingKey, NEAR_SEARCH_DURATIONS, NEAR_SEARCH_MS, releaseBooking, shortage, type NearFirstSearch } from '../shared/booking';
import { COMPUTE_KIND } from '../shared/compute-providers';
import { preemptLease } from '../shared/preemption';
import { QuantityCalendar } from '../shared/quantity-bookings';
import { EXTENSION_HORIZON_MS } from '../../domain/offers';
import type { Amounts } from '../../domain/quantity-calendar';
import type { Affinity } from '../../domain/instance-slots';

export const VIRTUAL_INSTANCE = 'virtual:instance';
/**
 * The work one slot search may do: the bookings it reads into its index (SlotFreeIndex), then a
 * look-up per candidate host for each instant tried. 40 hosts with 10 000 slot bookings: about
 * 4 700 instants (bench:offers); 1 000 hosts with 100 000: the index alone is over it.
 */
export const SLOT_SEARCH_WORK_BUDGET = 200_000;

/** Blazar's sentence when instance slots do not fit. */
const NOT_ENOUGH = 'Not enough hosts available.';

export interface InstanceCalendarSettings {
  /** The gap a host keeps between a whole-host lease and slots (Blazar's cleaning_time). */
  cleaningMs: number;
}

/** Where a reservation's slots are: per host, how many. */
export interface SlotPlacement {
  hostId: string;
  /** The hypervisor host name (Placement's compute node name). */
  hypervisorHostname: string;
  /** Nova's compute service host (what aggregates take). */
  computeHost: string;
  providerUuid: string;
  slots: number;
}

/** What a reservation books: `amount` slots of `slot`, on hosts its properties and traits allow. */
export interface SlotSpec {
  slot: Amounts;
  amount: number;
  affinity: Affinity;
  /** A property query over the hosts' capabilities (as for host leases). */
  resourceProperties: string;
  /** Placement traits the host's compute node must have, and must not have (a flavor's `trait:X=required|forbidden`). */
  requiredTraits?: string[];
  forbiddenTraits?: string[];
}

/** An enrolled host that can take slots, with its compute provider in Placement. */
export interface Candidate {
  host: HostRecord;
  provider: CapacityProvider;
}

/** What a booking may be told: where servers run (kept first when it shrinks), and to book again though unchanged. */
export interface SlotBookingOptions {
  keepOn?: ReadonlyMap<string, number>;
  rebook?: boolean;
  /** The workflow's booking: booked anew, the lease's owed cut is dropped and its sequence set here (as for hosts). */
  settled?: { preemptionSequence?: number };
}

/** Whether a booking may cut preemptible leases (issue 43), and where the ids of those it cut go: see HostCalendar.bookWithin. */
export interface PreemptOptions {
  preempt: boolean;
  cut?: string[];
}

interface InstanceCalendarTypes {
  db: Pool | PoolClient;
  resource: Candidate;
  bookArgs: [spec: SlotSpec, options?: SlotBookingOptions];
  booked: SlotPlacement[];
  searchFor: Array<{ reservation: Reservation; spec: SlotSpec }>;
  snapshot: SlotCalendar;
  /** A reservation whose own slots are left out (it is booked again). */
  snapshotArgs: [ownReservationId?: string];
  shortageArgs: [request: SlotRequest];
}

export class InstanceSlotCalendar implements Calendar<InstanceCalendarTypes> {
  constructor(
    private readonly pool: Pool,
    private readonly settings: InstanceCalendarSettings,
  ) {}

  /**
   * Books the slots for the lease window (from start − lead); idempotent per request. A pending
   * reservation is booked anew (its hosts preferred); an active one keeps its slots where they are
   * (servers may run there), drops `dropFrom` slots first when it shrinks, and books new ones from now.
   * `rebook`: book again even if the request is unchanged (healing, when hosts failed).
   */
  async book(ctx: ReservationContext, spec: SlotSpec, options: SlotBookingOptions = {}): Promise<SlotPlacement[]> {
    return bookInTransaction(this.pool, (client) => this.bookIn(client, ctx, spec, options, { preempt: false }), { retryExclusion: true });
  }

  /**
   * The same inside the caller's transaction (the API's admission, an offer hold): a lost race
   * surfaces as its error, and the caller runs its whole transaction again. `preempt` (issue 43):
   * a regular reservation that does not fit may cut preemptible leases; only a caller whose policy
   * check and record commit in this same transaction may ask it. `cut` gets the ids of the leases cut.
   */
  bookWithin(client: PoolClient, ctx: ReservationContext, spec: SlotSpec, preemption: PreemptOptions): Promise<SlotPlacement[]> {
    return this.bookIn(client, ctx, spec, {}, preemption);
  }

  private async bookIn(client: PoolClient, ctx: ReservationContext, spec: SlotSpec, options: SlotBookingOptions, preemption: PreemptOptions): Promise<SlotPlacement[]> {
    const now = Date.now();
    const key = bookingKey(ctx.reservation.params, [ctx.startMs, ctx.endMs, ctx.provisioningLeadMs, spec]);
    const live = await liveSlots(client, ctx.reservation.id, now);
    // `rebook` (healing): the same request, but some of its hosts can no longer be counted on.
    if (!options.rebook && live.length > 0 && live.every((l) => l.bookingKey === key)) return this.placementsOf(live);

    const candidates = await this.candidates(client, spec);
    if (candidates.length === 0) throw invalidLease(`no enrolled host can take instance slots: none matches the reservation's resource_properties, or none has a compute node in Placement`);
    await lockProviders(
      client,
      candidates.map((c) => c.provider.uuid),
    );
    const request: SlotRequest = { slot: spec.slot, amount: spec.amount, affinity: spec.affinity };
    if (!canEverPlace(request, candidates.map(slotHost))) {
      throw leaseConflict(`${NOT_ENOUGH} ${spec.amount} instance(s) of ${describeSlot(request)} can never fit on the ${candidates.length} matching host(s)${spec.affinity === false ? ' (each on a different host)' : spec.affinity ? ' (all on one host)' : ''}.`);
    }
    // Booked anew by the workflow, or an active booking moved to end where the lease does: a cut of the old booking is moot (the workflow drops its tell by the sequence).
    const active = ctx.leaseStatus !== 'PENDING' && live.length > 0;
    if (options.settled) options.settled.preemptionSequence = await settlePreemptionOnRebooking(client, ctx.leaseId, active ? ctx.endMs : undefined);
    if (active) return this.rebookActive(client, ctx, request, candidates, live, key, now, options.keepOn);
    // A preemptible reservation never displaces anything (issue 43).
    return this.bookPending(client, ctx, request, candidates, live, key, preemption.preempt && !isPreemptibleReservation(ctx.reservation) ? (preemption.cut ?? []) : undefined);
  }

  /**
   * A started reservation whose slots were booked for its parameters: its new window (an early end,
   * an extension) decided here alone, its slots kept where they are (no cloud read: the slot's size
   * is the booked one). False when it is not that case (no live slots, other parameters, a host of
   * its slots no longer takes slots): the type's reserve books it then. `settled`: as for book.
   */
  async moveWindow(ctx: ReservationContext, settled?: { preemptionSequence?: number }): Promise<boolean> {
    if (ctx.leaseStatus === 'PENDING') return false;
    return bookInTransaction(
      this.pool,
      async (client) => {
        const now = Date.now();
        // Slots that ended with an early end already done are live just before it (a retry finds them again).
        const live = await liveSlots(client, ctx.reservation.id, Math.min(now, ctx.endMs - 1));
        if (live.length === 0 || !live.every((l) => bookedFor(l.bookingKey, ctx.reservation.params))) return false;
        const request: SlotRequest = { slot: live[0].slot, amount: live.reduce((n, l) => n + l.slots, 0), affinity: null };
        const candidates = (await this.candidates(client, { ...request, resourceProperties: '' })).filter((c) => live.some((l) => l.providerUuid === c.provider.uuid));
        if (candidates.length < live.length) return false;
        await lockProviders(
          client,
          candidates.map((c) => c.provider.uuid),
        );
        const key = movedBookingKey(live[0].bookingKey, ctx);
        if (!live.every((l) => l.bookingKey === key)) await this.rebookActive(client, ctx, request, candidates, live, key, now);
        // Its slots now end where the lease does (a cut slot still taken would have refused the move): an earlier cut is moot.
        if (settled) settled.preemptionSequence = await settlePreemptionOnRebooking(client, ctx.leaseId, ctx.endMs);
        return true;
      },
      { retryExclusion: true },
    );
  }

  /** Per enrolled host (by id), how many slots of `slot` are free over the whole window [from, to) (availability). */
  async freeSlotsPerHost(slot: Amounts, from: number, to: number): Promise<Map<string, number>> {
    const candidates = await this.candidates(this.pool, { slot, amount: 1, affinity: null, resourceProperties: '' });
    const calendar = await this.snapshot(this.pool, candidates, from, to);
    return new Map(candidates.map((c) => [c.host.id, freeSlots(slotHost(c), calendar, slot, from, to)]));
  }

  /** The reservation's slots now (or, before its start, as booked), per host. */
  async placement(reservationId: string, atMs = Date.now()): Promise<SlotPlacement[]> {
    return this.placementsOf(await liveSlots(this.pool, reservationId, atMs));
  }

  /** Frees the booking: all of it if the lease never started, the rest of the window if it ends early. */
  async release(reservationId: string, started: boolean, nowMs = Date.now()): Promise<void> {
    await releaseBooking(started, nowMs, {
      deleteAll: async () => {
        await deleteReservationQuantityBookings(this.pool, reservationId);
        await deleteReservationHostBookings(this.pool, reservationId);
      },
      endAt: (at) => this.endBookingsAt(this.pool, reservationId, at),
    });
  }

  /** The reservation's slots and its shared host rows end at `at` (a host row blocked `cleaningMs` more). */
  private async endBookingsAt(db: Pool | PoolClient, reservationId: string, at: number): Promise<void> {
    await endReservationQuantityBookingsAt(db, reservationId, at);
    await endReservationHostBookingsAt(db, reservationId, at, this.settings.cleaningMs);
  }

  /**
   * Where the lease's instance reservations fit from `start`: the earliest whole-minute start, and
   * the longest lease from it, within what the caller needs (`limits`).
   */
  async search(reservations: Array<{ reservation: Reservation; spec: SlotSpec }>, start: number, durationMs: number, leadMs: number, limits: FitLimits = {}): Promise<FitSearch> {
    let result: FitSearch = { earliest: start, longestMs: Infinity, cutShort: false, tried: 0 };
    for (const { reservation, spec } of reservations) {
      const candidates = await this.candidates(this.pool, spec);
      const request: SlotRequest = { slot: spec.slot, amount: spec.amount, affinity: spec.affinity };
      const read = (until: number | null) => this.snapshot(this.pool, candidates, start - leadMs, until, reservation.id);
      const reads = limits.reads;
      // Within one request (offers), a read of a wider window answers for this one (SearchReads).
      const snapshot = !reads
        ? read
        : (until: number | null) => reads.read(`slots:${reservation.id}:${candidates.map((c) => c.provider.uuid).join(',')}`, start - leadMs, until, () => read(until), (wider) => narrowSlotCalendar(wider, start - leadMs, until));
      const fit = await slotFitNearFirst(snapshot, request, start, durationMs, leadMs, limits);
      result = {
        earliest: result.earliest === undefined || fit.earliest === undefined ? undefined : Math.max(result.earliest, fit.earliest),
        longestMs: Math.min(result.longestMs, fit.longestMs),
        cutShort: result.cutShort || fit.cutShort,
        tried: result.tried + fit.tried,
        searchedUntil: fit.searchedUntil ?? result.searchedUntil,
      };
    }
    return result;
  }

  /**
   * The latest end the lease's slots can move to on the hosts they are on (extension offers): each
   * host's capacity less others' slots (QuantityCalendar.latestEndsByProvider, the lease's compute
   * bookings together), and before the next whole-host lease or maintenance of the host, less the
   * cleaning time. Undefined when the lease holds no slots.
   */
  async latestEnd(leaseId: string): Promise<number | undefined> {
    const ends = await new QuantityCalendar(this.pool).latestEndsByProvider(leaseId, COMPUTE_KIND);
    if (!ends) return undefined;
    const fromMs = ends[0].fromMs;
    const names = new Set(ends.map((e) => e.provider.name));
    const hostIdOf = new Map((await listHosts(this.pool)).filter((h) => names.has(h.hypervisor_hostname)).map((h) => [h.hypervisor_hostname, h.id]));
    const blocks = await blockedIntervals(this.pool, { fromMs, toMs: fromMs + EXTENSION_HORIZON_MS, cleaningMs: this.settings.cleaningMs, hostIds: [...hostIdOf.values()], wholeHostOnly: true });
    return Math.min(
      Infinity,
      ...ends.map((e) => {
        const taken = blocks.filter((b) => b.host_id === hostIdOf.get(e.provider.name)).map((b) => Math.max(fromMs, b.start_ms - this.settings.cleaningMs));
        return Math.min(e.latestMs, ...taken);
      }),
    );
  }

  // ─── Inside a transaction ───────────────────────────────────────────────────────────────────

  /** `cut`: given, the reservation may cut preemptible leases when it does not fit otherwise (their ids go there). */
  private async bookPending(client: PoolClient, ctx: ReservationContext, request: SlotRequest, candidates: Candidate[], live: LiveSlots[], key: string, cut?: string[]): Promise<SlotPlacement[]> {
    await deleteReservationQuantityBookings(client, ctx.reservation.id);
    await deleteReservationHostBookings(client, ctx.reservation.id);
    const from = ctx.startMs - ctx.provisioningLeadMs;
    const calendar = await this.snapshot(client, candidates, from, ctx.endMs, ctx.reservation.id);
    const held = new Set(candidates.filter((c) => live.some((l) => l.providerUuid === c.provider.uuid)).map((c) => c.host.id));
    const placed = placeSlots(request, calendar, from, ctx.endMs, { held }) ?? (cut ? await this.placePreempting(client, ctx, request, candidates, cut) : undefined);
    if (!placed) throw await this.explainShortage(client, ctx, candidates, request);
    return this.insert(client, ctx, candidates, placed, request.slot, from, new Set(), key);
  }

  /**
   * A regular reservation that does not fit as the calendar stands (issue 43): placed as if
   * preemptible bookings were free (placePreempting's rules), and the preemptible leases it needs
   * cut to end a cleaning gap before its window (slots, shared host rows and whole hosts: one lease,
   * one end), each owed the news, in this transaction; their ids added to `cut`. Read afresh here
   * under the providers' locks, never from the first snapshot (a cut since is capacity, not a
   * refusal); the preemptible rows read stay locked.
   */
  private async placePreempting(client: PoolClient, ctx: ReservationContext, request: SlotRequest, candidates: Candidate[], cut: string[]): Promise<Map<string, number> | undefined> {
    const from = ctx.startMs - ctx.provisioningLeadMs;
    const cutAtMs = from - this.settings.cleaningMs;
    const regular = await this.snapshot(client, candidates, from, ctx.endMs, ctx.reservation.id, true);
    if (!placeSlots(request, regular, from, ctx.endMs)) return undefined;
    const hostOf = new Map(candidates.map((c) => [c.provider.uuid, c.host.id]));
    const slotRows = await preemptibleSlotsOnProviders(client, { providerUuids: [...hostOf.keys()], fromMs: from, toMs: ctx.endMs, cutAtMs, lock: true });
    const hostRows = await preemptibleBookingsOverlapping(client, { hostIds: candidates.map((c) => c.host.id), fromMs: from, toMs: ctx.endMs + this.settings.cleaningMs, cutAtMs, lock: true });
    const now = Date.now();
    const leases = new Map<string, PreemptibleSlotLease>();
    const leaseOf = (leaseId: string, startMs: number) => {
      let lease = leases.get(leaseId);
      if (!lease) leases.set(leaseId, (lease = { leaseId, started: startMs <= now, cuttable: true, slots: [], wholeHost: [] }));
      return lease;
    };
    // A lease never cuts itself: its own preemptible bookings (another reservation of it, booked earlier in this transaction) stay taken.
    for (const row of slotRows) {
      const lease = leaseOf(row.lease_id, row.lease_start_ms);
      lease.slots.push({ providerId: hostOf.get(row.provider_uuid)!, start: row.start_ms, end: row.end_ms, amounts: row.amounts });
      lease.cuttable &&= !row.drops_begun && row.lease_id !== ctx.leaseId;
    }
    // A whole host's preemptible row blocks slots wherever it overlaps the window (freeSlots asks no more).
    for (const row of hostRows.filter((r) => !r.shared)) {
      const lease = leaseOf(row.lease_id, row.start_ms);
      lease.wholeHost.push({ hostId: row.host_id, start: from, end: ctx.endMs });
      lease.cuttable &&= !row.drops_begun && row.lease_id !== ctx.leaseId;
    }
    const choice = placePreempting(request, regular, [...leases.values()], from, ctx.endMs);
    if (!choice) return undefined;
    for (const leaseId of choice.cut) await preemptLease(client, { leaseId, endMs: cutAtMs, neededFromMs: from, cleaningMs: this.settings.cleaningMs });
    cut.push(...choice.cut);
    return choice.placed;
  }

  /**
   * An active reservation: its slots stay on their hosts (less those it gives up, first where
   * `keepOn` says nothing runs), its end moves, new slots are booked from now.
   */
  private async rebookActive(
    client: PoolClient,
    ctx: ReservationContext,
    request: SlotRequest,
    candidates: Candidate[],
    live: LiveSlots[],
    key: string,
    now: number,
    keepOn: ReadonlyMap<string, number> = new Map(),
  ): Promise<SlotPlacement[]> {
    const hostOf = new Map(candidates.map((c) => [c.provider.uuid, c.host.id]));
    const current = new Map<string, number>();
    for (const l of live) {
      const hostId = hostOf.get(l.providerUuid);
      // A host that no longer matches (or left Placement): its slots cannot be kept.
      if (hostId !== undefined) current.set(hostId, l.slots);
    }
    const from = Math.max(now, ctx.startMs - ctx.provisioningLeadMs);
    if (ctx.endMs <= from) {
      // Ends now (`end_date: now`, already past when it gets here): nothing is booked anew, the slots end with the lease.
      await this.endBookingsAt(client, ctx.reservation.id, ctx.endMs);
      return this.placementsOf(live);
    }
    const fixed = giveUp(current, request.amount, keepOn);
    const calendar = await this.snapshot(client, candidates, from, ctx.endMs, ctx.reservation.id);
    const placed = placeSlots(request, calendar, from, ctx.endMs, { fixed });
    if (!placed) {
      const keptFit = placeSlots({ ...request, amount: [...fixed.values()].reduce((a, b) => a + b, 0) }, calendar, from, ctx.endMs, { fixed });
      if (!keptFit) {
        const latest = from + longestSlots({ ...request, amount: [...fixed.values()].reduce((a, b) => a + b, 0) }, calendar, from, SLOT_SEARCH_WORK_BUDGET);
        throw extensionRefused(ctx, NOT_ENOUGH, 'the hosts of its slots are booked by others after that', latest > from ? latest : undefined);
      }
      throw leaseConflict(`${NOT_ENOUGH} No room now for ${request.amount - [...fixed.values()].reduce((a, b) => a + b, 0)} more instance(s) of the size of reservation ${ctx.reservation.id} until ${when(ctx.endMs)}.`);
    }
    // The slots live now end now; the new placement is booked from now (the kept ones included).
    const keptHosts = new Set([...placed.keys()].filter((id) => current.has(id)));
    // Every host whose shared row is live and that the new placement leaves (a failed host's too: it is in no candidate).
    const dropped = (await liveSharedHosts(client, ctx.reservation.id, from)).filter((id) => !placed.has(id));
    await endReservationQuantityBookingsAt(client, ctx.reservation.id, from);
    if (dropped.length > 0) await endSharedHostRowsAt(client, ctx.reservation.id, dropped, from, this.settings.cleaningMs);
    await moveSharedHostRowsEnd(client, ctx.reservation.id, from, ctx.endMs, this.settings.cleaningMs);
    const stillShared = new Set(await liveSharedHosts(client, ctx.reservation.id, from));
    return this.insert(client, ctx, candidates, placed, request.slot, from, new Set([...keptHosts].filter((id) => stillShared.has(id))), key);
  }

  /** Books the placement from `from` to the lease's end: a row per slot, a shared host row per host not already booked. */
  private async insert(client: PoolClient, ctx: ReservationContext, candidates: Candidate[], placed: Map<string, number>, slot: Amounts, from: number, hostsBooked: Set<string>, key: string): Promise<SlotPlacement[]> {
    const byHost = new Map(candidates.map((c) => [c.host.id, c]));
    const preemptible = isPreemptibleReservation(ctx.reservation);
    const result: SlotPlacement[] = [];
    for (const [hostId, slots] of [...placed].sort(([a], [b]) => a.localeCompare(b, 'en', { numeric: true }))) {
      const { host, provider } = byHost.get(hostId)!;
      for (let i = 0; i < slots; i++) {
        await insertQuantityBooking(client, {
          providerUuid: provider.uuid,
          reservationId: ctx.reservation.id,
          leaseId: ctx.leaseId,
          projectId: ctx.projectId,
          subject: null,
          amounts: slot,
          startMs: Math.max(from, ctx.startMs),
          endMs: ctx.endMs,
          blocksFromMs: from,
          bookingKey: key,
          preemptible,
        });
      }
      if (!hostsBooked.has(hostId)) {
        await insertHostBooking(client, {
          hostId,
          reservationId: ctx.reservation.id,
          leaseId: ctx.leaseId,
          projectId: ctx.projectId,
          fromMs: Math.max(from, ctx.startMs),
          endMs: ctx.endMs,
          leadMs: Math.max(from, ctx.startMs) - from,
          cleaningMs: this.settings.cleaningMs,
          unbounded: false,
          bookingKey: key,
          shared: true,
          preemptible,
        });
      }
      result.push({ hostId, hypervisorHostname: host.hypervisor_hostname, computeHost: computeHostName(host), providerUuid: provider.uuid, slots });
    }
    return result;
  }

  /** Enrolled, reservable hosts with a compute provider in Placement, matching the reservation's properties and traits. */
  private async candidates(db: Pool | PoolClient, spec: SlotSpec): Promise<Candidate[]> {
    const hosts = (await listHosts(db, { reservableOnly: true })).filter((h) => h.released_at === null);
    const query = parsePropertyQuery(spec.resourceProperties);
    checkKeys(query, new Set(hosts.flatMap((h) => Object.keys(h.capabilities))), 'resource_properties', new Set(hosts.flatMap((h) => h.private_capabilities)));
    const providers = await usableProviders(db, COMPUTE_KIND, 'uuid');
    const byName = new Map(providers.map((p) => [p.name, p]));
    const candidates: Candidate[] = [];
    for (const host of hosts) {
      const provider = byName.get(host.hypervisor_hostname);
      const traitsFit = (spec.requiredTraits ?? []).every((t) => provider?.traits.includes(t)) && !(spec.forbiddenTraits ?? []).some((t) => provider?.traits.includes(t));
      if (provider && traitsFit && matchesQuery(query, host.capabilities)) candidates.push({ host, provider });
    }
    return candidates;
  }

  /**
   * The hosts' slot bookings (but `ownReservationId`'s) and whole-host blocks over [from, to) (to
   * null: from `from` on); `withoutPreemptible`: a regular admission's view, preemptible ones free (issue 43).
   */
  async snapshot(db: Pool | PoolClient, candidates: Candidate[], from: number, to: number | null, ownReservationId?: string, withoutPreemptible = false): Promise<SlotCalendar> {
    const hostOf = new Map(candidates.map((c) => [c.provider.uuid, c.host.id]));
    const slotRows = await bookingsOnProviders(db, [...hostOf.keys()], from, to ?? Infinity, withoutPreemptible);
    const blocked = await blockedIntervals(db, { fromMs: from, toMs: to, cleaningMs: this.settings.cleaningMs, hostIds: candidates.map((c) => c.host.id), wholeHostOnly: true, withoutPreemptible });
    return {
      hosts: candidates.map(slotHost),
      slots: slotRows.filter((r) => r.reservation_id !== ownReservationId).map((r) => ({ providerId: hostOf.get(r.provider_uuid)!, start: r.start_ms, end: r.end_ms, amounts: r.amounts })),
      wholeHost: blocked.map((b) => ({ hostId: b.host_id, start: b.start_ms, end: b.end_ms })),
      cleaningMs: this.settings.cleaningMs,
    };
  }

  private placementsOf(live: LiveSlots[]): SlotPlacement[] {
    return live.map((l) => ({ hostId: l.hostId, hypervisorHostname: l.name, computeHost: l.computeHost, providerUuid: l.providerUuid, slots: l.slots }));
  }

  /** 409 that says what is short, when the same request would fit, and how long from the asked start. */
  async explainShortage(client: Pool | PoolClient, ctx: ReservationContext, candidates: Candidate[], request: SlotRequest): Promise<Error> {
    const lead = ctx.provisioningLeadMs;
    const future = await this.snapshot(client, candidates, ctx.startMs - lead, null, ctx.reservation.id);
    const from = ctx.startMs - lead;
    const free = candidates.map((c) => freeSlots(slotHost(c), future, request.slot, from, ctx.endMs));
    const what = [
      `${NOT_ENOUGH} Not enough room for ${request.amount} instance(s) of ${describeSlot(request)}${request.affinity === false ? ' on different hosts' : request.affinity ? ' on one host' : ''} from ${when(ctx.startMs)} to ${when(ctx.endMs)}`,
      `free slots of that size: ${candidates.map((c, i) => `${c.host.hypervisor_hostname} ${free[i]}`).join(', ')}`,
    ];
    return shortage(ctx, what, slotFit(request, future, ctx.startMs, ctx.endMs - ctx.startMs, lead), 'it never fits');
  }
}

function slotHost(c: Candidate): SlotHost {
  return { id: c.host.id, capacity: c.provider.capacity };
}

/**
 * The same as slotFit, in two steps as the whole-resource search does (fitNearFirst): the
 * bookings of leases ending within the next weeks first (or by what `limits` need, if sooner),
 * and the rest (up to what they need) only when the answer lies further. In slot time a lease
 * [s, s + d) is the window [s − lead, s + d): it ends where the lease does; the search answers in
 * lease starts. No later windows (`laterWindows`): the slot search has no successive sweep.
 */
export function slotFitNearFirst(
  snapshot: (untilMs: number | null) => Promise<SlotCalendar>,
  request: SlotRequest,
  start: number,
  durationMs: number,
  leadMs: number,
  limits: FitLimits,
  nearUntil = start + Math.max(NEAR_SEARCH_MS, NEAR_SEARCH_DURATIONS * durationMs),
): Promise<FitSearch> {
  const align = (ms: number) => wholeMinuteUp(ms + leadMs) - leadMs;
  const inLeaseStarts = (ms: number | undefined) => (ms !== undefined ? ms + leadMs : undefined);
  const search: NearFirstSearch<SlotCalendar> = {
    workBudget: SLOT_SEARCH_WORK_BUDGET,
    successive: (calendar, from, bounds) => {
      const found = searchEarliestSlots(request, calendar, from - leadMs, durationMs + leadMs, { align, ...bounds });
      return {
        start: inLeaseStarts(found.earliest),
        cutShort: found.cutShort,
        tried: found.tried,
        lastTried: inLeaseStarts(found.lastTried),
        work: found.work,
        ...(found.beyondKnown ? { beyondKnown: { resumeAt: found.beyondKnown.resumeAt + leadMs } } : {}),
      };
    },
    longest: (calendar, until, upToMs) => {
      // Each step of longestSlots places every slot again: it stops once the lease fits as long as needed.
      const longest = longestSlots(request, calendar, start - leadMs, SLOT_SEARCH_WORK_BUDGET, until, upToMs + leadMs);
      return longest !== undefined ? Math.max(0, longest - leadMs) : undefined;
    },
  };
  return fitNearFirst(snapshot, search, start, durationMs, nearUntil, limits);
}

/** The bookings of a slot calendar that a read of [from, to) would have returned (whole-host blocks carry their cleaning gap). */
function narrowSlotCalendar(wider: SlotCalendar, from: number, to: number | null): SlotCalendar {
  const end = to ?? Infinity;
  return {
    ...wider,
    slots: wider.slots.filter((b) => b.end > from && b.start < end),
    wholeHost: wider.wholeHost.filter((b) => b.end > from && b.start < end + wider.cleaningMs),
  };
}

/** Where the slots fit for a lease from `start` for `durationMs`, made ready `leadMs` before (answers in lease starts). */
export function slotFit(request: SlotRequest, calendar: SlotCalendar, start: number, durationMs: number, leadMs: number): FitSearch {
  const from = start - leadMs;
  const align = (ms: number) => wholeMinuteUp(ms + leadMs) - leadMs;
  const search = searchEarliestSlots(request, calendar, from, durationMs + leadMs, { align, workBudget: SLOT_SEARCH_WORK_BUDGET });
  const longest = longestSlots(request, calendar, from, SLOT_SEARCH_WORK_BUDGET);
  return {
    earliest: search.earliest !== undefined ? search.earliest + leadMs : undefined,
    longestMs: Math.max(0, longest - leadMs),
    cutShort: search.cutShort,
    tried: search.tried,
    searchedUntil: search.lastTried !== undefined ? search.lastTried + leadMs : undefined,
  };
}

/**
 * The slots an active reservation keeps when its amount becomes `amount`: all of them when it
 * grows; when it shrinks, it gives up first slots where nothing runs (`inUse`: servers per host).
 */
export function giveUp(current: ReadonlyMap<string, number>, amount: number, inUse: ReadonlyMap<string, number>): Map<string, number> {
  const kept = new Map(current);
  let excess = [...current.values()].reduce((a, b) => a + b, 0) - amount;
  // Idle slots first, from the hosts with the most idle slots; then any (the plugin refuses a shrink below the servers running).
  const idle = (id: string) => (kept.get(id) ?? 0) - (inUse.get(id) ?? 0);
  while (excess > 0) {
    const hosts = [...kept.keys()].filter((id) => kept.get(id)! > 0);
    if (hosts.length === 0) break;
    const next = hosts.sort((a, b) => idle(b) - idle(a) || a.localeCompare(b, 'en', { numeric: true }))[0];
    kept.set(next, kept.get(next)! - 1);
    if (kept.get(next) === 0) kept.delete(next);
    excess--;
  }
  return kept;
}

function describeSlot(request: SlotRequest): string {
  return `${request.slot.VCPU} vCPU, ${request.slot.MEMORY_MB} MiB, ${request.slot.DISK_GB} GiB`;
}
