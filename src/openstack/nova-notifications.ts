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

// The transport-URL parser is shared with the oslo.messaging notifier (src/notifications/oslo.ts).
export { parseTransportUrl, type AmqpEndpoint } from '../domain/transport-url';
