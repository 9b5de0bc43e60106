/**
 * Where a project's webhook may point (the SSRF guard): public unicast addresses only, judged the
 * same for an address written in the URL and for every address its name resolves to, where the
 * URL is set and again at each connection (the socket's lookup, so a name cannot resolve to a
 * public address for the check and a private one for the request).
 *
 * Names are resolved by c-ares (node:dns's Resolver: A and AAAA queries on the event loop, with a
 * real timeout), never by dns.lookup: getaddrinfo runs on one of libuv's 4 threads and keeps it for
 * as long as the name server makes it wait, whatever timeout its caller gave up at.
 *
 * A refusal never says what a name resolves to, nor why an address is refused: a member could
 * otherwise map the cloud's internal names to its private addresses.
 */
import dns from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';
import { WEBHOOK_DNS_TIMEOUT_MS, type Config } from '../config';

export type WebhookDnsSettings = Config['notices']['dns'];

/** The one answer to an address that is not allowed, written in the URL or resolved: nothing about the address. */
export const ADDRESS_NOT_ALLOWED = 'the address of this webhook is not allowed';
/** Addresses of each family considered for one name: more are not checked, nor connected to. */
export const MAX_ADDRESSES_PER_FAMILY = 8;
/** Without settings: the system's name servers, LK_WEBHOOK_DNS_TIMEOUT_MS's default. */
export const DEFAULT_DNS_SETTINGS: WebhookDnsSettings = { servers: undefined, timeoutMs: WEBHOOK_DNS_TIMEOUT_MS };

/** A webhook's address is refused (`not-allowed`), or its name does not resolve (`unresolved`, with the resolver's `code`: ENOTFOUND, ETIMEOUT…). */
export class WebhookAddressError extends Error {
  override readonly name = 'WebhookAddressError';
  constructor(
    message: string,
    readonly kind: 'not-allowed' | 'unresolved',
    readonly code?: string,
  ) {
    super(message);
  }
}

/** IPv6 global unicast (RFC 4291): every other IPv6 address is refused, unless it embeds an IPv4 address. */
const GLOBAL_UNICAST = ipaddr.IPv6.parseCIDR('2000::/3');

const ipv4Of = (high: number, low: number) => new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff]);

/**
 * The IPv4 addresses an IPv6 address carries, where the network would deliver it to them: IPv4-mapped
 * (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d), IPv4-translated (::ffff:0:a.b.c.d), NAT64's
 * well-known prefix (64:ff9b::/96), 6to4 (2002:AABB:CCDD::/48) and Teredo (2001::/32: its server and,
 * obfuscated, its client). Undefined for any other address.
 */
function embeddedIPv4(ip: ipaddr.IPv6): ipaddr.IPv4[] | undefined {
  const p = ip.parts;
  const zeros = (from: number, to: number) => p.slice(from, to).every((part) => part === 0);
  if (zeros(0, 5) && (p[5] === 0xffff || p[5] === 0)) return [ipv4Of(p[6], p[7])];
  if (zeros(0, 4) && p[4] === 0xffff && p[5] === 0) return [ipv4Of(p[6], p[7])];
  if (p[0] === 0x64 && p[1] === 0xff9b && zeros(2, 6)) return [ipv4Of(p[6], p[7])];
  if (p[0] === 0x2002) return [ipv4Of(p[1], p[2])];
  if (p[0] === 0x2001 && p[1] === 0) return [ipv4Of(p[2], p[3]), ipv4Of(p[6] ^ 0xffff, p[7] ^ 0xffff)];
  return undefined;
}

/** IPv4: public unicast only (no loopback, private, link-local, shared CGNAT, multicast, reserved, documentation, broadcast, 0.0.0.0/8…). */
const ipv4Allowed = (ip: ipaddr.IPv4) => ip.range() === 'unicast';

/**
 * Whether a project's webhook may reach this address: public IPv4 unicast; IPv6 global unicast
 * (2000::/3) outside the special-purpose ranges (documentation, benchmarking, ORCHID, AMT, AS112…);
 * an IPv6 address that embeds an IPv4 address is judged as that address.
 */
export function addressAllowed(address: string): boolean {
  let ip: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    ip = ipaddr.parse(address.replace(/^\[(.*)\]$/, '$1'));
  } catch {
    return false;
  }
  if (ip instanceof ipaddr.IPv4) return ipv4Allowed(ip);
  if (ip.zoneId !== undefined) return false;
  const embedded = embeddedIPv4(ip);
  if (embedded) return embedded.every(ipv4Allowed);
  // ipaddr.js names the special-purpose ranges inside 2000::/3 (IANA's registry): only its `unicast` is left.
  return ip.match(GLOBAL_UNICAST) && ip.range() === 'unicast';
}

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** RFC 6761: `localhost` and names under it are loopback, answered here rather than asked of a name server. */
const isLocalhostName = (name: string) => /(^|\.)localhost\.?$/i.test(name);

