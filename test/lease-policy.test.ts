/**
 * What a project member may not do with leases: ask for an end policy that gives hosts away
 * (`on_end: release`), book for longer or further ahead than the deployment allows, reach another
 * user's lease (or a deleted one) through an Idempotency-Key, or learn anything about private host
 * capabilities. Admins may do all of it.
 */
import { physicalHostPlugin } from '../src/resources/physical-host';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, eventually, inSeconds, startedLeaseWorkflow, useTestStack } from '../dev-stack/stack';

const ALICE = { 'x-project-id': 'project-a', 'x-user-id': 'alice', 'x-roles': 'member' };
const CAROL = { 'x-project-id': 'project-a', 'x-user-id': 'carol', 'x-roles': 'member' };
const ADMIN = { 'x-auth-token': 'admin' };
const YEAR_S = 365 * 86_400;

describe('lease policy for project members', () => {
  const stack = useTestStack({ withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
  const asAlice = apiClient(() => stack().url, ALICE);
  const asCarol = apiClient(() => stack().url, CAROL);
  const asAdmin = apiClient(() => stack().url, ADMIN);
  const soon = () => ({ start_date: inSeconds(3600), end_date: inSeconds(7200) });

  beforeAll(async () => {
    await insertHost(stack().db.pool, { name: 'policy-host-1', capabilities: { gpu: 'a100', secret_rack: 'cage-7' } });
    await insertHost(stack().db.pool, { name: 'policy-host-2', capabilities: { gpu: 'h100' } });
    expect((await asAdmin('PATCH', '/v1/os-hosts/properties/secret_rack', { private: true })).status).toBe(200);
  });

  it('refuses on_end "release" to members with Blazar\'s policy error, at creation and at update; admins may', async () => {
    const refused = await asAlice('POST', '/v1/leases', { name: 'give-away', ...soon(), reservations: [hostReservation({ max: 2, on_end: 'release' })] });
    expect(refused).toEqual({
      status: 403,
      body: { error_code: 403, error_name: 403, error_message: 'Policy doesn\'t allow blazar:leases:post to be performed: reservations[0].on_end "release" gives the hosts away and is for admins only.' },
    });

    const lease = (await asAlice('POST', '/v1/leases', { name: 'keeps-hosts', ...soon(), reservations: [hostReservation({ on_end: 'delete' })] })).body.lease;
    const update = await asAlice('PUT', `/v1/leases/${lease.id}`, { reservations: [{ id: lease.reservations[0].id, on_end: 'release' }] });
    expect(update.status).toBe(403);
    expect(update.body.error_message).toBe('Policy doesn\'t allow blazar:leases:put to be performed: reservations[0].on_end "release" gives the hosts away and is for admins only.');
    expect((await asAlice('GET', `/v1/leases/${lease.id}`)).body.lease.reservations[0].on_end).toBe('delete');
    expect((await asAlice('DELETE', `/v1/leases/${lease.id}`)).status).toBe(204);

    const byAdmin = await asAdmin('POST', '/v1/leases', { name: 'admin-release', ...soon(), reservations: [hostReservation({ on_end: 'release' })] });
    expect(byAdmin.status).toBe(201);
    expect((await asAdmin('DELETE', `/v1/leases/${byAdmin.body.lease.id}`)).status).toBe(204);
  });

  it("limits members' lease duration and advance booking (Blazar's max_lease_duration wording), at creation and extension; admins are exempt", async () => {
    const centuries = { name: 'centuries', start_date: '2030-01-01 00:00', end_date: '3030-01-01 00:00' };
    const seconds = (Date.UTC(3030, 0, 1) - Date.UTC(2030, 0, 1)) / 1000;
    // Blazar's MaxLeaseDurationException: its status and sentence; then what would fit.
    expect(await asAlice('POST', '/v1/leases', centuries)).toEqual({
      status: 400,
      body: {
        error_code: 400,
        error_name: 400,
        error_message: `Lease duration of ${seconds} seconds must be less than or equal to the maximum lease duration of ${YEAR_S} seconds.`,
        rule: 'max_lease_duration',
        limit_seconds: YEAR_S,
        latest_end: '2031-01-01 00:00',
        // What would work instead (offers): the lease as asked, which the same rule refuses, named.
        reason: 'policy:max_lease_duration',
        offers: [expect.objectContaining({ kind: 'exact', start_date: '2030-01-01 00:00', end_date: '3030-01-01 00:00', refused_by: 'max_lease_duration' })],
      },
    });
    const farAhead = await asAlice('POST', '/v1/leases', { name: 'far-ahead', start_date: inSeconds(400 * 86_400), end_date: inSeconds(400 * 86_400 + 3600) });
    expect(farAhead.status).toBe(403);
    expect(farAhead.body.error_message).toMatch(new RegExp(`^Usage policy: max_advance: Lease start of \\d+ seconds ahead must be less than or equal to the maximum advance booking of ${YEAR_S} seconds; it fits with a start_date up to \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d\\.$`));
    expect(farAhead.body.rule).toBe('max_advance');

    const lease = (await asAlice('POST', '/v1/leases', { name: 'extended', ...soon() })).body.lease;
    const tooLong = await asAlice('PUT', `/v1/leases/${lease.id}`, { end_date: inSeconds(3600 + YEAR_S + 60) });
    expect(tooLong.status).toBe(400);
    expect(tooLong.body.error_message).toMatch(/^Lease duration of \d+ seconds must be less than or equal to the maximum lease duration of 31536000 seconds\.$/);
    const moved = await asAlice('PUT', `/v1/leases/${lease.id}`, { start_date: inSeconds(400 * 86_400), end_date: inSeconds(400 * 86_400 + 3600) });
    expect(moved.status).toBe(403);
    expect(moved.body.error_message).toMatch(/^Usage policy: max_advance: Lease start of \d+ seconds ahead/);
    expect((await asAlice('PUT', `/v1/leases/${lease.id}`, { end_date: inSeconds(3 * 3600) })).status).toBe(200);
    expect((await asAlice('DELETE', `/v1/leases/${lease.id}`)).status).toBe(204);

    const byAdmin = await asAdmin('POST', '/v1/leases', centuries);
    expect(byAdmin.status).toBe(201);
    expect((await asAdmin('DELETE', `/v1/leases/${byAdmin.body.lease.id}`)).status).toBe(204);
  });

  it('scopes an Idempotency-Key to its user, and answers 410 for the key of a deleted lease', async () => {
    const body = { name: 'idem', ...soon() };
    const alices = await asAlice('POST', '/v1/leases', body, { 'Idempotency-Key': 'same-key' });
    const carols = await asCarol('POST', '/v1/leases', { ...body, name: 'idem-carol' }, { 'Idempotency-Key': 'same-key' });
    expect([alices.status, carols.status]).toEqual([201, 201]);
    expect(carols.body.lease.id).not.toBe(alices.body.lease.id);
    expect(carols.body.lease.user_id).toBe('carol');
    expect((await asAlice('POST', '/v1/leases', body, { 'Idempotency-Key': 'same-key' })).body.lease.id).toBe(alices.body.lease.id);

    expect((await asAlice('DELETE', `/v1/leases/${alices.body.lease.id}`)).status).toBe(204);
    const again = await asAlice('POST', '/v1/leases', body, { 'Idempotency-Key': 'same-key' });
    expect(again).toEqual({
      status: 410,
      body: { error_code: 410, error_name: 410, error_message: `Lease ${alices.body.lease.id}, created with this Idempotency-Key, was deleted: use another key for a new lease` },
    });
    expect((await asAlice('GET', '/v1/leases?name=idem')).body.leases).toEqual([]);
    expect((await asCarol('DELETE', `/v1/leases/${carols.body.lease.id}`)).status).toBe(204);
  });

  it('cannot put markup into the Web UI: names and ids are escaped in the summary and details', async () => {
    const name = '**x** [click](http://evil.example.com) <img src=x>';
    const asMallory = apiClient(stack().url, { 'x-project-id': 'p<b>', 'x-user-id': 'u](x)', 'x-roles': 'member' });
    const lease = (await asMallory('POST', '/v1/leases', { name, ...soon() })).body.lease;
    const { handle, description } = await startedLeaseWorkflow(stack(), lease.id);
    const escapedName = String.raw`\*\*x\*\* \[click\]\(http\:\/\/evil\.example\.com\) \<img src\=x\>`;
    expect(await description.staticSummary()).toContain(String.raw`lease ${escapedName} · project p\<b\> · `);
    expect(await description.staticDetails()).toBe(String.raw`Lease ${lease.id} of project p\<b\>, created by user u\]\(x\).`);
    const metadata: { currentDetails: string } = await handle.query('__temporal_workflow_metadata');
    expect(metadata.currentDetails.split('\n')[1]).toBe(`lease ${escapedName} · 0 reservation(s) · version 1`);
    expect((await asMallory('DELETE', `/v1/leases/${lease.id}`)).status).toBe(204);
  });

  describe('private host capabilities', () => {
    const query = (key: string, value: string) => JSON.stringify(['==', `$${key}`, value]);
    /** The member's answer for `key`, with the key's name replaced: identical for a private key and one that does not exist. */
    const normalised = (answer: { status: number; body: unknown }, key: string) => JSON.parse(JSON.stringify(answer).split(`$${key}`).join('$KEY')) as unknown;
    const unknownProperty = { status: 400, body: { error_code: 400, error_name: 400, error_message: 'resource_properties: unknown property $KEY (known: $gpu)' } };

    it('are unknown to members: lease creation and update, availability and search answer exactly as for a key no host has', async () => {
      const lease = (await asAlice('POST', '/v1/leases', { name: 'private-probe', ...soon(), reservations: [hostReservation()] })).body.lease;
      const probes: Record<string, (key: string, value: string) => Promise<{ status: number; body: unknown }>> = {
        create: (key, value) => asAlice('POST', '/v1/leases', { name: 'probe', ...soon(), reservations: [hostReservation({ resource_properties: query(key, value) })] }),
        update: (key, value) => asAlice('PUT', `/v1/leases/${lease.id}`, { reservations: [{ id: lease.reservations[0].id, resource_properties: query(key, value) }] }),
        availability: (key, value) => asAlice('GET', `/v1/availability?start=${encodeURIComponent(inSeconds(3600))}&end=${encodeURIComponent(inSeconds(7200))}&resource_properties=${encodeURIComponent(query(key, value))}`),
        search: (key, value) => asAlice('POST', '/v1/availability/search', { ...soon(), reservations: [hostReservation({ resource_properties: query(key, value) })] }),
      };
      for (const [route, probe] of Object.entries(probes)) {
        const answers = [normalised(await probe('nope', 'cage-7'), 'nope'), normalised(await probe('secret_rack', 'cage-7'), 'secret_rack'), normalised(await probe('secret_rack', 'cage-8'), 'secret_rack')];
        expect({ route, answers }).toEqual({ route, answers: [unknownProperty, unknownProperty, unknownProperty] });
      }
      expect((await asAlice('DELETE', `/v1/leases/${lease.id}`)).status).toBe(204);
    });

    it('are usable by admins, and never listed as known in a message', async () => {
      const window = `start=${encodeURIComponent(inSeconds(3600))}&end=${encodeURIComponent(inSeconds(7200))}`;
      const found = await asAdmin('GET', `/v1/availability?${window}&resource_properties=${encodeURIComponent(query('secret_rack', 'cage-7'))}`);
      expect(found.body.availability.map((h: { hypervisor_hostname: string }) => h.hypervisor_hostname)).toEqual(['policy-host-1']);
      expect(normalised(await asAdmin('GET', `/v1/availability?${window}&resource_properties=${encodeURIComponent(query('nope', 'x'))}`), 'nope')).toEqual(unknownProperty);
      // The worker's admission says the same to an admin (the key was checked by the calendar there).
      expect(normalised(await asAdmin('POST', '/v1/leases', { name: 'admin-probe', ...soon(), reservations: [hostReservation({ resource_properties: query('nope', 'x') })] }), 'nope')).toEqual(unknownProperty);
      const booked = await asAdmin('POST', '/v1/leases', { name: 'admin-private', ...soon(), reservations: [hostReservation({ resource_properties: query('secret_rack', 'cage-7') })] });
      expect(booked.status).toBe(201);
      expect(booked.body.lease.reservations[0].hosts).toEqual(['policy-host-1']);
      expect((await asAdmin('DELETE', `/v1/leases/${booked.body.lease.id}`)).status).toBe(204);
      await eventually(async () => ((await asAdmin('GET', `/v1/leases/${booked.body.lease.id}`)).status === 404 ? true : undefined));
    });
  });
});
