import { ApplicationFailure } from '@temporalio/common';
import type { ErrorRequestHandler, RequestHandler } from 'express';
import { ZodError, type z } from 'zod';
import { LeaseErrorType } from '../domain/lease';
import { databaseDataError, isDatabaseUnavailable, isLostRace, violatedUniqueConstraint } from '../db/pool';
import { OpenStackConfigError, OpenStackError, publicMessage } from '../openstack/errors';
import { PowerError } from '../power/errors';
import type { Logger } from '../log';
import { describeIssues, requestWording } from './lease-schemas';
import { requestIdOf, requestLog } from './request-id';

/**
 * An error with Blazar's error body: `{"error_code": 404, "error_message": "...", "error_name": 404}`.
 * python-blazarclient prints `error_message` for any status >= 400.
 */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly errorName: string | number = status,
    /** Extra, machine-readable fields (e.g. `earliest_start`) beside Blazar's three. */
    readonly extra?: Record<string, unknown>,
    /** What went wrong inside, for the log only (callers get `message`). */
    cause?: unknown,
  ) {
    super(message, cause === undefined ? undefined : { cause });
  }
}

/** A 503 for something busy a moment (another request holds what this one needs): answered with Retry-After. */
export class BusyError extends ApiError {
  constructor(
    message: string,
    readonly retryAfterSeconds = 1,
  ) {
    super(503, message);
  }
}

/**
 * A request's input (body, query, parameters) checked by its schema in our wording, or a 400 naming
 * the first problem; `prefix` places the fields inside the request (`reservations[0]`).
 */
export function parseRequest<S extends z.ZodType>(schema: S, input: unknown, prefix = ''): z.output<S> {
  const result = schema.safeParse(input, { error: requestWording });
  if (!result.success) throw new ApiError(400, describeIssues(result.error, prefix));
  return result.data;
}

/** HTTP statuses for the lease rules' failure types (src/domain/lease.ts). */
export const STATUS_BY_FAILURE_TYPE: Record<string, number> = {
  [LeaseErrorType.invalid]: 400,
  [LeaseErrorType.conflict]: 409,
  [LeaseErrorType.duplicate]: 409,
  [LeaseErrorType.notFound]: 404,
  [LeaseErrorType.deleted]: 410,
  [LeaseErrorType.unavailable]: 503,
  [LeaseErrorType.policy]: 403,
  // The external policy service (Blazar's filter) could not be asked, and the deployment fails closed.
  PolicyServiceUnavailable: 503,
  // A resource type needs OpenStack and the deployment has no credentials: a missing dependency.
  OpenStackConfigError: 503,
};

/**
 * A lease failure (an ApplicationFailure of a type above) as the API answers it, with what it
 * carries (e.g. when the lease would fit); undefined for a failure of another type.
 */
export function failureAsApiError(failure: ApplicationFailure): ApiError | undefined {
  if (failure.type === 'OpenStackConfigError') return new ApiError(503, `OpenStack is not configured: ${failure.message}`);
  const status = STATUS_BY_FAILURE_TYPE[failure.type ?? ''];
  if (!status) return undefined;
  const details: unknown = failure.details?.[0];
  return new ApiError(status, failure.message, status, details && typeof details === 'object' ? (details as Record<string, unknown>) : undefined);
}

export function errorBody(status: number, message: string, errorName: string | number = status) {
  return { error_code: status, error_message: message, error_name: errorName };
}

export const notFoundRoute: RequestHandler = (req, _res, next) => {
  next(new ApiError(404, `The resource could not be found: ${req.method} ${req.path}`));
};

/**
 * Turns every error into Blazar's error body, with the request's id (`request_id`, also in every
 * log line of the request); anything unexpected is logged and becomes a 500 without internals.
 */
