/**
 * What the host calendar and the floating IP calendar share: both book whole resources (a host, an
 * address), matching a lease's reservations together (src/domain/host-calendar.ts) so that those
 * competing for the same resources all get theirs when that is possible at all, in a table of
 * whole-resource rows whose statements are shared too (src/db/range-bookings.ts). Each calendar
 * keeps what differs: its resources and requests, its order of preference, how an active lease
 * changes, and its words.
 */
import { askedLeadMs } from '../../domain/lending';
import type { PoolClient } from 'pg';
import type { Calendar } from '../../domain/calendar';
import { formatMessageDate as when } from '../../domain/dates';
import type { Reservation } from '../../domain/lease';
import { assignHosts, freeHosts, preferenceOrder, type CalendarSnapshot, type HostRequest } from '../../domain/host-calendar';
import { sameTypeReservations, type FitLimits, type FitSearch, type ReservationContext } from '../../domain/resource-plugin';
import type { Pool } from '../../db/pool';
import type { NewRangeBooking, WholeResourceBookingRow, WholeResourceBookings } from '../../db/range-bookings';
import { extensionRefused, NEAR_SEARCH_DURATIONS, NEAR_SEARCH_MS, releaseBooking, shortage, wholeResourceFit, wholeResourceFitNearFirst } from './booking';

/** A resource's blocked interval [start_ms, end_ms), as its store reads it. */
export interface BlockedInterval {
  resourceId: string;
  start_ms: number;
  end_ms: number;
}

/** A new booking of one resource from `fromMs` to `endMs`, blocking from `leadMs` before (for good: `unbounded`). */
export interface NewWholeResourceBooking extends NewRangeBooking {
  resourceId: string;
  unbounded: boolean;
  /** A regular lease's admission may cut it short (issue 43). */
  preemptible?: boolean;
}

/** The calendar interface's types for a calendar of whole resources. */
export interface WholeResourceTypes<Resource, Booked, BookArgs extends unknown[]> {
  db: Pool | PoolClient;
  resource: Resource;
  bookArgs: BookArgs;
  booked: Booked;
  searchFor: Reservation[];
  snapshot: CalendarSnapshot;
  /** The lead time of the lease asking (its bookings are read from that much before), and whether to read only these resources' bookings. */
  snapshotArgs: [leadMs: number, onlyTheseResources?: boolean];
  /** The requests that did not fit, and what to say when they never do. */
  shortageArgs: [requests: HostRequest[], neverFits?: string];
}

/** The 409's details for a request that can never fit (no start, end or longest end to retry with). */
export const NEVER_FITS = { earliest_start: null, earliest_end: null, longest_end: null };

/** Whether the lease's bookings are already those of this request (a sibling's call booked them, or a retry). */
export const alreadyBooked = (existing: WholeResourceBookingRow[], key: string) => existing.length > 0 && existing.every((row) => row.booking_key === key);

export abstract class WholeResourceCalendar<Resource extends { id: string }, Booked, BookArgs extends unknown[]> implements Calendar<WholeResourceTypes<Resource, Booked, BookArgs>> {
  /** Blazar's sentence when they do not fit (e.g. "Not enough hosts available."). */
  protected abstract readonly notEnough: string;
  /** What one resource, and several, are called in messages. */
  protected abstract readonly noun: string;
  protected abstract readonly nouns: string;
  /** What a shortage says when the request can never fit. */
  protected abstract readonly neverFits: string;

  constructor(
    protected readonly pool: Pool,
    protected readonly bookings: WholeResourceBookings,
    /** The gap a resource stays blocked after a booking ends. */
    protected readonly cleaningMs: number,
  ) {}

  abstract book(ctx: ReservationContext, ...args: BookArgs): Promise<Booked>;

