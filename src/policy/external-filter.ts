/**
 * A client for OpenStack Blazar's ExternalServiceFilter usage-enforcement protocol, so that credit
 * and usage services written for Blazar plug in unchanged. Written from Blazar's
 * blazar/enforcement/filters/external_service_filter.py, blazar/enforcement/enforcement.py and
 * blazar/manager/service.py (facts only; the code is ours):
 *
 * - `POST <base>check-create` {context, lease}, `POST <base>check-update` {context, current_lease,
 *   lease}, `POST <base>on-end` {context, lease}; the base is joined as Python's urljoin does
 *   (`http://svc/api/` + `check-create` → `http://svc/api/check-create`, but `http://svc/api` →
 *   `http://svc/check-create`), and each URL can be set on its own instead.
 * - `Content-Type: application/json`, and `X-Auth-Token: <static token>` only when one is set.
 *   Blazar sends a static token from its configuration (`external_service_token`); only the first
 *   version of the filter (2022) sent Blazar's own Keystone token when none was set. We do the same
 *   as today's Blazar: a static token, or no header.
 * - 204 allows. 403 denies, with the body's `message` passed through unchanged (Blazar's
 *   ExternalServiceFilterException is `%(message)s`, answered as HTTP 400); a 403 without one
 *   denies with GENERIC_DENY_MESSAGE. Any other status (200 included) also denies with
 *   GENERIC_DENY_MESSAGE in Blazar, and a network error or a hang (Blazar sets no timeout) fails the
 *   request: Blazar fails closed. Here those are "unavailable", and `failOpen` chooses.
 * - Dates are Python's `datetime.isoformat()` of Blazar's naive UTC datetimes: `2020-05-13T00:00:00`,
 *   with `.ffffff` only when there are fractions of a second, and no zone.
 * - on_end is called when the lease's end event runs (lease status TERMINATING), and when a lease
 *   that has not yet ended is deleted (before or after its start; status DELETING); its failures
 *   are logged and never stop the end. Blazar promises no delivery: an optimisation, not a ledger.
 */
import { httpUrlProblem, type ExternalFilterSettings } from '../config';
import { pythonIsoformat } from '../domain/dates';
import type { Lease, Reservation } from '../domain/lease';

/** Blazar's words for a denial without a usable message (and for any odd status). */
export const GENERIC_DENY_MESSAGE = 'External service enforcement filter denied the request.';
/** Fail closed: Blazar's sentence first, then why (the technical reason stays in logs, as Blazar keeps it). */
export const UNAVAILABLE_MESSAGE = `${GENERIC_DENY_MESSAGE} The usage policy service could not be reached or gave no decision; try again later.`;

/** At most this much of a response body is read: a hostile service cannot make us buffer more. */
export const MAX_BODY_BYTES = 64 * 1024;
/** A deny message is cut to this many characters (it reaches users and log lines). */
export const MAX_MESSAGE_CHARS = 1000;

/** Its settings, read and checked from LK_POLICY_EXTERNAL_* by src/config.ts (externalFilterSettingsFromEnv). */
export type { ExternalFilterSettings };

/** What the caller knows beyond the lease (Blazar's enforcement context: the user and project come from the lease). */
export interface PolicyContext {
  /** Blazar: the Keystone endpoint of the caller's service catalog (its `identity_service`, default `identity`). Null when unknown. */
  authUrl?: string | null;
  /** Blazar: its `os_region_name` option, null when unset. */
  regionName?: string | null;
}

export type PolicyOutcome = { outcome: 'allowed' | 'failed-open' | 'not-configured'; reason?: string };

/**
 * The request is refused: `message` is what the user sees (the service's own message on a 403, as
 * Blazar passes it, unprefixed; Blazar answers 400 with it). `kind` tells a deliberate denial from
 * a service that could not decide (fail closed); `detail` is for logs only.
 */
export class PolicyDeniedError extends Error {
  override readonly name = 'PolicyDeniedError';
  constructor(
    message: string,
    readonly kind: 'denied' | 'unavailable',
    readonly detail?: string,
  ) {
    super(message);
  }
}

/** The records a reservation's `allocations` lists (Blazar: its plugin's `get` of each allocated resource). */
export type AllocationsOf = (reservation: Reservation) => Array<Record<string, unknown>>;

// ---------------------------------------------------------------------------------------------
// The payload: pure.

const stringArray = (value: unknown): string[] | undefined => (Array.isArray(value) && value.every((v) => typeof v === 'string') ? value : undefined);

