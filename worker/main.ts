/**
 * The leasekeeper worker process: runs lease workflows and their activities.
 * SIGINT/SIGTERM drain it gracefully: no new tasks are polled, running activities get
 * LK_WORKER_SHUTDOWN_GRACE_MS to finish, then the process exits 0.
 */
import fs from 'node:fs';
import { Client } from '@temporalio/client';
import { NativeConnection, Runtime, type Worker } from '@temporalio/worker';
import { loadConfigOrExit, orExit, type Config } from '../src/config';
import { LeaseOutbox } from '../src/outbox';
import { usagePolicy } from '../src/policy';
import { migrate } from '../src/db/migrate';
import { createPool } from '../src/db/pool';
import { createLogger, type Logger } from '../src/log';
import { lazyOpenStackClients, OpenStackConfigError, projectScopedClients, type OpenStackClients } from '../src/openstack';
import { productionHostWatch, productionPlugins } from '../src/resources';
import { awaitLeaseSearchAttributes, connectTemporal, ensureSearchAttributes } from '../src/temporal';
import { createNoticeWorker, createWorker, workerNotices } from './create-worker';
import { ensureHostMonitor, wakeHostMonitorOnNovaNotifications } from './host-monitor';
import { ensurePowerPlanner } from './power-planner';
import { deploymentHostPower } from '../src/resources/physical-host/power';
import { serveMetrics, workerMetrics } from './metrics';
import { PinoTemporalLogger } from './temporal-logger';

async function main(): Promise<void> {
  const config = loadConfigOrExit();
  const log = createLogger(config, 'worker');
  const metricsAt = config.worker.metrics;
  const metrics = metricsAt ? workerMetrics() : undefined;
  const metricsServer = metricsAt && metrics
    ? await serveMetrics(metrics.registry, metricsAt.host, metricsAt.port).catch((err: Error) => {
      log.fatal({ err }, `cannot serve metrics on ${metricsAt.host}:${metricsAt.port} (LK_WORKER_METRICS_PORT): ${err.message}`);
      process.exit(1);
    })
    : undefined;
  Runtime.install({
    logger: new PinoTemporalLogger(log),
    shutdownSignals: ['SIGINT', 'SIGTERM'],
    // The SDK's own metrics (task slots, polls, schedule-to-start latency) on the port after ours.
    ...(metricsAt ? { telemetryOptions: { metrics: { prometheus: { bindAddress: `${metricsAt.host}:${metricsAt.port + 1}` } } } } : {}),
  });

  if (!fs.existsSync(config.worker.workflowBundle)) {
    log.fatal({ path: config.worker.workflowBundle }, 'workflow bundle missing: run `npm run build`');
    process.exit(1);
  }
  const openstack = lazyOpenStackClients({
    logger: (event) => {
      log.debug(event, 'openstack request');
      metrics?.openstackRequest(event);
    },
  });
  const pool = createPool(config, 'leasekeeper-worker', (err) => log.warn({ err }, 'idle database connection lost'));
  const policy = orExit(() => usagePolicy(pool, config, (reason) => log.warn({ reason }, 'the external policy service could not be asked: allowed (LK_POLICY_EXTERNAL_FAIL=open)')));
  const { version } = await migrate(pool);
  const connection = await NativeConnection.connect({ address: config.temporal.address });
  await registerSearchAttributes(config, log);
  const notices = workerNotices(connection, config, { pool }, metrics?.noticeDropped);
  const hostWatch = config.hostMonitor.enabled && hasOpenStack(openstack, log) ? productionHostWatch({ pool, config, openstack }) : undefined;
  // Leases the API admitted whose workflow it could not start (it died, or Temporal refused): started here; and leases a lending's reclaim cut, told here.
  const outbox = new LeaseOutbox({ pool, client: new Client({ connection, namespace: config.temporal.namespace }), taskQueue: config.temporal.taskQueue, log, ...config.outbox });
  const tellPreempted = (leaseIds: readonly string[]) => outbox.tellPreemptedSoon(leaseIds);
  // Hosts' power: a lease's start wakes its hosts still asleep (an admin may power one off by hand, planner or not); the power planner's
  // steps (LK_POWER_PLANNER=on). With OpenStack, Nova's compute services are disabled before a power-off and enabled after a wake.
  const power = deploymentHostPower(pool, config.power, { ironic: () => openstack().ironic, ...(hostWatch ? { nova: () => openstack().nova } : {}) });
  const hostPower = config.power.planner ? power : undefined;
  const deps = { pool, plugins: productionPlugins({ pool, config, openstack, openstackForProject: projectScopedClients(), hostPower: power }), hostWatch, hostPower, eventStarted: metrics?.eventStarted, usagePolicy: policy, notices, tellPreempted };
  const workerOptions = { connection, config, deps, workflows: { bundlePath: config.worker.workflowBundle }, activityInterceptors: metrics ? [metrics.activityInterceptor] : undefined };
  const worker = await createWorker(workerOptions);
  const noticeWorker = await createNoticeWorker(workerOptions);
  const metricsUrls = metricsServer && metricsAt ? { metrics: `http://${metricsAt.host}:${metricsServer.port}/metrics`, sdkMetrics: `http://${metricsAt.host}:${metricsAt.port + 1}/metrics` } : {};
  log.info({ address: config.temporal.address, taskQueue: config.temporal.taskQueue, noticeTaskQueue: config.temporal.noticeTaskQueue, schemaVersion: version, ...metricsUrls }, 'worker ready');
  outbox.runSweeps();
  const monitor = hostWatch ? startDeploymentWorkflow(config, log, 'host monitor', (client) => ensureHostMonitor(client, config)) : undefined;
  const planner = hostPower ? startDeploymentWorkflow(config, log, 'power planner', (client) => ensurePowerPlanner(client, config)) : undefined;
  const notifications = hostWatch ? listenToNova(config, log) : undefined;
  try {
    await runTogether([worker, noticeWorker]); // resolves once a shutdown signal has drained both
  } finally {
    monitor?.stop();
    planner?.stop();
    await outbox.stop();
    await notifications?.stop();
    await notices.close();
    await connection.close();
    await pool.end();
    metricsServer?.server.close();
    log.info('worker stopped');
  }
}

