/**
 * The servers the tests and the benchmarks run against, started once per run: a throw-away
 * PostgreSQL cluster and a Temporal, both on free loopback ports: the dev server (our built CLI,
 * SQLite file in a temp dir), or with LK_TEMPORAL=server temporal-server on a PostgreSQL cluster of
 * its own (`npm run test:temporal-server`); with the loopback OpenStack rig for tests against OpenStack.
 * DATABASE_URL / TEMPORAL_ADDRESS in the environment make them use existing servers instead.
 * jest's global setup and teardown (test/global-setup.ts, test/support/openstack-setup.ts) are these.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../src/config';
import { startLocalTemporal } from './local-temporal';
import { CLOUDS_FILE, RIG_SCRIPTS } from './openstack-rig';
import { ensureCluster, ensureDatabase, localUrl, startPostgres } from './postgres-local';
import { freePort, freeTemporalServerPort } from './ports';
import type { ManagedProcess } from './processes';
import { WORKFLOW_BUNDLE_ENV } from './temporal-connection';
import { bundleLeaseWorkflows } from './workflow-bundle';

declare global {
  // Read back by stopServers (same process).
  var __LK_TEST_SERVERS__: { processes: ManagedProcess[]; tmpDir: string; temporalDatabaseUrl?: string } | undefined;
}

export async function startServers(): Promise<void> {
  // Both jest projects call this (test/global-setup.ts): the servers are started once and shared.
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
    await stopServers(); // jest runs no teardown after a failed setup: stop what started
    throw err;
  }
}

/** Stops what startServers started (once, whoever calls it). */
export async function stopServers(): Promise<void> {
  const servers = globalThis.__LK_TEST_SERVERS__;
  if (!servers) return;
  globalThis.__LK_TEST_SERVERS__ = undefined; // both jest projects call this: stop once
  await Promise.all(servers.processes.map((proc) => proc.stop()));
  fs.rmSync(servers.tmpDir, { recursive: true, force: true });
}

declare global {
  var __LK_RIG_STARTED_HERE__: boolean | undefined;
}

/** startServers, plus the loopback OpenStack rig (scripts/openstack/up.sh: idempotent; installs its packages the first time). */
export async function startServersWithRig(): Promise<void> {
  await startServers();
  const started = Date.now();
  let output: string;
  try {
    output = execFileSync('bash', [path.join(RIG_SCRIPTS, 'up.sh')], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  } catch (err) {
    await stopServers(); // jest runs no teardown after a failed setup: stop the servers started above
    throw err;
  }
  // Both rig projects call this in one jest run: the second finds the rig the first started.
  globalThis.__LK_RIG_STARTED_HERE__ ||= !/already up/.test(output);
  process.env.OS_CLIENT_CONFIG_FILE = CLOUDS_FILE;
  process.stdout.write(`\nOpenStack rig ${globalThis.__LK_RIG_STARTED_HERE__ ? `up in ${Math.round((Date.now() - started) / 1000)} s` : 'was already up'}\n`);
}

export async function stopServersWithRig(): Promise<void> {
  // Stop the rig only if this run started it: a developer's running rig stays up.
  if (globalThis.__LK_RIG_STARTED_HERE__) {
    execFileSync('bash', [path.join(RIG_SCRIPTS, 'down.sh')], { stdio: 'inherit' });
  }
  await stopServers();
}
