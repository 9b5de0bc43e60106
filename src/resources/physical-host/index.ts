/**
 * `physical:host`: whole compute hosts, booked in the host calendar. Moving the hosts into the
 * lease's Nova aggregate at start and taking them back at the end (with the on_end policies and
 * the before-end snapshot) is the next step of this plugin; until then start, before-end and heal
 * change nothing in Nova, and end frees the booking.
 */
import type { Pool } from '../../db/pool';
import type { ResourcePlugin } from '../plugin';
import { HostCalendar, PHYSICAL_HOST, type CalendarSettings } from './calendar';
import { physicalHostParams } from './params';

export { PHYSICAL_HOST };

export function physicalHostPlugin(deps: { pool: Pool; settings: CalendarSettings }): ResourcePlugin {
  const calendar = new HostCalendar(deps.pool, deps.settings);
  return {
    resourceType: PHYSICAL_HOST,
    paramsSchema: physicalHostParams,
    async reserve(ctx) {
      const hosts = await calendar.book(ctx);
      return {
        allocation: { hosts: hosts.map((h) => h.hypervisor_hostname), host_ids: hosts.map((h) => h.id) },
        resourceKeys: hosts.map((h) => `host:${h.id}`),
      };
    },
    async start() {
      // Hosts join the lease's aggregate here once the Nova side of host leases lands.
    },
    async beforeEnd() {
      // The before_end action (snapshot/notify) lands with the Nova side of host leases.
    },
    async end(ctx) {
      await calendar.release(ctx, ctx.started);
    },
    heal() {
      return Promise.resolve({ missingResources: false, resourcesChanged: false });
    },
  };
}
