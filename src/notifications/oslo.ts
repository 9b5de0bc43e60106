/**
 * Notices on the message bus, as Blazar's notifier (oslo.messaging, driver messagingv2) publishes
 * them, so that what listens to Blazar (Ceilometer with the exchange in its
 * notification_control_exchanges, an oslo notification listener) hears leasekeeper unchanged.
 *
 * As oslo's rabbit driver (impl_rabbit.py notify_send): to the control exchange, a topic exchange,
 * with routing key `<topic>.<priority>` for each of the topics ([oslo_messaging_notifications]
 * topics, default `notifications`); the exchange declared non-durable and not auto-deleted (oslo's
 * amqp_durable_queues and amqp_auto_delete defaults) when it is missing, and, as oslo does, a queue
 * named after the routing key bound to it, so that notices wait for a listener that starts later.
 * Unlike oslo (at-most-once), each publish waits for the broker's confirm and is persistent: the
 * activity retries until it is confirmed, and a repeat carries the same message id.
 */
import { connect, type ChannelModel, type ConfirmChannel } from 'amqplib';
import { parseTransportUrl, type AmqpEndpoint } from '../domain/transport-url';
import { osloEnvelope, osloPriority, pythonJson } from './blazar-payload';
import { NoticeFailedError } from './errors';
import type { Notice } from '../domain/notices';

/** A broker that stops answering is noticed within about two heartbeats. */
const HEARTBEAT_SECONDS = 15;
const CLOSE_TIMEOUT_MS = 5_000;

export interface OsloSettings {
  /** oslo's transport_url: `rabbit://user:pass@host:port[,…]/vhost[?ssl=1]`. */
  transportUrl: string;
  /** oslo's control_exchange (Blazar keeps oslo's default, `openstack`). */
  exchange: string;
  /** [oslo_messaging_notifications] topics. */
  topics: string[];
  /** [notifications] publisher_id of blazar.conf: `blazar.lease`. */
  publisherId: string;
  /** For connecting and for each confirm. */
  timeoutMs: number;
}

interface Session {
  connection: ChannelModel;
  channel: ConfirmChannel;
  /** Routing keys whose default queue this connection has declared (once per connection, as oslo). */
  queues: Map<string, Promise<void>>;
}

/** The broker's AMQP error code, when it closed a channel with one (404: no such exchange or queue). */
const amqpCode = (err: unknown) => (err as { code?: unknown }).code;

export class OsloPublisher {
  private readonly endpoints: AmqpEndpoint[];
  /** The connection being made or in use; `live` once it is made (its close events forget it). */
  private session: Promise<Session> | undefined;
  private live: Session | undefined;
  private nextEndpoint = 0;
  private closed = false;

  constructor(private readonly settings: OsloSettings) {
    this.endpoints = parseTransportUrl(settings.transportUrl);
  }

  /** Publishes the notice's envelope to every topic, each confirmed by the broker; throws NoticeFailedError otherwise. */
  async publish(notice: Notice): Promise<void> {
    if (this.closed) throw new NoticeFailedError('the oslo.messaging publisher is closed');
    const priority = osloPriority(notice.eventType).toLowerCase();
    const content = Buffer.from(pythonJson(osloEnvelope(notice, this.settings.publisherId)));
    let attempt: Promise<Session> | undefined;
    try {
      attempt = this.open();
      const session = await this.withTimeout(attempt, 'connecting');
      for (const topic of this.settings.topics) {
        const routingKey = `${topic}.${priority}`;
        await this.withTimeout(this.defaultQueue(session, routingKey), `declaring queue ${routingKey}`);
        await this.withTimeout(
          new Promise<void>((resolve, reject) => {
            // kombu's json serializer: application/json in utf-8; persistent, so a confirmed notice survives a broker restart where its queue does.
            session.channel.publish(this.settings.exchange, routingKey, content, { contentType: 'application/json', contentEncoding: 'utf-8', deliveryMode: 2 }, (err: unknown) => (err ? reject(err instanceof Error ? err : new Error('the broker did not confirm')) : resolve()));
          }),
          `the broker's confirm of ${routingKey}`,
        );
      }
    } catch (err) {
      // Whatever went wrong, the next publish starts on a new connection.
      if (attempt) await this.drop(attempt);
      if (err instanceof NoticeFailedError) throw err;
      throw new NoticeFailedError(`oslo.messaging notice to exchange ${this.settings.exchange} failed: ${(err as Error).message}`);
    }
  }

