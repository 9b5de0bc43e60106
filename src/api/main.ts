/**
 * The leasekeeper API process: Blazar's v1 REST API in front of the lease workflows. `runApi` is
 * also what the benchmarks' API processes run, with resource types of their own.
 */
import type { Server } from 'node:http';
import { loadConfigOrExit, orExit } from '../config';
import { LeaseOutbox } from '../outbox';
import { usagePolicy } from '../policy';
import { migrate } from '../db/migrate';
import { createPool } from '../db/pool';
import { createLogger } from '../log';
import { lazyOpenStackClients, projectScopedClients } from '../openstack';
import { hostCalendar, resourceTypes, type ResourceDeps } from '../resources';
import type { HostCalendar } from '../resources/physical-host/calendar';
import type { ResourceTypes } from '../domain/resource-plugin';
import { connectTemporal } from '../temporal';
import { createApp } from './app';
import { noAuth } from './auth';
import { keystoneAuthenticator } from './keystone-auth';
import { apiMetrics, serveApiMetrics } from './metrics';
import { createApiServer } from './server';

export interface ApiProcessOptions {
  /** The resource types (default: the deployment's, from the settings). */
  types?: (deps: ResourceDeps, calendar: HostCalendar) => ResourceTypes;
}

export async function runApi(options: ApiProcessOptions = {}): Promise<void> {
  const config = loadConfigOrExit();
  const log = createLogger(config, 'api');
  const pool = createPool(config, 'leasekeeper-api', (err) => log.warn({ err }, 'idle database connection lost'));
  const policy = orExit(() => usagePolicy(pool, config));
  await migrate(pool);
  const { connection, client } = connectTemporal(config);
  const openstack = lazyOpenStackClients({ logger: (event) => log.debug(event, 'openstack request') });
  // Keystone mode validates callers' tokens with our own service credentials (OS_CLOUD / OS_*).
  const authenticator =
    config.api.authStrategy === 'keystone'
      ? keystoneAuthenticator(
          { validateToken: (token) => openstack().keystone.validateToken(token, { timeoutMs: config.api.authTimeoutMs }) },
          { cacheMs: config.api.authCacheMs, timeoutMs: config.api.authTimeoutMs, adminProject: config.api.adminProject, log },
        )
      : noAuth(config.api.noauthProjectId);
  if (config.api.authStrategy === 'keystone') openstack(); // fail at start, not at the first request, when credentials are missing
  // One host calendar for the physical:host type's searches and GET /v1/availability.
  const calendar = hostCalendar(pool, config);
  const types = (options.types ?? resourceTypes)({ pool, config, openstack, openstackForProject: projectScopedClients() }, calendar);
  // Starts the workflows of the leases this API admits; its sweeps also start those of an API that died first.
  const outbox = new LeaseOutbox({ pool, client, taskQueue: config.temporal.taskQueue, log, ...config.outbox });
  const metrics = apiMetrics({ pool, cacheMs: config.api.metrics.cacheMs });
  const app = createApp({ config, log, pool, connection, client, types, calendar, openstack, authenticator, usagePolicy: policy, outbox, metrics });
  outbox.runSweeps();
  // The metrics on their own address (LK_API_METRICS_PORT): then the API's own address does not serve them.
  const metricsAt = config.api.metrics.listen;
  const metricsServer = metricsAt
    ? await serveApiMetrics(metrics, { ...metricsAt, token: config.api.metrics.token, limits: config.api.server, log }).catch((err: Error) => {
        log.fatal({ err }, `cannot serve metrics on ${metricsAt.host}:${metricsAt.port} (LK_API_METRICS_PORT): ${err.message}`);
        process.exit(1);
      })
    : undefined;
  if (metricsServer && metricsAt) log.info({ url: `http://${metricsAt.host}:${metricsServer.port}/metrics` }, 'api metrics listening');

  const server: Server = createApiServer(app, config.api.server).listen(config.api.port, config.api.host, () => {
    log.info({ url: `http://${config.api.host}:${config.api.port}` }, 'api listening');
  });
  server.on('error', (err) => {
    log.fatal({ err }, 'api cannot listen');
    process.exit(1);
  });

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'api stopping');
    metricsServer?.server.close();
    server.close(() => {
      void outbox
        .stop()
        .finally(() => Promise.allSettled([connection.close(), pool.end()]))
        .then(() => process.exit(0));
    });
    server.closeIdleConnections();
    setTimeout(() => process.exit(0), 10_000).unref(); // do not hang on a stuck client
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

if (require.main === module) {
  runApi().catch((err: unknown) => {
    process.stderr.write(`leasekeeper api: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
    process.exit(1);
  });
}
