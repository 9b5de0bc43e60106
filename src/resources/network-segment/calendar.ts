/**
 * The network segment calendar (issue 45): enrolled segments booked whole, one per reservation,
 * with the whole-resource matching the host and floating IP calendars share
 * (../shared/whole-resource-calendar.ts), so that a lease's network reservations competing for the
 * same segments all get theirs when that is possible at all. Booking is idempotent per lease; the
 * exclusion constraint `network_segment_allocations_no_double_booking` has the last word.
 *
 * Choice: the segment a pending lease held before, then segments with nothing booked from now on,
 * then any free over the window. No cleaning gap: the end deletes the network before the booking
 * is freed, so the tag is free in Neutron when the next lease's start needs it.
 */
import type { PoolClient } from 'pg';
import { invalidLease, leaseConflict, type Reservation } from '../../domain/lease';
import { preferenceOrder, type HostRequest } from '../../domain/host-calendar';
import { matchesQuery, parsePropertyQuery } from '../../domain/property-query';
import { sameTypeReservations, type ReservationContext } from '../../domain/resource-plugin';
import { findLease } from '../../db/leases';
import { listNetworkSegments, type NetworkSegmentRecord } from '../../db/network-segments';
import { networkSegmentBookings, segmentOfReservation } from '../../db/network-segment-allocations';
import type { Pool } from '../../db/pool';
import { bookedFor, bookInTransaction, bookingKey } from '../shared/booking';
import { alreadyBooked, NEVER_FITS, WholeResourceCalendar, type BlockedInterval, type NewWholeResourceBooking } from '../shared/whole-resource-calendar';
import { NETWORK, type NetworkSegmentParams } from './params';

const NOT_ENOUGH = 'Not enough network segments available.';

/** What a property query sees of a segment: its fields (a VXLAN segment's physical network as '') and its capabilities. */
export function segmentProperties(segment: NetworkSegmentRecord): Record<string, string> {
  return { ...segment.capabilities, network_type: segment.network_type, physical_network: segment.physical_network ?? '', segment_id: segment.segment_id };
}

/** Whether the segment answers both of the reservation's queries. */
export function segmentMatches(params: Pick<NetworkSegmentParams, 'network_properties' | 'resource_properties'>, segment: NetworkSegmentRecord): boolean {
  const properties = segmentProperties(segment);
  return [params.network_properties, params.resource_properties].every((text) => matchesQuery(parsePropertyQuery(text), properties));
}

/** How a segment is named in messages and the lease JSON: `vlan:physnet1:250`. */
export const segmentName = (segment: Pick<NetworkSegmentRecord, 'network_type' | 'physical_network' | 'segment_id'>) =>
  `${segment.network_type}:${segment.physical_network !== null ? `${segment.physical_network}:` : ''}${segment.segment_id}`;

export class NetworkSegmentCalendar extends WholeResourceCalendar<NetworkSegmentRecord, NetworkSegmentRecord, []> {
  protected readonly notEnough = NOT_ENOUGH;
  protected readonly noun = 'segment';
  protected readonly nouns = 'segments';
  protected readonly neverFits = 'it never fits: no enrolled network segment matches';

  constructor(pool: Pool) {
    super(pool, networkSegmentBookings, 0);
  }

  /** Books the lease's network reservations for [ctx.startMs, ctx.endMs) in its own transaction; returns this reservation's segment. */
  book(ctx: ReservationContext<NetworkSegmentParams>): Promise<NetworkSegmentRecord> {
    return bookInTransaction(this.pool, (client) => this.bookWithin(client, ctx), { retryExclusion: true });
  }

  /** The same inside the caller's transaction (the API's admission). */
  async bookWithin(client: PoolClient, ctx: ReservationContext<NetworkSegmentParams>): Promise<NetworkSegmentRecord> {
    await this.bookIn(client, ctx);
    const segment = await segmentOfReservation(client, ctx.reservation.id);
    if (!segment) throw new Error(`reservation ${ctx.reservation.id} was booked but holds no segment`);
    return segment;
  }

  /**
   * A started lease whose network reservations hold their segments, booked for their parameters:
   * the new window (an early end, an extension) decided here alone. False when it is not that case.
   */
  async moveWindow(ctx: ReservationContext<NetworkSegmentParams>): Promise<boolean> {
    if (ctx.leaseStatus === 'PENDING') return false;
    return bookInTransaction(
      this.pool,
      async (client) => {
        const reservations = sameTypeReservations(ctx);
        const existing = await networkSegmentBookings.lockLease(client, ctx.leaseId);
        const asked = reservations.map((r) => [r.id, r.params]);
        const holdsAll = reservations.every((r) => existing.some((row) => row.reservation_id === r.id));
        if (existing.length === 0 || !holdsAll || !existing.every((row) => bookedFor(row.booking_key, asked))) return false;
        await this.bookIn(client, ctx);
        return true;
      },
      { retryExclusion: true },
    );
  }

  segmentOf(reservationId: string): Promise<NetworkSegmentRecord | undefined> {
    return segmentOfReservation(this.pool, reservationId);
  }

