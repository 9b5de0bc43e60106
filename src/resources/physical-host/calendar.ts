/**
 * The host calendar in PostgreSQL. Booking runs in one transaction, idempotent per lease: it books
 * every `physical:host` reservation of the lease together (a matching, so that reservations that
 * compete for the same hosts all get their minimum when that is possible at all). The exclusion
 * constraint `host_allocations_no_double_booking` is the last word: if a concurrent transaction
 * took a chosen host first, this one retries with a fresh choice. The SQL is the store's
 * (src/db/host-allocations.ts); what it shares with the floating IP calendar is in
 * ../shared/whole-resource-calendar.ts, and with every calendar in ../shared/booking.ts.
 */
import type { ApplicationFailure } from '@temporalio/common';
import type { PoolClient } from 'pg';
import { isLeaseConflict, leaseConflict, invalidLease, type Reservation } from '../../domain/lease';
import { assignHosts, awakeFirst, freeHosts, preferenceOrder, type Blocked, type CalendarSnapshot, type HostRequest } from '../../domain/host-calendar';
import { matchesQuery, parsePropertyQuery } from '../../domain/property-query';
import { sameTypeReservations, type FitLimits, type FitSearch, type ReclaimedHosts, type ReservationContext } from '../../domain/resource-plugin';
import { sleepingHostIds } from '../../db/host-power';
import { maintenanceBlocks } from '../../db/maintenance';
import {
  blockedIntervals, borrowedUntil, borrowersOfLendings, borrowersStillRunning, lenderRowsOf, deleteHostBookingOfReservation, endLenderBookingsAt, hostBookings, hostsOfReservation, insertHostBooking, lentUntilOfLease,
  nextBookingsOfOthers, preemptibleBookingsOverlapping, unusableHostsOf,
} from '../../db/host-allocations';
import { insertLendings, lendingsCovering, lendingsOfRequest, lockLendingsForReclaim, markReturned, openLendingsOf, reclaimLending, type HostLending } from '../../db/host-lendings';
import { failedReservableHosts, hypervisorProperties, inventoryVersion, listHosts, HYPERVISOR_FIELDS, type HostRecord } from '../../db/hosts';
import { isCheckViolation, isDeadlockOrSerialization, isExclusionViolation } from '../../db/pool';
import type { Pool } from '../../db/pool';
import type { WholeResourceBookingRow } from '../../db/range-bookings';
import { inTransaction, runTransactionAgain } from '../../db/transaction';
import { formatMessageDate as when } from '../../domain/dates';
import { askedLeadMs, asReclaimedLendings, borrowedMsInside, chooseReclaimedHosts } from '../../domain/lending';
import { bookInTransaction, bookingKey, checkKeys, extensionRefused, SEARCH_WORK_BUDGET } from '../shared/booking';
import { lendingsFree, preemptLease, reclaimLendings, settleLeaseCut } from '../shared/preemption';
import { alreadyBooked, NEVER_FITS, WholeResourceCalendar, type BlockedInterval, type NewWholeResourceBooking } from '../shared/whole-resource-calendar';
import { endPolicyOf, isPreemptible, type EndPolicy, type PhysicalHostParams } from './params';

/** A host reservation, its parameters as the API's schema produced them. */
type HostReservation = Reservation<PhysicalHostParams>;

export const PHYSICAL_HOST = 'physical:host';

/** A host reservation's property queries (JSON text), as in its parameters. */
export interface HostQuery {
  hypervisor_properties?: string;
  resource_properties?: string;
}

export interface BookedHost {
  id: string;
  hypervisor_hostname: string;
}

export interface CalendarSettings {
  cleaningMs: number;
  randomChoice: boolean;
  /** For availability queries: the lead time new leases get (a booking's own comes with its lease). */
  provisioningLeadMs?: number;
  /** What `on_end: default` means: a `release` booking blocks its hosts for good. */
  onEndDefault?: EndPolicy;
  /**
   * A lender's end (issue 43): how long after it its borrowers must be out (they are cut a cleaning
   * gap before): the preemption warning and the outbox's sweep, that tells them. 0 when unset.
   */
  lenderEndNoticeMs?: number;
}

/** A lent host a reclaim takes back: its lending (row and request ids), and when the host returns (its borrowers' blocked ranges end). */
export interface ReclaimedHost {
  lendingRowId: string;
  lendingId: string;
  hostId: string;
  returnsAtMs: number;
  /** Host-ms the borrowers' windows hold inside the lending (accounting, once returned). */
  borrowedMs: number;
}

export { SEARCH_WORK_BUDGET };

/** Pairs of property queries whose matching hosts are kept per list of hosts. */
const MATCHES_KEPT = 64;

function shuffle(ids: string[]): string[] {
  const copy = [...ids];
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [copy[i], copy[j]] = [copy[j], copy[i]];
  }
  return copy;
}


export class HostCalendar extends WholeResourceCalendar<HostRecord, BookedHost[], []> {
  protected readonly notEnough = 'Not enough hosts available.';
  protected readonly noun = 'host';
  protected readonly nouns = 'hosts';
  protected readonly neverFits = 'it never fits: not enough hosts match';
  /** Reservable hosts as of an inventory version (migration 007), for the read-only queries. */
  private hostsSeen?: { version: string; hosts: Promise<HostRecord[]> };
  /**
   * Per list of hosts (the kept list above, or a transaction's own), the hosts matching each pair
   * of property queries: an offer request searches the same queries up to 20 times, and matching
   * 1 000 hosts each time cost more than the searches' own work (bench:offers).
   */
  private readonly matchesSeen = new WeakMap<HostRecord[], Map<string, Set<string>>>();

