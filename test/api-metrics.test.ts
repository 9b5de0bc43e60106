/**
 * GET /metrics: Prometheus' text format with the API's request durations by route, lease admissions
 * by outcome and the leases by status, scraped after real requests (a host lease admitted, one
 * refused for capacity, one invalid). The counts read from the database are read once per cache
 * period whatever the number of scrapes; LK_API_METRICS_TOKEN refuses scrapes without the token,
 * and LK_API_METRICS_PORT serves the metrics on their own address instead of the API's.
 */
import pino from 'pino';
import { apiMetrics, serveApiMetrics } from '../src/api/metrics';
import type { Pool } from '../src/db/pool';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { blazarHostReservation } from '../dev-stack/fixtures/builders';
import { dashboardProblems, dashboardQueries } from './support/dashboard';
import { withoutRequestId } from '../dev-stack/http';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { freePort } from '../dev-stack/ports';
import { apiClient, eventually, inSeconds, useTestStack } from '../dev-stack/stack';

const TOKEN = 'metrics-token-0123456789abcdef';
const LEASE_COUNTS = 'FROM leases WHERE deleted_at IS NULL GROUP BY status';
const OWED_STARTS = 'FROM lease_outbox WHERE started_at IS NULL';

/** Counts the pool's queries of the two counts /metrics reads from the database. */
function countCountQueries(pool: Pool) {
  const spy = jest.spyOn(pool, 'query');
  const count = (sql: string) => spy.mock.calls.filter(([query]) => (typeof query === 'string' ? query : (query as { text?: string }).text ?? '').includes(sql)).length;
  return { leases: () => count(LEASE_COUNTS), owedStarts: () => count(OWED_STARTS), restore: () => spy.mockRestore() };
}

async function scrapeAt(url: string, headers: Record<string, string> = {}) {
  const res = await fetch(url, { headers });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, body: res.status >= 400 && res.headers.get('x-openstack-request-id') ? withoutRequestId(res, JSON.parse(text)) : undefined };
}

/** The value of one sample (`name{labels} value`) in a scrape; undefined when absent. */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    const match = /^([a-z_:]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const have = (match[2] ?? '').split(',');
    if (wanted.every((w) => have.includes(w))) return Number(match[3]);
  }
  return undefined;
}

