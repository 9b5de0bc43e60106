/**
 * A Temporal set up without what leasekeeper needs (its namespace; the lease search attributes):
 * a create is a 503 that names the missing piece and the fix, not a bare "unavailable" or a 500.
 */
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { Client } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time';
import pino from 'pino';
import { createApp } from '../src/api/app';
import { pluginRegistry } from '../src/domain/resource-plugin';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { blazarHostReservation } from './support/builders';
import { apiClient, eventually, inSeconds, useTestStack } from './support/stack';

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
    expect(res.body.error_message).toBe(`Temporal has no namespace "${namespace}" (TEMPORAL_NAMESPACE): create it with \`temporal operator namespace create --namespace ${namespace}\`, or name one it has`);
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
    expect(res.body.error_message).toMatch(/^Temporal's namespace has no search attribute (LeaseStatus|ProjectId|LeaseStart|LeaseEnd|ResourceTypes), which every lease workflow carries: /);
  }, 60_000);
});
