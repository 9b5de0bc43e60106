/**
 * The API's side of the lease workflows: create (Update-with-Start), update and delete, each under
 * a deadline so that a REST call never hangs when no worker is polling, and every Temporal failure
 * turned into an ApiError with Blazar's error body.
 */
import { createHash } from 'node:crypto';
import {
  isGrpcDeadlineError,
  isGrpcServiceError,
  WithStartWorkflowOperation,
  WorkflowExecutionAlreadyStartedError,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  WorkflowUpdateRPCTimeoutOrCancelledError,
  type Client,
} from '@temporalio/client';
import { ApplicationFailure, NamespaceNotFoundError, WorkflowIdConflictPolicy } from '@temporalio/common';
import { newLease, type Lease, type LeaseUpdateRequest, type NewLeaseRequest } from '../domain/lease';
import { createdOrigin, leaseWorkflowLabels, type LeaseOutbox } from '../outbox';
import {
  admitLease, approveLease, deleteLease, denyLease, hostsChanged, leaseWorkflowId, leaseWorkflowType, lendCapacity, reclaimCapacity, updateLease,
  type ApprovalAnswer, type LeaseWorkflow, type LeaseWorkflowInput, type LendRequest, type ReclaimRequest,
} from '../../workflows/lease/messages';
import { maintenanceWindowWorkflowId, maintenanceWindowWorkflowType, windowWithdrawn, type MaintenanceWindowInput } from '../../workflows/maintenance/messages';
import { uuidShaped } from '../domain/blazar-format';
import { markdownText } from '../domain/markdown';
import { lastWorkflowTaskFailure } from '../temporal';
import { claimIdempotencyKey, type KeyedCreate } from '../db/idempotency-keys';
import type { Pool } from '../db/pool';
import { ApiError, failureAsApiError } from './errors';

export interface LeaseCommandOptions {
  client: Client;
  taskQueue: string;
  /** How long a REST call waits for the lease workflow. */
  timeoutMs: number;
  /** Owed starts of leases the API admitted: a change to one whose workflow is not started yet starts it. */
  outbox?: LeaseOutbox;
  /** Told after a lease's workflow took a change (the power planner's look-now); none: nobody is. */
  changed?: () => void;
}

/**
 * Runs `fn` on the lease's workflow. A lease the API admitted a moment ago may have none yet (its
 * start is owed): it is started now, and `fn` runs again.
 */
async function onLeaseWorkflow<T>(options: LeaseCommandOptions, leaseId: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (!(err instanceof WorkflowNotFoundError) || !options.outbox || !(await options.outbox.startOwed(leaseId))) throw err;
    return fn();
  }
}

/** The hash that ties an Idempotency-Key to one request body. */
export function requestHash(projectId: string, body: unknown): string {
  return createHash('sha256').update(JSON.stringify([projectId, body])).digest('hex');
}

/**
 * A lease id derived from (project, user, Idempotency-Key): a retried request reaches the same
 * workflow; another user of the project using the same key gets a lease of their own.
 */
export function idempotentLeaseId(projectId: string, userId: string, key: string): string {
  return uuidShaped(createHash('sha256').update(JSON.stringify([projectId, userId, key])).digest('hex'), 4);
}

/** A series id derived from (project, user, Idempotency-Key), as idempotentLeaseId: a retried series create finds the series made first. */
export function idempotentSeriesId(projectId: string, userId: string, key: string): string {
  return uuidShaped(createHash('sha256').update(JSON.stringify(['series', projectId, userId, key])).digest('hex'), 4);
}

/**
 * Claims the user's Idempotency-Key for a lease create or a series create: the same key already
 * used for the other kind is a 409, as another body with the key is (their ids differ, so neither
 * would see the other's lease or series). Concurrent sends meet on the key's row: one kind wins.
 */
export async function claimKeyFor(pool: Pool, kind: KeyedCreate, projectId: string, userId: string, key: string): Promise<void> {
  const keyId = createHash('sha256').update(JSON.stringify(['key', projectId, userId, key])).digest('hex');
  if ((await claimIdempotencyKey(pool, keyId, kind)) !== kind) throw new ApiError(409, 'this Idempotency-Key was already used for a different request');
}

/** gRPC statuses with which Temporal refuses a request as such: INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE. */
const GRPC_REFUSED_REQUEST = new Set([3, 9, 11]);

/**
 * Temporal's words (temporal-server 1.29) for a search attribute that its namespace, or one of its
 * services' namespace caches, does not know, each naming the attribute:
 * - common/namespace/namespace.go, CustomSearchAttributesMapper.GetFieldName (the frontend, on a
 *   start's attributes; the history service, on a workflow's upserts) and GetAlias;
 * - common/searchattribute/validator.go, Validator.Validate (after the mapping).
 */