  /** For a search: the reservable resources, and the requests of the lease's reservations of this type over them. */
  protected abstract searchRequests(reservations: Reservation[]): Promise<{ resources: Resource[]; requests: HostRequest[] }>;
  /**
   * The blocked intervals overlapping [fromMs, toMs + cleaning) of `ids`, or of every resource when
   * `onlyTheseIds` is false and the store allows; a store may answer a resource's intervals
   * separated by less than `mergeGapsBelowMs` as one (only an earliest-fit search asks).
   */
  protected abstract blocked(db: Pool | PoolClient, window: { fromMs: number; toMs: number | null; ids: string[]; onlyTheseIds: boolean; mergeGapsBelowMs?: number; withoutPreemptible?: boolean; lentAsFree?: boolean }): Promise<BlockedInterval[]>;
  protected abstract insertOne(client: PoolClient, booking: NewWholeResourceBooking): Promise<void>;
  /** The one order every transaction takes resources in: two that want the same ones queue instead of deadlocking. */
  protected abstract compareIds(a: string, b: string): number;
  /** What one request that did not fit needs, with how many resources match it and how many are free. */
  protected abstract describeShort(request: HostRequest, resources: Resource[], free: Set<string>): string;

  /** Reservations (by id) whose bookings a regular lease's admission may cut short (issue 43). */
  protected preemptible(_ctx: ReservationContext): ReadonlySet<string> {
    return new Set();
  }

  /** Whether these reservations (a lease's, of this type) see preemptible bookings as free: a regular ask does (issue 43). */
  protected preemptibleAsFree(_reservations: Reservation[]): boolean {
    return false;
  }

  /** Whether these reservations (a lease's, of this type) may book inside lendings, where lent time counts as free: a preemptible ask may (issue 43). */
  protected lentAsFree(_reservations: Reservation[]): boolean {
    return false;
  }

  /** Reservations (by id) whose bookings block their resources for good. */
  protected unbounded(_ctx: ReservationContext): ReadonlySet<string> {
    return new Set();
  }

  /** Frees the reservation's booking: all of it if it never started, the rest of the window if it ends early. */
  async release(reservationId: string, started: boolean, nowMs = Date.now()): Promise<void> {
    await releaseBooking(started, nowMs, {
      deleteAll: () => this.bookings.deleteReservation(this.pool, reservationId),
      endAt: (at) => this.bookings.endReservationAt(this.pool, reservationId, at, this.cleaningMs),
    });
  }

  /**
   * Where a lease of these reservations could go: the earliest whole-minute fit from `start` (within
   * the search budget), and the longest from it, within what the caller needs (`limits`).
   */
  async search(reservations: Reservation[], start: number, durationMs: number, leadMs: number, limits?: FitLimits): Promise<FitSearch> {
    const { resources, requests } = await this.searchRequests(reservations);
    const candidates = resources.filter((r) => requests.some((request) => request.matches(r.id)));
    // The bookings of the next weeks first: a year of them costs far more to read and sort than most searches need.
    const nearUntil = start + Math.max(NEAR_SEARCH_MS, NEAR_SEARCH_DURATIONS * durationMs);
    // For the earliest fit alone, gaps too short for the lease (its cleaning and lead included) may come merged.
    const gapsBelow = durationMs + this.cleaningMs + leadMs;
    // A regular ask counts preemptible bookings as free where the booking that follows may cut them (issue 43); a preemptible one never does.
    const withoutPreemptible = limits?.mayPreempt === true && this.preemptibleAsFree(reservations);
    const lentAsFree = this.lentAsFree(reservations);
    // As admission: a preemptible ask's lead from now at the earliest, reckoned at the search's start (a fit found
    // within the lead after it has a longer lead at admission: held or not, admission has the last word).
    leadMs = askedLeadMs(lentAsFree, leadMs, start, Date.now());
    const read = (until: number | null, merged: boolean) => this.snapshot(this.pool, candidates, start, until, leadMs, true, merged ? gapsBelow : undefined, withoutPreemptible, lentAsFree);
    const reads = limits?.reads;
    const key = (merged: boolean) => `${this.nouns}:${leadMs}:${merged ? gapsBelow : 'all'}:${withoutPreemptible ? 'regular' : 'preemptible'}:${candidates.map((c) => c.id).join(',')}`;
    // Within one request (offers), a read of a wider window answers for this one (SearchReads).
    const snapshot = (merged: boolean) => (until: number | null) =>
      reads ? reads.read(key(merged), start, until, () => read(until, merged), (wider) => narrowSnapshot(wider, start, until)) : read(until, merged);
    return wholeResourceFitNearFirst(snapshot(false), requests, start, durationMs, nearUntil, limits, snapshot(true));
  }

