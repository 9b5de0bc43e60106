/**
 * Our extension behind the calendar page: `GET /v1/calendar?start=…&end=…[&hypervisor_properties=…][&resource_properties=…]`,
 * everything the page draws for one visible window in one answer: the matching reservable hosts and
 * their bookings, the enrolled network segments and theirs (issue 45), the Placement providers (servers' compute capacity, bandwidth) with the
 * quantities booked on them, and the caller's project's own leases in the window. Instants are
 * epoch milliseconds (the page does arithmetic on them).
 *
 * Same policy as the rest of the API: a caller's own project's bookings (every booking for an admin)
 * carry their lease's id, name and status; another project's say only `reserved`. Private host
 * capabilities are the admins'. A preemptible booking says so (anyone's); a preempted lease's bookings
 * say `preempted` and the end it was cut to (`cut_ms`) to whoever may know the lease. Lent time (issue
 * 43) is drawn apart (`lent`: capacity a preemptible lease may use, shown to anyone; the lending lease
 * only to whoever may know it), and a booking inside it says `borrowed`. Hosts powered off (issue 48:
 * `powered_off`, since when and the planned wake) are the admins' only: a member learns nothing of
 * hosts' power, other projects' or not.
 */
import { Router } from 'express';
import { z } from 'zod';
import { hostBookingsInWindow, type HostBookingInWindow } from '../db/host-allocations';
import { lendingsInWindow, type HostLending } from '../db/host-lendings';
import { listLeases } from '../db/leases';
import { isPreemptibleLease } from '../domain/preemption';
import { seriesGapsInWindow } from '../db/series';
import { quantityBookingsInWindow, type QuantityBookingInWindow } from '../db/quantity-allocations';
import { listNetworkSegments } from '../db/network-segments';
import { networkSegmentBookingsInWindow } from '../db/network-segment-allocations';
import type { Pool } from '../db/pool';
import type { HostCalendar } from '../resources/physical-host/calendar';
import type { HostPower } from '../resources/physical-host/power';
import { propertyQueryParam } from '../resources/shared/params';
import { identityOf, type Identity } from './auth';
import { ApiError, parseRequest } from './errors';
import { requestDateSchema } from './lease-schemas';
import { checkHostQueryKeys } from '../resources/physical-host';

export const calendarQuery = z.strictObject({
  start: requestDateSchema,
  end: requestDateSchema,
  hypervisor_properties: propertyQueryParam('["==", "$vcpus", "8"]'),
  resource_properties: propertyQueryParam('["==", "$gpu", "a100"]'),
});

/** A month view with a week to scroll either side. */
export const MAX_CALENDAR_WINDOW_MS = 93 * 86_400_000;
/** Bookings of each kind in one answer (~120 bytes of JSON each): past it the answer says `truncated`. */
export const MAX_CALENDAR_BOOKINGS = 30_000;
/** The caller's own leases in the window (those without bookings too: a lease of no resources, or being set up). */
export const MAX_CALENDAR_LEASES = 500;
/** The caller's series with gaps in the window (each at most LK_MAX_OCCURRENCES gaps). */
export const MAX_CALENDAR_SERIES = 100;

type LeaseColumns = Pick<HostBookingInWindow, 'lease_id' | 'reservation_id' | 'project_id' | 'lease_name' | 'status' | 'start_ms' | 'end_ms' | 'hold_expires_ms'>;

/** Whether the caller may know whose booking it is: its own project's, or any for an admin. */
const mayKnowLease = (identity: Identity, row: Pick<LeaseColumns, 'project_id'>) => identity.isAdmin || row.project_id === identity.projectId;

