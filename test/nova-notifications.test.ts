/**
 * Nova's versioned notifications as the host monitor reads them: the oslo.messaging envelope around
 * a service.update (captured from the rig's Nova 26), what is ignored (other events and services,
 * unversioned payloads, garbage: never a throw), the transport URL, a consumer whose broker is
 * not one (it keeps trying, never throws, stops at once), and the waker that turns notices into
 * the monitor's looks (throttled; once more after the grace while a host is suspect).
 */
import net from 'node:net';
import { Writable } from 'node:stream';
import pino from 'pino';
import { MAX_NOTIFICATION_BYTES, parseNovaNotification, parseTransportUrl } from '../src/openstack/nova-notifications';
import { consumeNovaNotifications } from '../src/openstack/nova-notifications-consumer';
import { HostMonitorWaker, WAKE_THROTTLE_MS } from '../worker/host-monitor';
import type { HostHealthMap } from '../src/domain/host-health';

/** The body of a service.update the rig's Nova 26 (Zed) sent for `PUT /os-services/{id} {"forced_down": true}` (message properties: application/json, utf-8). */
const CAPTURED_FORCED_DOWN =
  "{\"oslo.version\": \"2.0\", \"oslo.message\": \"{\\\"message_id\\\": \\\"978c864a-3d7f-4c47-94ac-034c3033b910\\\", \\\"publisher_id\\\": \\\"nova-compute:fake-2\\\", \\\"event_type\\\": \\\"service.update\\\", \\\"priority\\\": \\\"INFO\\\", \\\"payload\\\": {\\\"nova_object.name\\\": \\\"ServiceStatusPayload\\\", \\\"nova_object.namespace\\\": \\\"nova\\\", \\\"nova_object.version\\\": \\\"1.1\\\", \\\"nova_object.data\\\": {\\\"host\\\": \\\"fake-2\\\", \\\"binary\\\": \\\"nova-compute\\\", \\\"topic\\\": \\\"compute\\\", \\\"report_count\\\": 8, \\\"disabled\\\": false, \\\"disabled_reason\\\": null, \\\"availability_zone\\\": null, \\\"last_seen_up\\\": \\\"2026-11-25T08:56:00Z\\\", \\\"forced_down\\\": true, \\\"version\\\": 64, \\\"uuid\\\": \\\"6f483be1-e4e3-409a-b560-6d80797b8c9b\\\"}}, \\\"timestamp\\\": \\\"2026-11-25 08:56:09.127108\\\", \\\"_unique_id\\\": \\\"4ec8cd4a659543199786a1df435757d2\\\", \\\"_context_user\\\": \\\"be06986c85214b8dab38c189f872381d\\\", \\\"_context_project_id\\\": \\\"e3ef5073af2a441294dcc53d6c887d99\\\", \\\"_context_system_scope\\\": null, \\\"_context_project\\\": \\\"e3ef5073af2a441294dcc53d6c887d99\\\", \\\"_context_domain\\\": null, \\\"_context_user_domain\\\": \\\"default\\\", \\\"_context_project_domain\\\": \\\"default\\\", \\\"_context_is_admin\\\": true, \\\"_context_read_only\\\": false, \\\"_context_show_deleted\\\": false, \\\"_context_auth_token\\\": null, \\\"_context_request_id\\\": \\\"req-a7881aae-26cf-4a97-94be-c332a5b08073\\\", \\\"_context_global_request_id\\\": null, \\\"_context_resource_uuid\\\": null, \\\"_context_roles\\\": [\\\"admin\\\", \\\"member\\\", \\\"reader\\\"], \\\"_context_user_identity\\\": \\\"be06986c85214b8dab38c189f872381d e3ef5073af2a441294dcc53d6c887d99 - default default\\\", \\\"_context_is_admin_project\\\": true, \\\"_context_user_id\\\": \\\"be06986c85214b8dab38c189f872381d\\\", \\\"_context_read_deleted\\\": \\\"no\\\", \\\"_context_remote_address\\\": null, \\\"_context_timestamp\\\": \\\"2026-11-25T08:56:09.127081\\\", \\\"_context_quota_class\\\": null, \\\"_context_user_name\\\": \\\"admin\\\", \\\"_context_service_catalog\\\": [], \\\"_context_project_name\\\": \\\"admin\\\"}\"}";

