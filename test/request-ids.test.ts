/**
 * Request ids: every answer has its own `x-openstack-request-id` (`req-<uuid>`, as OpenStack's
 * services), an error body carries the same id in `request_id`, and every log line of the request
 * has it (with the caller's own id as `global_request_id`), so that an error report finds its log.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import pino from 'pino';
import { createApp } from '../src/api/app';
import { pluginRegistry } from '../src/domain/resource-plugin';
import { useTestStack } from '../dev-stack/stack';

const REQUEST_ID = /^req-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('request ids', () => {
  const stack = useTestStack({ noWorker: true });
  const lines: Array<Record<string, unknown>> = [];
  let server: Server;
  let url: string;

  beforeAll(async () => {
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line) as Record<string, unknown>);
        done();
      },
    });
    const { config, db, temporal } = stack();
    const app = createApp({ config, log: pino({ level: 'info' }, sink), pool: db.pool, connection: temporal.connection, client: temporal.client, types: pluginRegistry([]) });
    server = await new Promise<Server>((resolve) => {
      const s = app.listen(0, '127.0.0.1', () => resolve(s));
    });
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise((resolve) => server.close(resolve)));

  /** The log lines of one request, once its answer has been logged. */
  const linesOf = (requestId: string) => lines.filter((l) => l.request_id === requestId);

  it('gives every answer its own id, in the header and, for an error, in the body and every log line', async () => {
    const ok = await fetch(`${url}/v1/leases`);
    const other = await fetch(`${url}/v1/leases`);
    const okId = ok.headers.get('x-openstack-request-id')!;
    expect(okId).toMatch(REQUEST_ID);
    expect(other.headers.get('x-openstack-request-id')).not.toBe(okId);

    const malformed = await fetch(`${url}/v1/leases`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name": ' });
    const id = malformed.headers.get('x-openstack-request-id')!;
    expect(await malformed.json()).toEqual({ error_code: 400, error_name: 400, error_message: 'Malformed JSON in request body', request_id: id });

    const unavailable = await fetch(`${url}/v1/nothing`);
    const unavailableId = unavailable.headers.get('x-openstack-request-id');
    expect(await unavailable.json()).toMatchObject({ error_code: 404, request_id: unavailableId });

    await new Promise((resolve) => setImmediate(resolve)); // the answer's log line is written when it finishes
    expect(linesOf(okId)).toEqual([expect.objectContaining({ msg: 'request', method: 'GET', path: '/v1/leases', status: 200 })]);
    expect(linesOf(id)).toEqual([expect.objectContaining({ msg: 'request', status: 400 })]);
  });

  it("logs a caller's own request id as the global one, never answering with it", async () => {
    const global = 'req-6e4d6c0c-1b1a-4c63-9d5e-0f9f3c7b2a11';
    const res = await fetch(`${url}/v1/leases`, { headers: { 'X-OpenStack-Request-ID': global } });
    const id = res.headers.get('x-openstack-request-id')!;
    expect(id).toMatch(REQUEST_ID);
    expect(id).not.toBe(global);
    await new Promise((resolve) => setImmediate(resolve));
    expect(linesOf(id)).toEqual([expect.objectContaining({ global_request_id: global, msg: 'request' })]);
    // Not a request id: not logged as one (it goes nowhere).
    const forged = await fetch(`${url}/v1/leases`, { headers: { 'X-OpenStack-Request-ID': 'req-"; DROP' } });
    await new Promise((resolve) => setImmediate(resolve));
    expect(linesOf(forged.headers.get('x-openstack-request-id')!)[0]).not.toHaveProperty('global_request_id');
  });

  it('names the request id in a 500, and logs the failure under it', async () => {
    // A database that fails unexpectedly (not an outage): the answer is a bare 500 with the id to look for.
    const broken = Object.assign(new Error('relation "leases" does not exist'), { code: '42P01' });
    const query = stack().db.pool.query.bind(stack().db.pool);
    const spy = jest.spyOn(stack().db.pool, 'query').mockImplementation(((...args: unknown[]) => (String(args[0]).includes('FROM leases') ? Promise.reject(broken) : (query as (...a: unknown[]) => unknown)(...args))));
    try {
      const res = await fetch(`${url}/v1/leases`);
      const id = res.headers.get('x-openstack-request-id')!;
      expect(res.status).toBe(500);
      expect(await res.json()).toEqual({ error_code: 500, error_name: 500, error_message: `Internal server error: see the leasekeeper-api log (${id})`, request_id: id });
      await new Promise((resolve) => setImmediate(resolve));
      expect(linesOf(id).map((l) => l.msg)).toEqual(['unhandled API error', 'request']);
    } finally {
      spy.mockRestore();
    }
  });
});
