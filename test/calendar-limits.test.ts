/**
 * Requests that used to take the service down (issue 15, item 1) and the dates the calendar hands
 * back for reuse (item 16): the number of reservations is capped at the edge, a minimum larger
 * than the enrolled hosts is refused before any search, and every date a client may send back is a
 * request date on a whole minute that is still valid.
 */
import { physicalHostPlugin } from '../src/resources/physical-host';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, useTestStack } from '../dev-stack/stack';

describe('calendar limits: one request cannot stop the service', () => {
  const stack = useTestStack({ withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
  const api = apiClient(() => stack().url);
  beforeAll(async () => {
    for (const name of ['limit-a', 'limit-b', 'odd-seconds']) await insertHost(stack().db.pool, { name });
  });

  const huge = hostReservation({ min: 10_000, max: 10_000 });
  const one = hostReservation({ hypervisor_properties: '["==", "$hypervisor_hostname", "limit-a"]' });
  const window = { start_date: '2099-01-01 10:00', end_date: '2099-01-01 11:00' };

  it('refuses 16 000 reservations (1 MB) with a 400 naming the field, and keeps answering others', async () => {
    const [search, health] = await Promise.all([
      api('POST', '/v1/availability/search', { ...window, reservations: Array.from({ length: 16_000 }, () => huge) }),
      api('GET', '/healthz'),
    ]);
    expect(search.status).toBe(400);
    expect(search.body.error_message).toBe('reservations: at most 50 reservations per lease');
    expect(health.status).toBe(200);
    expect((await api('GET', '/healthz')).status).toBe(200);
  });

  it('allows 50 reservations and refuses 51, on create and on search', async () => {
    const fifty = await api('POST', '/v1/availability/search', { ...window, reservations: Array.from({ length: 50 }, () => ({ ...one, min: 0 })) });
    expect(fifty.status).toBe(400); // min 0 is refused by the host schema: the cap let it through to the reservations' own checks
    expect(fifty.body.error_message).toBe('Malformed parameter min and max (must be greater than or equal to 1). reservations[0].min: must be at least 1');
    const fiftyOk = await api('POST', '/v1/availability/search', { ...window, reservations: [one, ...Array.from({ length: 49 }, () => hostReservation({ hypervisor_properties: '["==", "$hypervisor_hostname", "nowhere"]' }))] });
    expect(fiftyOk.status).toBe(200);
    expect(fiftyOk.body.earliest).toBeNull();
    const fiftyOne = Array.from({ length: 51 }, () => one);
    const search = await api('POST', '/v1/availability/search', { ...window, reservations: fiftyOne });
    expect(search.status).toBe(400);
    expect(search.body.error_message).toBe('reservations: at most 50 reservations per lease');
    const create = await api('POST', '/v1/leases', { name: 'fifty-one', ...window, reservations: fiftyOne });
    expect(create.status).toBe(400);
    expect(create.body.error_message).toBe('reservations: at most 50 reservations per lease');
  });

  it('refuses a minimum larger than the enrolled hosts before any search, with a clear 409', async () => {
    const search = await api('POST', '/v1/availability/search', { ...window, reservations: [hostReservation({ min: 500, max: 500 })] });
    expect(search.status).toBe(409);
    expect(search.body.error_message).toMatch(/^Not enough hosts available\. It never fits: reservation search-0 needs at least 500 host\(s\) \(3 match its properties\); only 3 reservable host\(s\) are enrolled\.$/);
    const create = await api('POST', '/v1/leases', { name: 'too-big', ...window, reservations: [hostReservation({ min: 4, max: 4 })] });
    expect(create.status).toBe(409);
    expect(create.body).toMatchObject({ earliest_start: null, earliest_end: null, longest_end: null });
    expect(create.body.error_message).toMatch(/needs at least 4 host\(s\) \(3 match its properties\); only 3 reservable host\(s\) are enrolled/);
  });

  it('refuses a lease of 50 reservations of 10 000 hosts each, and the API still answers', async () => {
    const create = await api('POST', '/v1/leases', { name: 'fifty-huge', ...window, reservations: Array.from({ length: 50 }, () => huge) });
    expect(create.status).toBe(409);
    expect(create.body.error_message).toMatch(/needs at least 10000 host\(s\).*only 3 reservable host\(s\) are enrolled/);
    expect((await api('GET', '/healthz')).status).toBe(200);
    const fine = await api('POST', '/v1/leases', { name: 'after-huge', ...window, reservations: [one] });
    expect(fine.status).toBe(201);
  });
});

describe('dates handed back for reuse: request dates on whole minutes that are still valid', () => {
  const stack = useTestStack({ withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
  const api = apiClient(() => stack().url);
  const odd = hostReservation({ hypervisor_properties: '["==", "$hypervisor_hostname", "odd-seconds"]' });

  beforeAll(async () => {
    const hostId = await insertHost(stack().db.pool, { name: 'odd-seconds' });
    // Bookings with seconds (a lease started "now" has them): 10:00:00–11:00:30, and 10:00:30–11:00:00 the next day.
    for (const [start, end] of [
      ['2099-01-10 10:00:00+00', '2099-01-10 11:00:30+00'],
      ['2099-01-11 10:00:30+00', '2099-01-11 11:00:00+00'],
    ]) {
      await stack().db.pool.query(
        `INSERT INTO host_allocations (host_id, reservation_id, lease_id, project_id, during, blocks, booking_key)
         VALUES ($1, gen_random_uuid(), gen_random_uuid(), 'other', tstzrange($2, $3), tstzrange($2, $3), 'test')`,
        [hostId, start, end],
      );
    }
  });

  const lease = (name: string, start: string, end: string) => api('POST', '/v1/leases', { name, start_date: start, end_date: end, reservations: [odd] });

  it('rounds the earliest start up to the whole minute, and the retry with it is admitted', async () => {
    const refused = await lease('after-odd', '2099-01-10 10:30', '2099-01-10 11:30');
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ earliest_start: '2099-01-10 11:01', earliest_end: '2099-01-10 12:01' });
    expect((await lease('after-odd', refused.body.earliest_start, refused.body.earliest_end)).status).toBe(201);
  });

  it('rounds the longest end down to the whole minute, and the retry with it is admitted', async () => {
    const refused = await lease('before-odd', '2099-01-11 09:00', '2099-01-11 10:30');
    expect(refused.status).toBe(409);
    expect(refused.body.longest_end).toBe('2099-01-11 10:00');
    expect((await lease('before-odd', '2099-01-11 09:00', refused.body.longest_end)).status).toBe(201);
  });

  it('gives availability windows and search answers as request dates inside the free time', async () => {
    // Booked 10:00:00–11:00:30 by another, and 11:01–12:01 by after-odd: the 30 s between hold no whole minute.
    const free = await api('GET', `/v1/availability?start=${encodeURIComponent('2099-01-10 10:00')}&end=${encodeURIComponent('2099-01-10 13:00')}&hypervisor_properties=${encodeURIComponent(odd.hypervisor_properties)}`);
    expect(free.status).toBe(200);
    expect(free.body.availability[0].free).toEqual([
      { start_date: '2099-01-10T11:00:30.000000', end_date: '2099-01-10T11:01:00.000000', start: null, end: null },
      { start_date: '2099-01-10T12:01:00.000000', end_date: '2099-01-10T13:00:00.000000', start: '2099-01-10 12:01', end: '2099-01-10 13:00' },
    ]);
    const search = await api('POST', '/v1/availability/search', { start_date: '2099-01-10 10:30', end_date: '2099-01-10 11:30', reservations: [odd] });
    expect(search.body.earliest).toEqual({ start_date: '2099-01-10 12:01', end_date: '2099-01-10 13:01' });
  });
});
