/**
 * Offers through the API (issue 41, first slice): POST /v1/offers for hosts, instance slots and
 * floating IPs (calendar-only types), the usage policy's filter, what a member sees, bad input, a
 * refused create and a refused extension carrying `reason` and `offers` beside Blazar's fields.
 */
import { randomUUID } from 'node:crypto';
import { findOffer } from '../src/db/offers';
import { insertWindow } from '../src/db/maintenance';
import { insertFloatingIp } from '../src/db/floating-ips';
import { syncCapacityProviders } from '../src/db/quantity-allocations';
import { floatingIpPlugin } from '../src/resources/floating-ip';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { COMPUTE_KIND } from '../src/resources/shared/compute-providers';
import { virtualInstancePlugin } from '../src/resources/virtual-instance';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, eventually, useTestStack } from '../dev-stack/stack';

const NETWORK = '44444444-4444-4444-8444-444444444444';
const MIN = 60_000;
/** A request date ("YYYY-MM-DD HH:MM") for an instant. */
const date = (ms: number) => new Date(ms).toISOString().slice(0, 16).replace('T', ' ');
/** Whole days ahead (UTC), within the default usage policy's advance booking. */
const dayAhead = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10);
const D = dayAhead(30);
const E = dayAhead(31);
const F = dayAhead(32);
const G = dayAhead(33);
const H = dayAhead(34);
const HOSTS = ['offer-host-1', 'offer-host-2', 'offer-host-3'];

