/**
 * Hostile input (issue 15, items 2, 10 and 11): NUL bytes, control characters and lone surrogates
 * anywhere in a request, deep nesting, ids and ranges the database cannot take, identity headers
 * beyond any name's size, and compensations that fail. Every one is a 4xx (or a 503 naming a
 * missing dependency) with Blazar's error body, and no lease is ever wedged by one.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { ApiError } from '../src/api/errors';
import { changeLease, createLease } from '../src/api/lease-commands';
import { leaseConflict } from '../src/domain/lease';
import type { OpenStackClients } from '../src/openstack';
import { OpenStackConfigError } from '../src/openstack/errors';
import { sendRequest } from '../src/openstack/http';
import { physicalHostPlugin } from '../src/resources/physical-host';
import type { ResourcePlugin } from '../src/domain/resource-plugin';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { RecordingPlugin } from './support/recording-plugin';
import { apiClient, eventually, inSeconds, useTestStack, type ApiCall } from '../dev-stack/stack';
import { withoutRequestId } from '../dev-stack/http';

const HOSTILE = 'must not contain control characters or invalid Unicode';

/** Refuses every booking (409), and its cleanup fails for good: for compensations that fail. */
const brokenCleanupPlugin: ResourcePlugin = {
  resourceType: 'test:broken-cleanup',
  paramsSchema: z.strictObject({}),
  reserve: () => Promise.reject(leaseConflict('no test:broken-cleanup capacity for this window')),
  earliest: () => Promise.resolve({ longestMs: 0, cutShort: false, tried: 1 }),
  start: () => Promise.resolve(),
  end: () => Promise.reject(ApplicationFailure.nonRetryable('the cleanup cannot reach its cloud', 'CleanupBroken')),
};

/** A Nova that refuses every call with an error that names its internal addresses. */
const INTERNAL_NOVA_ERROR = {
  conflictingRequest: { code: 409, message: 'Cannot add host compute-1 to aggregate 7: see http://nova-internal.example:8774/v2.1/os-aggregates/7 (cell db 10.0.0.5:3306, api nova-api.internal:8774)' },
};
let cloudUrl = '';
const cloud = http.createServer((_req, res) => {
  res.writeHead(409, { 'content-type': 'application/json', 'x-openstack-request-id': 'req-0123' }).end(JSON.stringify(INTERNAL_NOVA_ERROR));
});

/** Books nothing; its start calls that Nova (as the host plugin moves hosts into an aggregate). */
const cloudFailurePlugin: ResourcePlugin = {
  ...brokenCleanupPlugin,
  resourceType: 'test:cloud-failure',
  reserve: () => Promise.resolve({ allocation: {}, resourceKeys: [] }),
  start: async () => {
    await sendRequest({ service: 'compute', method: 'POST', url: `${cloudUrl}/v2.1/os-aggregates/7/action`, body: { add_host: { host: 'compute-1' } } });
  },
  end: () => Promise.resolve({}),
};

/** Its start reports what PostgreSQL cannot store (a NUL in jsonb): every later transition's record is refused. */
const unstorableEnds: string[] = [];
const unstorableStartPlugin: ResourcePlugin = {
  ...brokenCleanupPlugin,
  resourceType: 'test:unstorable-start',
  reserve: () => Promise.resolve({ allocation: {}, resourceKeys: [] }),
  start: () => Promise.resolve({ allocation: { note: 'cannot be stored: \u0000' } }),
  end: (ctx) => {
    unstorableEnds.push(ctx.leaseId);
    return Promise.resolve({});
  },
};

