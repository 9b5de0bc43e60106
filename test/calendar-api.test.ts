/**
 * GET /v1/calendar: what the calendar page draws for a window, under the API's policy (another
 * project's bookings say only `reserved`; private capabilities are the admins'), bounded and validated.
 */
import { MAX_CALENDAR_BOOKINGS } from '../src/api/calendar';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { blazarHostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { insertQuantityBookingRow } from '../dev-stack/fixtures/lease-rows';
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
});
