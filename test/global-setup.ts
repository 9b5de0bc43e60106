/**
 * Starts the real servers the tests use, once per `jest` run: a throw-away PostgreSQL cluster and a
 * Temporal, both on free loopback ports: the dev server (our built CLI, SQLite file in a temp dir),
 * or with LK_TEMPORAL=server temporal-server on a PostgreSQL cluster of its own (`npm run test:temporal-server`).
 * DATABASE_URL / TEMPORAL_ADDRESS in the environment make the tests use existing servers instead.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../src/config';
import { ensureCluster, ensureDatabase, localUrl, startPostgres } from '../scripts/lib/postgres-local';
import type { ManagedProcess } from '../scripts/lib/processes';
import { startLocalTemporal } from '../scripts/lib/local-temporal';
import { bundleLeaseWorkflows } from '../scripts/lib/workflow-bundle';
import { freePort, freeTemporalServerPort } from './support/ports';
import { WORKFLOW_BUNDLE_ENV } from './support/temporal';
import globalTeardown from './global-teardown';

declare global {
  // Read back by global-teardown.ts (same process).
  var __LK_TEST_SERVERS__: { processes: ManagedProcess[]; tmpDir: string; temporalDatabaseUrl?: string } | undefined;
}

export default async function globalSetup(): Promise<void> {
  // Both jest projects call this: the servers are started once and shared.
  if (globalThis.__LK_TEST_SERVERS__) return;
  const config = loadConfig();
  const tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'leasekeeper-test-'));
  fs.chmodSync(tmpDir, 0o755); // the postgres system user must reach its data dir below
  const processes: ManagedProcess[] = [];
  globalThis.__LK_TEST_SERVERS__ = { processes, tmpDir };

  const waits: Array<Promise<void>> = [];
  // The workflows bundled once for the run: every test worker (and every restart) loads this file.
  if (!process.env[WORKFLOW_BUNDLE_ENV]) {
    const bundlePath = path.join(tmpDir, 'workflow-bundle.js');
    waits.push(bundleLeaseWorkflows().then((code) => {
      fs.writeFileSync(bundlePath, code);
      process.env[WORKFLOW_BUNDLE_ENV] = bundlePath;
    }));
  }
  if (!process.env.DATABASE_URL) {
    const port = await freePort();
    const dataDir = path.join(tmpDir, 'postgres');
    ensureCluster(dataDir);
    processes.push(startPostgres({ dataDir, port, durable: false }));
    process.env.DATABASE_URL = localUrl(port, 'leasekeeper');
    waits.push(ensureDatabase(process.env.DATABASE_URL));
  }
  if (!process.env.TEMPORAL_ADDRESS) {
    const topology = config.temporal.topology;
    const port = topology === 'server' ? await freeTemporalServerPort() : await freePort();
    process.env.TEMPORAL_ADDRESS = `127.0.0.1:${port}`;
    // temporal-server's databases on a PostgreSQL of their own, as in production: the benchmarks
    // account its CPU apart from leasekeeper's.
    let temporalDatabaseUrl = process.env.DATABASE_URL; // set above when it was not given
    if (topology === 'server') {
      const pgPort = await freePort();
      const dataDir = path.join(tmpDir, 'temporal-postgres');
      ensureCluster(dataDir);
      processes.push(startPostgres({ dataDir, port: pgPort, durable: false, name: 'temporal-postgres' }));
      temporalDatabaseUrl = globalThis.__LK_TEST_SERVERS__.temporalDatabaseUrl = localUrl(pgPort, 'postgres');
    }
    waits.push(startLocalTemporal({
      topology,
      cacheDir: config.cacheDir,
      stateDir: tmpDir,
      port,
      namespace: config.temporal.namespace,
      databaseUrl: temporalDatabaseUrl,
    }, (proc) => processes.push(proc)));
  }
  try {
    await Promise.all(waits);
  } catch (err) {
    await globalTeardown(); // jest runs no teardown after a failed setup: stop what started
    throw err;
  }
}
