/**
 * Consumes Nova's versioned notifications from its RabbitMQ (amqplib) and hands each compute
 * service notice (nova-notifications.ts parses them) to `onNotice`.
 *
 * The queue is our own: exclusive and auto-deleted (it takes no message from Nova's other
 * consumers and goes away with the connection), bound to exchange `nova` for
 * `versioned_notifications.info` and `.error`, and capped, so a stalled consumer holds at most
 * that many messages. Nothing is acknowledged: a notice lost while the connection drops costs a
 * look that polling makes anyway. A connection that cannot be made or drops is made again with
 * backoff, over a cluster's hosts in turn; nothing here throws into the caller.
 */
import os from 'node:os';
import { connect, type ChannelModel } from 'amqplib';
import type { Logger } from '../log';
import { NOTIFICATION_ROUTING_KEYS, NOVA_EXCHANGE, parseNovaNotification, parseTransportUrl, type AmqpEndpoint, type ComputeServiceNotice } from './nova-notifications';

/** Notifications waiting in our queue at most (Nova sends a few per host change; instances' events pass through too). */
const QUEUE_MAX_LENGTH = 1_000;
const CONNECT_TIMEOUT_MS = 10_000;
/** A broker that stops answering is noticed within about two heartbeats. */
const HEARTBEAT_SECONDS = 15;
const CLOSE_TIMEOUT_MS = 5_000;
const MAX_QUEUE_NAME = 255;

export interface NovaNotificationsOptions {
  /** Nova's transport_url (`rabbit://user:pass@host:port/vhost`). */
  url: string;
  /** Who consumes, in the queue's name: `leasekeeper-<consumer>-<machine>-<pid>`. */
  consumer: string;
  onNotice: (notice: ComputeServiceNotice) => void;
  log: Logger;
  /** Delays between attempts to connect: doubling from the first to the last (default 1 s to 30 s). */
  backoff?: { initialMs: number; maxMs: number };
  /** Called each time the queue is bound and consuming. */
  onConsuming?: () => void;
}

export interface NovaNotificationsConsumer {
  /** The queue's name (the same for every connection of this process). */
  readonly queue: string;
  /** Whether the queue is bound and consuming now. */
  consuming(): boolean;
  /** Closes the connection and stops reconnecting. */
  stop(): Promise<void>;
}

/** Starts consuming in the background; throws only on a URL that is not a transport URL. */
export function consumeNovaNotifications(options: NovaNotificationsOptions): NovaNotificationsConsumer {
  const endpoints = parseTransportUrl(options.url);
  const { log, onNotice } = options;
  const backoff = options.backoff ?? { initialMs: 1_000, maxMs: 30_000 };
  const queue = notificationQueueName(options.consumer);
  let stopped = false;
  let consuming = false;
  let connection: ChannelModel | undefined;
  let wakeFromSleep: (() => void) | undefined;

  const sleep = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        wakeFromSleep = undefined;
        resolve();
      }
      wakeFromSleep = done;
    });

  async function closeConnection(): Promise<void> {
    const open = connection;
    connection = undefined;
    consuming = false;
    if (!open) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([open.close().catch(() => undefined), new Promise((resolve) => (timer = setTimeout(resolve, CLOSE_TIMEOUT_MS)))]);
    clearTimeout(timer);
  }

  /** Connects, binds the queue and consumes; `ended` then says why the connection ended. */
  async function open(endpoint: AmqpEndpoint): Promise<{ ended: Promise<Error | undefined> }> {
    const { protocol, hostname, port, username, password, vhost } = endpoint;
    const opened = await connect({ protocol, hostname, port, username, password, vhost, heartbeat: HEARTBEAT_SECONDS }, { timeout: CONNECT_TIMEOUT_MS, clientProperties: { connection_name: queue } });
    connection = opened;
    const ended = new Promise<Error | undefined>((resolve) => opened.once('close', (err?: Error) => resolve(err)));
    // 'close' follows every error and says why; an unheard 'error' would crash the process.
    opened.on('error', () => undefined);
    if (stopped) throw new Error('stopped');
    const channel = await opened.createChannel();
    channel.on('error', () => undefined);
    // The channel closes on a broker refusal (e.g. the exchange missing): start afresh on a new connection.
    channel.on('close', () => void opened.close().catch(() => undefined));
    // Nova (oslo.messaging) declares the exchange with its own settings (durable or not): only check that it is there.
    await channel.checkExchange(NOVA_EXCHANGE);
    await channel.assertQueue(queue, { exclusive: true, autoDelete: true, durable: false, maxLength: QUEUE_MAX_LENGTH });
    for (const key of NOTIFICATION_ROUTING_KEYS) await channel.bindQueue(queue, NOVA_EXCHANGE, key);
    await channel.consume(
      queue,
      (message) => {
        // null: the broker cancelled us (queue deleted): the channel's close starts a new connection.
        if (message === null) return void channel.close().catch(() => undefined);
        const notice = parseNovaNotification(message.content);
        if (!notice) return;
        try {
          onNotice(notice);
        } catch (err) {
          log.error({ err, notice }, 'nova notifications: handling a notice failed');
        }
      },
      { noAck: true, exclusive: true },
    );
    return { ended };
  }

  async function run(): Promise<void> {
    let failures = 0;
    for (let attempt = 0; !stopped; attempt++) {
      const endpoint = endpoints[attempt % endpoints.length];
      const broker = `${endpoint.hostname}:${endpoint.port}`;
      let ended: Promise<Error | undefined>;
      try {
        ({ ended } = await open(endpoint));
      } catch (err) {
        await closeConnection();
        if (stopped) return;
        failures++;
        const delayMs = Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.min(failures - 1, 20));
        log.warn({ broker, err: (err as Error).message, retryInMs: delayMs }, 'nova notifications: cannot consume (the host monitor polls meanwhile)');
        await sleep(delayMs);
        continue;
      }
      failures = 0;
      consuming = true;
      log.info({ broker, queue, exchange: NOVA_EXCHANGE, routingKeys: NOTIFICATION_ROUTING_KEYS }, 'nova notifications: consuming');
      options.onConsuming?.();
      const why = await ended;
      consuming = false;
      connection = undefined;
      if (stopped) return;
      log.warn({ broker, err: why?.message ?? 'closed' }, 'nova notifications: connection lost, connecting again');
      await sleep(backoff.initialMs);
    }
  }

  const running = run().catch((err: unknown) => log.error({ err }, 'nova notifications: the consumer stopped'));
  return {
    queue,
    consuming: () => consuming,
    async stop() {
      stopped = true;
      wakeFromSleep?.();
      await closeConnection();
      await running;
    },
  };
}

/** `leasekeeper-<consumer>-<machine>-<pid>`: one queue per process, recognisable in the broker's list. */
export function notificationQueueName(consumer: string, pid = process.pid): string {
  const name = `leasekeeper-${consumer}-${os.hostname()}-${pid}`.replace(/[^A-Za-z0-9_.:-]/g, '_');
  return name.length <= MAX_QUEUE_NAME ? name : `${name.slice(0, MAX_QUEUE_NAME - 12)}-${pid}`;
}
