/**
 * leasekeeper in-process for a test file: a fresh database, a real worker on the test Temporal
 * server (running the run's one workflow bundle), and the API on a free loopback port (useTestStack starts
 * it before a file's tests and stops it after them); a client for its API, and cleanup.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Worker } from '@temporalio/worker';
import { WorkflowNotFoundError } from '@temporalio/client';
import type { History } from '@temporalio/common/lib/proto-utils';
import pino from 'pino';
import { createApp } from '../src/api/app';
import { LeaseOutbox } from '../src/outbox';
import type { Authenticator } from '../src/api/auth';
import { createApiServer } from '../src/api/server';
import type { Config } from '../src/config';
import { migrate } from '../src/db/migrate';
import type { OpenStackClients } from '../src/openstack';
import { formatBlazarTimestamp } from '../src/domain/dates';
import { pluginRegistry, type HostWatch, type ResourcePlugin } from '../src/domain/resource-plugin';
import { ensureHostMonitor } from '../worker/host-monitor';
import { hostMonitorWorkflowId } from '../workflows/host-monitor/messages';
import { ensurePowerPlanner } from '../worker/power-planner';
import { powerPlannerWorkflowId } from '../workflows/power-planner/messages';
import type { HostPower } from '../src/resources/physical-host/power';
import { createNoticeWorker, createWorker } from '../worker/create-worker';
import { createTestDatabase, type TestDatabase } from './db';
import { leaseWorkflowId } from '../workflows/lease/messages';
import { withoutRequestId } from './http';
import { connectTestTemporal, testConfig, testWorkflows } from './temporal-connection';

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
  /** Plugins that need the stack's database (and its settings). */
  withPool?: (pool: TestDatabase['pool'], config: Config) => ResourcePlugin[];
  /** OpenStack clients for the API (os-hosts), when a test has a cloud. */
  openstack?: () => OpenStackClients;
  authenticator?: Authenticator;
  /** A PostgreSQL server of the test's own (URL) instead of the shared test server. */
  databaseServer?: string;
  /** Start no worker in this process (the test runs the worker process, dev-stack/worker-process.ts). */
  noWorker?: boolean;
  /** Run the host monitor (its settings from `env`), watching hosts this way. */
  hostWatch?: (pool: TestDatabase['pool']) => HostWatch;
  /** Run the power planner (its settings from `env` and `config`) over hosts' power this way. */
  hostPower?: (pool: TestDatabase['pool'], config: Config) => HostPower;
  /** Settings no environment variable can give (e.g. an offer hold of seconds), over those from `env`. */
  config?: (config: Config) => Config;
}