export function errorHandler(baseLog: Logger): ErrorRequestHandler {
  return (err: unknown, req, res, _next) => {
    const log = requestLog(res, baseLog);
    const requestId = requestIdOf(res);
    const send = (status: number, body: object) => res.status(status).json({ ...body, ...(requestId ? { request_id: requestId } : {}) });
    if (res.headersSent) {
      // An answer already under way (a streamed list) cannot turn into an error answer: the connection is
      // ended abruptly, so that the client sees a broken body rather than valid but truncated JSON.
      log.error({ err, method: req.method, path: req.path }, 'request failed after its answer began: connection ended');
      res.destroy();
      return;
    }
    if (err instanceof ApiError) {
      if (err instanceof BusyError) res.setHeader('Retry-After', String(err.retryAfterSeconds));
      if (err.cause !== undefined) log.error({ err: err.cause, method: req.method, path: req.path, status: err.status }, 'request failed');
      send(err.status, { ...errorBody(err.status, err.message, err.errorName), ...err.extra });
      return;
    }
    const failure = err instanceof ApplicationFailure ? failureAsApiError(err) : undefined;
    if (failure) {
      send(failure.status, { ...errorBody(failure.status, failure.message, failure.errorName), ...failure.extra });
      return;
    }
    if (isLostRace(err)) {
      // A booking run again each time it lost a race with concurrent ones (a deadlock, or another
      // took the resource first), until its tries ran out: nothing was written.
      log.warn({ err, method: req.method, path: req.path }, 'concurrent bookings of the same resources: refused after every retry');
      res.setHeader('Retry-After', '1');
      send(503, errorBody(503, 'too many concurrent bookings of the same resources: nothing was booked; try again'));
      return;
    }
    if (isDatabaseUnavailable(err)) {
      log.error({ err, method: req.method, path: req.path }, 'database unavailable');
      send(503, errorBody(503, 'the database is unavailable: try again shortly'));
      return;
    }
    // A parameter checked again deeper down (a resource type's schema): the request's fault, said as at the edge.
    if (err instanceof ZodError) {
      log.error({ err, method: req.method, path: req.path }, 'request refused by a schema past the API edge');
      send(400, errorBody(400, describeIssues(err)));
      return;
    }
    if (violatedUniqueConstraint(err) !== undefined) {
      // A duplicate no store names (each maps its own unique constraints to a worded 409: refuseDuplicates): still the caller's conflict, not a fault.
      log.warn({ err, method: req.method, path: req.path }, 'a unique constraint refused a duplicate its store does not name');
      send(409, errorBody(409, 'it exists already: a record with the same key was made first (perhaps by a concurrent request)'));
      return;
    }
    const dataError = databaseDataError(err);
    if (dataError) {
      log.error({ err, method: req.method, path: req.path }, 'the database refused a value of the request');
      send(400, errorBody(400, `the database refused a value of the request: ${dataError}`));
      return;
    }
    if (err instanceof OpenStackConfigError) {
      send(503, errorBody(503, `OpenStack is not configured: ${err.message}`));
      return;
    }
    if (err instanceof OpenStackError) {
      log.error({ err, service: err.service, openstack_request_id: err.requestId }, 'OpenStack call failed');
      send(502, errorBody(502, `OpenStack failed: ${publicMessage(err)}`));
      return;
    }
    if (err instanceof PowerError) {
      // A host's BMC, program or Ironic (an admin's waking or sleeping by hand): not down → may work later; refused → the settings need changing.
      log.warn({ err, host: err.host }, 'power driver failed');
      if (err.retryable) res.setHeader('Retry-After', '5');
      send(err.retryable ? 503 : 502, errorBody(err.retryable ? 503 : 502, `${err.retryable ? 'the host’s power could not be reached' : 'the host’s power driver failed'}: ${err.message}`, err.name));
      return;
    }
    // body-parser errors carry an HTTP status (malformed JSON, body too large, bad charset).
    const status = (err as { status?: unknown }).status;
    if (typeof status === 'number' && status >= 400 && status < 500) {
      const detail = (err as { type?: string }).type === 'entity.parse.failed' ? 'Malformed JSON in request body' : (err as Error).message;
      send(status, errorBody(status, detail));
      return;
    }
    log.error({ err, method: req.method, path: req.path }, 'unhandled API error');
    send(500, errorBody(500, `Internal server error: see the leasekeeper-api log${requestId ? ` (${requestId})` : ''}`));
  };
}
