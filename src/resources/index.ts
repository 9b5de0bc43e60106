/**
 * The resource types: one folder each (the plugin and the cloud operations it owns), shared
 * operations in shared/. This file configures them from the settings: `resourceTypes` for the API
 * (parameters, availability), `productionPlugins` for the worker (the hooks of a lease's life).
 */
import type { Config } from '../config';
import type { Pool } from '../db/pool';
import { registry, type HostWatch, type ResourcePlugins, type ResourceTypes } from '../domain/resource-plugin';
import type { OpenStackClients } from '../openstack';
import { HostCalendar } from './physical-host/calendar';
import { bandwidthPlugin, bandwidthType } from './bandwidth';
import { flavorInstancePlugin, flavorInstanceType } from './flavor-instance';
import { floatingIpPlugin, floatingIpType } from './floating-ip';
import { networkSegmentPlugin, networkSegmentType } from './network-segment';
import { physicalHostPlugin, physicalHostType, type PhysicalHostDeps } from './physical-host';
import { physicalHostWatch } from './physical-host/health';
import type { HostPower } from './physical-host/power';
import { virtualInstancePlugin, virtualInstanceType, type VirtualInstanceDeps } from './virtual-instance';
import { virtualServerPlugin, virtualServerType } from './virtual-server';

export interface ResourceDeps {
  pool: Pool;
  config: Pick<Config, 'hosts' | 'inventory' | 'notifyUrl' | 'provisioningLeadMs' | 'servers' | 'bandwidth'> & Partial<Pick<Config, 'outbox' | 'power'>>;
  openstack: () => OpenStackClients;
  /** The same credentials in a lessee's project (server leases that create their server). */
  openstackForProject?: (projectId: string) => OpenStackClients;
  /** The hosts' power (issue 48), for the worker: a physical:host start wakes its hosts still asleep. */
  hostPower?: HostPower;
}

function hostSettings(config: Pick<Config, 'hosts' | 'provisioningLeadMs'> & Partial<Pick<Config, 'outbox'>>): PhysicalHostDeps['settings'] {
  // A lender's end (issue 43) gives its borrowers the preemption warning, and the outbox's sweep the time to tell them.
  const lenderEndNoticeMs = config.outbox ? config.outbox.preemptionWarningMs + config.outbox.sweepMs : undefined;
  return { ...config.hosts, provisioningLeadMs: config.provisioningLeadMs, ...(lenderEndNoticeMs !== undefined ? { lenderEndNoticeMs } : {}) };
}

/** The host calendar from the settings: the API makes one and hands it to both `resourceTypes` and its availability route. */
export function hostCalendar(pool: Pool, config: Pick<Config, 'hosts' | 'provisioningLeadMs'> & Partial<Pick<Config, 'outbox'>>): HostCalendar {
  return new HostCalendar(pool, hostSettings(config));
}

function hostDeps({ pool, config, openstack, hostPower }: ResourceDeps): PhysicalHostDeps {
  const { inventory, notifyUrl } = config;
  return {
    pool,
    settings: hostSettings(config),
    cloud: openstack,
    freepool: inventory.freepoolAggregate,
    endAggregates: { released: inventory.releasedAggregate, closedProjectId: inventory.freepoolProjectId },
    failedAggregate: inventory.failedAggregate,
    noticesConfigured: notifyUrl !== undefined,
    ...(hostPower ? { power: hostPower } : {}),
  };
}

function instanceDeps({ pool, config, openstack, openstackForProject }: ResourceDeps): VirtualInstanceDeps {
  const { hosts, servers, notifyUrl } = config;
  return {
    pool,
    settings: {
      cleaningMs: hosts.cleaningMs,
      capacityRefreshMs: servers.capacityRefreshMs,
      beforeEndDefault: hosts.beforeEndDefault,
      ...(hostSettings(config).lenderEndNoticeMs !== undefined ? { lenderEndNoticeMs: hostSettings(config).lenderEndNoticeMs } : {}),
    },
    cloud: openstack,
    projectCloud: openstackForProject,
    noticesConfigured: notifyUrl !== undefined,
  };
}

/**
 * What the API needs of each type: parameter schemas and availability search (read-only lookups, no hooks).
 * `calendar`: the host calendar to search when the caller uses it too (one per process); else physical:host makes its own.
 */
export function resourceTypes(deps: ResourceDeps, calendar?: HostCalendar): ResourceTypes {
  return registry([
    physicalHostType(hostDeps(deps), calendar),
    virtualServerType({ pool: deps.pool, cloud: deps.openstack, projectCloud: deps.openstackForProject, settings: deps.config.servers }),
    bandwidthType({ pool: deps.pool, cloud: deps.openstack, settings: deps.config.bandwidth }),
    floatingIpType({ pool: deps.pool }),
    networkSegmentType({ pool: deps.pool, cloud: deps.openstack }),
    virtualInstanceType(instanceDeps(deps)),
    flavorInstanceType(instanceDeps(deps)),
  ]);
}

/** Every type's plugin, for the worker. */
export function productionPlugins(deps: ResourceDeps): ResourcePlugins {
  return registry([
    physicalHostPlugin(hostDeps(deps)),
    virtualServerPlugin({ pool: deps.pool, cloud: deps.openstack, projectCloud: deps.openstackForProject, settings: deps.config.servers }),
    bandwidthPlugin({ pool: deps.pool, cloud: deps.openstack, settings: deps.config.bandwidth }),
    floatingIpPlugin({ pool: deps.pool, cloud: deps.openstack }),
    networkSegmentPlugin({ pool: deps.pool, cloud: deps.openstack }),
    virtualInstancePlugin(instanceDeps(deps)),
    flavorInstancePlugin(instanceDeps(deps)),
  ]);
}

/** How the host monitor sees the enrolled hosts: physical:host's watch over Nova. */
export function productionHostWatch({ pool, config, openstack }: Pick<ResourceDeps, 'pool' | 'config' | 'openstack'>): HostWatch {
  const { inventory } = config;
  return physicalHostWatch({
    pool,
    source: { nova: () => openstack().nova },
    freepool: inventory.freepoolAggregate,
    failed: { name: inventory.failedAggregate, closedProjectId: inventory.freepoolProjectId },
  });
}
