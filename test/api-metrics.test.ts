/**
 * GET /metrics: Prometheus' text format with the API's request durations by route, lease admissions
 * by outcome and the leases by status, scraped after real requests (a host lease admitted, one
 * refused for capacity, one invalid).
 */
import { physicalHostPlugin } from '../src/resources/physical-host';
import { blazarHostReservation } from './support/builders';
import { dashboardProblems, dashboardQueries } from './support/dashboard';
import { insertHost } from './support/hosts';
import { apiClient, eventually, inSeconds, useTestStack } from './support/stack';

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
  const stack = useTestStack({ withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
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