/** Runs the workers until all have stopped; one that fails shuts the others down, and its error is thrown. */
async function runTogether(workers: Worker[]): Promise<void> {
  const outcomes = await Promise.allSettled(
    workers.map((one) =>
      one.run().catch((err: unknown) => {
        for (const other of workers) if (other !== one && other.getState() === 'RUNNING') other.shutdown();
        throw err;
      }),
    ),
  );
  const failed = outcomes.find((outcome) => outcome.status === 'rejected');
  if (failed) throw failed.reason;
}

/** Whether OpenStack settings are there (the host monitor watches Nova); a deployment without them runs no monitor. */
function hasOpenStack(openstack: () => OpenStackClients, log: Logger): boolean {
  try {
    openstack();
    return true;
  } catch (err) {
    if (!(err instanceof OpenStackConfigError)) throw err;
    log.info({ reason: err.message }, 'host monitor off: no OpenStack settings');
    return false;
  }
}

/** Starts a deployment-wide workflow (the host monitor, the power planner) unless it runs, trying again every 30 s while Temporal refuses. */
function startDeploymentWorkflow(config: Config, log: Logger, what: string, ensure: (client: ReturnType<typeof connectTemporal>['client']) => Promise<string>): { stop(): void } {
  const { connection, client } = connectTemporal(config);
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const attempt = async () => {
    try {
      const workflowId = await ensure(client);
      log.info({ workflowId }, `${what} running`);
      await connection.close();
    } catch (err) {
      if (stopped) return;
      log.warn({ err }, `could not start the ${what}: trying again in 30 s`);
      timer = setTimeout(() => void attempt(), 30_000);
    }
  };
  void attempt();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      void connection.close().catch(() => undefined);
    },
  };
}

/** With LK_NOVA_NOTIFICATIONS_URL: Nova's compute service notices wake the host monitor (it polls all the same). */
function listenToNova(config: Config, log: Logger): { stop(): Promise<void> } | undefined {
  const url = config.hostMonitor.notificationsUrl;
  if (!url) return undefined;
  const { connection, client } = connectTemporal(config);
  const listening = wakeHostMonitorOnNovaNotifications(client, config, url, log);
  return {
    async stop() {
      await listening.stop();
      await connection.close().catch(() => undefined);
    },
  };
}

/** How long a starting worker waits for Temporal to take lease workflows carrying the lease search attributes. */
const SEARCH_ATTRIBUTES_READY_MS = 30_000;

/**
 * Operators filter leases by these in the Web UI; a server without them would reject lease workflows.
 * Once they are there, the worker is ready only when Temporal takes lease workflows carrying them:
 * each of its services sees attributes just registered (by this worker, `npm run temporal:prepare`
 * or another worker) only a few seconds later, and until its history service does, it fails the
 * admission of every lease created (awaitLeaseSearchAttributes). Exits after SEARCH_ATTRIBUTES_READY_MS.
 */
async function registerSearchAttributes(config: Config, log: Logger): Promise<void> {
  const { connection } = connectTemporal(config);
  const { namespace } = config.temporal;
  try {
    let added: string[];
    try {
      added = await ensureSearchAttributes(connection, namespace);
      if (added.length) log.info({ added }, 'registered search attributes');
    } catch (err) {
      log.warn({ err }, 'could not check or register search attributes (no operator access?): register them by hand, see docs/production.md');
      return;
    }
    try {
      const waitedMs = await awaitLeaseSearchAttributes(connection, namespace, SEARCH_ATTRIBUTES_READY_MS);
      if (added.length || waitedMs >= 1_000) log.info({ namespace, waitedMs }, 'Temporal takes lease workflows with the lease search attributes');
    } catch (err) {
      log.fatal({ err }, err instanceof Error ? err.message : String(err));
      process.exit(1);
    }
  } finally {
    await connection.close();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`leasekeeper worker: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
  process.exit(1);
});
