/**
 * A Temporal set up without what leasekeeper needs (its namespace; the lease search attributes):
 * a create is a 503 that names the missing piece and the fix, not a bare "unavailable" or a 500.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { Client } from '@temporalio/client';
import { msToTs, tsToMs } from '@temporalio/common/lib/time';
import pino from 'pino';
import { createApp } from '../src/api/app';
import { toApiError } from '../src/api/lease-commands';
import { pluginRegistry } from '../src/domain/resource-plugin';
import { LEASE_SEARCH_ATTRIBUTES, LeaseStatusKey } from '../src/domain/search-attributes';
import { REPO_ROOT } from '../src/paths';
import { awaitLeaseSearchAttributes, ensureSearchAttributes, NAMESPACE_PROBE } from '../src/temporal';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { blazarHostReservation } from '../dev-stack/fixtures/builders';
import { apiClient, eventually, inSeconds, useTestStack } from '../dev-stack/stack';

describe('Temporal without what leasekeeper needs', () => {
  const stack = useTestStack({ noWorker: true });
  const servers: Server[] = [];
  afterAll(async () => {
    for (const server of servers) await new Promise((resolve) => server.close(resolve));
  });

  /** The API of the test stack, its Temporal client on `namespace`. */
  async function apiOn(namespace: string) {
    const { config, db, temporal } = stack();
    const app = createApp({
      config,
      log: pino({ level: 'silent' }),
      pool: db.pool,
      connection: temporal.connection,
      client: new Client({ connection: temporal.connection, namespace }),
      types: pluginRegistry([physicalHostPlugin({ pool: db.pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })]),
    });
    const server = await new Promise<Server>((resolve) => {
      const s = app.listen(0, '127.0.0.1', () => resolve(s));
    });
    servers.push(server);
    return apiClient(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  }
  const create = (api: ReturnType<typeof apiClient>) =>
    api('POST', '/v1/leases', { name: `lease-${randomUUID().slice(0, 8)}`, start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [blazarHostReservation()] });

  it('names a namespace Temporal does not have', async () => {
    const namespace = `missing-${randomUUID().slice(0, 8)}`;
    const res = await create(await apiOn(namespace));
    expect(res.status).toBe(503);
    expect(res.body.error_message).toBe(`Temporal has no namespace "${namespace}" (TEMPORAL_NAMESPACE): prepare it with \`TEMPORAL_NAMESPACE=${namespace} npm run temporal:prepare\` (or \`temporal operator namespace create --namespace ${namespace}\`), or name one it has`);
  });

  it('names the search attribute a namespace lacks', async () => {
    const namespace = `bare-${randomUUID().slice(0, 8)}`;
    await stack().temporal.connection.workflowService.registerNamespace({ namespace, workflowExecutionRetentionPeriod: msToTs(86_400_000) });
    const api = await apiOn(namespace);
    // The frontend knows a new namespace once its namespace cache has been refreshed.
    const res = await eventually(async () => {
      const answer = await create(api);
      return answer.body?.error_message?.startsWith('Temporal has no namespace') ? undefined : answer;
    }, 30_000);
    expect(res.status).toBe(503);
    expect(res.body.error_message).toMatch(/^Temporal's namespace has no search attribute (LeaseStatus|ProjectId|LeaseStart|LeaseEnd|ResourceTypes), which every lease workflow carries: .*`npm run temporal:prepare`/);
  }, 60_000);

  describe('a refusal naming an attribute Temporal does not know (yet), in its words (temporal-server 1.29)', () => {
    /** A gRPC error as the client hands it over (code, message, details, metadata). */
    const grpcError = (code: number, message: string) => Object.assign(new Error(message), { code, details: message, metadata: {} });
    const missing = (attribute: string) => `Temporal's namespace has no search attribute ${attribute}, which every lease workflow carries: the worker registers the lease search attributes when it starts (with operator rights), or \`npm run temporal:prepare\` does, then try again`;
    const refused = 'the workflow service refused the request: it is too large or holds a value it does not accept';
    const answer = (err: Error, taskFailure?: string) => {
      const { status, message } = toApiError(err, 3000, taskFailure);
      return { status, message };
    };

    it('answers 503 naming the attribute, whichever of Temporal\'s services refused it', () => {
      // The frontend, on the start's attributes (common/namespace/namespace.go; common/searchattribute/validator.go).
      expect(answer(grpcError(3, 'Namespace default has no mapping defined for search attribute LeaseStatus'))).toEqual({ status: 503, message: missing('LeaseStatus') });
      expect(answer(grpcError(3, 'search attribute ProjectId is not defined'))).toEqual({ status: 503, message: missing('ProjectId') });
      expect(answer(grpcError(3, 'unable to get LeaseEnd search attribute type: invalid search attribute type'))).toEqual({ status: 503, message: missing('LeaseEnd') });
      expect(answer(grpcError(3, 'Namespace default has no mapping defined for field name Keyword01'))).toEqual({ status: 503, message: missing('Keyword01') });
      // The history service, on the admission's upsert: it fails the workflow task, the update gets
      // FAILED_PRECONDITION, and why is in the workflow's history.
      const taskFailed = grpcError(9, 'Unable to perform workflow execution update due to unexpected workflow task failure.');
      expect(answer(taskFailed, 'BadSearchAttributes: Namespace default has no mapping defined for search attribute ResourceTypes')).toEqual({ status: 503, message: missing('ResourceTypes') });
    });

    it('keeps the 400 for a request Temporal refuses as such', () => {
      expect(answer(grpcError(3, 'search attribute ProjectId value size 3000 exceeds size limit 2048'))).toEqual({ status: 400, message: refused });
      expect(answer(grpcError(3, 'total size of search attributes 50000 exceeds size limit 40960'))).toEqual({ status: 400, message: refused });
      expect(answer(grpcError(3, 'Blob data size exceeds limit.'))).toEqual({ status: 400, message: refused });
      const taskFailed = grpcError(9, 'Unable to perform workflow execution update due to unexpected workflow task failure.');
      expect(answer(taskFailed, 'BadSearchAttributes: search attribute ProjectId value size 3000 exceeds size limit 2048')).toEqual({ status: 400, message: refused });
      expect(answer(taskFailed)).toEqual({ status: 400, message: refused }); // its history could not be read
      expect(answer(grpcError(14, 'Namespace default has no mapping defined for search attribute LeaseStatus'))).toEqual({ status: 503, message: 'Temporal is unavailable: try again shortly' });
    });

    it('waits for a namespace to take lease workflows with the attributes, and says so when it does not', async () => {
      const namespace = `unready-${randomUUID().slice(0, 8)}`;
      const { connection } = stack().temporal;
      await connection.workflowService.registerNamespace({ namespace, workflowExecutionRetentionPeriod: msToTs(86_400_000) });
      await expect(awaitLeaseSearchAttributes(connection, namespace, 3_000)).rejects.toThrow(
        new RegExp(`^Temporal's namespace ${namespace} did not take a workflow carrying the lease search attributes within 3 s: .*(LeaseStatus|ProjectId|LeaseStart|LeaseEnd|ResourceTypes|not found)`),
      );
      await eventually(async () => ((await ensureSearchAttributes(connection, namespace).catch(() => undefined)) ? true : undefined), 15_000, 250);
      await expect(awaitLeaseSearchAttributes(connection, namespace, 30_000)).resolves.toBeLessThan(30_000);
      // Its probes are gone.
      const client = new Client({ connection, namespace });
      await eventually(async () => ((await client.workflow.count(`WorkflowType = "${NAMESPACE_PROBE}"`)).count === 0 ? true : undefined), 15_000, 250);
    }, 60_000);
  });

  describe('npm run temporal:prepare', () => {
    /** The built command, as an operator runs it, against the test Temporal. */
    const prepare = (namespace: string, ...args: string[]) =>
      new Promise<{ code: number | null; output: string }>((resolve) => {
        const env = { ...process.env, TEMPORAL_ADDRESS: stack().config.temporal.address, TEMPORAL_NAMESPACE: namespace };
        const child = spawn(process.execPath, [path.join(REPO_ROOT, 'dist', 'scripts', 'prepare-temporal.js'), ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
        let output = '';
        child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
        child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
        child.on('exit', (code) => resolve({ code, output }));
      });

    it('creates the namespace with its retention and the lease search attributes, ready for queries; again, it changes nothing', async () => {
      const namespace = `prepared-${randomUUID().slice(0, 8)}`;
      const first = await prepare(namespace, '--retention-days', '3');
      expect(first.code).toBe(0);
      expect(first.output).toContain(`temporal:prepare: created namespace ${namespace} (retention 3 days)`);
      expect(first.output).toContain('temporal:prepare: registered search attributes LeaseStatus, ProjectId, LeaseStart, LeaseEnd, ResourceTypes');
      expect(first.output).toMatch(new RegExp(`namespace ${namespace} ready \\(retention 3 days; a lease workflow with its search attributes could start after \\d+ ms\\)`));
      const { connection } = stack().temporal;
      const described = await connection.workflowService.describeNamespace({ namespace });
      expect(tsToMs(described.config?.workflowExecutionRetentionTtl)).toBe(3 * 86_400_000);
      const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace });
      expect(Object.keys(customAttributes ?? {})).toEqual(expect.arrayContaining(LEASE_SEARCH_ATTRIBUTES.map((key) => key.name)));
      // Ready means ready: a query on the lease attributes answers at once.
      const client = new Client({ connection, namespace });
      await expect(client.workflow.count('LeaseStatus = "ACTIVE" AND ProjectId = "p"')).resolves.toMatchObject({ count: 0 });
      // And a workflow carrying the lease attributes starts at once; the start that proved it was deleted.
      const started = await client.workflow.start('someWorkflow', { workflowId: `ready-${namespace}`, taskQueue: 'nobody-polls', typedSearchAttributes: [{ key: LeaseStatusKey, value: 'PENDING' }] });
      await started.terminate('checked');
      await eventually(async () => ((await client.workflow.count(`WorkflowType = "${NAMESPACE_PROBE}"`)).count === 0 ? true : undefined), 15_000, 250);

      const again = await prepare(namespace);
      expect(again.code).toBe(0);
      expect(again.output).toContain(`temporal:prepare: namespace ${namespace} was already prepared`);
      const longer = await prepare(namespace, '--retention-days', '7');
      expect(longer.output).toContain(`temporal:prepare: retention of namespace ${namespace}: 3 → 7 days`);
    }, 90_000);

    it('refuses a bad retention and an unreachable Temporal in one line, with exit code 1', async () => {
      const bad = await prepare('whatever', '--retention-days', '0');
      expect(bad).toEqual({ code: 1, output: 'temporal:prepare: --retention-days: expected a whole number of days, 1 to 3650\n' });
      const unreachable = await new Promise<{ code: number | null; output: string }>((resolve) => {
        const child = spawn(process.execPath, [path.join(REPO_ROOT, 'dist', 'scripts', 'prepare-temporal.js')], { env: { ...process.env, TEMPORAL_ADDRESS: '127.0.0.1:9' }, stdio: ['ignore', 'pipe', 'pipe'] });
        let output = '';
        child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
        child.on('exit', (code) => resolve({ code, output }));
      });
      expect(unreachable.code).toBe(1);
      expect(unreachable.output).toMatch(/^temporal:prepare: .+\n$/);
    }, 30_000);
  });
});
