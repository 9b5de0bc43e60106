/**
 * The one HTTP layer of the OpenStack clients, on Node's built-in fetch (undici).
 *
 * JSON in and out, the auth token, per-service microversion headers, a per-request timeout
 * (AbortSignal.timeout), the OpenStack request id captured into errors and the logger hook.
 * Deliberately no retries: a failed call throws a typed error (errors.ts) whose `retryable`
 * tells the caller (a Temporal activity) whether to let its retry policy try again.
 */
import {
  BadRequestError,
  ConflictError,
  ConnectionError,
  ForbiddenError,
  HttpStatusError,
  InvalidResponseError,
  NotFoundError,
  type OpenStackError,
  type OpenStackErrorDetails,
  ServerError,
  type ServiceType,
  TimeoutError,
  UnauthorizedError,
} from './errors';

export type HttpMethod = 'GET' | 'HEAD' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

export type QueryValue = string | number | boolean | null | undefined | ReadonlyArray<string | number>;
/** Query parameters; undefined/null are left out, arrays repeat the parameter. */
export type QueryParams = Readonly<Record<string, QueryValue>>;

/** What the logger hook receives after every request, successful or not. */
export interface RequestLogEvent {
  service: ServiceType;
  method: HttpMethod;
  url: string;
  status?: number;
  requestId?: string;
  durationMs: number;
  error?: OpenStackError;
}

export type RequestLogger = (event: RequestLogEvent) => void;

/** Transport settings shared by every client. */
export interface HttpOptions {
  /** Per-request timeout in ms (default 30 000): headers and body must arrive within it. */
  timeoutMs?: number;
  /** Called after each request (never throws into the request). */
  logger?: RequestLogger;
  /** A fetch implementation (default: the global fetch), e.g. to count or record requests in tests. */
  fetch?: typeof fetch;
  /** User-Agent header (default `leasekeeper`). */
  userAgent?: string;
}

export const DEFAULT_TIMEOUT_MS = 30_000;

export interface RawRequest {
  service: ServiceType;
  method: HttpMethod;
  url: string;
  headers?: Record<string, string>;
  body?: unknown;
  timeoutMs?: number;
  /** Aborts the request from outside (e.g. Temporal activity cancellation); rethrown as is. */
  signal?: AbortSignal;
}

export interface HttpResponse<T> {
  status: number;
  headers: Headers;
  body: T;
  requestId: string | undefined;
}

const REQUEST_ID_HEADERS = ['x-openstack-request-id', 'openstack-request-id', 'x-compute-request-id'];

export function requestIdOf(headers: Headers): string | undefined {
  for (const name of REQUEST_ID_HEADERS) {
    const value = headers.get(name);
    if (value) return value.split(',')[0]?.trim();
  }
  return undefined;
}

/** Appends query parameters to a URL. */
export function withQuery(url: string, query: QueryParams | undefined): string {
  if (query === undefined) return url;
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value === undefined || value === null) continue;
    if (Array.isArray(value)) {
      for (const item of value as ReadonlyArray<string | number>) params.append(key, String(item));
    } else {
      params.append(key, String(value));
    }
  }
  const text = params.toString();
  if (text === '') return url;
  return `${url}${url.includes('?') ? '&' : '?'}${text}`;
}

/**
 * Sends one request and returns the parsed body, or throws the typed error for the status:
 * 400 BadRequest, 401 Unauthorized, 403 Forbidden, 404 NotFound, 409 Conflict, 5xx ServerError,
 * other statuses HttpStatusError; TimeoutError and ConnectionError when no response came.
 */
export async function sendRequest<T>(request: RawRequest, options: HttpOptions = {}): Promise<HttpResponse<T>> {
  const timeoutMs = request.timeoutMs ?? options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const timeoutSignal = AbortSignal.timeout(timeoutMs);
  const signal = request.signal === undefined ? timeoutSignal : AbortSignal.any([timeoutSignal, request.signal]);
  const headers: Record<string, string> = {
    Accept: 'application/json',
    'User-Agent': options.userAgent ?? 'leasekeeper',
    ...request.headers,
  };
  let payload: string | undefined;
  if (request.body !== undefined) {
    payload = JSON.stringify(request.body);
    headers['Content-Type'] ??= 'application/json';
  }
  const doFetch = options.fetch ?? fetch;
  const started = performance.now();
  const where = { service: request.service, method: request.method, url: request.url };
  const log = (event: Omit<RequestLogEvent, 'service' | 'method' | 'url' | 'durationMs'>): void => {
    if (!options.logger) return;
    try {
      options.logger({ ...where, durationMs: Math.round(performance.now() - started), ...event });
    } catch {
      // A logger must not change the outcome of the request.
    }
  };

  let response: Response;
  let text: string;
  try {
    response = await doFetch(request.url, { method: request.method, headers, body: payload, signal });
    text = await response.text();
  } catch (cause) {
    let error: OpenStackError;
    if (timeoutSignal.aborted) {
      error = new TimeoutError(`${request.service} ${request.method} ${request.url}: no response within ${timeoutMs} ms`, {
        ...where,
        timeoutMs,
        cause,
      });
    } else if (request.signal?.aborted) {
      throw cause;
    } else {
      error = new ConnectionError(`${request.service} ${request.method} ${request.url}: ${describeCause(cause)}`, { ...where, cause });
    }
    log({ error });
    throw error;
  }

  const requestId = requestIdOf(response.headers);
  const contentType = response.headers.get('content-type') ?? '';
  let body: unknown = text;
  let parsed = false;
  if (text !== '' && /json/i.test(contentType)) {
    try {
      body = JSON.parse(text);
      parsed = true;
    } catch {
      parsed = false;
    }
  }

  if (response.ok) {
    if (text !== '' && request.method !== 'HEAD' && /json/i.test(contentType) && !parsed) {
      const error = new InvalidResponseError(`${request.service} ${request.method} ${request.url}: response is not valid JSON`, {
        ...where,
        status: response.status,
        requestId,
        body: text,
      });
      log({ status: response.status, requestId, error });
      throw error;
    }
    log({ status: response.status, requestId });
    return { status: response.status, headers: response.headers, body: (text === '' ? undefined : body) as T, requestId };
  }

  const { message, code } = errorMessageOf(body, response.status, response.statusText);
  const details: OpenStackErrorDetails = { ...where, status: response.status, requestId, code, body };
  const fullMessage = `${message} (${request.service} ${request.method} ${request.url} → ${response.status}${requestId ? `, request ${requestId}` : ''})`;
  const error = errorForStatus(response.status, fullMessage, details);
  log({ status: response.status, requestId, error });
  throw error;
}

