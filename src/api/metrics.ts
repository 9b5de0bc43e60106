/**
 * Prometheus metrics of the API at `GET /metrics` (prom-client): the process (CPU, memory, event
 * loop lag), every request's duration by route and status, lease admissions by outcome, the
 * leases by status and the owed workflow starts (read from the database at each scrape), and how
 * soon admitted leases' workflows were started. The worker serves its own (event
 * lags, activities, OpenStack calls): worker/metrics.ts.
 */
import type { Request, RequestHandler, Response } from 'express';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { owedStartsCount } from '../db/lease-outbox';
import type { Pool } from '../db/pool';
import { LEASE_STATUSES } from '../domain/lease';

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

export function apiMetrics(deps: { pool: Pool }): ApiMetrics {
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
    help: 'Leases (not deleted) by status, read at each scrape',
    labelNames: ['status'] as const,
    registers: [registry],
    async collect() {
      const { rows } = await deps.pool.query<{ status: string; count: string }>('SELECT status, count(*)::text AS count FROM leases WHERE deleted_at IS NULL GROUP BY status');
      const counts = new Map(rows.map((r) => [r.status, Number(r.count)]));
      for (const status of LEASE_STATUSES) this.set({ status }, counts.get(status) ?? 0);
    },
  });
  new Gauge({
    name: 'leasekeeper_owed_workflow_starts',
    help: 'Leases the API admitted whose workflow has not been started yet (lease_outbox), read at each scrape',
    registers: [registry],
    async collect() {
      this.set(await owedStartsCount(deps.pool));
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