  constructor(
    pool: Pool,
    private readonly settings: CalendarSettings,
  ) {
    super(pool, hostBookings, settings.cleaningMs);
  }

  /** The reservable hosts, read again only when the inventory changed. Booking reads them afresh in its transaction. */
  private async reservableHosts(): Promise<HostRecord[]> {
    const version = (await inventoryVersion(this.pool)) ?? 'none';
    if (this.hostsSeen?.version !== version) {
      const hosts = listHosts(this.pool, { reservableOnly: true });
      this.hostsSeen = { version, hosts };
      hosts.catch(() => (this.hostsSeen = undefined)); // a failed read is not kept
    }
    return this.hostsSeen.hosts;
  }

  /**
   * Books the lease's host reservations for [ctx.startMs, ctx.endMs); returns this reservation's hosts.
   * `settled` (the workflow's booking): booked anew, the lease's owed cut is dropped and its sequence set there.
   */
  async book(ctx: ReservationContext<PhysicalHostParams>, settled?: { preemptionSequence?: number }): Promise<BookedHost[]> {
    // A concurrent booking that took a chosen host first: choose again, seeing the winner's booking.
    return bookInTransaction(this.pool, (client) => this.bookIn(client, ctx, { settled }), { retryExclusion: true });
  }

  /**
   * The hosts a lease of these reservations over [start, end) would book now, per reservation id,
   * chosen as admission chooses them without random choice (an admin's view of an offer); nothing
   * is booked. Undefined when they do not fit.
   */
  async wouldBook(reservations: Array<Reservation<PhysicalHostParams>>, start: number, end: number, leadMs: number): Promise<Map<string, HostRecord[]> | undefined> {
    const { resources, requests } = await this.searchRequests(reservations);
    // As admission: a preemptible lease may borrow lent hosts (issue 43), its lead from now at the earliest...
    const lentAsFree = this.lentAsFree(reservations);
    leadMs = askedLeadMs(lentAsFree, leadMs, start, Date.now());
    const calendar = await this.snapshot(this.pool, resources, start, end, leadMs, false, undefined, false, lentAsFree);
    // ...free hosts first; a regular lease that does not fit in them takes preemptible ones.
    const assignment =
      assignHosts(requests, freeHosts(calendar, start, end), preferenceOrder(calendar, Date.now())) ??
      (this.preemptibleAsFree(reservations) ? (await this.preemptingChoice(this.pool, { startMs: start, endMs: end, leadMs, lock: false }, resources, requests))?.assignment : undefined);
    if (!assignment) return undefined;
    const byId = new Map(resources.map((h) => [h.id, h]));
    return new Map([...assignment].map(([reservationId, ids]) => [reservationId, ids.map((id) => byId.get(id)!)]));
  }

  /**
   * The same inside the caller's transaction (the API's admission, an offer hold): a lost race
   * surfaces as the exclusion violation, and the caller runs its whole transaction again.
   * `preempt`: a regular lease that does not fit in free hosts may cut preemptible leases (issue
   * 43); only a caller whose policy check and record commit in this same transaction may ask it,
   * so that a refusal or a rollback undoes the cut with everything else. `cut` gets the ids of the
   * leases cut (for the caller to tell once it committed).
   */
  bookWithin(client: PoolClient, ctx: ReservationContext<PhysicalHostParams>, options: { preempt: boolean; cut?: string[]; borrow?: boolean }): Promise<BookedHost[]> {
    return this.bookIn(client, ctx, options);
  }

  /** Per host of the reservation, when another lease's booking of it next begins (its lead time included). */
  async nextBookings(reservationId: string): Promise<Map<string, number>> {
    const rows = await nextBookingsOfOthers(this.pool, reservationId);
    return new Map(rows.map((r) => [r.host_id, r.next_ms]));
  }

  /**
   * Frees the reservation's booking (by its id or its context): all of it if it never started, the
   * rest of the window if it ends early. A lender (issue 43) takes its lent hosts back first: its
   * borrowers are cut to be out `lenderEndNoticeMs` from now (owed the news: the outbox's sweep tells
   * them), and its rows of those hosts end when they are out, not before; its lendings are returned.
   */
  override async release(reservation: string | ReservationContext<PhysicalHostParams>, started: boolean, nowMs = Date.now()): Promise<void> {
    const reservationId = typeof reservation === 'string' ? reservation : reservation.reservation.id;
    // Never begun, never lent: deleting its rows deletes nothing lent (a lending's delete would free its borrowers anyway).
    if (!started) return super.release(reservationId, started, nowMs);
    await inTransaction(
      this.pool,
      async (client) => {
        const reclaimed = await this.reclaimIn(client, { reservationId, neededFromMs: nowMs + (this.settings.lenderEndNoticeMs ?? 0) }, []);
        await endLenderBookingsAt(client, reservationId, nowMs, this.cleaningMs);
        await markReturned(client, reclaimed.map((host) => ({ id: host.lendingRowId, borrowedMs: host.borrowedMs })), nowMs);
      },
      { retryOn: isDeadlockOrSerialization },
    );
  }

