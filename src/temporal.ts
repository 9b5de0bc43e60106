import { Client, Connection } from '@temporalio/client';
import { randomUUID } from 'node:crypto';
import { SearchAttributeType, TypedSearchAttributes, type SearchAttributePair } from '@temporalio/common';
import { msToTs, tsToMs } from '@temporalio/common/lib/time';
import { encodeSearchAttributeIndexedValueType } from '@temporalio/common/lib/search-attributes';
import type { Config } from './config';
import { LEASE_SEARCH_ATTRIBUTES } from './domain/search-attributes';

export function connectTemporal(config: Pick<Config, 'temporal'>): { connection: Connection; client: Client } {
  // Lazy: the API starts (and reports 503 on /healthz) even while Temporal is unreachable.
  const connection = Connection.lazy({ address: config.temporal.address });
  const client = new Client({ connection, namespace: config.temporal.namespace });
  return { connection, client };
}

/** A connection to a Temporal frontend that answers (one try; callers that wait for a starting server retry it). */
export async function connectAnswering(address: string): Promise<Connection> {
  const connection = await Connection.connect({ address, connectTimeout: 10_000 });
  try {
    await connection.workflowService.getSystemInfo({});
    return connection;
  } catch (err) {
    await connection.close();
    throw err;
  }
}

/**
 * Registers the lease search attributes on a server that lacks them (docker-compose, a shared
 * cluster); the dev server gets them at start. Returns the names it added.
 */
export async function ensureSearchAttributes(connection: Connection, namespace: string): Promise<string[]> {
  const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace });
  const missing = LEASE_SEARCH_ATTRIBUTES.filter((key) => !(key.name in (customAttributes ?? {})));
  if (missing.length === 0) return [];
  await connection.operatorService.addSearchAttributes({
    namespace,
    searchAttributes: Object.fromEntries(missing.map((key) => [key.name, encodeSearchAttributeIndexedValueType(key.type)!])),
  });
  return missing.map((key) => key.name);
}

export interface PreparedNamespace {
  /** What was done, one line each (nothing when everything was already there). */
  changes: string[];
  retentionDays: number;
  /** How long until the namespace took a start carrying every lease attribute (the namespace cache, the history service's shards). */
  readyAfterMs: number;
}

const isNotFound = (err: unknown) => (err as { code?: number }).code === 5; // gRPC NOT_FOUND

/**
 * Prepares a namespace on an existing Temporal for leasekeeper (`npm run temporal:prepare`):
 * creates it with the retention if it is missing (or sets the retention when asked), registers
 * the lease search attributes, and waits until a visibility query on them answers, since a
 * server's namespace cache takes a few seconds to see new attributes. Safe to run again.
 */
/** The workflow type and task queue of the start prepareNamespace makes to prove a namespace ready (nothing runs it). */
const NAMESPACE_PROBE = 'leasekeeper-namespace-probe';

/** A value of its type for every lease search attribute. */
function probeAttributes(): TypedSearchAttributes {
  return new TypedSearchAttributes(
    LEASE_SEARCH_ATTRIBUTES.map((key): SearchAttributePair => {
      switch (key.type) {
        case SearchAttributeType.DATETIME:
          return { key, value: new Date(0) };
        case SearchAttributeType.KEYWORD_LIST:
          return { key, value: ['probe'] };
        default:
          return { key, value: 'probe' };
      }
    }),
  );
}

export async function prepareNamespace(connection: Connection, options: { namespace: string; retentionDays?: number; timeoutMs?: number }): Promise<PreparedNamespace> {
  const { namespace } = options;
  const changes: string[] = [];
  let retentionMs: number | undefined;
  try {
    const described = await connection.workflowService.describeNamespace({ namespace });
    retentionMs = tsToMs(described.config?.workflowExecutionRetentionTtl);
    if (options.retentionDays !== undefined && retentionMs !== options.retentionDays * 86_400_000) {
      await connection.workflowService.updateNamespace({ namespace, config: { workflowExecutionRetentionTtl: msToTs(options.retentionDays * 86_400_000) } });
      changes.push(`retention of namespace ${namespace}: ${retentionMs / 86_400_000} → ${options.retentionDays} days`);
      retentionMs = options.retentionDays * 86_400_000;
    }
  } catch (err) {
    if (!isNotFound(err)) throw err;
    retentionMs = (options.retentionDays ?? 30) * 86_400_000;
    await connection.workflowService.registerNamespace({ namespace, workflowExecutionRetentionPeriod: msToTs(retentionMs) });
    changes.push(`created namespace ${namespace} (retention ${retentionMs / 86_400_000} days)`);
  }
  const started = Date.now();
  const deadline = started + (options.timeoutMs ?? 60_000);
  /** Runs `step` until it succeeds; failures `retryable` says are passing are tried again until the deadline. */
  const untilDone = async <T>(step: () => Promise<T>, retryable: (err: unknown) => boolean): Promise<T> => {
    for (;;) {
      try {
        return await step();
      } catch (err) {
        if (!retryable(err) || Date.now() > deadline) throw err;
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    }
  };
  // A namespace just made is not seen at once by every frontend; a refusal (e.g. over SQL visibility's limits) is final.
  const added = await untilDone(() => ensureSearchAttributes(connection, namespace), isNotFound);
  if (added.length > 0) changes.push(`registered search attributes ${added.join(', ')}`);
  // Every lease attribute in one query: it answers once the namespace cache has them all.
  const client = new Client({ connection, namespace });
  await untilDone(() => client.workflow.count(LEASE_SEARCH_ATTRIBUTES.map((key) => `${key.name} IS NULL`).join(' AND ')), () => true);
  // A query is the frontend and visibility alone; a lease's start needs the history service too (a
  // server just started still takes its shards) and the attributes in the start's own path. A start
  // carrying every lease attribute proves both; the probe (never run: no worker polls its queue) is deleted at once.
  const probeId = `leasekeeper-namespace-probe-${randomUUID()}`;
  await untilDone(
    () => client.workflow.start(NAMESPACE_PROBE, { workflowId: probeId, taskQueue: NAMESPACE_PROBE, typedSearchAttributes: probeAttributes(), workflowIdConflictPolicy: 'USE_EXISTING' }),
    () => true,
  );
  await connection.workflowService.deleteWorkflowExecution({ namespace, workflowExecution: { workflowId: probeId } });
  return { changes, retentionDays: (retentionMs ?? 0) / 86_400_000, readyAfterMs: Date.now() - started };
}
