/**
 * Notices on the rig's RabbitMQ as Blazar's notifier publishes them (oslo.messaging, messagingv2):
 * the publisher declares the exchange and oslo's default queue per routing key, publishes
 * `notifications.info` (`notifications.error` for lease.error) to every topic, persistent and
 * confirmed, in the 2.0 envelope; an oslo.messaging notification listener (Python, the rig's own
 * oslo.messaging) hears it as Blazar's; after a broker refusal the publisher starts on a new
 * connection; an unreachable broker fails the publish (retryably). Exchange and topics are the
 * test's own, removed at the end.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import net from 'node:net';
import { connect, type ChannelModel, type ConsumeMessage, type GetMessage } from 'amqplib';
import { parseTransportUrl } from '../../src/domain/transport-url';
import type { Lease } from '../../src/domain/lease';
import { noticeMessageId, noticePayload } from '../../src/notifications/blazar-payload';
import { NoticeFailedError } from '../../src/notifications/errors';
import { OsloPublisher } from '../../src/notifications/oslo';
import type { Notice } from '../../src/domain/notices';
import { eventually } from '../../dev-stack/stack';
import { rigEnv } from './support';

const ID = randomUUID().slice(0, 8);
const EXCHANGE = `lk-test-oslo-${ID}`;
/** oslo's default topic, and one of the test's own whose default queues the test may remove. */
const OWN_TOPIC = `lk-test-topic-${ID}`;
const TOPICS = ['notifications', OWN_TOPIC];
const LISTENER_POOL = `lk-test-pool-${ID}`;

function lease(): Lease {
  return {
    id: randomUUID(),
    name: 'oslo-lease',
    projectId: 'project-a',
    userId: 'alice',
    startMs: Date.UTC(2026, 10, 21, 9, 15),
    endMs: Date.UTC(2026, 10, 21, 11, 15),
    status: 'PENDING',
    reservations: [{ id: randomUUID(), resource_type: 'physical:host', status: 'pending', params: { min: 1, max: 1, hypervisor_properties: '', resource_properties: '' }, allocation: { hosts: ['fake-1'] } }],
    events: [{ id: 'e1', event_type: 'start_lease', time: Date.UTC(2026, 10, 21, 9, 15), status: 'UNDONE' }],
    createdMs: Date.UTC(2026, 10, 20, 8, 0),
    updatedMs: Date.UTC(2026, 10, 20, 8, 0),
    version: 1,
  };
}

const notice = (eventType: Notice['eventType']): Notice => {
  const l = lease();
  return { id: `${l.id}:${eventType}`, eventType, occurredMs: Date.UTC(2026, 10, 21, 9, 15, 0, 250), projectId: l.projectId, lease: l };
};

/** The envelope's message, checked to be Blazar's notifier's for this notice. */
function expectOsloMessage(body: Buffer, sent: Notice, priority: 'INFO' | 'ERROR'): void {
  const envelope = JSON.parse(body.toString('utf8')) as Record<string, unknown>;
  expect(Object.keys(envelope).sort()).toEqual(['oslo.message', 'oslo.version']);
  expect(envelope['oslo.version']).toBe('2.0');
  expect(typeof envelope['oslo.message']).toBe('string');
  const message = JSON.parse(envelope['oslo.message'] as string) as Record<string, unknown>;
  expect(message).toMatchObject({
    message_id: noticeMessageId(sent),
    publisher_id: 'blazar.lease',
    event_type: sent.eventType,
    priority,
    timestamp: '2026-11-21 09:15:00.250000',
    payload: noticePayload(sent),
  });
  expect((message.payload as { lease_id: string }).lease_id).toBe(sent.lease!.id);
}