  /**
   * Takes lent hosts of a lender's reservation back (issue 43), in the caller's transaction (which
   * must retry deadlocks): `count` of them (all when undefined; chooseReclaimedHosts says which),
   * needed from `neededFromMs`, as reclaimLendings does for hosts and slots alike. Answers the hosts
   * taken back; none when nothing (more) is lent.
   */
  async reclaimIn(client: PoolClient, request: { reservationId: string; count?: number; neededFromMs: number }, cut: string[]): Promise<ReclaimedHost[]> {
    const lendings = await lockLendingsForReclaim(client, request.reservationId);
    const taken = await reclaimLendings(
      client,
      { lendings, count: request.count, neededFromMs: request.neededFromMs, cleaningMs: this.cleaningMs },
      { borrowersOf: (ids, lock) => borrowersOfLendings(client, ids, lock), reclaim: (id, returnsAtMs) => reclaimLending(client, id, returnsAtMs) },
      (lent, borrowersOf) => chooseReclaimedHosts(lent.map((g) => ({ lendingRowId: g.id, hostId: g.host_id, borrowers: borrowersOf(g.id) })), request.count).map((h) => h.lendingRowId),
      cut,
    );
    return taken.map(({ lending, returnsAtMs, borrowedMs }) => ({ lendingRowId: lending.id, lendingId: lending.lending_id, hostId: lending.host_id, returnsAtMs, borrowedMs }));
  }

  /**
   * Lends these hosts of an active reservation over [fromMs, untilMs) (issue 43), in one transaction
   * holding the lease's bookings locked (no move of its window meanwhile); idempotent by `lendingId`.
   * A lending the lender's window no longer holds, or one over a lending of the same host, is a 409.
   */
  async lend(lending: { lendingId: string; reservationId: string; leaseId: string; projectId: string; hostIds: string[]; fromMs: number; untilMs: number }): Promise<HostLending[]> {
    try {
      return await inTransaction(
        this.pool,
        async (client) => {
          await hostBookings.lockLease(client, lending.leaseId);
          // Another try of the same lend request committed first (tries may overlap): what it lent is the lend, not more.
          const earlier = await lendingsOfRequest(client, lending.lendingId);
          if (earlier.length > 0) return earlier;
          return insertLendings(client, { ...lending, hosts: await lenderRowsOf(client, lending.reservationId, lending.hostIds) });
        },
        { retryOn: isDeadlockOrSerialization },
      );
    } catch (err) {
      if (!isCheckViolation(err) && !isExclusionViolation(err)) throw err;
      throw leaseConflict(`Reservation ${lending.reservationId} cannot lend its hosts until ${when(lending.untilMs)}: its booking changed meanwhile (or they are lent already); try again.`);
    }
  }

  /**
   * A lender's reclaim (issue 43): reclaimIn in a transaction of its own, answering each host taken,
   * when it returns and whether anyone borrowed it, and the borrower leases cut (to tell once committed).
   * Hosts of `lentHostIds` found reclaimed already are this same reclaim retried after its commit: answered as they stand.
   */
  async reclaim(request: { reservationId: string; count?: number; neededFromMs: number; lentHostIds: string[] }): Promise<{ hosts: ReclaimedHosts['hosts']; cut: string[] }> {
    const cut: string[] = [];
    const hosts = await inTransaction(
      this.pool,
      async (client) => {
        cut.length = 0;
        const open = await lockLendingsForReclaim(client, request.reservationId);
        const done = open.filter((g) => request.lentHostIds.includes(g.host_id) && g.reclaimed_ms !== null);
        if (done.length > 0) return asReclaimed(client, done);
        return (await this.reclaimIn(client, request, cut)).map((h) => ({ hostId: h.hostId, returnsAtMs: h.returnsAtMs, borrowed: h.borrowedMs > 0 }));
      },
      { retryOn: isDeadlockOrSerialization },
    );
    return { hosts, cut: [...cut] };
  }

  /** The reservation's lent hosts being reclaimed and not back yet, as a reclaim answers them (a reclaim whose answer was lost). */
  async reclaimingHosts(reservationId: string): Promise<ReclaimedHosts['hosts']> {
    return asReclaimed(this.pool, (await openLendingsOf(this.pool, reservationId)).filter((g) => g.reclaimed_ms !== null));
  }

  /** Whether no borrower lease that began on these lent hosts of the reservation is still to end. */
  async lentHostsFree(reservationId: string, hostIds: string[]): Promise<boolean> {
    return lendingsFree((await openLendingsOf(this.pool, reservationId)).filter((g) => hostIds.includes(g.host_id)), (ids) => borrowersStillRunning(this.pool, ids));
  }

  /** These lent hosts are back with the reservation: their open lendings returned, with the host-ms borrowed inside each (accounting). */
  async returnLent(reservationId: string, hostIds: string[], nowMs = Date.now()): Promise<void> {
    await inTransaction(
      this.pool,
      async (client) => {
        const open = (await lockLendingsForReclaim(client, reservationId)).filter((g) => hostIds.includes(g.host_id));
        const inside = await borrowersOfLendings(client, open.map((g) => g.id), false);
        await markReturned(client, open.map((g) => ({ id: g.id, borrowedMs: borrowedMsInside(g, inside) })), nowMs);
      },
      { retryOn: isDeadlockOrSerialization },
    );
  }

  /** The latest end the lease's bookings can move to (see the base); a borrower's (issue 43) is held inside its lendings too. */
  override async latestEnd(leaseId: string): Promise<number | undefined> {
    const latest = await super.latestEnd(leaseId);
    return latest === undefined ? undefined : Math.min(latest, (await borrowedUntil(this.pool, leaseId)) - this.cleaningMs);
  }

