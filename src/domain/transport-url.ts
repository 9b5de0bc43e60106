/**
 * oslo.messaging's transport URL (`transport_url` in nova.conf, blazar.conf…), parsed into the
 * brokers amqplib connects to: pure, shared by Nova's notification consumer and our notifier.
 */

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