/** Whose booking it is, as far as the caller may know. */
function visibleLease(identity: Identity, row: LeaseColumns) {
  const span = { start_ms: row.start_ms, end_ms: row.end_ms };
  if (!mayKnowLease(identity, row)) return { ...span, reserved: true };
  return {
    ...span,
    lease_id: row.lease_id,
    reservation_id: row.reservation_id,
    lease_name: row.lease_name,
    status: row.status,
    // An offer hold of the caller's (its lease_id is the hold's id): drawn as held, with its expiry.
    ...(row.hold_expires_ms !== null ? { held: true, hold_id: row.lease_id, expires_at_ms: row.hold_expires_ms } : {}),
    ...(identity.isAdmin ? { project_id: row.project_id, mine: row.project_id === identity.projectId } : { mine: true }),
  };
}

/**
 * Preemptible is said of every booking (capacity a regular lease may take back, as offers count it);
 * that a lease was preempted, and its cut, only to whoever may know the lease. Set in place: spreads
 * cost, one per booking of the answer.
 */
function withPreemption(identity: Identity, row: HostBookingInWindow, booking: Record<string, unknown>): Record<string, unknown> {
  if (row.preemptible) booking.preemptible = true;
  if (row.borrowed) booking.borrowed = true;
  if (row.cut_ms !== null && mayKnowLease(identity, row)) Object.assign(booking, { preempted: true, cut_ms: row.cut_ms });
  return booking;
}

/** A host's lent span: back in its lender's hands (`returned`), being taken back (`reclaiming`), or `lent`. */
function visibleLending(identity: Identity, lending: HostLending) {
  const state = lending.returned_ms !== null ? 'returned' : lending.reclaimed_ms !== null ? 'reclaiming' : 'lent';
  return { host_id: lending.host_id, start_ms: lending.start_ms, end_ms: lending.end_ms, state, ...(mayKnowLease(identity, lending) ? { lease_id: lending.lease_id } : {}) };
}

/**
 * `power`: hosts' power for the admins' shading; `wakeMarginMs`: the planner's margin (null: no
 * planner runs, so no wake is planned).
 */
