/**
 * A project's own webhooks (an extension): `GET /v1/projects/{id}/webhooks` lists them, `PUT`
 * replaces the list (at most 10). Members read and set their own project's, admins any project's.
 * Each gets the project's lease notices (all, or the `events` listed), signed with its secret: one
 * given, or one generated and shown once, in the answer of the PUT that made it. A URL must resolve
 * to a public address (unless LK_WEBHOOK_ALLOW_PRIVATE): a webhook is not a way into the cloud's
 * own network.
 *
 * `GET/PUT/DELETE /v1/projects/{id}/approvers-webhook` (admins only): the project's approvers'
 * webhook, which hears the approval notices of the project's leases (besides the deployment's
 * LK_APPROVERS_WEBHOOK_URL). It is kept beside the project's webhooks, in their table, so that it is
 * delivered, signed, address-guarded, held by its breaker and counted as they are (never against the
 * members' cap of deliveries in flight); not in the project's policy, which members read and which
 * holds no secrets.
 */
import { Router, type Response } from 'express';
import { z } from 'zod';
import type { Pool } from '../db/pool';
import { approversWebhookOf, deleteApproversWebhook, listWebhooks, replaceWebhooks, setApproversWebhook, type StoredWebhook } from '../db/webhooks';
import { formatBlazarTimestamp } from '../domain/dates';
import { APPROVAL_NOTICE_TYPES, LEASE_NOTICE_TYPES } from '../domain/notices';
import { httpUrl } from '../config';
import { checkWebhookAddress, WebhookAddressError } from '../notifications/webhook-address';
import { generateSecret, type NoticeSettings } from '../notifications/webhooks';
import { identityOf, projectInScope } from './auth';
import { ApiError, parseRequest } from './errors';

export const MAX_PROJECT_WEBHOOKS = 10;

const webhookSecret = z
  .string()
  .min(16, 'expected 16 to 256 characters')
  .max(256, 'expected 16 to 256 characters')
  .regex(/^[\x20-\x7e]+$/, 'expected printable ASCII');

const webhookUrl = httpUrl.describe('http:// or https://, at most 2048 characters, no credentials; it must resolve to public addresses only');

const leaseEventType = z.enum(LEASE_NOTICE_TYPES, { error: (issue) => (issue.input === undefined ? undefined : `expected a lease event type: ${LEASE_NOTICE_TYPES.join(', ')}`) });

export const webhooksBody = z.strictObject({
  webhooks: z
    .array(
      z.strictObject({
        url: webhookUrl,
        secret: webhookSecret
          .optional()
          .describe('the HMAC-SHA256 key of X-Leasekeeper-Signature; absent: kept for a URL already listed, else generated and shown once'),
        events: z
          .array(leaseEventType)
          .min(1, 'expected at least one event type (leave `events` out for all)')
          .max(LEASE_NOTICE_TYPES.length, 'expected each event type once')
          .optional()
          .describe('the lease event types it gets; absent: all'),
      }),
    )
    .max(MAX_PROJECT_WEBHOOKS, `expected at most ${MAX_PROJECT_WEBHOOKS} webhooks per project`),
});

export const approversWebhookBody = z.strictObject({
  url: webhookUrl,
  secret: webhookSecret.optional().describe('the HMAC-SHA256 key of X-Leasekeeper-Signature; absent: kept when the URL is the same, else generated and shown once'),
});

const projectIdOf = (res: Response, raw: string, action: 'get' | 'put'): string =>
  projectInScope(res, raw, `blazar:projects:webhooks:${action}`, { ownOnly: "members see and set their own project's webhooks only" });

function shown(webhook: StoredWebhook, secret?: string) {
  return {
    id: webhook.id,
    url: webhook.url,
    events: webhook.events,
    secret_set: true as const,
    ...(secret ? { secret } : {}),
    delivered_count: webhook.deliveredCount,
    dropped_count: webhook.droppedCount,
    last_error: webhook.lastError,
    last_error_at: webhook.lastErrorAt ? formatBlazarTimestamp(webhook.lastErrorAt.getTime()) : null,
    created_at: formatBlazarTimestamp(webhook.createdAt.getTime()),
  };
}

