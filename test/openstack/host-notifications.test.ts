/**
 * Nova's versioned notifications with the rig (its nova.conf: driver messagingv2, format
 * versioned): the consumer hears a compute service forced down and up again, from a queue of its
 * own that goes with its connection, and connects again when the connection is cut. A worker
 * whose monitor polls only every 300 s fails a forced-down host within seconds (notifications
 * woke it: its history shows the signals) and sees it recover.
 */
import net from 'node:net';
import { connect } from 'amqplib';
import pino from 'pino';
import type { ManagedProcess } from '../../dev-stack/processes';
import { physicalHostPlugin } from '../../src/resources/physical-host';
import type { ComputeServiceNotice } from '../../src/openstack/nova-notifications';
import { parseTransportUrl } from '../../src/openstack/nova-notifications';
import { consumeNovaNotifications, notificationQueueName, type NovaNotificationsConsumer } from '../../src/openstack/nova-notifications-consumer';
import { getHostHealth, hostMonitorWorkflowId } from '../../workflows/host-monitor/messages';
import { enrolHost } from '../../dev-stack/fixtures/hosts';
import { apiClient, eventually, useTestStack } from '../../dev-stack/stack';
import { startWorkerProcess } from '../../dev-stack/worker-process';
import { CLOUDS_FILE, deleteAggregateNamed, rigClients, rigEnv, uniqueName } from './support';

const HOST = 'fake-2';
/** Far longer than any wait below: a host failed within them was looked at because of a notification. */
const POLL_SECONDS = 300;