  /**
   * The bookings that matter for a lease over [start, end) made ready `leadMs` before its start:
   * those overlapping [start − lead, end + cleaning). Each is shifted by the lead and the gap after
   * it grows by the lead, so the pure calendar functions (which know only a gap after bookings)
   * answer for the lead too: a new lease must begin its lead time after a booking's blocked end.
   */
  async snapshot(db: Pool | PoolClient, resources: Resource[], start: number, end: number | null, leadMs: number, onlyTheseResources = false, mergeGapsBelowMs?: number, withoutPreemptible = false, lentAsFree = false): Promise<CalendarSnapshot> {
    const ids = resources.map((r) => r.id);
    const rows = await this.blocked(db, { fromMs: start - leadMs, toMs: end, ids, onlyTheseIds: onlyTheseResources, withoutPreemptible, lentAsFree, ...(mergeGapsBelowMs !== undefined ? { mergeGapsBelowMs } : {}) });
    return this.shiftedByLead(ids, rows, leadMs);
  }

  /** Blocked intervals as the pure calendar functions take them for a lease made ready `leadMs` before its start (see snapshot). */
  protected shiftedByLead(ids: string[], rows: BlockedInterval[], leadMs: number): CalendarSnapshot {
    return { hostIds: ids, blocked: rows.map((r) => ({ hostId: r.resourceId, start: r.start_ms + leadMs, end: r.end_ms + leadMs })), cleaningMs: this.cleaningMs + leadMs };
  }

  /** 409 that says what was short, when the same request would fit, and how long it can be from the asked start. */
  async explainShortage(db: Pool | PoolClient, ctx: ReservationContext, resources: Resource[], requests: HostRequest[], neverFits = this.neverFits, preemptibleFree = this.preemptibleAsFree(sameTypeReservations(ctx))): Promise<Error> {
    // The later fit it suggests counts preemptible bookings as free only where this request could take them.
    const future = await this.snapshot(db, resources, ctx.startMs, null, ctx.provisioningLeadMs, false, undefined, preemptibleFree, this.lentAsFree(sameTypeReservations(ctx)));
    const free = freeHosts(future, ctx.startMs, ctx.endMs);
    const needs = requests.map((r) => this.describeShort(r, resources, free)).join('; ');
    return shortage(
      ctx,
      [`${this.notEnough} Not enough ${this.nouns} free from ${when(ctx.startMs)} to ${when(ctx.endMs)}: needs ${needs}`],
      wholeResourceFit(requests, future, ctx.startMs, ctx.endMs - ctx.startMs),
      neverFits,
      await this.shortageReason(db, ctx, resources, requests),
    );
  }

  /** What else than other bookings a shortage is about (hosts under maintenance), for the refusal's `reason`. */
  protected shortageReason(_db: Pool | PoolClient, _ctx: ReservationContext, _resources: Resource[], _requests: HostRequest[]): Promise<'maintenance' | undefined> {
    return Promise.resolve(undefined);
  }

  /**
   * A pending lease's booking, made anew (its old one dropped by the caller): the requests assigned
   * over the window's free resources, those it held first, then in `preferred` order (given the
   * window's calendar), and booked; a 409 explaining the shortage when they do not fit.
   */
  protected async bookAnew(
    client: PoolClient,
    ctx: ReservationContext,
    resources: Resource[],
    requests: HostRequest[],
    key: string,
    existing: WholeResourceBookingRow[],
    options: {
      preferred: (calendar: CalendarSnapshot) => Promise<string[]> | string[];
      neverFits?: string;
      /** When they do not fit in free resources: another way to book them (which books what it answers, reading afresh), else undefined. */
      otherwise?: () => Promise<Map<string, string[]> | undefined>;
      /** Whether the refusal's later fit may count preemptible bookings as free (a request that may preempt). */
      preemptibleFree?: boolean;
      /** Whether lent time counts as free (a preemptible ask that may borrow: issue 43). */
      lentAsFree?: boolean;
    },
  ): Promise<Map<string, string[]>> {
    const calendar = await this.snapshot(client, resources, ctx.startMs, ctx.endMs, ctx.provisioningLeadMs, false, undefined, false, options.lentAsFree ?? false);
    const preference = [...new Set([...existing.map((row) => row.resource_id), ...(await options.preferred(calendar))])];
    const assignment = assignHosts(requests, freeHosts(calendar, ctx.startMs, ctx.endMs), preference);
    if (!assignment) {
      const booked = await options.otherwise?.();
      if (booked) return booked;
      throw await this.explainShortage(client, ctx, resources, requests, options.neverFits, options.preemptibleFree ?? false);
    }
    await this.insert(client, ctx, assignment, ctx.startMs, key, ctx.provisioningLeadMs);
    return assignment;
  }