function errorForStatus(status: number, message: string, details: OpenStackErrorDetails): OpenStackError {
  switch (status) {
    case 400:
      return new BadRequestError(message, details);
    case 401:
      return new UnauthorizedError(message, details);
    case 403:
      return new ForbiddenError(message, details);
    case 404:
      return new NotFoundError(message, details);
    case 409:
      return new ConflictError(message, details);
    default:
      return status >= 500 ? new ServerError(message, details) : new HttpStatusError(message, details);
  }
}

/** fetch's "fetch failed" TypeError hides the reason (ECONNREFUSED, …) in its cause. Duck-typed: errors may come from another realm. */
function describeCause(cause: unknown): string {
  const messageOf = (value: unknown): string | undefined =>
    isRecord(value) && typeof value.message === 'string' ? value.message : undefined;
  const inner = isRecord(cause) ? cause.cause : undefined;
  const innerMessage = messageOf(inner);
  if (innerMessage !== undefined) {
    const code = isRecord(inner) ? inner.code : undefined;
    return typeof code === 'string' && !innerMessage.includes(code) ? `${code}: ${innerMessage}` : innerMessage;
  }
  return messageOf(cause) ?? String(cause);
}

function parsedJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function stringField(record: Record<string, unknown>, key: string): string | undefined {
  const value = record[key];
  if (typeof value !== 'string') return undefined;
  const text = cleanText(value.replace(/<[^>]+>/g, ' '));
  return text === '' ? undefined : text;
}

/**
 * The human message (and machine code) in an OpenStack error body:
 * Placement `{"errors": [{"detail", "code"}]}`, Neutron `{"NeutronError": {"message", "type"}}`,
 * Keystone `{"error": {"message"}}`, Ironic `{"error_message": "<JSON text>"}`, Nova `{"itemNotFound": {"message"}}` (any single key),
 * plain `{"message"}`, or Glance/webob HTML and text pages.
 */
export function errorMessageOf(body: unknown, status: number, statusText: string): { message: string; code?: string } {
  const fallback = `HTTP ${status}${statusText ? ` ${statusText}` : ''}`;
  if (isRecord(body)) {
    const errors = body.errors;
    if (Array.isArray(errors) && isRecord(errors[0])) {
      const first = errors[0];
      const detail = stringField(first, 'detail') ?? stringField(first, 'title') ?? fallback;
      return { message: cleanText(detail.replace(/^The resource could not be found\.\s*/, '')), code: stringField(first, 'code') };
    }
    // Ironic: `{"error_message": "<JSON text of {faultstring, faultcode, debuginfo}>"}`.
    const ironic = typeof body.error_message === 'string' ? parsedJson(body.error_message) : body.error_message;
    if (isRecord(ironic)) {
      const faultstring = stringField(ironic, 'faultstring');
      if (faultstring) return { message: faultstring };
    }
    const neutron = body.NeutronError;
    if (isRecord(neutron)) {
      return { message: stringField(neutron, 'message') ?? fallback, code: stringField(neutron, 'type') };
    }
    const direct = stringField(body, 'message') ?? stringField(body, 'detail');
    if (direct) return { message: direct };
    for (const value of Object.values(body)) {
      if (isRecord(value)) {
        const message = stringField(value, 'message') ?? stringField(value, 'detail');
        if (message) return { message };
      }
    }
    return { message: fallback };
  }
  if (typeof body === 'string' && body.trim() !== '') {
    const text = cleanText(
      body
        .replace(/<head>[\s\S]*?<\/head>/i, ' ')
        .replace(/<h1>[\s\S]*?<\/h1>/i, ' ')
        .replace(/<[^>]+>/g, ' '),
    );
    return { message: text !== '' ? text.slice(0, 500) : fallback };
  }
  return { message: fallback };
}