  protected async searchRequests(reservations: Reservation<NetworkSegmentParams>[]): Promise<{ resources: NetworkSegmentRecord[]; requests: HostRequest[] }> {
    const enrolled = await listNetworkSegments(this.pool);
    return { resources: enrolled, requests: reservations.filter((r) => r.resource_type === NETWORK).map((r) => this.request(r, enrolled)) };
  }

  private request(reservation: Reservation<NetworkSegmentParams>, enrolled: NetworkSegmentRecord[]): HostRequest {
    const matching = new Set(enrolled.filter((segment) => segmentMatches(reservation.params, segment)).map((s) => s.id));
    return { reservationId: reservation.id, min: 1, max: 1, matches: (id) => matching.has(id) };
  }

  private async bookIn(client: PoolClient, ctx: ReservationContext<NetworkSegmentParams>): Promise<void> {
    const reservations = sameTypeReservations(ctx);
    const existing = await networkSegmentBookings.lockLease(client, ctx.leaseId);
    const key = bookingKey(reservations.map((r) => [r.id, r.params]), [ctx.startMs, ctx.endMs]);
    // Already booked for exactly this request (a sibling's call booked us, or a retry): nothing to do.
    if (alreadyBooked(existing, key)) return;
    const enrolled = await listNetworkSegments(client);
    const requests = reservations.map((r) => this.request(r, enrolled));
    const never = requests.find((r) => !enrolled.some((s) => r.matches(s.id)));
    if (never) {
      throw leaseConflict(`${NOT_ENOUGH} It never fits: no enrolled network segment matches the properties of reservation ${never.reservationId} (${enrolled.length} enrolled).`, NEVER_FITS);
    }

    if (ctx.leaseStatus !== 'PENDING' && existing.length > 0) {
      // A started lease keeps its segments (its network is on them): only its end moves; a reservation added since gets one from now.
      await this.refuseChangesOfStarted(ctx, reservations, existing, enrolled);
      await this.moveEndOrRefuse(client, ctx, existing);
      const missing = requests.filter((r) => !existing.some((row) => row.reservation_id === r.reservationId));
      const from = Math.max(Date.now(), ctx.startMs);
      if (missing.length > 0 && from < ctx.endMs) {
        const assignment = await this.assignFree(client, ctx, enrolled, missing, from, existing);
        if (!assignment) throw await this.explainShortage(client, ctx, enrolled, missing);
        await this.insert(client, ctx, assignment, from, key, 0);
      }
      await networkSegmentBookings.setLeaseKey(client, ctx.leaseId, key);
      return;
    }

    await networkSegmentBookings.deleteLease(client, ctx.leaseId);
    const now = Date.now();
    await this.bookAnew(client, ctx, enrolled, requests, key, existing, { preferred: async () => preferenceOrder(await this.snapshot(client, enrolled, now, null, 0), now) });
  }

  /**
   * A started reservation's segment and network stay as they are: new queries its segment does not
   * answer, or a new network name or description (the network in Neutron keeps its own), are
   * refused as Blazar refuses what an update cannot do (400), before anything moves.
   */
  private async refuseChangesOfStarted(ctx: ReservationContext<NetworkSegmentParams>, reservations: Reservation<NetworkSegmentParams>[], existing: { reservation_id: string; resource_id: string }[], enrolled: NetworkSegmentRecord[]): Promise<void> {
    const recorded = (await findLease(this.pool, ctx.leaseId))?.reservations ?? [];
    for (const reservation of reservations) {
      const held = existing.find((row) => row.reservation_id === reservation.id);
      const segment = held && enrolled.find((s) => s.id === held.resource_id);
      if (!segment) continue;
      const refused = (why: string) => invalidLease(`Network reservation cannot be updated with requested parameters. ${why} (reservation ${reservation.id}).`);
      if (!segmentMatches(reservation.params, segment)) throw refused(`Its segment ${segmentName(segment)} does not match the new network_properties or resource_properties, and a started reservation keeps its segment`);
      const before = recorded.find((r) => r.id === reservation.id)?.params as Partial<NetworkSegmentParams> | undefined;
      if (before && (before.network_name !== reservation.params.network_name || (before.network_description ?? '') !== reservation.params.network_description)) {
        throw refused('Updating network_name or network_description of a started reservation is not supported');
      }
    }
  }

  protected async blocked(db: Pool | PoolClient, window: { fromMs: number; toMs: number | null; ids: string[] }): Promise<BlockedInterval[]> {
    const rows = await networkSegmentBookings.blocked(db, window);
    return rows.map((r) => ({ resourceId: r.resource_id, start_ms: r.start_ms, end_ms: r.end_ms }));
  }

  protected insertOne(client: PoolClient, booking: NewWholeResourceBooking): Promise<void> {
    return networkSegmentBookings.insert(client, booking);
  }

  protected compareIds(a: string, b: string): number {
    return a.localeCompare(b);
  }

  protected describeShort(request: HostRequest, enrolled: NetworkSegmentRecord[], free: Set<string>): string {
    // Counts only: which segments others booked is theirs to know.
    const matching = enrolled.filter((s) => request.matches(s.id));
    return `1 segment for reservation ${request.reservationId} (${matching.filter((s) => free.has(s.id)).length} of ${matching.length} matching free)`;
  }
}
