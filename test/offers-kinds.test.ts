/**
 * Offers for the types whose API face reads the cloud (flavor:instance reads its flavor from Nova,
 * network:bandwidth its network from Neutron, virtual:server its server from Nova): each kind that
 * applies to each type, and extension offers (GET /v1/leases/{id}/extension-offers) for every type
 * that books quantities. The types' real API faces run over stand-ins answering those reads only;
 * capacity is seeded into the calendars' provider copies, and other projects' bookings and the
 * extended leases are written as rows (no workflow runs: what is searched is the calendar).
 */
import { randomUUID } from 'node:crypto';
import { syncCapacityProviders } from '../src/db/quantity-allocations';
import type { Pool } from '../src/db/pool';
import { newLease, type Lease } from '../src/domain/lease';
import { bandwidthPlugin } from '../src/resources/bandwidth';
import { customTrait } from '../src/resources/bandwidth/params';
import { flavorInstancePlugin } from '../src/resources/flavor-instance';
import { COMPUTE_KIND } from '../src/resources/shared/compute-providers';
import { virtualInstancePlugin } from '../src/resources/virtual-instance';
import { virtualServerPlugin } from '../src/resources/virtual-server';
import type { ResourcePlugin } from '../src/domain/resource-plugin';
import { insertHostBookingRows, insertLeaseRows, insertQuantityBookingRow } from '../dev-stack/fixtures/lease-rows';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, useTestStack } from '../dev-stack/stack';

const NETWORK = '55555555-5555-4555-8555-555555555555';
const SERVER = '66666666-6666-4666-8666-666666666666';
const FLAVOR = 'm1.offer';
const EGRESS = 'NET_BW_EGR_KILOBIT_PER_SEC';
const dayAhead = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10);
/** Offers on D; extensions on E (flavor:instance, bandwidth, server) and F (virtual:instance, before a host lease). */
const [D, E, F] = [dayAhead(30), dayAhead(31), dayAhead(32)];
const at = (day: string, hhmm: string) => Date.parse(`${day}T${hhmm}:00Z`);
/** Providers' ids, for bookings written as rows. */
const SLOT_NODE = randomUUID();
const SERVER_NODE = randomUUID();
const BW_NODE = randomUUID();
/** The flavor's size (a slot), and the server's flavor (the whole server node). */
const SLOT = { VCPU: 4, MEMORY_MB: 4096, DISK_GB: 20 };
const SERVER_SIZE = { VCPU: 8, MEMORY_MB: 8192, DISK_GB: 20 };

/** The reads the types' API faces make, answered for project alpha; anything else is not expected here. */
const nova = {
  getFlavor: (id: string) => Promise.resolve({ id, name: id, vcpus: SLOT.VCPU, ram: SLOT.MEMORY_MB, disk: SLOT.DISK_GB, swap: '', 'OS-FLV-EXT-DATA:ephemeral': 0, 'os-flavor-access:is_public': true, extra_specs: {} }),
  getServer: (id: string) =>
    Promise.resolve({ id, name: 'alpha-vm', tenant_id: 'alpha', status: 'SHUTOFF', flavor: { original_name: 'm1.server', vcpus: SERVER_SIZE.VCPU, ram: SERVER_SIZE.MEMORY_MB, disk: SERVER_SIZE.DISK_GB, ephemeral: 0, swap: 0 } }),
};
const neutron = {
  getNetwork: (id: string) => Promise.resolve({ id, name: 'physnet-net', project_id: 'alpha', 'provider:physical_network': 'physnet1' }),
  listRbacPolicies: () => Promise.resolve([]),
};
const unexpected = new Proxy({}, { get: (_t, method) => (method === 'then' ? undefined : () => Promise.reject(new Error(`unexpected cloud call ${String(method)}`))) });
const cloud = () => ({ nova, neutron, placement: unexpected, glance: unexpected }) as never;

