import { randomUUID } from 'node:crypto';
import { msToTs } from '@temporalio/common/lib/time';
import { Worker } from '@temporalio/worker';
import { readMigrations } from '../src/db/migrate';
import { LEASE_SEARCH_ATTRIBUTES } from '../src/domain/search-attributes';
import { ensureSearchAttributes } from '../src/temporal';
import { pluginRegistry } from '../src/domain/resource-plugin';
import { createWorker } from '../worker/create-worker';
import type { selfCheckWorkflow } from '../workflows';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { connectTestTemporal, testConfig, testWorkflows } from '../dev-stack/temporal-connection';

describe('a workflow on the real Temporal dev server, through the real worker', () => {
  const config = testConfig();
  const database = useMigratedTestDatabase();
  let temporal: Awaited<ReturnType<typeof connectTestTemporal>>;
  let worker: Worker;

  beforeAll(async () => {
    temporal = await connectTestTemporal(config);
    worker = await createWorker({ connection: temporal.nativeConnection, config, deps: { pool: database().pool, plugins: pluginRegistry([]) }, workflows: testWorkflows() });
  });
  afterAll(async () => {
    await temporal?.close();
  });

  it('runs the self-check workflow end to end and returns the schema version from PostgreSQL', async () => {
    const workflowId = `selfcheck-${randomUUID()}`;
    const result = await worker.runUntil(
      temporal.client.workflow.execute<typeof selfCheckWorkflow>('selfCheckWorkflow', { taskQueue: config.temporal.taskQueue, workflowId }),
    );
    const latest = readMigrations().at(-1)?.version;
    expect(result).toEqual({ schemaVersion: latest, taskQueue: config.temporal.taskQueue });

    const history = await temporal.client.workflow.getHandle(workflowId).fetchHistory();
    const activity = history.events?.find((e) => e.activityTaskScheduledEventAttributes)?.activityTaskScheduledEventAttributes;
    expect(activity?.activityType?.name).toBe('checkDatabase');
  });

  it('has the lease search attributes registered on the server', async () => {
    const { customAttributes } = await temporal.connection.operatorService.listSearchAttributes({ namespace: config.temporal.namespace });
    for (const key of LEASE_SEARCH_ATTRIBUTES) {
      expect(Object.keys(customAttributes ?? {})).toContain(key.name);
    }
  });

  it('registers missing search attributes on a server that lacks them, once', async () => {
    const namespace = `lk-sa-${randomUUID().slice(0, 8)}`;
    await temporal.connection.workflowService.registerNamespace({ namespace, workflowExecutionRetentionPeriod: msToTs(86_400_000) });
    const names = LEASE_SEARCH_ATTRIBUTES.map((key) => key.name);
    expect((await ensureSearchAttributes(temporal.connection, namespace)).sort()).toEqual([...names].sort());
    expect(await ensureSearchAttributes(temporal.connection, namespace)).toEqual([]);
  });
});
