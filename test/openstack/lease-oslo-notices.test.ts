/**
 * A lease's notices through oslo.messaging, end to end on the rig's RabbitMQ: the stack publishes
 * as Blazar's notifier (LK_NOTIFICATION_TRANSPORT_URL, an exchange and topic of the test's own), and
 * a consumer bound as Ceilometer would be reads lease.create, lease.update and lease.delete back.
 */
import { randomUUID } from 'node:crypto';
import { connect, type Channel, type ChannelModel } from 'amqplib';
import { parseTransportUrl } from '../../src/domain/transport-url';
import { physicalHostPlugin } from '../../src/resources/physical-host';
import { hostReservation } from '../../dev-stack/fixtures/builders';
import { insertHost } from '../../dev-stack/fixtures/hosts';
import { apiClient, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { rigEnv } from './support';

const ID = randomUUID().slice(0, 8);
const EXCHANGE = `lk-test-lease-notices-${ID}`;
const TOPIC = `lk-test-lease-topic-${ID}`;
const QUEUE = `lk-test-lease-listener-${ID}`;

describe('lease notices on oslo.messaging (rig)', () => {
  const transportUrl = rigEnv().LK_NOVA_NOTIFICATIONS_URL;
  let connection: ChannelModel;
  let channel: Channel;
  const messages: Array<Record<string, unknown>> = [];

  beforeAll(async () => {
    const [endpoint] = parseTransportUrl(transportUrl);
    connection = await connect({ protocol: endpoint.protocol, hostname: endpoint.hostname, port: endpoint.port, username: endpoint.username, password: endpoint.password, vhost: endpoint.vhost });
    channel = await connection.createChannel();
    // Declared as oslo's rabbit driver declares a notification exchange: topic, not durable.
    await channel.assertExchange(EXCHANGE, 'topic', { durable: false, autoDelete: false });
    await channel.assertQueue(QUEUE, { exclusive: true });
    await channel.bindQueue(QUEUE, EXCHANGE, `${TOPIC}.info`);
    await channel.consume(QUEUE, (message) => {
      if (!message) return;
      const envelope = JSON.parse(message.content.toString('utf8')) as { 'oslo.version': string; 'oslo.message': string };
      messages.push({ version: envelope['oslo.version'], ...(JSON.parse(envelope['oslo.message']) as Record<string, unknown>) });
    }, { noAck: true });
  });
  afterAll(async () => {
    await channel.deleteQueue(`${TOPIC}.info`).catch(() => undefined);
    await channel.deleteExchange(EXCHANGE).catch(() => undefined);
    await connection.close();
  });

  const stack = useTestStack(() => ({
    env: { LK_NOTIFICATION_TRANSPORT_URL: transportUrl, LK_NOTIFICATION_EXCHANGE: EXCHANGE, LK_NOTIFICATION_TOPICS: TOPIC, LK_NOTIFY_BEFORE_END: 'none' },
    withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })],
  }));

  it('publishes the lease\'s create, update and delete as Blazar\'s notifier does', async () => {
    await insertHost(stack().db.pool, { name: `oslo-host-${ID}` });
    const api = apiClient(() => stack().url, { 'x-project-id': 'project-oslo', 'x-user-id': 'olga', 'x-roles': 'member' });
    const created = await api('POST', '/v1/leases', { name: 'heard-by-ceilometer', start_date: inSeconds(3600), end_date: inSeconds(7200), reservations: [hostReservation()] });
    expect(created.status).toBe(201);
    const id = created.body.lease.id as string;
    expect((await api('PUT', `/v1/leases/${id}`, { name: 'renamed-for-ceilometer' })).status).toBe(200);
    expect((await api('DELETE', `/v1/leases/${id}`)).status).toBe(204);
    const ofLease = () => messages.filter((m) => (m.payload as { lease_id?: string }).lease_id === id);
    await eventually(() => Promise.resolve(ofLease().length >= 3 ? true : undefined), 60_000);
    // Each notice is delivered by a workflow of its own (docs/operations.md): one lease's notices may arrive in any order.
    expect(ofLease().map((m) => m.event_type).sort()).toEqual(['lease.create', 'lease.delete', 'lease.update']);
    for (const message of ofLease()) {
      expect(message).toMatchObject({ version: '2.0', publisher_id: 'blazar.lease', priority: 'INFO', payload: { lease_id: id, project_id: 'project-oslo', user_id: 'olga' } });
      expect(message.timestamp).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{6})?$/);
    }
    const payloadOf = (eventType: string) => ofLease().find((m) => m.event_type === eventType)!.payload as { name: string };
    expect(payloadOf('lease.create').name).toBe('heard-by-ceilometer');
    expect(payloadOf('lease.update').name).toBe('renamed-for-ceilometer');
  }, 90_000);
});