export async function startTestStack(options: TestStackOptions = {}): Promise<TestStack> {
  const { plugins = [], env = {}, withPool = () => [], openstack, authenticator, noWorker = false, databaseServer } = options;
  const config = (options.config ?? ((c) => c))(testConfig(env));
  const db = await createTestDatabase(databaseServer);
  await migrate(db.pool);
  const temporal = await connectTestTemporal(config);
  const registry = pluginRegistry([...plugins, ...withPool(db.pool, config)]);
  const watch = options.hostWatch?.(db.pool);
  const hostPower = options.hostPower?.(db.pool, config);
  // LK_TEST_API_LOG=error (or info…) shows the API's log when a test needs explaining.
  const apiLog = pino({ level: process.env.LK_TEST_API_LOG ?? 'silent' });
  // The API's own starts of the leases it admits: stopped before the Temporal connection closes.
  const apiOutbox = new LeaseOutbox({ pool: db.pool, client: temporal.client, taskQueue: config.temporal.taskQueue, log: apiLog, ...config.outbox });
  const app = createApp({ config, log: apiLog, pool: db.pool, connection: temporal.connection, client: temporal.client, types: registry, openstack, authenticator, outbox: apiOutbox });
  const server: Server = await new Promise((resolve) => {
    const s = createApiServer(app, config.api.server).listen(0, '127.0.0.1', () => resolve(s));
  });

  // The lease worker and the notice worker (deliveries: a task queue of their own), as the worker process runs them.
  let workers: Worker[] = [];
  let running: Promise<unknown> | undefined;
  let outbox: LeaseOutbox | undefined;
  const stack: TestStack = {
    config,
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    db,
    temporal,
    async startWorker() {
      const workerOptions = { connection: temporal.nativeConnection, config, deps: { pool: db.pool, plugins: registry, hostWatch: watch, hostPower, tellPreempted: (ids: readonly string[]) => outbox?.tellPreemptedSoon(ids) }, workflows: testWorkflows() };
      workers = [await createWorker(workerOptions), await createNoticeWorker(workerOptions)];
      running = Promise.all(workers.map((one) => one.run()));
      // As the worker process does: owed starts of leases the API admitted (src/outbox).
      outbox = new LeaseOutbox({ pool: db.pool, client: temporal.client, taskQueue: config.temporal.taskQueue, log: pino({ level: 'silent' }), ...config.outbox });
      outbox.runSweeps();
      if (watch) await ensureHostMonitor(temporal.client, config);
      if (hostPower) await ensurePowerPlanner(temporal.client, config);
    },
    async stopWorker() {
      await outbox?.stop();
      outbox = undefined;
      for (const one of workers) if (one.getState() === 'RUNNING') one.shutdown();
      await running;
      workers = [];
    },
    async stop() {
      if (watch) await temporal.client.workflow.getHandle(hostMonitorWorkflowId(config.temporal.taskQueue)).terminate('test over').catch(() => undefined);
      if (hostPower) await temporal.client.workflow.getHandle(powerPlannerWorkflowId(config.temporal.taskQueue)).terminate('test over').catch(() => undefined);
      await stack.stopWorker();
      await new Promise((resolve) => server.close(resolve));
      await apiOutbox.stop();
      await temporal.close();
      await db.drop();
    },
  };
  if (!noWorker) await stack.startWorker();
  return stack;
}

/** What a file does with its stack around the stack's own start and stop. */
export interface TestStackHooks {
  /** Runs before the stack stops (and stops it even if it fails): clean-up that needs the API, e.g. deleteAllLeases. */
  beforeStop?: (stack: TestStack) => Promise<void>;
  /** For the start and the stop, when they take longer than Jest's default. */
  timeoutMs?: number;
}

/**
 * The stack for a test file (or describe block): started before its tests, stopped after them; the
 * returned function gives it to the tests. Its beforeAll/afterAll go where it is called (Jest runs
 * both in the order declared), so a hook declared before it runs before the stack starts and, at
 * the end, before it stops; one declared after it, after. `options` may be a function, for options
 * known only once an earlier beforeAll ran (a port, a server of the test's own).
 */
export function useTestStack(options: TestStackOptions | (() => TestStackOptions) = {}, hooks: TestStackHooks = {}): () => TestStack {
  let stack: TestStack | undefined;
  beforeAll(async () => {
    stack = await startTestStack(typeof options === 'function' ? options() : options);
  }, hooks.timeoutMs);
  afterAll(async () => {
    if (!stack) return;
    try {
      await hooks.beforeStop?.(stack);
    } finally {
      await stack.stop();
    }
  }, hooks.timeoutMs);
  return () => {
    if (!stack) throw new Error('the test stack is not started: useTestStack() must be called in a describe block, outside the tests');
    return stack;
  };
}

/** Blazar's request date for `ms` from now, with seconds (an extension Blazar's format lacks). */
export function inSeconds(seconds: number, from = Date.now()): string {
  return formatBlazarTimestamp(from + seconds * 1000);
}

export interface ApiCall {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
}

