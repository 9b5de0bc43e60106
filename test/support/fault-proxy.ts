/**
 * A loopback HTTP reverse proxy that integration tests put between our OpenStack clients and a
 * real service (Nova): requests pass through unchanged unless an injected rule matches, in which
 * case the proxy answers with an error status, hangs, resets the connection or delays forwarding.
 * Its URL replaces the service's URL 1:1 in a service catalog override, and it records every
 * request it sees, so tests can both provoke a failure and wait for/assert on the traffic.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type net from 'node:net';
import { pipeline } from 'node:stream';

export type Fault =
  /** An error answer; `body` (JSON) replaces Nova's fault body, e.g. to speak Placement's error shape. */
  | { kind: 'status'; status: number; body?: unknown }
  | { kind: 'hang' }
  | { kind: 'reset' }
  | { kind: 'delay'; ms: number };

export interface FaultRule {
  /** HTTP method, case-insensitive; any method when unset. */
  method?: string;
  /** Tested against the request path + query as received, e.g. /compute/v2.1/os-aggregates/3/action. */
  path: RegExp;
  /** When set, the request body must contain this text (e.g. 'add_host'). */
  bodyIncludes?: string;
  fault: Fault;
  /** How many matching requests get the fault; Infinity for a permanent fault. */
  times: number;
  /**
   * Only this share (0–1] of the matching requests get the fault, spread evenly: the first one,
   * then one every 1/fraction on average (0.25: the 1st, 5th, 9th…). The others pass through and use up none
   * of `times`. Runs repeat exactly.
   */
  fraction?: number;
}

export interface ProxiedRequest {
  method: string;
  path: string;
  body: string;
  outcome: 'forwarded' | 'status' | 'hang' | 'reset' | 'delay';
  /** The status the client was answered with, once known (set later for forwarded/delayed requests). */
  status?: number;
  /** Date.now() when the request (with its body) had arrived. */
  at: number;
}

interface ActiveRule extends FaultRule {
  remaining: number;
  /** Matching requests seen so far (for `fraction`). */
  seen: number;
}

/** Whether the n-th (from 0) matching request is one of the evenly spread `fraction` that get the fault. */
function inFraction(n: number, fraction: number): boolean {
  // A tiny epsilon keeps float error (3 × 0.1 = 0.30000000000000004) from shifting the pattern.
  return Math.ceil((n + 1) * fraction - 1e-9) > Math.ceil(n * fraction - 1e-9);
}

interface RequestWaiter {
  predicate: (r: ProxiedRequest) => boolean;
  resolve: (r: ProxiedRequest) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
}

/** Nova's fault names by status (nova/api/openstack/wsgi.py); anything else is a computeFault. */
const NOVA_FAULT_NAMES: Readonly<Record<number, string>> = {
  400: 'badRequest',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'itemNotFound',
  405: 'badMethod',
  409: 'conflictingRequest',
  413: 'overLimit',
  415: 'badMediaType',
  429: 'overLimit',
  501: 'notImplemented',
  503: 'serviceUnavailable',
};

/** Connection-scoped headers (RFC 9110 §7.6.1) are not passed on by a proxy. */
const HOP_BY_HOP_HEADERS = new Set([
  'connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection',
  'te', 'trailer', 'transfer-encoding', 'upgrade',
]);

function withoutHopByHop(headers: http.IncomingHttpHeaders): http.OutgoingHttpHeaders {
  const kept: http.OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && !HOP_BY_HOP_HEADERS.has(name)) kept[name] = value;
  }
  return kept;
}

function describeRequest(r: ProxiedRequest): string {
  return `${r.method} ${r.path} -> ${r.outcome}${r.status === undefined ? '' : ` ${r.status}`}`;
}

export class FaultProxy {
  readonly url: string;
  readonly requests: ProxiedRequest[] = [];

  private readonly rules: ActiveRule[] = [];
  private readonly sockets = new Set<net.Socket>();
  private readonly pendingDelays = new Set<NodeJS.Timeout>();
  private readonly waiters = new Set<RequestWaiter>();
  // One agent per proxy without keep-alive, so no upstream socket outlives stop().
  private readonly agent = new http.Agent({ keepAlive: false });
  private faultsApplied = 0;
  private stopping: Promise<void> | undefined;

