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
import { computeHostName, listHosts, type HostRecord } from '../../db/hosts';
import type { Pool } from '../../db/pool';
import {
  bookingsInLendings,
  bookingsOnProviders,
  borrowedSlotsOf,
  borrowedSlotsOfLendings,
  deleteReservationQuantityBookings,
  endReservationQuantityBookingsAt,
  insertQuantityBooking,
  lenderSlotRowsOf,
  liveSlots,
  lockProviders,
  moveLiveSlotsEnd,
  preemptibleSlotsOnProviders,
  slotBorrowersStillRunning,
  slotsBorrowedUntil,
  usableProviders,
  type CapacityProvider,
  type LiveSlots,
} from '../../db/quantity-allocations';
import {
  anyBorrowableSlotLending,
  borrowableSlotLendings,
  insertSlotLendings,
  lendingsOverAmounts,
  lockSlotLendings,
  lockSlotLendingsForReclaim,
  markSlotLendingsReturned,
  openSlotLendingsOf,
  reclaimSlotLending,
  slotLendingsOfRequest,
  slotsLentOverlapping,
  slotsLentUntilOfLease,
  type LentSlotsOnProvider,
  type SlotLending,
} from '../../db/quantity-lendings';
import { isCheckViolation, isDeadlockOrSerialization } from '../../db/pool';
import { inTransaction } from '../../db/transaction';
import { askedLeadMs, asReclaimedLendings, borrowedMsInside, chooseReclaimedSlots } from '../../domain/lending';
import { bookedFor, bookInTransaction, bookingKey, checkKeys, extensionRefused, fitNearFirst, movedBookingKey, NEAR_SEARCH_DURATIONS, NEAR_SEARCH_MS, releaseBooking, shortage, type NearFirstSearch } from '../shared/booking';
import { COMPUTE_KIND } from '../shared/compute-providers';
import { lendingsFree, preemptLease, reclaimLendings, settleLeaseCut } from '../shared/preemption';
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
  /** How long from a lender's end its borrowers get before its lent slots are needed (issue 43: warning plus the outbox's sweep); none: at once. */
  lenderEndNoticeMs?: number;
}

/** One provider's lending a reclaim takes back (issue 43): how many slots, when they are back, and the slot-ms borrowers booked in it. */
export interface ReclaimedSlots {
  lendingRowId: string;
  lendingId: string;
  providerUuid: string;
  slots: number;
  returnsAtMs: number;
  borrowedMs: number;
}

/** A lend request (issue 43): `count` slots of a started reservation over [fromMs, untilMs), optionally how many on which provider (the plugin's idle check). */
export interface SlotLendRequest {
  lendingId: string;
  reservationId: string;
  leaseId: string;
  projectId: string;
  count: number;
  fromMs: number;
  untilMs: number;
  perProvider?: ReadonlyMap<string, number>;
}

/** A preemptible ask's view of open lendings: one pseudo-host per lending (its amounts, its borrowers), and which real host each stands for. */
interface LentView {
  hosts: SlotHost[];
  slots: SlotCalendar['slots'];
  wholeHost: SlotCalendar['wholeHost'];
  lendings: Map<string, { lending: SlotLending; hostId: string }>;
}

