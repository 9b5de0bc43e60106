/**
 * Our extension: when is capacity free?
 * - `GET /v1/availability?start=…&end=…[&hypervisor_properties=…][&resource_properties=…]`:
 *   per matching host, the free intervals in the window.
 * - `POST /v1/availability/search` with a lease-create body: the earliest window where the whole
 *   lease fits (from its start_date), and the longest lease that fits from that start.
 */
import { Router } from 'express';
import { z } from 'zod';
import type { Reservation } from '../domain/lease';
import type { HostCalendar } from '../resources/physical-host/calendar';
import type { ResourcePlugins } from '../resources/plugin';
import { formatLeaseDate } from './blazar-format';
import { ApiError } from './errors';
import { createLeaseSchema, describeIssues, requestDate } from './lease-schemas';

const availabilityQuery = z.strictObject({
  start: requestDate,
  end: requestDate,
  hypervisor_properties: z.string().optional(),
  resource_properties: z.string().optional(),
});

export function availabilityRouter(deps: { calendar: HostCalendar; plugins: ResourcePlugins }): Router {
  const router = Router();
  const leaseBody = createLeaseSchema(deps.plugins);

  router.get('/availability', async (req, res) => {
    const parsed = availabilityQuery.safeParse(req.query);
    if (!parsed.success) throw new ApiError(400, describeIssues(parsed.error));
    const { start, end, ...queries } = parsed.data;
    if (end <= start) throw new ApiError(400, 'end must be later than start');
    if (end - start > 366 * 86_400_000) throw new ApiError(400, 'the window may span at most 366 days');
    const hosts = await deps.calendar.freeIntervals(start, end, queries);
    res.json({
      availability: hosts.map(({ host, free }) => ({
        host_id: host.id,
        hypervisor_hostname: host.hypervisor_hostname,
        free: free.map((f) => ({ start_date: formatLeaseDate(f.start), end_date: formatLeaseDate(f.end) })),
      })),
    });
  });

  router.post('/availability/search', async (req, res) => {
    const parsed = leaseBody.safeParse({ name: 'search', ...(req.body as object) });
    if (!parsed.success) throw new ApiError(400, describeIssues(parsed.error));
    const body = parsed.data;
    const start = body.start_date === 'now' ? Date.now() : body.start_date;
    if (body.end_date <= start) throw new ApiError(400, 'end_date must be later than start_date');
    const reservations: Reservation[] = (body.reservations ?? []).map((r, i) => ({ id: `search-${i}`, resource_type: r.resource_type, status: 'pending', params: r.params }));
    const { earliest, longestMs } = await deps.calendar.search(reservations, start, body.end_date - start);
    res.json({
      earliest: earliest === undefined ? null : { start_date: formatLeaseDate(earliest), end_date: formatLeaseDate(earliest + (body.end_date - start)) },
      longest_from_start: longestMs === 0 ? null : { start_date: formatLeaseDate(start), end_date: longestMs === Infinity ? null : formatLeaseDate(start + longestMs) },
    });
  });

  return router;
}