/** A TCP relay to the rig's RabbitMQ on a loopback port of its own, whose connections the test can cut. */
async function startRelay(target: { hostname: string; port: number }): Promise<{ port: number; cut(): void; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => undefined);
    }
    client.pipe(upstream).pipe(client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    cut: () => {
      for (const socket of sockets) socket.destroy();
    },
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * Whether the broker has a queue of this name, asked on a connection of its own (the answer closes
 * the channel): 404 none; 405 (RESOURCE_LOCKED) an exclusive queue of another connection.
 */
async function queueExists(url: string, queue: string): Promise<boolean> {
  const [broker] = parseTransportUrl(url);
  const connection = await connect({ ...broker });
  try {
    const channel = await connection.createChannel();
    channel.on('error', () => undefined);
    return await channel.checkQueue(queue).then(
      () => true,
      (err: { code?: number }) => {
        if (err.code === 404) return false;
        if (err.code === 405) return true;
        throw err;
      },
    );
  } finally {
    await connection.close().catch(() => undefined);
  }
}

describe('Nova notifications with the rig', () => {
  const admin = rigClients('leasekeeper-admin');
  const notificationsUrl = rigEnv().LK_NOVA_NOTIFICATIONS_URL;
  const freepool = uniqueName('freepool');
  const failedAggregate = uniqueName('failed');
  let hostId: string | undefined;
  let forcedDown = false;
  let worker: ManagedProcess | undefined;

  async function forceDown(down: boolean): Promise<void> {
    const [service] = await admin.nova.listServices({ binary: 'nova-compute', host: HOST });
    await admin.nova.updateService(service.id, { forced_down: down });
    forcedDown = down;
  }

  const stack = useTestStack(
    {
      env: { LK_FREEPOOL_AGGREGATE: freepool },
      withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only', freepool })],
      openstack: () => admin,
      noWorker: true, // the worker process runs the monitor and listens to Nova
    },
    {
      beforeStop: async (stack) => {
        if (forcedDown) await forceDown(false);
        await worker?.stop();
        // Its worker (the process) is gone: the monitor it started goes too.
        await stack.temporal.client.workflow.getHandle(hostMonitorWorkflowId(stack.config.temporal.taskQueue)).terminate('test over').catch(() => undefined);
        if (hostId) await api('DELETE', `/v1/os-hosts/${hostId}`);
        await deleteAggregateNamed(admin, freepool);
        await deleteAggregateNamed(admin, failedAggregate);
      },
      timeoutMs: 120_000,
    },
  );
  const api = apiClient(() => stack().url);

  afterEach(async () => {
    if (forcedDown) await forceDown(false);
  });

  beforeAll(() => {
    if (!notificationsUrl) throw new Error("the rig's env.sh has no LK_NOVA_NOTIFICATIONS_URL: the rig predates Nova's notifications; restart it (scripts/openstack/down.sh, then up.sh)");
  });

  it('hears a compute service forced down and up again, connects again when cut, and leaves no queue behind', async () => {
    const [broker] = parseTransportUrl(notificationsUrl);
    const relay = await startRelay(broker);
    const notices: ComputeServiceNotice[] = [];
    let consumings = 0;
    let consumer: NovaNotificationsConsumer | undefined;
    try {
      consumer = consumeNovaNotifications({
        url: `rabbit://${broker.username}:${broker.password}@127.0.0.1:${relay.port}/`,
        consumer: `test-${process.pid}`,
        onNotice: (notice) => notices.push(notice),
        log: pino({ level: 'silent' }),
        backoff: { initialMs: 100, maxMs: 500 },
        onConsuming: () => consumings++,
      });
      await eventually(() => Promise.resolve(consumings === 1 ? true : undefined), 20_000);
      expect(await queueExists(notificationsUrl, consumer.queue)).toBe(true);

      await forceDown(true);
      await eventually(() => Promise.resolve(notices.some((n) => n.host === HOST && n.problem) ? true : undefined), 20_000);
      expect(notices.filter((n) => n.host === HOST)).toEqual([{ eventType: 'service.update', host: HOST, problem: true }]);

      // The connection cut (as by a broker restart): the consumer connects again and hears the next change.
      relay.cut();
      await eventually(() => Promise.resolve(consumings === 2 && consumer?.consuming() ? true : undefined), 20_000);
      await forceDown(false);
      await eventually(() => Promise.resolve(notices.some((n) => n.host === HOST && !n.problem) ? true : undefined), 20_000);
      expect(notices.filter((n) => n.host === HOST).at(-1)).toEqual({ eventType: 'service.update', host: HOST, problem: false });

      await consumer.stop();
      expect(consumer.consuming()).toBe(false);
      // Exclusive and auto-deleted: gone with its connection.
      await eventually(async () => ((await queueExists(notificationsUrl, consumer!.queue)) ? undefined : true), 10_000);
    } finally {
      await consumer?.stop();
      await relay.close();
    }
  }, 120_000);

  it(`fails a forced-down host long before a ${POLL_SECONDS} s poll would, and sees it recover`, async () => {
    hostId = await enrolHost(api, HOST);
    worker = await startWorkerProcess(stack(), {
      OS_CLIENT_CONFIG_FILE: CLOUDS_FILE,
      OS_CLOUD: 'leasekeeper-admin',
      LK_FREEPOOL_AGGREGATE: freepool,
      LK_FAILED_AGGREGATE: failedAggregate,
      LK_HOST_MONITOR: 'on',
      LK_HOST_MONITOR_INTERVAL_SECONDS: String(POLL_SECONDS),
      LK_HOST_FAIL_GRACE_SECONDS: '1',
      LK_DRIFT_REPAIR: 'report',
      LK_NOVA_NOTIFICATIONS_URL: notificationsUrl,
    });
    await worker.waitForLine(/"msg":"nova notifications: consuming"/, 30_000);
    const monitor = stack().temporal.client.workflow.getHandle(hostMonitorWorkflowId(stack().config.temporal.taskQueue));
    // Its first look (at its start) has seen the host up: from now on it looks only every 300 s, or when woken.
    await eventually(async () => {
      const health = await monitor.query(getHostHealth).catch(() => undefined);
      return health?.[hostId!]?.state === 'up' ? true : undefined;
    }, 30_000);
    const hostState = async () => (await api('GET', `/v1/os-hosts/${hostId}`)).body.host;

    await forceDown(true);
    const failed = await eventually(async () => {
      const host = await hostState();
      return host.state === 'failed' ? host : undefined;
    }, 30_000, 200);
    expect(failed.state_reason).toBe('its compute service is forced down');

    await forceDown(false);
    const recovered = await eventually(async () => {
      const host = await hostState();
      return host.state === 'up' ? host : undefined;
    }, 30_000, 200);
    expect(recovered.state_reason).toBe('compute service up and enabled again');

    // Woken by signals (its timer alone would have waited 300 s): at the notice, after the grace, at the recovery.
    const { events } = await monitor.fetchHistory();
    const wakes = (events ?? []).filter((e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'lookNow');
    expect(wakes.length).toBeGreaterThanOrEqual(3);
    // The worker's queue goes with it.
    const queue = notificationQueueName(`host-monitor-${stack().config.temporal.taskQueue}`, worker.pid);
    expect(await queueExists(notificationsUrl, queue)).toBe(true);
    await worker.stop();
    await eventually(async () => ((await queueExists(notificationsUrl, queue)) ? undefined : true), 10_000);
  }, 120_000);
});