  /**
   * An active lease's end moves (see the base), except (issue 43) a lender's below what it lends (a
   * 409: reclaim first), and a borrower's past its lending (an extension refused with the latest
   * end the lending allows). The database's CHECKs are the backstop: a 409 too, never a 500.
   */
  protected override async moveEndOrRefuse(client: PoolClient, ctx: ReservationContext<PhysicalHostParams>, existing: WholeResourceBookingRow[]): Promise<void> {
    const lending = (await lentUntilOfLease(client, ctx.leaseId)).find((row) => row.lent_until_ms > ctx.endMs);
    if (lending) throw leaseConflict(`Reservation ${lending.reservation_id} lends hosts until ${when(lending.lent_until_ms)}: reclaim them first.`, { lent_until: when(lending.lent_until_ms) });
    const borrowed = await borrowedUntil(client, ctx.leaseId);
    if (ctx.endMs + this.cleaningMs > borrowed) throw extensionRefused(ctx, this.notEnough, `its hosts are lent to it until ${when(borrowed)}`, borrowed - this.cleaningMs);
    try {
      await super.moveEndOrRefuse(client, ctx, existing);
    } catch (err) {
      if (!isCheckViolation(err)) throw err;
      throw leaseConflict(`Cannot move the end of lease ${ctx.leaseName} to ${when(ctx.endMs)}: a lending of its hosts changed meanwhile; try again.`);
    }
  }

  /**
   * After hosts failed (or, for a pending lease, were taken out of admission or given a maintenance
   * window): a pending lease's host bookings are made again on hosts it can count on (the good
   * hosts it held first in line), in one transaction, or left as they were when they do not fit
   * (`alternative` then says where the same lease would fit); an active reservation gets
   * replacements for its failed hosts from now to its end, as far as free hosts allow. Answers the
   * reservation's hosts now, and those of them it still cannot count on.
   * Nothing changes when it holds no failed host, so a retry is harmless.
   */
  async heal(ctx: ReservationContext<PhysicalHostParams>): Promise<{ hosts: BookedHost[]; stillFailed: BookedHost[]; alternative?: Record<string, unknown> }> {
    return bookInTransaction(
      this.pool,
      async (client) => {
        const existing = await hostBookings.lockLease(client, ctx.leaseId);
        const failed = await unusableHostsOf(client, { leaseId: ctx.leaseId });
        const holdsFailed = existing.some((row) => row.reservation_id === ctx.reservation.id && failed.has(row.resource_id));
        let alternative: Record<string, unknown> | undefined;
        if (holdsFailed && ctx.leaseStatus === 'PENDING') {
          await client.query('SAVEPOINT heal');
          try {
            await this.bookIn(client, ctx, { rebook: true });
          } catch (err) {
            if (!isLeaseConflict(err)) throw err;
            await client.query('ROLLBACK TO SAVEPOINT heal'); // no room elsewhere: keep the booking, degraded
            const details: unknown = (err as ApplicationFailure).details?.[0];
            alternative = { message: (err as Error).message, ...(details && typeof details === 'object' ? details : {}) };
          }
        } else if (holdsFailed) {
          await this.replaceFailed(client, ctx, existing, failed);
        }
        const hosts = await hostsOfReservation(client, ctx.reservation.id);
        return { hosts, stillFailed: hosts.filter((h) => failed.has(h.id)), ...(alternative ? { alternative } : {}) };
      },
      { retryExclusion: true },
    );
  }

  /** An active reservation's failed hosts, each swapped for a free matching host from now to the end (as many as there are). */
  private async replaceFailed(client: PoolClient, ctx: ReservationContext<PhysicalHostParams>, existing: WholeResourceBookingRow[], failed: Set<string>): Promise<void> {
    const lost = existing.filter((row) => row.reservation_id === ctx.reservation.id && failed.has(row.resource_id));
    const from = Math.max(Date.now(), ctx.startMs);
    if (from >= ctx.endMs) return;
    const hosts = await listHosts(client, { reservableOnly: true });
    const request = this.request(ctx.reservation, hosts);
    const replacements = (await this.assignFree(client, ctx, hosts, [{ ...request, min: 0, max: lost.length }], from, existing))?.get(ctx.reservation.id) ?? [];
    if (replacements.length === 0) return;
    const key = existing[0].booking_key;
    for (const row of lost.slice(0, replacements.length)) await deleteHostBookingOfReservation(client, ctx.reservation.id, row.resource_id);
    await this.insert(client, ctx, new Map([[ctx.reservation.id, replacements]]), from, key, 0);
  }