/** A URL's name resolved and checked (public addresses only, unless allowed); refused naming `field`, never the address. */
async function checkAddress(url: string, field: string, settings: Pick<NoticeSettings, 'allowPrivate' | 'dns'>): Promise<void> {
  try {
    await checkWebhookAddress(url, { allowPrivate: settings.allowPrivate, dns: settings.dns });
  } catch (err) {
    if (err instanceof WebhookAddressError) throw new ApiError(400, `${field}: ${err.message}`);
    throw err;
  }
}

export function webhooksRouter(deps: { pool: Pool; settings: Pick<NoticeSettings, 'allowPrivate' | 'dns'> }): Router {
  const router = Router();

  router.get('/projects/:projectId/webhooks', async (req, res) => {
    const projectId = projectIdOf(res, req.params.projectId, 'get');
    res.json({ webhooks: (await listWebhooks(deps.pool, projectId)).map((webhook) => shown(webhook)) });
  });

  router.put('/projects/:projectId/webhooks', async (req, res) => {
    const projectId = projectIdOf(res, req.params.projectId, 'put');
    const { webhooks } = parseRequest(webhooksBody, req.body ?? {});
    // The URL as the WHATWG parser writes it, so that the same webhook written twice is one.
    const rows = webhooks.map((webhook) => ({ url: new URL(webhook.url).href, events: webhook.events ? [...new Set(webhook.events)] : null, secret: webhook.secret, generatedSecret: generateSecret() }));
    const seen = new Set<string>();
    for (const [index, row] of rows.entries()) {
      if (seen.has(row.url)) throw new ApiError(400, `webhooks[${index}].url: listed twice`);
      seen.add(row.url);
    }
    // Each URL's name resolved at once (each bounded by its own timeout), refused with the first problem in the list's order.
    const checks = await Promise.allSettled(rows.map((row) => checkWebhookAddress(row.url, { allowPrivate: deps.settings.allowPrivate, dns: deps.settings.dns })));
    for (const [index, check] of checks.entries()) {
      if (check.status === 'fulfilled') continue;
      // The message names no address: a refusal must not tell what a name resolves to.
      if (check.reason instanceof WebhookAddressError) throw new ApiError(400, `webhooks[${index}].url: ${check.reason.message}`);
      throw check.reason;
    }
    const stored = await replaceWebhooks(deps.pool, projectId, rows, identityOf(res).userId);
    const generated = new Map(rows.map((row) => [row.url, row.generatedSecret]));
    res.json({ webhooks: stored.map((webhook) => shown(webhook, webhook.secretGenerated ? generated.get(webhook.url) : undefined)) });
  });

  const approversProjectOf = (res: Response, raw: string, action: 'get' | 'put' | 'delete'): string =>
    projectInScope(res, raw, `blazar:projects:approvers_webhook:${action}`, { adminOnly: true, ownOnly: 'admins only' });

  router.get('/projects/:projectId/approvers-webhook', async (req, res) => {
    const webhook = await approversWebhookOf(deps.pool, approversProjectOf(res, req.params.projectId, 'get'));
    res.json({ approvers_webhook: webhook ? shown(webhook) : null });
  });

  router.put('/projects/:projectId/approvers-webhook', async (req, res) => {
    const projectId = approversProjectOf(res, req.params.projectId, 'put');
    const body = parseRequest(approversWebhookBody, req.body ?? {});
    const url = new URL(body.url).href;
    await checkAddress(url, 'url', deps.settings);
    const generatedSecret = generateSecret();
    const stored = await setApproversWebhook(deps.pool, projectId, { url, secret: body.secret, generatedSecret, events: [...APPROVAL_NOTICE_TYPES] }, identityOf(res).userId);
    res.json({ approvers_webhook: shown(stored, stored.secretGenerated ? generatedSecret : undefined) });
  });

  router.delete('/projects/:projectId/approvers-webhook', async (req, res) => {
    const projectId = approversProjectOf(res, req.params.projectId, 'delete');
    if (!(await deleteApproversWebhook(deps.pool, projectId))) throw new ApiError(404, `project ${projectId} has no approvers' webhook`);
    res.status(204).end();
  });

  return router;
}