/** Calls the API at `url`: a function of it when the stack starts later (`() => stack().url`). */
export function apiClient(url: string | (() => string), headers: Record<string, string> = {}) {
  return async function call(method: string, path: string, body?: unknown, extraHeaders: Record<string, string> = {}): Promise<ApiCall> {
    const res = await fetch(`${typeof url === 'function' ? url() : url}${path}`, {
      method,
      headers: { 'content-type': 'application/json', ...headers, ...extraHeaders },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: withoutRequestId(res, text ? JSON.parse(text) : undefined) };
  };
}


/** Polls until `check` returns a value (bounded); `explain` says what was not met when time runs out. */
export async function eventually<T>(check: () => Promise<T | undefined>, timeoutMs = 30_000, intervalMs = 100, explain = () => 'condition not met'): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${explain()} within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/**
 * Deletes every lease the caller sees and waits (up to 2 min) until they are gone: cleanup after a
 * test. Throws, naming the leases (id and status) still there, when some are not: the next test
 * would otherwise start on what they still hold. A delete refused (4xx, 5xx) of a lease still
 * there throws at once, with the answer: waiting for it would only outlast the hook's timeout.
 */
export async function deleteAllLeases(api: ReturnType<typeof apiClient>, timeoutMs = 120_000): Promise<void> {
  type Listed = Array<{ id: string; status: string }>;
  const listed = async (): Promise<Listed> => ((await api('GET', '/v1/leases')).body as { leases?: Listed } | undefined)?.leases ?? [];
  const refused = new Map<string, ApiCall>();
  for (const lease of await listed()) {
    const answer = await api('DELETE', `/v1/leases/${lease.id}`);
    if (answer.status >= 400) refused.set(lease.id, answer);
  }
  const stuck = (await listed()).filter((lease) => refused.has(lease.id));
  if (stuck.length) throw new Error(`deletes refused: ${stuck.map((lease) => `${lease.id} (${lease.status}) ${refused.get(lease.id)!.status} ${JSON.stringify(refused.get(lease.id)!.body)}`).join(', ')}`);
  let left: Listed = [];
  await eventually(async () => ((left = await listed()).length === 0 ? true : undefined), timeoutMs, 100, () => `leases left behind: ${left.map((lease) => `${lease.id} (${lease.status})`).join(', ')}; not gone`);
}

/**
 * The lease's workflow once Temporal has it, and its first description. A lease the API admitted
 * itself answers 201 before its workflow is started (src/outbox): a test that reads the workflow
 * right after the create waits here.
 */
export async function startedLeaseWorkflow(stack: TestStack, leaseId: string, timeoutMs = 15_000) {
  const handle = stack.temporal.client.workflow.getHandle(leaseWorkflowId(leaseId));
  const description = await eventually(
    () => handle.describe().catch((err: unknown) => {
      if (err instanceof WorkflowNotFoundError) return undefined;
      throw err;
    }),
    timeoutMs,
    50,
    () => `the workflow of lease ${leaseId} not started`,
  );
  return { handle, description };
}

/**
 * For a wait that timed out on a lease: rethrows with the lease workflow's history (when each event
 * happened, and which activity or worker) and `more` (e.g. a worker's last lines): where did the time go?
 */
export async function withLeaseHistory(stack: TestStack, leaseId: string, err: Error, more = ''): Promise<never> {
  const history = await stack.temporal.client.workflow.getHandle(leaseWorkflowId(leaseId)).fetchHistory();
  const lines = (history.events ?? []).map((e) => `${new Date(Number(e.eventTime?.seconds ?? 0) * 1000).toISOString()} ${String(e.eventType)} ${e.activityTaskScheduledEventAttributes?.activityType?.name ?? e.workflowTaskStartedEventAttributes?.identity ?? ''}`.trimEnd());
  throw new Error(`${err.message}\nhistory of lease ${leaseId}:\n${lines.join('\n')}${more ? `\n${more}` : ''}`);
}

// ---------------------------------------------------------------------------------------------
// Waiting on what a lease's workflow did (its history), not on the clock: Temporal fires a
// workflow's timers whether or not a worker runs, so "the start has passed with no worker" is
// "every timer it had set has fired".

type HistoryEvent = NonNullable<History['events']>[number];

/** The history of any workflow by its id (a lease's, an offer hold's…). */
export async function workflowHistoryEvents(stack: TestStack, workflowId: string): Promise<HistoryEvent[]> {
  return (await stack.temporal.client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
}

export function leaseHistoryEvents(stack: TestStack, leaseId: string): Promise<HistoryEvent[]> {
  return workflowHistoryEvents(stack, leaseWorkflowId(leaseId));
}

/** The timers the workflow has set that have neither fired nor been cancelled, with when each is due (ms since the epoch). */
export function pendingTimers(events: HistoryEvent[]): Array<{ timerId: string; firesAt: number }> {
  const pending = new Map<string, number>();
  for (const e of events) {
    const started = e.timerStartedEventAttributes;
    if (started?.timerId) pending.set(started.timerId, Number(e.eventTime?.seconds ?? 0) * 1000 + Number(started.startToFireTimeout?.seconds ?? 0) * 1000);
    if (e.timerFiredEventAttributes?.timerId) pending.delete(e.timerFiredEventAttributes.timerId);
    if (e.timerCanceledEventAttributes?.timerId) pending.delete(e.timerCanceledEventAttributes.timerId);
  }
  return [...pending].map(([timerId, firesAt]) => ({ timerId, firesAt }));
}

/** The workflow's history, or none yet: a lease the API admitted answers 201 before its workflow starts (src/outbox). */
async function historySoFar(stack: TestStack, workflowId: string): Promise<HistoryEvent[] | undefined> {
  return workflowHistoryEvents(stack, workflowId).catch((err: unknown) => {
    if (err instanceof WorkflowNotFoundError || (err as { code?: number }).code === 5) return undefined; // 5: gRPC NOT_FOUND
    throw err;
  });
}

/** Once the workflow waits on a timer: before a test stops its worker. */
export function untilWaitingOnTimerOf(stack: TestStack, workflowId: string, timeoutMs = 30_000): Promise<true> {
  return eventually(
    async () => {
      const events = await historySoFar(stack, workflowId);
      return events && pendingTimers(events).length > 0 ? true : undefined;
    },
    timeoutMs,
    100,
    () => `workflow ${workflowId} set no timer`,
  );
}

/** Once every timer the workflow had set has fired: with no worker running, the time it waited for has come. */
export function untilTimersFiredOf(stack: TestStack, workflowId: string, timeoutMs = 120_000): Promise<true> {
  return eventually(async () => (pendingTimers(await workflowHistoryEvents(stack, workflowId)).length === 0 ? true : undefined), timeoutMs, 200, () => `workflow ${workflowId}'s timers not all fired`);
}

/** Once the lease's workflow waits on a timer (e.g. for its start or its end): before a test stops its worker. */
export function untilWaitingOnTimer(stack: TestStack, leaseId: string, timeoutMs = 30_000): Promise<true> {
  return untilWaitingOnTimerOf(stack, leaseWorkflowId(leaseId), timeoutMs);
}

/** Once every timer the lease's workflow had set has fired. */
export function untilTimersFired(stack: TestStack, leaseId: string, timeoutMs = 120_000): Promise<true> {
  return untilTimersFiredOf(stack, leaseWorkflowId(leaseId), timeoutMs);
}

/** When the lease's workflow scheduled one of the activities `names` (ms since the epoch), in order: e.g. its start's hand-over. */
export async function activityScheduledTimes(stack: TestStack, leaseId: string, names: string[]): Promise<number[]> {
  return (await leaseHistoryEvents(stack, leaseId))
    .filter((e) => names.includes(e.activityTaskScheduledEventAttributes?.activityType?.name ?? ''))
    .map((e) => Number(e.eventTime?.seconds ?? 0) * 1000 + Math.floor(Number(e.eventTime?.nanos ?? 0) / 1e6));
}

/** How many times the lease's workflow has scheduled the activity `name`. */
export async function activityRuns(stack: TestStack, leaseId: string, name: string): Promise<number> {
  return (await leaseHistoryEvents(stack, leaseId)).filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === name).length;
}
