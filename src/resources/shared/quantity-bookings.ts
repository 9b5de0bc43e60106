/**
 * The quantity calendar in PostgreSQL: bookings of amounts (VCPU, MEMORY_MB, DISK_GB, bandwidth…)
 * on Placement resource providers over time, for every resource type that books quantities rather
 * than whole hosts. A booking runs in one transaction that first locks the candidate providers'
 * rows (in one order, so concurrent bookings queue instead of deadlocking), then checks the peak of
 * the overlapping bookings against capacity (src/domain/quantity-calendar.ts) and inserts.
 * Providers' capacities are copied from Placement by the resource plugin (refreshProviders). The
 * SQL is the store's (src/db/quantity-allocations.ts); what both calendars share is in ./booking.ts.
 */
import { DatabaseError, type PoolClient } from 'pg';
import { formatMessageDate as when, wholeMinuteUp } from '../../domain/dates';
import { EXTENSION_HORIZON_MS } from '../../domain/offers';
import { invalidLease, leaseConflict } from '../../domain/lease';
import { fits, loadWith, longestQuantityFit, searchEarliestQuantityFit, shortfall, type Amounts, type QuantityBooking, type QuantityProvider } from '../../domain/quantity-calendar';
import type { Pool } from '../../db/pool';
import { matchesQuery, parsePropertyQuery } from '../../domain/property-query';
import {
  bookingOfReservation,
  bookingsOnProviders,
  deleteReservationQuantityBookings,
  endReservationQuantityBookingsAt,
  insertQuantityBooking,
  liveLeaseBookings,
  lockProviders,
  moveBookingEnd,
  moveBookingToProvider,
  providerOnFailedHost,
  providersRefreshedAt,
  syncCapacityProviders,
  unusableProviders,
  usableProviders,
  type CapacityProvider,
  type QuantityBookingRecord,
} from '../../db/quantity-allocations';
import type { Calendar } from '../../domain/calendar';
import type { FitSearch, ReservationContext } from '../../domain/resource-plugin';
import { bookedFor, bookInTransaction, bookingKey, checkKeys, extensionRefused, releaseBooking, shortage } from './booking';

export type { CapacityProvider };

export interface QuantityRequest {
  kind: string;
  amounts: Amounts;
  /** What is booked (e.g. a server id): it can be in only one booking at a time. */
  subject?: string;
  /** Which providers may serve it. */
  matches: (provider: CapacityProvider) => boolean;
  /** Used in messages, e.g. `server vm-1 (flavor m1.large)`. */
  describe: string;
}

export interface QuantityBookingRow {
  providerUuid: string;
  host: string;
  name: string;
}

/** What healing did to a booking: where it is now, whether it moved (and from which host), whether it is still on a failed host. */
export interface QuantityHeal {
  booking: QuantityBookingRow;
  onFailedHost: boolean;
  moved: boolean;
  movedFrom?: string;
}

/**
 * The bookings one earliest-slot search may examine: an unbounded search over 100 000 bookings
 * could hold the event loop for seconds, and everyone else's requests with it. Each candidate
 * start reads the provider's bookings again, so this keeps one search under ~100 ms (measured:
 * 200 tries over 1 000 bookings of one provider ~10 ms, 2 over 100 000 ~40 ms); past it, the
 * answer says how far it looked.
 */
export const QUANTITY_SEARCH_WORK_BUDGET = 200_000;

/** Candidate instants are lease starts less the lead: a lease start must fall on a whole minute (it is handed back for reuse). */
const startOnWholeMinute = (leadMs: number) => (ms: number) => wholeMinuteUp(ms + leadMs) - leadMs;

const subjectTaken = (err: unknown) => err instanceof DatabaseError && err.constraint === 'quantity_allocations_one_booking_per_subject';

function describeAmounts(amounts: Amounts): string {
  return Object.entries(amounts)
    .map(([resourceClass, amount]) => `${resourceClass} ${amount}`)
    .join(', ');
}

