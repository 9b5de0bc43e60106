/**
 * The lists without `limit` (`GET /v1/leases`, `GET /v1/os-hosts/allocations`) answer every item,
 * as Blazar does (blazarclient's lease-list follows no links), streamed: read from PostgreSQL in
 * bounded batches and written as the client takes them, so the API's memory does not grow with the
 * count. A client leaving stops the reading and leaks no connection; an error once the answer has
 * begun ends the connection abruptly (a broken body), never a 500 after the headers nor a valid
 * but truncated document.
 */
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import type { Pool } from 'pg';
import { newLease, type Lease } from '../src/domain/lease';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { insertLeaseRows } from '../dev-stack/fixtures/lease-rows';
import { apiClient, eventually, useTestStack } from '../dev-stack/stack';

const LEASES = 2_500;
const LEASE_LIST_SQL = /ORDER BY created_at, id/;
const ALLOCATION_LIST_SQL = /ORDER BY a\.host_id/;
const member = { 'x-project-id': 'project-a', 'x-user-id': 'user-a' };
const admin = { 'x-project-id': 'admin', 'x-roles': 'admin' };

type QueryArgs = [text: string | { text: string }, values?: unknown[]];

/**
 * Lets a test see the list queries (those whose SQL matches `sql`) on the API's pool, and delay
 * or fail them: `before` runs ahead of each, with its number (1, 2, …), and may throw.
 */
function watchQueries(pool: Pool, sql: RegExp, before: (n: number) => Promise<void> = () => Promise.resolve()) {
  const original = pool.query.bind(pool) as unknown as (...args: QueryArgs) => Promise<unknown>;
  const seen: string[] = [];
  const spy = jest.spyOn(pool, 'query') as unknown as jest.SpyInstance<Promise<unknown>, QueryArgs>;
  spy.mockImplementation(async (...args: QueryArgs) => {
    const text = typeof args[0] === 'string' ? args[0] : args[0].text;
    if (sql.test(text)) {
      seen.push(text);
      await before(seen.length);
    }
    return original(...args);
  });
  return { seen, restore: () => spy.mockRestore() };
}

/** The pool has every connection back (none checked out, nobody waiting). */
const poolAtRest = (pool: Pool) => pool.waitingCount === 0 && pool.idleCount === pool.totalCount;

/** GET with Node's http client: resolves at the first chunk of the body, with the request to end it. */
function firstChunk(url: string, headers: Record<string, string>): Promise<{ status: number | undefined; request: http.ClientRequest }> {
  return new Promise((resolve, reject) => {
    const request = http.get(url, { headers }, (res) => {
      res.once('data', () => {
        res.pause();
        resolve({ status: res.statusCode, request });
      });
      res.once('error', () => undefined);
    });
    request.on('error', (err) => reject(err));
  });
}

