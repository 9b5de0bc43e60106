/**
 * Prometheus metrics of the API at `GET /metrics` (prom-client): the process (CPU, memory, event
 * loop lag), every request's duration by route and status, lease admissions by outcome, the
 * leases by status and the owed workflow starts (read from the database at most once per
 * LK_API_METRICS_CACHE_SECONDS, whatever the number of scrapes), hosts powered off and host-hours
 * off (issue 48), and how soon admitted leases'
 * workflows were started. Served on the API's address, or on their own (LK_API_METRICS_PORT), and
 * with LK_API_METRICS_TOKEN only to its bearer: the counts tell every project's activity. The
 * worker serves its own (event lags, activities, OpenStack calls): worker/metrics.ts.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type Request, type RequestHandler, type Response } from 'express';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { poweredOffTotals } from '../db/host-power';
import { owedStartsCount } from '../db/lease-outbox';
import { leaseCountsByStatus } from '../db/leases';
import type { Pool } from '../db/pool';
import { LEASE_STATUSES } from '../domain/lease';
import type { Logger } from '../log';
import { ApiError, errorHandler, notFoundRoute } from './errors';
import { sharedCheck } from './health';
import { createApiServer, type ServerLimits } from './server';

/** What a create's answer says about the admission, by its status. */
function admissionOutcome(status: number): string {
  if (status === 201 || status === 200) return 'admitted';
  if (status === 409) return 'refused_capacity';
  if (status === 403) return 'refused_policy';
  if (status >= 400 && status < 500) return 'refused_invalid';
  return 'failed';
}

/** Where the app mounts its routers: a route's label starts with its mount point. */
const MOUNTS = ['/v1', '/calendar'];

/**
 * The route that answered, as declared ("/v1/leases/:id"): a bounded label, whatever the path. A
 * route that passed an error on has left its router by the time the answer is sent (`baseUrl` is
 * back to ''): its mount point is then read from the path.
 */
function routeOf(req: Request): string {
  const path = (req.route as { path?: unknown } | undefined)?.path;
  if (typeof path !== 'string') return 'unmatched';
  const pathname = req.originalUrl.split('?')[0];
  const mount = req.baseUrl || (MOUNTS.find((m) => pathname.startsWith(`${m}/`) && !path.startsWith(`${m}/`)) ?? '');
  return `${mount}${path}`;
}

export interface ApiMetrics {
  registry: Registry;
  /** Times every request and counts lease admissions: the first middleware. */
  measure: RequestHandler;
  /** GET /metrics */
  scrape: (req: Request, res: Response) => Promise<void>;
  /** An admitted lease's workflow was started, this long after the admission's commit; or its start failed. */
  workflowStarted: (lagMs: number) => void;
  workflowStartFailed: () => void;
}

export interface ApiMetricsDeps {
  pool: Pool;
  /** How long the counts read from the database serve scrapes; concurrent scrapes share one read whatever this is. */
  cacheMs: number;
  /** The clock of the cache (ms), for tests. */
  now?: () => number;
}

