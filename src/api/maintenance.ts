/**
 * Maintenance windows (an extension, admin only): `POST /v1/os-hosts/{id}/maintenance` books one
 * host for maintenance over [start_date, end_date); `GET` lists a host's windows, or every host's
 * (`GET /v1/maintenance`); `DELETE` withdraws one (deleted before its start, cut at now while in
 * force). A window is blocked time in the host calendar: admission avoids it; pending leases it
 * overlaps are told and heal elsewhere (or are flagged and their owners notified); a lease that has
 * begun is never cut short unless `"force": true`, which ends it at the window's start. The
 * window's workflow disables the compute service over it when `disable_compute` asks.
 */
import { randomUUID } from 'node:crypto';
import { Router, type Response } from 'express';
import { z } from 'zod';
import { isHostId } from '../db/hosts';
import { leasesOverlapping, type OverlappedBooking } from '../db/host-allocations';
import { getWindow, insertWindow, listWindows, overlappingWindow, withdrawWindow, type MaintenanceWindow } from '../db/maintenance';
import { isExclusionViolation, type Pool } from '../db/pool';
import type { HostInventory } from '../resources/physical-host/inventory';
import { formatBlazarDate, formatBlazarTimestamp } from '../domain/dates';
import { ApiError, parseRequest } from './errors';
import { requireAdmin } from './auth';
import { changeLease, startMaintenanceWindow, tellLeasesHostsChanged, tellWindowWithdrawn, type LeaseCommandOptions } from './lease-commands';
import { requestDateSchema, requestDateOrNowSchema } from './lease-schemas';
import { notStarted, type LeaseStatus } from '../domain/lease';

/** How far a window may reach: ten years from now (a bound on what a typo can book). */
const MAX_REACH_MS = 10 * 366 * 86_400_000;
/** A start this close to now (clocks, typing) counts as now rather than in the past. */
const START_SKEW_MS = 60_000;
const MAX_LIST = 1000;

export const maintenanceBody = z.strictObject({
  start_date: requestDateOrNowSchema,
  end_date: requestDateSchema,
  reason: z.string({ error: (issue) => (issue.input === undefined ? undefined : 'expected a string') }).trim().min(1, 'must not be empty').max(255, 'must be at most 255 characters'),
  disable_compute: z.boolean({ error: 'expected true or false' }).optional(),
  force: z.boolean({ error: 'expected true or false' }).optional(),
});

export const maintenanceListQuery = z.strictObject({
  host_id: z.string().regex(/^\d{1,19}$/, 'expected a host id').optional(),
  all: z.enum(['true', 'false'], { error: 'expected true or false' }).optional(),
  limit: z.coerce.number({ error: `expected a number from 1 to ${MAX_LIST}` }).int(`expected a number from 1 to ${MAX_LIST}`).min(1, `expected a number from 1 to ${MAX_LIST}`).max(MAX_LIST, `expected a number from 1 to ${MAX_LIST}`).optional(),
  marker: z.string().uuid('expected the id of a maintenance window').optional(),
});

function windowStatus(window: MaintenanceWindow, nowMs: number): 'scheduled' | 'in_force' | 'over' {
  if (window.start_ms > nowMs) return 'scheduled';
  return window.end_ms > nowMs ? 'in_force' : 'over';
}

export function toMaintenanceJson(window: MaintenanceWindow, nowMs = Date.now()) {
  return {
    id: window.id,
    host_id: window.host_id,
    hypervisor_hostname: window.hypervisor_hostname,
    start_date: formatBlazarDate(window.start_ms),
    end_date: formatBlazarDate(window.end_ms),
    reason: window.reason,
    disable_compute: window.disable_compute,
    compute_disabled: window.compute_disabled_at !== null,
    status: windowStatus(window, nowMs),
    created_at: formatBlazarTimestamp(window.created_at.getTime()),
  };
}

const describeLease = (l: OverlappedBooking) => `${l.lease_name} (${l.lease_id}, ${l.lease_status}, ${formatBlazarDate(l.start_ms)} to ${formatBlazarDate(l.end_ms)})`;

