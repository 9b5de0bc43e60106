/**
 * A webhook receiver on 127.0.0.1, as the tests of lease notices need one: it records every
 * request with the exact bytes of its body (signatures are over them), answers 204 unless told
 * otherwise, and can refuse the first deliveries (so that a test sees the sender retry) or never
 * answer at all.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Delivery {
  /** The request's path and query. */
  path: string;
  headers: http.IncomingHttpHeaders;
  /** The body exactly as sent. */
  raw: Buffer;
  /** The body as JSON: a notice, or what else a sender under test posts (Blazar's external filter asks with a lease). */
  body: { event_type: string; message_id?: string; payload: Record<string, unknown> } & Record<string, unknown>;
}

export interface WebhookReceiverOptions {
  /** Where a webhook points on this receiver: the URL's path and query (default /hooks/leases). */
  path?: string;
  /** The first this many requests are answered `failWith` (default 503). */
  failFirst?: number;
  failWith?: number;
  /** Answers each request after those; writing nothing leaves it unanswered until `close`. Default: 204. */
  answer?: (res: http.ServerResponse, delivery: Delivery) => void;
}

export interface WebhookReceiver {
  /** http://127.0.0.1:<port> */
  origin: string;
  port: number;
  /** The origin and the path: the webhook's URL. */
  url: string;
  /** Every request, in order of arrival, whatever its answer. */
  requests: Delivery[];
  /** The requests answered 2xx: the deliveries a sender counts as done. */
  received: Delivery[];
  /** The requests answered with anything else, so far. */
  refused: () => number;
  /** Requests left unanswered whose connection is still open (a tarpit's held deliveries). */
  unanswered: () => number;
  /** The most requests ever unanswered at once. */
  mostUnanswered: () => number;
  /** Requests left unanswered whose connection the sender gave up on (its time-out) before `close`. */
  abandoned: () => number;
  /** Stops listening and cuts any connection still open (a request never answered included). */
  close: () => Promise<void>;
}

export async function startWebhookReceiver(options: WebhookReceiverOptions = {}): Promise<WebhookReceiver> {
  const { failFirst = 0, failWith = 503, answer = (res) => void res.writeHead(204).end() } = options;
  const requests: Delivery[] = [];
  const received: Delivery[] = [];
  let refused = 0;
  let unanswered = 0;
  let mostUnanswered = 0;
  let abandoned = 0;
  let closing = false;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const delivery: Delivery = { path: req.url ?? '', headers: req.headers, raw, body: JSON.parse(raw.toString('utf8')) };
      requests.push(delivery);
      if (requests.length <= failFirst) res.writeHead(failWith).end();
      else answer(res, delivery);
      if (!res.headersSent) {
        // Left unanswered: counted until the connection ends (answered late, given up on, or cut by close).
        unanswered++;
        mostUnanswered = Math.max(mostUnanswered, unanswered);
        res.once('close', () => {
          unanswered--;
          if (!res.headersSent && !closing) abandoned++;
        });
        return;
      }
      if (res.statusCode < 300) received.push(delivery);
      else refused++;
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const origin = `http://127.0.0.1:${port}`;
  return {
    origin,
    port,
    url: `${origin}${options.path ?? '/hooks/leases'}`,
    requests,
    received,
    refused: () => refused,
    unanswered: () => unanswered,
    mostUnanswered: () => mostUnanswered,
    abandoned: () => abandoned,
    close: async () => {
      closing = true;
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
