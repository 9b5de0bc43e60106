/**
 * The client of Blazar's ExternalServiceFilter protocol (src/policy/external-filter.ts) against a
 * policy service on loopback that records what it is sent: the paths, headers and bodies Blazar
 * sends, 204 as the only allow, 403's message passed through (bounded and cleaned), and what an
 * unreachable, hung or broken service does under fail open and fail closed.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Lease } from '../src/domain/lease';
import {
  ExternalServiceFilter,
  GENERIC_DENY_MESSAGE,
  PolicyDeniedError,
  UNAVAILABLE_MESSAGE,
  allocationsFromReservation,
  type ExternalFilterSettings,
} from '../src/policy/external-filter';
import { externalFilterSettingsFromEnv } from '../src/config';
import { pythonIsoformat } from '../src/domain/dates';

interface Recorded {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests assert on the loosely typed JSON body
  body: any;
}

type Handler = (req: http.IncomingMessage, res: http.ServerResponse) => void;

const answer =
  (status: number, body?: string): Handler =>
  (_req, res) => {
    res.writeHead(status, body === undefined ? {} : { 'Content-Type': 'application/json' });
    res.end(body);
  };

let server: http.Server;
let base: string;
let handler: Handler;
const requests: Recorded[] = [];

beforeAll(async () => {
  server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: text ? JSON.parse(text) : undefined });
      handler(req, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  // The hung requests' connections too, or close would wait for them.
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

beforeEach(() => {
  requests.length = 0;
  handler = answer(204);
});

const settings = (extra: Partial<ExternalFilterSettings> = {}): ExternalFilterSettings => ({ baseUrl: `${base}/svc/`, timeoutMs: 5_000, failOpen: false, ...extra });
const CONTEXT = { authUrl: 'https://keystone.example:5000/v3', regionName: 'RegionOne' };

const MAY_13 = Date.UTC(2026, 4, 13, 0, 0);
const MAY_14_END = Date.UTC(2026, 4, 14, 23, 59);
const CREATED = Date.UTC(2026, 4, 1, 10, 0, 5);

function hostLease(fields: Partial<Lease> = {}): Lease {
  const id = '6c0bd1a6-3c3e-4a5e-9d1e-3f3b0f6c2a10';
  return {
    id,
    name: 'gpu-week',
    projectId: 'a0b86a98-b0d3-43cb-948e-00689182efd4',
    userId: 'c631173e-dec0-4bb7-a0c3-f7711153c06c',
    startMs: MAY_13,
    endMs: MAY_14_END,
    status: 'PENDING',
    reservations: [
      {
        id: '9e4d7b1c-0f5e-4c57-8f43-2b7d0f3a9c01',
        resource_type: 'physical:host',
        status: 'pending',
        params: { min: 1, max: 2, hypervisor_properties: '', resource_properties: '["==", "$availability_zone", "az1"]', before_end: '', on_end: 'default' },
        allocation: { hosts: ['compute-1', 'compute-2'], host_ids: ['1', '2'], aggregate: 'lease-agg', availability_zone: 'blazar_x', on_end: 'delete' },
      },
    ],
    events: [
      { id: `${id}:start_lease`, event_type: 'start_lease', time: MAY_13, status: 'UNDONE' },
      { id: `${id}:end_lease`, event_type: 'end_lease', time: MAY_14_END, status: 'UNDONE' },
    ],
    createdMs: CREATED,
    updatedMs: CREATED,
    version: 1,
    ...fields,
  };
}

function instanceLease(fields: Partial<Lease> = {}): Lease {
  return hostLease({
    id: '0d7c3e55-62a8-4d0c-9a41-7b1a5c9e8f22',
    name: 'vm-slots',
    reservations: [
      {
        id: 'b1f0a2c3-4d5e-4f60-8a7b-9c0d1e2f3a4b',
        resource_type: 'virtual:instance',
        status: 'active',
        params: { vcpus: 2, memory_mb: 4096, disk_gb: 20, amount: 3, affinity: null, resource_properties: '', before_end: '' },
        allocation: { flavor_id: 'b1f0a2c3-4d5e-4f60-8a7b-9c0d1e2f3a4b', hosts: ['compute-1', 'compute-3'], slots_per_host: { 'compute-1': 2, 'compute-3': 1 } },
      },
    ],
    events: [],
    ...fields,
  });
}

/** The PolicyDeniedError `promise` is refused with; anything else fails the test. */
async function denial(promise: Promise<unknown>): Promise<PolicyDeniedError> {
  const outcome = await promise.then(
    (value) => ({ value }),
    (err: unknown) => ({ err }),
  );
  if (!('err' in outcome)) throw new Error(`expected a PolicyDeniedError, resolved with ${JSON.stringify(outcome.value)}`);
  if (!(outcome.err instanceof PolicyDeniedError)) throw outcome.err;
  return outcome.err;
}

