/**
 * REST fuzzing (fast-check) against the whole API with every resource type on the real rig:
 * thousands of random and malformed methods, paths, ids, headers, dates and bodies, as admins and
 * as projects. Every answer is a 2xx or a 4xx with Blazar's error body, never a 5xx; afterwards
 * every lease the fuzzing made can be deleted and is gone (none is stuck).
 */
import fc from 'fast-check';
import { bandwidthPlugin } from '../../src/resources/bandwidth';
import { physicalHostPlugin } from '../../src/resources/physical-host';
import { virtualServerPlugin } from '../../src/resources/virtual-server';
import { RecordingPlugin } from '../support/recording-plugin';
import { apiClient, deleteAllLeases, inSeconds, startTestStack, type TestStack } from '../support/stack';
import { rigClients, uniqueName } from './support';

const RUNS = Number(process.env.LK_FUZZ_RUNS ?? 1500);

const id = fc.oneof(
  fc.uuid(),
  fc.integer({ min: -5, max: 1e12 }).map(String),
  fc.constantFrom('', '..', '%00', 'null', 'undefined', '%E0%A4%A', '%2F..%2F', 'a'.repeat(300), 'properties', 'allocations'),
  fc.string({ maxLength: 40 }).map(encodeURIComponent),
);
const path = fc.oneof(
  fc.constantFrom('/', '/versions', '/v1', '/v1/', '/v1/leases', '/v1/os-hosts', '/v1/os-hosts/properties', '/v1/os-hosts/allocations', '/v1/availability', '/v1/availability/search', '/healthz'),
  id.map((x) => `/v1/leases/${x}`),
  id.map((x) => `/v1/os-hosts/${x}`),
  id.map((x) => `/v1/os-hosts/${x}/allocation`),
  id.map((x) => `/v1/os-hosts/properties/${x}`),
  fc.tuple(fc.constantFrom('/v1/leases', '/v1/os-hosts/allocations', '/v1/availability'), fc.dictionary(fc.constantFrom('project_id', 'lease_id', 'reservation_id', 'from', 'to', 'start', 'end', 'all', 'detail', 'limit', 'marker', 'status'), fc.string({ maxLength: 30 }))).map(
    ([base, query]) => `${base}?${new URLSearchParams(query).toString()}`,
  ),
);
const date = fc.oneof(
  fc.constantFrom('now', '', '2026-13-45 25:61', '0000-00-00 00:00', '9999-12-31 23:59', '2026-11-21T10:00:00Z', 'yesterday', '1e309'),
  fc.integer({ min: -3600, max: 400 * 86_400 }).map((s) => inSeconds(s)),
  fc.integer({ min: -3600, max: 86_400 }).map((s) => inSeconds(s).slice(0, 16)),
  fc.anything(),
);
const params = fc.dictionary(
  fc.constantFrom(
    'min', 'max', 'hypervisor_properties', 'resource_properties', 'before_end', 'on_end', 'recycle_grace_seconds', 'server_id', 'flavor_id', 'image_id', 'networks',
    'on_cancel', 'host_full', 'network_id', 'egress_kbps', 'ingress_kbps', 'amount', 'vnic_type', 'on_host_of', 'keys', 'hook_ms', 'id', 'unknown',
  ),
  fc.oneof(fc.integer({ min: -2, max: 5 }), fc.string({ maxLength: 20 }), fc.uuid(), fc.constantFrom('["=", "$vcpus", "8"]', '[">", "$memory_mb"]', 'default', 'delete', 'none'), fc.anything()),
);
const reservation = fc.tuple(fc.constantFrom('physical:host', 'virtual:server', 'network:bandwidth', 'test:recording', 'virtual:instance', '', 42), params).map(([type, p]) => ({ resource_type: type, ...p }));
const leaseBody = fc.record(
  {
    name: fc.oneof(fc.string({ maxLength: 80 }), fc.constant(uniqueName('fuzz')), fc.anything()),
    start_date: date,
    end_date: date,
    before_end_date: date,
    reservations: fc.oneof(fc.array(reservation, { maxLength: 3 }), fc.anything()),
    events: fc.anything(),
    project_id: fc.oneof(fc.uuid(), fc.string({ maxLength: 10 })),
    prolong_for: fc.constantFrom('1h', '2d', '-1m', 'x'),
  },
  { requiredKeys: [] },
);
const body = fc.oneof(
  leaseBody.map((b) => JSON.stringify(b)),
  fc.json(),
  fc.string({ maxLength: 200 }),
  fc.constantFrom('{', '{"name":', '[]', 'null', '"x"', '{"reservations": [{"resource_type": "physical:host", "min": 1e400}]}', '\u0000'),
  fc.record({ name: fc.string(), extra: fc.dictionary(fc.string({ maxLength: 10 }), fc.string({ maxLength: 10 })) }).map((b) => JSON.stringify(b)),
);
const identity = fc.oneof(
  fc.constant<Record<string, string>>({}),
  fc.record({ 'x-project-id': fc.constantFrom('fuzz-a', 'fuzz-b', ''), 'x-user-id': fc.constantFrom('u', ''), 'x-roles': fc.constantFrom('', 'member', 'admin', 'reader,member') }, { requiredKeys: [] }),
  fc.constant<Record<string, string>>({ 'x-auth-token': 'admin' }),
);
const request = fc.record({
  method: fc.constantFrom('GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'),
  path,
  body: fc.option(body, { nil: undefined }),
  contentType: fc.constantFrom('application/json', 'text/plain', 'application/x-www-form-urlencoded', ''),
  identity,
  idempotencyKey: fc.option(fc.oneof(fc.uuid(), fc.string({ maxLength: 300 })), { nil: undefined }),
});