function cleanText(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

/** Where a client finds its endpoint and token: a Keystone session or static settings. */
export interface Session {
  /** The token to send as X-Auth-Token, or undefined to send none. */
  getToken(signal?: AbortSignal): Promise<string | undefined>;
  /** The base URL of a service, as the catalog (or the static settings) give it. */
  getEndpoint(service: ServiceType, signal?: AbortSignal): Promise<string>;
  /** A 401 came back with this token: forget it so the next call authenticates afresh. */
  invalidateToken(token: string): void;
  /** Headers sent with every request (e.g. X-Project-Id for a Keystone-less rig). */
  readonly extraHeaders?: Readonly<Record<string, string>>;
  /** Keystone sessions: the Keystone URL they authenticate at (versioned), where users sign in too. */
  readonly authUrl?: string;
  /** Transport settings for the clients built on this session. */
  readonly http: HttpOptions;
}

export interface ServiceRequest {
  method: HttpMethod;
  /** Path under the service's versioned base URL (`/servers/x`), or an absolute URL. */
  path: string;
  query?: QueryParams;
  body?: unknown;
  headers?: Record<string, string>;
  /** Microversion for this request, overriding the client's default. */
  microversion?: string;
  timeoutMs?: number;
  signal?: AbortSignal;
  /**
   * Sent on the caller's own credentials (a user's password sign-in): without the session's token
   * and headers, and a 401 says nothing about the session's token, so it stays.
   */
  withoutSession?: boolean;
}

/** Per-call settings every client method accepts. */
export interface CallOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface ServiceHttpOptions {
  /** Default microversion, sent as `OpenStack-API-Version: <name> <version>`. */
  microversion?: string;
  /** The name in the microversion header (`compute`, `placement`). */
  microversionName?: string;
  /** Path appended to the catalog URL unless it already names a version (`/v2.1`, `/v2.0`, `/v2`). */
  versionPath?: string;
}

/** Adds the API version path to a catalog URL unless one of its path segments already is a version. */
export function versionedBase(endpoint: string, versionPath: string | undefined): string {
  const trimmed = endpoint.replace(/\/+$/, '');
  if (!versionPath) return trimmed;
  const path = new URL(trimmed).pathname;
  if (path.split('/').some((segment) => /^v\d+(\.\d+)?$/.test(segment))) return trimmed;
  return `${trimmed}${versionPath}`;
}

/** Requests to one OpenStack service through a session: endpoint, token, microversion. */
export class ServiceHttp {
  constructor(
    readonly service: ServiceType,
    readonly session: Session,
    readonly options: ServiceHttpOptions = {},
  ) {}

  /** The versioned base URL, e.g. `http://127.0.0.1:18774/v2.1`. */
  async baseUrl(signal?: AbortSignal): Promise<string> {
    return versionedBase(await this.session.getEndpoint(this.service, signal), this.options.versionPath);
  }

  async request<T>(request: ServiceRequest): Promise<HttpResponse<T>> {
    const url = /^https?:\/\//.test(request.path) ? request.path : `${await this.baseUrl(request.signal)}${request.path}`;
    const token = request.withoutSession ? undefined : await this.session.getToken(request.signal);
    const headers: Record<string, string> = request.withoutSession ? {} : { ...this.session.extraHeaders };
    if (token !== undefined) headers['X-Auth-Token'] = token;
    const microversion = request.microversion ?? this.options.microversion;
    if (microversion !== undefined && this.options.microversionName !== undefined) {
      headers['OpenStack-API-Version'] = `${this.options.microversionName} ${microversion}`;
    }
    Object.assign(headers, request.headers);
    try {
      return await sendRequest<T>(
        {
          service: this.service,
          method: request.method,
          url: withQuery(url, request.query),
          headers,
          body: request.body,
          timeoutMs: request.timeoutMs,
          signal: request.signal,
        },
        this.session.http,
      );
    } catch (error) {
      if (error instanceof UnauthorizedError && token !== undefined) this.session.invalidateToken(token);
      throw error;
    }
  }

  async get<T>(path: string, query?: QueryParams, options: CallOptions & { microversion?: string } = {}): Promise<T> {
    return (await this.request<T>({ method: 'GET', path, query, ...options })).body;
  }

  async post<T>(path: string, body: unknown, options: CallOptions & { microversion?: string } = {}): Promise<T> {
    return (await this.request<T>({ method: 'POST', path, body, ...options })).body;
  }

  async put<T>(path: string, body: unknown, options: CallOptions & { microversion?: string } = {}): Promise<T> {
    return (await this.request<T>({ method: 'PUT', path, body, ...options })).body;
  }

  async delete(path: string, options: CallOptions & { microversion?: string; query?: QueryParams } = {}): Promise<void> {
    await this.request<unknown>({ method: 'DELETE', path, ...options });
  }
}

/** Encodes one path segment (ids, names, trait names). */
export function seg(value: string | number): string {
  return encodeURIComponent(String(value));
}
