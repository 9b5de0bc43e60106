/**
 * `npm start`: the whole dev stack in one terminal — PostgreSQL, Temporal (dev server, or temporal-server
 * on PostgreSQL with LK_TEMPORAL=server; with its Web UI),
 * the loopback OpenStack with its hosts enrolled, worker and API — each waited for in turn, logs
 * prefixed by process. Ctrl-C or SIGTERM stops everything it started, in reverse order, by PID.
 * Set DATABASE_URL or TEMPORAL_ADDRESS to use existing servers instead of starting local ones;
 * OS_CLOUD or OS_AUTH_URL to use a cloud instead of the rig, LK_OPENSTACK=none for no cloud.
 */
import path from 'node:path';
import { loadConfigOrExit } from '../src/config';
import { createPool } from '../src/db/pool';
import { KeystoneSession, loadCredentials, openStackClients, type PasswordCredentials } from '../src/openstack';
import { REPO_ROOT } from '../src/paths';
import { HostInventory } from '../src/resources/physical-host/inventory';
import { addHost } from '../src/resources/shared/aggregates';
import { bringUpRig, chooseCloud, enrolRigHosts, RIG_ADMIN_CLOUD, rigDir, stopRig, type CloudChoice, type Rig } from '../dev-stack/openstack-rig';
import { ensureCluster, ensureDatabase, startPostgres } from '../dev-stack/postgres-local';
import { killStaleProcesses, ManagedProcess, waitUntil } from '../dev-stack/processes';
import { startLocalTemporal } from '../dev-stack/local-temporal';
import { waitForTemporal } from '../dev-stack/temporal-dev-server';

const config = loadConfigOrExit();
const DEFAULT_WORKER_METRICS_PORT = 9464;
const pidDir = path.join(config.dataDir, 'run');
const started: ManagedProcess[] = [];
const say = (msg: string) => process.stdout.write(`leasekeeper| ${msg}\n`);
let stopping: Promise<void> | undefined;
let cloud: CloudChoice;
try {
  cloud = chooseCloud(process.env, process.getuid?.() === 0);
} catch (err) {
  say(`start refused: ${(err as Error).message}`);
  process.exit(2);
}
/** up.sh while it runs; the rig once it is up. */
let rigStarting: ManagedProcess | undefined;
let rig: Rig | undefined;
let rigAdmin: RigAdmin | undefined;

