/**
 * Blazar's host allocations: `GET /v1/os-hosts/allocations` and `GET /v1/os-hosts/{id}/allocation`.
 * Admins see every booking, and in the list every host (Blazar's answer); others see their own project's
 * bookings and only the hosts holding them (Blazar shows these to admins only).
 */
import { Router } from 'express';
import { z } from 'zod';
import { allocationBatches, listAllocations, type AllocationEntry } from '../db/host-allocations';
import { hostExists, isHostId, listHosts, type HostRecord } from '../db/hosts';
import type { Pool } from '../db/pool';
import { identityOf } from './auth';
import { formatBlazarDate } from '../domain/dates';
import { ApiError, parseRequest } from './errors';
import { sendJsonParts } from './json-stream';
import { requestDateSchema } from './lease-schemas';

/** Unknown parameters are dropped, as Blazar does. */
export const hostAllocationQuery = z.object({
  lease_id: z.uuid({ error: 'expected a lease id' }).optional(),
  reservation_id: z.uuid({ error: 'expected a reservation id' }).optional(),
  from: requestDateSchema.optional(),
  to: requestDateSchema.optional(),
});

/** Bookings per query of the allocations list (~200 bytes of JSON each). */
const LIST_BATCH_SIZE = 1_000;

/** Blazar's reservation entry; a preemptible booking (issue 43) adds `preemptible: true` (Blazar's clients pass unknown keys through). */
function reservationOf(e: AllocationEntry) {
  const entry = { id: e.reservation_id, lease_id: e.lease_id, project_id: e.project_id, start_date: formatBlazarDate(e.start_ms), end_date: formatBlazarDate(e.end_ms) };
  // No spread for the regular ones: the list writes one entry per booking of the cloud.
  return e.preemptible ? { ...entry, preemptible: true } : entry;
}

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

/** A host the list shows even with no booking (`reservations: []`). */
type ListedHost = Pick<HostRecord, 'id' | 'hypervisor_hostname'>;

/** Whether host id `a` comes before `b` in PostgreSQL's order of host ids (bigints, here as text). */
const hostIdBefore = (a: string, b: string) => BigInt(a) < BigInt(b);

/** JSON held before it is written when hosts without bookings come in a row (no batch ends them): ~800 hosts. */
const PART_CHARS = 64 * 1024;

/**
 * The same shape, `{"allocations":[…]}`, written batch by batch: the bookings come ordered by host, so a host's entry
 * closes when the next begins. The `listed` hosts (ordered by id) without a booking are merged in by id, as entries with no reservations.
 */
async function* byHostParts(batches: AsyncIterable<AllocationEntry[]>, listed: readonly ListedHost[]): AsyncGenerator<string> {
  let text = '{"allocations":[';
  let hostsBegun = 0;
  let nextListed = 0; // the first of `listed` not written yet
  let open: string | undefined; // the host whose reservations are being written
  const beginHost = (id: string, hypervisorHostname: string) => {
    text += `${hostsBegun++ > 0 ? ',' : ''}${JSON.stringify({ resource_id: id, hypervisor_hostname: hypervisorHostname }).slice(0, -1)},"reservations":[`;
  };
  /** Writes the listed hosts before `hostId` (every one left: undefined), which have no booking, and passes over `hostId` itself. */
  function* unbookedBefore(hostId?: string): Generator<string> {
    for (; nextListed < listed.length && (hostId === undefined || hostIdBefore(listed[nextListed].id, hostId)); nextListed++) {
      beginHost(listed[nextListed].id, listed[nextListed].hypervisor_hostname);
      text += ']}';
      if (text.length >= PART_CHARS) {
        yield text;
        text = '';
      }
    }
    if (hostId !== undefined && listed[nextListed]?.id === hostId) nextListed++;
  }
  for await (const batch of batches) {
    for (const e of batch) {
      if (e.host_id !== open) {
        if (open !== undefined) text += ']}';
        yield* unbookedBefore(e.host_id);
        beginHost(e.host_id, e.hypervisor_hostname);
        open = e.host_id;
      } else {
        text += ',';
      }
      text += JSON.stringify(reservationOf(e));
    }
    yield text;
    text = '';
  }
  if (open !== undefined) text += ']}';
  yield* unbookedBefore();
  yield `${text}]}`;
}

export function hostAllocationsRouter(deps: { pool: Pool }): Router {
  const router = Router();

  router.get('/os-hosts/allocations', async (req, res) => {
    const q = parseRequest(hostAllocationQuery, req.query);
    const identity = identityOf(res);
    const filter = { leaseId: q.lease_id, reservationId: q.reservation_id, from: q.from, to: q.to, projectId: identity.isAdmin ? undefined : identity.projectId };
    // As Blazar's, an admin's list has every host, whatever the filter, those with no matching booking with `reservations: []`
    // (the inventory is in memory, as for GET /os-hosts). Others see only the hosts of their own bookings: the inventory is the admins'.
    const listed = identity.isAdmin ? await listHosts(deps.pool) : [];
    // Every booking of the cloud for an admin: streamed, memory one batch.
    await sendJsonParts(res, byHostParts(allocationBatches(deps.pool, filter, LIST_BATCH_SIZE), listed));
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
