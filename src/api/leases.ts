/**
 * Blazar v1 leases: `GET/POST /v1/leases`, `GET/PUT/DELETE /v1/leases/{id}`.
 * Reads come from PostgreSQL; changes go to the lease's workflow.
 */
import { randomUUID } from 'node:crypto';
import { Router, type Request } from 'express';
import type { z } from 'zod';
import type { Lease, LeaseUpdateRequest } from '../domain/lease';
import { findLease, listLeases } from '../db/leases';
import type { Pool } from '../db/pool';
import type { ResourcePlugins } from '../resources/plugin';
import { identityOf, type Identity } from './auth';
import { toBlazarLease } from './blazar-format';
import { ApiError } from './errors';
import { changeLease, createLease, idempotentLeaseId, removeLease, requestHash, type LeaseCommandOptions } from './lease-commands';
import { createLeaseSchema, describeIssues, listLeasesQuery, updateLeaseSchema } from './lease-schemas';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function parse<S extends z.ZodType>(schema: S, input: unknown, prefix = ''): z.output<S> {
  const result = schema.safeParse(input);
  if (!result.success) throw new ApiError(400, describeIssues(result.error, prefix));
  return result.data;
}

function bodyOf(req: Request): unknown {
  if (req.body === undefined || req.body === null || typeof req.body !== 'object' || Array.isArray(req.body)) {
    throw new ApiError(400, 'expected a JSON object body (Content-Type: application/json)');
  }
  return req.body;
}

/** Others' leases do not exist for a non-admin (404, not 403: ids are not confirmed). */
async function visibleLease(pool: Pool, identity: Identity, id: string): Promise<Lease> {
  const lease = UUID.test(id) ? await findLease(pool, id.toLowerCase()) : undefined;
  if (!lease || (!identity.isAdmin && lease.projectId !== identity.projectId)) throw new ApiError(404, `Lease ${id} not found`);
  return lease;
}

export function leasesRouter(deps: { pool: Pool; plugins: ResourcePlugins; commands: LeaseCommandOptions; provisioningLeadMs: number }): Router {
  const { pool, commands } = deps;
  const createSchema = createLeaseSchema(deps.plugins);
  const router = Router();

  router.get('/leases', async (req, res) => {
    const identity = identityOf(res);
    const query = parse(listLeasesQuery, req.query);
    if (!identity.isAdmin && query.project_id !== undefined && query.project_id !== identity.projectId) {
      throw new ApiError(403, 'only admins can list other projects\' leases');
    }
    if (query.marker !== undefined) await visibleLease(pool, identity, query.marker);
    const leases = await listLeases(pool, {
      projectId: identity.isAdmin ? query.project_id : identity.projectId,
      status: query.status,
      name: query.name,
      from: query.from,
      to: query.to,
      marker: query.marker,
      limit: query.limit,
    });
    const more = query.limit !== undefined && leases.length > query.limit;
    const page = more ? leases.slice(0, query.limit) : leases;
    const links = more ? [{ rel: 'next', href: nextPageHref(req, page[page.length - 1].id) }] : undefined;
    res.json({ leases: page.map(toBlazarLease), ...(links ? { leases_links: links } : {}) });
  });

  router.get('/leases/:id', async (req, res) => {
    res.json({ lease: toBlazarLease(await visibleLease(pool, identityOf(res), req.params.id)) });
  });

  router.post('/leases', async (req, res) => {
    const identity = identityOf(res);
    const raw = bodyOf(req);
    const body = parse(createSchema, raw);
    const key = req.get('Idempotency-Key')?.trim();
    if (key !== undefined && (key.length === 0 || key.length > 255)) throw new ApiError(400, 'Idempotency-Key: expected 1 to 255 characters');
    const id = key ? idempotentLeaseId(identity.projectId, key) : randomUUID();
    const lease = await createLease(
      commands,
      {
        id,
        name: body.name,
        projectId: identity.projectId,
        userId: identity.userId,
        start: body.start_date,
        end: body.end_date,
        beforeEnd: body.before_end_date ?? undefined,
        provisioningLeadMs: deps.provisioningLeadMs,
        // A retry with the same Idempotency-Key reaches the first request's workflow, with its reservation ids.
        reservations: (body.reservations ?? []).map((r) => ({ id: randomUUID(), resource_type: r.resource_type, params: r.params })),
        requestedMs: Date.now(),
      },
      requestHash(identity.projectId, raw),
      key !== undefined,
    );
    res.status(201).json({ lease: toBlazarLease(lease) });
  });

  router.put('/leases/:id', async (req, res) => {
    const identity = identityOf(res);
    const body = parse(updateLeaseSchema, bodyOf(req));
    const current = await visibleLease(pool, identity, req.params.id);
    const update: LeaseUpdateRequest = {
      name: body.name,
      start: body.start_date,
      end: body.end_date,
      beforeEnd: body.before_end_date,
      reservations: body.reservations?.map((change, i) => changedReservation(current, change, i, deps.plugins)),
    };
    res.json({ lease: toBlazarLease(await changeLease(commands, current.id, update)) });
  });

  router.delete('/leases/:id', async (req, res) => {
    const current = await visibleLease(pool, identityOf(res), req.params.id);
    await removeLease(commands, current.id);
    res.status(204).end();
  });

  return router;
}

/** A reservation's parameters with the change applied, checked by its resource type as at creation. */
function changedReservation(lease: Lease, change: { id: string } & Record<string, unknown>, index: number, plugins: ResourcePlugins) {
  const { id, ...fields } = change;
  const reservation = lease.reservations.find((r) => r.id === id);
  if (!reservation) throw new ApiError(400, `reservations[${index}].id: lease ${lease.name} has no reservation ${id}`);
  delete fields.resource_type; // a reservation keeps its type
  const plugin = plugins.get(reservation.resource_type);
  if (!plugin) throw new ApiError(400, `reservations[${index}]: resource type ${reservation.resource_type} is not supported by this deployment`);
  return { id, params: parse(plugin.paramsSchema, { ...reservation.params, ...fields }, `reservations[${index}]`) };
}

function nextPageHref(req: Request, marker: string): string {
  const url = new URL(req.originalUrl, 'http://placeholder');
  url.searchParams.set('marker', marker);
  return `${url.pathname}${url.search}`;
}
