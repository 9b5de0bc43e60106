/**
 * The floating IP calendar: enrolled addresses booked whole, like hosts, with the same matching
 * (src/domain/host-calendar.ts) so that a lease's reservations competing for one network's
 * addresses all get theirs when that is possible at all. Booking runs in one transaction,
 * idempotent per lease; the exclusion constraint `floating_ip_allocations_no_double_booking` has
 * the last word (a concurrent booking that took a chosen address first: choose again).
 *
 * Choice, as Blazar's: the required addresses, then addresses with nothing booked from now on,
 * then any free over the window. No cleaning gap: an address is free again the moment its lease
 * ends (Blazar applies its host cleaning time here too, for no reason an address has). What it
 * shares with the host calendar is in ../shared/whole-resource-calendar.ts.
 */
import type { PoolClient } from 'pg';
import { invalidLease, leaseConflict, type Reservation } from '../../domain/lease';
import { freeHosts, preferenceOrder, type HostRequest } from '../../domain/host-calendar';
import { sameTypeReservations, type ReservationContext } from '../../domain/resource-plugin';
import { deleteFloatingIpBookings, floatingIpBookings, floatingIpsOfReservation, listFloatingIps, type FloatingIpRecord } from '../../db/floating-ips';
import type { Pool } from '../../db/pool';
import type { WholeResourceBookingRow } from '../../db/range-bookings';
import { bookedFor, bookInTransaction, bookingKey } from '../shared/booking';
import { alreadyBooked, NEVER_FITS, WholeResourceCalendar, type BlockedInterval, type NewWholeResourceBooking } from '../shared/whole-resource-calendar';
import type { FloatingIpParams } from './params';

export const VIRTUAL_FLOATINGIP = 'virtual:floatingip';

const NOT_ENOUGH = 'Not enough floating IPs available.';

/** What an active reservation may not lose when it shrinks: addresses that carry traffic now. */
export interface BookingOptions {
  /** Per reservation id, its addresses associated with a port in Neutron. */
  inUse?: Map<string, Set<string>>;
}

export class FloatingIpCalendar extends WholeResourceCalendar<FloatingIpRecord, FloatingIpRecord[], [options?: BookingOptions]> {
  protected readonly notEnough = NOT_ENOUGH;
  protected readonly noun = 'address';
  protected readonly nouns = 'addresses';
  protected readonly neverFits = 'it never fits: not enough addresses enrolled';

  constructor(pool: Pool) {
    super(pool, floatingIpBookings, 0);
  }

  /** Books the lease's floating IP reservations for [ctx.startMs, ctx.endMs); returns this reservation's addresses. */
  async book(ctx: ReservationContext<FloatingIpParams>, options: BookingOptions = {}): Promise<FloatingIpRecord[]> {
    return bookInTransaction(
      this.pool,
      async (client) => {
        await this.bookIn(client, ctx, options);
        return floatingIpsOfReservation(client, ctx.reservation.id);
      },
      { retryExclusion: true },
    );
  }

  /**
   * A started lease whose floating IP reservations hold their addresses, booked for their
   * parameters: the new window (an early end, an extension) decided here alone, every address kept
   * (no Neutron read: nothing is given up, nothing added). False when it is not that case: the
   * type's reserve books it then.
   */
  async moveWindow(ctx: ReservationContext<FloatingIpParams>): Promise<boolean> {
    if (ctx.leaseStatus === 'PENDING') return false;
    return bookInTransaction(
      this.pool,
      async (client) => {
        const reservations = sameTypeReservations(ctx);
        const existing = await floatingIpBookings.lockLease(client, ctx.leaseId);
        const asked = reservations.map((r) => [r.id, r.params]);
        const holdsAll = (r: Reservation<FloatingIpParams>) => {
          const held = existing.filter((row) => row.reservation_id === r.id).map((row) => row.name);
          return held.length === r.params.amount && r.params.required_floatingips.every((a) => held.includes(a));
        };
        if (existing.length === 0 || !existing.every((row) => bookedFor(row.booking_key, asked)) || !reservations.every(holdsAll)) return false;
        await this.bookIn(client, ctx, {});
        return true;
      },
      { retryExclusion: true },
    );
  }

  addresses(reservationId: string): Promise<FloatingIpRecord[]> {
    return floatingIpsOfReservation(this.pool, reservationId);
  }

  /** The network's enrolled addresses free over the whole window [start, end) (availability: what a lease could get). */
  async freeAddresses(networkId: string, start: number, end: number): Promise<FloatingIpRecord[]> {
    const enrolled = (await listFloatingIps(this.pool, { reservableOnly: true })).filter((ip) => ip.floating_network_id === networkId);
    const free = freeHosts(await this.snapshot(this.pool, enrolled, start, end, 0), start, end);
    return enrolled.filter((ip) => free.has(ip.id));
  }

  protected async searchRequests(reservations: Reservation<FloatingIpParams>[]): Promise<{ resources: FloatingIpRecord[]; requests: HostRequest[] }> {
    const enrolled = await listFloatingIps(this.pool, { reservableOnly: true });
    return { resources: enrolled, requests: reservations.filter((r) => r.resource_type === VIRTUAL_FLOATINGIP).flatMap((r) => this.requests(r, enrolled)) };
  }

