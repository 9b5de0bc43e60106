/**
 * How the host monitor sees enrolled hosts in Nova, and what it does with a host that failed and
 * came back. A host has a problem when its nova-compute service is forced down, down (no
 * heartbeat), disabled, or missing, or its hypervisor is gone. A host replaced in a lease while it
 * was failed waits in the `failed` aggregate (closed: no project's servers land there); once it is
 * up again it returns to the reservable pool.
 */
import type { HostObservation, HostStateChange } from '../../domain/host-health';
import type { HostWatch } from '../../domain/resource-plugin';
import { leasesHoldingHosts, leasesOnUnusableHosts } from '../../db/host-allocations';
import { monitoredHosts, recordHostState, type MonitoredHost } from '../../db/hosts';
import type { Pool } from '../../db/pool';
import type { ComputeService, Hypervisor, NovaClient } from '../../openstack';
import { addHost, ensureAggregate, findAggregate, removeHost } from '../shared/aggregates';

/** Where replaced failed hosts wait, and the project its filter_tenant_id names (nobody's). */
export interface FailedAggregate {
  name: string;
  closedProjectId: string;
}

/** What is wrong with one host, from Nova's services and hypervisors; undefined: nothing. */
export function hostProblem(host: MonitoredHost, services: ComputeService[], hypervisors: Hypervisor[]): string | undefined {
  const hypervisor = hypervisors.find((h) => h.hypervisor_hostname === host.hypervisor_hostname);
  if (!hypervisor) return 'its hypervisor is gone from Nova';
  const serviceHost = host.service_name ?? hypervisor.service.host;
  const service = services.find((s) => s.host === serviceHost);
  if (!service) return `Nova has no nova-compute service on ${serviceHost}`;
  if (service.forced_down) return 'its compute service is forced down';
  if (service.state === 'down') return `its compute service is down (last heartbeat ${service.updated_at ?? 'never'})`;
  if (service.status === 'disabled') return `its compute service is disabled${service.disabled_reason ? `: ${service.disabled_reason}` : ''}`;
  return undefined;
}

/** The compute host name Nova's aggregates use for an enrolled host. */
const computeHost = (host: MonitoredHost) => host.service_name ?? host.hypervisor_hostname;

/**
 * Where the watch learns of problems: Nova, or — for tests of booking alone, like a plugin's
 * 'calendar-only' — a function the test controls (and no aggregate is touched).
 */
export type HostProblemSource = { nova: () => NovaClient } | { calendarOnly: (host: MonitoredHost) => string | undefined };

export function physicalHostWatch(deps: { pool: Pool; source: HostProblemSource; freepool: string; failed: FailedAggregate }): HostWatch {
  const { source } = deps;
  return {
    async observe(): Promise<HostObservation[]> {
      const hosts = await monitoredHosts(deps.pool);
      if (hosts.length === 0) return [];
      let problemOf = 'calendarOnly' in source ? source.calendarOnly : undefined;
      if ('nova' in source) {
        const nova = source.nova();
        const [services, hypervisors] = await Promise.all([nova.listServices({ binary: 'nova-compute' }), nova.listHypervisors()]);
        problemOf = (host) => hostProblem(host, services, hypervisors);
      }
      return hosts.map((host) => {
        const problem = problemOf?.(host);
        return { hostId: host.id, host: computeHost(host), recorded: host.state, ...(problem ? { problem } : {}) };
      });
    },

    async record(change: HostStateChange): Promise<void> {
      await recordHostState(deps.pool, { hostId: change.hostId, state: change.state, sinceMs: change.sinceMs, reason: change.reason });
    },

    async recovered(hostId: string): Promise<void> {
      const host = (await monitoredHosts(deps.pool)).find((h) => h.id === hostId);
      if (!host || !('nova' in source)) return;
      const nova = source.nova();
      const failed = await findAggregate(nova, deps.failed.name);
      if (!failed?.hosts.includes(computeHost(host))) return; // never replaced: it stayed where its bookings put it
      const pool = await findAggregate(nova, deps.freepool);
      if (!pool) throw new Error(`the reservable pool aggregate ${deps.freepool} is missing`);
      await addHost(nova, pool, computeHost(host));
      await removeHost(nova, failed, computeHost(host));
    },

    leasesHolding: (hostIds, untilMs) => leasesHoldingHosts(deps.pool, hostIds, untilMs),
    leasesToHeal: (untilMs) => leasesOnUnusableHosts(deps.pool, untilMs),
  };
}

/** A failed host replaced in its lease: into the closed `failed` aggregate, then out of the lease's. */
export async function setFailedHostAside(nova: NovaClient, host: string, leaseAggregateName: string | undefined, failed: FailedAggregate): Promise<void> {
  const aside = await ensureAggregate(nova, failed.name, { filter_tenant_id: failed.closedProjectId, 'blazar:owner': 'leasekeeper', 'leasekeeper:pool': 'failed' });
  await addHost(nova, aside, host);
  if (leaseAggregateName) await removeHost(nova, await findAggregate(nova, leaseAggregateName), host);
}
