import { randomUUID } from 'node:crypto';
import type { Client, Connection } from '@temporalio/client';
import type { Pool } from '../db/pool';
import type { selfCheckWorkflow } from '../../workflows';

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

/**
 * Reachability of Temporal and PostgreSQL; with `deep`, also a round trip through a worker
 * (a self-check workflow whose activity reads the schema version), proving leases can progress.
 */
export async function checkHealth(deps: HealthDeps, deep: boolean) {
  const { pool, connection, client, timeoutMs } = deps;
  const [temporal, database, worker] = await Promise.all([
    timed(async () => {
      const info = await connection.withDeadline(Date.now() + timeoutMs, () => connection.workflowService.getSystemInfo({}));
      return { server_version: info.serverVersion };
    }),
    timed(async () => {
      await withTimeout(pool.query('SELECT 1'), timeoutMs, 'PostgreSQL');
    }),
    deep
      ? timed(async () => {
          const result = await client.workflow.execute<typeof selfCheckWorkflow>('selfCheckWorkflow', {
            taskQueue: deps.taskQueue,
            workflowId: `selfcheck-${randomUUID()}`,
            workflowExecutionTimeout: timeoutMs,
          });
          return { ...result };
        })
      : Promise.resolve(undefined),
  ]);
  const checks = { temporal, database, ...(worker ? { worker } : {}) };
  const ok = Object.values(checks).every((check) => check.ok);
  return { status: ok ? 'ok' : 'unavailable', checks };
}
