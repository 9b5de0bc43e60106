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
import { ApplicationFailure, TypedSearchAttributes } from '@temporalio/common';
import { leaseResourceTypes, newLease, type Lease, type LeaseUpdateRequest, type NewLeaseRequest } from '../domain/lease';
import { markdownText } from '../domain/markdown';
import { LeaseEndKey, LeaseStartKey, LeaseStatusKey, ProjectIdKey, ResourceTypesKey } from '../domain/search-attributes';
import { admitLease, deleteLease, leaseWorkflowId, leaseWorkflowType, staticSummary, updateLease, type LeaseWorkflow } from '../../workflows/lease/messages';
import { ApiError, STATUS_BY_FAILURE_TYPE } from './errors';

export interface LeaseCommandOptions {
  client: Client;
  taskQueue: string;
  /** How long a REST call waits for the lease workflow. */
  timeoutMs: number;
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
  const hex = createHash('sha256').update(JSON.stringify([projectId, userId, key])).digest('hex');
  // Shaped as a version-4-like UUID so that clients matching UUIDs accept it.
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-${((parseInt(hex[16], 16) & 3) | 8).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

/** gRPC statuses with which Temporal refuses a request as such: INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE. */
const GRPC_REFUSED_REQUEST = new Set([3, 9, 11]);

function toApiError(err: unknown, timeoutMs: number): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof WorkflowUpdateFailedError && err.cause instanceof ApplicationFailure) {
    const status = STATUS_BY_FAILURE_TYPE[err.cause.type ?? ''];
    const details: unknown = err.cause.details?.[0];
    if (err.cause.type === 'OpenStackConfigError') return new ApiError(503, `OpenStack is not configured: ${err.cause.message}`);
    if (status) return new ApiError(status, err.cause.message, status, details && typeof details === 'object' ? (details as Record<string, unknown>) : undefined);
    return new ApiError(503, `the lease could not be changed: ${err.cause.message}`);
  }
  if (err instanceof WorkflowNotFoundError) return new ApiError(404, 'Lease not found');
  if (err instanceof WorkflowExecutionAlreadyStartedError) return new ApiError(409, 'a lease with this id already exists');
  if (err instanceof WorkflowUpdateRPCTimeoutOrCancelledError || isGrpcDeadlineError(err)) {
    return new ApiError(503, `the lease workflow did not answer within ${timeoutMs / 1000} s: is a leasekeeper worker running, and is the database up?`);
  }
  if (isGrpcServiceError(err)) {
    // The server refused the request itself (a payload or search attribute over its limits): not an outage.
    if (GRPC_REFUSED_REQUEST.has(err.code)) {
      return new ApiError(400, 'the workflow service refused the request: it is too large or holds a value it does not accept', 400, undefined, err);
    }
    return new ApiError(503, 'Temporal is unavailable: try again shortly', 503, undefined, err);
  }
  throw err;
}

async function withDeadline<T>(options: LeaseCommandOptions, fn: () => Promise<T>): Promise<T> {
  try {
    return await options.client.connection.withDeadline(Date.now() + options.timeoutMs, fn);
  } catch (err) {
    throw toApiError(err, options.timeoutMs);
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
    staticSummary: staticSummary(draft),
    staticDetails: `Lease ${draft.id} of project ${markdownText(draft.projectId)}, created by user ${markdownText(draft.userId)}.`,
    typedSearchAttributes: new TypedSearchAttributes([
      { key: LeaseStatusKey, value: draft.status },
      { key: ProjectIdKey, value: draft.projectId },
      { key: LeaseStartKey, value: new Date(draft.startMs) },
      { key: LeaseEndKey, value: new Date(draft.endMs) },
      { key: ResourceTypesKey, value: leaseResourceTypes(draft) },
    ]),
  });
  return withDeadline(options, () =>
    options.client.workflow.executeUpdateWithStart(admitLease, {
      args: [{ requestHash: hash }],
      // The same request retried is the same update: Temporal answers it once.
      updateId: `admit-${hash.slice(0, 32)}`,
      startWorkflowOperation: start,
    }),
  );
}

export async function changeLease(options: LeaseCommandOptions, leaseId: string, update: LeaseUpdateRequest): Promise<Lease> {
  return withDeadline(options, () => options.client.workflow.getHandle(leaseWorkflowId(leaseId)).executeUpdate(updateLease, { args: [update] }));
}

export async function removeLease(options: LeaseCommandOptions, leaseId: string): Promise<Lease> {
  return withDeadline(options, () => options.client.workflow.getHandle(leaseWorkflowId(leaseId)).executeUpdate(deleteLease));
}