describe('hostile input: a clear 4xx at the edge, never a wedged lease', () => {
  const plugin = new RecordingPlugin();

  beforeAll(async () => {
    await new Promise<void>((resolve) => cloud.listen(0, '127.0.0.1', resolve));
    cloudUrl = `http://127.0.0.1:${(cloud.address() as AddressInfo).port}`;
  });
  const stack = useTestStack({
    plugins: [plugin, brokenCleanupPlugin, cloudFailurePlugin, unstorableStartPlugin],
    // A deployment without OpenStack credentials: host leases cannot be carried out.
    withPool: (pool) => [
      physicalHostPlugin({
        pool,
        settings: { cleaningMs: 0, randomChoice: false },
        cloud: () => {
          throw new OpenStackConfigError('no OpenStack credentials: set OS_CLOUD (clouds.yaml) or OS_AUTH_URL');
        },
      }),
    ],
    // os-hosts routes need Nova only for what a bad id never reaches.
    openstack: () => ({}) as OpenStackClients,
  });
  const api = apiClient(() => stack().url);
  afterAll(async () => {
    await new Promise((resolve) => cloud.close(resolve));
  });

  /** A request with a raw JSON text body: `\u0000` and `\udc00` escapes arrive as JSON has them. */
  async function raw(method: string, path: string, body: string, headers: Record<string, string> = {}) {
    const res = await fetch(`${stack().url}${path}`, { method, headers: { 'content-type': 'application/json', ...headers }, body });
    const text = await res.text();
    return { status: res.status, body: withoutRequestId(res, text ? JSON.parse(text) : undefined) as ApiCall['body'] };
  }

  async function statusOf(id: string): Promise<string> {
    const res = await api('GET', `/v1/leases/${id}`);
    return res.status === 404 ? 'GONE' : (res.body.lease.status as string);
  }

  async function activeLease(name: string, endInSeconds: number): Promise<{ id: string; end_date: string }> {
    const created = await api('POST', '/v1/leases', { name, start_date: 'now', end_date: inSeconds(endInSeconds), reservations: [{ resource_type: 'test:recording', keys: [`${name}-key`] }] });
    expect(created.status).toBe(201);
    await eventually(async () => ((await statusOf(created.body.lease.id)) === 'ACTIVE' ? true : undefined), 15_000);
    return created.body.lease;
  }

  /** Ends on time (not stuck ACTIVE past its end), then deletes cleanly. */
  async function expectEndsAndDeletes(id: string): Promise<void> {
    await eventually(async () => ((await statusOf(id)) === 'TERMINATED' ? true : undefined), 40_000);
    expect(plugin.callsFor(id, 'end')).toHaveLength(1);
    expect((await api('DELETE', `/v1/leases/${id}`)).status).toBe(204);
    await eventually(async () => ((await statusOf(id)) === 'GONE' ? true : undefined), 15_000);
  }

  it('refuses a rename of an ACTIVE lease to a name with a NUL byte or a lone surrogate at once (400), and the lease ends on time and deletes cleanly', async () => {
    const lease = await activeLease('wedge-me', 12);
    for (const name of ['"z\\u0000"', '"\\udc00"', '"a\\ud800b"', '"tab\\there"', '"new\\nline"', '"\\u007f"', '"\\u0085"']) {
      const res = await raw('PUT', `/v1/leases/${lease.id}`, `{"name": ${name}}`);
      expect({ name, status: res.status, body: res.body }).toEqual({ name, status: 400, body: { error_code: 400, error_name: 400, error_message: `name: ${HOSTILE}` } });
    }
    // A well-formed pair (an emoji) is fine.
    expect((await api('PUT', `/v1/leases/${lease.id}`, { name: 'wedge-me-\u{1F600}' })).body.lease.name).toBe('wedge-me-\u{1F600}');
    await expectEndsAndDeletes(lease.id);
  }, 90_000);

  it('refuses the same names, and control characters in reservation parameters, at creation (400 naming the field)', async () => {
    const window = `"start_date": "${inSeconds(3600)}", "end_date": "${inSeconds(7200)}"`;
    expect((await raw('POST', '/v1/leases', `{"name": "z\\u0000", ${window}}`)).body).toEqual({ error_code: 400, error_name: 400, error_message: `name: ${HOSTILE}` });
    expect((await raw('POST', '/v1/leases', `{"name": "\\udc00", ${window}}`)).body.error_message).toBe(`name: ${HOSTILE}`);
    const inParams = await raw('POST', '/v1/leases', `{"name": "p", ${window}, "reservations": [{"resource_type": "test:recording", "keys": ["ok", "k\\u0001"]}]}`);
    expect(inParams).toEqual({ status: 400, body: { error_code: 400, error_name: 400, error_message: `reservations[0].keys[1]: ${HOSTILE}` } });
    const inQuery = await raw('POST', '/v1/availability/search', `{${window}, "reservations": [{"resource_type": "physical:host", "min": 1, "max": 1, "hypervisor_properties": "[\\"==\\", \\"$vcpus\\", \\"8\\u0000\\"]"}]}`);
    expect(inQuery.body.error_message).toBe(`reservations[0].hypervisor_properties: ${HOSTILE}`);
    const inKey = await raw('POST', '/v1/leases', `{"name": "p", ${window}, "reservations": [{"resource_type": "test:recording", "k\\u0000": 1}]}`);
    expect(inKey.body.error_message).toBe(`reservations[0]: field names ${HOSTILE}`);
    expect((await api('GET', '/v1/leases?name=p')).body.leases).toEqual([]);
  });

  it('refuses control characters in query parameters, path parameters and host capabilities (400 naming the field)', async () => {
    for (const [path, field] of [
      ['/v1/leases?name=%00', 'name'],
      ['/v1/leases?status=ACTIVE&project_id=a%1Fb', 'project_id'],
      ['/v1/os-hosts/allocations?lease_id=%0a', 'lease_id'],
      // Unknown parameters are ignored (as Blazar does), but their values are checked like any other.
      ['/v1/leases?detail=%00', 'detail'],
      ['/v1/os-hosts/allocations?x=%0a', 'x'],
      ['/v1/os-hosts?x=%7F', 'x'],
      [`/v1/availability?start=${encodeURIComponent(inSeconds(60))}&end=${encodeURIComponent(inSeconds(120))}&resource_properties=%00`, 'resource_properties'],
      ['/v1/os-hosts/properties?detail=%7F', 'detail'],
    ]) {
      const res = await api('GET', path);
      expect({ path, status: res.status, body: res.body }).toEqual({ path, status: 400, body: { error_code: 400, error_name: 400, error_message: `${field}: ${HOSTILE}` } });
    }
    const inPath = await api('PATCH', '/v1/os-hosts/properties/gpu%00x', { private: true });
    expect(inPath).toEqual({ status: 400, body: { error_code: 400, error_name: 400, error_message: `path: ${HOSTILE}` } });
    expect((await raw('POST', '/v1/os-hosts', '{"name": "compute-1", "gpu": "a100\\u0007"}')).body).toEqual({ error_code: 400, error_name: 400, error_message: `gpu: ${HOSTILE}` });
    expect((await raw('PUT', '/v1/os-hosts/1', '{"values": {"rack": "7\\n8"}}')).body).toEqual({ error_code: 400, error_name: 400, error_message: `values.rack: ${HOSTILE}` });
  });

  it('refuses deep nesting and huge strings in a body, and property queries nested 10 000 deep (400, no stack overflow)', async () => {
    const deep = `${'['.repeat(10_000)}${']'.repeat(10_000)}`;
    const nested = await raw('POST', '/v1/leases', `{"name": "deep", "start_date": "now", "end_date": "${inSeconds(60)}", "events": ${deep}}`);
    expect(nested).toEqual({ status: 400, body: { error_code: 400, error_name: 400, error_message: expect.stringMatching(/^events(\[0\])+: nested too deeply \(at most \d+ levels\)$/) } });
    const huge = await api('POST', '/v1/leases', { name: 'x'.repeat(70_000), start_date: 'now', end_date: inSeconds(60) });
    expect(huge).toEqual({ status: 400, body: { error_code: 400, error_name: 400, error_message: expect.stringMatching(/^name: must be at most \d+ characters$/) } });

    const chain = (op: 'not' | 'and', depth: number) => `${`["${op}", `.repeat(depth)}["==", "$vcpus", "8"]${']'.repeat(depth)}`;
    const window = { start_date: inSeconds(3600), end_date: inSeconds(7200) };
    const search = (query: unknown) => api('POST', '/v1/availability/search', { ...window, reservations: [hostReservation({ hypervisor_properties: query })] });
    const create = (query: unknown) => api('POST', '/v1/leases', { name: 'deep-query', ...window, reservations: [hostReservation({ resource_properties: query })] });
    // The deepest query allowed: 31 operators around a comparison (32 levels), as JSON text and as an array (no host: 409 or an empty answer).
    for (const query of [chain('not', 31), JSON.parse(chain('and', 31)) as unknown]) expect([200, 409]).toContain((await search(query)).status);
    for (const op of ['not', 'and'] as const) {
      for (const depth of [32, 1_000]) {
        for (const [what, send] of [['search', search], ['create', create]] as const) {
          const res = await send(chain(op, depth));
          expect({ op, depth, what, status: res.status, message: res.body.error_message }).toEqual({
            op, depth, what, status: 400, message: expect.stringMatching(/_properties: the query is nested too deeply \(at most 32 levels\)$/),
          });
        }
      }
      // 10 000 deep: as text beyond any string's length, as an array beyond the body's nesting.
      // (sent as JSON text: JSON.stringify itself overflows the stack on the array)
      for (const query of [JSON.stringify(chain(op, 10_000)), chain(op, 10_000)]) {
        for (const field of ['hypervisor_properties', 'resource_properties']) {
          const reservation = `{"resource_type": "physical:host", "min": 1, "max": 1, "${field}": ${query}}`;
          for (const path of ['/v1/availability/search', '/v1/leases']) {
            const res = await raw('POST', path, `{"name": "deep-query", "start_date": "${window.start_date}", "end_date": "${window.end_date}", "reservations": [${reservation}]}`);
            expect({ path, status: res.status, message: res.body.error_message }).toEqual({ path, status: 400, message: expect.stringMatching(/^reservations\[0\]\..*_properties.*: (must be at most \d+ characters|nested too deeply \(at most \d+ levels\))$/) });
          }
        }
      }
    }
    const availability = await api('GET', `/v1/availability?start=${encodeURIComponent(inSeconds(60))}&end=${encodeURIComponent(inSeconds(120))}&hypervisor_properties=${encodeURIComponent(chain('and', 100))}`);
    expect(availability.body.error_message).toBe('hypervisor_properties: the query is nested too deeply (at most 32 levels)');
  });

  it('answers 4xx, not 500, for an inverted date range and host ids beyond a bigint', async () => {
    const inverted = await api('GET', `/v1/leases?from=${encodeURIComponent('2030-01-01 00:00')}&to=${encodeURIComponent('2029-01-01 00:00')}`);
    expect(inverted).toEqual({ status: 400, body: { error_code: 400, error_name: 400, error_message: 'to: must not be earlier than from' } });
    const huge = '99999999999999999999999';
    for (const [method, path] of [['GET', `/v1/os-hosts/${huge}/allocation`], ['GET', `/v1/os-hosts/${huge}`], ['PUT', `/v1/os-hosts/${huge}`], ['DELETE', `/v1/os-hosts/${huge}`], ['GET', '/v1/os-hosts/9223372036854775808']]) {
      const res = await api(method, path, method === 'PUT' ? { rack: '7' } : undefined);
      expect({ method, path, status: res.status, code: res.body.error_code }).toEqual({ method, path, status: 404, code: 404 });
    }
  });

  it('refuses identity headers longer or stranger than a name (400), before anything reaches Temporal', async () => {
    const window = { start_date: inSeconds(3600), end_date: inSeconds(7200) };
    const long = await api('POST', '/v1/leases', { name: 'long-project', ...window }, { 'x-project-id': 'p'.repeat(8_000) });
    expect(long).toEqual({ status: 400, body: { error_code: 400, error_name: 400, error_message: 'X-Project-Id: expected at most 255 printable ASCII characters' } });
    const strange = await api('GET', '/v1/leases', undefined, { 'x-project-id': 'p', 'x-user-id': 'caf\u00e9' });
    expect(strange.body.error_message).toBe('X-User-Id: expected at most 255 printable ASCII characters');
    // All headers together beyond 16 KiB: refused by the HTTP server.
    const res = await fetch(`${stack().url}/v1/leases`, { headers: { 'x-padding': 'p'.repeat(17 * 1024) } });
    expect(res.status).toBe(431);
    expect(await res.json()).toEqual({ error_code: 431, error_name: 431, error_message: 'request headers too large: at most 16384 bytes in all' });
  });

  it('answers a request that Temporal refuses as too large with a 400 and no internals', async () => {
    // Past the API's checks (which would refuse it): a project id far beyond a search attribute's size.
    const commands = { client: stack().temporal.client, taskQueue: stack().config.temporal.taskQueue, timeoutMs: 20_000 };
    const id = randomUUID();
    const request = { id, name: 'too-large', projectId: 'p'.repeat(8_000), userId: 'u', start: Date.now() + 3_600_000, end: Date.now() + 7_200_000, reservations: [], requestedMs: Date.now() };
    const failure = await createLease(commands, request, 'hash', false).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(failure).toBeInstanceOf(ApiError);
    expect({ status: (failure as ApiError).status, message: (failure as ApiError).message }).toEqual({
      status: 400,
      message: 'the workflow service refused the request: it is too large or holds a value it does not accept',
    });
  });

  it('fails an update whose state PostgreSQL refuses (bypassing the API) with a 400 at once, leaves the lease as it was, and the lease ends on time', async () => {
    const lease = await activeLease('refused-by-postgres', 15);
    const commands = { client: stack().temporal.client, taskQueue: stack().config.temporal.taskQueue, timeoutMs: 20_000 };
    for (const name of ['z\u0000', '\udc00']) {
      const failure = await changeLease(commands, lease.id, { name }).then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(failure).toBeInstanceOf(ApiError);
      expect({ status: (failure as ApiError).status, message: (failure as ApiError).message }).toEqual({
        status: 400,
        message: expect.stringMatching(/^the database refused a value: a (text contains a character that cannot be stored|value has the wrong form)/),
      });
    }
    const now = (await api('GET', `/v1/leases/${lease.id}`)).body.lease;
    expect({ name: now.name, status: now.status }).toEqual({ name: 'refused-by-postgres', status: 'ACTIVE' });
    // Still changeable: the update's lock was given back.
    expect((await api('PUT', `/v1/leases/${lease.id}`, { name: 'renamed-after-refusal' })).body.lease.name).toBe('renamed-after-refusal');
    await expectEndsAndDeletes(lease.id);
  }, 90_000);

  it('keeps the original error when the admission\'s compensation fails too (409, not the cleanup\'s failure)', async () => {
    const res = await api('POST', '/v1/leases', { name: 'broken-cleanup', start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [{ resource_type: 'test:broken-cleanup' }] });
    expect(res).toEqual({ status: 409, body: { error_code: 409, error_name: 409, error_message: 'no test:broken-cleanup capacity for this window' } });
  });

  it('answers a host lease on a deployment without OpenStack credentials with a 503 naming what is missing', async () => {
    await insertHost(stack().db.pool, { name: 'compute-without-cloud' });
    const res = await api('POST', '/v1/leases', { name: 'host-without-cloud', start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [hostReservation()] });
    expect(res).toEqual({ status: 503, body: { error_code: 503, error_name: 503, error_message: 'OpenStack is not configured: no OpenStack credentials: set OS_CLOUD (clouds.yaml) or OS_AUTH_URL' } });
    expect((await api('GET', '/v1/leases?name=host-without-cloud')).body.leases).toEqual([]);
  });

  it('keeps internal addresses out of status_reason: the OpenStack error\'s class, status and reason only', async () => {
    const created = await api('POST', '/v1/leases', { name: 'cloud-refuses', start_date: 'now', end_date: inSeconds(600), reservations: [{ resource_type: 'test:cloud-failure' }] });
    expect(created.status).toBe(201);
    const failed = await eventually(async () => {
      const lease = (await api('GET', `/v1/leases/${created.body.lease.id}`)).body.lease;
      return lease.status === 'ERROR' ? lease : undefined;
    }, 20_000);
    expect(failed.status_reason).toBe('start failed: compute ConflictError (HTTP 409): Cannot add host compute-1 to aggregate 7: see <url> (cell db <host>, api <host>)');
    expect((await api('DELETE', `/v1/leases/${created.body.lease.id}`)).status).toBe(204);
  });

  it('carries a lease whose state the database refuses through its life: the end still frees its resources on time, and a delete removes it', async () => {
    const created = await api('POST', '/v1/leases', { name: 'unstorable', start_date: 'now', end_date: inSeconds(8), reservations: [{ resource_type: 'test:unstorable-start' }] });
    expect(created.status).toBe(201);
    const id = created.body.lease.id as string;
    await eventually(() => Promise.resolve(unstorableEnds.includes(id) ? true : undefined), 30_000);
    expect((await api('DELETE', `/v1/leases/${id}`)).status).toBe(204);
    await eventually(async () => ((await statusOf(id)) === 'GONE' ? true : undefined), 15_000);
  }, 60_000);
});
