/**
 * The quantity calendar in PostgreSQL: bookings of amounts (VCPU, MEMORY_MB, DISK_GB, bandwidth…)
 * on Placement resource providers over time, for every resource type that books quantities rather
 * than whole hosts. A booking runs in one transaction that first locks the candidate providers'
 * rows (in one order, so concurrent bookings queue instead of deadlocking), then checks the peak of
 * the overlapping bookings against capacity (src/domain/quantity-calendar.ts) and inserts.
 * Providers' capacities are copied from Placement by the resource plugin (syncProviders).
 */
import { createHash } from 'node:crypto';
import { DatabaseError, type PoolClient } from 'pg';
import { invalidLease, leaseConflict, requestDate as when, reuseEnd, reuseStart, wholeMinuteDown, wholeMinuteUp } from '../../domain/lease';
import { fits, loadWith, longestQuantityFit, searchEarliestQuantityFit, shortfall, type Amounts, type QuantityBooking, type QuantityProvider } from '../../domain/quantity-calendar';
import { withConnection, type Pool } from '../../db/pool';
import { matchesQuery, parsePropertyQuery, queryKeys } from '../../domain/property-query';
import { inTransaction } from '../../db/transaction';
import type { ReservationContext } from '../../domain/resource-plugin';


export interface CapacityProvider {
  uuid: string;
  name: string;
  host: string;
  capacity: Amounts;
  traits: string[];
}

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

const lostRace = (err: unknown) => err instanceof DatabaseError && ['40P01', '40001'].includes(err.code ?? '');
const subjectTaken = (err: unknown) => err instanceof DatabaseError && err.constraint === 'quantity_allocations_one_booking_per_subject';

function describeAmounts(amounts: Amounts): string {
  return Object.entries(amounts)
    .map(([resourceClass, amount]) => `${resourceClass} ${amount}`)
    .join(', ');
}

export class QuantityCalendar {
  constructor(private readonly pool: Pool) {}

  /**
   * Records the providers of `kind` as Placement has them now. Providers that disappeared stay (old
   * bookings refer to them) but are no longer usable for new bookings.
   */
  async syncProviders(kind: string, providers: CapacityProvider[]): Promise<void> {
    await inTransaction(this.pool, async (client) => {
      for (const p of [...providers].sort((a, b) => a.uuid.localeCompare(b.uuid))) {
        await client.query(
          `INSERT INTO capacity_providers (uuid, name, host, kind, capacity, traits, usable, refreshed_at)
           VALUES ($1, $2, $3, $4, $5, $6, true, now())
           ON CONFLICT (uuid) DO UPDATE SET name = $2, host = $3, kind = $4, capacity = $5, traits = $6, usable = true, refreshed_at = now()`,
          [p.uuid, p.name, p.host, kind, JSON.stringify(p.capacity), p.traits],
        );
      }
      await client.query('UPDATE capacity_providers SET usable = false WHERE kind = $1 AND NOT (uuid = ANY($2))', [kind, providers.map((p) => p.uuid)]);
    });
  }

  /** When the providers of `kind` were last copied from Placement (undefined: never). */
  async refreshedAt(kind: string): Promise<number | undefined> {
    const { rows } = await this.pool.query<{ ms: number | null }>(`SELECT (extract(epoch FROM max(refreshed_at)) * 1000)::float8 AS ms FROM capacity_providers WHERE kind = $1`, [kind]);
    return rows[0]?.ms ?? undefined;
  }

  async providers(kind: string): Promise<CapacityProvider[]> {
    const { rows } = await this.pool.query<CapacityProvider>(`SELECT uuid, name, host, capacity, traits FROM capacity_providers WHERE kind = $1 AND usable ORDER BY name`, [kind]);
    return rows;
  }

