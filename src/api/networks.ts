/**
 * Chameleon's networks API (issue 45): the reservable network segments. Admin only, as os-hosts:
 * enrol (Neutron checks the segment first), list, show, update capabilities, remove (refused while
 * a booking of it ends in the future); `GET /v1/networks/allocations` and `/{id}/allocation` show
 * which reservations hold each segment, in the shape of os-hosts' allocations.
 */
import { Router } from 'express';
import { z } from 'zod';
import { networkSegmentAllocations } from '../db/network-segment-allocations';
import type { NetworkSegmentRecord } from '../db/network-segments';
import type { Pool } from '../db/pool';
import type { NetworkSegmentInventory } from '../resources/network-segment/inventory';
import { requireAdmin } from './auth';
import { formatBlazarDate, formatBlazarTimestamp } from '../domain/dates';
import { ApiError, parseRequest } from './errors';

export function toBlazarNetwork(segment: NetworkSegmentRecord) {
  return {
    ...segment.capabilities,
    id: segment.id,
    network_type: segment.network_type,
    physical_network: segment.physical_network,
    segment_id: segment.segment_id,
    created_at: formatBlazarTimestamp(segment.created_at.getTime()),
    updated_at: formatBlazarTimestamp(segment.updated_at.getTime()),
  };
}

/** The enrolment's body: the segment's fields (checked by the inventory, with Blazar's sentences) and extra capabilities. */
export const networkEnrolBody = z
  .looseObject({
    network_type: z.string().max(16).optional(),
    physical_network: z.string().max(64).nullish(),
    segment_id: z.union([z.string().max(16), z.number()]).optional(),
  });

/** Unknown parameters are dropped, as Blazar does. */
export const networkAllocationQuery = z.object({
  lease_id: z.uuid({ error: 'expected a lease id' }).optional(),
  reservation_id: z.uuid({ error: 'expected a reservation id' }).optional(),
});

/** A JSON object, or the 400 saying what was expected. */
function objectBody(body: unknown, example: string): Record<string, unknown> {
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw new ApiError(400, `expected a JSON object, e.g. ${example}`);
  return body as Record<string, unknown>;
}

export function networksRouter(deps: { pool: Pool; inventory: () => NetworkSegmentInventory }): Router {
  const router = Router();

  /** Per segment, the reservations that hold it from now on. */
  async function allocations(query: unknown, networkSegmentId?: string) {
    const filter = parseRequest(networkAllocationQuery, query);
    const rows = await networkSegmentAllocations(deps.pool, { leaseId: filter.lease_id, reservationId: filter.reservation_id, networkSegmentId });
    const bySegment = new Map<string, unknown[]>();
    for (const row of rows) {
      const list = bySegment.get(row.network_segment_id) ?? [];
      list.push({ id: row.reservation_id, lease_id: row.lease_id, project_id: row.project_id, start_date: formatBlazarDate(row.start_ms), end_date: formatBlazarDate(row.end_ms) });
      bySegment.set(row.network_segment_id, list);
    }
    return bySegment;
  }

  router.get('/networks', async (_req, res) => {
    requireAdmin(res, 'networks', 'get');
    res.json({ networks: (await deps.inventory().list()).map(toBlazarNetwork) });
  });

  router.post('/networks', async (req, res) => {
    requireAdmin(res, 'networks', 'post');
    const body = objectBody(req.body, '{"network_type": "vlan", "physical_network": "physnet1", "segment_id": "250"}');
    parseRequest(networkEnrolBody, body);
    res.status(201).json({ network: toBlazarNetwork(await deps.inventory().enrol(body)) });
  });

  router.get('/networks/allocations', async (req, res) => {
    requireAdmin(res, 'networks', 'get_allocations');
    const bySegment = await allocations(req.query);
    res.json({ allocations: (await deps.inventory().list()).map((s) => ({ resource_id: s.id, reservations: bySegment.get(s.id) ?? [] })) });
  });

  router.get('/networks/:id/allocation', async (req, res) => {
    requireAdmin(res, 'networks', 'get_allocations');
    const segment = await deps.inventory().get(req.params.id);
    const bySegment = await allocations(req.query, segment.id);
    res.json({ allocation: { resource_id: segment.id, reservations: bySegment.get(segment.id) ?? [] } });
  });

  router.get('/networks/:id', async (req, res) => {
    requireAdmin(res, 'networks', 'get');
    res.json({ network: toBlazarNetwork(await deps.inventory().get(req.params.id)) });
  });

  router.put('/networks/:id', async (req, res) => {
    requireAdmin(res, 'networks', 'put');
    const body = objectBody(req.body, '{"values": {"stitch_provider": "fabric"}}');
    // Blazar's API docs wrap the capabilities in "values"; blazarclient sends them as they are.
    const values = 'values' in body && typeof body.values === 'object' && body.values !== null && !Array.isArray(body.values) ? (body.values as Record<string, unknown>) : body;
    res.json({ network: toBlazarNetwork(await deps.inventory().update(req.params.id, values)) });
  });

  router.delete('/networks/:id', async (req, res) => {
    requireAdmin(res, 'networks', 'delete');
    await deps.inventory().remove(req.params.id);
    res.status(204).end();
  });

  return router;
}