describe('what the policy service is sent', () => {
  it('check-create: POST <base>check-create, JSON, the token, and Blazar’s context and lease with its reservations and allocations', async () => {
    const filter = new ExternalServiceFilter(settings({ token: 'svc-token-1' }));
    await expect(filter.checkCreate(CONTEXT, hostLease())).resolves.toEqual({ outcome: 'allowed' });
    expect(requests).toHaveLength(1);
    const [req] = requests;
    expect(req.method).toBe('POST');
    expect(req.url).toBe('/svc/check-create');
    expect(req.headers['content-type']).toBe('application/json');
    expect(req.headers['x-auth-token']).toBe('svc-token-1');
    expect(req.body).toEqual({
      context: {
        user_id: 'c631173e-dec0-4bb7-a0c3-f7711153c06c',
        project_id: 'a0b86a98-b0d3-43cb-948e-00689182efd4',
        auth_url: 'https://keystone.example:5000/v3',
        region_name: 'RegionOne',
      },
      lease: {
        id: '6c0bd1a6-3c3e-4a5e-9d1e-3f3b0f6c2a10',
        name: 'gpu-week',
        user_id: 'c631173e-dec0-4bb7-a0c3-f7711153c06c',
        project_id: 'a0b86a98-b0d3-43cb-948e-00689182efd4',
        start_date: '2026-05-13T00:00:00',
        end_date: '2026-05-14T23:59:00',
        status: 'CREATING',
        degraded: false,
        trust_id: null,
        created_at: '2026-05-01 10:00:05',
        updated_at: null,
        reservations: [
          {
            id: '9e4d7b1c-0f5e-4c57-8f43-2b7d0f3a9c01',
            lease_id: '6c0bd1a6-3c3e-4a5e-9d1e-3f3b0f6c2a10',
            resource_type: 'physical:host',
            status: 'pending',
            missing_resources: false,
            resources_changed: false,
            min: 1,
            max: 2,
            hypervisor_properties: '',
            resource_properties: '["==", "$availability_zone", "az1"]',
            before_end: '',
            on_end: 'default',
            allocations: [
              { id: '1', hypervisor_hostname: 'compute-1' },
              { id: '2', hypervisor_hostname: 'compute-2' },
            ],
          },
        ],
        events: [
          { lease_id: '6c0bd1a6-3c3e-4a5e-9d1e-3f3b0f6c2a10', event_type: 'start_lease', time: '2026-05-13T00:00:00', status: 'UNDONE' },
          { lease_id: '6c0bd1a6-3c3e-4a5e-9d1e-3f3b0f6c2a10', event_type: 'end_lease', time: '2026-05-14T23:59:00', status: 'UNDONE' },
        ],
      },
    });
  });

  it('check-update: current_lease as stored and lease as it becomes; the context is the current lease’s; no token header without a token', async () => {
    const current = hostLease();
    const next = hostLease({
      userId: 'someone-else',
      endMs: Date.UTC(2026, 4, 15, 12, 0),
      reservations: [{ ...current.reservations[0], params: { ...current.reservations[0].params, min: 2, max: 3 } }],
    });
    await expect(new ExternalServiceFilter(settings()).checkUpdate({}, current, next)).resolves.toEqual({ outcome: 'allowed' });
    const [req] = requests;
    expect(req.url).toBe('/svc/check-update');
    expect(req.method).toBe('POST');
    expect(req.headers['content-type']).toBe('application/json');
    expect(req.headers['x-auth-token']).toBeUndefined();
    expect(Object.keys(req.body)).toEqual(['context', 'current_lease', 'lease']);
    expect(req.body.context).toEqual({ user_id: current.userId, project_id: current.projectId, auth_url: null, region_name: null });
    expect(req.body.current_lease).toMatchObject({ status: 'PENDING', end_date: '2026-05-14T23:59:00', reservations: [{ min: 1, max: 2 }] });
    expect(req.body.lease).toMatchObject({ status: 'PENDING', end_date: '2026-05-15T12:00:00', reservations: [{ min: 2, max: 3, allocations: [{ hypervisor_hostname: 'compute-1' }, { hypervisor_hostname: 'compute-2' }] }] });
  });

  it('on-end: a virtual:instance lease, one host record per booked slot, its flavor values flat', async () => {
    const lease = instanceLease({ status: 'TERMINATING', version: 4, updatedMs: Date.UTC(2026, 4, 14, 23, 59, 0, 250) });
    await expect(new ExternalServiceFilter(settings({ token: 't' })).onEnd(CONTEXT, lease)).resolves.toEqual({ outcome: 'allowed' });
    const [req] = requests;
    expect(req.url).toBe('/svc/on-end');
    expect(req.headers['x-auth-token']).toBe('t');
    expect(Object.keys(req.body)).toEqual(['context', 'lease']);
    expect(req.body.lease).toMatchObject({ name: 'vm-slots', status: 'TERMINATING', start_date: '2026-05-13T00:00:00', updated_at: '2026-05-14 23:59:00.250000' });
    expect(req.body.lease.reservations).toEqual([
      {
        id: 'b1f0a2c3-4d5e-4f60-8a7b-9c0d1e2f3a4b',
        lease_id: '0d7c3e55-62a8-4d0c-9a41-7b1a5c9e8f22',
        resource_type: 'virtual:instance',
        status: 'active',
        missing_resources: false,
        resources_changed: false,
        vcpus: 2,
        memory_mb: 4096,
        disk_gb: 20,
        amount: 3,
        affinity: null,
        resource_properties: '',
        before_end: '',
        allocations: [{ hypervisor_hostname: 'compute-1' }, { hypervisor_hostname: 'compute-1' }, { hypervisor_hostname: 'compute-3' }],
      },
    ]);
  });

  it('takes the host records the caller gives (Blazar sends its whole host rows, extra capabilities flat)', async () => {
    const rows = [{ id: '1', hypervisor_hostname: 'compute-1', vcpus: 64, memory_mb: 524288, availability_zone: 'az1', gpu: 'a100' }];
    const filter = new ExternalServiceFilter(settings(), { allocationsOf: (r) => (r.resource_type === 'physical:host' ? rows : []) });
    await filter.checkCreate(CONTEXT, hostLease());
    expect(requests[0].body.lease.reservations[0].allocations).toEqual(rows);
  });

  it('joins the base as Python’s urljoin (no trailing slash: the last segment goes) and takes each override as is', async () => {
    await new ExternalServiceFilter(settings({ baseUrl: `${base}/svc` })).checkCreate(CONTEXT, hostLease());
    const custom = new ExternalServiceFilter(settings({ baseUrl: undefined, checkUpdateUrl: `${base}/custom/update?x=1`, onEndUrl: `${base}/ended` }));
    await custom.checkUpdate(CONTEXT, hostLease(), hostLease());
    await custom.onEnd(CONTEXT, hostLease());
    await expect(custom.checkCreate(CONTEXT, hostLease())).resolves.toEqual({ outcome: 'not-configured', reason: 'no check-create URL' });
    expect(requests.map((r) => r.url)).toEqual(['/check-create', '/custom/update?x=1', '/ended']);
  });

  it('formats dates as Python’s isoformat of a naive UTC datetime', () => {
    expect(pythonIsoformat(Date.UTC(2022, 8, 8, 13, 31, 44))).toBe('2022-09-08T13:31:44');
    expect(pythonIsoformat(Date.UTC(2022, 8, 8, 13, 31, 44, 12))).toBe('2022-09-08T13:31:44.012000');
    expect(pythonIsoformat(Date.UTC(2022, 8, 8, 13, 31, 44), ' ')).toBe('2022-09-08 13:31:44');
  });

  it('derives floating IP and single-host allocations from what was booked', () => {
    expect(
      allocationsFromReservation({
        id: 'r',
        resource_type: 'virtual:floatingip',
        status: 'pending',
        params: { network_id: 'net-1', amount: 1 },
        allocation: { floatingip_ids: ['fip-1'], floating_ip_addresses: ['172.24.4.10'] },
      }),
    ).toEqual([{ id: 'fip-1', floating_ip_address: '172.24.4.10', floating_network_id: 'net-1' }]);
    expect(allocationsFromReservation({ id: 'r', resource_type: 'virtual:server', status: 'active', params: {}, allocation: { host: 'compute-2' } })).toEqual([{ hypervisor_hostname: 'compute-2' }]);
    expect(allocationsFromReservation({ id: 'r', resource_type: 'physical:host', status: 'pending', params: {} })).toEqual([]);
  });
});

