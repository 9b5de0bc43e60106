/**
 * Blazar's os-hosts API (admin only): enrol hosts from Nova into the reservable pool, change their
 * extra capabilities, take them out of admission (`reservable`), remove them; and the capability
 * ("resource property") list. Ours besides: a host's `power` settings and state (issue 48,
 * host-power.ts), and waking it or putting it to sleep by hand.
 */
import { Router } from 'express';
import { z } from 'zod';
import { leasesHoldingHosts } from '../db/host-allocations';
import { capabilityExists, capabilityProperties, listHosts, setCapabilityPrivate, type HostRecord } from '../db/hosts';
import type { Pool } from '../db/pool';
import type { HostInventory } from '../resources/physical-host/inventory';
import type { HostPower } from '../resources/physical-host/power';
import { identityOf, requireAdmin } from './auth';
import { formatBlazarTimestamp } from '../domain/dates';
import { ApiError, parseRequest } from './errors';
import { powerActionBody, powerFields, powerPatchOf } from './host-power';
import { tellLeasesHostsChanged, type LeaseCommandOptions } from './lease-commands';

/** The os-hosts routes' admin check, with Blazar's policy wording (maintenance routes use it too). */
/**
 * Nova's and Blazar's `hypervisor_version` is an integer; our hosts table keeps it as text. Text
 * that is no safe integer (never written from Nova; an imported or hand-made row) is shown as it
 * is rather than lost; none stays null.
 */
function hypervisorVersion(text: string | null): number | string | null {
  if (text === null || !/^-?\d+$/.test(text)) return text;
  const version = Number(text);
  return Number.isSafeInteger(version) ? version : text;
}

export function toBlazarHost(host: HostRecord) {
  return {
    ...host.capabilities,
    id: host.id,
    hypervisor_hostname: host.hypervisor_hostname,
    hypervisor_type: host.hypervisor_type,
    hypervisor_version: hypervisorVersion(host.hypervisor_version),
    service_name: host.service_name,
    vcpus: host.vcpus,
    memory_mb: host.memory_mb,
    local_gb: host.local_gb,
    cpu_info: host.cpu_info,
    availability_zone: host.availability_zone,
    reservable: host.reservable,
    // Blazar's computehosts.status: a column nothing in Blazar writes (its monitor changes `reservable`), so always null there too.
    status: null,
    // The host monitor's view (an extension): up or failed, since when, and why.
    state: host.state,
    state_since: host.state_since ? formatBlazarTimestamp(host.state_since.getTime()) : null,
    state_reason: host.state_reason,
    last_repair: host.last_repair,
    released_at: host.released_at ? formatBlazarTimestamp(host.released_at.getTime()) : null,
    released_by_lease: host.released_by_lease,
    trust_id: null,
    created_at: formatBlazarTimestamp(host.created_at.getTime()),
    updated_at: formatBlazarTimestamp(host.updated_at.getTime()),
  };
}

// The path is added by describeIssues; an absent name falls through to "Missing parameter name".
export const hostEnrolBody = z.looseObject({ name: z.string({ error: (issue) => (issue.input === undefined ? undefined : 'expected the hypervisor hostname') }).min(1, 'must not be empty') });
/** PATCH /v1/os-hosts/properties/{name}: hide a capability from non-admins, or show it again. */
export const propertyPrivacyBody = z.strictObject({ private: z.boolean({ error: 'expected true or false' }) });
const truthy = (value: unknown) => typeof value === 'string' && ['1', 'true', 'yes'].includes(value.toLowerCase());

/** `reservable` in a host update (an extension; blazarclient's `--extra reservable=false` sends text): the admission flag, not a capability. */
function reservableFlag(value: unknown): boolean | undefined {
  if (value === undefined) return undefined;
  if (typeof value === 'boolean') return value;
  if (typeof value === 'string' && /^(true|false)$/i.test(value)) return value.toLowerCase() === 'true';
  throw new ApiError(400, 'reservable: expected true or false (whether new leases may book the host)');
}

