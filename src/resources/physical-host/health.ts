/**
 * How the host monitor sees enrolled hosts in Nova, and what it does with a host that failed and
 * came back. A host has a problem when its nova-compute service is forced down, down (no
 * heartbeat), disabled, or missing, or its hypervisor is gone. A host replaced in a lease while it
 * was failed waits in the `failed` aggregate (closed: no project's servers land there); once it is
 * up again it returns to the reservable pool.
 */
import type { HostObservation, HostStateChange } from '../../domain/host-health';
import type { DriftCheck, HostWatch } from '../../domain/resource-plugin';
import { currentBookings, leasesHoldingHosts, leasesOnUnusableHosts } from '../../db/host-allocations';
import { computeHostName, listHosts, monitoredHosts, recordHostRepair, recordHostState, type MonitoredHost } from '../../db/hosts';
import { leaseStates } from '../../db/leases';
import { getWindow, recordComputeDisabled } from '../../db/maintenance';
import { leasesBookedOnComputeHosts, leasesBookedOnFailedProviders, recordComputeHostState, sharedComputeHosts } from '../../db/quantity-allocations';
import type { Pool } from '../../db/pool';
import type { ComputeService, Hypervisor, NovaClient } from '../../openstack';
import { addHost, ensureAggregate, findAggregate, removeHost } from '../shared/aggregates';
import { hostNotice } from '../../domain/notices';
import { describeDrift, planDrift, type HostDrift } from './drift';
import { POWERED_OFF_REASON } from './power';

/** Where replaced failed hosts wait, and the project its filter_tenant_id names (nobody's). */
export interface FailedAggregate {
  name: string;
  closedProjectId: string;
}

/** What is wrong with one enrolled host, from Nova's services and hypervisors; undefined: nothing. */
export function hostProblem(host: MonitoredHost, services: ComputeService[], hypervisors: Hypervisor[]): string | undefined {
  const hypervisor = hypervisors.find((h) => h.hypervisor_hostname === host.hypervisor_hostname);
  if (!hypervisor) return 'its hypervisor is gone from Nova';
  // Powered off on purpose, or still booting after a wake: its service down (or disabled before the power-off) is no failure.
  if (host.power_down_expected) return undefined;
  return serviceProblem(host.service_name ?? hypervisor.service.host, services, host.compute_disabled_for_maintenance);
}

/**
 * What is wrong with a compute host that carries quantity bookings (by the name its providers give:
 * the compute service host, or the compute node's name); undefined: nothing.
 */
export function computeHostProblem(name: string, services: ComputeService[], hypervisors: Hypervisor[]): string | undefined {
  const hypervisor = hypervisors.find((h) => h.hypervisor_hostname === name || h.service.host === name);
  if (!hypervisor) return 'its hypervisor is gone from Nova';
  return serviceProblem(hypervisor.service.host, services, false);
}

/** What is wrong with the nova-compute service on `serviceHost` (`disabledExpected`: a maintenance window disabled it). */
function serviceProblem(serviceHost: string, services: ComputeService[], disabledExpected: boolean): string | undefined {
  const service = services.find((s) => s.host === serviceHost);
  if (!service) return `Nova has no nova-compute service on ${serviceHost}`;
  if (service.forced_down) return 'its compute service is forced down';
  if (service.state === 'down') return `its compute service is down (last heartbeat ${service.updated_at ?? 'never'})`;
  if (service.status === 'disabled' && !disabledExpected) return `its compute service is disabled${service.disabled_reason ? `: ${service.disabled_reason}` : ''}`;
  return undefined;
}

/**
 * How the monitor names a compute host that is not enrolled but carries quantity bookings (servers'
 * room, bandwidth): never a host id (those are numbers), so both kinds share the monitor's map.
 */
const SHARED_HOST_PREFIX = 'compute:';
const sharedHostId = (name: string) => `${SHARED_HOST_PREFIX}${name}`;
const sharedHostName = (hostId: string) => (hostId.startsWith(SHARED_HOST_PREFIX) ? hostId.slice(SHARED_HOST_PREFIX.length) : undefined);

/**
 * Where the watch learns of problems: Nova, or — for tests of booking alone, like a plugin's
 * 'calendar-only' — a function the test controls (and no aggregate is touched).
 */
export type HostProblemSource = { nova: () => NovaClient } | { calendarOnly: (host: { hypervisor_hostname: string }) => string | undefined };

