/**
 * Our extension: when is capacity free?
 * - `GET /v1/availability?start=…&end=…[&hypervisor_properties=…][&resource_properties=…]`:
 *   per matching host, the free intervals in the window: exact (`start_date`/`end_date`, Blazar's
 *   response format) and as request dates a lease can use (`start`/`end`: whole minutes inside
 *   the interval; null when it holds no whole minute). With `vcpus`, `memory_mb` and `disk_gb`,
 *   each host also says how many instance slots of that size it has free over the whole window
 *   (`free_slots`); with `network_id`, the answer lists the enrolled floating IPs of that network
 *   free over the whole window (`floatingips`).
 * - `POST /v1/availability/search` with a lease-create body: the earliest window where the whole
 *   lease fits (from its start_date), and the longest lease that fits from that start, as request
 *   dates a client can send back. Every resource type answers for its own reservations.
 */
import { Router } from 'express';
import { z } from 'zod';
import { searchLease } from '../domain/fit-search';
import { formatMessageDate as when, reuseEnd, reuseStart, wholeMinuteDown, wholeMinuteUp } from '../domain/dates';
import { type Reservation } from '../domain/lease';
import type { HostCalendar } from '../resources/physical-host/calendar';
import type { ResourceTypes } from '../domain/resource-plugin';
import type { Pool } from '../db/pool';
import { identityOf } from './auth';
import { formatBlazarDate } from '../domain/dates';
import { ApiError, parseRequest } from './errors';
import { propertyQueryParam, whole } from '../resources/shared/params';
import type { FloatingIpCalendar } from '../resources/floating-ip/calendar';
import type { InstanceSlotCalendar } from '../resources/virtual-instance/calendar';
import { createLeaseSchema, requestDateSchema } from './lease-schemas';
import { refuseUnknownPropertyKeys } from './property-keys';
import { checkHostQueryKeys } from '../resources/physical-host';

export const availabilityQuery = z.strictObject({
  start: requestDateSchema,
  end: requestDateSchema,
  // Checked here as in a reservation (syntax, depth): a bad one is a 400 naming it.
  hypervisor_properties: propertyQueryParam('["==", "$vcpus", "8"]'),
  resource_properties: propertyQueryParam('["==", "$gpu", "a100"]'),
  // An instance slot's size: free slots per host.
  vcpus: whole('vCPUs', 1, 2 ** 31 - 1).optional(),
  memory_mb: whole('MiB', 1, 2 ** 31 - 1).optional(),
  disk_gb: whole('GiB', 0, 2 ** 31 - 1).optional(),
  // An external network: its free floating IPs.
  network_id: z.uuid({ error: 'expected the id (a UUID) of an external network' }).optional(),
});

export function availabilityRouter(deps: {
  calendar: HostCalendar;
  slots: InstanceSlotCalendar;
  floatingIps: FloatingIpCalendar;
  types: ResourceTypes;
  pool: Pool;
  provisioningLeadMs: number;
  maxReservationsPerLease?: number;
}): Router {
  const router = Router();
  const leaseBody = createLeaseSchema(deps.types, deps.maxReservationsPerLease).omit({ recurrence: true, partial: true }); // one lease's window: no series

  router.get('/availability', async (req, res) => {
    const { start, end, vcpus, memory_mb: memoryMb, disk_gb: diskGb, network_id: networkId, ...queries } = parseRequest(availabilityQuery, req.query);
    if (end <= start) throw new ApiError(400, 'end must be later than start');
    if (end - start > 366 * 86_400_000) throw new ApiError(400, 'the window may span at most 366 days');
    const sized = [vcpus, memoryMb, diskGb].filter((v) => v !== undefined).length;
    if (sized !== 0 && sized !== 3) throw new ApiError(400, 'free slots need the whole size: vcpus, memory_mb and disk_gb');
    await checkHostQueryKeys(deps.pool, queries, identityOf(res));
    const hosts = await deps.calendar.freeIntervals(start, end, queries);
    const slots = sized === 3 ? await deps.slots.freeSlotsPerHost({ VCPU: vcpus!, MEMORY_MB: memoryMb!, DISK_GB: diskGb! }, start, end) : undefined;
    const addresses = networkId ? await deps.floatingIps.freeAddresses(networkId, start, end) : undefined;
    res.json({
      availability: hosts.map(({ host, free }) => ({
        host_id: host.id,
        hypervisor_hostname: host.hypervisor_hostname,
        free: free.map((f) => {
          const usable = wholeMinuteUp(f.start) < wholeMinuteDown(f.end);
          return { start_date: formatBlazarDate(f.start), end_date: formatBlazarDate(f.end), start: usable ? reuseStart(f.start) : null, end: usable ? reuseEnd(f.end) : null };
        }),
        ...(slots ? { free_slots: slots.get(host.id) ?? 0 } : {}),
      })),
      ...(addresses && networkId ? { floatingips: { network_id: networkId, free: addresses.map((ip) => ({ id: ip.id, floating_ip_address: ip.floating_ip_address })) } } : {}),
    });
  });

  router.post('/availability/search', async (req, res) => {
    const body = parseRequest(leaseBody, { name: 'search', ...(req.body as object) });
    // "now" as a create takes it (Blazar's): the current minute, so that the answer is what the create would book.
    const start = body.start_date === 'now' ? wholeMinuteDown(Date.now()) : body.start_date;
    if (body.end_date <= start) throw new ApiError(400, 'end_date must be later than start_date');
    await refuseUnknownPropertyKeys(deps.types, identityOf(res), body.reservations ?? []);
    const reservations: Reservation[] = (body.reservations ?? []).map((r, i) => ({ id: `search-${i}`, resource_type: r.resource_type, status: 'pending', params: r.params }));
    const duration = body.end_date - start;
    // As for a create, which may cut preemptible leases (issue 43).
    const { earliest, longestMs, cutShort, tried, searchedUntil } = await searchLease(deps.types, identityOf(res).projectId, reservations, start, duration, deps.provisioningLeadMs, { mayPreempt: true });
    // Dates for reuse: request dates on whole minutes (the earliest start is one), ends rounded down so that they still fit.
    const longestEnd = longestMs === Infinity ? Infinity : wholeMinuteDown(start + longestMs);
    res.json({
      earliest: earliest === undefined ? null : { start_date: reuseStart(earliest), end_date: reuseEnd(earliest + duration) },
      longest_from_start:
        longestMs === 0 || longestEnd <= wholeMinuteUp(start) ? null : { start_date: reuseStart(start), end_date: longestEnd === Infinity ? null : reuseEnd(longestEnd) },
      ...(cutShort ? { note: `no fit found within the first ${tried} candidate starts (until ${when(searchedUntil!)}): search again from a later start_date` } : {}),
    });
  });

  return router;
}