/**
 * What a reservation's allocation says was booked, as Blazar's records (fields we do not hold are
 * left out; pass `allocationsOf` to send full host records, as Blazar's: id, hypervisor_hostname,
 * vcpus, memory_mb, local_gb, availability_zone… with the extra capabilities as top-level fields):
 * - hosts (`physical:host`, `virtual:instance`, `flavor:instance`): `{id?, hypervisor_hostname}`;
 *   for instance slots one record per slot, as Blazar's candidates at create (a host may repeat);
 * - `virtual:floatingip`: `{id, floating_ip_address, floating_network_id}`;
 * - a single `host` (`virtual:server`, `network:bandwidth`): `{hypervisor_hostname}`;
 * - anything else: none.
 */
export function allocationsFromReservation(reservation: Reservation): Array<Record<string, unknown>> {
  const booked = reservation.allocation ?? {};
  if (reservation.resource_type === 'virtual:floatingip') {
    const ids = stringArray(booked.floatingip_ids) ?? [];
    const addresses = stringArray(booked.floating_ip_addresses) ?? [];
    const network = typeof reservation.params.network_id === 'string' ? { floating_network_id: reservation.params.network_id } : {};
    return ids.map((id, i) => ({ id, floating_ip_address: addresses[i] ?? null, ...network }));
  }
  const hosts = stringArray(booked.hosts);
  if (hosts) {
    const ids = stringArray(booked.host_ids);
    const slots = typeof booked.slots_per_host === 'object' && booked.slots_per_host !== null ? (booked.slots_per_host as Record<string, unknown>) : undefined;
    return hosts.flatMap((hostname, i) => {
      const record = { ...(ids?.[i] !== undefined ? { id: ids[i] } : {}), hypervisor_hostname: hostname };
      const count = slots?.[hostname];
      return typeof count === 'number' && Number.isInteger(count) && count > 0 ? Array.from({ length: count }, () => ({ ...record })) : [record];
    });
  }
  if (typeof booked.host === 'string') return [{ hypervisor_hostname: booked.host }];
  return [];
}

export interface EnforcementContext {
  user_id: string;
  project_id: string;
  auth_url: string | null;
  region_name: string | null;
}

/** Blazar's `format_context`: the user and project of the lease (the current one on update), not of the caller. */
export function enforcementContext(context: PolicyContext, lease: Pick<Lease, 'userId' | 'projectId'>): EnforcementContext {
  return { user_id: lease.userId, project_id: lease.projectId, auth_url: context.authUrl ?? null, region_name: context.regionName ?? null };
}

/**
 * Blazar's `format_lease`: the lease's values with `reservations`, each its values (the request's
 * parameters, flat) and `allocations`. Blazar keys allocations by resource type, so two
 * reservations of one type both get the last one's; here each gets its own. Fields Blazar sends
 * from its database that we do not have are null (`trust_id`).
 */
export function enforcementLease(lease: Lease, allocationsOf: AllocationsOf = allocationsFromReservation) {
  return {
    id: lease.id,
    name: lease.name,
    user_id: lease.userId,
    project_id: lease.projectId,
    start_date: pythonIsoformat(lease.startMs),
    end_date: pythonIsoformat(lease.endMs),
    ...(lease.beforeEndMs !== undefined ? { before_end_date: pythonIsoformat(lease.beforeEndMs) } : {}),
    status: lease.status as string,
    degraded: lease.reservations.some((r) => r.missing_resources === true || r.resources_changed === true),
    trust_id: null,
    created_at: pythonIsoformat(lease.createdMs, ' '),
    updated_at: lease.version <= 1 ? null : pythonIsoformat(lease.updatedMs, ' '),
    reservations: lease.reservations.map((r) => ({
      ...r.params,
      id: r.id,
      lease_id: lease.id,
      resource_type: r.resource_type,
      status: r.status,
      missing_resources: r.missing_resources ?? false,
      resources_changed: r.resources_changed ?? false,
      allocations: allocationsOf(r),
    })),
    events: lease.events.map((e) => ({ lease_id: lease.id, event_type: e.event_type, time: pythonIsoformat(e.time), status: e.status })),
  };
}

export type EnforcementLease = ReturnType<typeof enforcementLease>;

/** check-create's body. Blazar calls it before writing anything, the lease's status then `CREATING`. */
export function checkCreateBody(context: PolicyContext, lease: Lease, allocationsOf?: AllocationsOf) {
  return { context: enforcementContext(context, lease), lease: { ...enforcementLease(lease, allocationsOf), status: 'CREATING' } };
}

/**
 * check-update's body: `current_lease` as stored, `lease` as it would become (Blazar sends only
 * the changed values there, with both dates always; a full lease is a superset).
 */
export function checkUpdateBody(context: PolicyContext, current: Lease, next: Lease, allocationsOf?: AllocationsOf) {
  return { context: enforcementContext(context, current), current_lease: enforcementLease(current, allocationsOf), lease: enforcementLease(next, allocationsOf) };
}

