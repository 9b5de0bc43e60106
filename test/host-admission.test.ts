/**
 * Host leases through the API and the real worker, booked in the PostgreSQL calendar
 * (hosts are put in the inventory directly; enrolment through Nova has its own tests).
 */
import { physicalHostPlugin } from '../src/resources/physical-host';
import { blazarHostReservation, hostReservation } from '../dev-stack/fixtures/builders';
import { doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, eventually, inSeconds, useTestStack } from '../dev-stack/stack';

describe('host leases: admission without double booking', () => {
  // The stack builds its own pool; the plugin needs it, so it is created from the stack's database.
  const stack = useTestStack({ withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
  const api = apiClient(() => stack().url);
  const hostIds: Record<string, string> = {};

  beforeAll(async () => {
    for (const [name, vcpus, gpu] of [['small', 2, undefined], ['medium', 4, undefined], ['large', 16, 'a100']] as const) {
      hostIds[name] = await insertHost(stack().db.pool, { name, vcpus, capabilities: gpu ? { gpu } : {} });
    }
  });

  const hostLease = (name: string, start: string, end: string, params: Record<string, unknown>) =>
    api('POST', '/v1/leases', { name, start_date: start, end_date: end, reservations: [blazarHostReservation({ min: '1', max: '1', ...params })] });

  it('books matching hosts, numbers compared as numbers, and shows them in the lease', async () => {
    const res = await hostLease('big-cpu', '2099-01-01 10:00', '2099-01-01 12:00', { min: 1, max: 3, hypervisor_properties: '[">=", "$vcpus", "4"]' });
    expect(res.status).toBe(201);
    expect(res.body.lease.reservations[0]).toMatchObject({ resource_type: 'physical:host', min: 1, max: 3, hosts: ['medium', 'large'], status: 'pending' });
    const gpu = await hostLease('gpu', '2099-01-02 10:00', '2099-01-02 12:00', { resource_properties: '["==", "$gpu", "a100"]' });
    expect(gpu.body.lease.reservations[0].hosts).toEqual(['large']);
  });

  it('prefers hosts with no future bookings', async () => {
    // small has no booking yet; medium and large do (previous test)
    const res = await hostLease('prefers-idle', '2099-02-01 10:00', '2099-02-01 11:00', {});
    expect(res.body.lease.reservations[0].hosts).toEqual(['small']);
  });

  it('refuses with 409, the earliest start at which the same lease fits, and the longest window from the asked start', async () => {
    await hostLease('all-1', '2099-03-01 10:00', '2099-03-01 12:00', { min: 3, max: 3 });
    await hostLease('one-more', '2099-03-01 12:00', '2099-03-01 14:00', { min: 1, max: 1 });
    const res = await hostLease('too-many', '2099-03-01 09:00', '2099-03-01 11:00', { min: 3, max: 3 });
    expect(res.status).toBe(409);
    // all three are free again from 12:00, but one of them is taken until 14:00 → 14:00
    expect(res.body).toMatchObject({ error_code: 409, earliest_start: '2099-03-01 14:00', earliest_end: '2099-03-01 16:00', longest_end: '2099-03-01 10:00' });
    expect(res.body.error_message).toMatch(/^Not enough hosts available\. Not enough hosts free from 2099-03-01 09:00 to 2099-03-01 11:00: needs at least 3 host\(s\) matching reservation .* \(3 match, 0 free\); the same lease fits from 2099-03-01 14:00 to 2099-03-01 16:00; from the requested start it fits until 2099-03-01 10:00\.$/);
    const retry = await hostLease('too-many', res.body.earliest_start, res.body.earliest_end, { min: 3, max: 3 });
    expect(retry.status).toBe(201);
  });

  it('says when a request can never fit, and refuses unknown properties with 400', async () => {
    const never = await hostLease('never', '2099-04-01 10:00', '2099-04-01 11:00', { min: 4, max: 4 });
    expect(never.status).toBe(409);
    expect(never.body.earliest_start).toBeNull();
    // More than are enrolled: refused before any search, saying so.
    expect(never.body.error_message).toMatch(/^Not enough hosts available\. It never fits: reservation .* needs at least 4 host\(s\) \(3 match its properties\); only 3 reservable host\(s\) are enrolled\.$/);
    const tooFewMatch = await hostLease('never-gpu', '2099-04-01 10:00', '2099-04-01 11:00', { min: 2, max: 2, resource_properties: '["==", "$gpu", "a100"]' });
    expect(tooFewMatch.status).toBe(409);
    expect(tooFewMatch.body.earliest_start).toBeNull();
    expect(tooFewMatch.body.error_message).toMatch(/it never fits: not enough hosts match/);
    const unknown = await hostLease('unknown', '2099-04-01 10:00', '2099-04-01 11:00', { resource_properties: '["==", "$colour", "blue"]' });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error_message).toBe('resource_properties: unknown property $colour (known: $gpu)');
    const malformed = await hostLease('malformed', '2099-04-01 10:00', '2099-04-01 11:00', { hypervisor_properties: '[">=", "$vcpus"' });
    expect(malformed.body.error_message).toBe('reservations[0].hypervisor_properties: not valid JSON: [">=", "$vcpus"');
    const minMax = await hostLease('min-max', '2099-04-01 10:00', '2099-04-01 11:00', { min: 3, max: 2 });
    expect(minMax.body.error_message).toBe('Invalid values for min/max of hosts. Max must be equal to or larger than min. reservations[0].min: must not be greater than max');
  });

  it('allows back-to-back leases on a host', async () => {
    const a = await hostLease('b2b-a', '2099-05-01 10:00', '2099-05-01 11:00', { min: 3, max: 3 });
    const b = await hostLease('b2b-b', '2099-05-01 11:00', '2099-05-01 12:00', { min: 3, max: 3 });
    expect([a.status, b.status]).toEqual([201, 201]);
  });

  it('moves and shortens a pending lease, keeping the hosts that still fit; deletion frees the booking before it answers', async () => {
    const lease = (await hostLease('mover', '2099-06-01 10:00', '2099-06-01 11:00', { min: 1, max: 1, hypervisor_properties: '[">=", "$vcpus", "4"]' })).body.lease;
    const before = lease.reservations[0].hosts;
    const moved = await api('PUT', `/v1/leases/${lease.id}`, { start_date: '2099-06-02 10:00', end_date: '2099-06-02 11:00' });
    expect(moved.status).toBe(200);
    expect(moved.body.lease.reservations[0].hosts).toEqual(before);
    const { rows } = await stack().db.pool.query("SELECT lower(during) AS start FROM host_allocations WHERE lease_id = $1", [lease.id]);
    expect(rows.map((r) => new Date(r.start).toISOString())).toEqual(['2099-06-02T10:00:00.000Z']);
    const shorter = await api('PUT', `/v1/leases/${lease.id}`, { end_date: '2099-06-02 10:30' });
    expect(shorter.body.lease.reservations[0].hosts).toEqual(before);
    const { rows: after } = await stack().db.pool.query('SELECT upper(during) AS until FROM host_allocations WHERE lease_id = $1', [lease.id]);
    expect(after.map((r) => new Date(r.until).toISOString())).toEqual(['2099-06-02T10:30:00.000Z']);
    expect((await api('DELETE', `/v1/leases/${lease.id}`)).status).toBe(204);
    // Synchronous, as Blazar's: once answered, the bookings are free and the lease is gone.
    expect((await stack().db.pool.query('SELECT 1 FROM host_allocations WHERE lease_id = $1', [lease.id])).rowCount).toBe(0);
    expect((await api('GET', `/v1/leases/${lease.id}`)).status).toBe(404);
    expect((await api('GET', '/v1/leases')).body.leases.map((l: { id: string }) => l.id)).not.toContain(lease.id);
    expect((await api('DELETE', `/v1/leases/${lease.id}`)).status).toBe(404);
  });

  it('refuses to extend an active lease into a booked window, saying the latest possible end', async () => {
    const active = (await hostLease('active-ext', 'now', inSeconds(600), { min: 3, max: 3 })).body.lease;
    await eventually(async () => ((await api('GET', `/v1/leases/${active.id}`)).body.lease.status === 'ACTIVE' ? true : undefined), 10_000).catch(async (err: Error) => { throw new Error(`${err.message}: ${JSON.stringify((await api('GET', `/v1/leases/${active.id}`)).body)}`); });
    const blockerStart = new Date(Date.parse(`${active.end_date}Z`) + 60 * 60_000).toISOString().slice(0, 16).replace('T', ' ');
    const blockerEnd = new Date(Date.parse(`${active.end_date}Z`) + 120 * 60_000).toISOString().slice(0, 16).replace('T', ' ');
    expect((await hostLease('blocker', blockerStart, blockerEnd, { min: 1, max: 1 })).status).toBe(201);
    const tooFar = await api('PUT', `/v1/leases/${active.id}`, { end_date: blockerEnd });
    expect(tooFar.status).toBe(409);
    expect(tooFar.body.latest_end).toBe(blockerStart);
    expect(tooFar.body.error_message).toMatch(new RegExp(`is booked from ${blockerStart}; the latest possible end is ${blockerStart}$`));
    expect(tooFar.body.error_message).toMatch(/^Not enough hosts available\. Cannot extend lease active-ext to /);
    const fine = await api('PUT', `/v1/leases/${active.id}`, { end_date: blockerStart });
    expect(fine.status).toBe(200);
    // ending it now releases the rest of its window
    expect((await api('PUT', `/v1/leases/${active.id}`, { end_date: 'now' })).status).toBe(200);
    await eventually(async () => ((await api('GET', `/v1/leases/${active.id}`)).body.lease.status === 'TERMINATED' ? true : undefined), 10_000).catch(async (err: Error) => { throw new Error(`${err.message}: ${JSON.stringify((await api('GET', `/v1/leases/${active.id}`)).body.lease)}`); });
    const { rows } = await stack().db.pool.query('SELECT upper(during) AS until FROM host_allocations WHERE lease_id = $1', [active.id]);
    for (const row of rows) expect(new Date(row.until).getTime()).toBeLessThanOrEqual(Date.now());
  });

  it('shows bookings in the allocations API: admins all, projects their own', async () => {
    const lease = (await hostLease('alloc', '2099-07-01 10:00', '2099-07-01 11:00', { min: 2, max: 2 })).body.lease;
    const all = await api('GET', `/v1/os-hosts/allocations?lease_id=${lease.id}`);
    expect(all.status).toBe(200);
    // Every host, as Blazar lists them whatever the filter: the lease's two with its booking, the other with none.
    const booking = { id: lease.reservations[0].id, lease_id: lease.id, project_id: 'admin', start_date: '2099-07-01T10:00:00.000000', end_date: '2099-07-01T11:00:00.000000' };
    expect(all.body.allocations).toEqual(
      Object.entries(hostIds).map(([name, id]) => ({ resource_id: id, hypervisor_hostname: name, reservations: lease.reservations[0].host_ids.includes(id) ? [booking] : [] })),
    );
    expect(lease.reservations[0].host_ids).toHaveLength(2);
    const other = apiClient(stack().url, { 'x-project-id': 'someone-else', 'x-user-id': 'eve' });
    expect((await other('GET', `/v1/os-hosts/allocations?lease_id=${lease.id}`)).body.allocations).toEqual([]);
    const one = await api('GET', `/v1/os-hosts/${lease.reservations[0].host_ids[0]}/allocation.json`);
    expect(one.body.allocation.reservations.map((r: { lease_id: string }) => r.lease_id)).toContain(lease.id);
    expect((await api('GET', '/v1/os-hosts/999999/allocation')).status).toBe(404);
    expect((await api('GET', '/v1/os-hosts/allocations?lease_id=nope')).body.error_message).toBe('lease_id: expected a lease id');
  });

  it('answers availability: free intervals per host, and where a lease would fit', async () => {
    await hostLease('avail-busy', '2099-08-01 10:00', '2099-08-01 12:00', { min: 1, max: 1, resource_properties: '["==", "$gpu", "a100"]' });
    const res = await api('GET', `/v1/availability?start=${encodeURIComponent('2099-08-01 08:00')}&end=${encodeURIComponent('2099-08-01 14:00')}&resource_properties=${encodeURIComponent('["==", "$gpu", "a100"]')}`);
    expect(res.status).toBe(200);
    expect(res.body.availability).toEqual([
      {
        host_id: hostIds.large,
        hypervisor_hostname: 'large',
        free: [
          { start_date: '2099-08-01T08:00:00.000000', end_date: '2099-08-01T10:00:00.000000', start: '2099-08-01 08:00', end: '2099-08-01 10:00' },
          { start_date: '2099-08-01T12:00:00.000000', end_date: '2099-08-01T14:00:00.000000', start: '2099-08-01 12:00', end: '2099-08-01 14:00' },
        ],
      },
    ]);
    const search = await api('POST', '/v1/availability/search', {
      start_date: '2099-08-01 09:00',
      end_date: '2099-08-01 11:00',
      reservations: [hostReservation({ min: 3, max: 3 })],
    });
    expect(search.body).toEqual({
      earliest: { start_date: '2099-08-01 12:00', end_date: '2099-08-01 14:00' },
      longest_from_start: { start_date: '2099-08-01 09:00', end_date: '2099-08-01 10:00' },
    });
    expect((await api('GET', '/v1/availability?start=2099-08-01%2010:00')).body.error_message).toBe('Missing parameter end');
  });

  it('answers availability from a host list it reads again whenever the inventory changes, whoever changes it', async () => {
    const withTag = async () => {
      const res = await api('GET', `/v1/availability?start=${encodeURIComponent('2099-09-01 08:00')}&end=${encodeURIComponent('2099-09-01 09:00')}&resource_properties=${encodeURIComponent('["==", "$tag", "fresh"]')}`);
      return res.body.availability?.map((h: { hypervisor_hostname: string }) => h.hypervisor_hostname);
    };
    await stack().db.pool.query("INSERT INTO host_capabilities (host_id, name, value) VALUES ($1, 'tag', 'stale')", [hostIds.small]);
    expect(await withTag()).toEqual([]); // the host list is now cached
    // Changed behind the API's back (plain SQL, as an operator might): the next answer sees it.
    await stack().db.pool.query("UPDATE host_capabilities SET value = 'fresh' WHERE host_id = $1 AND name = 'tag'", [hostIds.small]);
    expect(await withTag()).toEqual(['small']);
    const added = await insertHost(stack().db.pool, { name: 'late', capabilities: { tag: 'fresh' } });
    expect(await withTag()).toEqual(['small', 'late']);
    await stack().db.pool.query('DELETE FROM hosts WHERE id = $1', [added]);
    await stack().db.pool.query("DELETE FROM host_capabilities WHERE host_id = $1 AND name = 'tag'", [hostIds.small]);
    expect(await withTag()).toBeUndefined(); // no host has the tag any more: an unknown property (400)
  });

  it('re-books a pending lease whose reservation changes, keeping the hosts that still fit', async () => {
    const lease = (await hostLease('resize-pending', '2099-09-01 10:00', '2099-09-01 11:00', { min: 1, max: 1 })).body.lease;
    const reservation = lease.reservations[0];
    const bigger = await api('PUT', `/v1/leases/${lease.id}`, { reservations: [{ id: reservation.id, max: 3 }] });
    expect(bigger.status).toBe(200);
    expect(bigger.body.lease.reservations[0]).toMatchObject({ min: 1, max: 3 });
    expect(bigger.body.lease.reservations[0].hosts).toHaveLength(3);
    expect(bigger.body.lease.reservations[0].hosts).toContain(reservation.hosts[0]);
    const narrower = await api('PUT', `/v1/leases/${lease.id}`, { reservations: [{ id: reservation.id, min: 1, max: 1, resource_properties: '["==", "$gpu", "a100"]' }] });
    expect(narrower.body.lease.reservations[0].hosts).toEqual(['large']);
    const bad = await api('PUT', `/v1/leases/${lease.id}`, { reservations: [{ id: reservation.id, max: 'lots' }] });
    expect(bad).toMatchObject({ status: 400, body: { error_message: 'Malformed parameter max. reservations[0].max: expected a whole number' } });
  });

  it('grows an active lease with free hosts from now on, and never takes hosts away from it', async () => {
    const lease = (await hostLease('grow-active', 'now', inSeconds(1200), { min: 1, max: 1, resource_properties: '' })).body.lease;
    await eventually(async () => ((await api('GET', `/v1/leases/${lease.id}`)).body.lease.status === 'ACTIVE' ? true : undefined), 10_000);
    const grown = await api('PUT', `/v1/leases/${lease.id}`, { reservations: [{ id: lease.reservations[0].id, max: 2 }] });
    expect(grown.status).toBe(200);
    expect(grown.body.lease.reservations[0].hosts).toHaveLength(2);
    expect(grown.body.lease.reservations[0].hosts).toContain(lease.reservations[0].hosts[0]);
    const shrink = await api('PUT', `/v1/leases/${lease.id}`, { reservations: [{ id: lease.reservations[0].id, min: 1, max: 1 }] });
    expect(shrink.status).toBe(400);
    expect(shrink.body.error_message).toMatch(/holds 2 host\(s\) while the lease is active: max cannot go below 2/);
    await api('DELETE', `/v1/leases/${lease.id}`);
  });

  it('lists capabilities and hides private ones from non-admins', async () => {
    const patched = await api('PATCH', '/v1/os-hosts/properties/gpu', { private: true });
    expect(patched).toEqual({ status: 200, body: { resource_property: { property: 'gpu', private: true } } });
    const user = apiClient(stack().url, { 'x-project-id': 'p', 'x-user-id': 'u' });
    expect((await user('GET', '/v1/os-hosts/properties?detail=True&all=True')).body.resource_properties).toEqual([]);
    expect((await api('GET', '/v1/os-hosts/properties?detail=True&all=True')).body.resource_properties).toEqual([{ property: 'gpu', private: true, values: ['a100'] }]);
    expect((await user('PATCH', '/v1/os-hosts/properties/gpu', { private: false })).status).toBe(403);
    expect((await api('PATCH', '/v1/os-hosts/properties/colour', { private: false })).status).toBe(404);
    await api('PATCH', '/v1/os-hosts/properties/gpu', { private: false });
  });

  it('never double-books', async () => {
    expect(await doubleBookings(stack().db.pool)).toEqual([]);
  });
});
