/**
 * Unit tests of the FaultProxy test helper (test/support/fault-proxy.ts) against a tiny echo
 * server on loopback that stands in for Nova under a /compute path prefix.
 */
import http from 'node:http';
import type net from 'node:net';
import { FaultProxy, type ProxiedRequest } from './support/fault-proxy';
import { json } from '../dev-stack/http';
import { freePort } from '../dev-stack/ports';

const TEST_TIMEOUT_MS = 10_000;

/** Echoes method, path, body and host header as JSON, only under /compute (like Nova behind a prefix). */
interface EchoServer {
  url: string;
  hits: () => number;
  close: () => Promise<void>;
}

async function startEchoServer(): Promise<EchoServer> {
  let hits = 0;
  const server = http.createServer((req, res) => {
    hits += 1;
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const path = req.url ?? '/';
      const status = !path.startsWith('/compute/') ? 404 : req.method === 'POST' ? 202 : 200;
      const payload = JSON.stringify({
        method: req.method,
        path,
        body: Buffer.concat(chunks).toString('utf8'),
        host: req.headers.host,
      });
      res.writeHead(status, { 'content-type': 'application/json', 'x-upstream': 'echo' });
      res.end(payload);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/compute`,
    hits: () => hits,
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}

describe('FaultProxy', () => {
  let upstream: EchoServer;
  let proxy: FaultProxy;

  beforeEach(async () => {
    upstream = await startEchoServer();
    proxy = await FaultProxy.start(upstream.url);
  });

  afterEach(async () => {
    await proxy.stop();
    await upstream.close();
  });

  function postAction(path: string, body: unknown, init: RequestInit = {}): Promise<Response> {
    return fetch(`${proxy.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      ...init,
    });
  }

  it('forwards status, headers, body and the path prefix unchanged', async () => {
    expect(proxy.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/compute$/);

    const res = await postAction('/v2.1/servers?limit=1', { server: { name: 'vm-1' } });

    expect(res.status).toBe(202);
    expect(res.headers.get('x-upstream')).toBe('echo');
    expect(await json(res)).toEqual({
      method: 'POST',
      path: '/compute/v2.1/servers?limit=1',
      body: '{"server":{"name":"vm-1"}}',
      host: new URL(upstream.url).host,
    });
    expect(upstream.hits()).toBe(1);
    expect(proxy.requests).toEqual([
      expect.objectContaining({ method: 'POST', path: '/compute/v2.1/servers?limit=1', outcome: 'forwarded', status: 202 }),
    ]);
    expect(proxy.injected()).toBe(0);
  }, TEST_TIMEOUT_MS);

  it('passes upstream error statuses through untouched', async () => {
    const missing = await fetch(`${proxy.url.replace(/\/compute$/, '')}/elsewhere`);
    expect(missing.status).toBe(404);
    await missing.arrayBuffer();

    const ok = await fetch(`${proxy.url}/v2.1/flavors`);
    expect(ok.status).toBe(200);
    expect((await json(ok)).path).toBe('/compute/v2.1/flavors');
  }, TEST_TIMEOUT_MS);

  it('answers a status fault exactly `times` times without calling upstream, then forwards again', async () => {
    proxy.inject({ path: /\/os-aggregates\/\d+\/action$/, fault: { kind: 'status', status: 500 }, times: 2 });

    const statuses: number[] = [];
    const bodies: unknown[] = [];
    for (let i = 0; i < 3; i += 1) {
      const res = await postAction('/v2.1/os-aggregates/3/action', { add_host: { host: 'cmp-1' } });
      statuses.push(res.status);
      bodies.push(await json(res));
    }

    expect(statuses).toEqual([500, 500, 202]);
    expect(bodies[0]).toEqual({ computeFault: { code: 500, message: 'injected fault' } });
    expect(upstream.hits()).toBe(1);
    expect(proxy.injected()).toBe(2);
    expect(proxy.requests.map((r) => r.outcome)).toEqual(['status', 'status', 'forwarded']);
  }, TEST_TIMEOUT_MS);

  it('names 4xx faults the way Nova does', async () => {
    proxy.inject({ path: /\/servers\//, fault: { kind: 'status', status: 404 }, times: 1 });
    proxy.inject({ path: /\/servers\//, fault: { kind: 'status', status: 409 }, times: 1 });

    const notFound = await fetch(`${proxy.url}/v2.1/servers/abc`);
    const conflict = await fetch(`${proxy.url}/v2.1/servers/abc`);

    expect(notFound.status).toBe(404);
    expect(await json(notFound)).toEqual({ itemNotFound: { code: 404, message: 'injected fault' } });
    expect(conflict.status).toBe(409);
    expect(await json(conflict)).toEqual({ conflictingRequest: { code: 409, message: 'injected fault' } });
    expect(upstream.hits()).toBe(0);
  }, TEST_TIMEOUT_MS);

  it('applies a fault only to requests matching method, path and body', async () => {
    proxy.inject({
      method: 'post', // case-insensitive
      path: /\/os-aggregates\/\d+\/action$/,
      bodyIncludes: 'add_host',
      fault: { kind: 'status', status: 503 },
      times: Infinity,
    });

    const wrongMethod = await fetch(`${proxy.url}/v2.1/os-aggregates/3/action`);
    const wrongPath = await postAction('/v2.1/os-aggregates/3', { add_host: { host: 'cmp-1' } });
    const wrongBody = await postAction('/v2.1/os-aggregates/3/action', { remove_host: { host: 'cmp-1' } });
    const matching = await postAction('/v2.1/os-aggregates/3/action', { add_host: { host: 'cmp-1' } });
    const matchingAgain = await postAction('/v2.1/os-aggregates/4/action', { add_host: { host: 'cmp-2' } });

    expect([wrongMethod.status, wrongPath.status, wrongBody.status]).toEqual([200, 202, 202]);
    expect(matching.status).toBe(503);
    expect(await json(matching)).toEqual({ serviceUnavailable: { code: 503, message: 'injected fault' } });
    expect(matchingAgain.status).toBe(503);
    expect(upstream.hits()).toBe(3);
    expect(proxy.injected()).toBe(2);
  }, TEST_TIMEOUT_MS);

  it('uses rules in insertion order and stops faulting after clear()', async () => {
    proxy.inject({ path: /servers/, fault: { kind: 'status', status: 500 }, times: 1 });
    proxy.inject({ path: /servers/, fault: { kind: 'status', status: 502 }, times: Infinity });

    expect((await fetch(`${proxy.url}/v2.1/servers`)).status).toBe(500);
    expect((await fetch(`${proxy.url}/v2.1/servers`)).status).toBe(502);
    expect((await fetch(`${proxy.url}/v2.1/servers`)).status).toBe(502);
    proxy.clear();
    expect((await fetch(`${proxy.url}/v2.1/servers`)).status).toBe(200);
    expect(upstream.hits()).toBe(1);
  }, TEST_TIMEOUT_MS);

  it('rejects rules it could not apply sensibly', () => {
    expect(() => proxy.inject({ path: /x/, fault: { kind: 'status', status: 500 }, times: -1 })).toThrow(/times/);
    expect(() => proxy.inject({ path: /x/, fault: { kind: 'status', status: 42 }, times: 1 })).toThrow(/status/);
    expect(() => proxy.inject({ path: /x/, fault: { kind: 'delay', ms: NaN }, times: 1 })).toThrow(/delay/);
    expect(() => proxy.inject({ path: /x/, fault: { kind: 'status', status: 500 }, times: 1, fraction: 0 })).toThrow(/fraction/);
    expect(() => proxy.inject({ path: /x/, fault: { kind: 'status', status: 500 }, times: 1, fraction: 1.5 })).toThrow(/fraction/);
  }, TEST_TIMEOUT_MS);

  it('faults the given fraction of matching requests, evenly spread from the first, with a body of the test\'s choice', async () => {
    const placementConflict = { errors: [{ status: 409, title: 'Conflict', code: 'placement.concurrent_update', detail: 'consumer generation conflict' }] };
    const run = async () => {
      proxy.clear();
      proxy.inject({ path: /\/allocations\//, fault: { kind: 'status', status: 409, body: placementConflict }, times: Infinity, fraction: 0.3 });
      const statuses: number[] = [];
      for (let i = 0; i < 200; i += 1) {
        const res = await fetch(`${proxy.url}/allocations/c-${i}`);
        statuses.push(res.status);
        const body = await json(res);
        if (res.status === 409) expect(body).toEqual(placementConflict);
      }
      return statuses;
    };
    const first = await run();
    expect(first.filter((s) => s === 409)).toHaveLength(60); // 30 % of 200
    expect(first.slice(0, 10)).toEqual([409, 200, 200, 409, 200, 200, 409, 200, 200, 200]);
    expect(first.filter((s) => s !== 409).every((s) => s === 200)).toBe(true);
    expect(await run()).toEqual(first);
  }, TEST_TIMEOUT_MS);

  it('resets the connection for a reset fault, so fetch rejects', async () => {
    proxy.inject({ method: 'POST', path: /action$/, fault: { kind: 'reset' }, times: 1 });

    await expect(postAction('/v2.1/os-aggregates/3/action', { add_host: { host: 'cmp-1' } })).rejects.toThrow();

    expect(upstream.hits()).toBe(0);
    expect(proxy.requests.map((r) => r.outcome)).toEqual(['reset']);
    expect(proxy.injected()).toBe(1);
    // The next request goes through on a fresh connection.
    expect((await postAction('/v2.1/os-aggregates/3/action', { add_host: { host: 'cmp-1' } })).status).toBe(202);
  }, TEST_TIMEOUT_MS);

  it('hangs until the client gives up, and stop() still resolves promptly', async () => {
    proxy.inject({ path: /servers/, fault: { kind: 'hang' }, times: Infinity });

    const startedAt = performance.now();
    await expect(fetch(`${proxy.url}/v2.1/servers`, { signal: AbortSignal.timeout(300) })).rejects.toThrow();
    expect(performance.now() - startedAt).toBeGreaterThanOrEqual(250);
    const abandoned = proxy.requests[0];

    // A second client that would wait forever: only stop() ends it.
    const forever = fetch(`${proxy.url}/v2.1/servers`).then(
      () => 'answered',
      () => 'failed',
    );
    await proxy.waitForRequest((r) => r !== abandoned, 2_000);

    const stopStartedAt = performance.now();
    await proxy.stop();
    expect(performance.now() - stopStartedAt).toBeLessThan(1_000);
    expect(await forever).toBe('failed');
    expect(upstream.hits()).toBe(0);
    expect(proxy.injected()).toBe(2);
  }, TEST_TIMEOUT_MS);

  it('delays forwarding by at least the given time', async () => {
    const delayMs = 250;
    proxy.inject({ path: /flavors/, fault: { kind: 'delay', ms: delayMs }, times: 1 });

    const startedAt = performance.now();
    const delayed = await fetch(`${proxy.url}/v2.1/flavors`);
    const elapsed = performance.now() - startedAt;

    expect(delayed.status).toBe(200);
    expect((await json(delayed)).path).toBe('/compute/v2.1/flavors');
    // 1 ms slack: timers and performance.now() are rounded differently.
    expect(elapsed).toBeGreaterThanOrEqual(delayMs - 1);
    expect(upstream.hits()).toBe(1);
    expect(proxy.requests[0]).toEqual(expect.objectContaining({ outcome: 'delay', status: 200 }));
  }, TEST_TIMEOUT_MS);

  it('waitForRequest resolves for past and future requests and rejects on timeout', async () => {
    await (await fetch(`${proxy.url}/v2.1/flavors`)).arrayBuffer();
    const past = await proxy.waitForRequest((r) => r.path.endsWith('/flavors'), 1_000);
    expect(past.method).toBe('GET');

    const future = proxy.waitForRequest((r) => r.body.includes('remove_host'), 2_000);
    await (await postAction('/v2.1/os-aggregates/3/action', { remove_host: { host: 'cmp-1' } })).arrayBuffer();
    await expect(future).resolves.toEqual(expect.objectContaining({ method: 'POST', path: '/compute/v2.1/os-aggregates/3/action' }));

    const startedAt = performance.now();
    await expect(proxy.waitForRequest((r: ProxiedRequest) => r.method === 'DELETE', 150))
      .rejects.toThrow(/no matching request within 150 ms \(seen: GET \/compute\/v2\.1\/flavors -> forwarded 200;/);
    expect(performance.now() - startedAt).toBeLessThan(1_000);
  }, TEST_TIMEOUT_MS);

  it('rejects pending waiters when stopped', async () => {
    const waiting = proxy.waitForRequest(() => true, 5_000);
    await proxy.stop();
    await expect(waiting).rejects.toThrow(/stopped/);
  }, TEST_TIMEOUT_MS);

  it('answers 502 with a JSON body when the upstream is down', async () => {
    const deadProxy = await FaultProxy.start(`http://127.0.0.1:${await freePort()}/compute`);
    try {
      const res = await fetch(`${deadProxy.url}/v2.1/servers`);
      expect(res.status).toBe(502);
      expect(res.headers.get('content-type')).toBe('application/json');
      expect((await json(res)).badGateway).toEqual(expect.objectContaining({ code: 502, message: expect.stringContaining('ECONNREFUSED') }));
      expect(deadProxy.requests[0]).toEqual(expect.objectContaining({ outcome: 'forwarded', status: 502 }));
    } finally {
      await deadProxy.stop();
    }
  }, TEST_TIMEOUT_MS);
});
