/**
 * leasekeeper in-process for a test file: a fresh database, a real worker on the test Temporal
 * server (bundling the workflow sources), and the API on a free loopback port.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Worker } from '@temporalio/worker';
import pino from 'pino';
import { createApp } from '../../src/api/app';
import type { Authenticator } from '../../src/api/auth';
import { createApiServer } from '../../src/api/server';
import type { Config } from '../../src/config';
import { migrate } from '../../src/db/migrate';
import type { OpenStackClients } from '../../src/openstack';
import { pluginRegistry, type ResourcePlugin } from '../../src/domain/resource-plugin';
import { createWorker, WORKFLOWS_PATH } from '../../worker/create-worker';
import { createTestDatabase, type TestDatabase } from './db';
import { connectTestTemporal, testConfig } from './temporal';

export interface TestStack {
  config: Config;
  url: string;
  db: TestDatabase;
  temporal: Awaited<ReturnType<typeof connectTestTemporal>>;
  /** Starts a worker (again, after stopWorker). */
  startWorker(): Promise<void>;
  stopWorker(): Promise<void>;
  stop(): Promise<void>;
}

export interface TestStackOptions {
  plugins?: ResourcePlugin[];
  env?: Record<string, string>;
  /** Plugins that need the stack's database. */
  withPool?: (pool: TestDatabase['pool']) => ResourcePlugin[];
  /** OpenStack clients for the API (os-hosts), when a test has a cloud. */
  openstack?: () => OpenStackClients;
  authenticator?: Authenticator;
  /** A PostgreSQL server of the test's own (URL) instead of the shared test server. */
  databaseServer?: string;
  /** Start no worker in this process (the test runs the worker process, test/support/worker-process.ts). */
  noWorker?: boolean;
}

export async function startTestStack(options: TestStackOptions = {}): Promise<TestStack> {
  const { plugins = [], env = {}, withPool = () => [], openstack, authenticator, noWorker = false, databaseServer } = options;
  const config = testConfig(env);
  const db = await createTestDatabase(databaseServer);
  await migrate(db.pool);
  const temporal = await connectTestTemporal(config);
  const registry = pluginRegistry([...plugins, ...withPool(db.pool)]);
  // LK_TEST_API_LOG=error (or info…) shows the API's log when a test needs explaining.
  const app = createApp({ config, log: pino({ level: process.env.LK_TEST_API_LOG ?? 'silent' }), pool: db.pool, connection: temporal.connection, client: temporal.client, plugins: registry, openstack, authenticator });
  const server: Server = await new Promise((resolve) => {
    const s = createApiServer(app, config.api.server).listen(0, '127.0.0.1', () => resolve(s));
  });

  let worker: Worker | undefined;
  let running: Promise<void> | undefined;
  const stack: TestStack = {
    config,
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    db,
    temporal,
    async startWorker() {
      worker = await createWorker({ connection: temporal.nativeConnection, config, deps: { pool: db.pool, plugins: registry }, workflows: { workflowsPath: WORKFLOWS_PATH } });
      running = worker.run();
    },
    async stopWorker() {
      if (worker && worker.getState() === 'RUNNING') worker.shutdown();
      await running;
      worker = undefined;
    },
    async stop() {
      await stack.stopWorker();
      await new Promise((resolve) => server.close(resolve));
      await temporal.close();
      await db.drop();
    },
  };
  if (!noWorker) await stack.startWorker();
  return stack;
}

/** Blazar's request date for `ms` from now, with seconds (an extension Blazar's format lacks). */
export function inSeconds(seconds: number, from = Date.now()): string {
  return new Date(from + seconds * 1000).toISOString().slice(0, 19).replace('T', ' ');
}

export interface ApiCall {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
}

export function apiClient(url: string, headers: Record<string, string> = {}) {
  return async function call(method: string, path: string, body?: unknown, extraHeaders: Record<string, string> = {}): Promise<ApiCall> {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: { 'content-type': 'application/json', ...headers, ...extraHeaders },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  };
}

/** Polls until `check` returns a value (bounded). */
export async function eventually<T>(check: () => Promise<T | undefined>, timeoutMs = 30_000, intervalMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** Deletes every lease the caller sees and waits (up to 2 min) until they are gone: cleanup after a test. */
export async function deleteAllLeases(api: ReturnType<typeof apiClient>): Promise<void> {
  for (const lease of (await api('GET', '/v1/leases')).body?.leases ?? []) await api('DELETE', `/v1/leases/${lease.id}`);
  await eventually(async () => (((await api('GET', '/v1/leases')).body?.leases ?? []).length === 0 ? true : undefined), 120_000).catch(() => undefined);
}