describe('what the answers mean', () => {
  it('204 allows', async () => {
    handler = answer(204);
    await expect(new ExternalServiceFilter(settings()).checkCreate(CONTEXT, hostLease())).resolves.toEqual({ outcome: 'allowed' });
  });

  it('200 does not allow (Blazar allows on 204 only): fail closed refuses, fail open lets it through and says why', async () => {
    handler = answer(200, '{}');
    const err = await denial(new ExternalServiceFilter(settings()).checkCreate(CONTEXT, hostLease()));
    expect(err.kind).toBe('unavailable');
    expect(err.message).toBe(UNAVAILABLE_MESSAGE);
    await expect(new ExternalServiceFilter(settings({ failOpen: true })).checkCreate(CONTEXT, hostLease())).resolves.toEqual({
      outcome: 'failed-open',
      reason: 'HTTP 200 (only 204 and 403 are answers)',
    });
  });

  it('403 denies with the service’s message, unprefixed, even when failing open', async () => {
    handler = answer(403, JSON.stringify({ message: 'You shall not pass!' }));
    for (const failOpen of [false, true]) {
      const filter = new ExternalServiceFilter(settings({ failOpen }));
      const create = await denial(filter.checkCreate(CONTEXT, hostLease()));
      expect(create.message).toBe('You shall not pass!');
      expect(create.kind).toBe('denied');
      expect((await denial(filter.checkUpdate(CONTEXT, hostLease(), hostLease()))).message).toBe('You shall not pass!');
    }
  });

  it('403 without a message string denies with Blazar’s generic sentence', async () => {
    for (const body of ['{}', 'not json', '["message"]', '{"message": 42}', '{"message": ""}', undefined]) {
      handler = answer(403, body);
      const err = await denial(new ExternalServiceFilter(settings()).checkCreate(CONTEXT, hostLease()));
      expect(err.message).toBe(GENERIC_DENY_MESSAGE);
      expect(err.kind).toBe('denied');
    }
  });

  it('cleans control characters out of a deny message and cuts it to 1000 characters', async () => {
    handler = answer(403, JSON.stringify({ message: 'Out of credit.\r\n2026-01-01 INFO forged log line\u0000\u001b[31m\u2028' }));
    expect((await denial(new ExternalServiceFilter(settings()).checkCreate(CONTEXT, hostLease()))).message).toBe('Out of credit. 2026-01-01 INFO forged log line [31m');
    handler = answer(403, JSON.stringify({ message: 'z'.repeat(5_000) }));
    const err = await denial(new ExternalServiceFilter(settings()).checkCreate(CONTEXT, hostLease()));
    expect(err.message).toBe(`${'z'.repeat(999)}…`);
  });

  it('reads at most 64 KiB of a 10 MB deny body and still passes the start of its message', async () => {
    handler = answer(403, JSON.stringify({ message: `No credit left ${'y'.repeat(10 * 1024 * 1024)}` }));
    const err = await denial(new ExternalServiceFilter(settings()).checkCreate(CONTEXT, hostLease()));
    expect(err.kind).toBe('denied');
    expect(Array.from(err.message)).toHaveLength(1000);
    expect(err.message.slice(0, 18)).toBe('No credit left yyy');
  });

  it('stops reading a deny body that never ends once it has 64 KiB (it does not wait for the end)', async () => {
    handler = (_req, res) => {
      res.writeHead(403, { 'Content-Type': 'application/json' });
      res.write(`{"message": "${'w'.repeat(70 * 1024)}`); // and never ends
    };
    // A long client timeout: only the bound can end this before the test's own 10 s limit.
    const err = await denial(new ExternalServiceFilter(settings({ timeoutMs: 60_000 })).checkCreate(CONTEXT, hostLease()));
    expect(err.message).toBe(`${'w'.repeat(999)}…`);
  }, 10_000);

  it('a 403 whose body stalls still denies, with what came of the message', async () => {
    // The timeout must outlast the 403's head on a loaded machine (CI saw 100 ms pass before it
    // arrived: failed open, no denial); only the stalled body may run into it.
    const stallTimeoutMs = 2_000;
    handler = (_req, res) => {
      res.writeHead(403, { 'Content-Type': 'application/json' });
      res.write('{"message": "Quota exceeded for project');
    };
    const err = await denial(new ExternalServiceFilter(settings({ timeoutMs: stallTimeoutMs, failOpen: true })).checkCreate(CONTEXT, hostLease()));
    expect(err.kind).toBe('denied');
    expect(err.message).toBe('Quota exceeded for project');
    // Cut inside an escape: what came before it still counts.
    handler = (_req, res) => {
      res.writeHead(403, { 'Content-Type': 'application/json' });
      res.write('{"message": "Quota d\\u00e9pass\\u00');
    };
    expect((await denial(new ExternalServiceFilter(settings({ timeoutMs: stallTimeoutMs })).checkCreate(CONTEXT, hostLease()))).message).toBe('Quota dépass');
  }, 10_000);
});