const UNKNOWN_SEARCH_ATTRIBUTE = [
  /has no mapping defined for search attribute (\S+)/,
  /has no mapping defined for field name (\S+)/,
  /search attribute (\S+) is not defined/,
  /unable to get (\S+) search attribute type/,
];

/**
 * The history service failed the workflow task an update was handed to (FAILED_PRECONDITION,
 * service/history/workflow/update/errors_failures.go); the workflow's history says why, e.g. a
 * lease's upsert of attributes its namespace cache does not know yet.
 */
const WORKFLOW_TASK_FAILED = 'Unable to perform workflow execution update due to unexpected workflow task failure.';

/** The search attribute a message of Temporal's says it does not know, if it says so. */
function unknownSearchAttribute(message: string): string | undefined {
  for (const pattern of UNKNOWN_SEARCH_ATTRIBUTE) {
    const named = pattern.exec(message)?.[1];
    if (named !== undefined) return named;
  }
  return undefined;
}

/** Whether Temporal refused an update because a workflow task failed (the cause is in the workflow's history). */
const isWorkflowTaskFailure = (err: unknown): boolean => isGrpcServiceError(err) && Number(err.code) === 9 /* FAILED_PRECONDITION */ && err.message.includes(WORKFLOW_TASK_FAILED);

/**
 * A Temporal failure as the API answers it. `workflowTaskFailure`: for isWorkflowTaskFailure, why
 * Temporal failed the workflow's task (lastWorkflowTaskFailure), when it could be read.
 */
export function toApiError(err: unknown, timeoutMs: number, workflowTaskFailure?: string): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof WorkflowUpdateFailedError && err.cause instanceof ApplicationFailure) {
    return failureAsApiError(err.cause) ?? new ApiError(503, `the lease could not be changed: ${err.cause.message}`);
  }
  if (err instanceof WorkflowNotFoundError) return new ApiError(404, 'Lease not found');
  if (err instanceof WorkflowExecutionAlreadyStartedError) return new ApiError(409, 'a lease with this id already exists');
  if (isPastDeadline(err)) return noAnswerInTime(timeoutMs);
  // Temporal set up without what leasekeeper needs: an operator's fix, named, not an outage to retry.
  if (err instanceof NamespaceNotFoundError) {
    return new ApiError(503, `Temporal has no namespace ${JSON.stringify(err.namespace)} (TEMPORAL_NAMESPACE): prepare it with \`TEMPORAL_NAMESPACE=${err.namespace} npm run temporal:prepare\` (or \`temporal operator namespace create --namespace ${err.namespace}\`), or name one it has`, 503, undefined, err);
  }
  if (isGrpcServiceError(err)) {
    // Missing, or registered a moment ago and not yet seen by every one of Temporal's services.
    const attribute = GRPC_REFUSED_REQUEST.has(err.code)
      ? unknownSearchAttribute(err.message) ?? (workflowTaskFailure !== undefined && isWorkflowTaskFailure(err) ? unknownSearchAttribute(workflowTaskFailure) : undefined)
      : undefined;
    if (attribute !== undefined) return missingSearchAttribute(attribute, err);
    // The server refused the request itself (a payload or search attribute over its limits): not an outage.
    if (GRPC_REFUSED_REQUEST.has(err.code)) {
      return new ApiError(400, 'the workflow service refused the request: it is too large or holds a value it does not accept', 400, undefined, err);
    }
    return new ApiError(503, 'Temporal is unavailable: try again shortly', 503, undefined, err);
  }
  throw err;
}

/** Temporal's namespace lacks a lease search attribute: the operator's fix, named. */
export function missingSearchAttribute(attribute: string, cause?: unknown): ApiError {
  return new ApiError(
    503,
    `Temporal's namespace has no search attribute ${attribute}, which every lease workflow carries: the worker registers the lease search attributes when it starts (with operator rights), or \`npm run temporal:prepare\` does, then try again`,
    503,
    undefined,
    cause,
  );
}

/** The workflow did not answer within the REST call's deadline. */
export const noAnswerInTime = (timeoutMs: number) =>
  new ApiError(503, `the lease workflow did not answer within ${timeoutMs / 1000} s: is a leasekeeper worker running, and is the database up?`);

const isPastDeadline = (err: unknown) => err instanceof WorkflowUpdateRPCTimeoutOrCancelledError || isGrpcDeadlineError(err);

/**
 * A lend that outlasted the REST call's wait goes on under the lease's lock (a lend of many hosts on a
 * slow Nova takes minutes): the 503 says so and where its lending will show, since a lend asked again would lend more hosts.
 */
