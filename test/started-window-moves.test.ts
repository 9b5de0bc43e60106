/**
 * An active lease's window moved (extended, ended now) while the cloud answers nothing: each
 * resource type whose reserve reads Nova, Placement or Neutron decides a started reservation's new
 * window in the PostgreSQL calendar alone, keeping what it holds (physical:host, whose reserve
 * never read the cloud, is checked alike). The types' real hooks run over a
 * cloud whose every call throws; only what happens before and after the update (admission, start,
 * end: the rig's to test, test/openstack/) is stood in for by the calendar.
 */
import { randomUUID } from 'node:crypto';
import { insertFloatingIp } from '../src/db/floating-ips';
import { syncCapacityProviders } from '../src/db/quantity-allocations';
import type { Pool } from '../src/db/pool';
import type { Calendar, CalendarTypes } from '../src/domain/calendar';
import type { EndContext, HookContext, ReservationContext, ReserveResult, ResourcePlugin } from '../src/domain/resource-plugin';
import { bandwidthPlugin } from '../src/resources/bandwidth';
import { flavorInstance, flavorInstancePlugin } from '../src/resources/flavor-instance';
import { floatingIpPlugin } from '../src/resources/floating-ip';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { HostCalendar } from '../src/resources/physical-host/calendar';
import { FloatingIpCalendar } from '../src/resources/floating-ip/calendar';
import { COMPUTE_KIND } from '../src/resources/shared/compute-providers';
import { QuantityCalendar } from '../src/resources/shared/quantity-bookings';
import { InstanceSlotCalendar } from '../src/resources/virtual-instance/calendar';
import { slotReservationPlugin, virtualInstancePlugin, type VirtualInstanceDeps } from '../src/resources/virtual-instance';
import { virtualServerPlugin } from '../src/resources/virtual-server';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, useTestStack } from '../dev-stack/stack';

const NETWORK = '44444444-4444-4444-8444-444444444444';
const EGRESS = 'NET_BW_EGR_KILOBIT_PER_SEC';
const inDays = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 16).replace('T', ' ');

/** Every call to the cloud, counted, and each one failing as a Placement or Nova answering 503 would. */
const cloudCalls: string[] = [];
const failing = new Proxy(
  {},
  {
    get: (_target, method) =>
      method === 'then'
        ? undefined
        : (..._args: unknown[]) => {
            cloudCalls.push(String(method));
            return Promise.reject(new Error(`503 Service Unavailable (${String(method)}: the cloud is down in this test)`));
          },
  },
);
const cloudDown = () => ({ nova: failing, placement: failing, neutron: failing, glance: failing }) as never;

/**
 * The type's own hooks over the cloud that is down, but admission, start and end: admission books
 * the calendar as the type's reserve would (`admit`), start holds nothing, end frees the booking.
 */
function overCloudDown<P>(real: ResourcePlugin<P>, admit: (ctx: HookContext<P>) => Promise<ReserveResult>, calendar: Pick<Calendar<CalendarTypes>, 'release'>): ResourcePlugin<P> {
  return {
    ...real,
    reserve: (ctx) => (ctx.leaseStatus === 'PENDING' ? admit(ctx) : real.reserve(ctx)),
    hold: undefined,
    startStep: undefined,
    start: () => Promise.resolve({}),
    beforeEnd: () => Promise.resolve(),
    async end(ctx: EndContext<P>) {
      await calendar.release(ctx.reservation.id, ctx.started);
      return {};
    },
    heal: undefined,
    inUse: undefined,
    checkDrift: undefined,
  };
}

/** A quantity booking as bandwidth and server reservations make it, without asking the cloud what it amounts to. */
function quantityAdmission(pool: Pool, kind: string, amounts: (ctx: ReservationContext) => Record<string, number>, subject?: (ctx: ReservationContext) => string) {
  const calendar = new QuantityCalendar(pool);
  return {
    calendar,
    admit: async (ctx: ReservationContext): Promise<ReserveResult> => {
      const booked = await calendar.book(ctx, { kind, amounts: amounts(ctx), subject: subject?.(ctx), describe: kind, matches: () => true });
      return { allocation: { host: booked.host, footprint: amounts(ctx) }, resourceKeys: [] };
    },
  };
}

