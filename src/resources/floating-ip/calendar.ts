/**
 * The floating IP calendar: enrolled addresses booked whole, like hosts, with the same matching
 * (src/domain/host-calendar.ts) so that a lease's reservations competing for one network's
 * addresses all get theirs when that is possible at all. Booking runs in one transaction,
 * idempotent per lease; the exclusion constraint `floating_ip_allocations_no_double_booking` has
 * the last word (a concurrent booking that took a chosen address first: choose again).
 *
 * Choice, as Blazar's: the required addresses, then addresses with nothing booked from now on,
 * then any free over the window. No cleaning gap: an address is free again the moment its lease
 * ends (Blazar applies its host cleaning time here too, for no reason an address has).
 */
import type { PoolClient } from 'pg';
import { formatMessageDate as when } from '../../domain/dates';
import { invalidLease, leaseConflict, type Reservation } from '../../domain/lease';
import { assignHosts, freeHosts, preferenceOrder, type CalendarSnapshot, type HostRequest } from '../../domain/host-calendar';
import type { FitSearch, ReservationContext } from '../../domain/resource-plugin';
import {
  blockedFloatingIpIntervals,
  deleteFloatingIpBookings,
  deleteLeaseFloatingIpBookings,
  deleteReservationFloatingIpBookings,
  endReservationFloatingIpBookingsAt,
  firstOtherFloatingIpBookingFrom,
  floatingIpsOfReservation,
  insertFloatingIpBooking,
  listFloatingIps,
  lockLeaseFloatingIpBookings,
  moveLeaseFloatingIpBookingsEnd,
  setLeaseFloatingIpBookingKey,
  type FloatingIpBookingRow,
  type FloatingIpRecord,
} from '../../db/floating-ips';
import type { Pool } from '../../db/pool';
import { bookInTransaction, bookingKey, extensionRefused, releaseBooking, shortage, wholeResourceFit } from '../shared/booking';
import { floatingIpParams, type FloatingIpParams } from './params';

export const VIRTUAL_FLOATINGIP = 'virtual:floatingip';

const NOT_ENOUGH = 'Not enough floating IPs available.';
const NEVER_FITS = { earliest_start: null, earliest_end: null, longest_end: null };

/** What an active reservation may not lose when it shrinks: addresses that carry traffic now. */
export interface BookingOptions {
  /** Per reservation id, its addresses associated with a port in Neutron. */
  inUse?: Map<string, Set<string>>;
}

export class FloatingIpCalendar {
  constructor(private readonly pool: Pool) {}

  /** Books the lease's floating IP reservations for [ctx.startMs, ctx.endMs); returns this reservation's addresses. */
  async book(ctx: ReservationContext, options: BookingOptions = {}): Promise<FloatingIpRecord[]> {
    return bookInTransaction(
      this.pool,
      async (client) => {
        await this.bookIn(client, ctx, options);
        return floatingIpsOfReservation(client, ctx.reservation.id);
      },
      { retryExclusion: true },
    );
  }

  addresses(reservationId: string): Promise<FloatingIpRecord[]> {
    return floatingIpsOfReservation(this.pool, reservationId);
  }

  /** Frees the reservation's booking: all of it if it never started, the rest of the window if it ends early. */
  async release(reservationId: string, started: boolean, nowMs = Date.now()): Promise<void> {
    await releaseBooking(started, nowMs, {
      deleteAll: () => deleteReservationFloatingIpBookings(this.pool, reservationId),
      endAt: (at) => endReservationFloatingIpBookingsAt(this.pool, reservationId, at),
    });
  }

  /** Where a lease of these reservations could go: the earliest fit from `start` and the longest from it. */
  /** The network's enrolled addresses free over the whole window [start, end) (availability: what a lease could get). */
  async freeAddresses(networkId: string, start: number, end: number): Promise<FloatingIpRecord[]> {
    const enrolled = (await listFloatingIps(this.pool, { reservableOnly: true })).filter((ip) => ip.floating_network_id === networkId);
    const free = freeHosts(await this.snapshot(this.pool, enrolled, start, end, 0), start, end);
    return enrolled.filter((ip) => free.has(ip.id));
  }