/** Creates that are almost right, so that some leases exist (and must all end cleanly). */
const plausibleCreate = fc.record({
  method: fc.constant('POST'),
  path: fc.constant('/v1/leases'),
  body: fc
    .record({
      name: fc.uuid().map((u) => `fuzz-${u.slice(0, 8)}`),
      start_date: fc.oneof(fc.constant('now'), fc.integer({ min: -10, max: 3600 }).map((x) => inSeconds(x))),
      end_date: fc.integer({ min: 5, max: 7200 }).map((x) => inSeconds(x)),
      reservations: fc.array(
        fc.record({ resource_type: fc.constant('test:recording'), keys: fc.array(fc.constantFrom('k1', 'k2'), { maxLength: 2 }), hook_ms: fc.integer({ min: -1, max: 20 }) }, { requiredKeys: ['resource_type'] }),
        { maxLength: 2 },
      ),
    })
    .map((b) => JSON.stringify(b)),
  contentType: fc.constant('application/json'),
  identity,
  idempotencyKey: fc.option(fc.uuid(), { nil: undefined }),
});

describe('REST fuzzing: only 2xx or 4xx with the Blazar error body, never a stuck lease', () => {
  const admin = rigClients('leasekeeper-admin');
  let stack: TestStack;

  beforeAll(async () => {
    stack = await startTestStack({
      plugins: [new RecordingPlugin()],
      withPool: (pool) => [
        physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: () => admin, freepool: uniqueName('freepool') }),
        virtualServerPlugin({ pool, cloud: () => admin }),
        bandwidthPlugin({ pool, cloud: () => admin }),
      ],
      openstack: () => admin,
    });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it(`${RUNS} random requests`, async () => {
    const statuses = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(fc.oneof({ arbitrary: request, weight: 9 }, { arbitrary: plausibleCreate, weight: 1 }), async (r) => {
        const headers: Record<string, string> = { ...r.identity };
        if (r.contentType) headers['content-type'] = r.contentType;
        if (r.idempotencyKey !== undefined) headers['idempotency-key'] = r.idempotencyKey;
        const res = await fetch(`${stack.url}${r.path}`, {
          method: r.method,
          headers,
          body: r.body === undefined || r.method === 'GET' || r.method === 'HEAD' ? undefined : r.body,
        }).catch((err: unknown) => {
          // Header values fetch itself refuses (not sent at all) are not the API's answers.
          const why = err instanceof TypeError ? `${err.message} ${err.cause instanceof Error ? err.cause.message : ''}` : '';
          if (/header|ByteString/i.test(why)) return undefined;
          throw err;
        });
        if (!res) return;
        const text = await res.text();
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        expect(res.status).toBeLessThan(500);
        if (res.status >= 400 && r.method !== 'HEAD') {
          const error = JSON.parse(text) as { error_code: number; error_message: string; error_name: unknown };
          expect(error.error_code).toBe(res.status);
          expect(typeof error.error_message).toBe('string');
          expect(error.error_name).toBeDefined();
        }
      }),
      { numRuns: RUNS },
    );
    console.log(`statuses: ${JSON.stringify(Object.fromEntries([...statuses].sort((a, b) => a[0] - b[0])))}`);

    // Whatever the fuzzing admitted can be deleted, and goes.
    const asAdmin = apiClient(stack.url, { 'x-auth-token': 'admin' });
    const made = (await asAdmin('GET', '/v1/leases')).body.leases as Array<{ id: string; status: string }>;
    const since = Date.now();
    await deleteAllLeases(asAdmin);
    const left = (await asAdmin('GET', '/v1/leases')).body.leases as Array<{ id: string; status: string; status_reason?: string }>;
    console.log(`${made.length} leases made by the fuzzing, deleted in ${Date.now() - since} ms; left: ${JSON.stringify(left.map((l) => [l.id, l.status, l.status_reason]))}`);
    expect(left).toEqual([]);
  }, 600_000);
});