  /** `preempt`: see bookWithin; every other booking (the workflow's, updates, heals, holds) sees preemptible bookings as taken. */
  private async bookIn(
    client: PoolClient,
    ctx: ReservationContext<PhysicalHostParams>,
    { rebook = false, preempt = false, cut = [] as string[], settled = undefined as { preemptionSequence?: number } | undefined, borrow = true } = {},
  ): Promise<BookedHost[]> {
    const reservations = sameTypeReservations(ctx);
    const existing = await hostBookings.lockLease(client, ctx.leaseId);

    // Already booked for exactly this request (a sibling's call booked us, or a retry): nothing to do.
    const key = hostBookingKey(ctx, reservations);
    if (!rebook && alreadyBooked(existing, key)) {
      return existing.filter((row) => row.reservation_id === ctx.reservation.id).map((row) => ({ id: row.resource_id, hypervisor_hostname: row.name }));
    }

    if (ctx.leaseStatus !== 'PENDING' && existing.length > 0) {
      await this.moveEndOrRefuse(client, ctx, existing);
      await this.growActive(client, ctx, reservations, existing, key);
      await hostBookings.setLeaseKey(client, ctx.leaseId, key);
      // Its bookings now end where the lease does (a cut host still taken would have refused the move):
      // an earlier cut is moot, for the meter as for the workflow.
      if (settled) settled.preemptionSequence = await settleLeaseCut(client, ctx, reservations.map((r) => r.id), ctx.endMs);
      return hostsOfReservation(client, ctx.reservation.id);
    }

    await hostBookings.deleteLease(client, ctx.leaseId);
    // Booked anew in this transaction: a cut of the old bookings is moot (the workflow drops its tell by the sequence)
    // once the new booking ends after it; one booked at the cut (an update's second try) still owes it.
    if (settled) settled.preemptionSequence = await settleLeaseCut(client, ctx, reservations.map((r) => r.id), ctx.endMs);
    const hosts = await listHosts(client, { reservableOnly: true });
    // A `release` reservation keeps its hosts for good: only hosts with nothing booked later will do.
    const releasing = reservations.filter((r) => this.endPolicy(r) === 'release');
    const bookedLater = releasing.length
      ? new Set((await this.snapshot(client, hosts, ctx.startMs, null, ctx.provisioningLeadMs)).blocked.filter((b) => b.end > ctx.startMs).map((b) => b.hostId))
      : new Set<string>();
    if (releasing.some((r) => isPreemptible(r.params))) throw invalidLease('a preemptible reservation cannot keep its hosts for good: its on_end (the deployment\'s default here) is "release"');
    await this.refuseMoreThanEnrolled(client, reservations, hosts);
    const requests = reservations.map((r) => this.request(r, hosts, releasing.includes(r) ? bookedLater : undefined));
    // Awake hosts first (issue 48): a sleeping host only when the awake ones do not do; the power planner then wakes it.
    const preferred = async (calendar: CalendarSnapshot) => awakeFirst(preferenceOrder(calendar, Date.now(), this.settings.randomChoice ? shuffle : undefined), await sleepingHostIds(client));
    const lentAsFree = borrow && this.lentAsFree(reservations);
    const asked = { ...ctx, provisioningLeadMs: askedLeadMs(lentAsFree, ctx.provisioningLeadMs, ctx.startMs, Date.now()) };
    const assignment = await this.bookAnew(client, asked, hosts, requests, key, existing, {
      preferred,
      neverFits: releasing.length > 0 ? 'it never fits: on_end "release" needs hosts with nothing booked after its start' : undefined,
      // A preemptible lease may book inside lendings (issue 43), but not for an offer hold (`borrow: false`).
      lentAsFree,
      // A regular lease that does not fit in free hosts takes preemptible ones (issue 43) when its caller allows; a preemptible lease never does.
      ...(preempt && this.preemptibleAsFree(reservations) ? { otherwise: () => this.bookPreempting(client, ctx, hosts, requests, key, preferred, cut), preemptibleFree: true } : {}),
    });
    const byId = new Map(hosts.map((h) => [h.id, h]));
    return (assignment.get(ctx.reservation.id) ?? []).map((id) => ({ id, hypervisor_hostname: byId.get(id)!.hypervisor_hostname }));
  }

  /**
   * A regular lease that does not fit in free hosts (issue 43): preemptible bookings count as free,
   * free hosts still first, then hosts whose preemptible lease has not begun (nobody to evict), those
   * it runs on last; each reservation then gets its min only (it preempts no more than it needs).
   * Every preemptible lease on a host taken (whole host, or instance slots on it) is cut to end, all of it (one lease, one end), a cleaning
   * gap before the lease's block begins, and its workflow is owed the news (lease_preemptions), in
   * this transaction (their ids added to `cut`). Undefined, nothing changed: it does not fit even so.
   */
  private async bookPreempting(client: PoolClient, ctx: ReservationContext<PhysicalHostParams>, hosts: HostRecord[], requests: HostRequest[], key: string, order: (calendar: CalendarSnapshot) => Promise<string[]> | string[], cut: string[]): Promise<Map<string, string[]> | undefined> {
    const choice = await this.preemptingChoice(client, { startMs: ctx.startMs, endMs: ctx.endMs, leadMs: ctx.provisioningLeadMs, lock: true, leaseId: ctx.leaseId }, hosts, requests, order);
    if (!choice) return undefined;
    for (const leaseId of choice.preemptedLeases) await preemptLease(client, { leaseId, endMs: choice.cutAtMs, neededFromMs: choice.neededFromMs, cleaningMs: this.cleaningMs });
    cut.push(...choice.preemptedLeases);
    await this.insert(client, ctx, choice.assignment, ctx.startMs, key, ctx.provisioningLeadMs);
    return choice.assignment;
  }

