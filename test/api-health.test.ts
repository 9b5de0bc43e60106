import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { Client, Connection } from '@temporalio/client';
import { Worker } from '@temporalio/worker';
import { Pool } from 'pg';
import pino from 'pino';
import { createApp } from '../src/api/app';
import { pluginRegistry } from '../src/domain/resource-plugin';
import { createWorker } from '../worker/create-worker';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { apiJson, json } from '../dev-stack/http';
import { freePort } from '../dev-stack/ports';
import { connectTestTemporal, testConfig, testWorkflows } from '../dev-stack/temporal-connection';

const silent = pino({ level: 'silent' });

async function listen(app: ReturnType<typeof createApp>): Promise<{ server: Server; url: string }> {
  return new Promise((resolve) => {
    const server = app.listen(0, '127.0.0.1', () => resolve({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }));
  });
}

describe('API health and error bodies', () => {
  // Every deep check runs its own round trip here (0 s interval): the first sees no worker, the next one does.
  const config = testConfig({ LK_HEALTH_TIMEOUT_MS: '1500', LK_HEALTH_DEEP_INTERVAL_SECONDS: '0' });
  const database = useMigratedTestDatabase();
  let temporal: Awaited<ReturnType<typeof connectTestTemporal>>;
  let server: Server;
  let url: string;

  beforeAll(async () => {
    temporal = await connectTestTemporal(config);
    ({ server, url } = await listen(createApp({ config, log: silent, pool: database().pool, connection: temporal.connection, client: temporal.client, types: pluginRegistry([]) })));
  });
  afterAll(async () => {
    server?.close();
    await temporal?.close();
  });

  it('answers 200 when Temporal and PostgreSQL are reachable', async () => {
    const res = await fetch(`${url}/healthz`);
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body.status).toBe('ok');
    expect(body.checks.temporal).toMatchObject({ ok: true, detail: { server_version: expect.any(String) } });
    expect(body.checks.database.ok).toBe(true);
  });

  it('deep check: 503 while no worker polls, 200 once one does', async () => {
    const withoutWorker = await fetch(`${url}/healthz?deep=1`);
    expect(withoutWorker.status).toBe(503);
    expect((await json(withoutWorker)).checks.worker.ok).toBe(false);

    const worker: Worker = await createWorker({ connection: temporal.nativeConnection, config, deps: { pool: database().pool, plugins: pluginRegistry([]) }, workflows: testWorkflows() });
    const body = await worker.runUntil(async () => {
      const res = await fetch(`${url}/healthz?deep=true`);
      expect(res.status).toBe(200);
      return json(res);
    });
    expect(body.checks.worker).toMatchObject({ ok: true, detail: { schemaVersion: expect.any(Number) } });
  });

  it('answers 503 naming the dependency that is down', async () => {
    const deadPort = await freePort();
    const deadPool = new Pool({ connectionString: `postgres://nobody@127.0.0.1:${deadPort}/none`, connectionTimeoutMillis: 1000 });
    const deadConnection = Connection.lazy({ address: `127.0.0.1:${await freePort()}` });
    const app = createApp({ config, log: silent, pool: deadPool, connection: deadConnection, client: new Client({ connection: deadConnection }), types: pluginRegistry([]) });
    const { server: downServer, url: downUrl } = await listen(app);
    try {
      const res = await fetch(`${downUrl}/healthz`);
      expect(res.status).toBe(503);
      const body = await json(res);
      expect(body.status).toBe('unavailable');
      expect(body.checks.database).toMatchObject({ ok: false, error: expect.stringContaining('ECONNREFUSED') });
      expect(body.checks.temporal.ok).toBe(false);
    } finally {
      downServer.close();
      await deadPool.end();
    }
  });

  it('runs at most one deep check per interval: 100 callers share one workflow', async () => {
    const shared = testConfig({ LK_HEALTH_TIMEOUT_MS: '1000', LK_HEALTH_DEEP_INTERVAL_SECONDS: '60' }); // a task queue no worker polls
    const { server: sharedServer, url: sharedUrl } = await listen(createApp({ config: shared, log: silent, pool: database().pool, connection: temporal.connection, client: temporal.client, types: pluginRegistry([]) }));
    try {
      const answers = await Promise.all(Array.from({ length: 100 }, () => fetch(`${sharedUrl}/healthz?deep=1`).then(json)));
      const again = await fetch(`${sharedUrl}/healthz?deep=1`).then(json);
      expect(new Set([...answers, again].map((body) => JSON.stringify(body.checks.worker))).size).toBe(1);
      expect(again.checks.worker.ok).toBe(false);
      const started = await temporal.client.workflow.count(`TaskQueue = '${shared.temporal.taskQueue}'`);
      expect(started.count).toBe(1);
    } finally {
      sharedServer.close();
    }
  });

  it("answers unknown routes with Blazar's error body", async () => {
    const res = await fetch(`${url}/v1/nothing-here`);
    expect(res.status).toBe(404);
    expect(await apiJson(res)).toEqual({ error_code: 404, error_message: 'The resource could not be found: GET /v1/nothing-here', error_name: 404 });
  });

  it('answers malformed JSON with 400, not 500', async () => {
    const res = await fetch(`${url}/v1/leases`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"lease": ' });
    expect(res.status).toBe(400);
    expect(await apiJson(res)).toEqual({ error_code: 400, error_message: 'Malformed JSON in request body', error_name: 400 });
  });
});