export function calendarRouter(deps: { pool: Pool; calendar: HostCalendar; power?: { hostPower: HostPower; wakeMarginMs: number | null } }): Router {
  const router = Router();

  router.get('/calendar', async (req, res) => {
    const { start, end, ...queries } = parseRequest(calendarQuery, req.query);
    if (end <= start) throw new ApiError(400, 'end must be later than start');
    if (end - start > MAX_CALENDAR_WINDOW_MS) throw new ApiError(400, `the window may span at most ${MAX_CALENDAR_WINDOW_MS / 86_400_000} days`);
    const identity = identityOf(res);
    await checkHostQueryKeys(deps.pool, queries, identity);
    const hosts = await deps.calendar.matchingHosts(queries);
    const window = { fromMs: start, toMs: end, limit: MAX_CALENDAR_BOOKINGS + 1 };
    const now = Date.now();
    const [hostBookings, lendings, quantities, ownLeases, gaps, segments, segmentBookings, poweredOff] = await Promise.all([
      hostBookingsInWindow(deps.pool, { ...window, hostIds: hosts.map((h) => h.id) }),
      lendingsInWindow(deps.pool, { ...window, hostIds: hosts.map((h) => h.id) }),
      quantityBookingsInWindow(deps.pool, window),
      listLeases(deps.pool, { projectId: identity.projectId, from: start, to: end, limit: MAX_CALENDAR_LEASES }),
      seriesGapsInWindow(deps.pool, identity.projectId, start, end, MAX_CALENDAR_SERIES),
      listNetworkSegments(deps.pool),
      networkSegmentBookingsInWindow(deps.pool, window),
      identity.isAdmin && deps.power ? deps.power.hostPower.poweredOff(hosts.map((h) => h.id), now, deps.power.wakeMarginMs) : undefined,
    ]);
    // The series of the caller's own leases, for the page to link their bars (a series's gaps are drawn on its hosts' rows).
    const seriesOf = new Map(ownLeases.filter((l) => l.seriesId).map((l) => [l.id, l.seriesId!]));
    const inSeries = (leaseId: string | null | undefined) => (leaseId && seriesOf.has(leaseId) ? { series_id: seriesOf.get(leaseId) } : {});
    const segmentRows = new Map<string, unknown[]>();
    for (const b of segmentBookings.slice(0, MAX_CALENDAR_BOOKINGS)) {
      const row = segmentRows.get(b.network_segment_id) ?? [];
      row.push({ ...visibleLease(identity, b), ...inSeries(b.lease_id) });
      segmentRows.set(b.network_segment_id, row);
    }
    const truncated = hostBookings.length > MAX_CALENDAR_BOOKINGS || segmentBookings.length > MAX_CALENDAR_BOOKINGS || lendings.length > MAX_CALENDAR_BOOKINGS || quantities.bookings.length > MAX_CALENDAR_BOOKINGS || ownLeases.length > MAX_CALENDAR_LEASES;
    res.json({
      start_ms: start,
      end_ms: end,
      now_ms: now,
      hosts: hosts.map((h) => ({
        id: h.id,
        hypervisor_hostname: h.hypervisor_hostname,
        vcpus: h.vcpus,
        memory_mb: h.memory_mb,
        local_gb: h.local_gb,
        properties: identity.isAdmin ? h.capabilities : Object.fromEntries(Object.entries(h.capabilities).filter(([name]) => !h.private_capabilities.includes(name))),
      })),
      bookings: hostBookings.slice(0, MAX_CALENDAR_BOOKINGS).map((b) => withPreemption(identity, b, { host_id: b.host_id, ...(b.shared ? { shared: true } : {}), ...visibleLease(identity, b), ...inSeries(b.lease_id) })),
      lent: lendings.slice(0, MAX_CALENDAR_BOOKINGS).map((l) => visibleLending(identity, l)),
      // Admins only: the hosts powered off now, since when, and when the planner will wake them (null: not planned).
      ...(poweredOff ? { powered_off: poweredOff.filter((p) => p.sinceMs < end).map((p) => ({ host_id: p.hostId, since_ms: p.sinceMs, wake_ms: p.wakeAtMs })) } : {}),
      providers: quantities.providers.map((p) => ({ uuid: p.uuid, name: p.name, host: p.host, kind: p.kind, capacity: p.capacity, usable: p.usable })),
      usage: quantities.bookings.slice(0, MAX_CALENDAR_BOOKINGS).map((b: QuantityBookingInWindow) => ({ provider_uuid: b.provider_uuid, amounts: b.amounts, ...visibleLease(identity, b) })),
      // Network segments (issue 45) and their bookings, as hosts' (capabilities: the admins').
      networks: segments.map((n) => ({
        id: n.id,
        network_type: n.network_type,
        physical_network: n.physical_network,
        segment_id: n.segment_id,
        ...(identity.isAdmin ? { properties: n.capabilities } : {}),
        bookings: segmentRows.get(n.id) ?? [],
      })),
      // The caller's project's leases overlapping the window, booked or not.
      leases: ownLeases.slice(0, MAX_CALENDAR_LEASES).map((l) => ({ id: l.id, name: l.name, status: l.status, start_ms: l.startMs, end_ms: l.endMs, ...(l.seriesId ? { series_id: l.seriesId } : {}), ...(isPreemptibleLease(l) ? { preemptible: true } : {}) })),
      // The caller's project's series with occurrences refused in the window (partial creates): their gaps.
      series: gaps.map((g) => ({ id: g.id, name: g.name, gaps: g.gaps.map((o) => ({ name: o.name, start_ms: o.startMs, end_ms: o.endMs, reason: o.reason })) })),
      ...(truncated ? { truncated: true, note: `more than ${MAX_CALENDAR_BOOKINGS} bookings or ${MAX_CALENDAR_LEASES} of your leases in the window: showing the first; narrow the window or the hosts` } : {}),
    });
  });

  return router;
}