describe('oslo.messaging notices on the rig', () => {
  const transportUrl = rigEnv().LK_NOVA_NOTIFICATIONS_URL;
  let admin: ChannelModel;
  let publisher: OsloPublisher;
  const existedBefore: Record<string, boolean> = {};
  const settings = () => ({ transportUrl, exchange: EXCHANGE, topics: TOPICS, publisherId: 'blazar.lease', timeoutMs: 10_000 });

  /** Whether the broker has the queue (asked on a throwaway channel, which a 404 closes). */
  async function queueExists(queue: string): Promise<boolean> {
    const channel = await admin.createChannel();
    channel.on('error', () => undefined);
    return channel.checkQueue(queue).then(
      async () => {
        await channel.close();
        return true;
      },
      () => false,
    );
  }

  async function getOne(queue: string): Promise<GetMessage> {
    const channel = await admin.createChannel();
    try {
      return await eventually(async () => (await channel.get(queue, { noAck: true })) || undefined, 10_000);
    } finally {
      await channel.close();
    }
  }

  beforeAll(async () => {
    if (!transportUrl) throw new Error("the rig's env.sh has no LK_NOVA_NOTIFICATIONS_URL: restart the rig (scripts/openstack/down.sh, then up.sh)");
    const [broker] = parseTransportUrl(transportUrl);
    admin = await connect({ ...broker });
    admin.on('error', () => undefined);
    for (const queue of ['notifications.info', 'notifications.error']) existedBefore[queue] = await queueExists(queue);
    publisher = new OsloPublisher(settings());
  });

  afterAll(async () => {
    await publisher?.close();
    if (!admin) return;
    const channel = await admin.createChannel();
    channel.on('error', () => undefined);
    for (const queue of [`${OWN_TOPIC}.info`, `${OWN_TOPIC}.error`, LISTENER_POOL]) await channel.deleteQueue(queue).catch(() => undefined);
    // oslo's default queues for `notifications`: removed only when this test made them.
    for (const [queue, existed] of Object.entries(existedBefore)) if (!existed) await channel.deleteQueue(queue).catch(() => undefined);
    await channel.deleteExchange(EXCHANGE).catch(() => undefined);
    await admin.close().catch(() => undefined);
  });

  it("declares the exchange and oslo's default queues, and publishes a persistent lease.create to <topic>.info of every topic", async () => {
    const created = notice('lease.create');
    await publisher.publish(created);
    // The exchange is a topic exchange (a `#` binding gets it), as oslo declares it.
    const channel = await admin.createChannel();
    await channel.checkExchange(EXCHANGE);
    await channel.close();
    for (const topic of TOPICS) expect(await queueExists(`${topic}.info`)).toBe(true);
    const message = await getOne(`${OWN_TOPIC}.info`);
    expect(message.fields).toMatchObject({ exchange: EXCHANGE, routingKey: `${OWN_TOPIC}.info` });
    expect(message.properties).toMatchObject({ contentType: 'application/json', contentEncoding: 'utf-8', deliveryMode: 2 });
    expectOsloMessage(message.content, created, 'INFO');
  });

  it('publishes lease.error to notifications.error, heard by a queue bound to the exchange', async () => {
    const channel = await admin.createChannel();
    const { queue } = await channel.assertQueue('', { exclusive: true, autoDelete: true });
    for (const key of ['notifications.info', 'notifications.error']) await channel.bindQueue(queue, EXCHANGE, key);
    const heard: ConsumeMessage[] = [];
    await channel.consume(queue, (message) => message && heard.push(message), { noAck: true });
    const failed = notice('lease.error');
    const started = notice('lease.event.start_lease');
    await publisher.publish(failed);
    await publisher.publish(started);
    await eventually(() => Promise.resolve(heard.length >= 2 ? true : undefined), 10_000);
    expect(heard.map((m) => m.fields.routingKey)).toEqual(['notifications.error', 'notifications.info']);
    expectOsloMessage(heard[0].content, failed, 'ERROR');
    expectOsloMessage(heard[1].content, started, 'INFO');
    await channel.close();
  });

  it("is heard by an oslo.messaging notification listener as Blazar's notifications", async () => {
    const script = String.raw`
import json, sys, threading
from oslo_config import cfg
import oslo_messaging as om
url, exchange, pool = sys.argv[1:4]
conf = cfg.ConfigOpts()
conf(args=[], default_config_files=[])
transport = om.get_notification_transport(conf, url=url)
heard = threading.Event()
class Endpoint(object):
    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        print(json.dumps({'priority': 'info', 'ctxt': ctxt, 'publisher_id': publisher_id, 'event_type': event_type, 'payload': payload, 'metadata': metadata}), flush=True)
        heard.set()
listener = om.get_notification_listener(transport, [om.Target(topic='notifications', exchange=exchange)], [Endpoint()], executor='threading', pool=pool)
listener.start()
print('READY', flush=True)
heard.wait(60)
listener.stop()
listener.wait()
transport.cleanup()
`;
    // The listener's queue (named after its pool) made and bound beforehand, as oslo declares it: nothing published races its start.
    const declaring = await admin.createChannel();
    await declaring.assertQueue(LISTENER_POOL, { durable: false, autoDelete: false });
    await declaring.bindQueue(LISTENER_POOL, EXCHANGE, 'notifications.info');
    await declaring.close();
    const python: ChildProcessWithoutNullStreams = spawn('/usr/bin/python3', ['-c', script, transportUrl, EXCHANGE, LISTENER_POOL]);
    const lines: string[] = [];
    let stderr = '';
    let buffered = '';
    python.stdout.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      const parts = buffered.split('\n');
      buffered = parts.pop() ?? '';
      lines.push(...parts);
    });
    python.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString('utf8')).slice(-4_000)));
    try {
      await eventually(() => Promise.resolve(lines.includes('READY') ? true : undefined), 30_000, 100, () => `the Python listener did not start (${stderr})`);
      const updated = notice('lease.update');
      await publisher.publish(updated);
      const line = await eventually(() => Promise.resolve(lines.find((l) => l.startsWith('{'))), 30_000, 100, () => `the Python listener heard nothing (${stderr})`);
      const heard = JSON.parse(line) as { priority: string; ctxt: Record<string, unknown>; publisher_id: string; event_type: string; payload: Record<string, unknown>; metadata: Record<string, unknown> };
      expect(heard).toMatchObject({
        priority: 'info',
        publisher_id: 'blazar.lease',
        event_type: 'lease.update',
        ctxt: { user_id: 'alice', project_id: 'project-a' },
        metadata: { message_id: noticeMessageId(updated), timestamp: '2026-11-21 09:15:00.250000' },
      });
      expect(heard.payload).toEqual(noticePayload(updated));
    } finally {
      python.kill();
    }
  });

  it('starts on a new connection after the broker refused a publish', async () => {
    const channel = await admin.createChannel();
    await channel.purgeQueue(`${OWN_TOPIC}.info`);
    await channel.deleteExchange(EXCHANGE);
    await channel.close();
    // The session believes the exchange is there: the broker closes the channel (404), the publish fails.
    const failure = await publisher.publish(notice('lease.delete')).catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(NoticeFailedError);
    // The next one connects again, declares the exchange and its queues' bindings anew, and is confirmed.
    const deleted = notice('lease.delete');
    await publisher.publish(deleted);
    const copies: GetMessage[] = [];
    // The failed one never reached the queue; the one after it did.
    for (let message = await getOne(`${OWN_TOPIC}.info`); message; ) {
      copies.push(message);
      const probe = await admin.createChannel();
      message = (await probe.get(`${OWN_TOPIC}.info`, { noAck: true })) as GetMessage;
      await probe.close();
    }
    expect(copies.map((m) => (JSON.parse(JSON.parse(m.content.toString('utf8'))['oslo.message']) as { message_id: string }).message_id)).toEqual([noticeMessageId(deleted)]);
  });

  it('fails, retryably, when no broker answers', async () => {
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const { port } = closed.address() as net.AddressInfo;
    await new Promise((resolve) => closed.close(resolve));
    const [broker] = parseTransportUrl(transportUrl);
    const unreachable = new OsloPublisher({ ...settings(), transportUrl: `rabbit://${broker.username}:${broker.password}@127.0.0.1:${port}/` });
    try {
      const failure = await unreachable.publish(notice('lease.create')).catch((err: unknown) => err);
      expect(failure).toBeInstanceOf(NoticeFailedError);
      expect((failure as Error).message).toContain('cannot reach the broker');
      expect((failure as Error).message).not.toContain(broker.password);
    } finally {
      await unreachable.close();
    }
  });
});