/** A service.update of the same shape, with fields changed. */
function serviceUpdate(data: Record<string, unknown> = {}, eventType = 'service.update'): Record<string, unknown> {
  return {
    message_id: '0c5c4a7e-1f0e-4a55-9a0e-6b1b8f7c2d11',
    publisher_id: 'nova-compute:fake-2',
    event_type: eventType,
    priority: 'INFO',
    payload: {
      'nova_object.name': 'ServiceStatusPayload',
      'nova_object.namespace': 'nova',
      'nova_object.version': '1.1',
      'nova_object.data': {
        host: 'fake-2',
        binary: 'nova-compute',
        topic: 'compute',
        report_count: 42,
        disabled: false,
        disabled_reason: null,
        availability_zone: null,
        last_seen_up: '2026-11-25T08:40:01Z',
        forced_down: true,
        version: 64,
        uuid: '2b6c8d1e-5f1a-4a43-9d5c-1f0e2a3b4c5d',
        ...data,
      },
    },
    timestamp: '2026-11-25 08:40:12.345678',
    _unique_id: '4ec8cd4a659543199786a1df435757d2',
    _context_request_id: 'req-a7881aae-26cf-4a97-94be-c332a5b08073',
    _context_roles: ['admin', 'member', 'reader'],
  };
}
const enveloped = (message: unknown) => JSON.stringify({ 'oslo.version': '2.0', 'oslo.message': JSON.stringify(message) });

describe('parseNovaNotification', () => {
  it('reads a compute service forced down, disabled, back up, or deleted', () => {
    expect(parseNovaNotification(Buffer.from(CAPTURED_FORCED_DOWN))).toEqual({ eventType: 'service.update', host: 'fake-2', problem: true });
    expect(parseNovaNotification(Buffer.from(enveloped(serviceUpdate())))).toEqual({ eventType: 'service.update', host: 'fake-2', problem: true });
    expect(parseNovaNotification(enveloped(serviceUpdate({ forced_down: false, disabled: true, disabled_reason: 'maintenance' })))).toEqual({ eventType: 'service.update', host: 'fake-2', problem: true });
    expect(parseNovaNotification(enveloped(serviceUpdate({ forced_down: false })))).toEqual({ eventType: 'service.update', host: 'fake-2', problem: false });
    expect(parseNovaNotification(enveloped(serviceUpdate({ forced_down: false }, 'service.delete')))).toEqual({ eventType: 'service.delete', host: 'fake-2', problem: true });
    // The older `messaging` driver sends the message without the envelope.
    expect(parseNovaNotification(JSON.stringify(serviceUpdate()))).toEqual({ eventType: 'service.update', host: 'fake-2', problem: true });
  });

  it('ignores other events, other services and unversioned payloads', () => {
    expect(parseNovaNotification(enveloped(serviceUpdate({}, 'service.create')))).toBeUndefined();
    expect(parseNovaNotification(enveloped(serviceUpdate({}, 'instance.update')))).toBeUndefined();
    expect(parseNovaNotification(enveloped(serviceUpdate({ binary: 'nova-scheduler' })))).toBeUndefined();
    const unversioned = { ...serviceUpdate(), payload: { host: 'fake-2', binary: 'nova-compute', forced_down: true } };
    expect(parseNovaNotification(enveloped(unversioned))).toBeUndefined();
  });

  it.each([
    ['an empty body', ''],
    ['not JSON', 'oslo.version=2.0'],
    ['a JSON array', '[1,2]'],
    ['a JSON string', '"service.update"'],
    ['null', 'null'],
    ['an envelope whose message is not JSON', JSON.stringify({ 'oslo.version': '2.0', 'oslo.message': '{"event_type": "service.upd' })],
    ['an envelope whose message is a number', JSON.stringify({ 'oslo.version': '2.0', 'oslo.message': 7 })],
    ['no event_type', enveloped({ payload: serviceUpdate().payload })],
    ['an event_type of the wrong type', enveloped({ ...serviceUpdate(), event_type: ['service.update'] })],
    ['no payload', enveloped({ event_type: 'service.update' })],
    ['a payload that is a string', enveloped({ event_type: 'service.update', payload: 'fake-2' })],
    ['nova_object.data that is an array', enveloped({ event_type: 'service.update', payload: { 'nova_object.data': [] } })],
    ['no host', enveloped(serviceUpdate({ host: undefined }))],
    ['an empty host', enveloped(serviceUpdate({ host: '' }))],
    ['a host that is a number', enveloped(serviceUpdate({ host: 12 }))],
    ['a host name longer than 255', enveloped(serviceUpdate({ host: 'h'.repeat(256) }))],
    ['a body larger than the limit', enveloped(serviceUpdate({ disabled_reason: 'x'.repeat(MAX_NOTIFICATION_BYTES) }))],
    ['bytes that are not UTF-8', Buffer.from([0xff, 0xfe, 0x7b, 0x00, 0xc3])],
  ])('ignores %s, without throwing', (_what, body) => {
    expect(parseNovaNotification(body)).toBeUndefined();
  });

  it('reads disabled and forced_down only when they are true booleans', () => {
    expect(parseNovaNotification(enveloped(serviceUpdate({ forced_down: 'true', disabled: 1 })))?.problem).toBe(false);
  });
});