  /**
   * The hosts a regular lease over the window would take when it does not fit in free hosts
   * (bookPreempting's choice), the preemptible leases it would cut, and where; nothing is written.
   * `lock` (a transaction about to cut): the preemptible rows read stay locked until it ends.
   * `order`: the preference among hosts free of every booking, given the calendar.
   *
   * Everything is read afresh here, never taken from the caller's first snapshot: each statement
   * sees what concurrent admissions committed before it, and a preemptible booking cut or freed
   * since that snapshot must count as free, not as a refusal. Regular bookings first (none go away
   * under us that matter: a refusal they justify holds), then the preemptible rows on hosts they
   * leave free, locked, then the whole calendar: a booking committed after its statement collides
   * with ours at insert, and the caller's transaction runs again (bookInTransaction).
   */
  private async preemptingChoice(
    db: Pool | PoolClient,
    window: { startMs: number; endMs: number; leadMs: number; lock: boolean; leaseId?: string },
    hosts: HostRecord[],
    requests: HostRequest[],
    order: (calendar: CalendarSnapshot) => Promise<string[]> | string[] = (calendar) => preferenceOrder(calendar, Date.now()),
  ): Promise<{ assignment: Map<string, string[]>; preemptedLeases: string[]; cutAtMs: number; neededFromMs: number } | undefined> {
    const { startMs, endMs, leadMs } = window;
    const neededFromMs = startMs - leadMs;
    const cutAtMs = neededFromMs - this.cleaningMs;
    const minimums = requests.map((r) => ({ ...r, max: r.min }));
    const open = await this.snapshot(db, hosts, startMs, endMs, leadMs, false, undefined, true);
    const freeOfRegular = freeHosts(open, startMs, endMs);
    // Not even with every preemptible booking free (the usual refusal): one read.
    if (!assignHosts(minimums, freeOfRegular, [...freeOfRegular])) return undefined;
    const candidates = [...freeOfRegular];
    const preempting = await preemptibleBookingsOverlapping(db, { hostIds: candidates, fromMs: neededFromMs, toMs: endMs + this.cleaningMs, cutAtMs, lock: window.lock });
    const calendar = await this.snapshot(db, hosts, startMs, endMs, leadMs);
    const free = freeHosts(calendar, startMs, endMs);
    // What blocked the first snapshot was cut or freed meanwhile: booked as if nothing were preemptible.
    const plain = assignHosts(requests, free, await order(calendar));
    if (plain) return { assignment: plain, preemptedLeases: [], cutAtMs, neededFromMs };
    // Taken by cutting: a host blocked only by a preemptible row locked above. One a regular booking
    // committed on between the reads stays taken (choosing it would fail the insert and run the transaction again).
    const lockedOn = new Set(preempting.map((row) => row.host_id));
    const held = candidates.filter((id) => !free.has(id) && lockedOn.has(id));
    const preempted = preempting.filter((row) => held.includes(row.host_id));
    // A lease that would lose a booking it already runs on keeps it: its servers must stay where its end cleans them.
    // A lease never cuts itself (a preemptible reservation of it booked earlier in this transaction).
    const kept = new Set(preempted.filter((row) => row.drops_begun || row.lease_id === window.leaseId).map((row) => row.host_id));
    const usable = new Set([...free, ...held.filter((id) => !kept.has(id))]);
    const now = Date.now();
    const running = new Set(preempted.filter((row) => row.start_ms <= now).map((row) => row.host_id));
    const byId = (a: string, b: string) => Number(a) - Number(b);
    const takeable = held.filter((id) => usable.has(id));
    const preference = [...preferenceOrder(calendar, now).filter((id) => free.has(id)), ...takeable.filter((id) => !running.has(id)).sort(byId), ...takeable.filter((id) => running.has(id)).sort(byId)];
    const assignment = assignHosts(minimums, usable, preference);
    if (!assignment) {
      // A booking committed between the reads on a host free of regular bookings at the first (no row of it
      // locked: a regular one, or a preemptible one this could have cut) is no reason to refuse: when the
      // lease would fit with those hosts, a booking runs again on what committed (a search answers no).
      const unsettled = candidates.filter((id) => !free.has(id) && !lockedOn.has(id));
      if (window.lock && unsettled.length > 0 && assignHosts(minimums, new Set([...usable, ...unsettled]), [...preference, ...unsettled])) await runTransactionAgain(db as PoolClient); // locking reads run in the booking's transaction
      return undefined;
    }
    const taken = new Set([...assignment.values()].flat());
    const preemptedLeases = [...new Set(preempted.filter((row) => taken.has(row.host_id)).map((row) => row.lease_id))].sort();
    return { assignment, preemptedLeases, cutAtMs, neededFromMs };
  }

  /** The reservable hosts that a reservation with these queries could book (a bad query: the reservation's 400). */
  async matchingHosts(params: HostQuery): Promise<HostRecord[]> {
    const hosts = await this.reservableHosts();
    const request = this.request({ id: 'query', params: { min: 1, max: 1, hypervisor_properties: params.hypervisor_properties ?? '', resource_properties: params.resource_properties ?? '' } }, hosts);
    return hosts.filter((h) => request.matches(h.id));
  }

  /**
   * Per matching host, the intervals within [from, to) where a lease could sit: after a booking's
   * cleaning gap, and ending early enough to leave the gap before the next booking.
   */
  async freeIntervals(from: number, to: number, params: HostQuery) {
    const matching = await this.matchingHosts(params);
    const calendar = await this.snapshot(this.pool, matching, from - this.settings.cleaningMs, to, this.settings.provisioningLeadMs ?? 0, true);
    const blockedByHost = new Map<string, Blocked[]>();
    for (const b of calendar.blocked) {
      const own = blockedByHost.get(b.hostId);
      if (own) own.push(b);
      else blockedByHost.set(b.hostId, [b]);
    }
    return matching.map((host) => {
      const blocked = (blockedByHost.get(host.id) ?? []).sort((a, b) => a.start - b.start);
      const free: Array<{ start: number; end: number }> = [];
      let cursor = from;
      for (const b of blocked) {
        const end = Math.min(to, b.start - calendar.cleaningMs);
        if (end > cursor) free.push({ start: cursor, end });
        cursor = Math.max(cursor, b.end);
      }
      if (to > cursor) free.push({ start: cursor, end: to });
      return { host, free };
    });
  }