/** Stops everything started, once, however many signals or failures ask for it. */
async function stopAll(exitCode: number): Promise<never> {
  stopping ??= (async () => {
    say('stopping...');
    // Reverse order: the API stops taking requests, the worker drains, then the servers go.
    for (const proc of [...started].reverse()) {
      await proc.stop(proc.options.name === 'worker' ? config.worker.shutdownGraceMs + 5_000 : 15_000);
    }
    if (rigStarting?.running) {
      // Interrupted while coming up: whatever up.sh started goes too.
      await rigStarting.stop(20_000);
      await stopRig(rigDir());
    } else if (rig?.startedHere) {
      await stopRig(rig.dir);
    } else if (rig) {
      say(`the loopback OpenStack was running before this start: left running (stop: bash scripts/openstack/down.sh)`);
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

  const childEnv: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: config.database.url, TEMPORAL_ADDRESS: config.temporal.address };
  // The rig comes up meanwhile (about a minute when it is not running yet).
  const rigReady = cloud.kind === 'rig' ? bringUpRig((proc) => (rigStarting = proc)) : undefined;
  rigReady?.catch(() => undefined); // its failure is reported where it is awaited
  if (cloud.kind === 'none') {
    say(`OpenStack: none (${cloud.why}); leases that need a cloud are refused (503 naming the setting)`);
    delete childEnv.OS_CLOUD; // no cloud means none, even with one in the environment
    delete childEnv.OS_AUTH_URL;
  }
  if (cloud.kind === 'external') say(`OpenStack: ${cloud.what}`);

  if (config.database.external) {
    say(`PostgreSQL: using DATABASE_URL (${new URL(config.database.url).host})`);
  } else {
    const dataDir = path.join(config.dataDir, 'postgres');
    ensureCluster(dataDir);
    supervise(startPostgres({ dataDir, port: config.database.localPort, durable: true, echo: true, pidDir }));
  }
  const databaseReady = ensureDatabase(config.database.url);
  let temporalReady: Promise<void>;
  if (config.temporal.external) {
    say(`Temporal: using TEMPORAL_ADDRESS (${config.temporal.address})`);
    temporalReady = waitForTemporal(config.temporal.address, config.temporal.namespace);
  } else {
    if (config.temporal.topology === 'server') say('Temporal: temporal-server on PostgreSQL (LK_TEMPORAL=server)');
    temporalReady = startLocalTemporal({
      topology: config.temporal.topology,
      cacheDir: config.cacheDir,
      stateDir: config.dataDir,
      port: config.temporal.devServerPort,
      uiPort: config.temporal.uiPort,
      namespace: config.temporal.namespace,
      databaseUrl: config.database.url,
      echo: true,
      pidDir,
    }, supervise);
  }
  await Promise.all([databaseReady, temporalReady]);
  say(`PostgreSQL and Temporal ready after ${elapsed()}`);
  if (rigReady) {
    rig = await rigReady;
    rigStarting = undefined;
    Object.assign(childEnv, rig.env);
    rigAdmin = await signInAsRigAdmin(rig);
    // blazar --os-auth-type none then books for the rig admin's project, whose servers the lease's hosts take.
    if (config.api.authStrategy === 'noauth' && !process.env.LK_NOAUTH_PROJECT_ID) childEnv.LK_NOAUTH_PROJECT_ID = rigAdmin.projectId;
    say(`OpenStack (loopback rig, ${rig.startedHere ? 'started' : 'already running'}) ready after ${elapsed()}`);
  }

  // The worker's Prometheus metrics (and the Temporal SDK's on the next port), unless set otherwise.
  childEnv.LK_WORKER_METRICS_PORT ||= String(DEFAULT_WORKER_METRICS_PORT);
  const node = process.execPath;
  const worker = supervise(new ManagedProcess({ name: 'worker', command: node, args: [path.join(REPO_ROOT, 'dist/worker/main.js')], env: childEnv, echo: true, pidDir }));
  supervise(new ManagedProcess({ name: 'api', command: node, args: [path.join(REPO_ROOT, 'dist/src/api/main.js')], env: childEnv, echo: true, pidDir }));
  await worker.waitForLine(/"msg":"worker ready"/, 60_000);

  const api = `http://${config.api.host}:${config.api.port}`;
  await waitUntil('API', async () => {
    const res = await fetch(`${api}/healthz`);
    if (res.status !== 200) throw new Error(`healthz ${res.status}: ${await res.text()}`);
  }, 60_000, 250);

  if (rig && rigAdmin) await enrol(api, rig, rigAdmin);

  say(`healthy after ${elapsed()}`);
  say(`API (Blazar v1):  ${api}/v1   health: ${api}/healthz`);
  say(`Calendar page:    ${api}/calendar/`);
  if (!config.temporal.external) say(`Temporal Web UI:  http://127.0.0.1:${config.temporal.uiPort}/namespaces/${config.temporal.namespace}/workflows`);
  const metricsPort = Number(childEnv.LK_WORKER_METRICS_PORT);
  say(`Metrics:          ${api}/metrics (API)   http://${config.worker.metrics?.host ?? '127.0.0.1'}:${metricsPort}/metrics (worker; the Temporal SDK's on :${metricsPort + 1})`);
  say(`Temporal gRPC:    ${config.temporal.address}    PostgreSQL: ${new URL(config.database.url).host}`);
  if (rig) {
    say(`OpenStack:        export OS_CLIENT_CONFIG_FILE=${rig.env.OS_CLIENT_CONFIG_FILE}   (clouds ${RIG_ADMIN_CLOUD}, leasekeeper-project-a, leasekeeper-project-b)`);
    say(`next: book a host, boot a server on it, end the lease: README.md, "Try it"`);
  }
  say('Ctrl-C stops everything.');
}

interface RigAdmin {
  credentials: PasswordCredentials;
  token: string;
  projectId: string;
}

async function signInAsRigAdmin(up: Rig): Promise<RigAdmin> {
  const credentials = loadCredentials({ cloud: RIG_ADMIN_CLOUD, cloudsFiles: [up.env.OS_CLIENT_CONFIG_FILE], env: {} }) as PasswordCredentials;
  const { token, projectId } = await new KeystoneSession({ credentials }).authenticate();
  return { credentials, token, projectId };
}

/** The rig's hosts into leasekeeper's pool, through the API, as the admin. */
async function enrol(api: string, up: Rig, admin: RigAdmin): Promise<void> {
  const headers: Record<string, string> = config.api.authStrategy === 'keystone' ? { 'x-auth-token': admin.token } : {};
  const addToPool = async (hosts: string[]) => {
    // A new rig is a new cloud: hosts enrolled by an earlier run go into its pool aggregate.
    const pool = createPool(config, 'leasekeeper-start');
    try {
      const nova = openStackClients({ credentials: admin.credentials }).nova;
      const aggregate = await new HostInventory(pool, () => nova, config.inventory).freepool();
      for (const host of hosts) await addHost(nova, aggregate, host);
    } finally {
      await pool.end();
    }
  };
  const { enrolled, already } = await enrolRigHosts(api, up, headers, addToPool);
  say(`hosts in the pool: ${[...enrolled.map((h) => `${h} (enrolled now)`), ...already].join(', ')}`);
}

main().catch((err: unknown) => {
  say(`start failed: ${err instanceof Error ? err.message : String(err)}`);
  void stopAll(1);
});