describe('lists without limit are streamed', () => {
  const stack = useTestStack({ noWorker: true });
  const asMember = apiClient(() => stack().url, member);
  const asAdmin = apiClient(() => stack().url, admin);
  const projectA: Lease[] = [];

  beforeAll(async () => {
    const requested = Date.UTC(2026, 0, 1);
    const leases = Array.from({ length: LEASES + 100 }, (_, i) => {
      const start = Date.UTC(2099, 0, 1) + i * 60_000;
      const projectId = i < LEASES ? 'project-a' : 'project-b';
      const reservations = [{ id: randomUUID(), resource_type: 'physical:host', params: { min: 1, max: 1, hypervisor_properties: '', resource_properties: '', note: `é ${i} "quoted" \u2028` } }];
      return { ...newLease({ id: randomUUID(), name: `lease-${i}`, projectId, userId: 'user-a', start, end: start + 3_600_000, reservations, requestedMs: requested + i }), version: 1 };
    });
    await insertLeaseRows(stack().db.pool, leases);
    projectA.push(...leases.filter((l) => l.projectId === 'project-a'));
  }, 60_000);

  afterEach(() => {
    jest.restoreAllMocks();
  });

  /** The pages of the paged list (limit + marker, following leases_links), joined. */
  async function pagedList(call: ReturnType<typeof apiClient>, query = ''): Promise<unknown[]> {
    const all: unknown[] = [];
    let path: string | undefined = `/v1/leases?limit=100${query}`;
    for (let page = 0; path !== undefined && page < 100; page++) {
      const { status, body } = await call('GET', path);
      expect(status).toBe(200);
      all.push(...body.leases);
      path = body.leases_links?.find((l: { rel: string }) => l.rel === 'next')?.href;
    }
    return all;
  }

  it('answers every lease of the project as one JSON document, read in batches, equal to the paged list', async () => {
    const queries = watchQueries(stack().db.pool, LEASE_LIST_SQL);
    const res = await fetch(`${stack().url}/v1/leases`, { headers: member });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.headers.get('transfer-encoding')).toBe('chunked'); // written as read, not built whole
    const body = (await res.json()) as { leases: Array<{ id: string; project_id: string }> };
    // Bounded batches: many queries, each with a LIMIT.
    expect(queries.seen.length).toBeGreaterThanOrEqual(10);
    for (const sql of queries.seen) expect(sql).toMatch(/LIMIT \$\d+\s*$/);
    queries.restore();

    expect(Object.keys(body)).toEqual(['leases']);
    expect(body.leases.map((l) => l.id)).toEqual(projectA.map((l) => l.id));
    expect(body.leases).toEqual(await pagedList(asMember));
  });

  it('streams the admin, filtered and marker lists alike', async () => {
    const everything = (await asAdmin('GET', '/v1/leases')).body.leases;
    expect(everything).toHaveLength(LEASES + 100);
    expect(everything).toEqual(await pagedList(asAdmin));
    const ofB = (await asAdmin('GET', '/v1/leases?project_id=project-b')).body.leases;
    expect(ofB.map((l: { name: string }) => l.name)).toEqual(Array.from({ length: 100 }, (_, i) => `lease-${LEASES + i}`));
    const afterMarker = (await asMember('GET', `/v1/leases?marker=${projectA[999].id}`)).body.leases;
    expect(afterMarker.map((l: { id: string }) => l.id)).toEqual(projectA.slice(1000).map((l) => l.id));
    expect((await asMember('GET', '/v1/leases?name=no-such-lease')).body).toEqual({ leases: [] });
  });

  it('stops reading when the client goes away, and every connection goes back to the pool', async () => {
    // Slow batches, so that the answer is far from done when the client leaves.
    const queries = watchQueries(stack().db.pool, LEASE_LIST_SQL, () => new Promise((resolve) => setTimeout(resolve, 100)));
    const { status, request } = await firstChunk(`${stack().url}/v1/leases`, member);
    expect(status).toBe(200);
    request.destroy();
    const readWhenLeft = queries.seen.length;
    await eventually(() => Promise.resolve(poolAtRest(stack().db.pool) ? true : undefined), 10_000);
    await new Promise((resolve) => setTimeout(resolve, 500)); // time for 5 more batches, were it still reading
    expect(queries.seen.length).toBeLessThanOrEqual(readWhenLeft + 1);
    expect(queries.seen.length).toBeLessThan(LEASES / 250);
    expect(poolAtRest(stack().db.pool)).toBe(true);
    queries.restore();
    expect((await asMember('GET', '/v1/leases')).body.leases).toHaveLength(LEASES);
  });

  it('ends the connection abruptly when reading fails after the answer began: a broken body, not a 500 nor truncated valid JSON', async () => {
    const queries = watchQueries(stack().db.pool, LEASE_LIST_SQL, (n) => (n === 3 ? Promise.reject(new Error('the third batch fails')) : Promise.resolve()));
    const res = await fetch(`${stack().url}/v1/leases`, { headers: member });
    expect(res.status).toBe(200);
    await expect(res.text()).rejects.toThrow(); // the body broke off
    expect(queries.seen).toHaveLength(3);
    queries.restore();
    await eventually(() => Promise.resolve(poolAtRest(stack().db.pool) ? true : undefined), 10_000);
    expect((await asMember('GET', '/v1/leases')).body.leases).toHaveLength(LEASES);
  });

  it('still answers an ordinary error when reading fails before anything was sent', async () => {
    const unavailable = Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' });
    watchQueries(stack().db.pool, LEASE_LIST_SQL, () => Promise.reject(unavailable));
    const res = await asMember('GET', '/v1/leases');
    expect(res.status).toBe(503);
    expect(res.body).toEqual({ error_code: 503, error_message: 'the database is unavailable: try again shortly', error_name: 503 });
  });

  it('streams the host allocations grouped by host, as the per-host answers show them, with every host for an admin as Blazar lists them', async () => {
    const hosts: string[] = [];
    // Hosts with no booking before, between and after the booked ones; the last 1 000 in a row fill more than one part of the answer.
    const unbooked = async (prefix: string, count: number) => {
      for (let i = 0; i < count; i += 50) await Promise.all(Array.from({ length: Math.min(50, count - i) }, (_, j) => insertHost(stack().db.pool, { name: `${prefix}-${i + j}` })));
    };
    await unbooked('idle-before', 2);
    for (let h = 0; h < 3; h++) {
      hosts.push(await insertHost(stack().db.pool, { name: `stream-host-${h}` }));
      if (h === 0) await unbooked('idle-between', 2);
    }
    await unbooked('idle-after', 1_000);
    // 3 × 700 bookings: batches end in the middle of a host.
    await stack().db.pool.query(
      `INSERT INTO host_allocations (host_id, reservation_id, lease_id, project_id, during, blocks, booking_key)
       SELECT h, gen_random_uuid(), gen_random_uuid(), CASE WHEN g % 7 = 0 THEN 'project-a' ELSE 'project-b' END,
              tstzrange(t, t + interval '1 hour'), tstzrange(t, t + interval '1 hour'), 'test'
       FROM unnest($1::bigint[]) h, generate_series(0, 699) g, LATERAL (SELECT timestamptz '2099-01-01 00:00+00' + g * interval '1 hour' AS t) x`,
      [hosts],
    );
    const queries = watchQueries(stack().db.pool, ALLOCATION_LIST_SQL);
    const res = await fetch(`${stack().url}/v1/os-hosts/allocations`, { headers: admin });
    expect(res.headers.get('transfer-encoding')).toBe('chunked');
    const { allocations } = (await res.json()) as { allocations: Array<{ resource_id: string; reservations: unknown[] }> };
    expect(queries.seen.length).toBeGreaterThanOrEqual(3);
    queries.restore();
    const perHost = new Map(await Promise.all(hosts.map(async (id) => [id, (await asAdmin('GET', `/v1/os-hosts/${id}/allocation`)).body.allocation] as const)));
    const everyHost: Array<{ id: string; hypervisor_hostname: string }> = (await asAdmin('GET', '/v1/os-hosts')).body.hosts;
    expect(everyHost).toHaveLength(1_007);
    const unfiltered = everyHost.map((h) => perHost.get(h.id) ?? { resource_id: h.id, hypervisor_hostname: h.hypervisor_hostname, reservations: [] });
    expect(allocations).toEqual(unfiltered);
    expect(allocations.filter((a) => hosts.includes(a.resource_id)).map((a) => a.reservations.length)).toEqual([700, 700, 700]);
    // Unknown parameters are ignored, as Blazar does.
    expect((await asAdmin('GET', '/v1/os-hosts/allocations?detail=true&x=y')).body).toEqual({ allocations: unfiltered });

    // Filtered by lease or reservation: still every host, as Blazar's; only the matching booking is shown.
    const one = perHost.get(hosts[1]).reservations[350];
    const onlyThatBooking = everyHost.map((h) => ({ resource_id: h.id, hypervisor_hostname: h.hypervisor_hostname, reservations: h.id === hosts[1] ? [one] : [] }));
    expect((await asAdmin('GET', `/v1/os-hosts/allocations?lease_id=${one.lease_id}`)).body).toEqual({ allocations: onlyThatBooking });
    expect((await asAdmin('GET', `/v1/os-hosts/allocations?reservation_id=${one.id}`)).body).toEqual({ allocations: onlyThatBooking });
    expect((await asAdmin('GET', `/v1/os-hosts/allocations?lease_id=${randomUUID()}`)).body).toEqual({ allocations: onlyThatBooking.map((a) => ({ ...a, reservations: [] })) });

    // A member sees its own project's bookings only, and only the hosts holding them; none at all is an empty list.
    const own = (await asMember('GET', '/v1/os-hosts/allocations')).body.allocations;
    expect(own.map((a: { resource_id: string; reservations: unknown[] }) => [a.resource_id, a.reservations.length])).toEqual(hosts.map((id) => [id, 100]));
    expect((await apiClient(stack().url, { 'x-project-id': 'project-c' })('GET', '/v1/os-hosts/allocations')).body).toEqual({ allocations: [] });
  });
});