function plugins(pool: Pool): ResourcePlugin[] {
  const slotDeps = (cloud: VirtualInstanceDeps['cloud']): VirtualInstanceDeps => ({ pool, settings: { cleaningMs: 0, capacityRefreshMs: 0 }, cloud });
  const bandwidth = quantityAdmission(pool, 'bandwidth', (ctx) => ({ [EGRESS]: Number(ctx.reservation.params.egress_kbps) }));
  const server = quantityAdmission(pool, COMPUTE_KIND, () => ({ VCPU: 2, MEMORY_MB: 2048, DISK_GB: 20 }), (ctx) => String(ctx.reservation.params.server_id));
  const slots = virtualInstancePlugin(slotDeps('calendar-only'));
  // flavor:instance reads its flavor from Nova: admitted with the flavor's size given here instead.
  const flavorSlots = slotReservationPlugin(
    {
      ...flavorInstance,
      describe: (reservation) =>
        Promise.resolve({
          spec: { slot: { VCPU: 2, MEMORY_MB: 1024, DISK_GB: 10 }, amount: reservation.params.amount, affinity: reservation.params.affinity, resourceProperties: reservation.params.resource_properties },
          flavor: { vcpus: 2, ram: 1024, disk: 10, ephemeral: 0, swap: 0, extraSpecs: {} },
        }),
    },
    slotDeps('calendar-only'),
  );
  const addresses = floatingIpPlugin({ pool, cloud: 'calendar-only' });
  const hostSettings = { cleaningMs: 0, randomChoice: false };
  const hosts = physicalHostPlugin({ pool, settings: hostSettings, cloud: cloudDown });
  const slotCalendar = new InstanceSlotCalendar(pool, { cleaningMs: 0 });
  const addressCalendar = new FloatingIpCalendar(pool);
  return [
    overCloudDown(bandwidthPlugin({ pool, cloud: cloudDown, settings: { capacityRefreshMs: 0 } }), bandwidth.admit, bandwidth.calendar),
    overCloudDown(virtualServerPlugin({ pool, cloud: cloudDown, settings: { capacityRefreshMs: 0 } }), server.admit, server.calendar),
    overCloudDown(virtualInstancePlugin(slotDeps(cloudDown)), (ctx) => slots.reserve(ctx), slotCalendar),
    overCloudDown(flavorInstancePlugin(slotDeps(cloudDown)), (ctx) => flavorSlots.reserve(ctx), slotCalendar),
    overCloudDown(floatingIpPlugin({ pool, cloud: cloudDown }), (ctx) => addresses.reserve(ctx), addressCalendar),
    overCloudDown(hosts, (ctx) => hosts.reserve(ctx), new HostCalendar(pool, hostSettings)),
  ] as ResourcePlugin[];
}