  /** Closes the connection; publish fails from now on. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.session) await this.drop(this.session);
  }

  /** The connection and confirm channel, made on first use and again after an error or a close. */
  private open(): Promise<Session> {
    if (!this.session) {
      const opening = this.connect();
      this.session = opening;
      // A failed attempt is forgotten at once, so that the next publish tries afresh.
      opening.catch(() => {
        if (this.session === opening) this.session = undefined;
      });
    }
    return this.session;
  }

  private async connect(): Promise<Session> {
    const errors: string[] = [];
    // A cluster's brokers in turn, starting after the last one that worked or failed.
    for (let tried = 0; tried < this.endpoints.length; tried++) {
      const endpoint = this.endpoints[this.nextEndpoint % this.endpoints.length];
      try {
        return await this.connectTo(endpoint);
      } catch (err) {
        this.nextEndpoint++;
        errors.push(`${endpoint.hostname}:${endpoint.port}: ${(err as Error).message}`);
      }
    }
    throw new NoticeFailedError(`oslo.messaging: cannot reach the broker (${errors.join('; ')})`);
  }

  private async connectTo(endpoint: AmqpEndpoint): Promise<Session> {
    const { protocol, hostname, port, username, password, vhost } = endpoint;
    const connection = await connect({ protocol, hostname, port, username, password, vhost, heartbeat: HEARTBEAT_SECONDS }, { timeout: this.settings.timeoutMs, clientProperties: { connection_name: 'leasekeeper-notifier' } });
    // 'close' follows every error; an unheard 'error' would end the process.
    connection.on('error', () => undefined);
    try {
      await this.ensureExchange(connection);
      const channel = await connection.createConfirmChannel();
      channel.on('error', () => undefined);
      const session: Session = { connection, channel, queues: new Map() };
      const forget = () => {
        if (this.live !== session) return;
        this.live = undefined;
        this.session = undefined;
      };
      connection.on('close', forget);
      // A broker's refusal closes the channel: the connection goes with it, and the next publish makes both anew.
      channel.on('close', () => {
        forget();
        void connection.close().catch(() => undefined);
      });
      this.live = session;
      return session;
    } catch (err) {
      await connection.close().catch(() => undefined);
      throw err;
    }
  }

  /**
   * The exchange as it is, or declared as oslo declares it when missing: asked first without
   * declaring (on a channel of its own, which a 404 closes), so that an exchange other services
   * declared otherwise (durable, with amqp_durable_queues) is used as it is, not refused.
   */
  private async ensureExchange(connection: ChannelModel): Promise<void> {
    if (await this.exists(connection, (channel) => channel.checkExchange(this.settings.exchange))) return;
    const channel = await connection.createChannel();
    channel.on('error', () => undefined);
    await channel.assertExchange(this.settings.exchange, 'topic', { durable: false, autoDelete: false });
    await channel.close();
  }

  /** oslo's default queue for a routing key (named after it, bound to the exchange), once per connection. */
  private defaultQueue(session: Session, routingKey: string): Promise<void> {
    let declared = session.queues.get(routingKey);
    if (!declared) {
      declared = (async () => {
        const { connection, channel } = session;
        if (!(await this.exists(connection, (probe) => probe.checkQueue(routingKey)))) await channel.assertQueue(routingKey, { durable: false, autoDelete: false });
        await channel.bindQueue(routingKey, this.settings.exchange, routingKey);
      })();
      session.queues.set(routingKey, declared);
      declared.catch(() => session.queues.delete(routingKey));
    }
    return declared;
  }

  /** Whether a passive check succeeds (false on 404), on a throwaway channel. */
  private async exists(connection: ChannelModel, check: (channel: Awaited<ReturnType<ChannelModel['createChannel']>>) => Promise<unknown>): Promise<boolean> {
    const channel = await connection.createChannel();
    channel.on('error', () => undefined);
    try {
      await check(channel);
      await channel.close().catch(() => undefined);
      return true;
    } catch (err) {
      if (amqpCode(err) === 404) return false;
      throw err;
    }
  }

  private async withTimeout<T>(work: Promise<T>, what: string): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        work,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new NoticeFailedError(`oslo.messaging: no answer for ${what} within ${this.settings.timeoutMs} ms`)), this.settings.timeoutMs);
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Forgets a session and closes its connection, now or when it is made; waits a bounded time (a dead broker does not hold the caller). */
  private async drop(session: Promise<Session>): Promise<void> {
    if (this.session === session) {
      this.session = undefined;
      this.live = undefined;
    }
    const closing = session.then(
      (open) => open.connection.close().catch(() => undefined),
      () => undefined,
    );
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([closing, new Promise((resolve) => (timer = setTimeout(resolve, CLOSE_TIMEOUT_MS)))]);
    clearTimeout(timer);
  }
}