describe('parseTransportUrl', () => {
  it("reads Nova's transport_url: credentials, port, vhost (empty: RabbitMQ's default), TLS, several hosts", () => {
    expect(parseTransportUrl('rabbit://guest:guest@127.0.0.1:15672/')).toEqual([{ protocol: 'amqp', hostname: '127.0.0.1', port: 15672, username: 'guest', password: 'guest', vhost: '/' }]);
    expect(parseTransportUrl('rabbit://nova:p%40ss%2Fword@rabbit.internal/nova?ssl=1')).toEqual([
      { protocol: 'amqps', hostname: 'rabbit.internal', port: 5671, username: 'nova', password: 'p@ss/word', vhost: 'nova' },
    ]);
    expect(parseTransportUrl('amqp://a:b@h1:5672,a:c@h2:5673/%2F').map((e) => [e.hostname, e.port, e.password, e.vhost])).toEqual([
      ['h1', 5672, 'b', '/'],
      ['h2', 5673, 'c', '/'],
    ]);
    expect(parseTransportUrl('rabbit://[::1]:5672')).toEqual([{ protocol: 'amqp', hostname: '::1', port: 5672, username: 'guest', password: 'guest', vhost: '/' }]);
  });

  it.each(['http://guest:guest@127.0.0.1:5672/', 'rabbit://', 'rabbit:///vhost', 'rabbit://u:p@host:99999/'])('refuses %s', (url) => {
    expect(() => parseTransportUrl(url)).toThrow();
  });
});

