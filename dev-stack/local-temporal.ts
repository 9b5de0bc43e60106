/**
 * A local Temporal in either topology, for `npm start`, the tests and the benchmarks:
 * - dev: the CLI's dev server on a SQLite file (with its Web UI), the default;
 * - server: temporal-server on PostgreSQL (the production topology), its Web UI beside it, its two
 *   databases on the PostgreSQL server `databaseUrl` names (npm start: leasekeeper's own; the
 *   tests and benchmarks: a cluster of its own), the namespace prepared as `npm run temporal:prepare` does.
 */
import path from 'node:path';
import { connectAnswering, prepareNamespace } from '../src/temporal';
import { ensureDatabase } from './postgres-local';
import type { ManagedProcess } from './processes';
import { waitUntil } from './processes';
import { startTemporalDevServer, temporalBinary, waitForTemporal } from './temporal-dev-server';
import { setupTemporalSchema, standardServerPorts, startTemporalServer, temporalServerBinaries, type TemporalDatabase } from './temporal-server';

export type TemporalTopology = 'dev' | 'server';

export interface LocalTemporalOptions {
  topology: TemporalTopology;
  cacheDir: string;
  /** The dev server's SQLite file, or temporal-server's generated config, goes here. */
  stateDir: string;
  /** The frontend's gRPC port; temporal-server's others are Temporal's layout around it (standardServerPorts). */
  port: number;
  /** The Web UI's port; headless when absent. */
  uiPort?: number;
  namespace: string;
  /** server topology: a PostgreSQL server for Temporal's databases (its login; any database in the URL). */
  databaseUrl: string;
  echo?: boolean;
  pidDir?: string;
}

/**
 * Starts Temporal and resolves once its namespace answers. Every process is handed to `started` as
 * soon as it runs, so that the caller can stop it even when a later step fails.
 */
export async function startLocalTemporal(options: LocalTemporalOptions, started: (proc: ManagedProcess) => void): Promise<void> {
  const address = `127.0.0.1:${options.port}`;
  if (options.topology === 'dev') {
    started(startTemporalDevServer({
      binary: temporalBinary(options.cacheDir),
      dbFile: path.join(options.stateDir, 'temporal.db'),
      port: options.port,
      uiPort: options.uiPort ?? 0,
      headless: options.uiPort === undefined,
      namespace: options.namespace,
      echo: options.echo,
      pidDir: options.pidDir,
    }));
    await waitForTemporal(address, options.namespace);
    return;
  }
  const ports = standardServerPorts(options.port);
  const allPorts = Object.values(ports) as number[];
  if (Math.min(...allPorts) < 1 || Math.max(...allPorts) > 32_767) {
    // Its members' ports go into a PostgreSQL smallint column: it would exit at start.
    throw new Error(`temporal-server on port ${options.port}: LK_TEMPORAL=server needs a Temporal port between 301 and 32761 (it uses ${ports.frontendMembership}…${ports.worker} around it)`);
  }
  const binaries = temporalServerBinaries(options.cacheDir);
  const database = temporalDatabase(options.databaseUrl);
  await ensureDatabase(options.databaseUrl); // the PostgreSQL server accepts connections
  await setupTemporalSchema(binaries.sqlTool, database);
  const processes = startTemporalServer({
    binaries,
    rootDir: path.join(options.stateDir, 'temporal-server'),
    database,
    ports,
    uiPort: options.uiPort,
    defaultNamespace: options.namespace,
    echo: options.echo,
    pidDir: options.pidDir,
  });
  processes.forEach(started);
  const exitedEarly = processes[0].exited.then((code) => {
    throw new Error(`temporal-server exited (code ${code}) while starting:\n${processes[0].tail()}`);
  });
  const connected = waitUntil('temporal-server', () => connectAnswering(address), 60_000, 300).catch((err: Error) => {
    throw new Error(`${err.message}\n${processes[0].tail()}`);
  });
  exitedEarly.catch(() => undefined); // a later exit is the supervisor's to report
  const connection = await Promise.race([connected, exitedEarly]);
  try {
    await prepareNamespace(connection, { namespace: options.namespace });
  } finally {
    await connection.close();
  }
}

/** Temporal's PostgreSQL login, taken from leasekeeper's database URL. */
export function temporalDatabase(databaseUrl: string): TemporalDatabase {
  const url = new URL(databaseUrl);
  return {
    host: url.hostname,
    port: Number(url.port || 5432),
    user: decodeURIComponent(url.username),
    password: decodeURIComponent(url.password),
  };
}