  /**
   * Where a lease of these reservations could go: the earliest fit from `start` (on a whole minute,
   * within the search budget: `cutShort` when it gave up, having looked until `searchedUntil`), and
   * the longest from `start`.
   */
  override search(reservations: HostReservation[], start: number, durationMs: number, leadMs = this.settings.provisioningLeadMs ?? 0, limits?: FitLimits): Promise<FitSearch> {
    return super.search(reservations, start, durationMs, leadMs, limits);
  }

  protected async searchRequests(reservations: HostReservation[]): Promise<{ resources: HostRecord[]; requests: HostRequest[] }> {
    const hosts = await this.reservableHosts();
    const hostReservations = reservations.filter((r) => r.resource_type === PHYSICAL_HOST);
    await this.refuseMoreThanEnrolled(this.pool, hostReservations, hosts);
    return { resources: hosts, requests: hostReservations.map((r) => this.request(r, hosts)) };
  }

  /**
   * An active lease whose reservations ask for more hosts gets them from now to its end, if free;
   * it never loses hosts it holds (a lower max than it holds is refused).
   */
  private async growActive(client: PoolClient, ctx: ReservationContext<PhysicalHostParams>, reservations: HostReservation[], existing: WholeResourceBookingRow[], key: string): Promise<void> {
    const hosts = await listHosts(client, { reservableOnly: true });
    const from = Math.max(Date.now(), ctx.startMs);
    const wants: HostRequest[] = [];
    for (const reservation of reservations) {
      const request = this.request(reservation, hosts);
      const count = existing.filter((row) => row.reservation_id === reservation.id).length;
      if (request.max < count) {
        throw invalidLease(`reservation ${reservation.id} holds ${count} host(s) while the lease is active: max cannot go below ${count}`);
      }
      if (request.max > count) wants.push({ ...request, min: Math.max(0, request.min - count), max: request.max - count });
    }
    if (wants.length === 0 || from >= ctx.endMs) return;
    const extra = await this.assignFree(client, ctx, hosts, wants, from, existing);
    if (!extra) throw leaseConflict(`Not enough hosts available. Not enough free hosts to grow lease ${ctx.leaseName} now: ${wants.map((w) => `${w.min} more for reservation ${w.reservationId}`).join(', ')}`);
    await this.insert(client, ctx, extra, from, key, 0);
  }

  /**
   * Refuses, before any search (and before matching every host against every reservation), a
   * reservation asking for more hosts than are enrolled: it can never fit.
   */
  private async refuseMoreThanEnrolled(db: PoolClient | Pool, reservations: HostReservation[], hosts: HostRecord[]): Promise<void> {
    const tooMany = reservations.find((r) => r.params.min > hosts.length);
    if (!tooMany) return;
    const request = this.request(tooMany, hosts);
    const matching = hosts.filter((h) => request.matches(h.id)).length;
    const failed = await failedReservableHosts(db);
    if (failed.length > 0 && request.min <= hosts.length + failed.length) {
      // Failed hosts may come back: not "never", but not now either (no earliest start can be promised).
      throw leaseConflict(
        `Not enough hosts available. Reservation ${tooMany.id} needs at least ${request.min} host(s); ${hosts.length} reservable host(s) are up (${matching} match its properties) and ${failed.length} failed (${failed.join(', ')}): it may fit once they are back.`,
        // The refusal's `reason` (offers, src/api/offers.ts): not capacity as such, hosts that failed.
        { ...NEVER_FITS, reason: 'failed_hosts' },
      );
    }
    throw leaseConflict(
      `Not enough hosts available. It never fits: reservation ${tooMany.id} needs at least ${request.min} host(s) (${matching} match its properties); only ${hosts.length} reservable host(s) are enrolled.`,
      NEVER_FITS,
    );
  }

  protected override preemptible(ctx: ReservationContext<PhysicalHostParams>): ReadonlySet<string> {
    return new Set(sameTypeReservations(ctx).filter((r) => isPreemptible(r.params)).map((r) => r.id));
  }

  /** A lease with no preemptible host reservation is regular: preemptible bookings are free to it. */
  protected override preemptibleAsFree(reservations: HostReservation[]): boolean {
    return !reservations.some((r) => r.resource_type === PHYSICAL_HOST && isPreemptible(r.params));
  }

  /** A preemptible ask may book inside lendings (issue 43); a regular one sees the lender's booking. */
  protected override lentAsFree(reservations: HostReservation[]): boolean {
    return !this.preemptibleAsFree(reservations);
  }

  protected override unbounded(ctx: ReservationContext<PhysicalHostParams>): ReadonlySet<string> {
    return new Set(sameTypeReservations(ctx).filter((r) => this.endPolicy(r) === 'release').map((r) => r.id));
  }

  /**
   * A refusal that maintenance is why says so (`reason: maintenance`): the lease would fit over the
   * asked window without the hosts' maintenance windows. A host under maintenance while other
   * bookings leave too few hosts anyway is a shortage of capacity.
   */
  protected override async shortageReason(db: Pool | PoolClient, ctx: ReservationContext, hosts: HostRecord[], requests: HostRequest[]): Promise<'maintenance' | undefined> {
    const window = { fromMs: ctx.startMs - ctx.provisioningLeadMs, toMs: ctx.endMs, cleaningMs: this.cleaningMs, hostIds: hosts.map((h) => h.id) };
    if ((await maintenanceBlocks(db, window)).length === 0) return undefined;
    const bookings = await blockedIntervals(db, { ...window, withMaintenance: false });
    const calendar = this.shiftedByLead(window.hostIds, bookings.map((r) => ({ resourceId: r.host_id, start_ms: r.start_ms, end_ms: r.end_ms })), ctx.provisioningLeadMs);
    return assignHosts(requests, freeHosts(calendar, ctx.startMs, ctx.endMs), window.hostIds) ? 'maintenance' : undefined;
  }