describe('a service that cannot decide', () => {
  async function refusedPort(): Promise<number> {
    const probe = http.createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const { port } = probe.address() as AddressInfo;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    return port;
  }

  const cases: Array<[string, () => Partial<ExternalFilterSettings> | Promise<Partial<ExternalFilterSettings>>, RegExp]> = [
    [
      'never answers (timeout)',
      () => {
        handler = () => undefined;
        return { timeoutMs: 100 };
      },
      /^no answer within 100 ms$/,
    ],
    [
      'answers 500',
      () => {
        handler = answer(500, 'ALL_YOUR_BUGS_BELONG_TO_US');
        return {};
      },
      /^HTTP 500/,
    ],
    [
      'redirects (not followed: the token would go along)',
      () => {
        handler = (_req, res) => {
          res.writeHead(307, { Location: 'http://127.0.0.1:1/elsewhere' });
          res.end();
        };
        return {};
      },
      /^HTTP 307/,
    ],
    ['refuses the connection', async () => ({ baseUrl: `http://127.0.0.1:${await refusedPort()}/` }), /ECONNREFUSED/],
  ];

  it.each(cases)('%s: fail open resolves with failed-open and the reason', async (_name, arrange, reason) => {
    const extra = await arrange();
    const outcome = await new ExternalServiceFilter(settings({ ...extra, failOpen: true })).checkCreate(CONTEXT, hostLease());
    expect(outcome.outcome).toBe('failed-open');
    expect(outcome.reason).toMatch(reason);
  });

  it.each(cases)('%s: fail closed refuses, saying the service could not be reached', async (_name, arrange, reason) => {
    const extra = await arrange();
    const err = await denial(new ExternalServiceFilter(settings({ ...extra, failOpen: false })).checkUpdate(CONTEXT, hostLease(), hostLease()));
    expect(err.kind).toBe('unavailable');
    expect(err.message).toBe(UNAVAILABLE_MESSAGE);
    expect(err.message).toContain('could not be reached');
    expect(err.detail).toMatch(reason);
  });

  it.each(cases)('%s: on-end never throws, even failing closed', async (_name, arrange, reason) => {
    const extra = await arrange();
    const outcome = await new ExternalServiceFilter(settings({ ...extra, failOpen: false })).onEnd(CONTEXT, hostLease());
    expect(outcome.outcome).toBe('failed-open');
    expect(outcome.reason).toMatch(reason);
  });

  it('on-end returns a denial instead of throwing it', async () => {
    handler = answer(403, '{"message": "no refunds"}');
    await expect(new ExternalServiceFilter(settings()).onEnd(CONTEXT, hostLease())).resolves.toEqual({ outcome: 'failed-open', reason: 'denied: no refunds' });
  });

  it('refuses settings that name nothing to call, or a URL Blazar would refuse', () => {
    expect(() => new ExternalServiceFilter({ timeoutMs: 1000, failOpen: false })).toThrow('ExternalService has no endpoints set.');
    expect(() => new ExternalServiceFilter({ baseUrl: 'this_url_cOuLDnOtBeWoRsE', timeoutMs: 1000, failOpen: false })).toThrow('baseUrl: expected an http:// or https:// URL');
    expect(() => new ExternalServiceFilter({ onEndUrl: 'ftp://policy.example/on-end', timeoutMs: 1000, failOpen: false })).toThrow('onEndUrl: expected an http:// or https:// URL');
  });
});