  private async bookIn(client: PoolClient, ctx: ReservationContext<FloatingIpParams>, options: BookingOptions): Promise<void> {
    const reservations = sameTypeReservations(ctx);
    const existing = await floatingIpBookings.lockLease(client, ctx.leaseId);
    const key = bookingKey(reservations.map((r) => [r.id, r.params]), [ctx.startMs, ctx.endMs]);
    // Already booked for exactly this request (a sibling's call booked us, or a retry): nothing to do.
    if (alreadyBooked(existing, key)) return;

    const enrolled = await listFloatingIps(client, { reservableOnly: true });
    if (ctx.leaseStatus !== 'PENDING' && existing.length > 0) {
      await this.updateActive(client, ctx, reservations, existing, enrolled, key, options);
      return;
    }

    await floatingIpBookings.deleteLease(client, ctx.leaseId);
    const requests = reservations.flatMap((r) => this.requests(r, enrolled));
    // Never-booked addresses first: those booked from now on, whenever, come last (kept for the leases that asked for them).
    const now = Date.now();
    await this.bookAnew(client, ctx, enrolled, requests, key, existing, { preferred: async () => preferenceOrder(await this.snapshot(client, enrolled, now, null, 0), now) });
  }

  /**
   * An active lease keeps the addresses it has (its end may move); a reservation may grow (new
   * addresses from now to the end) and shrink by addresses not associated with a port.
   */
  private async updateActive(
    client: PoolClient,
    ctx: ReservationContext<FloatingIpParams>,
    reservations: Reservation<FloatingIpParams>[],
    existing: WholeResourceBookingRow[],
    enrolled: FloatingIpRecord[],
    key: string,
    options: BookingOptions,
  ): Promise<void> {
    const byId = new Map(enrolled.map((ip) => [ip.id, ip]));
    const from = Math.max(Date.now(), ctx.startMs);
    const wants: HostRequest[] = [];
    for (const reservation of reservations) {
      const params = reservation.params;
      const held = existing.filter((row) => row.reservation_id === reservation.id);
      const network = held.map((row) => byId.get(row.resource_id)?.floating_network_id).find((n) => n !== undefined);
      if (network !== undefined && network !== params.network_id) {
        throw invalidLease(`Floating IP reservation cannot be updated with requested parameters. Updating network_id is not supported (reservation ${reservation.id}).`);
      }
      const required = new Set(params.required_floatingips);
      const inUse = options.inUse?.get(reservation.id) ?? new Set<string>();
      const missingRequired = params.required_floatingips.filter((a) => !held.some((row) => row.name === a));
      const mustKeep = held.filter((row) => required.has(row.name) || inUse.has(row.name));
      const room = params.amount - missingRequired.length;
      if (mustKeep.length > room) {
        const used = mustKeep
          .filter((row) => inUse.has(row.name))
          .map((row) => row.name)
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
      const drop = held.filter((row) => !keep.includes(row)).map((row) => row.resource_id);
      if (drop.length > 0) await deleteFloatingIpBookings(client, reservation.id, drop);
      const heldIds = new Set(held.map((row) => row.resource_id));
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
    await this.moveEndOrRefuse(client, ctx, existing);
    if (wants.length > 0 && from < ctx.endMs) {
      const extra = await this.assignFree(client, ctx, enrolled, distinctKeys(wants), from, existing, async () => preferenceOrder(await this.snapshot(client, enrolled, from, null, 0), from));
      if (!extra) {
        throw leaseConflict(`${NOT_ENOUGH} Not enough free addresses to grow lease ${ctx.leaseName} now: ${wants.map((w) => `${w.min} more for reservation ${w.reservationId}`).join(', ')}.`);
      }
      await this.insert(client, ctx, extra, from, key, 0);
    }
    await floatingIpBookings.setLeaseKey(client, ctx.leaseId, key);
  }

  /**
   * A reservation's requests to the matching: its required addresses (exactly those), and the rest
   * of its amount from the other enrolled addresses of its network. The first is keyed
   * `<id>#required`, so that both land in the reservation when booked.
   */
  private requests(reservation: Reservation<FloatingIpParams>, enrolled: FloatingIpRecord[]): HostRequest[] {
    const params = reservation.params;
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

  protected async blocked(db: Pool | PoolClient, window: { fromMs: number; toMs: number | null; ids: string[] }): Promise<BlockedInterval[]> {
    const rows = await floatingIpBookings.blocked(db, window);
    return rows.map((r) => ({ resourceId: r.resource_id, start_ms: r.start_ms, end_ms: r.end_ms }));
  }

  protected insertOne(client: PoolClient, booking: NewWholeResourceBooking): Promise<void> {
    return floatingIpBookings.insert(client, booking);
  }

  protected compareIds(a: string, b: string): number {
    return a.localeCompare(b);
  }

  protected describeShort(request: HostRequest, enrolled: FloatingIpRecord[], free: Set<string>): string {
    const matching = enrolled.filter((ip) => request.matches(ip.id));
    const busy = matching.filter((ip) => !free.has(ip.id)).map((ip) => ip.floating_ip_address);
    const required = request.reservationId.endsWith('#required');
    // Only addresses the caller named are named back: which pool addresses others booked is theirs to know.
    const named = required && busy.length <= 8 ? `; booked: ${busy.join(', ')}` : '';
    return `${request.min} ${required ? 'required address(es)' : 'address(es)'} for reservation ${request.reservationId.split('#')[0]} (${matching.length - busy.length} of ${matching.length} free${named})`;
  }

  private notEnrolled(params: FloatingIpParams, enrolled: FloatingIpRecord[]) {
    const known = new Set(enrolled.filter((ip) => ip.floating_network_id === params.network_id).map((ip) => ip.floating_ip_address));
    const missing = params.required_floatingips.filter((a) => !known.has(a));
    return invalidLease(`required_floatingips: ${missing.join(', ')} not enrolled as reservable on network ${params.network_id} (see GET /v1/floatingips)`);
  }

}

/** Requests keyed apart (assignHosts answers per key; one reservation may have two, for disjoint addresses); `insert` drops the suffix. */
function distinctKeys(requests: HostRequest[]): HostRequest[] {
  return requests.map((r, i) => ({ ...r, reservationId: `${r.reservationId}#${i}` }));
}