  protected async blocked(db: Pool | PoolClient, window: { fromMs: number; toMs: number | null; ids: string[]; onlyTheseIds: boolean; mergeGapsBelowMs?: number; withoutPreemptible?: boolean; lentAsFree?: boolean }): Promise<BlockedInterval[]> {
    const rows = await blockedIntervals(db, {
      fromMs: window.fromMs,
      toMs: window.toMs,
      cleaningMs: this.cleaningMs,
      hostIds: window.onlyTheseIds ? window.ids : undefined,
      mergeGapsBelowMs: window.mergeGapsBelowMs,
      withoutPreemptible: window.withoutPreemptible,
      lentAsFree: window.lentAsFree,
    });
    return rows.map((r) => ({ resourceId: r.host_id, start_ms: r.start_ms, end_ms: r.end_ms }));
  }

  /**
   * A preemptible booking whose blocked range an open lending holds whole borrows it (issue 43): a
   * snapshot lets one onto a lent host only there. The lending stays locked (FOR SHARE) until the
   * transaction ends: a reclaim shortening it meanwhile waits, then sees this borrower; one that
   * committed first leaves nothing covering, and the lender's row refuses the booking (23P01: retried).
   */
  protected async insertOne(client: PoolClient, booking: NewWholeResourceBooking): Promise<void> {
    const [lending] = booking.preemptible && !booking.unbounded ? await lendingsCovering(client, [booking.resourceId], booking.fromMs - booking.leadMs, booking.endMs + this.cleaningMs) : [];
    await insertHostBooking(client, { ...booking, hostId: booking.resourceId, cleaningMs: this.cleaningMs, ...(lending ? { lentBy: { id: lending.id, during: lending.during } } : {}) });
  }

  protected compareIds(a: string, b: string): number {
    return Number(a) - Number(b);
  }

  protected describeShort(request: HostRequest, hosts: HostRecord[], free: Set<string>): string {
    const matching = hosts.filter((h) => request.matches(h.id));
    return `at least ${request.min} host(s) matching reservation ${request.reservationId} (${matching.length} match, ${matching.filter((h) => free.has(h.id)).length} free)`;
  }

  private endPolicy(reservation: HostReservation): EndPolicy {
    return endPolicyOf(reservation.params, this.settings.onEndDefault);
  }

  /** A reservation's host request; `excluded` hosts cannot serve it. */
  private request(reservation: Pick<HostReservation, 'id'> & { params: Pick<PhysicalHostParams, 'min' | 'max' | 'hypervisor_properties' | 'resource_properties'> }, hosts: HostRecord[], excluded?: Set<string>): HostRequest {
    const params = reservation.params;
    const queries = JSON.stringify([params.hypervisor_properties, params.resource_properties]);
    let matching = excluded ? undefined : this.matchesSeen.get(hosts)?.get(queries);
    if (!matching) {
      const hypervisorQuery = parsePropertyQuery(params.hypervisor_properties);
      const resourceQuery = parsePropertyQuery(params.resource_properties);
      checkKeys(hypervisorQuery, new Set(HYPERVISOR_FIELDS), 'hypervisor_properties');
      checkKeys(resourceQuery, new Set(hosts.flatMap((h) => Object.keys(h.capabilities))), 'resource_properties', new Set(hosts.flatMap((h) => h.private_capabilities)));
      matching = new Set(
        hosts
          .filter((h) => !excluded?.has(h.id) && matchesQuery(hypervisorQuery, hypervisorProperties(h)) && matchesQuery(resourceQuery, h.capabilities))
          .map((h) => h.id),
      );
      if (!excluded) this.rememberMatches(hosts, queries, matching);
    }
    const found = matching;
    return { reservationId: reservation.id, min: params.min, max: params.max, matches: (id) => found.has(id) };
  }

  /** Keeps which hosts of a list match a pair of queries (a bounded number of pairs per list). */
  private rememberMatches(hosts: HostRecord[], queries: string, matching: Set<string>): void {
    let seen = this.matchesSeen.get(hosts);
    if (!seen) this.matchesSeen.set(hosts, (seen = new Map<string, Set<string>>()));
    if (seen.size >= MATCHES_KEPT) seen.delete(seen.keys().next().value!);
    seen.set(queries, matching);
  }

}

/** Reclaimed lendings as a reclaim answers them: each host, its return, and whether a borrower is inside. */
async function asReclaimed(db: Pool | PoolClient, lendings: HostLending[]): Promise<ReclaimedHosts['hosts']> {
  return asReclaimedLendings(lendings, await borrowersOfLendings(db, lendings.map((g) => g.id), false), (g) => g.host_id);
}

/** Identifies one booking request of a lease: its window and its host reservations' parameters. */
export function hostBookingKey(ctx: Pick<ReservationContext, 'startMs' | 'endMs'>, reservations: ReadonlyArray<Pick<Reservation<unknown>, 'id' | 'params'>>): string {
  return bookingKey(reservations.map((r) => [r.id, r.params]), [ctx.startMs, ctx.endMs]);
}