const codeOf = (err: unknown) => (err as NodeJS.ErrnoException).code ?? 'ENOTFOUND';
/** No record of that type, or no such name: an empty answer, not a failure. */
const isEmptyAnswer = (err: unknown) => codeOf(err) === dns.NODATA || codeOf(err) === dns.NOTFOUND;

/**
 * The addresses a name resolves to (its A records, then its AAAA records; at most
 * MAX_ADDRESSES_PER_FAMILY of each), asked of `settings.servers` (else the system's) within
 * `settings.timeoutMs`: at that deadline the queries are cancelled. Throws WebhookAddressError
 * `unresolved` when there is none.
 */
export async function resolveWebhookName(hostname: string, settings: WebhookDnsSettings = DEFAULT_DNS_SETTINGS): Promise<ResolvedAddress[]> {
  if (isLocalhostName(hostname)) return [{ address: '127.0.0.1', family: 4 }, { address: '::1', family: 6 }];
  // Two tries per server, then the deadline cancels whatever is still waiting (c-ares may double a retry's timeout).
  const resolver = new dns.promises.Resolver({ timeout: Math.max(1, Math.ceil(settings.timeoutMs / 2)), tries: 2 });
  if (settings.servers?.length) resolver.setServers([...settings.servers]);
  let timedOut = false;
  const deadline = setTimeout(() => {
    timedOut = true;
    resolver.cancel();
  }, settings.timeoutMs);
  try {
    const [v4, v6] = await Promise.allSettled([resolver.resolve4(hostname), resolver.resolve6(hostname)]);
    const found: ResolvedAddress[] = [
      ...(v4.status === 'fulfilled' ? v4.value.slice(0, MAX_ADDRESSES_PER_FAMILY).map((address) => ({ address, family: 4 as const })) : []),
      ...(v6.status === 'fulfilled' ? v6.value.slice(0, MAX_ADDRESSES_PER_FAMILY).map((address) => ({ address, family: 6 as const })) : []),
    ];
    if (found.length > 0) return found;
    const failures = [v4, v6].flatMap((outcome) => (outcome.status === 'rejected' && !isEmptyAnswer(outcome.reason) ? [codeOf(outcome.reason)] : []));
    if (timedOut || failures.includes(dns.TIMEOUT)) throw new WebhookAddressError(`${hostname} did not resolve within ${settings.timeoutMs} ms`, 'unresolved', dns.TIMEOUT);
    throw new WebhookAddressError(`${hostname} does not resolve`, 'unresolved', failures[0] ?? dns.NOTFOUND);
  } finally {
    clearTimeout(deadline);
  }
}

/** A URL's host as an address or a name (an IPv6 address without its brackets). */
export const hostOf = (url: URL) => url.hostname.replace(/^\[(.*)\]$/, '$1');

/**
 * Checks a project webhook's URL where it is set: its host must resolve, and, unless
 * `allowPrivate`, to allowed addresses only (addressAllowed). Throws WebhookAddressError.
 */
export async function checkWebhookAddress(url: string, options: { allowPrivate: boolean; dns?: WebhookDnsSettings }): Promise<void> {
  const host = hostOf(new URL(url));
  const addresses = isIP(host) ? [host] : (await resolveWebhookName(host, options.dns)).map((found) => found.address);
  if (!options.allowPrivate && !addresses.every(addressAllowed)) throw new WebhookAddressError(ADDRESS_NOT_ALLOWED, 'not-allowed');
}

/**
 * The socket's lookup for a project's webhook: its name resolved by resolveWebhookName and, when
 * `guard`, every address it resolves to allowed, or the connection is not made (the error is the
 * WebhookAddressError). Only the addresses checked are connected to.
 */
export function webhookLookup(settings: WebhookDnsSettings, guard: boolean): LookupFunction {
  return (hostname, options, callback) => {
    resolveWebhookName(hostname, settings).then(
      (resolved) => {
        if (guard && !resolved.every((found) => addressAllowed(found.address))) return callback(new WebhookAddressError(ADDRESS_NOT_ALLOWED, 'not-allowed'), '', 0);
        const usable = options.family === 4 || options.family === 6 ? resolved.filter((found) => found.family === options.family) : resolved;
        if (usable.length === 0) return callback(new WebhookAddressError(`${hostname} does not resolve`, 'unresolved', dns.NOTFOUND), '', 0);
        if (options.all) return callback(null, usable);
        callback(null, usable[0].address, usable[0].family);
      },
      (err: Error) => callback(err, '', 0),
    );
  };
}
