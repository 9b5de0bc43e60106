/**
 * Prometheus metrics of the worker process (prom-client), served at
 * `http://LK_WORKER_METRICS_HOST:LK_WORKER_METRICS_PORT/metrics` when the port is set: the process
 * (CPU, memory, event loop lag), how late each lease event began (start, before end, end), every
 * activity's duration by outcome and its failures by error type, and every OpenStack call's
 * duration by service, method and status. The Temporal SDK's own metrics (task slots, poll and
 * schedule-to-start latencies) are on the next port, from the SDK's runtime.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { ApplicationFailure } from '@temporalio/common';
import type { ActivityInterceptorsFactory } from '@temporalio/worker';
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { EventType } from '../src/domain/lease';
import type { RequestLogEvent } from '../src/openstack/http';

export interface WorkerMetrics {
  registry: Registry;
  /** A lease event began `lagMs` after it was due. */
  eventStarted: (eventType: EventType, lagMs: number) => void;
  /** An OpenStack call ended (the clients' request logger). */
  openstackRequest: (event: RequestLogEvent) => void;
  /** Times every activity and counts its failures by type. */
  activityInterceptor: ActivityInterceptorsFactory;
  /** A notice was given up on (refused, or still failing at the end of its retry span). */
  noticeDropped: (eventType: string, channel: 'webhook' | 'oslo') => void;
}

/** The failure's type as Temporal's retry policies see it: an ApplicationFailure's type, else the error's name. */
function errorType(err: unknown): string {
  if (err instanceof ApplicationFailure && err.type) return err.type;
  return err instanceof Error ? err.name : 'unknown';
}

export function workerMetrics(): WorkerMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'leasekeeper_worker_' });
  const eventLag = new Histogram({
    name: 'leasekeeper_lease_event_lag_seconds',
    help: 'How late lease events began: when the worker began the event minus when it was due (start_lease, before_end_lease, end_lease)',
    labelNames: ['event'] as const,
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300],
    registers: [registry],
  });
  const activityDuration = new Histogram({
    name: 'leasekeeper_activity_duration_seconds',
    help: 'Activity attempts by activity and outcome (ok, failed): how long each attempt ran',
    labelNames: ['activity', 'outcome'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    registers: [registry],
  });
  const activityFailures = new Counter({
    name: 'leasekeeper_activity_failures_total',
    help: 'Failed activity attempts by activity and error type (the type retry policies match; a retried attempt counts again)',
    labelNames: ['activity', 'error_type'] as const,
    registers: [registry],
  });
  const openstackDuration = new Histogram({
    name: 'leasekeeper_openstack_request_duration_seconds',
    help: 'OpenStack API calls by service, method and status (the HTTP status, or "error" when no answer came)',
    labelNames: ['service', 'method', 'status'] as const,
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });
  const noticesDropped = new Counter({
    name: 'leasekeeper_notices_dropped_total',
    help: 'Notices given up on, by event type and channel (webhook, oslo): refused by the receiver, or still failing when LK_NOTICE_RETRY_HOURS ran out',
    labelNames: ['event_type', 'channel'] as const,
    registers: [registry],
  });
  return {
    registry,
    noticeDropped: (eventType, channel) => noticesDropped.inc({ event_type: eventType, channel }),
    eventStarted: (eventType, lagMs) => eventLag.observe({ event: eventType }, Math.max(0, lagMs) / 1000),
    openstackRequest: (event) => {
      openstackDuration.observe({ service: event.service, method: event.method, status: event.status === undefined ? 'error' : String(event.status) }, event.durationMs / 1000);
    },
    activityInterceptor: (ctx) => ({
      inbound: {
        async execute(input, next) {
          const activity = ctx.info.activityType;
          const end = activityDuration.startTimer({ activity });
          try {
            const result = await next(input);
            end({ outcome: 'ok' });
            return result;
          } catch (err) {
            end({ outcome: 'failed' });
            activityFailures.inc({ activity, error_type: errorType(err) });
            throw err;
          }
        },
      },
    }),
  };
}

/** Serves the registry at /metrics on `host:port` (loopback by default); resolves with the bound port. */
export function serveMetrics(registry: Registry, host: string, port: number): Promise<{ server: http.Server; port: number }> {
  const server = http.createServer((req, res) => {
    if (req.method !== 'GET' || req.url?.split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: GET /metrics\n');
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      (err: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`metrics failed: ${err.message}\n`),
    );
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve({ server, port: (server.address() as AddressInfo).port }));
  });
}
