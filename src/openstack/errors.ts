/**
 * Typed errors of the OpenStack clients. Every failure of a call to an OpenStack API is an
 * `OpenStackError` carrying where it happened (service, method, url), the OpenStack request id
 * and whether trying again may succeed (`retryable`). The clients never retry on their own:
 * retries belong to the Temporal activity policies, which can use `retryable` to fail fast.
 */

/** The OpenStack services the clients talk to, named by their catalog service type. */
export type ServiceType = 'identity' | 'compute' | 'placement' | 'network' | 'image' | 'baremetal';

export interface OpenStackErrorDetails {
  service: ServiceType;
  method: string;
  url: string;
  /** HTTP status; undefined when no response came (timeout, connection error). */
  status?: number;
  /** `x-openstack-request-id` / `x-compute-request-id` of the response, when there was one. */
  requestId?: string;
  /** Machine-readable code from the body: Placement's `errors[0].code`, Neutron's `type`, … */
  code?: string;
  /** The parsed response body (JSON) or its text. */
  body?: unknown;
  cause?: unknown;
}

export abstract class OpenStackError extends Error {
  abstract override readonly name: string;
  /** Whether the same request may succeed when tried again later. */
  abstract readonly retryable: boolean;
  readonly service: ServiceType;
  readonly method: string;
  readonly url: string;
  readonly status: number | undefined;
  readonly requestId: string | undefined;
  readonly code: string | undefined;
  readonly body: unknown;

  constructor(message: string, details: OpenStackErrorDetails) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.service = details.service;
    this.method = details.method;
    this.url = details.url;
    this.status = details.status;
    this.requestId = details.requestId;
    this.code = details.code;
    this.body = details.body;
  }
}

/** 400: the request is malformed or not allowed at this microversion. */
export class BadRequestError extends OpenStackError {
  override readonly name: string = 'BadRequestError';
  readonly retryable = false;
}

/** 401: the token was rejected (or, for token validation, our own service token). */
export class UnauthorizedError extends OpenStackError {
  override readonly name: string = 'UnauthorizedError';
  readonly retryable = false;
}

/** 403: authenticated but not allowed by policy. */
export class ForbiddenError extends OpenStackError {
  override readonly name: string = 'ForbiddenError';
  readonly retryable = false;
}

/** 404: the resource does not exist (or is not visible to this project). */
export class NotFoundError extends OpenStackError {
  override readonly name: string = 'NotFoundError';
  readonly retryable = false;
}

/** Placement's code for a generation conflict (resource provider or consumer). */
export const PLACEMENT_CONCURRENT_UPDATE = 'placement.concurrent_update';

/**
 * 409. `code` is Placement's `errors[0].code` when there is one (e.g. `placement.concurrent_update`);
 * a generation conflict is retryable (re-read and write again), any other conflict is not.
 */
export class ConflictError extends OpenStackError {
  override readonly name: string = 'ConflictError';
  get retryable(): boolean {
    return this.code === PLACEMENT_CONCURRENT_UPDATE;
  }
}

/** 5xx: the service failed; trying again may work. */
export class ServerError extends OpenStackError {
  override readonly name: string = 'ServerError';
  readonly retryable = true;
}

/** Any other HTTP error status (405, 413, 429, …). 408 and 429 are retryable. */
export class HttpStatusError extends OpenStackError {
  override readonly name: string = 'HttpStatusError';
  get retryable(): boolean {
    return this.status === 408 || this.status === 429;
  }
}

/** No complete response within the request's timeout. */
export class TimeoutError extends OpenStackError {
  override readonly name: string = 'TimeoutError';
  readonly retryable = true;
  readonly timeoutMs: number;
  constructor(message: string, details: OpenStackErrorDetails & { timeoutMs: number }) {
    super(message, details);
    this.timeoutMs = details.timeoutMs;
  }
}

/** The connection could not be made or broke (refused, reset, DNS, TLS). */
export class ConnectionError extends OpenStackError {
  override readonly name: string = 'ConnectionError';
  readonly retryable = true;
}

/** A 2xx response whose body is not what the API documents (e.g. not JSON). */
export class InvalidResponseError extends OpenStackError {
  override readonly name: string = 'InvalidResponseError';
  readonly retryable = false;
}