interface QuantityCalendarTypes {
  db: Pool | PoolClient;
  resource: CapacityProvider;
  bookArgs: [request: QuantityRequest];
  booked: QuantityBookingRow;
  searchFor: QuantityRequest;
  snapshot: Array<QuantityBooking & { reservationId: string }>;
  snapshotArgs: [];
  /** The request, and the bookings over its window. */
  shortageArgs: [request: QuantityRequest, windowBookings: QuantityBooking[]];
}

/** How long a failed copy of the providers answers for the cloud (refreshProviders). */
const FAILED_COPY_ANSWERS_MS = 15_000;

export class QuantityCalendar implements Calendar<QuantityCalendarTypes> {
  /** Per kind, the copy being made now: callers at the same moment wait for that one. */
  private readonly refreshing = new Map<string, Promise<void>>();
  /** Per kind, the last failed copy: not tried again by every caller for a while (FAILED_COPY_ANSWERS_MS, at most the copy's age limit). */
  private readonly lastFailure = new Map<string, { atMs: number; error: unknown }>();

  constructor(private readonly pool: Pool) {}

  /**
   * Records the providers of `kind` as Placement has them now. Providers that disappeared stay (old
   * bookings refer to them) but are no longer usable for new bookings.
   */
  async syncProviders(kind: string, providers: CapacityProvider[]): Promise<void> {
    await syncCapacityProviders(this.pool, kind, providers);
  }

  /**
   * Copies the providers of `kind` again (`read`: as the cloud has them now) when the copy is older
   * than `maxAgeMs`. One copy at a time per kind (callers meanwhile share it); after a failure, its
   * error answers at once for a while instead of every caller (every project's create) waiting out
   * the cloud's timeout again: callers that can, book on the copy they have. A while, not the whole
   * age limit: the cloud back, a worker's retry copies again soon.
   */
  async refreshProviders(kind: string, maxAgeMs: number, read: () => Promise<CapacityProvider[]>): Promise<void> {
    let run = this.refreshing.get(kind);
    if (!run) {
      run = this.refreshOnce(kind, maxAgeMs, read).finally(() => this.refreshing.delete(kind));
      this.refreshing.set(kind, run);
    }
    return run;
  }

  private async refreshOnce(kind: string, maxAgeMs: number, read: () => Promise<CapacityProvider[]>): Promise<void> {
    const last = await providersRefreshedAt(this.pool, kind);
    if (last !== undefined && Date.now() - last < maxAgeMs) return;
    const failure = this.lastFailure.get(kind);
    if (failure && Date.now() - failure.atMs < Math.min(maxAgeMs, FAILED_COPY_ANSWERS_MS)) throw failure.error;
    let providers: CapacityProvider[];
    try {
      providers = await read();
    } catch (error) {
      // The cloud's failure only: a database error is not the cloud's, and is tried again at once.
      this.lastFailure.set(kind, { atMs: Date.now(), error });
      throw error;
    }
    this.lastFailure.delete(kind);
    await this.syncProviders(kind, providers);
  }

  /** The usable providers of `kind`, by name. */
  async providers(kind: string): Promise<CapacityProvider[]> {
    return usableProviders(this.pool, kind, 'name');
  }