export function hostsRouter(deps: { pool: Pool; inventory: () => HostInventory; power: HostPower; commands: LeaseCommandOptions }): Router {
  const router = Router();

  router.get('/os-hosts/properties', async (req, res) => {
    const identity = identityOf(res);
    const showPrivate = identity.isAdmin && truthy(req.query.all);
    const visible = (await capabilityProperties(deps.pool)).filter((r) => showPrivate || !r.private);
    res.json({ resource_properties: truthy(req.query.detail) ? visible : visible.map((r) => ({ property: r.property })) });
  });

  router.patch('/os-hosts/properties/:name', async (req, res) => {
    requireAdmin(res, 'oshosts', 'update_resource_properties');
    const body = parseRequest(propertyPrivacyBody, req.body);
    if (!(await capabilityExists(deps.pool, req.params.name))) throw new ApiError(404, `Resource property ${req.params.name} not found`);
    await setCapabilityPrivate(deps.pool, req.params.name, body.private);
    res.json({ resource_property: { property: req.params.name, private: body.private } });
  });

  router.get('/os-hosts', async (_req, res) => {
    requireAdmin(res, 'oshosts', 'get');
    res.json({ hosts: (await listHosts(deps.pool)).map(toBlazarHost) });
  });

  router.post('/os-hosts', async (req, res) => {
    requireAdmin(res, 'oshosts', 'post');
    const { name, power, ...capabilities } = parseRequest(hostEnrolBody, req.body);
    // Checked before the host is enrolled: a bad power setting enrols nothing.
    const patch = powerPatchOf(power);
    const settings = patch && (await deps.power.prepare(undefined, patch));
    const host = await deps.inventory().enrol(name, capabilities);
    if (settings) await deps.power.save(host.id, settings);
    res.status(201).json({ host: { ...toBlazarHost(host), ...powerFields(await deps.power.status(host, Date.now())) } });
  });

  router.get('/os-hosts/:id', async (req, res) => {
    requireAdmin(res, 'oshosts', 'get');
    const host = await deps.inventory().get(req.params.id);
    res.json({ host: { ...toBlazarHost(host), ...powerFields(await deps.power.status(host, Date.now())) } });
  });

  // Wakes a host or puts it to sleep by hand; off is refused (409) while it is booked now or within its boot time.
  router.post('/os-hosts/:id/power', async (req, res) => {
    requireAdmin(res, 'oshosts', 'power');
    const { action } = parseRequest(powerActionBody, req.body);
    const host = await deps.inventory().get(req.params.id);
    // A caller that gives up ends the driver's call (its program killed) rather than leaving it to run.
    const gone = new AbortController();
    res.on('close', () => gone.abort());
    const status = await deps.power.powerByHand(host, action, Date.now(), gone.signal);
    res.json({ host: { ...toBlazarHost(host), ...powerFields(status) } });
  });

  router.put('/os-hosts/:id', async (req, res) => {
    requireAdmin(res, 'oshosts', 'put');
    const body: unknown = req.body;
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw new ApiError(400, 'expected a JSON object of capabilities, e.g. {"gpu": "a100"}');
    // blazarclient sends the capabilities themselves; Blazar's API docs wrap them in "values".
    const values = 'values' in body && typeof body.values === 'object' && body.values !== null ? (body.values as Record<string, unknown>) : (body as Record<string, unknown>);
    const { reservable, power, ...capabilities } = values;
    // Checked before anything changes: a bad power setting changes nothing.
    const patch = powerPatchOf(power);
    const settings = patch && (await deps.power.prepare((await deps.inventory().get(req.params.id)).id, patch));
    const host = await deps.inventory().update(req.params.id, capabilities, reservableFlag(reservable));
    if (settings) await deps.power.save(host.id, settings);
    if (reservable !== undefined) {
      // Pending leases on a host taken out of admission move elsewhere (or are flagged); back in, their flags clear.
      await tellLeasesHostsChanged(deps.commands, await leasesHoldingHosts(deps.pool, [host.id]), [host.id]);
    }
    res.json({ host: { ...toBlazarHost(host), ...powerFields(await deps.power.status(host, Date.now())) } });
  });

  router.delete('/os-hosts/:id', async (req, res) => {
    requireAdmin(res, 'oshosts', 'delete');
    await deps.inventory().remove(req.params.id);
    res.status(204).end();
  });

  return router;
}