  /**
   * For an active lease, from `from` to its end: `wants` assigned over the free resources it does
   * not hold (`preferred`: the order, given that span's calendar; by default the least booked from
   * now first). Undefined when they do not fit; nothing is booked here.
   */
  protected async assignFree(
    client: PoolClient,
    ctx: ReservationContext,
    resources: Resource[],
    wants: HostRequest[],
    from: number,
    existing: WholeResourceBookingRow[],
    preferred: (calendar: CalendarSnapshot) => Promise<string[]> | string[] = (calendar) => preferenceOrder(calendar, Date.now()),
  ): Promise<Map<string, string[]> | undefined> {
    const calendar = await this.snapshot(client, resources, from, ctx.endMs, 0);
    const held = new Set(existing.map((row) => row.resource_id));
    const free = new Set([...freeHosts(calendar, from, ctx.endMs)].filter((id) => !held.has(id)));
    return assignHosts(wants, free, await preferred(calendar));
  }

  /**
   * The latest end the lease's bookings here can move to, keeping their resources (what an
   * extension's refusal names as latest_end): Infinity when nothing follows; undefined when it holds none here.
   */
  async latestEnd(leaseId: string): Promise<number | undefined> {
    const existing = await this.bookings.ofLease(this.pool, leaseId);
    if (existing.length === 0) return undefined;
    const next = await this.bookings.firstOtherFrom(this.pool, [...new Set(existing.map((row) => row.resource_id))], leaseId, Math.min(...existing.map((row) => row.end_ms)));
    return next ? next.next_ms - this.cleaningMs : Infinity;
  }

  /** An active lease keeps its resources and only its end moves; a collision with another lease's booking says how far it can go. */
  protected async moveEndOrRefuse(client: PoolClient, ctx: ReservationContext, existing: WholeResourceBookingRow[]): Promise<void> {
    if (await this.bookings.moveLeaseEnd(client, ctx.leaseId, ctx.endMs, this.cleaningMs)) return;
    const ids = [...new Set(existing.map((row) => row.resource_id))];
    const next = await this.bookings.firstOtherFrom(client, ids, ctx.leaseId, Math.min(...existing.map((row) => row.end_ms)));
    const why = `${this.noun} ${next?.name ?? '?'} is booked from ${next ? when(next.next_ms) : '?'}`;
    throw extensionRefused(ctx, this.notEnough, why, next ? next.next_ms - this.cleaningMs : undefined);
  }

  /**
   * Books the assigned resources (per request key: a reservation id, `#…` after it for one of its
   * several requests) from `from` to the lease's end; the exclusion constraint has the last word.
   */
  protected async insert(client: PoolClient, ctx: ReservationContext, assignment: Map<string, string[]>, from: number, key: string, leadMs: number): Promise<void> {
    const unbounded = this.unbounded(ctx);
    const preemptible = this.preemptible(ctx);
    const rows = [...assignment]
      .flatMap(([requestKey, ids]) => ids.map((resourceId) => ({ reservationId: requestKey.split('#')[0], resourceId })))
      .sort((a, b) => this.compareIds(a.resourceId, b.resourceId));
    for (const { reservationId, resourceId } of rows) {
      await this.insertOne(client, { resourceId, reservationId, leaseId: ctx.leaseId, projectId: ctx.projectId, fromMs: from, endMs: ctx.endMs, leadMs, unbounded: unbounded.has(reservationId), preemptible: preemptible.has(reservationId), bookingKey: key });
    }
  }
}

/**
 * The intervals of a snapshot that a read of [start, until) would have returned (the snapshot's
 * are shifted by the lead, and the cleaning gap after them is already in their ends).
 */
function narrowSnapshot(wider: CalendarSnapshot, start: number, until: number | null): CalendarSnapshot {
  const end = until ?? Infinity;
  return { ...wider, blocked: wider.blocked.filter((b) => b.end > start && b.start < end + wider.cleaningMs) };
}