export const lendStillRunning = (timeoutMs: number, leaseId: string) =>
  new ApiError(
    503,
    `the lend did not answer within ${timeoutMs / 1000} s and is still running: its lending shows in the lease (GET /v1/leases/${leaseId}, the reservation's lendings) once made. Look there before lending again: another lend lends more hosts.`,
  );

/**
 * `workflowId`: the workflow `fn` talks to, whose history says why Temporal failed its task, if that was the refusal.
 * `pastDeadline`: the answer when the workflow did not answer in time (noAnswerInTime unless given).
 */
async function withDeadline<T>(options: LeaseCommandOptions, fn: () => Promise<T>, workflowId?: string, pastDeadline?: () => ApiError): Promise<T> {
  const { client } = options;
  try {
    return await client.connection.withDeadline(Date.now() + options.timeoutMs, fn);
  } catch (err) {
    if (pastDeadline && isPastDeadline(err)) throw pastDeadline();
    const taskFailure = workflowId !== undefined && isWorkflowTaskFailure(err)
      ? await client.connection.withDeadline(Date.now() + 2_000, () => lastWorkflowTaskFailure(client.workflowService, client.options.namespace, workflowId)).catch(() => undefined)
      : undefined;
    throw toApiError(err, options.timeoutMs, taskFailure);
  }
}

/** Starts the lease's workflow and admits the lease in one call; answers with the admitted lease. */
export async function createLease(options: LeaseCommandOptions, request: NewLeaseRequest, hash: string, idempotent: boolean): Promise<Lease> {
  const draft = newLease(request); // Blazar's date rules, checked before anything starts (400)
  const start = new WithStartWorkflowOperation<LeaseWorkflow>(leaseWorkflowType, {
    workflowId: leaseWorkflowId(request.id),
    taskQueue: options.taskQueue,
    args: [{ request, requestHash: hash }],
    workflowIdConflictPolicy: idempotent ? 'USE_EXISTING' : 'FAIL',
    ...leaseWorkflowLabels(draft, createdOrigin(draft)),
  });
  const lease = await withDeadline(
    options,
    () =>
      options.client.workflow.executeUpdateWithStart(admitLease, {
        args: [{ requestHash: hash }],
        // The same request retried is the same update: Temporal answers it once.
        updateId: `admit-${hash.slice(0, 32)}`,
        startWorkflowOperation: start,
      }),
    leaseWorkflowId(request.id),
  );
  options.changed?.();
  return lease;
}

export async function changeLease(options: LeaseCommandOptions, leaseId: string, update: LeaseUpdateRequest): Promise<Lease> {
  const lease = await withDeadline(options, () => onLeaseWorkflow(options, leaseId, () => options.client.workflow.getHandle(leaseWorkflowId(leaseId)).executeUpdate(updateLease, { args: [update] })));
  options.changed?.();
  return lease;
}

/** Lending (issue 43): a lend or a reclaim of the lease's hosts; answers the lease once its workflow recorded it. */
export async function lendOrReclaim(options: LeaseCommandOptions, leaseId: string, request: { lend: LendRequest } | { reclaim: ReclaimRequest }): Promise<Lease> {
  const handle = () => options.client.workflow.getHandle(leaseWorkflowId(leaseId));
  return withDeadline(
    options,
    () => onLeaseWorkflow(options, leaseId, () => ('lend' in request ? handle().executeUpdate(lendCapacity, { args: [request.lend] }) : handle().executeUpdate(reclaimCapacity, { args: [request.reclaim] }))),
    undefined,
    'lend' in request ? () => lendStillRunning(options.timeoutMs, leaseId) : undefined,
  );
}

/** An admin's approve or deny of a lease waiting for approval; answers the lease once its workflow acted on it. */
export async function answerApproval(options: LeaseCommandOptions, leaseId: string, outcome: 'approve' | 'deny', answer: ApprovalAnswer): Promise<Lease> {
  const update = outcome === 'approve' ? approveLease : denyLease;
  return withDeadline(options, () => onLeaseWorkflow(options, leaseId, () => options.client.workflow.getHandle(leaseWorkflowId(leaseId)).executeUpdate(update, { args: [answer] })));
}

/**
 * Deletes the lease and waits until it is gone (its bookings freed, its row removed), as Blazar's
 * delete is synchronous. A lease no workflow runs (a history row imported from Blazar, or a lease
 * whose workflow closed without it) gets one that carries it as it stands and deletes it, as any
 * other: Temporal would otherwise answer "not found" for a lease the API lists, and the row would
 * stay for good. `recorded`: the lease's row as it stands now. `past-deadline`: no answer in time, which the caller tells apart by the lease's
 * row (a cleanup still running in a slow cloud, or no worker at all).
 */