describe('GET /metrics', () => {
  // No cache: the leases by status are read right after the creates.
  const stack = useTestStack({ env: { LK_API_METRICS_CACHE_SECONDS: '0' }, withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
  const api = apiClient(() => stack().url);
  const scrape = async () => {
    const res = await fetch(`${stack().url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    return res.text();
  };

  it('counts admissions by outcome, times requests by route, and counts leases by status', async () => {
    await insertHost(stack().db.pool, { name: 'metrics-host' });
    const before = await scrape();
    expect(sample(before, 'leasekeeper_lease_admissions_total', { outcome: 'admitted' })).toBe(0);
    const lease = { start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [blazarHostReservation()] };
    expect((await api('POST', '/v1/leases', { name: 'metrics-1', ...lease })).status).toBe(201);
    expect((await api('POST', '/v1/leases', { name: 'metrics-2', ...lease })).status).toBe(409); // the only host is taken
    expect((await api('POST', '/v1/leases', { name: 'metrics-3', start_date: 'tomorrow' })).status).toBe(400);
    expect((await api('GET', '/v1/leases/00000000-0000-4000-8000-000000000000')).status).toBe(404);

    const after = await eventually(async () => {
      const text = await scrape();
      return sample(text, 'leasekeeper_lease_admissions_total', { outcome: 'refused_invalid' }) === 1 ? text : undefined;
    }, 5_000);
    expect(sample(after, 'leasekeeper_lease_admissions_total', { outcome: 'admitted' })).toBe(1);
    expect(sample(after, 'leasekeeper_lease_admissions_total', { outcome: 'refused_capacity' })).toBe(1);
    expect(sample(after, 'leasekeeper_lease_admissions_total', { outcome: 'failed' })).toBe(0);
    // Durations by declared route (a bounded label, whatever the path), method and status.
    expect(sample(after, 'leasekeeper_http_request_duration_seconds_count', { method: 'POST', route: '/v1/leases', status: '201' })).toBe(1);
    expect(sample(after, 'leasekeeper_http_request_duration_seconds_count', { method: 'GET', route: '/v1/leases/:id', status: '404' })).toBe(1);
    expect(after).not.toContain('00000000-0000-4000-8000-000000000000');
    // The leases by status, every status present.
    expect(sample(after, 'leasekeeper_leases', { status: 'PENDING' })).toBe(1);
    expect(sample(after, 'leasekeeper_leases', { status: 'ACTIVE' })).toBe(0);
    // The process itself.
    expect(sample(after, 'leasekeeper_api_process_cpu_seconds_total', {})).toBeGreaterThan(0);
    expect(after).toContain('leasekeeper_api_nodejs_eventloop_lag_seconds');

    // The Grafana dashboard's API row queries only what the API exposes, by labels it has; every panel sits under a row.
    const queries = dashboardQueries();
    expect([...new Set(queries.map((q) => q.row))]).toEqual([expect.stringMatching(/^API/), expect.stringMatching(/^Worker/)]);
    const apiRow = queries.filter((q) => q.row.startsWith('API'));
    expect(apiRow.length).toBeGreaterThanOrEqual(8);
    expect(dashboardProblems(apiRow, [after])).toEqual([]);
  });
});

describe('GET /metrics with a cache and a token', () => {
  const stack = useTestStack({ noWorker: true, env: { LK_API_METRICS_CACHE_SECONDS: '300', LK_API_METRICS_TOKEN: TOKEN } });
  const bearer = { authorization: `Bearer ${TOKEN}` };

  it('reads the database once per cache period: 20 concurrent scrapes and 10 more read each count once', async () => {
    const queries = countCountQueries(stack().db.pool);
    try {
      const concurrent = await Promise.all(Array.from({ length: 20 }, () => scrapeAt(`${stack().url}/metrics`, bearer)));
      for (const scrape of concurrent) {
        expect(scrape.status).toBe(200);
        expect(scrape.text).toContain('leasekeeper_leases{status="PENDING"} 0');
        expect(scrape.text).toContain('leasekeeper_owed_workflow_starts 0');
      }
      for (let i = 0; i < 10; i++) expect((await scrapeAt(`${stack().url}/metrics`, bearer)).status).toBe(200);
      expect({ leases: queries.leases(), owedStarts: queries.owedStarts() }).toEqual({ leases: 1, owedStarts: 1 });
    } finally {
      queries.restore();
    }
  });

  it('reads them again once the period is over (the cache\'s clock)', async () => {
    let clock = 1_000_000;
    const metrics = apiMetrics({ pool: stack().db.pool, cacheMs: 5_000, now: () => clock });
    const queries = countCountQueries(stack().db.pool);
    try {
      await Promise.all([metrics.registry.metrics(), metrics.registry.metrics()]);
      clock += 4_999;
      await metrics.registry.metrics();
      expect(queries.leases()).toBe(1);
      clock += 1;
      await metrics.registry.metrics();
      expect({ leases: queries.leases(), owedStarts: queries.owedStarts() }).toEqual({ leases: 2, owedStarts: 2 });
    } finally {
      queries.restore();
    }
  });

  it('refuses a scrape without the bearer token, with Blazar\'s error body', async () => {
    for (const headers of [{} as Record<string, string>, { authorization: `Bearer ${TOKEN.replace(/.$/, 'x')}` }, { authorization: `Basic ${Buffer.from(`x:${TOKEN}`).toString('base64')}` }]) {
      const refused = await scrapeAt(`${stack().url}/metrics`, headers);
      expect(refused.status).toBe(401);
      expect(refused.headers.get('www-authenticate')).toMatch(/^Bearer /);
      expect(refused.body).toEqual({ error_code: 401, error_message: 'The metrics need a bearer token: send Authorization: Bearer <LK_API_METRICS_TOKEN>', error_name: 401 });
      expect(refused.text).not.toContain('leasekeeper_');
    }
  });
});

describe('GET /metrics on its own address (LK_API_METRICS_PORT)', () => {
  let port: number;
  beforeAll(async () => {
    port = await freePort();
  });
  const stack = useTestStack(() => ({ noWorker: true, env: { LK_API_METRICS_PORT: String(port), LK_API_METRICS_TOKEN: TOKEN } }));

  it('is served there (with the token), and no longer on the API\'s address', async () => {
    const onApi = await scrapeAt(`${stack().url}/metrics`, { authorization: `Bearer ${TOKEN}` });
    expect(onApi.status).toBe(404);
    expect(onApi.text).not.toContain('leasekeeper_');

    const { config } = stack();
    const served = await serveApiMetrics(apiMetrics({ pool: stack().db.pool, cacheMs: config.api.metrics.cacheMs }), {
      ...config.api.metrics.listen!,
      token: config.api.metrics.token,
      limits: config.api.server,
      log: pino({ level: 'silent' }),
    });
    try {
      expect(served.port).toBe(port);
      const url = `http://127.0.0.1:${port}`;
      const scrape = await scrapeAt(`${url}/metrics`, { authorization: `Bearer ${TOKEN}` });
      expect(scrape.status).toBe(200);
      expect(scrape.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
      expect(scrape.text).toContain('leasekeeper_leases{status="ACTIVE"} 0');
      expect((await scrapeAt(`${url}/metrics`)).status).toBe(401);
      expect((await fetch(`${url}/v1/leases`)).status).toBe(404);
    } finally {
      await new Promise((resolve) => served.server.close(resolve));
    }
  });
});