export function maintenanceRouter(deps: { pool: Pool; inventory: () => HostInventory; commands: LeaseCommandOptions }): Router {
  const router = Router();

  async function windowOfHost(hostId: string | undefined, windowId: string): Promise<MaintenanceWindow> {
    const window = /^[0-9a-f-]{36}$/i.test(windowId) ? await getWindow(deps.pool, windowId) : undefined;
    if (!window || (hostId !== undefined && window.host_id !== hostId)) throw new ApiError(404, `Maintenance window ${windowId} not found`);
    return window;
  }

  async function list(res: Response, query: unknown, hostId?: string) {
    const q = parseRequest(maintenanceListQuery, query);
    const after = q.marker ? await getWindow(deps.pool, q.marker) : undefined;
    if (q.marker && !after) throw new ApiError(400, `marker: no maintenance window ${q.marker}`);
    const windows = await listWindows(deps.pool, {
      hostId: hostId ?? q.host_id,
      includeEnded: q.all === 'true',
      limit: q.limit ?? MAX_LIST,
      ...(after ? { after: { startMs: after.start_ms, id: after.id } } : {}),
    });
    const nowMs = Date.now();
    res.json({ maintenance: windows.map((w) => toMaintenanceJson(w, nowMs)) });
  }

  router.get('/maintenance', async (req, res) => {
    requireAdmin(res, 'oshosts', 'maintenance:get');
    await list(res, req.query);
  });

  router.get('/os-hosts/:id/maintenance', async (req, res) => {
    requireAdmin(res, 'oshosts', 'maintenance:get');
    const host = await deps.inventory().get(req.params.id);
    await list(res, req.query, host.id);
  });

  router.get('/maintenance/:windowId', async (req, res) => {
    requireAdmin(res, 'oshosts', 'maintenance:get');
    res.json({ maintenance: toMaintenanceJson(await windowOfHost(undefined, req.params.windowId)) });
  });

  router.get('/os-hosts/:id/maintenance/:windowId', async (req, res) => {
    requireAdmin(res, 'oshosts', 'maintenance:get');
    if (!isHostId(req.params.id)) throw new ApiError(404, `Maintenance window ${req.params.windowId} not found`);
    res.json({ maintenance: toMaintenanceJson(await windowOfHost(req.params.id, req.params.windowId)) });
  });

  router.post('/os-hosts/:id/maintenance', async (req, res) => {
    requireAdmin(res, 'oshosts', 'maintenance:post');
    const body = parseRequest(maintenanceBody, req.body);
    const host = await deps.inventory().get(req.params.id);
    if (host.released_at) throw new ApiError(409, `Host ${host.hypervisor_hostname} was released to the shared cloud: enrol it again before booking its maintenance`);
    const nowMs = Date.now();
    const startMs = body.start_date === 'now' ? nowMs : body.start_date;
    const endMs = body.end_date;
    if (startMs < nowMs - START_SKEW_MS) throw new ApiError(400, `start_date: ${formatBlazarDate(startMs)} is in the past`);
    if (endMs <= Math.max(startMs, nowMs)) throw new ApiError(400, 'end_date: must be after start_date and in the future');
    if (endMs > nowMs + MAX_REACH_MS) throw new ApiError(400, 'end_date: at most ten years ahead');

    // Leases that have begun cannot move: a window never cuts one short unless forced to.
    const overlapped = await leasesOverlapping(deps.pool, host.id, startMs, endMs);
    const begun = overlapped.filter((l) => !notStarted(l.lease_status as LeaseStatus));
    if (begun.length > 0 && !body.force) {
      throw new ApiError(
        409,
        `Host ${host.hypervisor_hostname} is held during the window by lease(s) that have begun: ${begun.map(describeLease).join(', ')}. ` +
          `Book the window from their end, or send "force": true to end them at the window's start (their owners are told).`,
      );
    }

    const id = randomUUID();
    try {
      await insertWindow(deps.pool, { id, hostId: host.id, startMs, endMs, reason: body.reason, disableCompute: body.disable_compute ?? false });
    } catch (err) {
      if (!isExclusionViolation(err)) throw err;
      const other = await overlappingWindow(deps.pool, host.id, startMs, endMs);
      throw new ApiError(409, `Host ${host.hypervisor_hostname} already has a maintenance window${other ? ` ${other.id} from ${formatBlazarDate(other.start_ms)} to ${formatBlazarDate(other.end_ms)}` : ''} overlapping this one`);
    }
    try {
      await startMaintenanceWindow(deps.commands, { windowId: id, hostId: host.id, startMs, endMs }, `maintenance of ${host.hypervisor_hostname}: ${body.reason}`.slice(0, 200));
    } catch (err) {
      // No workflow, no window: it would block the calendar with nobody to carry it out.
      await withdrawWindow(deps.pool, id).catch(() => undefined);
      throw err;
    }

    // Forced: leases that have begun end at the window's start (or now, for a window that starts now).
    const ended: string[] = [];
    const notEnded: Array<{ lease_id: string; error: string }> = [];
    for (const lease of begun) {
      try {
        await changeLease(deps.commands, lease.lease_id, { end: startMs <= Date.now() ? 'now' : startMs });
        ended.push(lease.lease_id);
      } catch (err) {
        notEnded.push({ lease_id: lease.lease_id, error: (err as Error).message });
      }
    }
    // Pending leases heal: moved to other hosts, or flagged (and their owners told) when none is free.
    const pending = overlapped.filter((l) => notStarted(l.lease_status as LeaseStatus)).map((l) => l.lease_id);
    await tellLeasesHostsChanged(deps.commands, pending, [host.id]);

    const window = await getWindow(deps.pool, id);
    res.status(201).json({ maintenance: { ...toMaintenanceJson(window!), leases_told: pending, leases_ended: ended, leases_not_ended: notEnded } });
  });

  async function withdraw(res: Response, window: MaintenanceWindow) {
    const outcome = await withdrawWindow(deps.pool, window.id);
    if (outcome === 'none') throw new ApiError(404, `Maintenance window ${window.id} not found`);
    if (outcome === 'over') throw new ApiError(409, `Maintenance window ${window.id} is over: it stays on record`);
    // The workflow enables what the window disabled and tells the leases on the host (their flags clear).
    await tellWindowWithdrawn(deps.commands, window.id);
    res.status(204).end();
  }

  router.delete('/maintenance/:windowId', async (req, res) => {
    requireAdmin(res, 'oshosts', 'maintenance:delete');
    await withdraw(res, await windowOfHost(undefined, req.params.windowId));
  });

  router.delete('/os-hosts/:id/maintenance/:windowId', async (req, res) => {
    requireAdmin(res, 'oshosts', 'maintenance:delete');
    if (!isHostId(req.params.id)) throw new ApiError(404, `Maintenance window ${req.params.windowId} not found`);
    await withdraw(res, await windowOfHost(req.params.id, req.params.windowId));
  });

  return router;
}
