/** The leasekeeper API process: Blazar's v1 REST API in front of the lease workflows. */
import type { Server } from 'node:http';
import { loadConfigOrExit, orExit } from '../config';
import { usagePolicy } from '../policy';
import { migrate } from '../db/migrate';
import { createPool } from '../db/pool';
import { createLogger } from '../log';
import { lazyOpenStackClients, projectScopedClients } from '../openstack';
import { hostCalendar, resourceTypes } from '../resources';
import { connectTemporal } from '../temporal';
import { createApp } from './app';
import { noAuth } from './auth';
import { keystoneAuthenticator } from './keystone-auth';
import { createApiServer } from './server';

async function main(): Promise<void> {
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
  const types = resourceTypes({ pool, config, openstack, openstackForProject: projectScopedClients() }, calendar);
  const app = createApp({ config, log, pool, connection, client, types, calendar, openstack, authenticator, usagePolicy: policy });

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
    server.close(() => {
      void Promise.allSettled([connection.close(), pool.end()]).then(() => process.exit(0));
    });
    server.closeIdleConnections();
    setTimeout(() => process.exit(0), 10_000).unref(); // do not hang on a stuck client
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

main().catch((err: unknown) => {
  process.stderr.write(`leasekeeper api: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
  process.exit(1);
});