  /**
   * Books the reservation for the lease window (from start − lead); idempotent per request. A lease
   * that is already active keeps its provider and only moves its end.
   */
  async book(ctx: ReservationContext, request: QuantityRequest): Promise<QuantityBookingRow> {
    return this.transaction(async (client) => {
      const key = quantityBookingKey(ctx, request);
      const existing = await bookingOfReservation(client, ctx.reservation.id);
      if (existing && existing.booking_key === key) return existing;
      if (existing && ctx.leaseStatus !== 'PENDING') {
        await this.resizeKeepingProvider(client, ctx, request, existing, key);
        return existing;
      }

      const providers = await this.lockProviders(client, request.kind, request.matches);
      if (providers.length === 0) throw await this.noMatchingProvider(client, request);
      await deleteReservationQuantityBookings(client, ctx.reservation.id);
      const from = ctx.startMs - ctx.provisioningLeadMs;
      const bookings = await this.snapshot(client, providers, from, ctx.endMs);
      const fitting = providers.filter((p) => fits(asProvider(p), bookings, request.amounts, from, ctx.endMs));
      if (fitting.length === 0) throw await this.explainShortage(client, ctx, providers, request, bookings);
      // Spread: the least loaded provider, keeping the one held before when it still fits.
      const chosen =
        fitting.find((p) => p.uuid === existing?.providerUuid) ??
        fitting.reduce((best, p) => (loadWith(asProvider(p), bookings, request.amounts, from, ctx.endMs) < loadWith(asProvider(best), bookings, request.amounts, from, ctx.endMs) ? p : best));
      await insertQuantityBooking(client, {
        providerUuid: chosen.uuid,
        reservationId: ctx.reservation.id,
        leaseId: ctx.leaseId,
        projectId: ctx.projectId,
        subject: request.subject ?? null,
        amounts: request.amounts,
        startMs: ctx.startMs,
        endMs: ctx.endMs,
        blocksFromMs: from,
        bookingKey: key,
      });
      return { providerUuid: chosen.uuid, host: chosen.host, name: chosen.name };
    });
  }

  /**
   * A started reservation whose booking was made for its parameters: its new window (an early end,
   * an extension) decided here alone, keeping its provider and amounts (no cloud read). False when it
   * is not that case (no booking, other parameters): the type's reserve books it then.
   */
  async moveWindow(ctx: ReservationContext): Promise<boolean> {
    if (ctx.leaseStatus === 'PENDING') return false;
    return this.transaction(async (client) => {
      const existing = await bookingOfReservation(client, ctx.reservation.id);
      if (!existing || !bookedFor(existing.booking_key, ctx.reservation.params)) return false;
      const request = { kind: existing.kind, amounts: existing.amounts, subject: existing.subject ?? undefined, describe: `its ${describeAmounts(existing.amounts)}`, matches: () => true };
      const key = quantityBookingKey(ctx, request);
      if (existing.booking_key !== key) await this.resizeKeepingProvider(client, ctx, request, existing, key);
      return true;
    });
  }

  /**
   * Moves a started reservation's booking to another provider for [fromMs, end): the first of
   * `candidates` (in the caller's order of preference) whose calendar has room. Undefined if none.
   */
  async move(ctx: ReservationContext, request: QuantityRequest, candidates: string[], fromMs: number): Promise<QuantityBookingRow | undefined> {
    return this.transaction(async (client) => {
      const providers = await this.lockProviders(client, request.kind, (p) => candidates.includes(p.uuid));
      const bookings = (await this.snapshot(client, providers, fromMs, ctx.endMs)).filter((b) => b.reservationId !== ctx.reservation.id);
      const byPreference = [...providers].sort((a, b) => candidates.indexOf(a.uuid) - candidates.indexOf(b.uuid));
      const chosen = byPreference.find((p) => fits(asProvider(p), bookings, request.amounts, fromMs, ctx.endMs));
      if (!chosen) return undefined;
      await moveBookingToProvider(client, ctx.reservation.id, chosen.uuid);
      return { providerUuid: chosen.uuid, host: chosen.host, name: chosen.name };
    });
  }

