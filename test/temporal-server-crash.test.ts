/**
 * Temporal killed with -9 mid-lease and started again on the same state and port — the dev server
 * on its SQLite file, or with LK_TEMPORAL=server temporal-server on its PostgreSQL (a cluster of its
 * own here, as in production): the worker process and the API reconnect by themselves, and the
 * leases carry on. A lease whose start fell due while the server was down starts once it is back;
 * an active one ends. While it is down, reads still answer (they come from PostgreSQL) and changes
 * get a 503 with Blazar's error body.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startLocalTemporal } from '../dev-stack/local-temporal';
import { ensureCluster, localUrl, startPostgres } from '../dev-stack/postgres-local';
import type { ManagedProcess } from '../dev-stack/processes';
import { loadConfig } from '../src/config';
import { freePort, freeTemporalServerPort } from '../dev-stack/ports';
import { apiClient, eventually, inSeconds, useTestStack } from '../dev-stack/stack';
import { startWorkerProcess } from '../dev-stack/worker-process';

const config = loadConfig();
const topology = config.temporal.topology;

describe(`Temporal (LK_TEMPORAL=${topology}) killed with -9 mid-lease`, () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lk-temporal-crash-'));
  fs.chmodSync(tmp, 0o755); // the postgres system user must reach its data dir below
  let port: number;
  let temporalDatabase: ManagedProcess | undefined;
  let databaseUrl: string;
  let server: ManagedProcess | undefined;
  let worker: ManagedProcess | undefined;

  /** Starts Temporal on the same state every time; the first process is the server itself. */
  const startServer = async () => {
    const started: ManagedProcess[] = [];
    await startLocalTemporal({ topology, cacheDir: config.cacheDir, stateDir: tmp, port, namespace: config.temporal.namespace, databaseUrl }, (proc) => started.push(proc));
    return started[0];
  };

  beforeAll(async () => {
    port = await freeTemporalServerPort();
    databaseUrl = process.env.DATABASE_URL!; // the dev server does not use it
    if (topology === 'server') {
      const dataDir = path.join(tmp, 'temporal-postgres');
      ensureCluster(dataDir);
      const pgPort = await freePort();
      temporalDatabase = startPostgres({ dataDir, port: pgPort, durable: false });
      databaseUrl = localUrl(pgPort, 'postgres');
    }
    server = await startServer();
  }, 90_000);
  const stack = useTestStack(() => ({ noWorker: true, env: { TEMPORAL_ADDRESS: `127.0.0.1:${port}`, LK_API_WORKFLOW_TIMEOUT_MS: '3000' } }), { beforeStop: async () => worker?.stop() });
  beforeAll(async () => {
    worker = await startWorkerProcess(stack());
  });

  afterAll(async () => {
    await server?.stop();
    await temporalDatabase?.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('leases continue after a restart on the same state; meanwhile reads answer, host leases are admitted and changes get 503', async () => {
    const api = apiClient(stack().url);
    const lease = async (id: string) => (await api('GET', `/v1/leases/${id}`)).body.lease;
    const until = (id: string, status: string, timeoutMs: number) => eventually(async () => ((await lease(id)).status === status ? true : undefined), timeoutMs, 250);

    /** The lease a create answered with; any other answer fails the test with its status and body. */
    const created = async (body: Record<string, unknown>) => {
      const res = await api('POST', '/v1/leases', body);
      expect({ status: res.status, body: res.status === 201 ? 'a lease' : res.body }).toEqual({ status: 201, body: 'a lease' });
      return res.body.lease;
    };
    const active = await created({ name: 'active-through-crash', start_date: inSeconds(1), end_date: inSeconds(30) });
    const pending = await created({ name: 'due-during-crash', start_date: inSeconds(10), end_date: inSeconds(40) });
    await until(active.id, 'ACTIVE', 30_000);

    server!.child.kill('SIGKILL');
    await server!.exited;

    expect((await lease(pending.id)).status).toBe('PENDING');
    // Admitted while Temporal is down (the API books it in PostgreSQL alone); its workflow is owed a start.
    const whileDown = await created({ name: 'while-down', start_date: inSeconds(60), end_date: inSeconds(120) });
    const deleteRefused = await api('DELETE', `/v1/leases/${pending.id}`);
    expect(deleteRefused.status).toBe(503);

    // Down past the pending lease's start.
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, Date.parse(`${pending.start_date}Z`) - Date.now() + 2_000)));
    expect((await lease(pending.id)).status).toBe('PENDING');
    const restarted = Date.now();
    server = await startServer();

    await until(pending.id, 'ACTIVE', 60_000);
    console.log(`Temporal (${topology}) restarted: the overdue lease was ACTIVE ${Date.now() - restarted} ms after the server was started again`);
    expect(worker!.child.exitCode).toBeNull(); // the worker rode out the outage

    await until(active.id, 'TERMINATED', 60_000);
    await until(pending.id, 'TERMINATED', 60_000);
    for (const id of [active.id, pending.id]) {
      expect((await lease(id)).events.map((e: { status: string }) => e.status)).toEqual(['DONE', 'DONE', 'DONE']);
    }
    // The lease admitted while the server was down got its workflow once it was back, and is deleted through it.
    const handle = stack().temporal.client.workflow.getHandle(`lease-${whileDown.id}`);
    await eventually(async () => ((await handle.describe().catch(() => undefined))?.status.name === 'RUNNING' ? true : undefined), 60_000, 250);
    expect((await api('DELETE', `/v1/leases/${whileDown.id}`)).status).toBe(204);
    expect((await api('GET', '/v1/leases?name=while-down')).body.leases).toEqual([]);
  }, 240_000);
});