export function apiMetrics(deps: ApiMetricsDeps): ApiMetrics {
  const readCounts = sharedCheck(
    async () => {
      const [byStatus, owedStarts, power] = await Promise.all([leaseCountsByStatus(deps.pool), owedStartsCount(deps.pool), poweredOffTotals(deps.pool, Date.now())]);
      return { byStatus, owedStarts, power };
    },
    deps.cacheMs,
    deps.now,
  );
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'leasekeeper_api_' });
  const duration = new Histogram({
    name: 'leasekeeper_http_request_duration_seconds',
    help: 'API requests by method, route and status: how long the answer took',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });
  const admissions = new Counter({
    name: 'leasekeeper_lease_admissions_total',
    help: 'Lease creates by outcome: admitted, refused_capacity (409), refused_policy (403), refused_invalid (other 4xx), failed (5xx)',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  new Gauge({
    name: 'leasekeeper_leases',
    help: 'Leases (not deleted) by status, read at most every LK_API_METRICS_CACHE_SECONDS',
    labelNames: ['status'] as const,
    registers: [registry],
    async collect() {
      const { byStatus } = await readCounts();
      for (const status of LEASE_STATUSES) this.set({ status }, byStatus.get(status) ?? 0);
    },
  });
  new Gauge({
    name: 'leasekeeper_owed_workflow_starts',
    help: 'Leases the API admitted whose workflow has not been started yet (lease_outbox), read at most every LK_API_METRICS_CACHE_SECONDS',
    registers: [registry],
    async collect() {
      this.set((await readCounts()).owedStarts);
    },
  });
  // Power management (issue 48): how much sleep the planner (or an admin by hand) gave the hosts.
  new Gauge({
    name: 'leasekeeper_hosts_powered_off',
    help: 'Hosts with a power driver that are powered off now, read at most every LK_API_METRICS_CACHE_SECONDS',
    registers: [registry],
    async collect() {
      this.set((await readCounts()).power.hostsOff);
    },
  });
  new Counter({
    name: 'leasekeeper_host_powered_off_hours_total',
    help: 'Host-hours powered off, every enrolled host together (ended periods and the current ones), read at most every LK_API_METRICS_CACHE_SECONDS',
    registers: [registry],
    async collect() {
      // Read whole from the database (any API may scrape it): set as the running total.
      this.reset();
      this.inc((await readCounts()).power.offHours);
    },
  });
  const workflowStarts = new Histogram({
    name: 'leasekeeper_workflow_start_after_admission_seconds',
    help: 'Leases the API admitted: from the commit to their workflow started in Temporal',
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });
  const workflowStartFailures = new Counter({
    name: 'leasekeeper_workflow_start_failures_total',
    help: 'Starts of admitted leases\' workflows that Temporal refused or did not answer (the sweeps try again)',
    registers: [registry],
  });
  for (const outcome of ['admitted', 'refused_capacity', 'refused_policy', 'refused_invalid', 'failed']) admissions.inc({ outcome }, 0);

  const measure: RequestHandler = (req, res, next) => {
    const end = duration.startTimer();
    res.on('finish', () => {
      const route = routeOf(req);
      end({ method: req.method, route, status: String(res.statusCode) });
      if (req.method === 'POST' && route === '/v1/leases') admissions.inc({ outcome: admissionOutcome(res.statusCode) });
    });
    next();
  };
  const scrape = async (_req: Request, res: Response) => {
    res.set('Content-Type', registry.contentType);
    res.send(await registry.metrics());
  };
  return {
    registry,
    measure,
    scrape,
    workflowStarted: (lagMs) => workflowStarts.observe(lagMs / 1000),
    workflowStartFailed: () => workflowStartFailures.inc(),
  };
}

/** With a token (LK_API_METRICS_TOKEN), only `Authorization: Bearer <token>` passes; compared in constant time. */
export function metricsGuard(token: string | undefined): RequestHandler {
  const digest = (text: string) => createHash('sha256').update(text).digest();
  const expected = token === undefined ? undefined : digest(token);
  return (req, res, next) => {
    if (expected === undefined) {
      next();
      return;
    }
    const presented = /^Bearer +(\S+)\s*$/i.exec(req.get('authorization') ?? '')?.[1];
    // Equal-length digests: the comparison takes as long whatever was presented.
    if (presented !== undefined && timingSafeEqual(digest(presented), expected)) {
      next();
      return;
    }
    res.set('WWW-Authenticate', 'Bearer realm="leasekeeper metrics"');
    next(new ApiError(401, 'The metrics need a bearer token: send Authorization: Bearer <LK_API_METRICS_TOKEN>'));
  };
}

/**
 * Serves the API's metrics at /metrics on their own address (LK_API_METRICS_PORT, as the worker's),
 * with the API's server limits and error bodies; resolves with the bound port.
 */
export function serveApiMetrics(metrics: ApiMetrics, settings: { host: string; port: number; token?: string; limits: ServerLimits; log: Logger }): Promise<{ server: Server; port: number }> {
  const app = express();
  app.disable('x-powered-by');
  app.get('/metrics', metricsGuard(settings.token), metrics.scrape);
  app.use(notFoundRoute);
  app.use(errorHandler(settings.log));
  const server = createApiServer(app, settings.limits);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(settings.port, settings.host, () => {
      server.off('error', reject);
      resolve({ server, port: (server.address() as AddressInfo).port });
    });
  });
}