  private constructor(
    private readonly server: http.Server,
    private readonly target: URL,
    port: number,
  ) {
    this.url = `http://127.0.0.1:${port}${FaultProxy.pathPrefix(target)}`;
  }

  /** Starts a proxy to `target` (e.g. http://127.0.0.1:10774/compute) on a free loopback port. */
  static async start(target: string): Promise<FaultProxy> {
    const targetUrl = new URL(target);
    if (targetUrl.protocol !== 'http:') throw new Error(`FaultProxy: only http:// targets are supported, got ${target}`);
    const server = http.createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    const { port } = server.address() as net.AddressInfo;
    const proxy = new FaultProxy(server, targetUrl, port);
    proxy.attach();
    return proxy;
  }

  /** The target's path without a trailing slash: '' for http://h:p and http://h:p/. */
  private static pathPrefix(target: URL): string {
    return target.pathname.replace(/\/+$/, '');
  }

  /** Adds a rule; rules are checked in insertion order and the first one with times left applies. */
  inject(rule: FaultRule): void {
    if (!(rule.times >= 0) || (Number.isFinite(rule.times) && !Number.isInteger(rule.times))) {
      throw new Error(`FaultProxy: times must be a non-negative integer or Infinity, got ${rule.times}`);
    }
    if (rule.fault.kind === 'status' && !(Number.isInteger(rule.fault.status) && rule.fault.status >= 200 && rule.fault.status <= 599)) {
      throw new Error(`FaultProxy: status must be an integer in 200..599, got ${rule.fault.status}`);
    }
    if (rule.fault.kind === 'delay' && !(rule.fault.ms >= 0 && Number.isFinite(rule.fault.ms))) {
      throw new Error(`FaultProxy: delay ms must be a finite non-negative number, got ${rule.fault.ms}`);
    }
    if (rule.fraction !== undefined && !(rule.fraction > 0 && rule.fraction <= 1)) {
      throw new Error(`FaultProxy: fraction must be in (0, 1], got ${rule.fraction}`);
    }
    this.rules.push({ ...rule, remaining: rule.times, seen: 0 });
  }

  /** Drops all rules; requests already hanging stay hung until stop(). */
  clear(): void {
    this.rules.length = 0;
  }

  /** How many faults (of any kind) were applied so far. */
  injected(): number {
    return this.faultsApplied;
  }

  /** The first request, already seen or still to come, that matches; rejects after timeoutMs. */
  waitForRequest(predicate: (r: ProxiedRequest) => boolean, timeoutMs: number): Promise<ProxiedRequest> {
    const seen = this.requests.find(predicate);
    if (seen) return Promise.resolve(seen);
    return new Promise<ProxiedRequest>((resolve, reject) => {
      const waiter: RequestWaiter = {
        predicate,
        resolve,
        reject,
        timer: setTimeout(() => {
          this.waiters.delete(waiter);
          const seenSoFar = this.requests.map(describeRequest).join('; ') || 'none';
          reject(new Error(`FaultProxy: no matching request within ${timeoutMs} ms (seen: ${seenSoFar})`));
        }, timeoutMs),
      };
      this.waiters.add(waiter);
    });
  }

  /** Closes the server and destroys every socket, hung ones included; safe to call twice. */
  stop(): Promise<void> {
    this.stopping ??= new Promise<void>((resolve) => {
      for (const timer of this.pendingDelays) clearTimeout(timer);
      this.pendingDelays.clear();
      for (const waiter of this.waiters) {
        clearTimeout(waiter.timer);
        waiter.reject(new Error('FaultProxy: stopped while waiting for a request'));
      }
      this.waiters.clear();
      this.server.close(() => resolve());
      for (const socket of this.sockets) socket.destroy();
      this.agent.destroy();
    });
    return this.stopping;
  }

  private attach(): void {
    this.server.on('connection', (socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
    });
    this.server.on('request', (req, res) => this.onRequest(req, res));
  }