  /**
   * Books the reservation for the lease window (from start − lead); idempotent per request. A lease
   * that is already active keeps its provider and only moves its end.
   */
  async book(ctx: ReservationContext, request: QuantityRequest): Promise<QuantityBookingRow> {
    return this.transaction(async (client) => {
      const key = bookingKey(ctx, request);
      const existing = await this.bookingOf(client, ctx.reservation.id);
      if (existing && existing.booking_key === key) return existing;
      if (existing && ctx.leaseStatus !== 'PENDING') {
        await this.resizeKeepingProvider(client, ctx, request, existing, key);
        return existing;
      }

      const providers = await this.lockProviders(client, request.kind, request.matches);
      if (providers.length === 0) throw invalidLease(`no host can ever take ${request.describe}: none matches the reservation's properties`);
      await client.query('DELETE FROM quantity_allocations WHERE reservation_id = $1', [ctx.reservation.id]);
      const from = ctx.startMs - ctx.provisioningLeadMs;
      const bookings = await this.bookingsOn(client, providers, from, ctx.endMs);
      const fitting = providers.filter((p) => fits(asProvider(p), bookings, request.amounts, from, ctx.endMs));
      if (fitting.length === 0) throw await this.explainShortage(client, ctx, request, providers, bookings);
      // Spread: the least loaded provider, keeping the one held before when it still fits.
      const chosen =
        fitting.find((p) => p.uuid === existing?.providerUuid) ??
        fitting.reduce((best, p) => (loadWith(asProvider(p), bookings, request.amounts, from, ctx.endMs) < loadWith(asProvider(best), bookings, request.amounts, from, ctx.endMs) ? p : best));
      await this.insert(client, ctx, request, chosen.uuid, from, key);
      return { providerUuid: chosen.uuid, host: chosen.host, name: chosen.name };
    });
  }

  /**
   * Moves a started reservation's booking to another provider for [fromMs, end): the first of
   * `candidates` (in the caller's order of preference) whose calendar has room. Undefined if none.
   */
  async move(ctx: ReservationContext, request: QuantityRequest, candidates: string[], fromMs: number): Promise<QuantityBookingRow | undefined> {
    return this.transaction(async (client) => {
      const providers = await this.lockProviders(client, request.kind, (p) => candidates.includes(p.uuid));
      const bookings = (await this.bookingsOn(client, providers, fromMs, ctx.endMs)).filter((b) => b.reservationId !== ctx.reservation.id);
      const byPreference = [...providers].sort((a, b) => candidates.indexOf(a.uuid) - candidates.indexOf(b.uuid));
      const chosen = byPreference.find((p) => fits(asProvider(p), bookings, request.amounts, fromMs, ctx.endMs));
      if (!chosen) return undefined;
      await client.query('UPDATE quantity_allocations SET provider_uuid = $2 WHERE reservation_id = $1', [ctx.reservation.id, chosen.uuid]);
      return { providerUuid: chosen.uuid, host: chosen.host, name: chosen.name };
    });
  }

  async bookingFor(reservationId: string): Promise<QuantityBookingRow | undefined> {
    return withConnection(this.pool, async (client) => {
      return await this.bookingOf(client, reservationId);
    });
  }

  /** Frees the booking: all of it if the lease never started, the rest of the window if it ends early. */
  async release(reservationId: string, started: boolean, nowMs = Date.now()): Promise<void> {
    if (!started) {
      await this.pool.query('DELETE FROM quantity_allocations WHERE reservation_id = $1', [reservationId]);
      return;
    }
    await this.pool.query(
      `UPDATE quantity_allocations
       SET during = tstzrange(lower(during), to_timestamp($2 / 1000.0)), blocks = tstzrange(lower(blocks), to_timestamp($2 / 1000.0))
       WHERE reservation_id = $1 AND upper(during) > to_timestamp($2 / 1000.0) AND lower(during) < to_timestamp($2 / 1000.0)`,
      [reservationId, nowMs],
    );
    // Not begun yet (ended before its start): nothing of it remains.
    await this.pool.query('DELETE FROM quantity_allocations WHERE reservation_id = $1 AND lower(during) >= to_timestamp($2 / 1000.0)', [reservationId, nowMs]);
  }

  /** Where a request for [start, start + duration) could go: the earliest fit from `start` (the instant its lead begins; within the search budget). */
  async earliest(request: QuantityRequest, start: number, durationMs: number, leadMs: number): Promise<number | undefined> {
    return withConnection(this.pool, async (client) => {
      const providers = (await this.usableProviders(client, request.kind)).filter(request.matches);
      const bookings = await this.bookingsOn(client, providers, start - leadMs, Infinity);
      const limits = { align: startOnWholeMinute(leadMs), workBudget: QUANTITY_SEARCH_WORK_BUDGET };
      return searchEarliestQuantityFit(providers.map(asProvider), bookings, request.amounts, start - leadMs, durationMs + leadMs, limits).fit?.start;
    });
  }

  // ─── Inside a transaction ───────────────────────────────────────────────────────────────────

