import { Client, Connection } from '@temporalio/client';
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { SearchAttributeType, TypedSearchAttributes, type SearchAttributePair } from '@temporalio/common';
import { msToTs, tsToMs } from '@temporalio/common/lib/time';
import { encodeSearchAttributeIndexedValueType } from '@temporalio/common/lib/search-attributes';
import { encodeUnifiedSearchAttributes } from '@temporalio/common/lib/converter/payload-search-attributes';
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
  /** How long until the namespace took a lease-like workflow carrying every lease attribute (awaitLeaseSearchAttributes). */
  readyAfterMs: number;
}

const isNotFound = (err: unknown) => (err as { code?: number }).code === 5; // gRPC NOT_FOUND

/** Runs `step` until it succeeds; failures `retryable` says are passing are tried again until `deadline` (epoch ms). */
async function untilDone<T>(deadline: number, step: () => Promise<T>, retryable: (err: unknown) => boolean = () => true): Promise<T> {
  for (;;) {
    try {
      return await step();
    } catch (err) {
      if (!retryable(err) || Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
}

/**
 * Prepares a namespace on an existing Temporal for leasekeeper (`npm run temporal:prepare`):
 * creates it with the retention if it is missing (or sets the retention when asked), registers
 * the lease search attributes, and waits until Temporal takes lease workflows carrying them
 * (awaitLeaseSearchAttributes), since a server's namespace caches take a few seconds to see new
 * attributes. Safe to run again.
 */
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
  // A namespace just made is not seen at once by every frontend; a refusal (e.g. over SQL visibility's limits) is final.
  const added = await untilDone(deadline, () => ensureSearchAttributes(connection, namespace), isNotFound);
  if (added.length > 0) changes.push(`registered search attributes ${added.join(', ')}`);
  await awaitLeaseSearchAttributes(connection, namespace, Math.max(0, deadline - Date.now()));
  return { changes, retentionDays: (retentionMs ?? 0) / 86_400_000, readyAfterMs: Date.now() - started };
}

/** The workflow type (and the prefix of the id and task queue) of the probes awaitLeaseSearchAttributes makes. */
export const NAMESPACE_PROBE = 'leasekeeper-namespace-probe';

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

type WorkflowTaskCommand = NonNullable<Parameters<Connection['workflowService']['respondWorkflowTaskCompleted']>[0]['commands']>[number];
/** temporal.api.enums.v1.CommandType's value (in @temporalio/proto, which the client does not re-export). */
const COMMAND_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES = 13 as NonNullable<WorkflowTaskCommand['commandType']>;

/**
 * Waits until the namespace takes lease workflows carrying every lease search attribute, wherever
 * Temporal checks them, and resolves with the ms it waited. On temporal-server (1.29) every service
 * has a namespace cache of its own, each refreshed on its own (every 2 s), and each checks the
 * attributes at its own step of a lease's life:
 * - the frontend, a visibility query on them (Web UI, lists) and the start carrying them (the
 *   lease's Update-with-Start): "Namespace … has no mapping defined for search attribute …";
 * - the history service, the workflow's own upserts when it completes a workflow task (each
 *   transition, the admission included): refused, it fails that task, and the Update-with-Start
 *   that waits on it gets FAILED_PRECONDITION "… due to unexpected workflow task failure."
 * So a frontend that already takes the attributes says nothing of the history service. One probe
 * tries all three: a query naming every attribute, a start carrying them, and a workflow task that
 * upserts them (completed here: the probe runs on a task queue of its own, which no worker polls).
 * Probes are deleted at once. Throws after `timeoutMs`, with what Temporal still refused.
 */
export async function awaitLeaseSearchAttributes(connection: Connection, namespace: string, timeoutMs = 30_000): Promise<number> {
  const started = Date.now();
  try {
    const deadline = started + timeoutMs;
    await untilDone(deadline, () => probeLeaseSearchAttributes(connection, namespace, deadline));
  } catch (err) {
    throw new Error(`Temporal's namespace ${namespace} did not take a workflow carrying the lease search attributes within ${timeoutMs / 1000} s: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  return Date.now() - started;
}

/** One probe (awaitLeaseSearchAttributes): resolves if every step took the lease attributes, throws with the first refusal. */
async function probeLeaseSearchAttributes(connection: Connection, namespace: string, deadline: number): Promise<void> {
  const client = new Client({ connection, namespace });
  // Every lease attribute in one query: it answers once the frontend's namespace cache has them all.
  await client.workflow.count(LEASE_SEARCH_ATTRIBUTES.map((key) => `${key.name} IS NULL`).join(' AND ')).catch(rethrowCause);
  const workflowId = `${NAMESPACE_PROBE}-${randomUUID()}`;
  const identity = `${NAMESPACE_PROBE}@${os.hostname()}`;
  const attributes = probeAttributes();
  // A start is taken once the history service has its shards (a server just started still takes them).
  await client.workflow.start(NAMESPACE_PROBE, { workflowId, taskQueue: workflowId, typedSearchAttributes: attributes, workflowExecutionTimeout: '1 minute' }).catch(rethrowCause);
  try {
    const task = await connection.withDeadline(Math.max(Date.now() + 1_000, Math.min(Date.now() + 10_000, deadline)), () =>
      connection.workflowService.pollWorkflowTaskQueue({ namespace, taskQueue: { name: workflowId }, identity }),
    );
    if (!task.taskToken?.length) throw new Error('the probe\'s workflow task was not handed out');
    await connection.workflowService.respondWorkflowTaskCompleted({
      namespace,
      identity,
      taskToken: task.taskToken,
      commands: [{ commandType: COMMAND_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES, upsertWorkflowSearchAttributesCommandAttributes: { searchAttributes: { indexedFields: encodeUnifiedSearchAttributes(undefined, attributes) } } }],
    });
    // Refused, the history service failed the task (and scheduled another) instead of recording the upsert.
    const { history } = await connection.workflowService.getWorkflowExecutionHistoryReverse({ namespace, execution: { workflowId }, maximumPageSize: 10 });
    const events = history?.events ?? [];
    if (!events.some((event) => event.upsertWorkflowSearchAttributesEventAttributes)) {
      const failure = events.find((event) => event.workflowTaskFailedEventAttributes)?.workflowTaskFailedEventAttributes?.failure?.message;
      throw new Error(`the history service failed the probe's workflow task${failure ? `: ${failure}` : ''}`);
    }
  } finally {
    // Still running, it leaves visibility with it at once (a completed one would stay listed until retention).
    await connection.workflowService.deleteWorkflowExecution({ namespace, workflowExecution: { workflowId } }).catch(() => undefined);
  }
}

/** The client wraps the server's answer (e.g. "Failed to count workflows"): the server's words say what it refused. */
function rethrowCause(err: unknown): never {
  throw err instanceof Error && err.cause instanceof Error ? err.cause : err;
}

/**
 * Why Temporal last failed a workflow task of `workflowId` (the failure message of its latest
 * WorkflowTaskFailed event, e.g. "BadSearchAttributes: Namespace default has no mapping defined for
 * search attribute LeaseStatus"), or undefined when its latest events have none.
 */
export async function lastWorkflowTaskFailure(workflowService: Connection['workflowService'], namespace: string, workflowId: string): Promise<string | undefined> {
  const { history } = await workflowService.getWorkflowExecutionHistoryReverse({ namespace, execution: { workflowId }, maximumPageSize: 10 });
  return history?.events?.find((event) => event.workflowTaskFailedEventAttributes)?.workflowTaskFailedEventAttributes?.failure?.message ?? undefined;
}