  /**
   * After compute hosts failed or came back. A pending booking on a failed host moves to the first
   * provider `request` accepts (by name) with room for its whole window, healthy ones only; with
   * none it stays (the host may come back; the caller flags it). A begun booking stays where its
   * resources run. Calling it again changes nothing more.
   */
  async heal(ctx: ReservationContext, request: QuantityRequest): Promise<QuantityHeal | undefined> {
    const booked = await bookingOfReservation(this.pool, ctx.reservation.id);
    if (!booked) return undefined;
    if (!(await providerOnFailedHost(this.pool, booked.providerUuid))) return { booking: booked, onFailedHost: false, moved: false };
    if (ctx.leaseStatus !== 'PENDING') return { booking: booked, onFailedHost: true, moved: false };
    const candidates = (await this.providers(request.kind)).filter((p) => p.uuid !== booked.providerUuid && request.matches(p)).map((p) => p.uuid);
    const moved = candidates.length > 0 ? await this.move(ctx, request, candidates, ctx.startMs - ctx.provisioningLeadMs) : undefined;
    return moved ? { booking: moved, onFailedHost: false, moved: true, movedFrom: booked.host } : { booking: booked, onFailedHost: true, moved: false };
  }

  /** Whether the provider is on a host the monitor found failed. */
  async onFailedHost(providerUuid: string): Promise<boolean> {
    return providerOnFailedHost(this.pool, providerUuid);
  }

  async bookingFor(reservationId: string): Promise<QuantityBookingRow | undefined> {
    return bookingOfReservation(this.pool, reservationId);
  }

  /** Frees the booking: all of it if the lease never started, the rest of the window if it ends early. */
  async release(reservationId: string, started: boolean, nowMs = Date.now()): Promise<void> {
    await releaseBooking(started, nowMs, {
      deleteAll: () => deleteReservationQuantityBookings(this.pool, reservationId),
      endAt: (at) => endReservationQuantityBookingsAt(this.pool, reservationId, at),
    });
  }

  /**
   * Where a request for a lease from `start` for `durationMs`, made ready `leadMs` before its start,
   * could go: the earliest whole-minute start from `start` (within the search budget), and the
   * longest lease from `start`.
   */
  async search(request: QuantityRequest, start: number, durationMs: number, leadMs: number): Promise<FitSearch> {
    const providers = (await usableProviders(this.pool, request.kind, 'uuid')).filter(request.matches);
    const bookings = await this.snapshot(this.pool, providers, start - leadMs, null);
    return fitSearch(providers, bookings, request.amounts, start, durationMs, leadMs);
  }

  /**
   * The latest end the lease's bookings of `kind` can move to on the providers they are on, their
   * amounts kept (extension offers): per provider, until the others' bookings there leave no room
   * for what the lease holds on it. Others are read up to EXTENSION_HORIZON_MS past the lease's end
   * (Infinity: nothing blocks within it). Undefined when the lease holds none of `kind`.
   */
  async latestEnd(leaseId: string, kind: string): Promise<number | undefined> {
    const ends = await this.latestEndsByProvider(leaseId, kind);
    return ends && Math.min(Infinity, ...ends.map((e) => e.latestMs));
  }

  /** latestEnd per provider the lease holds amounts on (and its current end, `fromMs`). */
  async latestEndsByProvider(leaseId: string, kind: string): Promise<Array<{ provider: CapacityProvider; fromMs: number; latestMs: number }> | undefined> {
    const own = await liveLeaseBookings(this.pool, leaseId, kind);
    if (own.length === 0) return undefined;
    const fromMs = Math.max(...own.map((b) => b.endMs));
    // What runs until the lease's end moves with it: its amounts per provider, all its reservations' together.
    const held = new Map<string, { provider: CapacityProvider; amounts: Record<string, number> }>();
    for (const b of own.filter((b) => b.endMs === fromMs)) {
      const entry = held.get(b.provider.uuid) ?? { provider: b.provider, amounts: {} };
      for (const [resourceClass, amount] of Object.entries(b.amounts)) entry.amounts[resourceClass] = (entry.amounts[resourceClass] ?? 0) + amount;
      held.set(b.provider.uuid, entry);
    }
    const ownReservations = new Set(own.map((b) => b.reservationId));
    const providers = [...held.values()].map((h) => h.provider);
    const others = (await this.snapshot(this.pool, providers, fromMs, fromMs + EXTENSION_HORIZON_MS)).filter((b) => !ownReservations.has(b.reservationId));
    return [...held.values()].map(({ provider, amounts }) => ({ provider, fromMs, latestMs: fromMs + longestQuantityFit([asProvider(provider)], others, amounts, fromMs) }));
  }

