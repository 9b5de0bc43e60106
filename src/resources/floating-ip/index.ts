/**
 * `virtual:floatingip`: enrolled floating IP addresses of an external network, booked whole in the
 * floating IP calendar, and from start (less the provisioning lead time) to end created in Neutron
 * in the lessee's project with exactly those addresses.
 *
 * - reserve: the required addresses, then free ones; an active reservation keeps its addresses,
 *   may grow (the new ones are created at once) and shrink by addresses not associated with a port.
 * - start: the booked addresses made real, tagged with the reservation as Blazar tags them.
 * - end: each taken off its port and deleted; the booking freed.
 */
import { amountOffers } from '../shared/offers';
import { ApplicationFailure } from '@temporalio/common';
import type { Pool } from '../../db/pool';
import type { FloatingIpRecord } from '../../db/floating-ips';
import type { NeutronClient } from '../../openstack';
import type { HookContext, ReservationContext, ResourcePlugin, ResourceType } from '../../domain/resource-plugin';
import { deleteReservedFloatingIps, reservedFloatingIps, syncFloatingIps, type AddressSpec } from './addresses';
import { FloatingIpCalendar, VIRTUAL_FLOATINGIP } from './calendar';
import { floatingIpParams, type FloatingIpParams } from './params';

export { VIRTUAL_FLOATINGIP };

export interface FloatingIpDeps {
  pool: Pool;
  /** Neutron, for carrying leases out; 'calendar-only' for tests of booking alone. */
  cloud: (() => { neutron: NeutronClient }) | 'calendar-only';
}

/** What the API needs of `virtual:floatingip`: the parameters, and where addresses are free (no cloud). */
export function floatingIpType(deps: Pick<FloatingIpDeps, 'pool'>, calendar = new FloatingIpCalendar(deps.pool)): ResourceType<FloatingIpParams> {
  return {
    resourceType: VIRTUAL_FLOATINGIP,
    paramsSchema: floatingIpParams,
    earliest: ({ reservations, startMs, durationMs, provisioningLeadMs, limits }) => calendar.search(reservations, startMs, durationMs, provisioningLeadMs, limits),
    latestEnd: (leaseId) => calendar.latestEnd(leaseId),
    // The addresses it names are the least it can take.
    offers: amountOffers<FloatingIpParams>({
      describe: (params) => ({ addresses: params.amount }),
      footprint: (params) => ({ floating_ips: params.amount }),
      floor: (params) => Math.max(1, params.required_floatingips.length),
    }),
  };
}

/** The lease JSON's view of the booked addresses (the enrolled ones: Neutron's ids come with the start). */
function bookedAllocation(addresses: FloatingIpRecord[]) {
  return { floating_ip_addresses: addresses.map((a) => a.floating_ip_address), floatingip_ids: addresses.map((a) => a.id) };
}

export function floatingIpPlugin(deps: FloatingIpDeps): ResourcePlugin<FloatingIpParams> {
  const calendar = new FloatingIpCalendar(deps.pool);
  const neutron = () => (deps.cloud === 'calendar-only' ? undefined : deps.cloud().neutron);

  const spec = async (ctx: HookContext<FloatingIpParams>): Promise<AddressSpec> => ({
    reservationId: ctx.reservation.id,
    leaseName: ctx.leaseName,
    projectId: ctx.projectId,
    addresses: await calendar.addresses(ctx.reservation.id),
    progress: ctx.reportProgress,
  });

  /** Per floating IP reservation of the lease, its addresses associated with a port now (an active lease shrinking keeps those). */
  async function addressesInUse(ctx: ReservationContext<FloatingIpParams>, client: NeutronClient): Promise<Map<string, Set<string>>> {
    const inUse = new Map<string, Set<string>>();
    for (const reservation of ctx.leaseReservations.filter((r) => r.resource_type === VIRTUAL_FLOATINGIP)) {
      const associated = (await reservedFloatingIps(client, reservation.id)).filter((f) => f.port_id);
      inUse.set(reservation.id, new Set(associated.map((f) => f.floating_ip_address)));
    }
    return inUse;
  }

  const neutronAllocation = (fips: Array<{ id: string; floating_ip_address: string }>) => ({
    floatingips: fips.map((f) => ({ id: f.id, floating_ip_address: f.floating_ip_address })),
  });

  return {
    ...floatingIpType(deps, calendar),

    async reserve(ctx) {
      // Without OpenStack credentials the lease could never start: refused now (503 naming the setting).
      const client = neutron();
      const active = ctx.leaseStatus !== 'PENDING';
      const addresses = await calendar.book(ctx, { inUse: active && client ? await addressesInUse(ctx, client) : undefined });
      let allocation: Record<string, unknown> = bookedAllocation(addresses);
      // An active reservation's new addresses are the lessee's at once (and those it gave up are gone).
      if (ctx.leaseStatus === 'ACTIVE' && client) allocation = { ...allocation, ...neutronAllocation(await syncFloatingIps(client, await spec(ctx))) };
      return { allocation, resourceKeys: addresses.map((a) => `floatingip:${a.id}`), footprint: { floating_ips: addresses.length } };
    },

    moveWindow: (ctx) => calendar.moveWindow(ctx),

    async start(ctx) {
      const client = neutron();
      if (!client) return;
      const addresses = await spec(ctx);
      if (addresses.addresses.length === 0) throw ApplicationFailure.nonRetryable(`reservation ${ctx.reservation.id} has no booked address`, 'BookingMissing');
      return { allocation: neutronAllocation(await syncFloatingIps(client, addresses)) };
    },

    async end(ctx) {
      const client = neutron();
      // Whether or not the lease started (a start that failed half way made some): take back all there may be.
      if (client) await deleteReservedFloatingIps(client, await spec(ctx));
      await calendar.release(ctx.reservation.id, ctx.started);
      return {};
    },
  };
}
