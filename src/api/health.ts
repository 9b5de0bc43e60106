import { randomUUID } from 'node:crypto';
import type { Client, Connection } from '@temporalio/client';
import { ping, type Pool } from '../db/pool';
import { selfCheckWorkflowType, type SelfCheckResult } from '../../workflows/selfcheck/messages';

export interface CheckResult {
  ok: boolean;
  latency_ms: number;
  error?: string;
  detail?: Record<string, unknown>;
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function timed(fn: () => Promise<Record<string, unknown> | void>): Promise<CheckResult> {
  const started = performance.now();
  try {
    const detail = await fn();
    return { ok: true, latency_ms: Math.round(performance.now() - started), ...(detail ? { detail } : {}) };
  } catch (err) {
    return { ok: false, latency_ms: Math.round(performance.now() - started), error: err instanceof Error ? err.message : String(err) };
  }
}

export interface HealthDeps {
  pool: Pool;
  connection: Connection;
  client: Client;
  taskQueue: string;
  timeoutMs: number;
}

/** A round trip through a worker (a self-check workflow whose activity reads the schema version), proving leases can progress. */
export function checkWorker(deps: Pick<HealthDeps, 'client' | 'taskQueue' | 'timeoutMs'>): Promise<CheckResult> {
  return timed(async () => {
    const result = await deps.client.workflow.execute<() => Promise<SelfCheckResult>>(selfCheckWorkflowType, {
      taskQueue: deps.taskQueue,
      workflowId: `selfcheck-${randomUUID()}`,
      workflowExecutionTimeout: deps.timeoutMs,
    });
    return { ...result };
  });
}

/**
 * At most one run of `check` at a time and per `intervalMs` after it finished: callers meanwhile
 * share the running or the last result (an unauthenticated caller cannot start a workflow per call).
 */
export function sharedCheck<T>(check: () => Promise<T>, intervalMs: number, now: () => number = () => performance.now()): () => Promise<T> {
  let running: Promise<T> | undefined;
  let last: { result: T; at: number } | undefined;
  return () => {
    if (running) return running;
    if (last && now() - last.at < intervalMs) return Promise.resolve(last.result);
    running = check()
      .then((result) => {
        last = { result, at: now() };
        return result;
      })
      .finally(() => {
        running = undefined;
      });
    return running;
  };
}

/** Reachability of Temporal and PostgreSQL; with `workerCheck` (a deep check), also that of a worker. */
export async function checkHealth(deps: Pick<HealthDeps, 'pool' | 'connection' | 'timeoutMs'>, workerCheck?: () => Promise<CheckResult>) {
  const { pool, connection, timeoutMs } = deps;
  const [temporal, database, worker] = await Promise.all([
    timed(async () => {
      const info = await connection.withDeadline(Date.now() + timeoutMs, () => connection.workflowService.getSystemInfo({}));
      return { server_version: info.serverVersion };
    }),
    timed(async () => {
      await withTimeout(ping(pool), timeoutMs, 'PostgreSQL');
    }),
    workerCheck ? workerCheck() : Promise.resolve(undefined),
  ]);
  const checks = { temporal, database, ...(worker ? { worker } : {}) };
  const ok = Object.values(checks).every((check) => check.ok);
  return { status: ok ? 'ok' : 'unavailable', checks };
}