function plugins(pool: Pool): ResourcePlugin[] {
  // Providers are seeded before any search: a copy this fresh is never read again from the cloud.
  const slotDeps = { pool, settings: { cleaningMs: 0, capacityRefreshMs: 3_600_000 }, cloud };
  return [
    flavorInstancePlugin(slotDeps),
    virtualInstancePlugin(slotDeps),
    bandwidthPlugin({ pool, cloud, settings: { capacityRefreshMs: 3_600_000 } }),
    virtualServerPlugin({ pool, cloud, settings: { capacityRefreshMs: 3_600_000 } }),
  ] as ResourcePlugin[];
}

describe('offers for flavor:instance, network:bandwidth and virtual:server', () => {
  const stack = useTestStack({ withPool: plugins });
  const alpha = apiClient(() => stack().url, { 'X-Project-Id': 'alpha', 'X-Roles': 'member' });
  let slotHostId: string;

  /** Another project's booking, written as a row (its lease never needs to exist for the calendar). */
  const othersBooking = (providerUuid: string, amounts: Record<string, number>, startMs: number, endMs: number) =>
    insertQuantityBookingRow(stack().db.pool, { providerUuid, leaseId: randomUUID(), projectId: 'beta', amounts, startMs, endMs });

  beforeAll(async () => {
    const { pool } = stack().db;
    // The slot node is enrolled (slots go on enrolled hosts); the server node is not (servers never go on them).
    slotHostId = await insertHost(pool, { name: 'slot-node' });
    await syncCapacityProviders(pool, COMPUTE_KIND, [
      { uuid: SLOT_NODE, name: 'slot-node', host: 'slot-node', capacity: { VCPU: 16, MEMORY_MB: 65_536, DISK_GB: 400 }, traits: [] },
      { uuid: SERVER_NODE, name: 'server-node', host: 'server-node', capacity: SERVER_SIZE, traits: [] },
    ]);
    await syncCapacityProviders(pool, 'bandwidth', [{ uuid: BW_NODE, name: 'bw-node', host: 'bw-node', capacity: { [EGRESS]: 1_000 }, traits: [customTrait('PHYSNET', 'physnet1'), customTrait('VNIC_TYPE', 'normal')] }]);
    // On D from 11:00 to 12:00, another project leaves one slot of four, no server, 250 kbps of 1 000.
    await othersBooking(SLOT_NODE, { VCPU: 12, MEMORY_MB: 12_288, DISK_GB: 60 }, at(D, '11:00'), at(D, '12:00'));
    await othersBooking(SERVER_NODE, SERVER_SIZE, at(D, '11:00'), at(D, '12:00'));
    await othersBooking(BW_NODE, { [EGRESS]: 750 }, at(D, '11:00'), at(D, '12:00'));
  });

  const ask = (reservation: Record<string, unknown>, more: Record<string, unknown> = {}) => alpha('POST', '/v1/offers', { reservations: [reservation], duration: 120, start_after: `${D} 10:00`, min_duration: 30, ...more });
  const summary = (offers: Array<{ kind: string; start_date: string; end_date: string; reservations: unknown[] }>) => offers.map((o) => [o.kind, o.start_date, o.end_date, o.reservations]);
  const flavorSlots = { resource_type: 'flavor:instance', flavor_id: FLAVOR, amount: 4, min: 1, resource_properties: '' };
  const ports = { resource_type: 'network:bandwidth', network_id: NETWORK, egress_kbps: 250, amount: 4, min: 1 };
  const server = { resource_type: 'virtual:server', server_id: SERVER };

  it('offers flavor:instance slots exact, later, shorter and fewer', async () => {
    const res = await ask(flavorSlots);
    expect(res.status).toBe(200);
    const four = [{ resource_type: 'flavor:instance', instances: 4 }];
    expect(summary(res.body.offers)).toEqual([
      ['later', `${D} 12:00`, `${D} 14:00`, four],
      ['later', `${D} 14:00`, `${D} 16:00`, four],
      ['later', `${D} 16:00`, `${D} 18:00`, four],
      ['shorter', `${D} 10:00`, `${D} 11:00`, four],
      ['fewer', `${D} 10:00`, `${D} 12:00`, [{ resource_type: 'flavor:instance', instances: 1 }]],
    ]);
    expect(summary((await ask(flavorSlots, { start_after: `${D} 12:00` })).body.offers)).toEqual([['exact', `${D} 12:00`, `${D} 14:00`, four]]);
  });

  it('offers bandwidth ports exact, later, shorter and fewer', async () => {
    const res = await ask(ports);
    expect(res.status).toBe(200);
    const four = [{ resource_type: 'network:bandwidth', ports: 4, egress_kbps: 250 }];
    expect(summary(res.body.offers)).toEqual([
      ['later', `${D} 12:00`, `${D} 14:00`, four],
      ['later', `${D} 14:00`, `${D} 16:00`, four],
      ['later', `${D} 16:00`, `${D} 18:00`, four],
      ['shorter', `${D} 10:00`, `${D} 11:00`, four],
      ['fewer', `${D} 10:00`, `${D} 12:00`, [{ resource_type: 'network:bandwidth', ports: 1, egress_kbps: 250 }]],
    ]);
    expect(summary((await ask(ports, { start_after: `${D} 12:00` })).body.offers)).toEqual([['exact', `${D} 12:00`, `${D} 14:00`, four]]);
  });

  it('offers a server exact, later and shorter; never fewer (one server is all or nothing)', async () => {
    const res = await ask(server);
    expect(res.status).toBe(200);
    const one = [{ resource_type: 'virtual:server' }];
    expect(summary(res.body.offers)).toEqual([
      ['later', `${D} 12:00`, `${D} 14:00`, one],
      ['later', `${D} 14:00`, `${D} 16:00`, one],
      ['later', `${D} 16:00`, `${D} 18:00`, one],
      ['later', `${D} 18:00`, `${D} 20:00`, one],
      ['shorter', `${D} 10:00`, `${D} 11:00`, one],
    ]);
    expect(summary((await ask(server, { start_after: `${D} 12:00` })).body.offers)).toEqual([['exact', `${D} 12:00`, `${D} 14:00`, one]]);
    // A `min` has nothing to lower.
    const min = await ask({ ...server, min: 1 });
    expect(min.status).toBe(400);
    expect(min.body).toEqual({ error_code: 400, error_name: 400, error_message: expect.stringMatching(/min/) });
  });

  /** Alpha's pending lease of `reservation` from 10:00 to 12:00 on `day`, written as a row. */
  async function pendingLease(day: string, reservation: { resource_type: string; params: Record<string, unknown> }): Promise<Lease> {
    const lease = newLease({
      id: randomUUID(),
      name: `to-extend-${reservation.resource_type.replace(':', '-')}`,
      projectId: 'alpha',
      userId: 'alpha-user',
      start: at(day, '10:00'),
      end: at(day, '12:00'),
      requestedMs: Date.now(),
      reservations: [{ id: randomUUID(), ...reservation }],
    });
    await insertLeaseRows(stack().db.pool, [lease]);
    return lease;
  }
  const own = (lease: Lease, providerUuid: string, amounts: Record<string, number>) =>
    insertQuantityBookingRow(stack().db.pool, { providerUuid, leaseId: lease.id, projectId: 'alpha', amounts, startMs: lease.startMs, endMs: lease.endMs });
  const extensionOffers = async (lease: Lease) => {
    const res = await alpha('GET', `/v1/leases/${lease.id}/extension-offers`);
    expect(res.status).toBe(200);
    return res.body.offers.map((o: { kind: string; end_date: string; reservations: unknown[] }) => [o.kind, o.end_date, o.reservations]);
  };
  /** The ends offered when the latest is 13:00 on `day`: that, then halfway there from 12:00, and halves again. */
  const stepsTo13 = (day: string, reservations: unknown[]) => ['13:00', '12:30', '12:15', '12:07'].map((hhmm) => ['extension', `${day} ${hhmm}`, reservations]);

  it('offers extensions of flavor:instance slots, bandwidth and a server: up to where others\' bookings leave no room on their providers', async () => {
    // From 13:00 others take what the leases' providers have left beside them.
    await othersBooking(SLOT_NODE, { VCPU: 12, MEMORY_MB: 12_288, DISK_GB: 60 }, at(E, '13:00'), at(E, '14:00'));
    await othersBooking(SERVER_NODE, { VCPU: 1 }, at(E, '13:00'), at(E, '14:00'));
    await othersBooking(BW_NODE, { [EGRESS]: 600 }, at(E, '13:00'), at(E, '14:00'));
    // Bookings that still leave room do not stop an extension.
    await othersBooking(SLOT_NODE, { VCPU: 8, MEMORY_MB: 8192, DISK_GB: 40 }, at(E, '12:00'), at(E, '13:00'));
    await othersBooking(BW_NODE, { [EGRESS]: 500 }, at(E, '12:00'), at(E, '13:00'));

    const slots = await pendingLease(E, { resource_type: 'flavor:instance', params: { flavor_id: FLAVOR, amount: 2, affinity: null, resource_properties: '', before_end: 'default' } });
    for (let i = 0; i < 2; i++) await own(slots, SLOT_NODE, SLOT);
    expect(await extensionOffers(slots)).toEqual(stepsTo13(E, [{ resource_type: 'flavor:instance', instances: 2 }]));

    const bandwidth = await pendingLease(E, { resource_type: 'network:bandwidth', params: { network_id: NETWORK, egress_kbps: 250, amount: 2, vnic_type: 'normal', resource_properties: '' } });
    await own(bandwidth, BW_NODE, { [EGRESS]: 500 });
    expect(await extensionOffers(bandwidth)).toEqual(stepsTo13(E, [{ resource_type: 'network:bandwidth', ports: 2, egress_kbps: 250 }]));

    const serverLease = await pendingLease(E, { resource_type: 'virtual:server', params: { server_id: SERVER, on_end: 'shelve', on_cancel: 'unshelve', host_full: 'default', resource_properties: '' } });
    await own(serverLease, SERVER_NODE, SERVER_SIZE);
    expect(await extensionOffers(serverLease)).toEqual(stepsTo13(E, [{ resource_type: 'virtual:server' }]));
  });

  it('offers extensions of instance slots up to the next whole-host lease of their host; none when others fill it right after', async () => {
    const slots = await pendingLease(F, { resource_type: 'virtual:instance', params: { vcpus: 4, memory_mb: 4096, disk_gb: 20, amount: 1, affinity: null, resource_properties: '', before_end: 'default' } });
    await own(slots, SLOT_NODE, SLOT);
    // Capacity is free all day on F; another project's whole-host lease takes the host from 13:00.
    const hostLease = newLease({ id: randomUUID(), name: 'beta-host', projectId: 'beta', userId: 'beta-user', start: at(F, '13:00'), end: at(F, '15:00'), requestedMs: Date.now(), reservations: [] });
    await insertHostBookingRows(stack().db.pool, [{ hostId: slotHostId, lease: hostLease }]);
    expect(await extensionOffers(slots)).toEqual(stepsTo13(F, [{ resource_type: 'virtual:instance', instances: 1 }]));

    // Full right after its end: no extension, and a note says so.
    await othersBooking(SLOT_NODE, { VCPU: 16 }, at(F, '12:00'), at(F, '12:30'));
    const res = await alpha('GET', `/v1/leases/${slots.id}/extension-offers`);
    expect(res.body).toEqual({ offers: [], note: expect.stringMatching(/cannot be extended now/) });
  });
});
