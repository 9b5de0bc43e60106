/**
 * `physical:host`: whole compute hosts, booked in the host calendar and, from start to end, moved
 * out of the reservable pool into the lease's own Nova aggregate (its availability zone is what
 * the lessee targets). At the end every server on them is deleted and they return to the pool.
 */
import { deleteServersOnHosts, leaseAggregateFor, moveHostsIntoLease, returnHostsToPool } from '../../../activities/host-aggregates';
import { snapshotServersOnHosts } from '../../../activities/server-snapshots';
import type { Pool } from '../../db/pool';
import type { GlanceClient, NovaClient } from '../../openstack';
import type { ReservationContext, ResourcePlugin } from '../plugin';
import { HostCalendar, PHYSICAL_HOST, type CalendarSettings } from './calendar';
import { physicalHostParams } from './params';

export { PHYSICAL_HOST };

export interface PhysicalHostDeps {
  pool: Pool;
  settings: CalendarSettings;
  /**
   * Nova and Glance, for carrying leases out; 'calendar-only' for tests of booking alone, where
   * start and end touch no cloud.
   */
  cloud: (() => { nova: NovaClient; glance: GlanceClient }) | 'calendar-only';
  freepool?: string;
  /** What `before_end: default` means ('' = nothing, or 'snapshot'). */
  beforeEndDefault?: '' | 'snapshot';
  /** How long the end waits for the lessee's servers to be deleted. */
  serverDeleteTimeoutMs?: number;
}

export function physicalHostPlugin(deps: PhysicalHostDeps): ResourcePlugin {
  const calendar = new HostCalendar(deps.pool, deps.settings);
  const freepool = deps.freepool ?? 'freepool';

  /** The compute host names of the reservation's current booking. */
  async function computeHosts(ctx: ReservationContext): Promise<string[]> {
    const { rows } = await deps.pool.query<{ host: string }>(
      `SELECT DISTINCT COALESCE(h.service_name, h.hypervisor_hostname) AS host
       FROM host_allocations a JOIN hosts h ON h.id = a.host_id WHERE a.reservation_id = $1 ORDER BY 1`,
      [ctx.reservation.id],
    );
    return rows.map((r) => r.host);
  }

  const move = async (ctx: ReservationContext) => ({
    reservationId: ctx.reservation.id,
    leaseId: ctx.leaseId,
    projectId: ctx.projectId,
    hosts: await computeHosts(ctx),
    freepool,
  });

  return {
    resourceType: PHYSICAL_HOST,
    paramsSchema: physicalHostParams,
    async reserve(ctx) {
      const hosts = await calendar.book(ctx);
      const aggregate = leaseAggregateFor(ctx.reservation.id);
      return {
        allocation: { hosts: hosts.map((h) => h.hypervisor_hostname), host_ids: hosts.map((h) => h.id), aggregate: aggregate.name, availability_zone: aggregate.availabilityZone },
        resourceKeys: hosts.map((h) => `host:${h.id}`),
      };
    },
    async start(ctx) {
      if (deps.cloud === 'calendar-only') return;
      await moveHostsIntoLease(deps.cloud().nova, await move(ctx));
    },
    async beforeEnd(ctx) {
      const { before_end: requested } = physicalHostParams.parse(ctx.reservation.params);
      const action = requested === 'default' ? (deps.beforeEndDefault ?? '') : requested;
      if (action !== 'snapshot' || deps.cloud === 'calendar-only') return;
      const { nova, glance } = deps.cloud();
      await snapshotServersOnHosts(nova, glance, { hosts: await computeHosts(ctx), leaseId: ctx.leaseId, leaseName: ctx.leaseName, reservationId: ctx.reservation.id });
    },
    async end(ctx) {
      if (deps.cloud !== 'calendar-only') {
        const { nova } = deps.cloud();
        const hosts = await move(ctx);
        if (ctx.started) await deleteServersOnHosts(nova, hosts.hosts, deps.serverDeleteTimeoutMs ?? 10 * 60_000);
        // Also after a start that failed half way: whatever moved goes back (idempotent).
        await returnHostsToPool(nova, hosts);
      }
      await calendar.release(ctx, ctx.started);
    },
    heal() {
      return Promise.resolve({ missingResources: false, resourcesChanged: false });
    },
  };
}
