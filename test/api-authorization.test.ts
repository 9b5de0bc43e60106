/**
 * Who may do what, on every route of the API: project A against project B's leases (read, list,
 * page from, update, delete: all as if they did not exist), non-admins against os-hosts (403 on
 * every change and on the host list; only public resource properties), non-admins against
 * floatingips (403 on enrolment and removal), networks (403 on every route, as os-hosts), projects' webhooks (their own project's only), allocations filtered to
 * the caller's project, and the admin who sees and changes everything. A route added to the API
 * without a case here fails the last test.
 */
import pino from 'pino';
import { appRoutes } from './support/routes';
import { createApp } from '../src/api/app';
import { insertFloatingIp } from '../src/db/floating-ips';
import { insertNetworkSegment } from '../src/db/network-segments';
import { floatingIpPlugin } from '../src/resources/floating-ip';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { pluginRegistry } from '../src/domain/resource-plugin';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, type ApiCall, eventually, useTestStack } from '../dev-stack/stack';

type Caller = 'A' | 'B' | 'admin';
const HEADERS: Record<Caller, Record<string, string>> = {
  A: { 'x-project-id': 'project-a', 'x-user-id': 'alice', 'x-roles': 'member' },
  B: { 'x-project-id': 'project-b', 'x-user-id': 'bob', 'x-roles': 'member' },
  admin: { 'x-auth-token': 'admin' },
};
const other = (caller: 'A' | 'B'): 'A' | 'B' => (caller === 'A' ? 'B' : 'A');
const POLICY = (action: string) => ({ error_code: 403, error_name: 403, error_message: `Policy doesn't allow blazar:oshosts:${action} to be performed.` });