/**
 * Token validation: the user's token is not valid (Keystone answered 404: unknown, expired or
 * revoked) or not scoped to a project. A `NotFoundError`, so `instanceof NotFoundError` holds too.
 */
export class InvalidTokenError extends NotFoundError {
  override readonly name: string = 'InvalidTokenError';
}

/** The service catalog has no endpoint for the wanted service type, interface and region. */
export class EndpointNotFoundError extends Error {
  override readonly name: string = 'EndpointNotFoundError';
  readonly retryable = false;
  constructor(
    readonly service: ServiceType,
    readonly interfaceName: string,
    readonly region: string | undefined,
  ) {
    super(`no ${interfaceName} endpoint for service type '${service}'${region === undefined ? '' : ` in region '${region}'`} in the service catalog`);
  }
}

/** Credentials or client settings are missing or invalid; the message names the setting. */
export class OpenStackConfigError extends Error {
  override readonly name: string = 'OpenStackConfigError';
  readonly retryable = false;
}

/** A `waitFor…` helper gave up: the resource did not reach the wanted state in time. */
export class WaitTimeoutError extends Error {
  override readonly name: string = 'WaitTimeoutError';
  readonly retryable = true;
  constructor(
    message: string,
    /** The last state seen, for diagnosis. */
    readonly lastSeen: unknown,
  ) {
    super(message);
  }
}

/** A `waitFor…` helper stopped because the resource went to a state it cannot leave (e.g. ERROR). */
export class ResourceFailedError extends Error {
  override readonly name: string = 'ResourceFailedError';
  readonly retryable = false;
  constructor(
    message: string,
    readonly lastSeen: unknown,
  ) {
    super(message);
  }
}

/** Whether an error (from these clients or elsewhere) may go away when the call is tried again. */
export function isRetryable(error: unknown): boolean {
  if (error instanceof OpenStackError) return error.retryable;
  if (error !== null && typeof error === 'object' && 'retryable' in error) return error.retryable === true;
  return false;
}

/** Resolves to undefined instead of failing when the resource is gone: for idempotent deletes. */
export async function ignoreNotFound<T>(promise: Promise<T>): Promise<T | undefined> {
  try {
    return await promise;
  } catch (error) {
    if (error instanceof NotFoundError) return undefined;
    throw error;
  }
}

const URL_PATTERN = /\b[a-z][a-z0-9+.-]*:\/\/[^\s"'<>()]+/gi;
// A host name starts with a letter (so that times such as 12:03 stay).
const HOST_PORT_PATTERN = /\b(?:\d{1,3}(?:\.\d{1,3}){3}|[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)*):\d{2,5}\b/gi;
const IPV4_PATTERN = /\b\d{1,3}(?:\.\d{1,3}){3}\b/g;
const MAX_PUBLIC_REASON = 200;

/** A text from a cloud with what locates its internals (URLs, host:port, IP addresses) taken out, and kept short. */
export function withoutInternals(text: string): string {
  const cleaned = text.replace(URL_PATTERN, '<url>').replace(HOST_PORT_PATTERN, '<host>').replace(IPV4_PATTERN, '<host>').replace(/\s+/g, ' ').trim();
  return cleaned.length > MAX_PUBLIC_REASON ? `${cleaned.slice(0, MAX_PUBLIC_REASON - 1)}…` : cleaned;
}

/**
 * What a caller (or a lease's status_reason) may see of an OpenStack failure: the service, the
 * error's class and HTTP status, and the service's own short reason without internal addresses.
 * The full message (method, URL, request id) is for the log.
 */
export function publicMessage(error: OpenStackError): string {
  // The clients append where the call went: " (<service> <METHOD> <url> → <status>…)" or "<service> <METHOD> <url>: …".
  const located = error.message.lastIndexOf(` (${error.service} ${error.method} `);
  let reason = located >= 0 ? error.message.slice(0, located) : error.message;
  const prefix = `${error.service} ${error.method} ${error.url}`;
  if (reason.startsWith(prefix)) reason = reason.slice(prefix.length).replace(/^:\s*/, '');
  return `${error.service} ${error.name}${error.status === undefined ? '' : ` (HTTP ${error.status})`}: ${withoutInternals(reason) || 'no reason given'}`;
}
