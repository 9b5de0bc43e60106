/**
 * Starts the real servers the tests use, once per `jest` run: a throw-away PostgreSQL cluster and a
 * Temporal dev server (our built CLI, SQLite file in a temp dir), both on free loopback ports.
 * DATABASE_URL / TEMPORAL_ADDRESS in the environment make the tests use existing servers instead.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../src/config';
import { ensureCluster, ensureDatabase, localUrl, startPostgres } from '../scripts/lib/postgres-local';
import type { ManagedProcess } from '../scripts/lib/processes';
import { startTemporalDevServer, temporalBinary, waitForTemporal } from '../scripts/lib/temporal-dev-server';
import globalTeardown from './global-teardown';
import { freePort } from './support/ports';

declare global {
  // Read back by global-teardown.ts (same process).
  var __LK_TEST_SERVERS__: { processes: ManagedProcess[]; tmpDir: string } | undefined;
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
  if (!process.env.DATABASE_URL) {
    const port = await freePort();
    const dataDir = path.join(tmpDir, 'postgres');
    ensureCluster(dataDir);
    processes.push(startPostgres({ dataDir, port, durable: false }));
    process.env.DATABASE_URL = localUrl(port, 'leasekeeper');
    waits.push(ensureDatabase(process.env.DATABASE_URL));
  }
  if (!process.env.TEMPORAL_ADDRESS) {
    const port = await freePort();
    processes.push(startTemporalDevServer({
      binary: temporalBinary(config.cacheDir),
      dbFile: path.join(tmpDir, 'temporal.db'),
      port,
      uiPort: await freePort(),
      namespace: config.temporal.namespace,
      headless: true,
    }));
    process.env.TEMPORAL_ADDRESS = `127.0.0.1:${port}`;
    waits.push(waitForTemporal(process.env.TEMPORAL_ADDRESS, config.temporal.namespace));
  }
  try {
    await Promise.all(waits);
  } catch (err) {
    await globalTeardown(); // jest runs no teardown after a failed setup: stop what started
    throw err;
  }
}