describe('authorization on every route', () => {
  // Members book in 2099 here: far beyond the default maximum advance booking (test/lease-policy.test.ts).
  const stack = useTestStack({ env: { LK_MAX_ADVANCE_DAYS: '36500' }, withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' }), floatingIpPlugin({ pool, cloud: 'calendar-only' })] });
  const call = (caller: Caller, method: string, path: string, body?: unknown): Promise<ApiCall> => apiClient(stack().url, HEADERS[caller])(method, path, body);
  const leases: Record<'A' | 'B', { id: string; name: string; reservationId: string }> = {} as never;
  let hostIds: string[];
  /** Every (method, route) a case below exercised: compared with the app's routes at the end. */
  const exercised = new Set<string>();
  const exercise = (route: string) => exercised.add(route);

  beforeAll(async () => {
    hostIds = [await insertHost(stack().db.pool, { name: 'auth-host-1', capabilities: { rack: 'r1', secret_tag: 'x' } }), await insertHost(stack().db.pool, { name: 'auth-host-2', capabilities: { rack: 'r2' } })];
    expect((await call('admin', 'PATCH', '/v1/os-hosts/properties/secret_tag', { private: true })).status).toBe(200);
    for (const [caller, day] of [['A', 1], ['B', 2]] as const) {
      const res = await call(caller, 'POST', '/v1/leases', {
        name: `lease-of-${caller}`,
        start_date: `2099-03-0${day} 10:00`,
        end_date: `2099-03-0${day} 12:00`,
        reservations: [hostReservation({ min: 2, max: 2 })],
      });
      expect(res.status).toBe(201);
      leases[caller] = { id: res.body.lease.id, name: res.body.lease.name, reservationId: res.body.lease.reservations[0].id };
    }
  });

  describe.each(['A', 'B'] as const)('project %s against the other project', (caller) => {
    it("sees only its own project's usage, and may not ask for the other project's", async () => {
      exercise('GET /usage');
      const window = `from=${encodeURIComponent('2099-03-01 00:00')}&to=${encodeURIComponent('2099-03-03 00:00')}`;
      expect((await call(caller, 'GET', `/v1/usage?${window}`)).body.usage.groups.map((g: { project_id: string }) => g.project_id)).toEqual([`project-${caller.toLowerCase()}`]);
      expect(await call(caller, 'GET', `/v1/usage?${window}&project_id=project-${other(caller).toLowerCase()}`)).toEqual({
        status: 403,
        body: { error_code: 403, error_name: 403, error_message: "only admins can see other projects' usage" },
      });
    });

    const mine = () => leases[caller];
    const theirs = () => leases[other(caller)];
    const notFound = (id: string) => ({ status: 404, body: { error_code: 404, error_name: 404, error_message: `Object with {'lease_id': '${id}'} not found` } });

    it('lists only its own leases, and may not ask for the other project or page from its lease', async () => {
      exercise('GET /leases');
      const listed = await call(caller, 'GET', '/v1/leases');
      expect(listed.body.leases.map((l: { id: string }) => l.id)).toEqual([mine().id]);
      expect(await call(caller, 'GET', `/v1/leases?project_id=project-${other(caller).toLowerCase()}`)).toEqual({
        status: 403,
        body: { error_code: 403, error_name: 403, error_message: "only admins can list other projects' leases" },
      });
      expect(await call(caller, 'GET', `/v1/leases?marker=${theirs().id}`)).toEqual(notFound(theirs().id));
      expect((await call(caller, 'GET', `/v1/leases?name=${theirs().name}`)).body.leases).toEqual([]);
    });

    it('cannot read, update or delete the other lease, which stays as it was', async () => {
      exercise('GET /leases/:id');
      exercise('PUT /leases/:id');
      exercise('DELETE /leases/:id');
      exercise('GET /leases/:id/extension-offers');
      expect((await call(caller, 'GET', `/v1/leases/${mine().id}`)).status).toBe(200);
      expect((await call(caller, 'GET', `/v1/leases/${mine().id}/extension-offers`)).status).toBe(200);
      expect(await call(caller, 'GET', `/v1/leases/${theirs().id}/extension-offers`)).toEqual(notFound(theirs().id));
      expect(await call(caller, 'GET', `/v1/leases/${theirs().id}`)).toEqual(notFound(theirs().id));
      expect(await call(caller, 'PUT', `/v1/leases/${theirs().id}`, { name: 'hijacked' })).toEqual(notFound(theirs().id));
      expect(await call(caller, 'PUT', `/v1/leases/${theirs().id}`, { end_date: '2099-03-05 12:00' })).toEqual(notFound(theirs().id));
      expect(await call(caller, 'DELETE', `/v1/leases/${theirs().id}`)).toEqual(notFound(theirs().id));
      // Nor lend or reclaim its hosts (issue 43).
      exercise('POST /leases/:id/lend');
      exercise('POST /leases/:id/reclaim');
      expect(await call(caller, 'POST', `/v1/leases/${theirs().id}/lend`, { count: 1, until: '2099-03-01 13:00' })).toEqual(notFound(theirs().id));
      expect(await call(caller, 'POST', `/v1/leases/${theirs().id}/reclaim`, {})).toEqual(notFound(theirs().id));
      const after = (await call('admin', 'GET', `/v1/leases/${theirs().id}`)).body.lease;
      expect({ name: after.name, status: after.status, end_date: after.end_date }).toEqual({ name: theirs().name, status: 'PENDING', end_date: expect.stringMatching(/^2099-03-0[12]T12:00/) });
    });

    it('may not approve or deny a lease, its own or the other project\'s (403 whatever the lease: ids are not confirmed)', async () => {
      exercise('POST /leases/:id/approve');
      exercise('POST /leases/:id/deny');
      for (const outcome of ['approve', 'deny']) {
        for (const lease of [mine(), theirs()]) {
          const answer = await call(caller, 'POST', `/v1/leases/${lease.id}/${outcome}`, { reason: 'mine to decide' });
          expect(answer).toEqual({ status: 403, body: { error_code: 403, error_name: 403, error_message: `Policy doesn't allow blazar:leases:${outcome} to be performed: only admins answer leases waiting for approval.` } });
        }
      }
      expect((await call('admin', 'GET', `/v1/leases/${theirs().id}`)).body.lease.status).toBe('PENDING');
    });

    it('creates leases only in its own project', async () => {
      exercise('POST /leases');
      const created = await call(caller, 'POST', '/v1/leases', { name: 'mine-too', start_date: '2099-06-01 10:00', end_date: '2099-06-01 11:00' });
      expect(created.status).toBe(201);
      expect(created.body.lease.project_id).toBe(`project-${caller.toLowerCase()}`);
      expect((await call(caller, 'POST', '/v1/leases', { name: 'theirs', project_id: 'project-x', start_date: '2099-06-01 10:00', end_date: '2099-06-01 11:00' })).status).toBe(400);
      expect((await call(caller, 'DELETE', `/v1/leases/${created.body.lease.id}`)).status).toBe(204);
      await eventually(async () => ((await call(caller, 'GET', `/v1/leases/${created.body.lease.id}`)).status === 404 ? true : undefined));
    });

    it("cannot read, change or delete the other project's series: to it that series does not exist", async () => {
      exercise('GET /series/:id');
      exercise('PUT /series/:id');
      exercise('DELETE /series/:id');
      const made = await call(other(caller), 'POST', '/v1/leases', { name: `series-for-${caller}`, start_date: '2099-07-01 10:00', end_date: '2099-07-01 11:00', recurrence: 'FREQ=DAILY;COUNT=2' });
      expect(made.status).toBe(201);
      const id: string = made.body.series.id;
      for (const [method, body] of [['GET', undefined], ['PUT', { duration: 30 }], ['DELETE', undefined]] as const) {
        expect(await call(caller, method, `/v1/series/${id}`, body)).toEqual({ status: 404, body: { error_code: 404, error_name: 404, error_message: `Object with {'series_id': '${id}'} not found` } });
      }
      expect((await call(other(caller), 'GET', `/v1/series/${id}`)).body.series.occurrences.map((o: { end_date: string }) => o.end_date)).toEqual(['2099-07-01 11:00', '2099-07-02 11:00']);
      expect((await call(other(caller), 'DELETE', `/v1/series/${id}`)).status).toBe(204);
    });

    it('sees only its own project\'s host allocations', async () => {
      exercise('GET /os-hosts/allocations');
      exercise('GET /os-hosts/:id/allocation');
      const reservationsIn = (allocations: Array<{ reservations: Array<{ lease_id: string; project_id: string }> }>) => allocations.flatMap((a) => a.reservations);
      const all = await call(caller, 'GET', '/v1/os-hosts/allocations');
      expect(all.status).toBe(200);
      expect(new Set(reservationsIn(all.body.allocations).map((r) => r.lease_id))).toEqual(new Set([mine().id]));
      expect(reservationsIn((await call(caller, 'GET', `/v1/os-hosts/allocations?lease_id=${theirs().id}`)).body.allocations)).toEqual([]);
      for (const hostId of hostIds) {
        const one = await call(caller, 'GET', `/v1/os-hosts/${hostId}/allocation`);
        expect(one.status).toBe(200);
        expect(one.body.allocation.reservations.map((r: { lease_id: string }) => r.lease_id)).toEqual([mine().id]);
      }
    });

    it('cannot hold, see, release or accept the other project\'s offer: to it that offer does not exist', async () => {
      exercise('POST /offers/:id/hold');
      exercise('GET /offers/:id/hold');
      exercise('DELETE /offers/:id/hold');
      exercise('POST /offers/:id/accept');
      const made = await call(other(caller), 'POST', '/v1/offers', { start_after: '2099-04-01 10:00', duration: 60, reservations: [hostReservation({ min: 1, max: 1 })] });
      expect(made.status).toBe(200);
      const offerId: string = made.body.offers[0].id;
      for (const [method, path, body] of [
        ['POST', `/v1/offers/${offerId}/hold`, {}],
        ['GET', `/v1/offers/${offerId}/hold`, undefined],
        ['DELETE', `/v1/offers/${offerId}/hold`, undefined],
        ['POST', `/v1/offers/${offerId}/accept`, { name: 'not-mine' }],
      ] as const) {
        const answer = await call(caller, method, path, body);
        expect({ route: `${method} ${path}`, status: answer.status, code: answer.body?.error_code }).toEqual({ route: `${method} ${path}`, status: 404, code: 404 });
      }
      expect((await call(caller, 'GET', '/v1/leases?name=not-mine')).body.leases).toEqual([]);
    });

    it('dry-runs the usage policy for its own project only: the other project\'s lease does not exist to it, its project_id is refused', async () => {
      exercise('POST /policy/check');
      const checked = await call(caller, 'POST', '/v1/policy/check', { name: 'checked', start_date: '2099-06-02 10:00', end_date: '2099-06-02 11:00' });
      expect(checked.status).toBe(200);
      expect(checked.body.decision).toBe('admit');
      expect((await call(caller, 'POST', '/v1/policy/check', { lease_id: theirs().id, end_date: '2099-06-02 12:00' })).status).toBe(404);
      expect((await call(caller, 'POST', '/v1/policy/check', { name: 'x', project_id: `project-${other(caller).toLowerCase()}`, start_date: '2099-06-02 10:00', end_date: '2099-06-02 11:00' })).status).toBe(403);
    });

    it('may ask when capacity is free, and learns no other project\'s lease from it', async () => {
      exercise('GET /availability');
      exercise('POST /availability/search');
      exercise('POST /offers');
      const offers = await call(caller, 'POST', '/v1/offers', { start_after: '2099-03-01 10:00', duration: 60, reservations: [hostReservation({ min: 1, max: 2 })] });
      expect(offers.status).toBe(200);
      expect(offers.body.offers.length).toBeGreaterThan(0);
      expect(JSON.stringify(offers.body)).not.toContain(theirs().id);
      const free = await call(caller, 'GET', '/v1/availability?start=2099-03-01 00:00&end=2099-03-03 00:00');
      expect(free.status).toBe(200);
      expect(free.body.availability).toHaveLength(2);
      const search = await call(caller, 'POST', '/v1/availability/search', { start_date: '2099-03-01 10:00', end_date: '2099-03-01 11:00', reservations: [hostReservation()] });
      expect(search.status).toBe(200);
      for (const res of [free, search]) expect(JSON.stringify(res.body)).not.toContain(theirs().id);
      // The calendar page's window: the other project's booking is there, but only as `reserved`.
      exercise('GET /calendar');
      const calendar = await call(caller, 'GET', '/v1/calendar?start=2099-03-01 00:00&end=2099-03-03 00:00');
      expect(calendar.status).toBe(200);
      expect(calendar.body.bookings.filter((b: { reserved?: boolean }) => b.reserved)).toHaveLength(2);
      expect(calendar.body.bookings.filter((b: { lease_id?: string }) => b.lease_id === mine().id)).toHaveLength(2);
      const text = JSON.stringify(calendar.body);
      for (const secret of [theirs().id, theirs().name, theirs().reservationId, 'secret_tag']) expect(text).not.toContain(secret);
    });
  });

  describe('a non-admin and os-hosts', () => {
    it.each([
      ['GET', '/os-hosts', 'get'],
      ['POST', '/os-hosts', 'post'],
      ['GET', '/os-hosts/:id', 'get'],
      ['PUT', '/os-hosts/:id', 'put'],
      ['DELETE', '/os-hosts/:id', 'delete'],
      ['PATCH', '/os-hosts/properties/:name', 'update_resource_properties'],
      ['POST', '/os-hosts/:id/power', 'power'],
      ['POST', '/os-hosts/:id/maintenance', 'maintenance:post'],
      ['GET', '/os-hosts/:id/maintenance', 'maintenance:get'],
      ['GET', '/os-hosts/:id/maintenance/:windowId', 'maintenance:get'],
      ['DELETE', '/os-hosts/:id/maintenance/:windowId', 'maintenance:delete'],
      ['GET', '/maintenance', 'maintenance:get'],
      ['GET', '/maintenance/:windowId', 'maintenance:get'],
      ['DELETE', '/maintenance/:windowId', 'maintenance:delete'],
    ])('%s %s → 403, nothing changes', async (method, route, action) => {
      exercise(`${method} ${route}`);
      const path = `/v1${route.replace(':id', hostIds[0]).replace(':name', 'rack').replace(':windowId', '00000000-0000-4000-8000-00000000000a')}`;
      const body = route.endsWith('/maintenance') && method === 'POST' ? { start_date: '2099-01-01 00:00', end_date: '2099-01-02 00:00', reason: 'theirs' }
        : route.endsWith('/power') ? { action: 'off' }
        : method === 'POST' ? { name: 'some-hypervisor' } : method === 'PUT' ? { rack: 'stolen' } : method === 'PATCH' ? { private: true } : undefined;
      const beforeWindows = (await call('admin', 'GET', '/v1/maintenance?all=true')).body;
      const before = (await call('admin', 'GET', '/v1/os-hosts')).body.hosts;
      const beforeProperties = (await call('admin', 'GET', '/v1/os-hosts/properties?detail=1&all=1')).body;
      for (const caller of ['A', 'B'] as const) expect(await call(caller, method, path, body)).toEqual({ status: 403, body: POLICY(action) });
      expect((await call('admin', 'GET', '/v1/os-hosts')).body.hosts).toEqual(before);
      expect((await call('admin', 'GET', '/v1/os-hosts/properties?detail=1&all=1')).body).toEqual(beforeProperties);
      expect((await call('admin', 'GET', '/v1/maintenance?all=true')).body).toEqual(beforeWindows);
    });

    it('GET /os-hosts/properties shows non-admins the public properties only', async () => {
      exercise('GET /os-hosts/properties');
      const names = (res: ApiCall) => res.body.resource_properties.map((p: { property: string }) => p.property);
      expect(names(await call('A', 'GET', '/v1/os-hosts/properties?all=1'))).toEqual(['rack']);
      expect(names(await call('admin', 'GET', '/v1/os-hosts/properties?all=1'))).toEqual(['rack', 'secret_tag']);
    });
  });

  describe('a non-admin and floatingips', () => {
    const NETWORK = '44444444-4444-4444-8444-444444444444';
    const FIP_ID = '55555555-5555-4555-8555-555555555555';
    const FIP_POLICY = (action: string) => ({ error_code: 403, error_name: 403, error_message: `Policy doesn't allow blazar:floatingips:${action} to be performed.` });

    it('may list and show the addresses, may not enrol or remove one, and sees only its own project\'s allocations', async () => {
      for (const route of ['GET /floatingips', 'POST /floatingips', 'GET /floatingips/:id', 'DELETE /floatingips/:id', 'GET /floatingips/allocations', 'GET /floatingips/:id/allocation']) exercise(route);
      await insertFloatingIp(stack().db.pool, { id: FIP_ID, networkId: NETWORK, subnetId: 'subnet-1', address: '203.0.113.120' });
      for (const caller of ['A', 'B'] as const) {
        expect((await call(caller, 'GET', '/v1/floatingips')).body.floatingips.map((f: { id: string }) => f.id)).toEqual([FIP_ID]);
        expect((await call(caller, 'GET', `/v1/floatingips/${FIP_ID}`)).status).toBe(200);
        expect(await call(caller, 'POST', '/v1/floatingips', { floating_network_id: NETWORK, floating_ip_address: '203.0.113.121' })).toEqual({ status: 403, body: FIP_POLICY('post') });
        expect(await call(caller, 'DELETE', `/v1/floatingips/${FIP_ID}`)).toEqual({ status: 403, body: FIP_POLICY('delete') });
      }
      const held = await call('A', 'POST', '/v1/leases', {
        name: 'address-of-A',
        start_date: '2099-03-05 10:00',
        end_date: '2099-03-05 12:00',
        reservations: [{ resource_type: 'virtual:floatingip', network_id: NETWORK, amount: 1 }],
      });
      expect(held.status).toBe(201);
      const leaseIdsIn = (res: ApiCall) => res.body.allocations.flatMap((a: { reservations: Array<{ lease_id: string }> }) => a.reservations.map((r) => r.lease_id));
      expect(leaseIdsIn(await call('A', 'GET', '/v1/floatingips/allocations'))).toEqual([held.body.lease.id]);
      expect(leaseIdsIn(await call('B', 'GET', '/v1/floatingips/allocations'))).toEqual([]);
      expect(leaseIdsIn(await call('admin', 'GET', '/v1/floatingips/allocations'))).toEqual([held.body.lease.id]);
      expect((await call('B', 'GET', `/v1/floatingips/${FIP_ID}/allocation`)).body.allocation.reservations).toEqual([]);
      expect((await call('A', 'GET', `/v1/floatingips/${FIP_ID}/allocation`)).body.allocation.reservations).toHaveLength(1);
      expect((await call('A', 'DELETE', `/v1/leases/${held.body.lease.id}`)).status).toBe(204);
      expect((await call('admin', 'DELETE', `/v1/floatingips/${FIP_ID}`)).status).toBe(204);
    });
  });

  describe('a non-admin and networks (issue 45)', () => {
    const SEGMENT_ID = '66666666-6666-4666-8666-666666666666';
    const NETWORKS_POLICY = (action: string) => ({ status: 403, body: { error_code: 403, error_name: 403, error_message: `Policy doesn't allow blazar:networks:${action} to be performed.` } });

    it('may not list, show, enrol, change or remove segments, nor see their allocations: admins only, as os-hosts', async () => {
      const routes = [
        ['GET', '/networks', 'get'],
        ['POST', '/networks', 'post'],
        ['GET', '/networks/allocations', 'get_allocations'],
        ['GET', '/networks/:id', 'get'],
        ['PUT', '/networks/:id', 'put'],
        ['DELETE', '/networks/:id', 'delete'],
        ['GET', '/networks/:id/allocation', 'get_allocations'],
      ] as const;
      await insertNetworkSegment(stack().db.pool, { id: SEGMENT_ID, networkType: 'vlan', physicalNetwork: 'physnet1', segmentId: '3000', capabilities: {} });
      for (const [method, route, action] of routes) {
        exercise(`${method} ${route}`);
        const path = `/v1${route.replace(':id', SEGMENT_ID)}`;
        const body = method === 'POST' ? { network_type: 'vlan', physical_network: 'physnet1', segment_id: 3001 } : method === 'PUT' ? { values: { stitch_provider: 'x' } } : undefined;
        for (const caller of ['A', 'B'] as const) expect(await call(caller, method, path, body)).toEqual(NETWORKS_POLICY(action));
      }
      expect((await call('admin', 'GET', `/v1/networks/${SEGMENT_ID}`)).body.network).toMatchObject({ id: SEGMENT_ID, segment_id: '3000' });
      expect((await call('admin', 'GET', '/v1/networks/allocations')).body.allocations).toEqual([{ resource_id: SEGMENT_ID, reservations: [] }]);
      expect((await call('admin', 'DELETE', `/v1/networks/${SEGMENT_ID}`)).status).toBe(204);
    });
  });

  describe('a non-admin and the usage policy', () => {
    it('reads its own project\'s policy only, and may not set or remove any; nothing changes', async () => {
      for (const route of ['GET /projects/:projectId/policy', 'PUT /projects/:projectId/policy', 'DELETE /projects/:projectId/policy']) exercise(route);
      const PROJECT_POLICY = (action: string, suffix = '') => ({ error_code: 403, error_name: 403, error_message: `Policy doesn't allow blazar:projects:policy:${action} to be performed${suffix}.` });
      expect((await call('admin', 'PUT', '/v1/projects/project-b/policy', { max_hosts: 7 })).status).toBe(200);
      const before = (await call('admin', 'GET', '/v1/projects/project-b/policy')).body;
      expect((await call('B', 'GET', '/v1/projects/project-b/policy')).body).toEqual(before);
      expect(await call('A', 'GET', '/v1/projects/project-b/policy')).toEqual({ status: 403, body: PROJECT_POLICY('get', ": members see their own project's policy only") });
      for (const caller of ['A', 'B'] as const) {
        expect(await call(caller, 'PUT', '/v1/projects/project-b/policy', { max_hosts: 1000 })).toEqual({ status: 403, body: PROJECT_POLICY('put') });
        expect(await call(caller, 'DELETE', '/v1/projects/project-b/policy')).toEqual({ status: 403, body: PROJECT_POLICY('delete') });
      }
      expect((await call('admin', 'GET', '/v1/projects/project-b/policy')).body).toEqual(before);
      expect((await call('admin', 'DELETE', '/v1/projects/project-b/policy')).status).toBe(204);
    });
  });

  describe('a non-admin and the webhooks', () => {
    it("reads and sets its own project's webhooks only, not another project's; nothing changes", async () => {
      for (const route of ['GET /projects/:projectId/webhooks', 'PUT /projects/:projectId/webhooks']) exercise(route);
      const WEBHOOKS_POLICY = (action: string) => ({ error_code: 403, error_name: 403, error_message: `Policy doesn't allow blazar:projects:webhooks:${action} to be performed: members see and set their own project's webhooks only.` });
      expect((await call('B', 'PUT', '/v1/projects/project-b/webhooks', { webhooks: [{ url: 'https://1.1.1.1/hook-of-b' }] })).status).toBe(200);
      const before = (await call('B', 'GET', '/v1/projects/project-b/webhooks')).body;
      expect(before.webhooks.map((w: { url: string }) => w.url)).toEqual(['https://1.1.1.1/hook-of-b']);
      expect(await call('A', 'GET', '/v1/projects/project-b/webhooks')).toEqual({ status: 403, body: WEBHOOKS_POLICY('get') });
      expect(await call('A', 'PUT', '/v1/projects/project-b/webhooks', { webhooks: [{ url: 'https://1.1.1.1/hook-of-a' }] })).toEqual({ status: 403, body: WEBHOOKS_POLICY('put') });
      expect((await call('admin', 'GET', '/v1/projects/project-b/webhooks')).body).toEqual(before);
      expect((await call('A', 'GET', '/v1/projects/project-a/webhooks')).body).toEqual({ webhooks: [] });
      expect((await call('admin', 'PUT', '/v1/projects/project-b/webhooks', { webhooks: [] })).status).toBe(200);

      // The approvers' webhook is the admins': a member gets 403 even for its own project, and nothing is set.
      for (const route of ['GET /projects/:projectId/approvers-webhook', 'PUT /projects/:projectId/approvers-webhook', 'DELETE /projects/:projectId/approvers-webhook']) exercise(route);
      const APPROVERS_POLICY = (action: string) => ({ error_code: 403, error_name: 403, error_message: `Policy doesn't allow blazar:projects:approvers_webhook:${action} to be performed.` });
      expect(await call('A', 'GET', '/v1/projects/project-a/approvers-webhook')).toEqual({ status: 403, body: APPROVERS_POLICY('get') });
      expect(await call('A', 'PUT', '/v1/projects/project-a/approvers-webhook', { url: 'https://1.1.1.1/approvers-of-a' })).toEqual({ status: 403, body: APPROVERS_POLICY('put') });
      expect(await call('A', 'DELETE', '/v1/projects/project-a/approvers-webhook')).toEqual({ status: 403, body: APPROVERS_POLICY('delete') });
      expect((await call('admin', 'GET', '/v1/projects/project-a/approvers-webhook')).body).toEqual({ approvers_webhook: null });
    });
  });

  describe('the admin', () => {
    it('sees every project\'s leases and allocations, and changes any lease', async () => {
      const listed = await call('admin', 'GET', '/v1/leases');
      expect(new Set(listed.body.leases.map((l: { id: string }) => l.id))).toEqual(new Set([leases.A.id, leases.B.id]));
      expect((await call('admin', 'GET', '/v1/leases?project_id=project-b')).body.leases.map((l: { id: string }) => l.id)).toEqual([leases.B.id]);
      const lessees = (await call('admin', 'GET', '/v1/os-hosts/allocations')).body.allocations.flatMap((a: { reservations: Array<{ lease_id: string }> }) => a.reservations.map((r) => r.lease_id));
      expect(new Set(lessees)).toEqual(new Set([leases.A.id, leases.B.id]));
      const renamed = await call('admin', 'PUT', `/v1/leases/${leases.B.id}`, { name: 'renamed-by-admin' });
      expect(renamed.status).toBe(200);
      expect(renamed.body.lease.name).toBe('renamed-by-admin');
      expect((await call('B', 'GET', `/v1/leases/${leases.B.id}`)).body.lease.name).toBe('renamed-by-admin');
      expect((await call('admin', 'GET', '/v1/os-hosts')).body.hosts.map((h: { id: string }) => h.id)).toEqual(hostIds);
      // Reading a host needs no cloud (enrolling one does).
      expect((await call('admin', 'GET', `/v1/os-hosts/${hostIds[0]}`)).body.host).toMatchObject({ id: hostIds[0], state: 'up', reservable: true });
    });
  });

  it('every route of the API was checked above (or is public)', () => {
    const app = createApp({ config: stack().config, log: pino({ level: 'silent' }), pool: stack().db.pool, connection: stack().temporal.connection, client: stack().temporal.client, types: pluginRegistry([]) });
    // The calendar page's sign-in settings and its Keystone password sign-in (to the user's own token) need no identity.
    // And the API's OpenAPI description (/v1/openapi.json, the suffix dropped as from every path).
    const publicRoutes = new Set(['GET /', 'GET /versions', 'GET /healthz', 'GET /metrics', 'GET /calendar/settings', 'POST /calendar/login', 'GET /v1/openapi']);
    const routes = appRoutes(app).map((route) => (publicRoutes.has(route) ? route : route.replace(' /v1/', ' /')));
    expect(routes.length).toBeGreaterThan(15);
    expect(routes.filter((r) => !publicRoutes.has(r) && !exercised.has(r))).toEqual([]);
  });
});
