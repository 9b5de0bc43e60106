/**
 * Blazar's host allocations: `GET /v1/os-hosts/allocations` and `GET /v1/os-hosts/{id}/allocation`.
 * Admins see every booking; others see their own project's (Blazar shows these to admins only).
 */
import { Router } from 'express';
import { z } from 'zod';
import { listAllocations, type AllocationEntry } from '../db/allocations';
import type { Pool } from '../db/pool';
import { identityOf } from './auth';
import { formatLeaseDate } from './blazar-format';
import { ApiError } from './errors';
import { describeIssues, requestDate } from './lease-schemas';

const allocationQuery = z.strictObject({
  lease_id: z.uuid({ error: 'expected a lease id' }).optional(),
  reservation_id: z.uuid({ error: 'expected a reservation id' }).optional(),
  from: requestDate.optional(),
  to: requestDate.optional(),
});

/** Blazar's shape: one entry per host, with the reservations booked on it. */
function byHost(entries: AllocationEntry[]) {
  const hosts = new Map<string, { resource_id: string; hypervisor_hostname: string; reservations: unknown[] }>();
  for (const e of entries) {
    const host = hosts.get(e.host_id) ?? { resource_id: e.host_id, hypervisor_hostname: e.hypervisor_hostname, reservations: [] };
    host.reservations.push({ id: e.reservation_id, lease_id: e.lease_id, project_id: e.project_id, start_date: formatLeaseDate(e.start_ms), end_date: formatLeaseDate(e.end_ms) });
    hosts.set(e.host_id, host);
  }
  return [...hosts.values()];
}

export function hostAllocationsRouter(deps: { pool: Pool }): Router {
  const router = Router();

  router.get('/os-hosts/allocations', async (req, res) => {
    const parsed = allocationQuery.safeParse(req.query);
    if (!parsed.success) throw new ApiError(400, describeIssues(parsed.error));
    const identity = identityOf(res);
    const q = parsed.data;
    const entries = await listAllocations(deps.pool, {
      leaseId: q.lease_id,
      reservationId: q.reservation_id,
      from: q.from,
      to: q.to,
      projectId: identity.isAdmin ? undefined : identity.projectId,
    });
    res.json({ allocations: byHost(entries) });
  });

  router.get('/os-hosts/:id/allocation', async (req, res) => {
    if (!/^\d+$/.test(req.params.id)) throw new ApiError(404, `Host ${req.params.id} not found`);
    const { rowCount } = await deps.pool.query('SELECT 1 FROM hosts WHERE id = $1', [req.params.id]);
    if (!rowCount) throw new ApiError(404, `Host ${req.params.id} not found`);
    const identity = identityOf(res);
    const entries = await listAllocations(deps.pool, { hostId: req.params.id, projectId: identity.isAdmin ? undefined : identity.projectId });
    res.json({ allocation: byHost(entries)[0] ?? { resource_id: req.params.id, reservations: [] } });
  });

  return router;
}