  // ─── Inside a transaction ───────────────────────────────────────────────────────────────────

  private async transaction<T>(work: (client: PoolClient) => Promise<T>): Promise<T> {
    try {
      return await bookInTransaction(this.pool, work, { retryExclusion: false });
    } catch (err) {
      if (subjectTaken(err)) throw leaseConflict('this server is already booked by another lease over an overlapping window');
      throw err;
    }
  }

  /**
   * The usable providers of the kind that `wanted` accepts, locked for this transaction (in uuid
   * order: no deadlocks). Only those: admissions that cannot compete for a provider do not queue.
   */
  private async lockProviders(client: PoolClient, kind: string, wanted: (p: CapacityProvider) => boolean): Promise<CapacityProvider[]> {
    const candidates = (await usableProviders(client, kind, 'uuid')).filter(wanted).map((p) => p.uuid);
    return lockProviders(client, candidates);
  }

  /** The bookings on the providers overlapping [from, to) (to null: from `from` on). */
  async snapshot(db: Pool | PoolClient, providers: CapacityProvider[], from: number, to: number | null): Promise<Array<QuantityBooking & { reservationId: string }>> {
    const rows = await bookingsOnProviders(db, providers.map((p) => p.uuid), from, to ?? Infinity);
    return rows.map((r) => ({ providerId: r.provider_uuid, reservationId: r.reservation_id, start: r.start_ms, end: r.end_ms, amounts: r.amounts }));
  }

  /** No usable provider matches: 409 when unusable ones would (it may fit once they are back), else 400. */
  private async noMatchingProvider(client: PoolClient, request: QuantityRequest) {
    const down = (await unusableProviders(client, request.kind)).filter(request.matches);
    if (down.length === 0) return invalidLease(`no host can ever take ${request.describe}: none matches the reservation's properties`);
    const names = down.slice(0, 20).map((p) => p.name);
    return leaseConflict(`no host can take ${request.describe} now: the matching host(s) are failed, down or disabled (${names.join(', ')}${down.length > names.length ? ', …' : ''}); it may fit once they are back`);
  }

  /** An active lease keeps its provider: only its end moves; a collision says how far it can go. */
  private async resizeKeepingProvider(client: PoolClient, ctx: ReservationContext, request: QuantityRequest, existing: QuantityBookingRecord, key: string): Promise<void> {
    const providers = await this.lockProviders(client, request.kind, (p) => p.uuid === existing.providerUuid);
    const from = Math.max(Date.now(), existing.endMs);
    if (ctx.endMs > from && providers[0]) {
      const others = (await this.snapshot(client, providers, from, ctx.endMs)).filter((b) => b.reservationId !== ctx.reservation.id);
      if (!fits(asProvider(providers[0]), others, request.amounts, from, ctx.endMs)) {
        const longest = longestQuantityFit([asProvider(providers[0])], others, request.amounts, from);
        const latestEnd = longest === Infinity ? undefined : from + longest; // 0: it cannot go past its current end
        throw extensionRefused(ctx, 'Not enough hosts available.', `host ${existing.host} has no room for ${request.describe} after that`, latestEnd);
      }
    }
    await moveBookingEnd(client, ctx.reservation.id, ctx.endMs, key);
  }