export function physicalHostWatch(deps: { pool: Pool; source: HostProblemSource; freepool: string; failed: FailedAggregate }): HostWatch {
  const { source } = deps;
  /** A host up again: out of the failed aggregate into the pool, if a heal set it aside. */
  async function recovered(hostId: string): Promise<void> {
    if (sharedHostName(hostId) !== undefined) return; // in no aggregate of ours
    const [host] = await listHosts(deps.pool, { id: hostId });
    if (!host || !('nova' in source)) return;
    const nova = source.nova();
    const failed = await findAggregate(nova, deps.failed.name);
    if (!failed?.hosts.includes(computeHostName(host))) return; // never replaced: it stayed where its bookings put it
    const pool = await findAggregate(nova, deps.freepool);
    if (!pool) throw new Error(`the reservable pool aggregate ${deps.freepool} is missing`);
    await addHost(nova, pool, computeHostName(host));
    await removeHost(nova, failed, computeHostName(host));
  }

  return {
    /** Enrolled hosts (by id), and the compute hosts that carry quantity bookings (by `compute:<name>`). */
    async observe(): Promise<HostObservation[]> {
      const [hosts, shared] = await Promise.all([monitoredHosts(deps.pool), sharedComputeHosts(deps.pool)]);
      if (hosts.length === 0 && shared.length === 0) return [];
      let problemOf: (host: MonitoredHost) => string | undefined = 'calendarOnly' in source ? source.calendarOnly : () => undefined;
      let sharedProblemOf: (name: string) => string | undefined = 'calendarOnly' in source ? (name) => source.calendarOnly({ hypervisor_hostname: name }) : () => undefined;
      if ('nova' in source) {
        const nova = source.nova();
        const [services, hypervisors] = await Promise.all([nova.listServices({ binary: 'nova-compute' }), nova.listHypervisors()]);
        problemOf = (host) => hostProblem(host, services, hypervisors);
        sharedProblemOf = (name) => computeHostProblem(name, services, hypervisors);
      }
      const observation = (hostId: string, host: string, recorded: HostObservation['recorded'], problem: string | undefined): HostObservation => ({ hostId, host, recorded, ...(problem ? { problem } : {}) });
      return [
        ...hosts.map((host) => observation(host.id, computeHostName(host), host.state, problemOf(host))),
        ...shared.map(({ host, state }) => observation(sharedHostId(host), host, state, sharedProblemOf(host))),
      ];
    },

    async record(change: HostStateChange): Promise<void> {
      const shared = sharedHostName(change.hostId);
      if (shared !== undefined) await recordComputeHostState(deps.pool, { host: shared, state: change.state, sinceMs: change.sinceMs, reason: change.reason });
      else await recordHostState(deps.pool, { hostId: change.hostId, state: change.state, sinceMs: change.sinceMs, reason: change.reason });
    },

    recovered,

    noticeOf: (change, leaseIds) => hostNotice(change, leaseIds, sharedHostName(change.hostId) === undefined),

    async beginMaintenance(windowId) {
      const window = await getWindow(deps.pool, windowId);
      if (!window || window.end_ms <= Date.now()) return { begun: false, endMs: 0, leaseIds: [] };
      let computeHost: string | undefined;
      if (window.disable_compute && 'nova' in source) {
        const nova = source.nova();
        const marker = maintenanceMarker(windowId);
        const [service] = await nova.listServices({ binary: 'nova-compute', host: window.compute_host });
        // A service an operator disabled before the window is theirs: left as it is, and left disabled at the end. One the
        // power planner disabled (issue 48) is taken over: the window's, enabled at its end (the planner's sweep would enable it meanwhile).
        const ours = (reason: string | null | undefined) => reason?.startsWith(marker) || reason?.startsWith(POWERED_OFF_REASON);
        if (service && (service.status === 'enabled' || ours(service.disabled_reason))) {
          // Recorded first, so that the monitor never sees the service disabled without knowing why.
          if (!window.compute_disabled_at) await recordComputeDisabled(deps.pool, windowId, Date.now());
          if (!service.disabled_reason?.startsWith(marker)) await nova.updateService(service.id, { status: 'disabled', disabled_reason: `${marker}: ${window.reason}`.slice(0, 255) });
          computeHost = window.compute_host;
        }
      }
      return { begun: true, endMs: window.end_ms, leaseIds: await leasesHoldingHosts(deps.pool, [window.host_id]), ...(computeHost ? { computeHost } : {}) };
    },

    async endMaintenance({ windowId, hostId, computeHost }) {
      if (computeHost && 'nova' in source) {
        const nova = source.nova();
        const [service] = await nova.listServices({ binary: 'nova-compute', host: computeHost });
        if (service?.status === 'disabled' && service.disabled_reason?.startsWith(maintenanceMarker(windowId))) await nova.updateService(service.id, { status: 'enabled' });
      }
      await recordComputeDisabled(deps.pool, windowId, null);
      const [host] = await listHosts(deps.pool, { id: hostId });
      if (host?.state === 'up') await recovered(hostId); // set aside by a heal during the window: back to the pool
      return { leaseIds: host ? await leasesHoldingHosts(deps.pool, [hostId]) : [] };
    },

    async leasesHolding(hostIds, untilMs) {
      const shared = hostIds.map(sharedHostName).filter((name): name is string => name !== undefined);
      const enrolled = hostIds.filter((id) => sharedHostName(id) === undefined);
      const [onHosts, onShared] = await Promise.all([leasesHoldingHosts(deps.pool, enrolled, untilMs), leasesBookedOnComputeHosts(deps.pool, shared, untilMs)]);
      return [...new Set([...onHosts, ...onShared])].sort();
    },
    async leasesToHeal(untilMs) {
      const [onHosts, onProviders] = await Promise.all([leasesOnUnusableHosts(deps.pool, untilMs), leasesBookedOnFailedProviders(deps.pool, untilMs)]);
      return [...new Set([...onHosts, ...onProviders])].sort();
    },

    async checkDrift(previous, mode): Promise<DriftCheck> {
      const hosts = await monitoredHosts(deps.pool);
      if (!('nova' in source) || hosts.length === 0) return { seen: {}, repaired: [], reported: [], aggregatesRemoved: [] };
      const nova = source.nova();
      const aggregates = await nova.listAggregates();
      const leaseIds = [...new Set(aggregates.map((a) => a.metadata?.['leasekeeper:lease']).filter((id): id is string => typeof id === 'string' && /^[0-9a-f-]{36}$/.test(id)))];
      const plan = planDrift({ hosts, bookings: await currentBookings(deps.pool), aggregates, leases: await leaseStates(deps.pool, leaseIds), freepool: deps.freepool, failed: deps.failed.name });
      const check: DriftCheck = { seen: Object.fromEntries(plan.drifts.map((d) => [d.hostId, d.key])), repaired: [], reported: [], aggregatesRemoved: [] };
      for (const drift of plan.drifts.filter((d) => previous[d.hostId] === d.key)) {
        const { found, action } = describeDrift(drift);
        const line = `${drift.host}: ${found}, ${action}`;
        if (mode === 'repair') await moveBack(nova, drift);
        (mode === 'repair' ? check.repaired : check.reported).push(line);
        await recordHostRepair(deps.pool, drift.hostId, { at: new Date().toISOString(), found, action, repaired: mode === 'repair' });
      }
      for (const stale of plan.staleAggregates) {
        const now = await nova.getAggregate(stale.id).catch(() => undefined);
        if (!now || now.hosts.length > 0) continue; // its hosts leave first (at this check or the next)
        if (mode === 'repair') {
          await nova.deleteAggregate(stale.id).catch(() => undefined);
          check.aggregatesRemoved.push(stale.name);
        } else check.reported.push(`aggregate ${stale.name}: its lease has ended`);
      }
      return check;
    },
  };
}

