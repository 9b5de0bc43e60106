/**
 * GET /v1/calendar: what the calendar page draws for a window, under the API's policy (another
 * project's bookings say only `reserved`; private capabilities are the admins'), bounded and validated;
 * preemptible bookings flagged there and in the allocations API, a preempted lease's with its cut;
 * lent time and the bookings inside it (issue 43).
 */
import { randomUUID } from 'node:crypto';
import { MAX_CALENDAR_BOOKINGS } from '../src/api/calendar';
import type { Lease } from '../src/domain/lease';
import { preemptionReason } from '../src/domain/preemption';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { lenderRowsOf } from '../src/db/host-allocations';
import { insertLendings } from '../src/db/host-lendings';
import { inTransaction } from '../src/db/transaction';
import { blazarHostReservation, pendingReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { insertLeaseRows, insertQuantityBookingRow } from '../dev-stack/fixtures/lease-rows';
import { apiClient, useTestStack } from '../dev-stack/stack';

const DAY = 86_400_000;
/** Two days after today (UTC), at a whole hour: inside any window the tests ask for. */
const day = Math.floor(Date.now() / DAY) * DAY + 2 * DAY;
const at = (hour: number) => new Date(day + hour * 3_600_000).toISOString().slice(0, 16).replace('T', ' ');
const iso = (ms: number) => new Date(ms).toISOString();

describe('GET /v1/calendar', () => {
  const stack = useTestStack({ withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
  const admin = apiClient(() => stack().url);
  const alpha = apiClient(() => stack().url, { 'X-Project-Id': 'alpha', 'X-Roles': 'member' });
  const beta = apiClient(() => stack().url, { 'X-Project-Id': 'beta', 'X-Roles': 'member' });
  const hostIds: Record<string, string> = {};
  let alphaLease: string;
  let betaLease: string;

  beforeAll(async () => {
    for (const [name, gpu] of [['gpu-1', 'a100'], ['cpu-1', 'none'], ['cpu-2', 'none']] as const) {
      hostIds[name] = await insertHost(stack().db.pool, { name, capabilities: { gpu, rack: `r-${name}` } });
    }
    expect((await admin('PATCH', '/v1/os-hosts/properties/rack', { private: true })).status).toBe(200);
    const a = await alpha('POST', '/v1/leases', { name: 'alpha-gpu-run', start_date: at(10), end_date: at(12), reservations: [blazarHostReservation({ resource_properties: '["==", "$gpu", "a100"]' })] });
    expect(a.status).toBe(201);
    alphaLease = a.body.lease.id;
    const b = await beta('POST', '/v1/leases', { name: 'beta-secret-experiment', start_date: at(11), end_date: at(15), reservations: [blazarHostReservation({ min: 2, max: 2, resource_properties: '["==", "$gpu", "none"]' })] });
    expect(b.status).toBe(201);
    betaLease = b.body.lease.id;
    // Quantities on a compute provider: 4 vCPUs of alpha's, 8 of beta's.
    const pool = stack().db.pool;
    await pool.query(`INSERT INTO capacity_providers (uuid, name, host, kind, capacity) VALUES ('p-1', 'cpu-1', 'cpu-1', 'compute', '{"VCPU": 16, "MEMORY_MB": 32768}')`);
    for (const [leaseId, projectId, vcpus] of [[alphaLease, 'alpha', 4], [betaLease, 'beta', 8]] as const) {
      await insertQuantityBookingRow(pool, { providerUuid: 'p-1', leaseId, projectId, amounts: { VCPU: vcpus }, startMs: day + 13 * 3_600_000, endMs: day + 14 * 3_600_000 });
    }
  });

  const window = (query: Record<string, string> = {}) => `/v1/calendar?${new URLSearchParams({ start: iso(day), end: iso(day + DAY), ...query }).toString()}`;

  it("shows the caller's own bookings with their lease, another project's as reserved and nothing more", async () => {
    const res = await alpha('GET', window());
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ start_ms: day, end_ms: day + DAY });
    expect(res.body.hosts.map((h: { hypervisor_hostname: string }) => h.hypervisor_hostname)).toEqual(['gpu-1', 'cpu-1', 'cpu-2']);
    const own = res.body.bookings.filter((b: { lease_id?: string }) => b.lease_id === alphaLease);
    expect(own).toEqual([{ host_id: hostIds['gpu-1'], start_ms: day + 10 * 3_600_000, end_ms: day + 12 * 3_600_000, lease_id: alphaLease, reservation_id: expect.any(String), lease_name: 'alpha-gpu-run', status: 'PENDING', mine: true }]);
    const others = res.body.bookings.filter((b: { reserved?: boolean }) => b.reserved);
    expect(others).toEqual([
      { host_id: hostIds['cpu-1'], start_ms: day + 11 * 3_600_000, end_ms: day + 15 * 3_600_000, reserved: true },
      { host_id: hostIds['cpu-2'], start_ms: day + 11 * 3_600_000, end_ms: day + 15 * 3_600_000, reserved: true },
    ]);
    const text = JSON.stringify(res.body);
    expect(text).not.toContain('beta-secret-experiment');
    expect(text).not.toContain(betaLease);
    expect(text).not.toContain('"beta"');
    // Its own project's leases in the window, whatever they book; none of another project's.
    expect(res.body.leases).toEqual([{ id: alphaLease, name: 'alpha-gpu-run', status: 'PENDING', start_ms: day + 10 * 3_600_000, end_ms: day + 12 * 3_600_000 }]);
    // The private capability is unknown to a member, and known to an admin.
    expect(res.body.hosts[0].properties).toEqual({ gpu: 'a100' });
    // The quantities: own with the lease, the other project's without.
    expect(res.body.providers).toEqual([{ uuid: 'p-1', name: 'cpu-1', host: 'cpu-1', kind: 'compute', capacity: { VCPU: 16, MEMORY_MB: 32768 }, usable: true }]);
    expect(res.body.usage).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ provider_uuid: 'p-1', amounts: { VCPU: 4 }, lease_name: 'alpha-gpu-run', mine: true }),
        { provider_uuid: 'p-1', amounts: { VCPU: 8 }, start_ms: day + 13 * 3_600_000, end_ms: day + 14 * 3_600_000, reserved: true },
      ]),
    );
  });

  it('shows an admin every booking with its lease and project', async () => {
    const res = await admin('GET', window());
    expect(res.status).toBe(200);
    expect(res.body.bookings).toHaveLength(3);
    expect(res.body.bookings.every((b: { lease_name?: string; project_id?: string }) => b.lease_name && b.project_id)).toBe(true);
    expect(res.body.bookings.find((b: { lease_id: string }) => b.lease_id === betaLease)).toMatchObject({ lease_name: 'beta-secret-experiment', project_id: 'beta', mine: false });
    expect(res.body.hosts[0].properties).toEqual({ gpu: 'a100', rack: 'r-gpu-1' });
  });

  it('returns only the bookings overlapping the window, and only the hosts the property query matches', async () => {
    const morning = await alpha('GET', window({ start: iso(day), end: iso(day + 10.5 * 3_600_000) }));
    expect(morning.body.bookings.map((b: { lease_id?: string }) => b.lease_id)).toEqual([alphaLease]);
    const before = await alpha('GET', window({ start: iso(day), end: iso(day + 10 * 3_600_000) }));
    expect(before.body.bookings).toEqual([]); // [start, end): a booking from 10:00 is not in a window ending at 10:00
    const cpus = await alpha('GET', window({ resource_properties: '["==", "$gpu", "none"]' }));
    expect(cpus.body.hosts.map((h: { id: string }) => h.id)).toEqual([hostIds['cpu-1'], hostIds['cpu-2']]);
    expect(cpus.body.bookings.every((b: { reserved?: boolean }) => b.reserved)).toBe(true);
  });

  it('cuts an answer past its booking limit short, and says so', async () => {
    // 30 001 one-minute bookings of cpu-2 a week after the others (more than one answer holds).
    const from = day + 7 * DAY;
    await stack().db.pool.query(
      `INSERT INTO host_allocations (host_id, reservation_id, lease_id, project_id, during, blocks, booking_key)
       SELECT $1, gen_random_uuid(), gen_random_uuid(), 'gamma', tstzrange(t, t + interval '1 minute'), tstzrange(t, t + interval '1 minute'), 'many'
       FROM generate_series(to_timestamp($2 / 1000.0), to_timestamp($2 / 1000.0) + interval '30000 minutes', interval '1 minute') AS t`,
      [hostIds['cpu-2'], from],
    );
    const res = await alpha('GET', window({ start: iso(from), end: iso(from + 30 * DAY) }));
    expect(res.status).toBe(200);
    expect(res.body.bookings).toHaveLength(MAX_CALENDAR_BOOKINGS);
    expect(res.body).toMatchObject({ truncated: true, note: expect.stringContaining(`more than ${MAX_CALENDAR_BOOKINGS} bookings`) });
    expect(res.body.leases).toEqual([]); // alpha has none that week
    const fewer = await alpha('GET', window({ start: iso(from), end: iso(from + DAY) }));
    expect(fewer.body.truncated).toBeUndefined();
    expect(fewer.body.bookings).toHaveLength(24 * 60);
    await stack().db.pool.query(`DELETE FROM host_allocations WHERE booking_key = 'many'`);
  });

  it('refuses bad windows and queries with a 400 that names the problem', async () => {
    const cases: Array<[Record<string, string>, RegExp]> = [
      [{ end: iso(day) }, /end must be later than start/],
      [{ end: iso(day + 94 * DAY) }, /at most 93 days/],
      [{ start: 'tomorrow' }, /start/],
      [{ resource_properties: '["==", "$gpu"' }, /resource_properties/],
      [{ resource_properties: '["==", "$rack", "r-cpu-1"]' }, /resource_properties|rack/], // private: as if no host had it
      [{ colour: 'red' }, /colour/],
    ];
    for (const [query, message] of cases) {
      const res = await alpha('GET', window(query));
      expect({ query, status: res.status }).toEqual({ query, status: 400 });
      expect(res.body).toMatchObject({ error_code: 400 });
      expect(res.body.error_message).toMatch(message);
    }
    const missing = await alpha('GET', '/v1/calendar');
    expect(missing.status).toBe(400);
  });

  describe('preemptible bookings (issue 43)', () => {
    const HOUR = 3_600_000;
    const later = day + 3 * DAY; // clear of the bookings above
    const spare = (slot: string, fields: Record<string, unknown> = {}) => blazarHostReservation({ resource_properties: JSON.stringify(['==', '$slot', slot]), ...fields });
    const leaseIds: Record<string, string> = {};
    const create = async (who: typeof alpha, name: string, fromH: number, toH: number, reservation: Record<string, unknown>) => {
      const res = await who('POST', '/v1/leases', { name, start_date: at(72 + fromH), end_date: at(72 + toH), reservations: [reservation] });
      expect({ name, status: res.status }).toEqual({ name, status: 201 });
      leaseIds[name] = res.body.lease.id;
    };
    /** A lease row of alpha's written as its workflow would, with one booking of `hostId` (no workflow: what only the database says). */
    const insertAlphaLease = async (name: string, fields: Pick<Lease, 'status' | 'reservations'> & Partial<Lease>, hostId: string, booking: { shared?: boolean; preemptible?: boolean }) => {
      const lease: Lease = { id: randomUUID(), name, projectId: 'alpha', userId: 'alpha-user', startMs: later + 20 * HOUR, endMs: later + 21 * HOUR, events: [], createdMs: Date.now(), updatedMs: Date.now(), version: 1, ...fields };
      await insertLeaseRows(stack().db.pool, [lease]);
      await stack().db.pool.query(
        `INSERT INTO host_allocations (host_id, reservation_id, lease_id, project_id, during, blocks, booking_key, shared, preemptible)
         VALUES ($1, $2, $3, 'alpha', tstzrange(to_timestamp($4 / 1000.0), to_timestamp($5 / 1000.0)), tstzrange(to_timestamp($4 / 1000.0), to_timestamp($5 / 1000.0)), $6, $7, $8)`,
        [hostId, lease.reservations[0].id, lease.id, lease.startMs, lease.endMs, `inserted-${name}`, booking.shared ?? false, booking.preemptible ?? false],
      );
      leaseIds[name] = lease.id;
    };

    beforeAll(async () => {
      for (const slot of ['a', 'b']) hostIds[`spare-${slot}`] = await insertHost(stack().db.pool, { name: `spare-${slot}`, capabilities: { gpu: 'spare', slot, rack: 'r-spare' } });
      await create(alpha, 'alpha-preemptible', 10, 14, spare('a', { preemptible: true }));
      await create(beta, 'beta-preemptible', 10, 14, spare('b', { preemptible: true }));
      // A regular lease needs spare-a from 12:00: alpha's preemptible lease is cut to end then (no cleaning gap here).
      await create(beta, 'beta-regular', 12, 13, spare('a'));
      // Instance slots: their shared host row is flagged as the slot calendar writes it (migration 034).
      await insertAlphaLease('alpha-slots', { status: 'PENDING', reservations: [pendingReservation('virtual:instance', { amount: 1, preemptible: true })] }, hostIds['spare-b'], { shared: true, preemptible: true });
      // A preempted lease that ended long ago, its owed cut's row purged: no longer marked (its status_reason alone may be stale: the lease may have been booked anew since).
      await insertAlphaLease(
        'alpha-preempted-long-ago',
        { status: 'TERMINATED', statusReason: preemptionReason(later + 22 * HOUR), startMs: later + 21 * HOUR, endMs: later + 22 * HOUR, reservations: [pendingReservation('physical:host', { min: 1, max: 1, preemptible: true })] },
        hostIds['spare-a'],
        { preemptible: true },
      );
    });

    const laterWindow = () => window({ start: iso(later), end: iso(later + DAY), resource_properties: '["==", "$gpu", "spare"]' });
    const withLease = (bookings: Array<{ lease_id?: string }>, name: string) => bookings.filter((b) => b.lease_id === leaseIds[name]);

    it("says which bookings are preemptible (anyone's), and a preempted lease's cut to whoever may know the lease", async () => {
      const mine = await alpha('GET', laterWindow());
      expect(mine.status).toBe(200);
      const base = { reservation_id: expect.any(String), status: expect.any(String), mine: true };
      expect(withLease(mine.body.bookings, 'alpha-preemptible')).toEqual([
        { host_id: hostIds['spare-a'], preemptible: true, start_ms: later + 10 * HOUR, end_ms: later + 12 * HOUR, lease_id: leaseIds['alpha-preemptible'], lease_name: 'alpha-preemptible', ...base, preempted: true, cut_ms: later + 12 * HOUR },
      ]);
      expect(withLease(mine.body.bookings, 'alpha-slots')).toEqual([
        { host_id: hostIds['spare-b'], shared: true, preemptible: true, start_ms: later + 20 * HOUR, end_ms: later + 21 * HOUR, lease_id: leaseIds['alpha-slots'], lease_name: 'alpha-slots', ...base },
      ]);
      expect(withLease(mine.body.bookings, 'alpha-preempted-long-ago')).toEqual([
        { host_id: hostIds['spare-a'], preemptible: true, start_ms: later + 21 * HOUR, end_ms: later + 22 * HOUR, lease_id: leaseIds['alpha-preempted-long-ago'], lease_name: 'alpha-preempted-long-ago', ...base, status: 'TERMINATED' },
      ]);
      // Beta's: the regular booking says nothing more than before; the preemptible one says so, and nothing of whose it is.
      const others = mine.body.bookings.filter((b: { reserved?: boolean }) => b.reserved);
      expect(others).toEqual([
        { host_id: hostIds['spare-a'], start_ms: later + 12 * HOUR, end_ms: later + 13 * HOUR, reserved: true },
        { host_id: hostIds['spare-b'], preemptible: true, start_ms: later + 10 * HOUR, end_ms: later + 14 * HOUR, reserved: true },
      ]);
      expect(mine.body.leases.filter((l: { preemptible?: boolean }) => l.preemptible).map((l: { name: string }) => l.name).sort()).toEqual(['alpha-preempted-long-ago', 'alpha-preemptible', 'alpha-slots']);

      // Beta sees alpha's preempted booking as preemptible and reserved: not that it was preempted, nor its lease.
      const theirs = await beta('GET', laterWindow());
      const alphaOnA = theirs.body.bookings.filter((b: { host_id: string; reserved?: boolean; start_ms: number }) => b.reserved && b.host_id === hostIds['spare-a']);
      expect(alphaOnA).toEqual([
        { host_id: hostIds['spare-a'], preemptible: true, start_ms: later + 10 * HOUR, end_ms: later + 12 * HOUR, reserved: true },
        { host_id: hostIds['spare-a'], preemptible: true, start_ms: later + 21 * HOUR, end_ms: later + 22 * HOUR, reserved: true },
      ]);
      expect(withLease(theirs.body.bookings, 'beta-regular')[0]).not.toHaveProperty('preemptible');
      expect(withLease(theirs.body.bookings, 'beta-preemptible')[0]).toMatchObject({ preemptible: true, mine: true });
      expect(JSON.stringify(theirs.body)).not.toMatch(/preempted|cut_ms|alpha/);

      // An admin sees the cut of any project's lease.
      const all = await admin('GET', laterWindow());
      expect(withLease(all.body.bookings, 'alpha-preemptible')).toEqual([expect.objectContaining({ project_id: 'alpha', preempted: true, cut_ms: later + 12 * HOUR })]);
    });

    it("draws lent time to anyone, its lending lease to whoever may know it, and marks the bookings inside it borrowed", async () => {
      const lentDay = day + 6 * DAY; // clear of the bookings above
      const lentAt = (hour: number) => new Date(lentDay + hour * HOUR).toISOString().slice(0, 16).replace('T', ' ');
      const lentHost = await insertHost(stack().db.pool, { name: 'lent-1', capabilities: { gpu: 'lent', rack: 'r-lent' } });
      const onLentHost = blazarHostReservation({ resource_properties: '["==", "$gpu", "lent"]' });
      const lender = await alpha('POST', '/v1/leases', { name: 'alpha-lender', start_date: lentAt(10), end_date: lentAt(20), reservations: [onLentHost] });
      expect(lender.status).toBe(201);
      const reservationId: string = lender.body.lease.reservations[0].id;
      await inTransaction(stack().db.pool, async (client) =>
        insertLendings(client, { lendingId: randomUUID(), reservationId, leaseId: lender.body.lease.id, projectId: 'alpha', hosts: await lenderRowsOf(client, reservationId, [lentHost]), fromMs: lentDay + 12 * HOUR, untilMs: lentDay + 18 * HOUR }),
      );
      const borrower = await beta('POST', '/v1/leases', { name: 'beta-borrower', start_date: lentAt(13), end_date: lentAt(15), reservations: [{ ...onLentHost, preemptible: true }] });
      expect(borrower.status).toBe(201);
      const lentWindow = () => window({ start: iso(lentDay), end: iso(lentDay + DAY), resource_properties: '["==", "$gpu", "lent"]' });
      const span = { host_id: lentHost, start_ms: lentDay + 12 * HOUR, end_ms: lentDay + 18 * HOUR, state: 'lent' };
      const borrowed = { host_id: lentHost, preemptible: true, borrowed: true, start_ms: lentDay + 13 * HOUR, end_ms: lentDay + 15 * HOUR };

      const lenders = await alpha('GET', lentWindow());
      expect(lenders.status).toBe(200);
      expect(lenders.body.lent).toEqual([{ ...span, lease_id: lender.body.lease.id }]);
      expect(lenders.body.bookings.filter((b: { borrowed?: boolean }) => b.borrowed)).toEqual([{ ...borrowed, reserved: true }]);
      expect(JSON.stringify(lenders.body)).not.toContain(borrower.body.lease.id);

      const borrowers = await beta('GET', lentWindow());
      expect(borrowers.body.lent).toEqual([span]);
      expect(borrowers.body.bookings.filter((b: { borrowed?: boolean }) => b.borrowed)).toEqual([{ ...borrowed, lease_id: borrower.body.lease.id, lease_name: 'beta-borrower', reservation_id: expect.any(String), status: 'PENDING', mine: true }]);
      expect(JSON.stringify(borrowers.body)).not.toContain(lender.body.lease.id);
      // The lender's own booking is not borrowed.
      expect(borrowers.body.bookings.filter((b: { reserved?: boolean }) => b.reserved)).toEqual([{ host_id: lentHost, start_ms: lentDay + 10 * HOUR, end_ms: lentDay + 20 * HOUR, reserved: true }]);

      expect((await admin('GET', lentWindow())).body.lent).toEqual([{ ...span, lease_id: lender.body.lease.id }]);
    });

    it('the allocations API marks each preemptible reservation of a host `preemptible: true`', async () => {
      type Entry = { id: string; lease_id: string; preemptible?: boolean };
      const flags = (reservations: Entry[]) => Object.fromEntries(reservations.map((r) => [Object.keys(leaseIds).find((name) => leaseIds[name] === r.lease_id), r.preemptible]));
      const one = await admin('GET', `/v1/os-hosts/${hostIds['spare-a']}/allocation`);
      expect(one.status).toBe(200);
      expect(flags(one.body.allocation.reservations)).toEqual({ 'alpha-preemptible': true, 'beta-regular': undefined, 'alpha-preempted-long-ago': true });
      expect(one.body.allocation.reservations.find((r: Entry) => r.lease_id === leaseIds['beta-regular'])).not.toHaveProperty('preemptible');
      // The streamed list: a whole host's flag, and instance slots' from their reservation's params.
      const list = await admin('GET', '/v1/os-hosts/allocations');
      const onSpareB = list.body.allocations.find((a: { resource_id: string }) => a.resource_id === hostIds['spare-b']);
      expect(flags(onSpareB.reservations)).toEqual({ 'beta-preemptible': true, 'alpha-slots': true });
      // A member sees its own, flagged as well.
      const own = await alpha('GET', `/v1/os-hosts/allocations?lease_id=${leaseIds['alpha-preemptible']}`);
      expect(own.body.allocations).toEqual([{ resource_id: hostIds['spare-a'], hypervisor_hostname: 'spare-a', reservations: [expect.objectContaining({ lease_id: leaseIds['alpha-preemptible'], preemptible: true })] }]);
    });
  });
});