/** on-end's body: the lease that ends (or is deleted before its end). */
export function onEndBody(context: PolicyContext, lease: Lease, allocationsOf?: AllocationsOf) {
  return { context: enforcementContext(context, lease), lease: enforcementLease(lease, allocationsOf) };
}

// ---------------------------------------------------------------------------------------------
// The client.

/** A URL Blazar accepts (http or https, with a host), by the rule every URL leasekeeper calls follows (no credentials, at most 2048 characters). */
function checkedUrl(url: string, what: string): string {
  const problem = httpUrlProblem(url);
  if (problem) throw new Error(`${what}: ${problem}`);
  return url;
}

/** The three URLs, as Blazar's _construct_url: the override, else urljoin(base, path), else none. */
export function endpointUrls(settings: Pick<ExternalFilterSettings, 'baseUrl' | 'checkCreateUrl' | 'checkUpdateUrl' | 'onEndUrl'>) {
  const base = settings.baseUrl === undefined ? undefined : checkedUrl(settings.baseUrl, 'baseUrl');
  const url = (override: string | undefined, name: string, path: string) =>
    override !== undefined ? checkedUrl(override, name) : base !== undefined ? new URL(path, base).toString() : undefined;
  return {
    checkCreate: url(settings.checkCreateUrl, 'checkCreateUrl', 'check-create'),
    checkUpdate: url(settings.checkUpdateUrl, 'checkUpdateUrl', 'check-update'),
    onEnd: url(settings.onEndUrl, 'onEndUrl', 'on-end'),
  };
}

/** Text safe for a message and a log line: control, line-separator and bidi characters become a space; cut to `max` characters. */
export function cleanText(text: string, max = MAX_MESSAGE_CHARS): string {
  const clean = text.replace(/[\p{Cc}\u2028\u2029\u202a-\u202e\u2066-\u2069]+/gu, ' ').trim();
  const chars = Array.from(clean);
  return chars.length > max ? `${chars.slice(0, max - 1).join('')}…` : clean;
}

/** At most `limit` bytes of the body; `complete` false when there was more, or the read failed (timeout). */
async function readBounded(res: Response, limit: number): Promise<{ text: string; complete: boolean }> {
  if (!res.body) return { text: '', complete: true };
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let text = '';
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { text: text + decoder.decode(), complete: true };
      const room = limit - size;
      // A multi-byte character cut at the limit is dropped by the streaming decoder.
      text += decoder.decode(value.byteLength > room ? value.subarray(0, room) : value, { stream: true });
      size += Math.min(value.byteLength, room);
      if (value.byteLength > room) return { text, complete: false };
    }
  } catch {
    return { text, complete: false };
  } finally {
    // Stop the transfer: the rest is never read.
    reader.cancel().catch(() => undefined);
  }
}

/** The `message` of a 403 body, as Blazar's `res.json()['message']`; from a cut body, the start of a leading `"message"` string. */
function messageOf(text: string, complete: boolean): string | undefined {
  if (complete) {
    try {
      const body: unknown = JSON.parse(text);
      if (typeof body === 'object' && body !== null && !Array.isArray(body)) {
        const message = (body as Record<string, unknown>).message;
        return typeof message === 'string' ? message : undefined;
      }
    } catch {
      return undefined;
    }
    return undefined;
  }
  const start = /^\s*\{\s*"message"\s*:\s*"((?:[^"\\]|\\.)*)/s.exec(text);
  if (!start) return undefined;
  try {
    // A \u escape cut short at the end would not parse (one after an escaped backslash is text).
    return JSON.parse(`"${start[1].replace(/(^|[^\\])((?:\\\\)*)\\u[0-9a-fA-F]{0,3}$/, '$1$2')}"`) as string;
  } catch {
    return undefined;
  }
}

type Decision = { kind: 'allow' } | { kind: 'deny'; message: string; detail?: string } | { kind: 'unavailable'; reason: string };

/** Fields of an error, read without instanceof (fetch's errors may come from another realm, as under jest). */
const errorField = (err: unknown, key: 'name' | 'message' | 'code' | 'cause'): unknown => (typeof err === 'object' && err !== null ? (err as Record<string, unknown>)[key] : undefined);

function networkReason(err: unknown, timeoutMs: number): string {
  const name = errorField(err, 'name');
  if (name === 'TimeoutError' || name === 'AbortError') return `no answer within ${timeoutMs} ms`;
  // undici says "fetch failed" and puts the why (ECONNREFUSED, ENOTFOUND, a TLS error…) in the cause.
  const cause = errorField(err, 'cause');
  const code = errorField(cause, 'code');
  const message = errorField(cause, 'message') ?? errorField(err, 'message');
  return cleanText(typeof code === 'string' ? code : typeof message === 'string' ? message : String(err), 200);
}