/** How a window's start names itself in the compute service's disabled reason (so that its end enables only what it disabled). */
const maintenanceMarker = (windowId: string) => `leasekeeper maintenance ${windowId}`;

/** A failed host replaced in its lease: into the closed `failed` aggregate, then out of the lease's. */
export async function setFailedHostAside(nova: NovaClient, host: string, leaseAggregateName: string | undefined, failed: FailedAggregate): Promise<void> {
  const aside = await ensureAggregate(nova, failed.name, { filter_tenant_id: failed.closedProjectId, 'blazar:owner': 'leasekeeper', 'leasekeeper:pool': 'failed' });
  await addHost(nova, aside, host);
  if (leaseAggregateName) await removeHost(nova, await findAggregate(nova, leaseAggregateName), host);
}

/** Puts a drifted host where the calendar wants it: into the target (made again if a lease's is missing), then out of the others. */
async function moveBack(nova: NovaClient, drift: HostDrift): Promise<void> {
  const lease = drift.target.leaseAggregate;
  const target = lease
    ? await ensureAggregate(
        nova,
        drift.target.name,
        { filter_tenant_id: lease.projectId, 'blazar:owner': lease.projectId, 'leasekeeper:reservation': lease.reservationId, 'leasekeeper:lease': lease.leaseId },
        lease.availabilityZone ?? undefined,
      )
    : await findAggregate(nova, drift.target.name);
  if (!target) throw new Error(`aggregate ${drift.target.name} is missing`);
  await addHost(nova, target, drift.host);
  for (const name of drift.found.filter((f) => f !== drift.target.name)) await removeHost(nova, await findAggregate(nova, name), drift.host);
}