export async function removeLease(options: LeaseCommandOptions, leaseId: string, recorded: () => Promise<Lease | undefined>): Promise<'gone' | 'past-deadline'> {
  try {
    await options.client.connection.withDeadline(Date.now() + options.timeoutMs, () =>
      onLeaseWorkflow(options, leaseId, () => options.client.workflow.getHandle(leaseWorkflowId(leaseId)).executeUpdate(deleteLease)).catch(async (err: unknown) => {
        if (!(err instanceof WorkflowNotFoundError)) throw err;
        // Read again: a delete that just finished closed the workflow, and its lease is gone already.
        const lease = await recorded();
        if (lease) await deleteWithWorkflowOfItsOwn(options, lease);
      }),
    );
    return 'gone';
  } catch (err) {
    if (isPastDeadline(err)) return 'past-deadline';
    throw toApiError(err, options.timeoutMs);
  }
}

/**
 * The input of a workflow that takes over a recorded lease as it stands (`carried`): imported from
 * Blazar, or found without a workflow. `source` names it in the request hash (no admit update ever
 * comes for a carried lease: the hash only has to differ from any request's).
 */
export function carriedLeaseInput(lease: Lease, source: Record<string, string>): LeaseWorkflowInput {
  return {
    request: {
      id: lease.id,
      name: lease.name,
      projectId: lease.projectId,
      userId: lease.userId,
      start: lease.startMs,
      end: lease.endMs,
      ...(lease.beforeEndMs !== undefined ? { beforeEnd: lease.beforeEndMs } : {}),
      reservations: lease.reservations.map(({ id, resource_type, params }) => ({ id, resource_type, params })),
      requestedMs: lease.createdMs,
    },
    requestHash: requestHash(lease.projectId, source),
    carried: lease,
  };
}

/**
 * Starts a workflow for a lease that has none running, carrying the lease as recorded, and deletes
 * it through it (Update-with-Start): the delete frees what the lease holds and removes its row as
 * for any lease. Concurrent deletes meet in the one workflow (USE_EXISTING).
 */
function deleteWithWorkflowOfItsOwn(options: LeaseCommandOptions, lease: Lease): Promise<Lease> {
  const start = new WithStartWorkflowOperation<LeaseWorkflow>(leaseWorkflowType, {
    workflowId: leaseWorkflowId(lease.id),
    taskQueue: options.taskQueue,
    args: [carriedLeaseInput(lease, { deletedWithoutWorkflow: lease.id })],
    workflowIdConflictPolicy: 'USE_EXISTING',
    ...leaseWorkflowLabels(lease, `found ${markdownText(lease.status)} with no workflow running it, started to delete it`),
  });
  return options.client.workflow.executeUpdateWithStart(deleteLease, { args: [], startWorkflowOperation: start });
}

/**
 * Tells the leases booked on these hosts that the hosts changed (an operator took them out of
 * admission): each heals its reservations as after a failure. A lease whose workflow is gone has
 * nothing to heal; answers how many were told.
 */
export async function tellLeasesHostsChanged(options: LeaseCommandOptions, leaseIds: string[], hostIds: string[]): Promise<number> {
  let told = 0;
  for (const leaseId of leaseIds) {
    try {
      await withDeadline(options, () => onLeaseWorkflow(options, leaseId, () => options.client.workflow.getHandle(leaseWorkflowId(leaseId)).signal(hostsChanged, { hostIds })));
      told++;
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) throw err;
    }
  }
  return told;
}

/** Starts a maintenance window's workflow (idempotent by window id: a retry finds the one running). */
export async function startMaintenanceWindow(options: LeaseCommandOptions, input: MaintenanceWindowInput, summary: string): Promise<void> {
  await withDeadline(options, () =>
    options.client.workflow.start(maintenanceWindowWorkflowType, {
      workflowId: maintenanceWindowWorkflowId(input.windowId),
      taskQueue: options.taskQueue,
      args: [input],
      workflowIdConflictPolicy: WorkflowIdConflictPolicy.USE_EXISTING,
      staticSummary: summary,
    }),
  );
}

/** Tells a window's workflow that the window was withdrawn; a workflow already finished has nothing to do. */
export async function tellWindowWithdrawn(options: LeaseCommandOptions, windowId: string): Promise<void> {
  try {
    await withDeadline(options, () => options.client.workflow.getHandle(maintenanceWindowWorkflowId(windowId)).signal(windowWithdrawn));
  } catch (err) {
    // withDeadline names a finished or unknown workflow 404.
    if (!(err instanceof ApiError && err.status === 404)) throw err;
  }
}