  private onRequest(req: http.IncomingMessage, res: http.ServerResponse): void {
    // The whole body is needed before deciding: bodyIncludes matches on it.
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('error', () => res.destroy());
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const record: ProxiedRequest = {
        method: req.method ?? 'GET',
        path: req.url ?? '/',
        body: body.toString('utf8'),
        outcome: 'forwarded',
        at: Date.now(),
      };
      const rule = this.takeMatchingRule(record);
      if (rule) {
        this.faultsApplied += 1;
        record.outcome = rule.fault.kind;
        if (rule.fault.kind === 'status') record.status = rule.fault.status;
      }
      this.record(record);
      this.apply(rule?.fault, req, res, body, record);
    });
  }

  private takeMatchingRule(request: ProxiedRequest): ActiveRule | undefined {
    const rule = this.rules.find((candidate) => {
      if (candidate.remaining <= 0) return false;
      if (candidate.method !== undefined && candidate.method.toUpperCase() !== request.method.toUpperCase()) return false;
      candidate.path.lastIndex = 0; // a /g or /y RegExp would otherwise carry state between requests
      if (!candidate.path.test(request.path)) return false;
      if (candidate.bodyIncludes !== undefined && !request.body.includes(candidate.bodyIncludes)) return false;
      return candidate.fraction === undefined || inFraction(candidate.seen++, candidate.fraction);
    });
    if (rule) rule.remaining -= 1;
    return rule;
  }

  private record(request: ProxiedRequest): void {
    this.requests.push(request);
    for (const waiter of this.waiters) {
      if (!waiter.predicate(request)) continue;
      clearTimeout(waiter.timer);
      this.waiters.delete(waiter);
      waiter.resolve(request);
    }
  }

  private apply(fault: Fault | undefined, req: http.IncomingMessage, res: http.ServerResponse, body: Buffer, record: ProxiedRequest): void {
    switch (fault?.kind) {
      case undefined:
        this.forward(req, res, body, record);
        return;
      case 'status':
        FaultProxy.answerWithFault(res, fault.status, fault.body);
        return;
      case 'hang':
        // Never answer: the socket is closed by the client giving up or by stop().
        return;
      case 'reset':
        // An RST rather than a FIN, so the client sees ECONNRESET as with a crashed service.
        req.socket.resetAndDestroy();
        return;
      case 'delay': {
        const timer = setTimeout(() => {
          this.pendingDelays.delete(timer);
          if (!res.destroyed) this.forward(req, res, body, record);
        }, fault.ms);
        this.pendingDelays.add(timer);
        return;
      }
    }
  }

  private static answerWithFault(res: http.ServerResponse, status: number, body?: unknown): void {
    const name = NOVA_FAULT_NAMES[status] ?? 'computeFault';
    const payload = JSON.stringify(body ?? { [name]: { code: status, message: 'injected fault' } });
    res.writeHead(status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(payload),
      'x-openstack-request-id': `req-${randomUUID()}`,
    });
    res.end(payload);
  }

  private forward(req: http.IncomingMessage, res: http.ServerResponse, body: Buffer, record: ProxiedRequest): void {
    const headers = withoutHopByHop(req.headers);
    headers.host = this.target.host;
    // The body was buffered (and any chunked framing removed), so its length is now known.
    if (body.length > 0 || req.headers['content-length'] !== undefined) headers['content-length'] = body.length;

    const upstream = http.request({
      agent: this.agent,
      hostname: this.target.hostname.replace(/^\[|\]$/g, ''), // IPv6 literals come bracketed
      port: this.target.port || 80,
      method: req.method,
      path: req.url, // unchanged: the proxy URL carries the same path prefix as the target
      headers,
    });
    upstream.on('response', (upstreamRes) => {
      record.status = upstreamRes.statusCode;
      res.writeHead(upstreamRes.statusCode ?? 502, upstreamRes.statusMessage, withoutHopByHop(upstreamRes.headers));
      // pipeline destroys both sides if either fails, e.g. the upstream dies mid-body.
      pipeline(upstreamRes, res, () => undefined);
    });
    upstream.on('error', (error: NodeJS.ErrnoException) => {
      if (res.headersSent || res.destroyed || this.stopping) {
        res.destroy();
        return;
      }
      record.status = 502;
      const payload = JSON.stringify({
        badGateway: { code: 502, message: `FaultProxy: upstream ${this.target.host} failed: ${error.code ?? error.message}` },
      });
      res.writeHead(502, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
      res.end(payload);
    });
    // A client that gives up (e.g. its AbortSignal fired) should not leave the upstream call running.
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
    upstream.end(body);
  }
}
