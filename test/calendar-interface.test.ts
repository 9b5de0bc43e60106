/**
 * The four calendars used only through their declared interface (src/domain/calendar.ts), against
 * the real PostgreSQL: a booking that fills the calendar makes a second one over an overlapping
 * window a 409 whose earliest start is the first one's end, the search says the same, and once the
 * first is released by its reservation id the window is free again.
 */
import { randomUUID } from 'node:crypto';
import type { Calendar, CalendarTypes } from '../src/domain/calendar';
import { reuseStart } from '../src/domain/dates';
import type { Reservation } from '../src/domain/lease';
import type { ReservationContext } from '../src/domain/resource-plugin';
import type { Pool } from '../src/db/pool';
import { insertFloatingIp } from '../src/db/floating-ips';
import { syncCapacityProviders } from '../src/db/quantity-allocations';
import { FloatingIpCalendar, VIRTUAL_FLOATINGIP } from '../src/resources/floating-ip/calendar';
import { floatingIpParams } from '../src/resources/floating-ip/params';
import { HostCalendar, PHYSICAL_HOST } from '../src/resources/physical-host/calendar';
import { physicalHostParams } from '../src/resources/physical-host/params';
import { COMPUTE_KIND } from '../src/resources/shared/compute-providers';
import { QuantityCalendar, type QuantityRequest } from '../src/resources/shared/quantity-bookings';
import { virtualInstance } from '../src/resources/virtual-instance';
import { InstanceSlotCalendar, VIRTUAL_INSTANCE } from '../src/resources/virtual-instance/calendar';
import { virtualInstanceParams } from '../src/resources/virtual-instance/params';
import { pendingReservation, refusal, reservationContext } from '../dev-stack/fixtures/builders';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { insertHost } from '../dev-stack/fixtures/hosts';

const H = 3_600_000;
const T0 = Date.UTC(2099, 5, 1);
const NETWORK = '11111111-1111-4111-8111-111111111111';

interface Request<T extends CalendarTypes> {
  reservation: Reservation;
  args: T['bookArgs'];
  searchFor: T['searchFor'];
}

/** One calendar with room for exactly one booking of `request`, and how to ask for it. */
interface Case<T extends CalendarTypes> {
  calendar: (pool: Pool) => Calendar<T>;
  enrol: (pool: Pool) => Promise<void>;
  /** A new reservation filling the calendar: the booking's arguments after its context, and what a search for it looks for. */
  request: () => Request<T> | Promise<Request<T>>;
}

function calendarCase<T extends CalendarTypes>(c: Case<T>): Case<CalendarTypes> {
  return c;
}

const CASES: Array<[string, Case<CalendarTypes>]> = [
  [
    'hosts',
    calendarCase({
      calendar: (pool) => new HostCalendar(pool, { cleaningMs: 0, randomChoice: false }),
      enrol: async (pool) => void (await insertHost(pool, { name: 'node-1' })),
      request: () => {
        const reservation = pendingReservation(PHYSICAL_HOST, physicalHostParams.parse({ min: 1, max: 1, hypervisor_properties: '', resource_properties: '' }));
        return { reservation, args: [] as [], searchFor: [reservation] };
      },
    }),
  ],
  [
    'floating IPs',
    calendarCase({
      calendar: (pool) => new FloatingIpCalendar(pool),
      enrol: async (pool) => void (await insertFloatingIp(pool, { id: randomUUID(), networkId: NETWORK, subnetId: 'subnet-1', address: '203.0.113.100' })),
      request: () => {
        const reservation = pendingReservation(VIRTUAL_FLOATINGIP, floatingIpParams.parse({ network_id: NETWORK, amount: 1 }));
        return { reservation, args: [] as [], searchFor: [reservation] };
      },
    }),
  ],
  [
    'instance slots',
    calendarCase({
      calendar: (pool) => new InstanceSlotCalendar(pool, { cleaningMs: 0 }),
      enrol: async (pool) => {
        await insertHost(pool, { name: 'node-1' });
        await syncCapacityProviders(pool, COMPUTE_KIND, [{ uuid: 'uuid-node-1', name: 'node-1', host: 'node-1', capacity: { VCPU: 2, MEMORY_MB: 2048, DISK_GB: 20 }, traits: [] }]);
      },
      request: async () => {
        const reservation = pendingReservation(VIRTUAL_INSTANCE, virtualInstanceParams.parse({ vcpus: 2, memory_mb: 1024, disk_gb: 10, amount: 1, affinity: 'None', resource_properties: '' }));
        const { spec } = await virtualInstance.describe(reservation, 'p');
        return { reservation, args: [spec], searchFor: [{ reservation, spec }] };
      },
    }),
  ],
  [
    'quantities',
    calendarCase({
      calendar: (pool) => new QuantityCalendar(pool),
      enrol: (pool) => syncCapacityProviders(pool, 'compute', [{ uuid: 'aaaaaaaa-0000-0000-0000-000000000001', name: 'node-1', host: 'node-1', capacity: { VCPU: 4 }, traits: [] }]),
      request: () => {
        const request: QuantityRequest = { kind: 'compute', amounts: { VCPU: 4 }, describe: '4 vcpus', matches: () => true };
        return { reservation: pendingReservation('virtual:server', {}), args: [request], searchFor: request };
      },
    }),
  ],
];

describe('the calendar interface', () => {
  const database = useMigratedTestDatabase();

  beforeEach(async () => {
    await database().pool.query('TRUNCATE host_allocations, quantity_allocations, capacity_providers, floating_ip_allocations, floating_ips, host_capabilities, hosts CASCADE');
  });

  it.each(CASES)('%s: book, refuse with the earliest start, search, release by reservation id', async (_name, c) => {
    const { pool } = database();
    await c.enrol(pool);
    const calendar = c.calendar(pool);
    const context = (reservation: Reservation, startH: number, endH: number): ReservationContext =>
      reservationContext({ reservation, leaseName: 'l', startMs: T0 + startH * H, endMs: T0 + endH * H });

    const first = await c.request();
    await calendar.book(context(first.reservation, 0, 2), ...first.args);

    const second = await c.request();
    const refused = await refusal(calendar.book(context(second.reservation, 1, 3), ...second.args));
    expect(refused.type).toBe('LeaseConflict');
    expect(refused.details?.[0]).toMatchObject({ earliest_start: reuseStart(T0 + 2 * H) });
    expect((await calendar.search(second.searchFor, T0 + H, 2 * H, 0)).earliest).toBe(T0 + 2 * H);

    await calendar.release(first.reservation.id, false);
    expect((await calendar.search(second.searchFor, T0 + H, 2 * H, 0)).earliest).toBe(T0 + H);
    await calendar.book(context(second.reservation, 1, 3), ...second.args);
  });
});
