/**
 * Notices posted to webhooks: the deployment's (LK_WEBHOOK_URLS and LK_NOTIFY_URL, trusted) and
 * projects' own (PUT /v1/projects/{id}/webhooks). Each POST carries the notice's id as
 * Idempotency-Key (a retried delivery is recognisable) and, with a secret, an HMAC-SHA256 signature
 * of the exact body. A project's webhook may not reach the cloud's own network (./webhook-address.ts).
 */
import { createHmac, randomBytes } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { isIP, type LookupFunction } from 'node:net';
import { httpUrlProblem, type Config } from '../config';
import type { Pool } from '../db/pool';
import { claimWebhookDelivery, countDelivery, countWebhookFailure, webhookById, webhookTargets } from '../db/webhooks';
import { noticeBody } from './blazar-payload';
import { MAX_BREAKER_COOLDOWN_MS, type DeliveryHeld, type ProjectDeliveryCap } from './delivery-gates';
import { NoticeFailedError, NoticeRefusedError } from './errors';
import { ADDRESS_NOT_ALLOWED, addressAllowed, DEFAULT_DNS_SETTINGS, hostOf, WebhookAddressError, webhookLookup, type WebhookDnsSettings } from './webhook-address';
import { APPROVAL_NOTICE_TYPES, type Notice, type NoticeTargets } from '../domain/notices';

export type NoticeSettings = Config['notices'];

/** A response is read this far at most (a receiver's error page, for the message), then the connection is dropped. */
export const MAX_RESPONSE_BYTES = 64 * 1024;
/** 4xx that mean "not now" rather than "no": retried. */
const RETRYABLE_4XX = new Set([408, 409, 425, 429]);
const DEPLOYMENT_PREFIX = 'deployment:';

export interface WebhookTarget {
  url: string;
  /** Signs the body (X-Leasekeeper-Signature) when set. */
  secret?: string;
}

export interface DeliveryOptions {
  timeoutMs: number;
  /** Connecting (lookup, TCP, TLS) fails after this long, within `timeoutMs`; default: `timeoutMs` alone. */
  connectTimeoutMs?: number;
  /** Refuse addresses that are not public unicast (a project's webhook, unless LK_WEBHOOK_ALLOW_PRIVATE). */
  guardAddresses: boolean;
  /** A project's webhook: its name resolved by c-ares with these settings (a guarded one's always is); unset: the system's lookup. */
  dns?: WebhookDnsSettings;
}

export interface Delivered {
  status: number;
  /** The start of the response (at most MAX_RESPONSE_BYTES). */
  body: string;
}

/** A project webhook's secret when none is given: 32 random bytes, base64url (shown once). */
export function generateSecret(): string {
  return randomBytes(32).toString('base64url');
}

/** `sha256=<hex>`: the HMAC-SHA256 of the exact body bytes. */
export function signatureOf(body: Buffer | string, secret: string): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/** An error of the request, or one of the errors it aggregates (a dual-stack connection attempt), that is the guard's refusal. */
function addressRefusal(err: unknown): WebhookAddressError | undefined {
  if (err instanceof WebhookAddressError && err.kind === 'not-allowed') return err;
  if (err instanceof AggregateError) return err.errors.map(addressRefusal).find((found) => found);
  return undefined;
}

/**
 * Posts the notice to one webhook. Resolves when it answered 2xx; throws NoticeRefusedError when it
 * refused (4xx other than 408/409/425/429) or its address is refused, NoticeFailedError otherwise
 * (5xx, 408/409/425/429, a redirect, which is not followed, a network error or the timeout).
 */
