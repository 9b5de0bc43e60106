/**
 * Every request gets an id, `req-<uuid>` as OpenStack's services make them (oslo's request-id
 * middleware): sent back in `x-openstack-request-id`, in every log line the request causes (a child
 * logger) and in its error body (`request_id`), so that a user's error report finds its log lines.
 * A caller's own `X-OpenStack-Request-ID` (a `req-<uuid>` another service started with) is logged as
 * the global request id, as oslo does, never used as ours.
 */
import { randomUUID } from 'node:crypto';
import type { RequestHandler, Response } from 'express';
import type { Logger } from '../log';

export const REQUEST_ID_HEADER = 'x-openstack-request-id';
const REQUEST_ID = /^req-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function requestIds(log: Logger): RequestHandler {
  return (req, res, next) => {
    const requestId = `req-${randomUUID()}`;
    const global = req.get(REQUEST_ID_HEADER);
    res.locals.requestId = requestId;
    res.locals.log = log.child({ request_id: requestId, ...(global !== undefined && REQUEST_ID.test(global) ? { global_request_id: global } : {}) });
    res.set(REQUEST_ID_HEADER, requestId);
    next();
  };
}

/** The request's logger (its lines carry the request id), or `fallback` before the id was given. */
export function requestLog(res: Response, fallback: Logger): Logger {
  return (res.locals.log as Logger | undefined) ?? fallback;
}

export function requestIdOf(res: Response): string | undefined {
  return res.locals.requestId as string | undefined;
}