  async search(reservations: Reservation[], start: number, durationMs: number, leadMs: number): Promise<FitSearch> {
    const enrolled = await listFloatingIps(this.pool, { reservableOnly: true });
    const requests = reservations.filter((r) => r.resource_type === VIRTUAL_FLOATINGIP).flatMap((r) => this.requests(r, enrolled));
    const future = await this.snapshot(this.pool, enrolled, start, null, leadMs);
    return wholeResourceFit(requests, future, start, durationMs);
  }

  private async bookIn(client: PoolClient, ctx: ReservationContext, options: BookingOptions): Promise<void> {
    const reservations = ctx.leaseReservations.filter((r) => r.resource_type === VIRTUAL_FLOATINGIP);
    const existing = await lockLeaseFloatingIpBookings(client, ctx.leaseId);
    const key = bookingKey([ctx.startMs, ctx.endMs, reservations.map((r) => [r.id, r.params])]);
    // Already booked for exactly this request (a sibling's call booked us, or a retry): nothing to do.
    if (existing.length > 0 && existing.every((row) => row.booking_key === key)) return;

    const enrolled = await listFloatingIps(client, { reservableOnly: true });
    if (ctx.leaseStatus !== 'PENDING' && existing.length > 0) {
      await this.updateActive(client, ctx, reservations, existing, enrolled, key, options);
      return;
    }

    await deleteLeaseFloatingIpBookings(client, ctx.leaseId);
    const requests = reservations.flatMap((r) => this.requests(r, enrolled));
    const calendar = await this.snapshot(client, enrolled, ctx.startMs, ctx.endMs, ctx.provisioningLeadMs);
    const previouslyHeld = [...new Set(existing.map((row) => row.floating_ip_id))];
    // Never-booked addresses first: those booked from now on, whenever, come last (kept for the leases that asked for them).
    const now = Date.now();
    const fromNow = await this.snapshot(client, enrolled, now, null, 0);
    const preference = [...new Set([...previouslyHeld, ...preferenceOrder(fromNow, now)])];
    const assignment = assignHosts(requests, freeHosts(calendar, ctx.startMs, ctx.endMs), preference);
    if (!assignment) throw await this.explainShortage(client, enrolled, requests, ctx);
    await this.insert(client, ctx, assignment, ctx.startMs, ctx.provisioningLeadMs, key);
  }