  /** 409 that says what is short on the closest provider, and when the same request would fit. */
  async explainShortage(client: Pool | PoolClient, ctx: ReservationContext, providers: CapacityProvider[], request: QuantityRequest, windowBookings: QuantityBooking[]): Promise<Error> {
    const lead = ctx.provisioningLeadMs;
    const from = ctx.startMs - lead;
    const future = await this.snapshot(client, providers, from, null);
    const closest = providers
      .map((p) => ({ p, short: shortfall(asProvider(p), windowBookings, request.amounts, from, ctx.endMs) }))
      .sort((a, b) => a.short.length - b.short.length)[0];
    const what = [
      `not enough room for ${request.describe} (${describeAmounts(request.amounts)}) on any of ${providers.length} matching host(s) from ${when(ctx.startMs)} to ${when(ctx.endMs)}`,
    ];
    if (closest) what.push(`closest: ${closest.p.name} with ${closest.short.map((s) => `${s.resourceClass} ${Math.max(0, s.left)} left`).join(', ')}`);
    const fit = fitSearch(providers, future, request.amounts, ctx.startMs, ctx.endMs - ctx.startMs, lead);
    return shortage(ctx, what, fit, 'it never fits: the request is larger than any matching host');
  }
}

/**
 * Where `amounts` fit on the providers for a lease from `start` for `durationMs`, made ready
 * `leadMs` before its start: the calendar is searched for the whole span from start − lead, and the
 * answer is given in lease starts (the lead added back).
 */
function fitSearch(providers: CapacityProvider[], bookings: QuantityBooking[], amounts: Amounts, start: number, durationMs: number, leadMs: number): FitSearch {
  const from = start - leadMs;
  const limits = { align: startOnWholeMinute(leadMs), workBudget: QUANTITY_SEARCH_WORK_BUDGET };
  const search = searchEarliestQuantityFit(providers.map(asProvider), bookings, amounts, from, durationMs + leadMs, limits);
  const longest = longestQuantityFit(providers.map(asProvider), bookings, amounts, from);
  return {
    earliest: search.fit ? search.fit.start + leadMs : undefined,
    longestMs: Math.max(0, longest - leadMs),
    cutShort: search.cutShort,
    tried: search.tried,
    searchedUntil: search.lastTried !== undefined ? search.lastTried + leadMs : undefined,
  };
}

/**
 * A reservation's `resource_properties` over providers: a predicate on the properties
 * `propertiesOf` gives each (their Placement traits among them, as `"true"`). A key that no
 * provider has is a 400 naming the known ones.
 */
export function providerQuery(text: string, providers: CapacityProvider[], propertiesOf: (p: CapacityProvider) => Record<string, string>): (p: CapacityProvider) => boolean {
  const query = parsePropertyQuery(text);
  checkKeys(query, new Set(providers.flatMap((p) => Object.keys(propertiesOf(p)))), 'resource_properties');
  return (p) => matchesQuery(query, propertiesOf(p));
}

/** A provider's usable capacity in each of `resourceClasses` it has, from its Placement inventories: (total − reserved) × allocation ratio. */
export function placementCapacity(inventories: Record<string, { total: number; reserved?: number; allocation_ratio?: number }>, resourceClasses: readonly string[]): Record<string, number> {
  const capacity: Record<string, number> = {};
  for (const resourceClass of resourceClasses) {
    const inventory = inventories[resourceClass];
    if (inventory) capacity[resourceClass] = Math.floor((inventory.total - (inventory.reserved ?? 0)) * (inventory.allocation_ratio ?? 1));
  }
  return capacity;
}

/** Placement traits as properties a query can test (`["=", "$CUSTOM_FAST", "true"]`). */
export const traitProperties = (p: CapacityProvider): Record<string, string> => Object.fromEntries(p.traits.map((trait) => [trait, 'true']));

function asProvider(p: CapacityProvider): QuantityProvider {
  return { id: p.uuid, capacity: p.capacity };
}

/** Identifies one booking request: its window and what it asks for. */
function quantityBookingKey(ctx: ReservationContext, request: Pick<QuantityRequest, 'amounts' | 'subject'>): string {
  return bookingKey(ctx.reservation.params, [ctx.startMs, ctx.endMs, ctx.provisioningLeadMs, request.amounts, request.subject ?? null]);
}