  private async transaction<T>(work: (client: PoolClient) => Promise<T>): Promise<T> {
    try {
      return await inTransaction(this.pool, work, { retryOn: lostRace });
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
    const candidates = (await this.usableProviders(client, kind)).filter(wanted).map((p) => p.uuid);
    const { rows } = await client.query<CapacityProvider>(
      `SELECT uuid, name, host, capacity, traits FROM capacity_providers WHERE uuid = ANY($1) AND usable ORDER BY uuid FOR UPDATE`,
      [candidates],
    );
    return rows;
  }

  private async usableProviders(client: PoolClient, kind: string): Promise<CapacityProvider[]> {
    const { rows } = await client.query<CapacityProvider>(`SELECT uuid, name, host, capacity, traits FROM capacity_providers WHERE kind = $1 AND usable ORDER BY uuid`, [kind]);
    return rows;
  }

  private async bookingOf(client: PoolClient, reservationId: string): Promise<(QuantityBookingRow & { booking_key: string; startMs: number; endMs: number }) | undefined> {
    const { rows } = await client.query<QuantityBookingRow & { booking_key: string; startMs: number; endMs: number }>(
      `SELECT a.provider_uuid AS "providerUuid", p.host, p.name, a.booking_key,
              (extract(epoch FROM lower(a.blocks)) * 1000)::float8 AS "startMs", (extract(epoch FROM upper(a.blocks)) * 1000)::float8 AS "endMs"
       FROM quantity_allocations a JOIN capacity_providers p ON p.uuid = a.provider_uuid WHERE a.reservation_id = $1 LIMIT 1`,
      [reservationId],
    );
    return rows[0];
  }

  private async bookingsOn(client: PoolClient, providers: CapacityProvider[], from: number, to: number): Promise<Array<QuantityBooking & { reservationId: string }>> {
    const { rows } = await client.query<{ provider_uuid: string; reservation_id: string; amounts: Amounts; start_ms: number; end_ms: number }>(
      `SELECT provider_uuid, reservation_id::text, amounts, (extract(epoch FROM lower(blocks)) * 1000)::float8 AS start_ms,
              COALESCE((extract(epoch FROM upper(blocks)) * 1000)::float8, 'Infinity') AS end_ms
       FROM quantity_allocations
       WHERE provider_uuid = ANY($1) AND blocks && tstzrange(to_timestamp($2 / 1000.0), ${to === Infinity ? 'NULL' : 'to_timestamp($3 / 1000.0)'})`,
      to === Infinity ? [providers.map((p) => p.uuid), from] : [providers.map((p) => p.uuid), from, to],
    );
    return rows.map((r) => ({ providerId: r.provider_uuid, reservationId: r.reservation_id, start: r.start_ms, end: r.end_ms, amounts: r.amounts }));
  }

  private async insert(client: PoolClient, ctx: ReservationContext, request: QuantityRequest, providerUuid: string, from: number, key: string): Promise<void> {
    await client.query(
      `INSERT INTO quantity_allocations (provider_uuid, reservation_id, lease_id, project_id, subject, amounts, during, blocks, booking_key)
       VALUES ($1, $2, $3, $4, $5, $6, tstzrange(to_timestamp($7 / 1000.0), to_timestamp($8 / 1000.0)),
               tstzrange(to_timestamp($9 / 1000.0), to_timestamp($8 / 1000.0)), $10)`,
      [providerUuid, ctx.reservation.id, ctx.leaseId, ctx.projectId, request.subject ?? null, JSON.stringify(request.amounts), ctx.startMs, ctx.endMs, from, key],
    );
  }

  /** An active lease keeps its provider: only its end moves; a collision says how far it can go. */
  private async resizeKeepingProvider(client: PoolClient, ctx: ReservationContext, request: QuantityRequest, existing: QuantityBookingRow & { endMs: number }, key: string): Promise<void> {
    const providers = await this.lockProviders(client, request.kind, (p) => p.uuid === existing.providerUuid);
    const from = Math.max(Date.now(), existing.endMs);
    if (ctx.endMs > from && providers[0]) {
      const others = (await this.bookingsOn(client, providers, from, ctx.endMs)).filter((b) => b.reservationId !== ctx.reservation.id);
      if (!fits(asProvider(providers[0]), others, request.amounts, from, ctx.endMs)) {
        const longest = longestQuantityFit([asProvider(providers[0])], others, request.amounts, from);
        const latestEnd = longest === Infinity ? undefined : from + longest; // 0: it cannot go past its current end
        throw leaseConflict(
          `cannot extend lease ${ctx.leaseName} to ${when(ctx.endMs)}: host ${existing.host} has no room for ${request.describe} after that` +
            (latestEnd !== undefined ? `; the latest possible end is ${reuseEnd(latestEnd)}` : ''),
          { latest_end: latestEnd !== undefined ? reuseEnd(latestEnd) : null },
        );
      }
    }
    await client.query(
      `UPDATE quantity_allocations SET during = tstzrange(lower(during), to_timestamp($2 / 1000.0)), blocks = tstzrange(lower(blocks), to_timestamp($2 / 1000.0)), booking_key = $3
       WHERE reservation_id = $1`,
      [ctx.reservation.id, ctx.endMs, key],
    );
  }

  /** 409 that says what is short on the closest provider, and when the same request would fit. */
  private async explainShortage(client: PoolClient, ctx: ReservationContext, request: QuantityRequest, providers: CapacityProvider[], windowBookings: QuantityBooking[]) {
    const lead = ctx.provisioningLeadMs;
    const from = ctx.startMs - lead;
    const future = await this.bookingsOn(client, providers, from, Infinity);
    const duration = ctx.endMs - ctx.startMs;
    const search = searchEarliestQuantityFit(providers.map(asProvider), future, request.amounts, from, duration + lead, { align: startOnWholeMinute(lead), workBudget: QUANTITY_SEARCH_WORK_BUDGET });
    const earliest = search.fit;
    const longest = longestQuantityFit(providers.map(asProvider), future, request.amounts, from);
    const closest = providers
      .map((p) => ({ p, short: shortfall(asProvider(p), windowBookings, request.amounts, from, ctx.endMs) }))
      .sort((a, b) => a.short.length - b.short.length)[0];
    const parts = [
      `not enough room for ${request.describe} (${describeAmounts(request.amounts)}) on any of ${providers.length} matching host(s) from ${when(ctx.startMs)} to ${when(ctx.endMs)}`,
    ];
    if (closest) parts.push(`closest: ${closest.p.name} with ${closest.short.map((s) => `${s.resourceClass} ${Math.max(0, s.left)} left`).join(', ')}`);
    // Handed back for reuse: whole minutes (the start is one already), ends rounded down so that they still fit.
    const earliestStart = earliest ? earliest.start + lead : undefined;
    const earliestEnd = earliestStart !== undefined ? wholeMinuteDown(earliestStart + duration) : undefined;
    if (earliestStart !== undefined) parts.push(`the same lease fits from ${reuseStart(earliestStart)} to ${reuseEnd(earliestEnd!)}`);
    else if (search.cutShort) parts.push(`no fit found within the first ${search.tried} candidate starts (until ${when(search.lastTried! + lead)}): try a later start`);
    else parts.push('it never fits: the request is larger than any matching host');
    const longestEnd = longest > lead && longest !== Infinity && wholeMinuteDown(from + longest) > ctx.startMs ? wholeMinuteDown(from + longest) : undefined;
    if (longestEnd !== undefined) parts.push(`from the requested start it fits until ${reuseEnd(longestEnd)}`);
    return leaseConflict(`${parts.join('; ')}.`, {
      earliest_start: earliestStart !== undefined ? reuseStart(earliestStart) : null,
      earliest_end: earliestEnd !== undefined ? reuseEnd(earliestEnd) : null,
      longest_end: longestEnd !== undefined ? reuseEnd(longestEnd) : null,
    });
  }
}

/**
 * A reservation's `resource_properties` over providers: a predicate on the properties
 * `propertiesOf` gives each (their Placement traits among them, as `"true"`). A key that no
 * provider has is a 400 naming the known ones.
 */
export function providerQuery(text: string, providers: CapacityProvider[], propertiesOf: (p: CapacityProvider) => Record<string, string>): (p: CapacityProvider) => boolean {
  const query = parsePropertyQuery(text);
  const known = new Set(providers.flatMap((p) => Object.keys(propertiesOf(p))));
  const unknown = queryKeys(query).filter((key) => !known.has(key));
  if (unknown.length > 0) {
    throw invalidLease(`resource_properties: unknown property ${unknown.map((k) => `$${k}`).join(', ')} (known: ${[...known].sort().map((k) => `$${k}`).join(', ') || 'none'})`);
  }
  return (p) => matchesQuery(query, propertiesOf(p));
}

/** Placement traits as properties a query can test (`["=", "$CUSTOM_FAST", "true"]`). */
export const traitProperties = (p: CapacityProvider): Record<string, string> => Object.fromEntries(p.traits.map((trait) => [trait, 'true']));

function asProvider(p: CapacityProvider): QuantityProvider {
  return { id: p.uuid, capacity: p.capacity };
}

/** Identifies one booking request: its window and what it asks for. */
function bookingKey(ctx: ReservationContext, request: QuantityRequest): string {
  return createHash('sha256')
    .update(JSON.stringify([ctx.startMs, ctx.endMs, ctx.provisioningLeadMs, request.amounts, request.subject ?? null, ctx.reservation.params]))
    .digest('hex')
    .slice(0, 32);
}