  /**
   * An active lease keeps the addresses it has (its end may move); a reservation may grow (new
   * addresses from now to the end) and shrink by addresses not associated with a port.
   */
  private async updateActive(
    client: PoolClient,
    ctx: ReservationContext,
    reservations: Reservation[],
    existing: FloatingIpBookingRow[],
    enrolled: FloatingIpRecord[],
    key: string,
    options: BookingOptions,
  ): Promise<void> {
    const byId = new Map(enrolled.map((ip) => [ip.id, ip]));
    const from = Math.max(Date.now(), ctx.startMs);
    const wants: HostRequest[] = [];
    for (const reservation of reservations) {
      const params = floatingIpParams.parse(reservation.params);
      const held = existing.filter((row) => row.reservation_id === reservation.id);
      const network = held.map((row) => byId.get(row.floating_ip_id)?.floating_network_id).find((n) => n !== undefined);
      if (network !== undefined && network !== params.network_id) {
        throw invalidLease(`Floating IP reservation cannot be updated with requested parameters. Updating network_id is not supported (reservation ${reservation.id}).`);
      }
      const required = new Set(params.required_floatingips);
      const inUse = options.inUse?.get(reservation.id) ?? new Set<string>();
      const missingRequired = params.required_floatingips.filter((a) => !held.some((row) => row.floating_ip_address === a));
      const mustKeep = held.filter((row) => required.has(row.floating_ip_address) || inUse.has(row.floating_ip_address));
      const room = params.amount - missingRequired.length;
      if (mustKeep.length > room) {
        const used = mustKeep
          .filter((row) => inUse.has(row.floating_ip_address))
          .map((row) => row.floating_ip_address)
          .sort();
        throw leaseConflict(
          `Floating IP reservation cannot be updated with requested parameters. Reservation ${reservation.id} would keep ${mustKeep.length} address(es) it cannot give up` +
            (used.length ? ` (${used.join(', ')} associated with a port: disassociate them first)` : '') +
            ` and needs ${missingRequired.length} more required, more than amount ${params.amount}.`,
        );
      }
      // The others in the order they were booked: the last added goes first.
      const others = held.filter((row) => !mustKeep.includes(row));
      const keep = [...mustKeep, ...others.slice(0, Math.max(0, room - mustKeep.length))];
      const drop = held.filter((row) => !keep.includes(row)).map((row) => row.floating_ip_id);
      if (drop.length > 0) await deleteFloatingIpBookings(client, reservation.id, drop);
      const heldIds = new Set(held.map((row) => row.floating_ip_id));
      const missingIds = new Set(missingRequired.map((a) => enrolled.find((ip) => ip.floating_network_id === params.network_id && ip.floating_ip_address === a)?.id));
      if (missingIds.has(undefined)) throw this.notEnrolled(params, enrolled);
      if (missingRequired.length > 0) wants.push({ reservationId: reservation.id, min: missingRequired.length, max: missingRequired.length, matches: (id) => missingIds.has(id) });
      const more = params.amount - keep.length - missingRequired.length;
      if (more > 0) {
        wants.push({
          reservationId: reservation.id,
          min: more,
          max: more,
          matches: (id) => !heldIds.has(id) && !missingIds.has(id) && byId.get(id)?.floating_network_id === params.network_id && !required.has(byId.get(id)!.floating_ip_address),
        });
      }
    }
    if (!(await moveLeaseFloatingIpBookingsEnd(client, ctx.leaseId, ctx.endMs))) {
      const ids = [...new Set(existing.map((row) => row.floating_ip_id))];
      const next = await firstOtherFloatingIpBookingFrom(client, ids, ctx.leaseId, Math.min(...existing.map((row) => row.end_ms)));
      throw extensionRefused(ctx, NOT_ENOUGH, `address ${next?.floating_ip_address ?? '?'} is booked from ${next ? when(next.next_ms) : '?'}`, next?.next_ms);
    }
    if (wants.length > 0 && from < ctx.endMs) {
      const calendar = await this.snapshot(client, enrolled, from, ctx.endMs, 0);
      const taken = new Set(existing.map((row) => row.floating_ip_id));
      const free = new Set([...freeHosts(calendar, from, ctx.endMs)].filter((id) => !taken.has(id)));
      const extra = assignHosts(distinctKeys(wants), free, preferenceOrder(await this.snapshot(client, enrolled, from, null, 0), from));
      if (!extra) {
        throw leaseConflict(`${NOT_ENOUGH} Not enough free addresses to grow lease ${ctx.leaseName} now: ${wants.map((w) => `${w.min} more for reservation ${w.reservationId}`).join(', ')}.`);
      }
      await this.insert(client, ctx, extra, from, 0, key);
    }
    await setLeaseFloatingIpBookingKey(client, ctx.leaseId, key);
  }

  /** Books the assigned addresses from `from` to the lease's end, in one order for every transaction (no deadlocks between them). */
  private async insert(client: PoolClient, ctx: ReservationContext, assignment: Map<string, string[]>, from: number, leadMs: number, key: string): Promise<void> {
    const rows = [...assignment].flatMap(([reservationId, ids]) => ids.map((id) => ({ reservationId: reservationId.split('#')[0], id }))).sort((a, b) => a.id.localeCompare(b.id));
    for (const { reservationId, id } of rows) {
      await insertFloatingIpBooking(client, { floatingIpId: id, reservationId, leaseId: ctx.leaseId, projectId: ctx.projectId, fromMs: from, endMs: ctx.endMs, leadMs, bookingKey: key });
    }
  }