describe('moving the window of a started reservation while the cloud is down', () => {
  const stack = useTestStack({ withPool: plugins });
  const member = apiClient(() => stack().url, { 'x-project-id': 'project-a', 'x-roles': 'member' });
  const admin = apiClient(() => stack().url);
  afterEach(() => deleteAllLeases(admin));

  beforeAll(async () => {
    const { pool } = stack().db;
    await syncCapacityProviders(pool, 'bandwidth', [{ uuid: randomUUID(), name: 'bw-node', host: 'bw-node', capacity: { [EGRESS]: 1_000 }, traits: [] }]);
    await insertHost(pool, { name: 'slot-node' });
    await insertHost(pool, { name: 'whole-node' });
    await syncCapacityProviders(pool, COMPUTE_KIND, [
      { uuid: randomUUID(), name: 'slot-node', host: 'slot-node', capacity: { VCPU: 16, MEMORY_MB: 32_768, DISK_GB: 200 }, traits: [] },
      { uuid: randomUUID(), name: 'server-node', host: 'server-node', capacity: { VCPU: 16, MEMORY_MB: 32_768, DISK_GB: 200 }, traits: [] },
    ]);
    await insertFloatingIp(pool, { id: randomUUID(), networkId: NETWORK, subnetId: 'subnet-1', address: '203.0.113.160' });
  });

  const statusOf = async (id: string) => (await member('GET', `/v1/leases/${id}`)).body.lease?.status as string | undefined;
  const waitFor = (id: string, status: string) => eventually(async () => ((await statusOf(id)) === status ? true : undefined), 30_000);

  it.each([
    ['network:bandwidth', { network_id: NETWORK, egress_kbps: 600 }],
    ['virtual:server', { server_id: randomUUID() }],
    // Each fills the node's 16 vCPUs: the lease booked again at the end fits only once these are free.
    ['virtual:instance', { vcpus: 8, memory_mb: 1024, disk_gb: 10, amount: 2, affinity: null, resource_properties: '' }],
    ['flavor:instance', { flavor_id: 'm1.small', amount: 8, affinity: null, resource_properties: '' }],
    ['virtual:floatingip', { network_id: NETWORK, amount: 1 }],
    ['physical:host', { min: 1, max: 1, hypervisor_properties: '["==", "$hypervisor_hostname", "whole-node"]' }],
  ])('%s: extends an active lease and ends it now, asking the cloud nothing', async (resourceType, params) => {
    const created = await member('POST', '/v1/leases', { name: `offline-${resourceType}`, start_date: 'now', end_date: inDays(1), reservations: [{ resource_type: resourceType, ...params }] });
    expect([created.status, created.body.error_message]).toEqual([201, undefined]);
    const { id } = created.body.lease;
    await waitFor(id, 'ACTIVE');
    cloudCalls.length = 0;

    // The end asked, computed once: the answer is compared with it, not with a clock read later (a minute may turn between).
    const newEnd = inDays(2);
    const extended = await member('PUT', `/v1/leases/${id}`, { end_date: newEnd });
    expect([extended.status, extended.body.error_message]).toEqual([200, undefined]);
    expect(extended.body.lease.end_date.slice(0, 16).replace('T', ' ')).toBe(newEnd);
    const ended = await member('PUT', `/v1/leases/${id}`, { end_date: 'now' });
    expect([ended.status, ended.body.error_message]).toEqual([200, undefined]);
    await waitFor(id, 'TERMINATED');
    expect(cloudCalls).toEqual([]);
    // What it held is free from now: the same lease (no room for two) is booked at once.
    const again = await member('POST', '/v1/leases', { name: `again-${resourceType}`, start_date: 'now', end_date: inDays(2), reservations: [{ resource_type: resourceType, ...params }] });
    expect([again.status, again.body.error_message]).toEqual([201, undefined]);
  }, 90_000);

  it('refuses an extension over another booking with the usual 409, decided by the calendar alone', async () => {
    const bandwidth = { resource_type: 'network:bandwidth', network_id: NETWORK, egress_kbps: 600 };
    const first = await member('POST', '/v1/leases', { name: 'offline-first', start_date: 'now', end_date: inDays(1), reservations: [bandwidth] });
    const next = await member('POST', '/v1/leases', { name: 'offline-next', start_date: inDays(1.5), end_date: inDays(3), reservations: [bandwidth] });
    expect([first.status, next.status]).toEqual([201, 201]);
    await waitFor(first.body.lease.id, 'ACTIVE');
    cloudCalls.length = 0;
    const refused = await member('PUT', `/v1/leases/${first.body.lease.id}`, { end_date: inDays(2) });
    expect(refused.status).toBe(409);
    expect(refused.body.error_message).toMatch(/^Not enough hosts available\. Cannot extend lease offline-first/);
    expect(cloudCalls).toEqual([]);
  }, 90_000);
});
