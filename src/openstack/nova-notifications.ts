/**
 * Nova's versioned notifications about compute services, read off the message bus Nova writes to
 * (`[oslo_messaging_notifications] driver = messagingv2`, `[notifications] notification_format =
 * versioned`): pure parsing here; the AMQP consumer is nova-notifications-consumer.ts.
 *
 * oslo.messaging's messagingv2 driver wraps each notification in an envelope whose inner message is
 * a JSON string: `{"oslo.version": "2.0", "oslo.message": "{\"event_type\": …, \"payload\": …}"}`.
 * A versioned payload is a serialized Nova object: `{"nova_object.name": "ServiceStatusPayload",
 * "nova_object.data": {"host", "binary", "disabled", "forced_down", "last_seen_up", …}}`. Nova
 * sends `service.update` when a service's `disabled`, `disabled_reason` or `forced_down` changes
 * (the API, or a compute disabling itself), and `service.delete` when one is deleted; a service
 * that only stops reporting sends nothing, so the host monitor's polling stays the safety net.
 */

/** The exchange and topic Nova publishes versioned notifications to (oslo's control_exchange, [notifications] versioned_notifications_topics). */
export const NOVA_EXCHANGE = 'nova';
export const VERSIONED_NOTIFICATIONS_TOPIC = 'versioned_notifications';
/** oslo.messaging's routing keys are `<topic>.<priority>`; a service going wrong is `info` (a change of state) or `error`. */
export const NOTIFICATION_ROUTING_KEYS = [`${VERSIONED_NOTIFICATIONS_TOPIC}.info`, `${VERSIONED_NOTIFICATIONS_TOPIC}.error`];

/** A service.update is about 1 KiB; anything far larger is not one, and is not parsed. */
export const MAX_NOTIFICATION_BYTES = 64 * 1024;
const MAX_HOST_NAME = 255;

/** The compute service events that may change what the host monitor concludes about a host. */
const SERVICE_EVENTS = new Set(['service.update', 'service.delete']);

/** What one notification says about a compute service. */
export interface ComputeServiceNotice {
  eventType: 'service.update' | 'service.delete';
  /** Nova's compute host name (the hypervisor's service host). */
  host: string;
  /** Deleted, disabled or forced down: the host may be failing (its grace period starts). */
  problem: boolean;
}

/**
 * The compute service notice in an AMQP message body, or undefined for anything else: another
 * event, another service binary, an unversioned notification, or a body that is not what Nova
 * sends (not JSON, too large, fields missing or of the wrong type). Never throws.
 */
export function parseNovaNotification(body: Buffer | string): ComputeServiceNotice | undefined {
  const size = typeof body === 'string' ? Buffer.byteLength(body) : body.length;
  if (size === 0 || size > MAX_NOTIFICATION_BYTES) return undefined;
  const outer = parseJsonObject(typeof body === 'string' ? body : body.toString('utf8'));
  if (!outer) return undefined;
  // Enveloped (messagingv2) or not (the older `messaging` driver sends the message itself).
  const envelope = outer['oslo.message'];
  const message = typeof envelope === 'string' ? parseJsonObject(envelope) : outer;
  if (!message) return undefined;

  const eventType = message.event_type;
  if (typeof eventType !== 'string' || !SERVICE_EVENTS.has(eventType)) return undefined;
  const payload = asObject(message.payload);
  // An unversioned payload (no nova_object.data) is not what this reads.
  const data = asObject(payload?.['nova_object.data']);
  if (!data || data.binary !== 'nova-compute') return undefined;
  const host = data.host;
  if (typeof host !== 'string' || host.length === 0 || host.length > MAX_HOST_NAME) return undefined;
  const problem = eventType === 'service.delete' || data.disabled === true || data.forced_down === true;
  return { eventType: eventType as ComputeServiceNotice['eventType'], host, problem };
}

function parseJsonObject(text: string): Record<string, unknown> | undefined {
  try {
    return asObject(JSON.parse(text));
  } catch {
    return undefined;
  }
}

function asObject(value: unknown): Record<string, unknown> | undefined {
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
}

/** Where to reach the broker: one of the hosts of an oslo.messaging transport URL. */
export interface AmqpEndpoint {
  protocol: 'amqp' | 'amqps';
  hostname: string;
  port: number;
  username: string;
  password: string;
  vhost: string;
}

/**
 * The brokers of an oslo.messaging transport URL, `rabbit://user:pass@host:port[,user:pass@host2:port]/vhost[?ssl=1]`
 * (the form nova.conf's transport_url takes; `amqp://` too). A cluster's hosts are tried in turn.
 * Throws on a URL that is not one (config.ts has already checked the scheme and length).
 */
export function parseTransportUrl(url: string): AmqpEndpoint[] {
  const match = /^(rabbit|amqp):\/\/([^/?#]*)(?:\/([^?#]*))?(?:\?([^#]*))?$/.exec(url);
  if (!match) throw new Error('not a transport URL: expected rabbit://user:pass@host:port/vhost');
  const [, , hostList, path = '', query = ''] = match;
  const params = new URLSearchParams(query);
  const tls = ['1', 'true', 'yes'].includes((params.get('ssl') ?? '').toLowerCase());
  // oslo and kombu read an empty path (`host:5672/`) as RabbitMQ's default vhost.
  const vhost = path === '' ? '/' : decodeURIComponent(path);
  const hosts = hostList.split(',').filter((part) => part !== '');
  if (hosts.length === 0) throw new Error('a transport URL names at least one host');
  return hosts.map((part) => {
    const parsed = new URL(`amqp://${part}`);
    if (!parsed.hostname) throw new Error('a transport URL host has no name');
    return {
      protocol: tls ? 'amqps' : 'amqp',
      hostname: parsed.hostname.replace(/^\[(.*)\]$/, '$1'),
      port: parsed.port ? Number(parsed.port) : tls ? 5671 : 5672,
      username: decodeURIComponent(parsed.username) || 'guest',
      password: decodeURIComponent(parsed.password) || 'guest',
      vhost,
    };
  });
}