export async function deliverWebhook(target: WebhookTarget, notice: Notice, options: DeliveryOptions): Promise<Delivered> {
  // The rule every URL leasekeeper calls follows, again at delivery (a row written by hand, by an older version). Messages name the origin at most: a webhook's path often holds a token of its own.
  const problem = httpUrlProblem(target.url);
  if (problem) throw new NoticeRefusedError(`notice to a webhook refused: ${problem}`);
  const url = new URL(target.url);
  const where = url.origin;
  const host = hostOf(url);
  if (options.guardAddresses && isIP(host) && !addressAllowed(host)) throw new NoticeRefusedError(`notice to ${where} refused: ${ADDRESS_NOT_ALLOWED}`);
  const body = Buffer.from(JSON.stringify(noticeBody(notice)));
  const headers: Record<string, string> = {
    'Content-Type': 'application/json',
    'Content-Length': String(body.length),
    'Idempotency-Key': notice.id,
    'X-Leasekeeper-Event': notice.eventType,
    'User-Agent': 'leasekeeper',
    ...(target.secret ? { 'X-Leasekeeper-Signature': signatureOf(body, target.secret) } : {}),
  };
  const signal = AbortSignal.timeout(options.timeoutMs);
  let answer: Delivered;
  try {
    answer = await post(url, headers, body, signal, options.guardAddresses || options.dns ? webhookLookup(options.dns ?? DEFAULT_DNS_SETTINGS, options.guardAddresses) : undefined, options.connectTimeoutMs);
  } catch (err) {
    const refusal = addressRefusal(err);
    if (refusal) throw new NoticeRefusedError(`notice to ${where} refused: ${ADDRESS_NOT_ALLOWED}`);
    const reason = signal.aborted
      ? `no answer within ${options.timeoutMs} ms`
      : err instanceof ConnectTimeoutError
        ? err.message
        : ((err as NodeJS.ErrnoException).code ?? (err as Error).message);
    throw new NoticeFailedError(`notice to ${where} failed: ${reason}`);
  }
  const { status } = answer;
  if (status >= 200 && status < 300) return answer;
  const said = describeAnswer(answer);
  if (status >= 400 && status < 500 && !RETRYABLE_4XX.has(status)) throw new NoticeRefusedError(`notice to ${where} refused: ${said}`, status);
  throw new NoticeFailedError(`notice to ${where} failed: ${said}${status >= 300 && status < 400 ? ' (redirects are not followed)' : ''}`, status);
}

/** `HTTP 503: <the start of the body, printable>`, short enough for a webhook's last_error. */
function describeAnswer(answer: Delivered): string {
  const text = answer.body.replace(/[^\x20-\x7e]+/g, ' ').trim().slice(0, 200);
  return `HTTP ${answer.status}${text ? `: ${text}` : ''}`;
}

class ConnectTimeoutError extends Error {}

/**
 * One POST on a connection of its own (no pooling: each connects, and is checked, anew); the answer's
 * first MAX_RESPONSE_BYTES. Connecting is cut after `connectTimeoutMs`, so that an address that
 * swallows connection attempts fails fast and the response timeout is for receivers that answer.
 */
function post(url: URL, headers: Record<string, string>, body: Buffer, signal: AbortSignal, lookup: LookupFunction | undefined, connectTimeoutMs?: number): Promise<Delivered> {
  return new Promise<Delivered>((resolve, reject) => {
    const request = (url.protocol === 'https:' ? https : http).request(url, { method: 'POST', headers, signal, agent: false, ...(lookup ? { lookup } : {}) }, (response) => {
      const chunks: Buffer[] = [];
      let size = 0;
      let settled = false;
      const finish = () => {
        if (settled) return;
        settled = true;
        resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).subarray(0, MAX_RESPONSE_BYTES).toString('utf8') });
        response.destroy();
      };
      response.on('data', (chunk: Buffer) => {
        if (settled) return;
        chunks.push(chunk);
        size += chunk.length;
        if (size >= MAX_RESPONSE_BYTES) finish();
      });
      response.on('end', finish);
      // The status is in; a body cut short (the timeout, a reset) does not change the outcome.
      response.on('error', finish);
      response.on('close', finish);
    });
    request.on('error', reject);
    if (connectTimeoutMs !== undefined) {
      request.once('socket', (socket) => {
        const connected = url.protocol === 'https:' ? 'secureConnect' : 'connect';
        const timer = setTimeout(() => request.destroy(new ConnectTimeoutError(`no connection within ${connectTimeoutMs} ms`)), connectTimeoutMs);
        socket.once(connected, () => clearTimeout(timer));
        socket.once('close', () => clearTimeout(timer));
      });
    }
    request.end(body);
  });
}

/** The approvers' webhook (LK_APPROVERS_WEBHOOK_URL) as a notice target, and the notices it hears. */
const APPROVERS_WEBHOOK_ID = `${DEPLOYMENT_PREFIX}approvers`;
const APPROVAL_NOTICES: ReadonlySet<string> = new Set(APPROVAL_NOTICE_TYPES);

/** The deployment's webhooks, as notice targets: `deployment:<index>` in LK_WEBHOOK_URLS's order, LK_NOTIFY_URL last. */
export function deploymentWebhookIds(settings: Pick<NoticeSettings, 'deploymentWebhooks'>): string[] {
  return settings.deploymentWebhooks.map((_, index) => `${DEPLOYMENT_PREFIX}${index}`);
}

/**
 * Where a notice goes: every deployment webhook, the deployment's approvers' webhook (approval
 * notices), the project's webhooks that want its event type (lease events; its approvers' webhook
 * wants the approval notices only), and oslo.messaging when it is set up; and how long to keep trying.
 */
