/**
 * Blazar's host allocations: `GET /v1/os-hosts/allocations` and `GET /v1/os-hosts/{id}/allocation`.
 * Admins see every booking; others see their own project's (Blazar shows these to admins only).
 */
import { Router } from 'express';
import { z } from 'zod';
import { allocationBatches, listAllocations, type AllocationEntry } from '../db/host-allocations';
import { hostExists, isHostId } from '../db/hosts';
import type { Pool } from '../db/pool';
import { identityOf } from './auth';
import { formatLeaseDate } from './blazar-format';
import { ApiError } from './errors';
import { sendJsonParts } from './json-stream';
import { describeIssues, requestDate } from './lease-schemas';

const allocationQuery = z.strictObject({
  lease_id: z.uuid({ error: 'expected a lease id' }).optional(),
  reservation_id: z.uuid({ error: 'expected a reservation id' }).optional(),
  from: requestDate.optional(),
  to: requestDate.optional(),
});

/** Bookings per query of the allocations list (~200 bytes of JSON each). */
const LIST_BATCH_SIZE = 1_000;

const reservationOf = (e: AllocationEntry) => ({ id: e.reservation_id, lease_id: e.lease_id, project_id: e.project_id, start_date: formatLeaseDate(e.start_ms), end_date: formatLeaseDate(e.end_ms) });

/** Blazar's shape: one entry per host, with the reservations booked on it. */
function byHost(entries: AllocationEntry[]) {
  const hosts = new Map<string, { resource_id: string; hypervisor_hostname: string; reservations: unknown[] }>();
  for (const e of entries) {
    const host = hosts.get(e.host_id) ?? { resource_id: e.host_id, hypervisor_hostname: e.hypervisor_hostname, reservations: [] };
    host.reservations.push(reservationOf(e));
    hosts.set(e.host_id, host);
  }
  return [...hosts.values()];
}

/** The same shape, `{"allocations":[…]}`, written batch by batch: the bookings come ordered by host, so a host's entry closes when the next begins. */
async function* byHostParts(batches: AsyncIterable<AllocationEntry[]>): AsyncGenerator<string> {
  let text = '{"allocations":[';
  let host: string | undefined;
  for await (const batch of batches) {
    for (const e of batch) {
      if (e.host_id !== host) {
        if (host !== undefined) text += ']},';
        text += `${JSON.stringify({ resource_id: e.host_id, hypervisor_hostname: e.hypervisor_hostname }).slice(0, -1)},"reservations":[`;
        host = e.host_id;
      } else {
        text += ',';
      }
      text += JSON.stringify(reservationOf(e));
    }
    yield text;
    text = '';
  }
  yield `${text}${host === undefined ? '' : ']}'}]}`;
}

export function hostAllocationsRouter(deps: { pool: Pool }): Router {
  const router = Router();

  router.get('/os-hosts/allocations', async (req, res) => {
    const parsed = allocationQuery.safeParse(req.query);
    if (!parsed.success) throw new ApiError(400, describeIssues(parsed.error));
    const identity = identityOf(res);
    const q = parsed.data;
    const filter = { leaseId: q.lease_id, reservationId: q.reservation_id, from: q.from, to: q.to, projectId: identity.isAdmin ? undefined : identity.projectId };
    // Every booking of the cloud for an admin: streamed, memory one batch.
    await sendJsonParts(res, byHostParts(allocationBatches(deps.pool, filter, LIST_BATCH_SIZE)));
  });

  router.get('/os-hosts/:id/allocation', async (req, res) => {
    if (!isHostId(req.params.id)) throw new ApiError(404, `Host ${req.params.id} not found`);
    if (!(await hostExists(deps.pool, req.params.id))) throw new ApiError(404, `Host ${req.params.id} not found`);
    const identity = identityOf(res);
    const entries = await listAllocations(deps.pool, { hostId: req.params.id, projectId: identity.isAdmin ? undefined : identity.projectId });
    res.json({ allocation: byHost(entries)[0] ?? { resource_id: req.params.id, reservations: [] } });
  });

  return router;
}