describe('settings from the environment', () => {
  it('has none without a URL (an empty variable is unset), whatever else is set', () => {
    expect(externalFilterSettingsFromEnv({})).toBeUndefined();
    expect(externalFilterSettingsFromEnv({ LK_POLICY_EXTERNAL_URL: '', LK_POLICY_EXTERNAL_TOKEN: 'abc', LK_POLICY_EXTERNAL_FAIL: 'open' })).toBeUndefined();
  });

  it('reads every variable, with a 5000 ms timeout and fail closed by default', () => {
    expect(externalFilterSettingsFromEnv({ LK_POLICY_EXTERNAL_URL: 'https://credits.example/blazar/' })).toEqual({
      baseUrl: 'https://credits.example/blazar/',
      timeoutMs: 5000,
      failOpen: false,
    });
    expect(
      externalFilterSettingsFromEnv({
        LK_POLICY_EXTERNAL_CHECK_CREATE_URL: 'http://10.0.0.5:8080/create',
        LK_POLICY_EXTERNAL_CHECK_UPDATE_URL: 'http://10.0.0.5:8080/update',
        LK_POLICY_EXTERNAL_ON_END_URL: 'http://10.0.0.5:8080/end',
        LK_POLICY_EXTERNAL_TOKEN: 'gAAAAA-token_1',
        LK_POLICY_EXTERNAL_TIMEOUT_MS: '250',
        LK_POLICY_EXTERNAL_FAIL: 'open',
      }),
    ).toEqual({
      checkCreateUrl: 'http://10.0.0.5:8080/create',
      checkUpdateUrl: 'http://10.0.0.5:8080/update',
      onEndUrl: 'http://10.0.0.5:8080/end',
      token: 'gAAAAA-token_1',
      timeoutMs: 250,
      failOpen: true,
    });
    expect(externalFilterSettingsFromEnv({ LK_POLICY_EXTERNAL_URL: 'http://p/', LK_POLICY_EXTERNAL_TIMEOUT_MS: '100' })?.timeoutMs).toBe(100);
    expect(externalFilterSettingsFromEnv({ LK_POLICY_EXTERNAL_URL: 'http://p/', LK_POLICY_EXTERNAL_TIMEOUT_MS: '60000', LK_POLICY_EXTERNAL_FAIL: 'closed' })).toMatchObject({ timeoutMs: 60000, failOpen: false });
  });

  it.each([
    [{ LK_POLICY_EXTERNAL_URL: 'ftp://credits.example/' }, 'invalid configuration: LK_POLICY_EXTERNAL_URL="ftp://credits.example/": expected an http:// or https:// URL'],
    [{ LK_POLICY_EXTERNAL_URL: 'credits.example' }, 'invalid configuration: LK_POLICY_EXTERNAL_URL="credits.example": expected an http:// or https:// URL'],
    [{ LK_POLICY_EXTERNAL_ON_END_URL: 'http://user:hunter2@credits.example/' }, 'invalid configuration: LK_POLICY_EXTERNAL_ON_END_URL="http://user:***@credits.example/": expected no credentials in the URL'],
    [{ LK_POLICY_EXTERNAL_URL: 'http://p/', LK_POLICY_EXTERNAL_TIMEOUT_MS: '99' }, 'invalid configuration: LK_POLICY_EXTERNAL_TIMEOUT_MS="99": must be at least 100'],
    [{ LK_POLICY_EXTERNAL_URL: 'http://p/', LK_POLICY_EXTERNAL_TIMEOUT_MS: '60001' }, 'invalid configuration: LK_POLICY_EXTERNAL_TIMEOUT_MS="60001": must be at most 60000'],
    [{ LK_POLICY_EXTERNAL_URL: 'http://p/', LK_POLICY_EXTERNAL_TIMEOUT_MS: '5s' }, 'invalid configuration: LK_POLICY_EXTERNAL_TIMEOUT_MS="5s": expected a whole number of milliseconds'],
    [{ LK_POLICY_EXTERNAL_URL: 'http://p/', LK_POLICY_EXTERNAL_FAIL: 'maybe' }, 'invalid configuration: LK_POLICY_EXTERNAL_FAIL="maybe": expected "open" or "closed"'],
    [{ LK_POLICY_EXTERNAL_URL: 'http://p/', LK_POLICY_EXTERNAL_TOKEN: 'secret with\r\nX-Injected: 1' }, 'invalid configuration: LK_POLICY_EXTERNAL_TOKEN="***": expected printable ASCII'],
  ])('refuses %j in one line naming the variable', (env, expected) => {
    let message = '';
    try {
      externalFilterSettingsFromEnv(env);
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message.slice(0, expected.length)).toBe(expected);
    expect(message).not.toMatch(/[\r\n]/);
    expect(message).not.toContain('hunter2');
    expect(message).not.toContain('secret');
  });
});
