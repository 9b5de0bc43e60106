/**
 * `npm start`: the whole dev stack in one terminal — PostgreSQL, Temporal dev server (with Web UI),
 * worker and API — each waited for in turn, logs prefixed by process. Ctrl-C or SIGTERM stops
 * everything it started, in reverse order, by PID. Set DATABASE_URL or TEMPORAL_ADDRESS to use
 * existing servers instead of starting local ones.
 */
import path from 'node:path';
import { loadConfigOrExit } from '../src/config';
import { REPO_ROOT } from '../src/paths';
import { ensureCluster, ensureDatabase, startPostgres } from './lib/postgres-local';
import { killStaleProcesses, ManagedProcess, waitUntil } from './lib/processes';
import { startTemporalDevServer, temporalBinary, waitForTemporal } from './lib/temporal-dev-server';

const config = loadConfigOrExit();
const pidDir = path.join(config.dataDir, 'run');
const started: ManagedProcess[] = [];
const say = (msg: string) => process.stdout.write(`leasekeeper| ${msg}\n`);
let stopping: Promise<void> | undefined;

/** Stops everything started, once, however many signals or failures ask for it. */
async function stopAll(exitCode: number): Promise<never> {
  stopping ??= (async () => {
    say('stopping...');
    // Reverse order: the API stops taking requests, the worker drains, then the servers go.
    for (const proc of [...started].reverse()) {
      await proc.stop(proc.options.name === 'worker' ? config.worker.shutdownGraceMs + 5_000 : 15_000);
    }
    say('all stopped');
  })();
  await stopping;
  process.exit(exitCode);
}

function supervise(proc: ManagedProcess): ManagedProcess {
  started.push(proc);
  void proc.exited.then((code) => {
    if (!stopping) {
      say(`${proc.options.name} exited unexpectedly (code ${code}); stopping the stack`);
      void stopAll(1);
    }
  });
  return proc;
}

async function main(): Promise<void> {
  const t0 = performance.now();
  const elapsed = () => `${((performance.now() - t0) / 1000).toFixed(1)} s`;
  process.on('SIGINT', () => void stopAll(0));
  process.on('SIGTERM', () => void stopAll(0));
  killStaleProcesses(pidDir, say);

  const childEnv = { ...process.env, DATABASE_URL: config.database.url, TEMPORAL_ADDRESS: config.temporal.address };

  if (config.database.external) {
    say(`PostgreSQL: using DATABASE_URL (${new URL(config.database.url).host})`);
  } else {
    const dataDir = path.join(config.dataDir, 'postgres');
    ensureCluster(dataDir);
    supervise(startPostgres({ dataDir, port: config.database.localPort, durable: true, echo: true, pidDir }));
  }
  if (config.temporal.external) {
    say(`Temporal: using TEMPORAL_ADDRESS (${config.temporal.address})`);
  } else {
    supervise(startTemporalDevServer({
      binary: temporalBinary(config.cacheDir),
      dbFile: path.join(config.dataDir, 'temporal.db'),
      port: config.temporal.devServerPort,
      uiPort: config.temporal.uiPort,
      namespace: config.temporal.namespace,
      echo: true,
      pidDir,
    }));
  }
  await Promise.all([ensureDatabase(config.database.url), waitForTemporal(config.temporal.address, config.temporal.namespace)]);
  say(`PostgreSQL and Temporal ready after ${elapsed()}`);

  const node = process.execPath;
  const worker = supervise(new ManagedProcess({ name: 'worker', command: node, args: [path.join(REPO_ROOT, 'dist/worker/main.js')], env: childEnv, echo: true, pidDir }));
  supervise(new ManagedProcess({ name: 'api', command: node, args: [path.join(REPO_ROOT, 'dist/src/api/main.js')], env: childEnv, echo: true, pidDir }));
  await worker.waitForLine(/"msg":"worker ready"/, 60_000);

  const api = `http://${config.api.host}:${config.api.port}`;
  await waitUntil('API', async () => {
    const res = await fetch(`${api}/healthz`);
    if (res.status !== 200) throw new Error(`healthz ${res.status}: ${await res.text()}`);
  }, 60_000, 250);

  say(`healthy after ${elapsed()}`);
  say(`API (Blazar v1):  ${api}/v1   health: ${api}/healthz`);
  if (!config.temporal.external) say(`Temporal Web UI:  http://127.0.0.1:${config.temporal.uiPort}/namespaces/${config.temporal.namespace}/workflows`);
  say(`Temporal gRPC:    ${config.temporal.address}    PostgreSQL: ${new URL(config.database.url).host}`);
  say('Ctrl-C stops everything.');
}

main().catch((err: unknown) => {
  say(`start failed: ${err instanceof Error ? err.message : String(err)}`);
  void stopAll(1);
});