describe('offers', () => {
  const stack = useTestStack({
    withPool: (pool) => [
      physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' }),
      virtualInstancePlugin({ pool, settings: { cleaningMs: 0 }, cloud: 'calendar-only' }),
      floatingIpPlugin({ pool, cloud: 'calendar-only' }),
    ],
  });
  const admin = apiClient(() => stack().url);
  const alpha = apiClient(() => stack().url, { 'X-Project-Id': 'alpha', 'X-Roles': 'member' });
  const beta = apiClient(() => stack().url, { 'X-Project-Id': 'beta', 'X-Roles': 'member' });
  const gamma = apiClient(() => stack().url, { 'X-Project-Id': 'gamma', 'X-Roles': 'member' });
  let betaLease: { id: string; name: string };
  const hostIds: string[] = [];

  beforeAll(async () => {
    const { pool } = stack().db;
    for (const name of HOSTS) hostIds.push(await insertHost(pool, { name }));
    // 16 vCPUs per host: two slots of 8 on each, six in all.
    await syncCapacityProviders(pool, COMPUTE_KIND, HOSTS.map((name) => ({ uuid: randomUUID(), name, host: name, capacity: { VCPU: 16, MEMORY_MB: 32_768, DISK_GB: 200 }, traits: [] })));
    for (const address of ['198.51.100.10', '198.51.100.11']) await insertFloatingIp(pool, { id: randomUUID(), networkId: NETWORK, subnetId: 'subnet-1', address });
    // Another project's lease: two of the three hosts from 11:00 to 12:00 on D.
    const taken = await beta('POST', '/v1/leases', { name: 'beta-secret-run', start_date: `${D} 11:00`, end_date: `${D} 12:00`, reservations: [hostReservation({ min: 2, max: 2 })] });
    expect(taken.status).toBe(201);
    betaLease = taken.body.lease;
    // And on E: five of the six slots, one of the two addresses, 10:00 to 12:00.
    const slots = await beta('POST', '/v1/leases', {
      name: 'beta-slots',
      start_date: `${E} 10:00`,
      end_date: `${E} 12:00`,
      reservations: [
        { resource_type: 'virtual:instance', vcpus: 8, memory_mb: 1024, disk_gb: 10, amount: 5, resource_properties: '' },
        { resource_type: 'virtual:floatingip', network_id: NETWORK, amount: 1 },
      ],
    });
    expect(slots.status).toBe(201);
  });

  const hostOffers = (call: typeof alpha, more: Record<string, unknown> = {}, reservation: Record<string, unknown> = { min: 1, max: 3 }) =>
    call('POST', '/v1/offers', { reservations: [hostReservation(reservation)], duration: 120, start_after: `${D} 10:00`, min_duration: 30, ...more });
  const summary = (offers: Array<{ kind: string; start_date: string; end_date: string; reservations: unknown[] }>) => offers.map((o) => [o.kind, o.start_date, o.end_date, o.reservations]);

  it('offers hosts later (filling the limit), shorter and with fewer hosts, best first, stored for the project until they expire', async () => {
    const res = await hostOffers(alpha);
    expect(res.status).toBe(200);
    const three = [{ resource_type: 'physical:host', hosts: 3 }];
    expect(summary(res.body.offers)).toEqual([
      ['later', `${D} 12:00`, `${D} 14:00`, three],
      ['later', `${D} 14:00`, `${D} 16:00`, three],
      ['later', `${D} 16:00`, `${D} 18:00`, three],
      ['shorter', `${D} 10:00`, `${D} 11:00`, three],
      ['fewer', `${D} 10:00`, `${D} 12:00`, [{ resource_type: 'physical:host', hosts: 1 }]],
    ]);
    for (const offer of res.body.offers) {
      expect(offer).toEqual({ id: expect.any(String), kind: offer.kind, start_date: offer.start_date, end_date: offer.end_date, reservations: offer.reservations, reason: expect.any(String), expires_at: expect.any(String) });
      expect(Date.parse(offer.expires_at)).toBeGreaterThan(Date.now());
    }
    expect(res.body.offers[4].reason).toMatch(/1 of 3/);
    // Stored with the lease body it stands for, for its project only.
    const { pool } = stack().db;
    const stored = await findOffer(pool, res.body.offers[4].id, 'alpha', Date.now());
    expect(stored?.leaseBody).toMatchObject({ start_date: `${D} 10:00`, end_date: `${D} 12:00`, reservations: [{ resource_type: 'physical:host', min: 1, max: 1 }] });
    expect(await findOffer(pool, res.body.offers[4].id, 'beta', Date.now())).toBeUndefined();
    expect(await findOffer(pool, res.body.offers[4].id, 'alpha', Date.parse(res.body.offers[4].expires_at) + 1)).toBeUndefined();

    // As asked where it fits: only that; the limit bounds the list.
    const exact = await hostOffers(alpha, { start_after: `${D} 12:00` });
    expect(summary(exact.body.offers)).toEqual([['exact', `${D} 12:00`, `${D} 14:00`, three]]);
    const one = await hostOffers(alpha, { limit: 1 });
    expect(summary(one.body.offers)).toEqual([['later', `${D} 12:00`, `${D} 14:00`, three]]);
    // end_before bounds the later ones.
    const bounded = await hostOffers(alpha, { end_before: `${D} 15:00` });
    expect(bounded.body.offers.map((o: { kind: string }) => o.kind)).toEqual(['later', 'shorter', 'fewer']);
  });

  it('answers a pathological request (10 000 hosts asked, limit 20) with what it found, within its search bound', async () => {
    const res = await hostOffers(alpha, { limit: 20 }, { min: 1, max: 10_000 });
    expect(res.status).toBe(200);
    expect(summary(res.body.offers)).toEqual([['fewer', `${D} 10:00`, `${D} 12:00`, [{ resource_type: 'physical:host', hosts: 1 }]]]);
  });

  it('shows a member counts only: no other project\'s lease, no host names; an admin also sees which hosts each offer would book', async () => {
    const asMember = await hostOffers(alpha);
    const asAdmin = await hostOffers(admin);
    const text = JSON.stringify(asMember.body);
    for (const secret of [betaLease.id, betaLease.name, 'beta', ...HOSTS]) expect(text).not.toContain(secret);
    // The same offers, each host reservation with its hosts beside the count.
    const counts = (offers: Array<{ kind: string; start_date: string; end_date: string; reservations: Array<Record<string, unknown>> }>) => offers.map((o) => ({ ...o, reservations: o.reservations.map(({ would_book: _hosts, ...r }) => r) }));
    expect(summary(counts(asAdmin.body.offers))).toEqual(summary(asMember.body.offers));
    const all = HOSTS.map((name, i) => ({ id: hostIds[i], hypervisor_hostname: name }));
    const { rows } = await stack().db.pool.query<{ host_id: string }>('SELECT host_id::text FROM host_allocations WHERE lease_id = $1', [betaLease.id]);
    const free = all.filter((h) => !rows.some((r) => r.host_id === h.id));
    expect(free).toHaveLength(1);
    const byId = (hosts: Array<{ id: string }>) => [...hosts].sort((a, b) => Number(a.id) - Number(b.id));
    expect(asAdmin.body.offers.map((o: { kind: string; reservations: Array<{ would_book: Array<{ id: string }> }> }) => [o.kind, byId(o.reservations[0].would_book)])).toEqual([
      ['later', all],
      ['later', all],
      ['later', all],
      ['shorter', all],
      ['fewer', free],
    ]);
  });

  it('offers instance slots and floating IPs, alone and together: later with all, fewer from the asked start', async () => {
    const slots = { resource_type: 'virtual:instance', vcpus: 8, memory_mb: 1024, disk_gb: 10, amount: 4, min: 1, resource_properties: '' };
    const addresses = { resource_type: 'virtual:floatingip', network_id: NETWORK, amount: 2, min: 1 };
    const ask = (reservations: unknown[]) => alpha('POST', '/v1/offers', { reservations, duration: 120, start_after: `${E} 10:00`, limit: 2 });
    const slotOffers = await ask([slots]);
    expect(slotOffers.status).toBe(200);
    expect(summary(slotOffers.body.offers)).toEqual([
      ['later', `${E} 12:00`, `${E} 14:00`, [{ resource_type: 'virtual:instance', instances: 4 }]],
      ['fewer', `${E} 10:00`, `${E} 12:00`, [{ resource_type: 'virtual:instance', instances: 1 }]],
    ]);
    const addressOffers = await ask([addresses]);
    expect(summary(addressOffers.body.offers)).toEqual([
      ['later', `${E} 12:00`, `${E} 14:00`, [{ resource_type: 'virtual:floatingip', addresses: 2 }]],
      ['fewer', `${E} 10:00`, `${E} 12:00`, [{ resource_type: 'virtual:floatingip', addresses: 1 }]],
    ]);
    const both = await ask([slots, addresses]);
    expect(summary(both.body.offers)).toEqual([
      ['later', `${E} 12:00`, `${E} 14:00`, [{ resource_type: 'virtual:instance', instances: 4 }, { resource_type: 'virtual:floatingip', addresses: 2 }]],
      ['fewer', `${E} 10:00`, `${E} 12:00`, [{ resource_type: 'virtual:instance', instances: 1 }, { resource_type: 'virtual:floatingip', addresses: 1 }]],
    ]);
    // Without a min, the amount is what it takes: no fewer.
    expect((await ask([{ ...slots, min: undefined }])).body.offers.map((o: { kind: string }) => o.kind)).toEqual(['later', 'later']);
  });

  it('leaves out offers the usage policy refuses, or lists them with the rule when nothing else exists', async () => {
    expect((await admin('PUT', '/v1/projects/gamma/policy', { max_hosts: 1 })).status).toBe(200);
    const some = await hostOffers(gamma);
    expect(summary(some.body.offers)).toEqual([['fewer', `${D} 10:00`, `${D} 12:00`, [{ resource_type: 'physical:host', hosts: 1 }]]]);
    const none = await hostOffers(gamma, {}, { min: 2, max: 3 });
    expect(none.body.offers.length).toBeGreaterThan(0);
    for (const offer of none.body.offers) {
      expect(offer.refused_by).toBe('max_hosts');
      expect(offer.reason).toMatch(/usage policy refuses it \(max_hosts\)/);
    }
  });

  it('refuses bad input with 400 and Blazar\'s error body, never a 500', async () => {
    const valid = { reservations: [hostReservation()], duration: 60, start_after: `${D} 10:00` };
    const bad: Array<Record<string, unknown>> = [
      { ...valid, reservations: [hostReservation({ bogus: 1 })] },
      { ...valid, reservations: [hostReservation({ resource_properties: '["==", "$nope", "x"]' })] },
      { ...valid, reservations: [{ resource_type: 'virtual:floatingip', network_id: NETWORK, amount: 2, min: 3 }] },
      { ...valid, reservations: [{ resource_type: 'virtual:floatingip', network_id: NETWORK, amount: 2, min: 'one' }] },
      { ...valid, reservations: [{ resource_type: 'no:such' }] },
      { ...valid, reservations: 'hosts' },
      { ...valid, reservations: [] },
      { ...valid, duration: 0 },
      { ...valid, duration: '60' },
      { ...valid, duration: 10_000_000 },
      { ...valid, min_duration: 90 },
      { ...valid, limit: 21 },
      { ...valid, start_after: 'yesterday' },
      { ...valid, start_after: '2001-01-01 10:00' },
      { ...valid, end_before: `${D} 10:30` },
      { ...valid, surprise: true },
      { reservations: valid.reservations },
    ];
    for (const body of bad) {
      const res = await alpha('POST', '/v1/offers', body);
      expect({ body, status: res.status }).toEqual({ body, status: 400 });
      expect(res.body).toEqual({ error_code: 400, error_name: 400, error_message: expect.any(String) });
    }
  });

  it('answers a refused create with Blazar\'s 409 as before, plus reason and offers', async () => {
    const res = await alpha('POST', '/v1/leases', { name: 'too-many', start_date: `${D} 10:00`, end_date: `${D} 12:00`, reservations: [hostReservation({ min: 3, max: 3 })] });
    expect(res.status).toBe(409);
    // What blazarclient and earlier clients read is unchanged.
    expect(res.body).toMatchObject({ error_code: 409, error_name: 409, earliest_start: `${D} 12:00`, earliest_end: `${D} 14:00`, longest_end: `${D} 11:00` });
    expect(res.body.error_message).toMatch(/^Not enough hosts available\. /);
    expect(res.body.reason).toBe('capacity');
    expect(res.body.offers.map((o: { kind: string; start_date: string }) => [o.kind, o.start_date])).toEqual([
      ['later', `${D} 12:00`],
      ['later', `${D} 14:00`],
      ['later', `${D} 16:00`],
      ['later', `${D} 18:00`],
      ['later', `${D} 20:00`],
    ]);
    // A refusal that is not about capacity or policy carries none (a name taken).
    const first = await alpha('POST', '/v1/leases', { name: 'taken-name', start_date: `${D} 20:00`, end_date: `${D} 21:00`, reservations: [hostReservation()] });
    expect(first.status).toBe(201);
    const again = await alpha('POST', '/v1/leases', { name: 'taken-name', start_date: `${D} 22:00`, end_date: `${D} 23:00`, reservations: [hostReservation()] });
    expect(again.status).toBe(409);
    expect(again.body).not.toHaveProperty('offers');
  });

  it('answers a create refused while a host is under maintenance with reason maintenance, and offers after it', async () => {
    const at = (hour: number) => Date.parse(`${F}T${String(hour).padStart(2, '0')}:00:00Z`);
    await insertWindow(stack().db.pool, { id: randomUUID(), hostId: hostIds[0], startMs: at(10), endMs: at(12), reason: 'firmware', disableCompute: false });
    expect((await beta('POST', '/v1/leases', { name: 'beta-f', start_date: `${F} 10:00`, end_date: `${F} 12:00`, reservations: [hostReservation({ min: 2, max: 2 })] })).status).toBe(201);
    const res = await alpha('POST', '/v1/leases', { name: 'during-maintenance', start_date: `${F} 10:00`, end_date: `${F} 11:00`, reservations: [hostReservation()] });
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ error_code: 409, earliest_start: `${F} 12:00`, reason: 'maintenance' });
    expect(res.body.offers[0]).toMatchObject({ kind: 'later', start_date: `${F} 12:00`, end_date: `${F} 13:00` });
  });

  it('names capacity, not maintenance, when a host is under maintenance but other bookings leave too few hosts anyway', async () => {
    const at = (hour: number) => Date.parse(`${H}T${String(hour).padStart(2, '0')}:00:00Z`);
    await insertWindow(stack().db.pool, { id: randomUUID(), hostId: hostIds[0], startMs: at(10), endMs: at(12), reason: 'firmware', disableCompute: false });
    expect((await beta('POST', '/v1/leases', { name: 'beta-h', start_date: `${H} 10:00`, end_date: `${H} 12:00`, reservations: [hostReservation()] })).status).toBe(201);
    // Three hosts asked: without the maintenance window two are free, still too few.
    const res = await alpha('POST', '/v1/leases', { name: 'capacity-not-maintenance', start_date: `${H} 10:00`, end_date: `${H} 11:00`, reservations: [hostReservation({ min: 3, max: 3 })] });
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ error_code: 409, earliest_start: `${H} 12:00`, reason: 'capacity' });
    // Two hosts would fit but for the window: maintenance is why.
    const two = await alpha('POST', '/v1/leases', { name: 'maintenance-is-why', start_date: `${H} 10:00`, end_date: `${H} 11:00`, reservations: [hostReservation({ min: 2, max: 2 })] });
    expect(two.status).toBe(409);
    expect(two.body.reason).toBe('maintenance');
  });

  it('answers a refused create by a policy rule with reason policy:<rule> and the rule on each offer', async () => {
    const res = await gamma('POST', '/v1/leases', { name: 'over-limit', start_date: `${D} 14:00`, end_date: `${D} 16:00`, reservations: [hostReservation({ min: 2, max: 2 })] });
    expect(res.status).toBe(403);
    expect(res.body).toMatchObject({ error_code: 403, rule: 'max_hosts', reason: 'policy:max_hosts' });
    expect(res.body.offers.length).toBeGreaterThan(0);
    for (const offer of res.body.offers) expect(offer.refused_by).toBe('max_hosts');
  });

  it('answers a refused extension of a pending slot lease (booked anew: no latest_end) with extension offers up to where its slots are free', async () => {
    const slots = (amount: number) => [{ resource_type: 'virtual:instance', vcpus: 8, memory_mb: 1024, disk_gb: 10, amount, resource_properties: '' }];
    const pending = await alpha('POST', '/v1/leases', { name: 'pending-slots', start_date: `${G} 10:00`, end_date: `${G} 12:00`, reservations: slots(4) });
    expect(pending.status).toBe(201);
    expect((await beta('POST', '/v1/leases', { name: 'beta-after', start_date: `${G} 13:00`, end_date: `${G} 14:00`, reservations: slots(3) })).status).toBe(201);
    // Seven slots of six from 13:00: some host of the lease's is short then.
    const res = await alpha('PUT', `/v1/leases/${pending.body.lease.id}`, { end_date: `${G} 15:00` });
    expect(res.status).toBe(409);
    expect(res.body.reason).toBe('capacity');
    expect(res.body.offers.map((o: { kind: string; end_date: string }) => [o.kind, o.end_date])).toEqual(['13:00', '12:30', '12:15', '12:07'].map((hhmm) => ['extension', `${G} ${hhmm}`]));
  });

  it('offers extensions (GET extension-offers), and answers a refused extension with latest_end as before, plus reason and the same extension offers', async () => {
    const now = Math.ceil(Date.now() / MIN) * MIN;
    const end = now + 60 * MIN;
    const active = await alpha('POST', '/v1/leases', { name: 'to-extend', start_date: 'now', end_date: date(end), reservations: [hostReservation({ min: 3, max: 3 })] });
    expect(active.status).toBe(201);
    const next = await beta('POST', '/v1/leases', { name: 'next-one', start_date: date(end + 40 * MIN), end_date: date(end + 100 * MIN), reservations: [hostReservation()] });
    expect(next.status).toBe(201);
    await eventually(async () => ((await alpha('GET', `/v1/leases/${active.body.lease.id}`)).body.lease.status === 'ACTIVE' ? true : undefined), 20_000);
    // Asked beforehand: the same ends, each an end_date to PUT.
    const asked = await alpha('GET', `/v1/leases/${active.body.lease.id}/extension-offers`);
    expect(asked.status).toBe(200);
    expect(asked.body.offers.map((o: { kind: string; end_date: string }) => [o.kind, o.end_date])).toEqual([40, 20, 10, 5].map((m) => ['extension', date(end + m * MIN)]));
    expect(JSON.stringify(asked.body)).not.toContain(next.body.lease.id);
    const res = await alpha('PUT', `/v1/leases/${active.body.lease.id}`, { end_date: date(end + 180 * MIN) });
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ error_code: 409, latest_end: date(end + 40 * MIN), reason: 'capacity' });
    expect(res.body.offers.map((o: { kind: string; end_date: string }) => [o.kind, o.end_date])).toEqual([
      ['extension', date(end + 40 * MIN)],
      ['extension', date(end + 20 * MIN)],
      ['extension', date(end + 10 * MIN)],
      ['extension', date(end + 5 * MIN)],
    ]);
    // Each is an end_date to PUT: the longest is accepted.
    const extended = await alpha('PUT', `/v1/leases/${active.body.lease.id}`, { end_date: res.body.offers[0].end_date });
    expect(extended.status).toBe(200);
    const after = await alpha('GET', `/v1/leases/${active.body.lease.id}/extension-offers`);
    expect(after.body).toEqual({ offers: [], note: expect.stringMatching(/cannot be extended now/) });
  });
});
