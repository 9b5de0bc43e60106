/**
 * The worker process's Prometheus metrics (LK_WORKER_METRICS_PORT), scraped as Prometheus would:
 * how late each lease event began, activities by outcome and their failures by type, OpenStack
 * calls by service and status, and the Temporal SDK's own metrics on the next port.
 */
import type { ManagedProcess } from '../dev-stack/processes';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { blazarHostReservation } from '../dev-stack/fixtures/builders';
import { dashboardProblems, dashboardQueries } from './support/dashboard';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { freePortPair } from '../dev-stack/ports';
import { apiClient, eventually, inSeconds, useTestStack } from '../dev-stack/stack';
import { startWorkerProcess } from '../dev-stack/worker-process';

/** Sample values by series (`name{labels}`) from a Prometheus text answer. */
function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][\w:]*(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (match) out.set(match[1], Number(match[2]));
  }
  return out;
}

describe('worker metrics', () => {
  let worker: ManagedProcess | undefined;
  let port: number;
  // The API here knows physical:host for its parameters; the worker process books and starts it.
  const stack = useTestStack({ noWorker: true, withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] }, { beforeStop: async () => worker?.stop() });

  beforeAll(async () => {
    port = await freePortPair();
    // A cloud that refuses every connection: the host lease's start fails, and that is measured too.
    worker = await startWorkerProcess(stack(), {
      LK_WORKER_METRICS_PORT: String(port),
      OS_AUTH_URL: 'http://127.0.0.1:9/v3', OS_USERNAME: 'u', OS_PASSWORD: 'p', OS_PROJECT_NAME: 'p', OS_USER_DOMAIN_NAME: 'Default', OS_PROJECT_DOMAIN_NAME: 'Default',
    });
    await insertHost(stack().db.pool, { name: 'measured-host' });
  });

  const scrapeText = async (at: number) => {
    const res = await fetch(`http://127.0.0.1:${at}/metrics`);
    expect(res.status).toBe(200);
    return res.text();
  };
  const scrape = async (at: number) => samples(await scrapeText(at));

  it('counts event lags, activities, failures by type and OpenStack calls; the SDK serves its own', async () => {
    const api = apiClient(stack().url);
    const before = await scrape(port);
    expect(before.get('leasekeeper_lease_event_lag_seconds_count{event="start_lease"}') ?? 0).toBe(0);

    const plain = (await api('POST', '/v1/leases', { name: 'measured', start_date: inSeconds(2), end_date: inSeconds(6) })).body.lease;
    const host = await api('POST', '/v1/leases', { name: 'measured-host', start_date: inSeconds(2), end_date: inSeconds(600), reservations: [blazarHostReservation({ min: '1', max: '1' })] });
    expect(host.status).toBe(201);
    await eventually(async () => ((await api('GET', `/v1/leases/${plain.id}`)).body.lease.status === 'TERMINATED' ? true : undefined), 30_000, 250);

    const after = await eventually(async () => {
      const now = await scrape(port);
      // The host lease's start has failed at least once against the refusing cloud.
      return [...now.keys()].some((key) => key.startsWith('leasekeeper_activity_failures_total{')) ? now : undefined;
    }, 30_000, 500);
    // Each event of the plain lease once; the host lease's start once (its end is far off).
    expect(after.get('leasekeeper_lease_event_lag_seconds_count{event="start_lease"}')).toBe(2);
    expect(after.get('leasekeeper_lease_event_lag_seconds_count{event="before_end_lease"}')).toBe(1);
    expect(after.get('leasekeeper_lease_event_lag_seconds_count{event="end_lease"}')).toBe(1);
    expect(after.get('leasekeeper_activity_duration_seconds_count{activity="recordLease",outcome="ok"}')).toBeGreaterThanOrEqual(4);
    // The start's attempts failed on the refused connection, each counted by its error type; so did the calls to Keystone.
    expect(after.get('leasekeeper_activity_failures_total{activity="startReservation",error_type="ConnectionError"}')).toBeGreaterThanOrEqual(1);
    expect(after.get('leasekeeper_activity_duration_seconds_count{activity="startReservation",outcome="failed"}')).toBeGreaterThanOrEqual(1);
    expect(after.get('leasekeeper_openstack_request_duration_seconds_count{service="identity",method="POST",status="error"}')).toBeGreaterThanOrEqual(1);
    expect(after.get('leasekeeper_worker_process_cpu_seconds_total')).toBeGreaterThan(0);

    const sdkText = await scrapeText(port + 1);
    expect([...samples(sdkText).keys()].some((key) => key.startsWith('temporal_'))).toBe(true);

    // The Grafana dashboard's worker row queries only what the worker and its SDK expose, by labels they have.
    const workerRow = dashboardQueries().filter((q) => q.row.startsWith('Worker'));
    expect(workerRow.length).toBeGreaterThanOrEqual(8);
    expect(dashboardProblems(workerRow, [await scrapeText(port), sdkText])).toEqual([]);
  }, 90_000);

  it('refuses to start, saying why, when its metrics port is taken', async () => {
    await expect(startWorkerProcess(stack(), { LK_WORKER_METRICS_PORT: String(port) })).rejects.toThrow(/cannot serve metrics on 127\.0\.0\.1:\d+ \(LK_WORKER_METRICS_PORT\): listen EADDRINUSE/);
  });
});
