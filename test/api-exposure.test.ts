/**
 * What a hostile web page or a slow client can do to the API: links never follow the Host header,
 * bodies are JSON only when they say so (no cross-site form or text/plain posts), a request that
 * trickles in is cut off, and connections beyond the cap are closed.
 */
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { createApiServer, type ServerLimits } from '../src/api/server';
import { apiClient, useTestStack } from '../dev-stack/stack';
import { apiJson } from '../dev-stack/http';
import { testConfig } from '../dev-stack/temporal-connection';

function listen(server: http.Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)));
}

function close(server: http.Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

/** Sends `head`, then `trickle` one byte every 50 ms (at most 200: 10 s); resolves with what came back once the server closed. */
function trickle(port: number, head: string, trickled: string): Promise<{ answer: string; sent: number }> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    let answer = '';
    let sent = 0;
    const timer = setInterval(() => {
      if (sent >= Math.min(trickled.length, 200)) return;
      socket.write(trickled[sent++]);
    }, 50);
    socket.on('connect', () => socket.write(head));
    socket.on('data', (chunk) => (answer += chunk.toString()));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearInterval(timer);
      resolve({ answer, sent });
    });
  });
}

describe('API exposure', () => {
  const stack = useTestStack({ noWorker: true, env: { LK_PUBLIC_URL: 'https://reservation.example.org/' } });

  it('links to the configured public URL, never to the Host header', async () => {
    const body = await new Promise<{ versions: Array<{ links: unknown }> }>((resolve, reject) => {
      http
        .get(`${stack().url}/`, { headers: { host: 'evil.example.com' } }, (res) => {
          let text = '';
          res.on('data', (chunk: Buffer) => (text += chunk.toString()));
          res.on('end', () => resolve(JSON.parse(text)));
        })
        .on('error', reject);
    });
    expect(body.versions[0].links).toEqual([{ rel: 'self', href: 'https://reservation.example.org/v1/' }]);
  });

  it('refuses request bodies that are not application/json with 415 (a web page cannot post them cross-site as JSON)', async () => {
    const lease = JSON.stringify({ name: 'csrf', start_date: 'now', end_date: '2099-01-01 10:00' });
    for (const type of ['text/plain;charset=UTF-8', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
      const res = await fetch(`${stack().url}/v1/leases`, { method: 'POST', headers: { 'content-type': type }, body: lease });
      expect([res.status, await apiJson(res)]).toEqual([415, { error_code: 415, error_name: 415, error_message: `Unsupported Content-Type ${JSON.stringify(type)}: request bodies must be application/json` }]);
    }
    // JSON with a charset is JSON; requests without a body need no type.
    const invalid = await fetch(`${stack().url}/v1/leases`, { method: 'POST', headers: { 'content-type': 'application/json; charset=utf-8' }, body: '{}' });
    expect(invalid.status).toBe(400);
    expect((await fetch(`${stack().url}/v1/leases`)).status).toBe(200);
    expect((await fetch(`${stack().url}/v1/leases/${'0'.repeat(8)}`, { method: 'DELETE', headers: { 'content-length': '0' } })).status).toBe(404); // blazarclient's DELETE
    expect((await apiClient(stack().url)('GET', '/v1/leases')).status).toBe(200);
  });

  describe('the HTTP server (createApiServer, as main.ts and the test stack build it)', () => {
    const limitsOf = (env: Record<string, string>): ServerLimits => testConfig(env).api.server;

    it.each([
      ['its body', 'POST /v1/leases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n', 'x'.repeat(1000)],
      ['its headers', 'GET / HTTP/1.1\r\n', 'X-Slow: ' + 'x'.repeat(1000)],
    ])('answers 408 and closes the connection of a client that trickles %s', async (_what, head, trickled) => {
      const server = createApiServer((req, res) => {
        req.resume();
        req.on('end', () => res.end('done'));
      }, limitsOf({ LK_API_REQUEST_TIMEOUT_MS: '600', LK_API_HEADERS_TIMEOUT_MS: '300' }));
      const port = await listen(server);
      try {
        const { answer, sent } = await trickle(port, head, trickled);
        expect(answer).toMatch(/^HTTP\/1\.1 408 /);
        expect(answer).toContain('"error_message":"the request did not arrive in time"'); // Blazar's body, not Node's bare answer
        expect(sent).toBeLessThan(200); // cut off long before the client finished
      } finally {
        await close(server);
      }
    });

    it('closes connections beyond LK_API_MAX_CONNECTIONS at once', async () => {
      const server = createApiServer((_req, res) => res.end('ok'), limitsOf({ LK_API_MAX_CONNECTIONS: '2' }));
      const port = await listen(server);
      let accepted = 0;
      server.on('connection', () => accepted++);
      const sockets: net.Socket[] = [];
      const open = () => {
        const socket = net.connect(port, '127.0.0.1');
        socket.on('error', () => undefined);
        sockets.push(socket);
        return socket;
      };
      try {
        open();
        open();
        for (let i = 0; i < 100 && accepted < 2; i++) await new Promise((resolve) => setTimeout(resolve, 20));
        expect(accepted).toBe(2);
        const third = open();
        await new Promise((resolve) => third.on('close', resolve));
        expect(sockets.slice(0, 2).map((s) => s.destroyed)).toEqual([false, false]);
      } finally {
        for (const socket of sockets) socket.destroy();
        await close(server);
      }
    });
  });
});