/** Far enough before and after any booking to close a pseudo-host outside its lending. */
const FAR_MS = 8.64e15;

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
  /** A preemptible reservation may book inside open lendings (issue 43); false for an offer hold (a reclaim would have to cut a hold, which has no workflow to tell). */
  borrow?: boolean;
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
    // Booked anew by the workflow, or an active booking moved to end where the lease does: a cut of the old booking is moot
    // (the workflow drops its tell by the sequence) once the booking ends after it; one booked at the cut still owes it.
    const active = ctx.leaseStatus !== 'PENDING' && live.length > 0;
    if (options.settled) options.settled.preemptionSequence = await settleLeaseCut(client, ctx, [ctx.reservation.id], ctx.endMs);
    if (active) return this.rebookActive(client, ctx, request, candidates, live, key, now, options.keepOn);
    // A preemptible reservation never displaces anything (issue 43).
    const preemptible = isPreemptibleReservation(ctx.reservation);
    return this.bookPending(client, ctx, request, candidates, live, key, preemption.preempt && !preemptible ? (preemption.cut ?? []) : undefined, preemptible && preemption.borrow !== false);
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
        if (settled) settled.preemptionSequence = await settleLeaseCut(client, ctx, [ctx.reservation.id], ctx.endMs);
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
    // A lender (issue 43) takes its lent slots back first: its borrowers are cut to be out `lenderEndNoticeMs`
    // from now (owed the news: the outbox's sweep tells them), and its rows there end when they are out, not before.
    if (started) {
      await inTransaction(
        this.pool,
        async (client) => {
          const reclaimed = await this.reclaimIn(client, { reservationId, neededFromMs: nowMs + (this.settings.lenderEndNoticeMs ?? 0) }, []);
          await this.endBookingsAt(client, reservationId, nowMs);
          await markSlotLendingsReturned(client, reclaimed.map((r) => ({ id: r.lendingRowId, borrowedMs: r.borrowedMs })), nowMs);
        },
        { retryOn: isDeadlockOrSerialization },
      );
      return;
    }
    await releaseBooking(started, nowMs, {
      deleteAll: async () => {
        await deleteReservationQuantityBookings(this.pool, reservationId);
        await deleteReservationHostBookings(this.pool, reservationId);
      },
      endAt: (at) => this.endBookingsAt(this.pool, reservationId, at),
    });
  }

  /**
   * Lends `count` slots of a started regular reservation over [fromMs, untilMs) (issue 43), one
   * lending row per provider, under `lendingId`: where `perProvider` says (at most that many per
   * provider), else from the providers with the most slots not lent then. Idempotent by `lendingId`
   * (a retry answers the rows it made). 409 when fewer than `count` slots can be lent (details
   * `lendable`), or when `untilMs` is past the reservation's window.
   */
  async lend(request: SlotLendRequest): Promise<SlotLending[]> {
    return inTransaction(
      this.pool,
      async (client) => {
        // Providers, then the lender's rows, then lendings (a rebook's order): a rebook of the lender deciding on its lendings waits for this one.
        await lockProviders(
          client,
          (await liveSlots(client, request.reservationId, request.fromMs)).map((l) => l.providerUuid),
        );
        // Read under the lock: another try of the same request may have committed while this one waited (tries overlap); what it lent is the lend.
        const done = await slotLendingsOfRequest(client, request.lendingId);
        if (done.length > 0) return done;
        const rows = await lenderSlotRowsOf(client, request.reservationId, request.fromMs);
        const lent = await slotsLentOverlapping(client, request.reservationId, request.fromMs, request.untilMs);
        const lendable = rows
          .map((r) => ({ ...r, free: Math.min(r.held - (lent.get(r.providerUuid) ?? 0), request.perProvider ? (request.perProvider.get(r.providerUuid) ?? 0) : Infinity) }))
          .filter((r) => r.free > 0)
          .sort((a, b) => b.free - a.free || a.providerUuid.localeCompare(b.providerUuid));
        const total = lendable.reduce((n, r) => n + r.free, 0);
        if (total < request.count) {
          throw leaseConflict(`Only ${total} of the ${request.count} instance slots asked of reservation ${request.reservationId} can be lent now: the others run servers or are lent already.`, { lendable: total });
        }
        const providers: LentSlotsOnProvider[] = [];
        let left = request.count;
        for (const r of lendable) {
          if (left === 0) break;
          const slots = Math.min(left, r.free);
          providers.push({ allocationId: r.allocationId, providerUuid: r.providerUuid, during: r.during, slot: r.slot, slots });
          left -= slots;
        }
        try {
          return await insertSlotLendings(client, { ...request, providers });
        } catch (err) {
          if (!isCheckViolation(err)) throw err;
          throw leaseConflict(`Reservation ${request.reservationId} cannot lend slots until ${when(request.untilMs)}: its slots end sooner.`);
        }
      },
      { retryOn: isDeadlockOrSerialization },
    );
  }

  /**
   * Takes lent slots of a lender's reservation back (issue 43), in the caller's transaction (which
   * must retry deadlocks): lendings covering `count` slots (all when undefined; chooseReclaimedSlots
   * says which, whole lendings), needed from `neededFromMs`, as reclaimLendings does for hosts and
   * slots alike. Answers the lendings taken back.
   */
  async reclaimIn(client: PoolClient, request: { reservationId: string; count?: number; neededFromMs: number }, cut: string[]): Promise<ReclaimedSlots[]> {
    const lendings = await lockSlotLendingsForReclaim(client, request.reservationId);
    const taken = await reclaimLendings(
      client,
      { lendings, count: request.count, neededFromMs: request.neededFromMs, cleaningMs: this.settings.cleaningMs },
      { borrowersOf: (ids, lock) => borrowedSlotsOfLendings(client, ids, lock), reclaim: (id, returnsAtMs) => reclaimSlotLending(client, id, returnsAtMs) },
      (lent, borrowersOf) => chooseReclaimedSlots(lent.map((g) => ({ lendingRowId: g.id, slots: g.slots, borrowers: borrowersOf(g.id) })), request.count).map((g) => g.lendingRowId),
      cut,
    );
    return taken.map(({ lending, returnsAtMs, borrowedMs }) => ({ lendingRowId: lending.id, lendingId: lending.lending_id, providerUuid: lending.provider_uuid, slots: lending.slots, returnsAtMs, borrowedMs }));
  }

  /**
   * A reclaim of lent slots in its own transaction (see reclaimIn): the lendings taken, each when it
   * returns and whether anyone borrowed it; `cut` the borrower leases cut. Lending rows of
   * `lentRowIds` (those the lease records as lent) found reclaimed already are this same reclaim
   * retried after its commit: answered as they stand.
   */
  async reclaim(request: { reservationId: string; count?: number; neededFromMs: number; lentRowIds: string[] }): Promise<{ taken: Array<{ lendingRowId: string; returnsAtMs: number; borrowed: boolean }>; cut: string[] }> {
    const cut: string[] = [];
    const taken = await inTransaction(
      this.pool,
      async (client) => {
        cut.length = 0;
        const open = await lockSlotLendingsForReclaim(client, request.reservationId);
        const done = open.filter((g) => request.lentRowIds.includes(g.id) && g.reclaimed_ms !== null);
        if (done.length > 0) return (await asReclaimedSlots(client, done)).map(({ hostId, ...g }) => ({ lendingRowId: hostId, ...g }));
        return (await this.reclaimIn(client, request, cut)).map((g) => ({ lendingRowId: g.lendingRowId, returnsAtMs: g.returnsAtMs, borrowed: g.borrowedMs > 0 }));
      },
      { retryOn: isDeadlockOrSerialization },
    );
    return { taken, cut: [...cut] };
  }

  /** The reservation's lendings being reclaimed and not back yet, as a reclaim answers them (each row as a host: a reclaim whose answer was lost). */
  async reclaimingSlots(reservationId: string): Promise<Array<{ hostId: string; returnsAtMs: number; borrowed: boolean }>> {
    return asReclaimedSlots(this.pool, (await openSlotLendingsOf(this.pool, reservationId)).filter((g) => g.reclaimed_ms !== null));
  }

  /** Whether no borrower lease that began in these lendings of the reservation is still to end. */
  async lentSlotsFree(reservationId: string, lendingRowIds: string[]): Promise<boolean> {
    return lendingsFree((await openSlotLendingsOf(this.pool, reservationId)).filter((g) => lendingRowIds.includes(g.id)), (ids) => slotBorrowersStillRunning(this.pool, ids));
  }

  /** The reservation's open lendings (lent, or reclaimed and not back yet): the slots its inventory lacks meanwhile. */
  openLendings(reservationId: string): Promise<SlotLending[]> {
    return openSlotLendingsOf(this.pool, reservationId);
  }

  /** These lendings' slots are back with the reservation: returned, with the slot-ms borrowed inside each (accounting). */
  async returnLent(reservationId: string, lendingRowIds: string[], nowMs = Date.now()): Promise<void> {
    await inTransaction(
      this.pool,
      async (client) => {
        const open = (await lockSlotLendingsForReclaim(client, reservationId)).filter((g) => lendingRowIds.includes(g.id));
        const inside = await borrowedSlotsOfLendings(client, open.map((g) => g.id), false);
        await markSlotLendingsReturned(client, open.map((g) => ({ id: g.id, borrowedMs: borrowedMsInside(g, inside) })), nowMs);
      },
      { retryOn: isDeadlockOrSerialization },
    );
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
  async search(reservations: Array<{ reservation: Reservation; spec: SlotSpec }>, start: number, durationMs: number, provisioningLeadMs: number, limits: FitLimits = {}): Promise<FitSearch> {
    let result: FitSearch = { earliest: start, longestMs: Infinity, cutShort: false, tried: 0 };
    for (const { reservation, spec } of reservations) {
      const candidates = await this.candidates(this.pool, spec);
      const request: SlotRequest = { slot: spec.slot, amount: spec.amount, affinity: spec.affinity };
      // Only a preemptible ask where something is lent sees lendings (and bypasses the shared reads below).
      const preemptible = isPreemptibleReservation(reservation);
      // As admission books it: a preemptible ask's lead from now at the earliest (it may book inside a lending that began a moment ago).
      const leadMs = askedLeadMs(preemptible, provisioningLeadMs, start, Date.now());
      const borrows = preemptible && (await anyBorrowableSlotLending(this.pool, candidates.map((c) => c.provider.uuid), start - leadMs));
      // A regular ask counts preemptible slots as free where the booking that follows may cut them (issue 43), as the host calendar's search does.
      const preemptibleFree = !preemptible && limits.mayPreempt === true;
      const read = async (until: number | null) => {
        const calendar = await this.snapshot(this.pool, candidates, start - leadMs, until, reservation.id, preemptibleFree);
        return borrows ? withLent(calendar, await this.lentView(this.pool, candidates, start - leadMs, until, reservation.id, false)) : calendar;
      };
      // A preemptible ask's pseudo-hosts end at their lendings' ends: never narrowed from a wider read.
      const reads = borrows ? undefined : limits.reads;
      // Within one request (offers), a read of a wider window answers for this one (SearchReads).
      const snapshot = !reads
        ? read
        : (until: number | null) => reads.read(`slots:${reservation.id}:${preemptibleFree ? 'cutting' : 'as-booked'}:${candidates.map((c) => c.provider.uuid).join(',')}`, start - leadMs, until, () => read(until), (wider) => narrowSlotCalendar(wider, start - leadMs, until));
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
   * cleaning time; a borrower's (issue 43) no later than its lendings end. Undefined when the lease holds no slots.
   */
  async latestEnd(leaseId: string): Promise<number | undefined> {
    const ends = await new QuantityCalendar(this.pool).latestEndsByProvider(leaseId, COMPUTE_KIND);
    if (!ends) return undefined;
    const fromMs = ends[0].fromMs;
    const names = new Set(ends.map((e) => e.provider.name));
    const hostIdOf = new Map((await listHosts(this.pool)).filter((h) => names.has(h.hypervisor_hostname)).map((h) => [h.hypervisor_hostname, h.id]));
    const blocks = await blockedIntervals(this.pool, { fromMs, toMs: fromMs + EXTENSION_HORIZON_MS, cleaningMs: this.settings.cleaningMs, hostIds: [...hostIdOf.values()], wholeHostOnly: true });
    // A borrower's slots (issue 43) move no further than the soonest of its lendings (moveBorrower's bound).
    return Math.min(
      await slotsBorrowedUntil(this.pool, leaseId),
      ...ends.map((e) => {
        const taken = blocks.filter((b) => b.host_id === hostIdOf.get(e.provider.name)).map((b) => Math.max(fromMs, b.start_ms - this.settings.cleaningMs));
        return Math.min(e.latestMs, ...taken);
      }),
    );
  }

  // ─── Inside a transaction ───────────────────────────────────────────────────────────────────

  /** `cut`: given, the reservation may cut preemptible leases when it does not fit otherwise (their ids go there). */
  private async bookPending(client: PoolClient, ctx: ReservationContext, request: SlotRequest, candidates: Candidate[], live: LiveSlots[], key: string, cut?: string[], borrow = false): Promise<SlotPlacement[]> {
    await deleteReservationQuantityBookings(client, ctx.reservation.id);
    await deleteReservationHostBookings(client, ctx.reservation.id);
    // An ask that may borrow (issue 43) blocks from now at the earliest, as the search found it: a lending's pseudo-host is closed before the lending began.
    const from = ctx.startMs - askedLeadMs(borrow, ctx.provisioningLeadMs, ctx.startMs, Date.now());
    const calendar = await this.snapshot(client, candidates, from, ctx.endMs, ctx.reservation.id);
    const held = new Set(candidates.filter((c) => live.some((l) => l.providerUuid === c.provider.uuid)).map((c) => c.host.id));
    // Free capacity first, as for hosts; a preemptible ask (issue 43) that does not fit there may use lent slots too: each open lending a host of its own (its amounts, its borrowers), locked until this transaction ends.
    let placed = placeSlots(request, calendar, from, ctx.endMs, { held });
    const lent = !placed && borrow ? await this.lentView(client, candidates, from, ctx.endMs, ctx.reservation.id, true) : undefined;
    if (lent && lent.hosts.length > 0) placed = placeSlots(request, onePerRealHost(request, withLent(calendar, lent), lent, from, ctx.endMs), from, ctx.endMs, { held });
    placed ??= cut ? await this.placePreempting(client, ctx, request, candidates, cut) : undefined;
    if (!placed) throw await this.explainShortage(client, ctx, candidates, request, cut !== undefined);
    const booked = await this.insert(client, ctx, candidates, placed, request.slot, from, new Set(), key, lent?.lendings);
    // The backstop of the lendings' sums (no constraint can hold them): never more borrowed at once than lent.
    const over = await lendingsOverAmounts(client, [...placed.keys()].filter((id) => lent?.lendings.has(id)).map((id) => lent!.lendings.get(id)!.lending.id));
    if (over.length > 0) throw leaseConflict(`${NOT_ENOUGH} The lent slots asked are borrowed by others meanwhile; try again.`);
    return booked;
  }

  /**
   * Open lendings on the candidates' providers over [from, to) as pseudo-hosts (issue 43): each
   * its lending's amounts as capacity, its borrowers' slots (but `ownReservationId`'s) as bookings,
   * and closed outside its `during`, so that a slot placed there lies inside the lending.
   */
  private async lentView(db: Pool | PoolClient, candidates: Candidate[], from: number, to: number | null, ownReservationId: string | undefined, lock: boolean): Promise<LentView> {
    const hostOf = new Map(candidates.map((c) => [c.provider.uuid, c.host.id]));
    const lendings = await borrowableSlotLendings(db, { providerUuids: [...hostOf.keys()], fromMs: from, toMs: to ?? Infinity, lock });
    const view: LentView = { hosts: [], slots: [], wholeHost: [], lendings: new Map() };
    if (lendings.length === 0) return view;
    const idOf = (lendingRowId: string) => `lent:${lendingRowId}`;
    for (const lending of lendings) {
      const id = idOf(lending.id);
      view.lendings.set(id, { lending, hostId: hostOf.get(lending.provider_uuid)! });
      view.hosts.push({ id, capacity: lending.amounts });
      // freeSlots refuses a window [a, b) when a block starts before b + cleaning: the one after the lending starts a cleaning gap past its end.
      view.wholeHost.push({ hostId: id, start: -FAR_MS, end: lending.start_ms }, { hostId: id, start: lending.end_ms + this.settings.cleaningMs, end: FAR_MS });
    }
    const rows = await bookingsInLendings(
      db,
      lendings.map((g) => g.id),
      ownReservationId,
    );
    for (const r of rows) view.slots.push({ providerId: idOf(r.lending_row_id), start: r.start_ms, end: r.end_ms, amounts: r.amounts });
    return view;
  }

  /**
   * A regular reservation that does not fit as the calendar stands (issue 43): placed as if
   * preemptible bookings were free (placePreempting's rules), and the preemptible leases it needs
   * cut to end a cleaning gap before its window (slots, shared host rows and whole hosts: one lease,
   * one end), each owed the news, in this transaction; their ids added to `cut`. Read afresh here
   * under the providers' locks, never from the first snapshot (a cut since is capacity, not a
   * refusal); the preemptible rows read stay locked. Unlike the host calendar's choice, the regular
   * calendar is read once, before the locked reads, and never again: no later read can disagree
   * with it. A booking committed after it (slots cannot be: the providers are locked; a whole host
   * can) is unseen, and collides with this one's shared host row at insert (the transaction runs
   * again on what committed), never a refusal.
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
    // A lender (issue 43) is never moved below what it lends: reclaim first.
    const lending = (await slotsLentUntilOfLease(client, ctx.leaseId)).find((r) => r.reservation_id === ctx.reservation.id);
    if (lending && lending.lent_until_ms > ctx.endMs) {
      throw leaseConflict(`Reservation ${ctx.reservation.id} lends instance slots until ${when(lending.lent_until_ms)}: reclaim them first.`, { lent_until: when(lending.lent_until_ms) });
    }
    // Its rows move in place while it lends or borrows (the amounts stay): they must already be of the slot asked.
    if (lending && !live.every((l) => sameSlot(l.slot, request.slot))) {
      throw leaseConflict(`Reservation ${ctx.reservation.id} lends instance slots until ${when(lending.lent_until_ms)}: reclaim them before changing the size of its slots.`, { lent_until: when(lending.lent_until_ms) });
    }
    const borrowed = await borrowedSlotsOf(client, ctx.reservation.id, from);
    if (borrowed) return this.moveBorrower(client, ctx, request, live, candidates, borrowed, key, from);
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
    if (lending) {
      // Its lendings name its rows: they move in place (the window cascades), and only while it keeps the same slots.
      const same = placed.size === current.size && [...placed].every(([id, n]) => current.get(id) === n);
      if (!same) throw leaseConflict(`Reservation ${ctx.reservation.id} lends instance slots until ${when(lending.lent_until_ms)}: reclaim them before changing its slots.`, { lent_until: when(lending.lent_until_ms) });
      await moveLiveSlotsEnd(client, ctx.reservation.id, from, ctx.endMs, key).catch(lentMeanwhile(ctx));
      await moveSharedHostRowsEnd(client, ctx.reservation.id, from, ctx.endMs, this.settings.cleaningMs);
      return this.placementsOf(await liveSlots(client, ctx.reservation.id, from));
    }
    // The slots live now end now; the new placement is booked from now (the kept ones included).
    const keptHosts = new Set([...placed.keys()].filter((id) => current.has(id)));
    // Every host whose shared row is live and that the new placement leaves (a failed host's too: it is in no candidate).
    const dropped = (await liveSharedHosts(client, ctx.reservation.id, from)).filter((id) => !placed.has(id));
    await endReservationQuantityBookingsAt(client, ctx.reservation.id, from).catch(lentMeanwhile(ctx));
    if (dropped.length > 0) await endSharedHostRowsAt(client, ctx.reservation.id, dropped, from, this.settings.cleaningMs);
    await moveSharedHostRowsEnd(client, ctx.reservation.id, from, ctx.endMs, this.settings.cleaningMs);
    const stillShared = new Set(await liveSharedHosts(client, ctx.reservation.id, from));
    return this.insert(client, ctx, candidates, placed, request.slot, from, new Set([...keptHosts].filter((id) => stillShared.has(id))), key);
  }

  /**
   * A borrower's move (issue 43): its slots stay in their lendings, moved in place; never past the
   * soonest lending's end (an extension refused with that latest end), a lease with free slots
   * besides never extended, the count never changed, and the lendings' sums checked again under their locks.
   */
  private async moveBorrower(
    client: PoolClient,
    ctx: ReservationContext,
    request: SlotRequest,
    live: LiveSlots[],
    candidates: Candidate[],
    borrowed: { lendingRowIds: string[]; untilMs: number; endMs: number; alsoFree: boolean },
    key: string,
    from: number,
  ): Promise<SlotPlacement[]> {
    // Under the lendings' locks, read again: a reclaim that committed meanwhile has shortened them.
    await lockSlotLendings(client, borrowed.lendingRowIds);
    borrowed = (await borrowedSlotsOf(client, ctx.reservation.id, from)) ?? borrowed;
    if (ctx.endMs > borrowed.untilMs) throw extensionRefused(ctx, NOT_ENOUGH, `its slots are lent to it until ${when(borrowed.untilMs)}`, Math.max(borrowed.endMs, borrowed.untilMs));
    if (borrowed.alsoFree && ctx.endMs > borrowed.endMs) throw extensionRefused(ctx, NOT_ENOUGH, 'part of its slots are lent to it', borrowed.endMs);
    if (request.amount !== live.reduce((n, l) => n + l.slots, 0)) throw leaseConflict(`${NOT_ENOUGH} Reservation ${ctx.reservation.id} runs on lent instance slots: it cannot change how many it holds.`);
    // Its rows stay where they are, amounts and all: they must still be what the reservation asks.
    const matching = new Set(candidates.map((c) => c.provider.uuid));
    const kept =
      live.every((l) => sameSlot(l.slot, request.slot) && matching.has(l.providerUuid)) && (request.affinity !== false || live.every((l) => l.slots === 1)) && (request.affinity !== true || live.length === 1);
    if (!kept) throw leaseConflict(`Reservation ${ctx.reservation.id} runs on lent instance slots: it cannot change the size of its slots, its resource_properties or its affinity.`);
    if (ctx.endMs <= from) await this.endBookingsAt(client, ctx.reservation.id, ctx.endMs);
    else {
      await moveLiveSlotsEnd(client, ctx.reservation.id, from, ctx.endMs, key).catch((err: unknown) => {
        // The CHECK holding a borrower inside its lending is the backstop: a 409, never a 500.
        throw isCheckViolation(err) ? extensionRefused(ctx, NOT_ENOUGH, `its slots are lent to it until ${when(borrowed.untilMs)}`, borrowed.endMs) : err;
      });
      await moveSharedHostRowsEnd(client, ctx.reservation.id, from, ctx.endMs, this.settings.cleaningMs);
    }
    if ((await lendingsOverAmounts(client, borrowed.lendingRowIds)).length > 0) throw extensionRefused(ctx, NOT_ENOUGH, 'the slots lent to it are borrowed by others after that', borrowed.endMs);
    return this.placementsOf(live);
  }

  /** Books the placement from `from` to the lease's end: a row per slot, a shared host row per host not already booked. */
  private async insert(
    client: PoolClient,
    ctx: ReservationContext,
    candidates: Candidate[],
    placed: Map<string, number>,
    slot: Amounts,
    from: number,
    hostsBooked: Set<string>,
    key: string,
    lent: LentView['lendings'] = new Map(),
  ): Promise<SlotPlacement[]> {
    const byHost = new Map(candidates.map((c) => [c.host.id, c]));
    const preemptible = isPreemptibleReservation(ctx.reservation);
    const result: SlotPlacement[] = [];
    // Per real host: its slots in free capacity and in each lending placed on it (issue 43).
    const perHost = new Map<string, Array<{ slots: number; lending?: SlotLending }>>();
    for (const [placedOn, slots] of placed) {
      const inLending = lent.get(placedOn);
      const hostId = inLending?.hostId ?? placedOn;
      perHost.set(hostId, [...(perHost.get(hostId) ?? []), { slots, ...(inLending ? { lending: inLending.lending } : {}) }]);
    }
    for (const [hostId, parts] of [...perHost].sort(([a], [b]) => a.localeCompare(b, 'en', { numeric: true }))) {
      const { host, provider } = byHost.get(hostId)!;
      const slots = parts.reduce((n, p) => n + p.slots, 0);
      for (const part of parts) for (let i = 0; i < part.slots; i++) {
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
          ...(part.lending ? { lentBy: { id: part.lending.id, during: part.lending.during } } : {}),
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

  /**
   * 409 that says what is short, when the same request would fit, and how long from the asked start;
   * `preemptibleFree`: counting preemptible slots as free, where this booking could cut them (issue 43).
   */
  async explainShortage(client: Pool | PoolClient, ctx: ReservationContext, candidates: Candidate[], request: SlotRequest, preemptibleFree = false): Promise<Error> {
    const lead = ctx.provisioningLeadMs;
    const future = await this.snapshot(client, candidates, ctx.startMs - lead, null, ctx.reservation.id, preemptibleFree);
    const from = ctx.startMs - lead;
    const free = candidates.map((c) => freeSlots(slotHost(c), future, request.slot, from, ctx.endMs));
    const what = [
      `${NOT_ENOUGH} Not enough room for ${request.amount} instance(s) of ${describeSlot(request)}${request.affinity === false ? ' on different hosts' : request.affinity ? ' on one host' : ''} from ${when(ctx.startMs)} to ${when(ctx.endMs)}`,
      `free slots of that size: ${candidates.map((c, i) => `${c.host.hypervisor_hostname} ${free[i]}`).join(', ')}`,
    ];
    return shortage(ctx, what, slotFit(request, future, ctx.startMs, ctx.endMs - ctx.startMs, lead), 'it never fits');
  }
}

/** Whether two slots are of one size (every resource class the same amount). */
function sameSlot(a: Amounts, b: Amounts): boolean {
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  return [...keys].every((k) => (a[k] ?? 0) === (b[k] ?? 0));
}

/**
 * A lender's rows that could not move (23514: the CHECK holding its lendings inside them) were lent
 * by a lend that committed meanwhile (issue 43): a 409 asking to try again, never a 500.
 */
function lentMeanwhile(ctx: ReservationContext): (err: unknown) => never {
  return (err) => {
    if (!isCheckViolation(err)) throw err;
    throw leaseConflict(`Reservation ${ctx.reservation.id} lent instance slots meanwhile: reclaim them first, or try again.`);
  };
}

/** A calendar with the lent view's pseudo-hosts beside the real ones (a preemptible ask's, issue 43). */
function withLent(calendar: SlotCalendar, lent: LentView): SlotCalendar {
  return { ...calendar, hosts: [...calendar.hosts, ...lent.hosts], slots: [...calendar.slots, ...lent.slots], wholeHost: [...calendar.wholeHost, ...lent.wholeHost] };
}

/**
 * A real host and its lendings' pseudo-hosts are one machine: for "each on a different host"
 * (affinity false), only one of them per real host is offered, the first with a free slot over
 * [from, to) (the real host, then its lendings); any other request sees them all.
 */
function onePerRealHost(request: SlotRequest, calendar: SlotCalendar, lent: LentView, from: number, to: number): SlotCalendar {
  if (request.affinity !== false) return calendar;
  const realOf = (id: string) => lent.lendings.get(id)?.hostId ?? id;
  const served = new Set<string>();
  const offered = new Set<string>();
  for (const host of calendar.hosts) {
    if (served.has(realOf(host.id)) || freeSlots(host, calendar, request.slot, from, to) === 0) continue;
    served.add(realOf(host.id));
    offered.add(host.id);
  }
  return { ...calendar, hosts: calendar.hosts.filter((h) => offered.has(h.id)) };
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

/** Lendings being reclaimed as a reclaim answers them: each row (standing for its host), its return, and whether anyone borrowed in it. */
async function asReclaimedSlots(db: Pool | PoolClient, lendings: SlotLending[]): Promise<Array<{ hostId: string; returnsAtMs: number; borrowed: boolean }>> {
  return asReclaimedLendings(lendings, await borrowedSlotsOfLendings(db, lendings.map((g) => g.id), false), (g) => g.id);
}