export interface ExternalFilterOptions {
  /** The records each reservation's `allocations` lists (default: allocationsFromReservation). */
  allocationsOf?: AllocationsOf;
}

/**
 * Blazar's ExternalServiceFilter as a client. Each call resolves with its outcome or throws
 * PolicyDeniedError; onEnd never throws: a refused or failed on-end is returned for the caller to
 * log, as Blazar logs it.
 */
export class ExternalServiceFilter {
  readonly urls: { checkCreate?: string; checkUpdate?: string; onEnd?: string };
  private readonly allocationsOf: AllocationsOf;

  constructor(
    private readonly settings: ExternalFilterSettings,
    options: ExternalFilterOptions = {},
  ) {
    this.urls = endpointUrls(settings);
    // Blazar refuses to start the filter with nothing to call ("ExternalService has no endpoints set.").
    if (!this.urls.checkCreate && !this.urls.checkUpdate && !this.urls.onEnd) throw new Error('ExternalService has no endpoints set.');
    if (!Number.isInteger(settings.timeoutMs) || settings.timeoutMs <= 0) throw new Error(`timeoutMs: expected a positive whole number of milliseconds, got ${settings.timeoutMs}`);
    this.allocationsOf = options.allocationsOf ?? allocationsFromReservation;
  }

  async checkCreate(context: PolicyContext, lease: Lease): Promise<PolicyOutcome> {
    if (!this.urls.checkCreate) return { outcome: 'not-configured', reason: 'no check-create URL' };
    return this.enforce(await this.post(this.urls.checkCreate, checkCreateBody(context, lease, this.allocationsOf)));
  }

  async checkUpdate(context: PolicyContext, current: Lease, next: Lease): Promise<PolicyOutcome> {
    if (!this.urls.checkUpdate) return { outcome: 'not-configured', reason: 'no check-update URL' };
    return this.enforce(await this.post(this.urls.checkUpdate, checkUpdateBody(context, current, next, this.allocationsOf)));
  }

  /** Whatever happens, the lease ends: a denial or failure comes back as `failed-open` with its reason. */
  async onEnd(context: PolicyContext, lease: Lease): Promise<PolicyOutcome> {
    if (!this.urls.onEnd) return { outcome: 'not-configured', reason: 'no on-end URL' };
    try {
      const decision = await this.post(this.urls.onEnd, onEndBody(context, lease, this.allocationsOf));
      if (decision.kind === 'allow') return { outcome: 'allowed' };
      return { outcome: 'failed-open', reason: decision.kind === 'deny' ? `denied: ${decision.message}` : decision.reason };
    } catch (err) {
      const message = errorField(err, 'message');
      return { outcome: 'failed-open', reason: cleanText(typeof message === 'string' ? message : String(err), 200) };
    }
  }

  private enforce(decision: Decision): PolicyOutcome {
    if (decision.kind === 'allow') return { outcome: 'allowed' };
    // A deliberate denial stands whatever failOpen says.
    if (decision.kind === 'deny') throw new PolicyDeniedError(decision.message, 'denied', decision.detail);
    if (this.settings.failOpen) return { outcome: 'failed-open', reason: decision.reason };
    throw new PolicyDeniedError(UNAVAILABLE_MESSAGE, 'unavailable', decision.reason);
  }

  private async post(url: string, body: unknown): Promise<Decision> {
    const headers: Record<string, string> = { 'Content-Type': 'application/json' };
    if (this.settings.token) headers['X-Auth-Token'] = this.settings.token;
    let res: Response;
    try {
      // One signal for the answer and its body. Redirects are not followed: the token would go along to wherever they point.
      res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body), redirect: 'manual', signal: AbortSignal.timeout(this.settings.timeoutMs) });
    } catch (err) {
      return { kind: 'unavailable', reason: networkReason(err, this.settings.timeoutMs) };
    }
    if (res.status === 204) {
      await res.body?.cancel().catch(() => undefined);
      return { kind: 'allow' };
    }
    if (res.status === 403) {
      const { text, complete } = await readBounded(res, MAX_BODY_BYTES);
      const message = messageOf(text, complete);
      const cleaned = message === undefined ? '' : cleanText(message);
      // Blazar keeps a malformed body from the user (it may leak something) and logs it; so do we, cut and cleaned.
      if (!cleaned) return { kind: 'deny', message: GENERIC_DENY_MESSAGE, detail: `malformed 403 body: ${cleanText(text, 200)}` };
      return { kind: 'deny', message: cleaned };
    }
    await res.body?.cancel().catch(() => undefined);
    return { kind: 'unavailable', reason: `HTTP ${res.status} (only 204 and 403 are answers)` };
  }
}