export async function noticeTargets(db: Pool, settings: NoticeSettings, notice: Pick<Notice, 'projectId' | 'eventType'>): Promise<NoticeTargets> {
  const approvers = settings.approversWebhook !== undefined && APPROVAL_NOTICES.has(notice.eventType) ? [APPROVERS_WEBHOOK_ID] : [];
  return {
    webhooks: [...deploymentWebhookIds(settings), ...approvers, ...(await webhookTargets(db, notice.projectId, notice.eventType))],
    oslo: settings.oslo !== undefined,
    retryForMs: settings.retryForMs,
  };
}

/** A target id's webhook now (its URL, secret, whether it is guarded), or undefined when it is gone (removed, or the settings changed). */
export async function resolveWebhook(db: Pool, settings: NoticeSettings, id: string): Promise<(WebhookTarget & { guardAddresses: boolean; projectId?: string; approvers?: true }) | undefined> {
  if (id === APPROVERS_WEBHOOK_ID) return settings.approversWebhook === undefined ? undefined : { url: settings.approversWebhook, secret: settings.deploymentSecret, guardAddresses: false };
  if (id.startsWith(DEPLOYMENT_PREFIX)) {
    const url = settings.deploymentWebhooks[Number(id.slice(DEPLOYMENT_PREFIX.length))];
    return url === undefined ? undefined : { url, secret: settings.deploymentSecret, guardAddresses: false };
  }
  const stored = await webhookById(db, id);
  return stored && { url: stored.url, secret: stored.secret, guardAddresses: !settings.allowPrivate, projectId: stored.projectId, ...(stored.audience === 'approvers' ? { approvers: true as const } : {}) };
}

/**
 * Delivers a notice to one target id and counts it on a project's webhook: `delivered`, or `gone`
 * when the webhook no longer exists (nothing to do). A refusal is counted as a drop and thrown
 * (final); a failure is thrown for the caller to retry (noteDropped when it gives up).
 *
 * With `gates` (the notice workflow waits on held deliveries), a project's webhook goes only when
 * its project has a place under its cap and its breaker lets it (else: held, and for how long);
 * a delivery it leaves unanswered counts towards its breaker.
 */
export async function sendToWebhook(db: Pool, settings: NoticeSettings, id: string, notice: Notice, gates?: { projectCap: ProjectDeliveryCap }): Promise<'delivered' | 'gone' | DeliveryHeld> {
  const target = await resolveWebhook(db, settings, id);
  // A project's webhook hears its own project's notices only.
  if (!target || (target.projectId !== undefined && target.projectId !== notice.projectId)) return 'gone';
  const options: DeliveryOptions = { timeoutMs: settings.timeoutMs, connectTimeoutMs: settings.delivery.connectTimeoutMs, guardAddresses: target.guardAddresses, ...(target.projectId !== undefined ? { dns: settings.dns } : {}) };
  const project = target.projectId;
  if (!gates || project === undefined) {
    await deliverOnce(db, id, target, notice, options);
    return 'delivered';
  }
  // The deployment's webhooks are the operator's: neither capped nor held. A project's approvers'
  // webhook (set by admins) is held by its own breaker only: the members' webhooks filling their
  // project's cap must not delay the admins' approval notices.
  const place = target.approvers ? { leave: () => {} } : gates.projectCap.enter(project);
  if ('waitMs' in place) return { heldForMs: place.waitMs, reason: 'busy' };
  try {
    // The probe's hold lasts its longest run: the others wait for its outcome.
    const gate = await claimWebhookDelivery(db, id, settings.delivery.breakerFailures, settings.timeoutMs + 5_000);
    if (gate.state === 'held') return { heldForMs: gate.heldForMs, reason: 'breaker' };
    try {
      await deliverOnce(db, id, target, notice, options);
    } catch (err) {
      // No answer at all (time-out, connection failure): what the breaker counts. An answer, even 5xx, is quick.
      if (err instanceof NoticeFailedError && err.status === undefined) {
        await countWebhookFailure(db, id, err.message, { failures: settings.delivery.breakerFailures, cooldownMs: settings.delivery.breakerCooldownMs, maxCooldownMs: MAX_BREAKER_COOLDOWN_MS, probe: gate.state === 'probe' });
      }
      throw err;
    }
    return 'delivered';
  } finally {
    place.leave();
  }
}

async function deliverOnce(db: Pool, id: string, target: WebhookTarget, notice: Notice, options: DeliveryOptions): Promise<void> {
  try {
    await deliverWebhook(target, notice, options);
  } catch (err) {
    if (err instanceof NoticeRefusedError) await noteDropped(db, id, err.message);
    throw err;
  }
  await countDelivery(db, id, 'delivered');
}

/** A notice given up on (refused, or still failing when its retry time ran out), counted on a project's webhook with why. */
export async function noteDropped(db: Pool, id: string, reason: string): Promise<void> {
  if (id.startsWith(DEPLOYMENT_PREFIX)) return;
  await countDelivery(db, id, { dropped: reason });
}