describe('HostMonitorWaker', () => {
  const log = pino({ level: 'silent' });
  const GRACE_MS = 3_000;
  let signals: number;
  let health: HostHealthMap;
  let waker: HostMonitorWaker;

  beforeEach(() => {
    jest.useFakeTimers();
    signals = 0;
    health = { h1: { host: 'fake-1', state: 'up' } };
    waker = new HostMonitorWaker({ signal: () => Promise.resolve(void signals++), health: () => Promise.resolve(health), graceMs: GRACE_MS, log });
  });
  afterEach(() => {
    waker.stop();
    jest.useRealTimers();
  });

  it('wakes the monitor at once, and once more at the end of a burst of notices', async () => {
    waker.notice({ eventType: 'service.update', host: 'fake-1', problem: false });
    expect(signals).toBe(1);
    for (let i = 0; i < 10; i++) waker.notice({ eventType: 'service.update', host: 'fake-1', problem: false });
    expect(signals).toBe(1);
    await jest.advanceTimersByTimeAsync(WAKE_THROTTLE_MS);
    expect(signals).toBe(2);
    await jest.advanceTimersByTimeAsync(10 * WAKE_THROTTLE_MS);
    expect(signals).toBe(2);
  });

  it('looks again after the grace while the monitor holds the host suspect, until it is failed', async () => {
    waker.notice({ eventType: 'service.update', host: 'fake-1', problem: true });
    expect(signals).toBe(1);
    // The monitor's look made the host suspect a second after the notice (a slow look): its grace ends a second later.
    health = { h1: { host: 'fake-1', state: 'up', suspectSinceMs: Date.now() + 1_000, suspectReason: 'forced down' } };
    await jest.advanceTimersByTimeAsync(GRACE_MS + 600);
    expect(signals).toBe(1);
    await jest.advanceTimersByTimeAsync(1_000);
    expect(signals).toBe(2);
    // Still suspect (that look came a hair early by the monitor's clock): once more a second later.
    await jest.advanceTimersByTimeAsync(1_000);
    expect(signals).toBe(3);
    health = { h1: { host: 'fake-1', state: 'failed', sinceMs: Date.now() - GRACE_MS, reason: 'forced down' } };
    await jest.advanceTimersByTimeAsync(10_000);
    expect(signals).toBe(3);
  });

  it('does not look after the grace for a host that came back, and gives up after a few rounds', async () => {
    waker.notice({ eventType: 'service.update', host: 'fake-1', problem: true });
    waker.notice({ eventType: 'service.update', host: 'fake-1', problem: false }); // within the throttle: one trailing signal
    await jest.advanceTimersByTimeAsync(GRACE_MS * 3);
    expect(signals).toBe(2);

    health = { h1: { host: 'fake-1', state: 'up', suspectSinceMs: Date.now(), suspectReason: 'forced down' } };
    waker.notice({ eventType: 'service.update', host: 'fake-1', problem: true });
    await jest.advanceTimersByTimeAsync(GRACE_MS * 10);
    expect(signals).toBe(3 + 5);
  });

  it('stops waking once stopped', async () => {
    waker.notice({ eventType: 'service.update', host: 'fake-1', problem: true });
    waker.notice({ eventType: 'service.update', host: 'fake-1', problem: true });
    waker.stop();
    await jest.advanceTimersByTimeAsync(GRACE_MS * 3);
    expect(signals).toBe(1);
  });
});

describe('consumeNovaNotifications without a broker', () => {
  it('keeps trying a server that does not speak AMQP, logging why, and stops at once when asked', async () => {
    // Accepts, then answers nonsense: what a wrong port or a broker going away looks like.
    let connections = 0;
    const sockets = new Set<net.Socket>();
    const server = net.createServer((socket) => {
      connections++;
      sockets.add(socket);
      socket.on('error', () => undefined);
      socket.end('HTTP/1.1 400 Bad Request\r\n\r\n');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const lines: string[] = [];
    const captured = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString());
        done();
      },
    });
    const log = pino({ level: 'warn' }, captured);
    const { port } = server.address() as net.AddressInfo;
    // The back-off waits run on jest's clock (the sockets on the real one): the test moves time on.
    jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] });
    const consumer = consumeNovaNotifications({ url: `rabbit://nova:secret@127.0.0.1:${port}/`, consumer: 'test', onNotice: () => undefined, log, backoff: { initialMs: 10, maxMs: 50 } });
    try {
      // Each turn moves jest's clock past a back-off, then lets the loopback sockets' events in.
      for (let turn = 0; turn < 20_000 && connections < 3; turn++) {
        await jest.advanceTimersByTimeAsync(50);
        await new Promise((resolve) => setImmediate(resolve));
      }
      expect(connections).toBeGreaterThanOrEqual(3);
      expect(consumer.consuming()).toBe(false);
    } finally {
      await consumer.stop();
    }
    const afterStop = connections;
    expect(lines.length).toBeGreaterThanOrEqual(2);
    expect(JSON.parse(lines[0])).toMatchObject({ msg: 'nova notifications: cannot consume (the host monitor polls meanwhile)', broker: `127.0.0.1:${port}` });
    expect(lines.join('')).not.toContain('secret');
    // Stopped: no attempt after it, however long (a minute on jest's clock: over a thousand back-offs).
    await jest.advanceTimersByTimeAsync(60_000);
    jest.useRealTimers();
    expect(connections).toBe(afterStop);
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
});