  /**
   * A reservation's requests to the matching: its required addresses (exactly those), and the rest
   * of its amount from the other enrolled addresses of its network. The first is keyed
   * `<id>#required`, so that both land in the reservation when booked.
   */
  private requests(reservation: Reservation, enrolled: FloatingIpRecord[]): HostRequest[] {
    const params = floatingIpParams.parse(reservation.params);
    const onNetwork = enrolled.filter((ip) => ip.floating_network_id === params.network_id);
    const required = new Set(params.required_floatingips);
    const requiredIds = new Set(onNetwork.filter((ip) => required.has(ip.floating_ip_address)).map((ip) => ip.id));
    if (requiredIds.size < required.size) throw this.notEnrolled(params, enrolled);
    if (onNetwork.length < params.amount) {
      throw leaseConflict(
        `${NOT_ENOUGH} It never fits: reservation ${reservation.id} needs ${params.amount} address(es) of network ${params.network_id}, which has ${onNetwork.length} reservable address(es) enrolled.`,
        NEVER_FITS,
      );
    }
    const rest = new Set(onNetwork.filter((ip) => !requiredIds.has(ip.id)).map((ip) => ip.id));
    const requests: HostRequest[] = [];
    if (requiredIds.size > 0) requests.push({ reservationId: `${reservation.id}#required`, min: requiredIds.size, max: requiredIds.size, matches: (id) => requiredIds.has(id) });
    const more = params.amount - requiredIds.size;
    if (more > 0) requests.push({ reservationId: reservation.id, min: more, max: more, matches: (id) => rest.has(id) });
    return requests;
  }

  private notEnrolled(params: FloatingIpParams, enrolled: FloatingIpRecord[]) {
    const known = new Set(enrolled.filter((ip) => ip.floating_network_id === params.network_id).map((ip) => ip.floating_ip_address));
    const missing = params.required_floatingips.filter((a) => !known.has(a));
    return invalidLease(`required_floatingips: ${missing.join(', ')} not enrolled as reservable on network ${params.network_id} (see GET /v1/floatingips)`);
  }

  /**
   * The bookings of the addresses that matter for a lease over [start, end) made ready `leadMs`
   * before its start, shifted by the lead (as the host calendar does), so that the pure matching
   * functions, which know only a gap after bookings, answer for the lead too.
   */
  private async snapshot(db: PoolClient | Pool, enrolled: FloatingIpRecord[], start: number, end: number | null, leadMs: number): Promise<CalendarSnapshot> {
    const ids = enrolled.map((ip) => ip.id);
    const rows = await blockedFloatingIpIntervals(db, { fromMs: start - leadMs, toMs: end, ids });
    return { hostIds: ids, blocked: rows.map((r) => ({ hostId: r.floating_ip_id, start: r.start_ms + leadMs, end: r.end_ms + leadMs })), cleaningMs: leadMs };
  }

  /** 409 that says what was short, when the same request would fit, and how long it can be from the asked start. */
  private async explainShortage(client: PoolClient, enrolled: FloatingIpRecord[], requests: HostRequest[], ctx: ReservationContext) {
    const future = await this.snapshot(client, enrolled, ctx.startMs, null, ctx.provisioningLeadMs);
    const free = freeHosts(future, ctx.startMs, ctx.endMs);
    const byId = new Map(enrolled.map((ip) => [ip.id, ip]));
    const short = requests
      .map((r) => {
        const matching = enrolled.filter((ip) => r.matches(ip.id));
        const busy = matching.filter((ip) => !free.has(ip.id)).map((ip) => byId.get(ip.id)!.floating_ip_address);
        const what = r.reservationId.endsWith('#required') ? 'required address(es)' : 'address(es)';
        return `${r.min} ${what} for reservation ${r.reservationId.split('#')[0]} (${matching.length - busy.length} of ${matching.length} free${busy.length && busy.length <= 8 ? `; booked: ${busy.join(', ')}` : ''})`;
      })
      .join('; ');
    return shortage(
      ctx,
      [`${NOT_ENOUGH} Not enough addresses free from ${when(ctx.startMs)} to ${when(ctx.endMs)}: needs ${short}`],
      wholeResourceFit(requests, future, ctx.startMs, ctx.endMs - ctx.startMs),
      'it never fits: not enough addresses enrolled',
    );
  }
}

/** Requests keyed apart (assignHosts answers per key; one reservation may have two, for disjoint addresses); `insert` drops the suffix. */
function distinctKeys(requests: HostRequest[]): HostRequest[] {
  return requests.map((r, i) => ({ ...r, reservationId: `${r.reservationId}#${i}` }));
}
