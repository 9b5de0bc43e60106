/**
 * Blazar's floatingips API: the reservable floating IP addresses. Anyone signed in may list and
 * show them (to know which to ask for in `required_floatingips`), as Blazar's policy allows; only
 * admins enrol and remove them. `GET /v1/floatingips/allocations` and `/{id}/allocation` (ours,
 * in the shape of Blazar's os-hosts allocations) show which reservations hold each address:
 * admins see every booking, others their own project's.
 */
import { Router, type Response } from 'express';
import { z } from 'zod';
import { floatingIpAllocations, type FloatingIpRecord } from '../db/floating-ips';
import type { Pool } from '../db/pool';
import type { FloatingIpInventory } from '../resources/floating-ip/inventory';
import { identityOf, requireAdmin } from './auth';
import { formatBlazarDate, formatBlazarTimestamp } from '../domain/dates';
import { parseRequest } from './errors';

export function toBlazarFloatingIp(ip: FloatingIpRecord) {
  return {
    id: ip.id,
    floating_network_id: ip.floating_network_id,
    subnet_id: ip.subnet_id,
    floating_ip_address: ip.floating_ip_address,
    reservable: ip.reservable,
    created_at: formatBlazarTimestamp(ip.created_at.getTime()),
    updated_at: ip.updated_at ? formatBlazarTimestamp(ip.updated_at.getTime()) : null,
  };
}

// An absent field falls through to Blazar's "Missing parameter …".
const present = (what: string) => (issue: { input: unknown }) => (issue.input === undefined ? undefined : what);
export const floatingIpEnrolBody = z.strictObject({
  floating_network_id: z.string({ error: present('expected the id of an external network') }).min(1).max(255),
  floating_ip_address: z.string({ error: present('expected an IP address') }).min(1).max(64),
});

/** Unknown parameters are dropped, as Blazar does. */
export const floatingIpAllocationQuery = z.object({
  lease_id: z.uuid({ error: 'expected a lease id' }).optional(),
  reservation_id: z.uuid({ error: 'expected a reservation id' }).optional(),
});

export function floatingIpsRouter(deps: { pool: Pool; inventory: () => FloatingIpInventory }): Router {
  const router = Router();

  /** Per address, the reservations that hold it from now on, for the caller to see. */
  async function allocations(res: Response, query: unknown, floatingIpId?: string) {
    const identity = identityOf(res);
    const filter = parseRequest(floatingIpAllocationQuery, query);
    const rows = await floatingIpAllocations(deps.pool, {
      leaseId: filter.lease_id,
      reservationId: filter.reservation_id,
      floatingIpId,
      projectId: identity.isAdmin ? undefined : identity.projectId,
    });
    const byAddress = new Map<string, unknown[]>();
    for (const row of rows) {
      const list = byAddress.get(row.floating_ip_id) ?? [];
      list.push({ id: row.reservation_id, lease_id: row.lease_id, project_id: row.project_id, start_date: formatBlazarDate(row.start_ms), end_date: formatBlazarDate(row.end_ms) });
      byAddress.set(row.floating_ip_id, list);
    }
    return byAddress;
  }

  router.get('/floatingips', async (_req, res) => {
    res.json({ floatingips: (await deps.inventory().list()).map(toBlazarFloatingIp) });
  });

  router.post('/floatingips', async (req, res) => {
    requireAdmin(res, 'floatingips', 'post');
    const body = parseRequest(floatingIpEnrolBody, req.body);
    res.status(201).json({ floatingip: toBlazarFloatingIp(await deps.inventory().enrol(body.floating_network_id, body.floating_ip_address)) });
  });

  router.get('/floatingips/allocations', async (req, res) => {
    const byAddress = await allocations(res, req.query);
    // Admins see every address (Blazar's answer for hosts); others only those holding their bookings.
    const shown = (await deps.inventory().list()).filter((ip) => identityOf(res).isAdmin || byAddress.has(ip.id));
    res.json({ allocations: shown.map((ip) => ({ resource_id: ip.id, floating_ip_address: ip.floating_ip_address, reservations: byAddress.get(ip.id) ?? [] })) });
  });

  router.get('/floatingips/:id/allocation', async (req, res) => {
    const ip = await deps.inventory().get(req.params.id);
    const byAddress = await allocations(res, req.query, ip.id);
    res.json({ allocation: { resource_id: ip.id, floating_ip_address: ip.floating_ip_address, reservations: byAddress.get(ip.id) ?? [] } });
  });

  router.get('/floatingips/:id', async (req, res) => {
    res.json({ floatingip: toBlazarFloatingIp(await deps.inventory().get(req.params.id)) });
  });

  router.delete('/floatingips/:id', async (req, res) => {
    requireAdmin(res, 'floatingips', 'delete');
    await deps.inventory().remove(req.params.id);
    res.status(204).end();
  });

  return router;
}
