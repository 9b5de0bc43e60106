/**
 * The API's HTTP server, with the limits that keep slow or piled-up clients from holding it:
 * a request (headers and body) must arrive within `requestTimeoutMs` (its headers within
 * `headersTimeoutMs`), else Node answers 408 and closes the connection; connections beyond
 * `maxConnections` are closed at once. main.ts and the test stack both build their server here.
 */
import http from 'node:http';
import type { Duplex } from 'node:stream';
import { errorBody } from './errors';

/** All request headers together (Node's default, stated: identity headers reach workflows and the database). */
export const MAX_HEADER_BYTES = 16 * 1024;

export interface ServerLimits {
  requestTimeoutMs: number;
  headersTimeoutMs: number;
  maxConnections: number;
}

export function createApiServer(handler: http.RequestListener, limits: ServerLimits): http.Server {
  const headersTimeout = Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs); // Node refuses a longer one
  const server = http.createServer(
    {
      requestTimeout: limits.requestTimeoutMs,
      headersTimeout,
      maxHeaderSize: MAX_HEADER_BYTES, // larger headers: 431 (identity headers are further bounded in auth.ts)
      // Node enforces both timeouts only when it checks its connections (every 30 s by default).
      connectionsCheckingInterval: Math.min(1_000, headersTimeout),
    },
    handler,
  );
  server.maxConnections = limits.maxConnections;
  server.on('clientError', answerClientError);
  return server;
}

/** Requests Node refuses before any route sees them (oversized headers, malformed HTTP, too slow): with Blazar's error body too. */
function answerClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy();
    return;
  }
  const [status, message] =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? [431, `request headers too large: at most ${MAX_HEADER_BYTES} bytes in all`]
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'the request did not arrive in time']
        : [400, 'malformed HTTP request'];
  const body = JSON.stringify(errorBody(status, message));
  socket.end(
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}
