/** The `virtual:floatingip` reservation's parameters, as blazarclient sends them, and the address checks enrolment shares. */
import ipaddr from 'ipaddr.js';
import { z } from 'zod';
import { whole } from '../shared/params';

/** The most addresses one reservation may ask for. */
export const MAX_FLOATING_IPS = 256;

/** An IPv4 or IPv6 address in its canonical text (IPv6 compressed, as PostgreSQL prints it), or undefined. */
export function canonicalAddress(text: string): string | undefined {
  if (text.length > 64 || !ipaddr.isValid(text)) return undefined;
  const parsed = ipaddr.parse(text);
  // An IPv4 address written the old ways ("10.1", "0x0a000001") is not what anybody means.
  if (parsed.kind() === 'ipv4' && !ipaddr.IPv4.isValidFourPartDecimal(text)) return undefined;
  return parsed.toString();
}

/** An address as the user wrote it, checked and made canonical; Blazar's sentence when it is not one. */
export const addressParam = z
  .string({ error: 'expected an IP address' })
  .max(64, 'expected an IP address')
  .transform((text, ctx) => {
    const address = canonicalAddress(text.trim());
    if (address === undefined) {
      ctx.addIssue({ code: 'custom', message: `IP address ${text.slice(0, 64)} is invalid form.` });
      return z.NEVER;
    }
    return address;
  });

export const floatingIpParams = z
  .strictObject({
    /** The external network the addresses belong to. */
    network_id: z.uuid({ error: 'expected the id (a UUID) of an external network' }),
    /** How many addresses. */
    amount: whole('addresses', 1, MAX_FLOATING_IPS).nullish().transform((v) => v ?? 1),
    /** These addresses among them (enrolled ones of the network). */
    required_floatingips: z
      .array(addressParam, { error: 'expected a list of IP addresses' })
      .max(MAX_FLOATING_IPS, `at most ${MAX_FLOATING_IPS} addresses`)
      .nullish()
      .transform((v) => v ?? []),
  })
  .superRefine((params, ctx) => {
    if (params.required_floatingips.length > params.amount) {
      ctx.addIssue({
        code: 'custom',
        path: ['required_floatingips'],
        message: 'Invalid values for required_floatingips and amount. The amount must be equal to or longer than length of required_floatingips.',
      });
    }
    if (new Set(params.required_floatingips).size < params.required_floatingips.length) {
      ctx.addIssue({ code: 'custom', path: ['required_floatingips'], message: 'an address is listed twice' });
    }
  });

export type FloatingIpParams = z.output<typeof floatingIpParams>;

/** Whether `address` lies in `cidr` (both canonical or as Neutron prints them). */
export function inCidr(address: string, cidr: string): boolean {
  const ip = ipaddr.parse(address);
  const [range, bits] = ipaddr.parseCIDR(cidr);
  return ip.kind() === range.kind() && ip.match(range, bits);
}

/** Whether `address` lies in [start, end] (one family). */
export function inRange(address: string, start: string, end: string): boolean {
  const value = (text: string) => ipaddr.parse(text).toByteArray().reduce((n, byte) => n * 256n + BigInt(byte), 0n);
  const [ip, from, to] = [address, start, end].map((t) => ipaddr.parse(t));
  if (ip.kind() !== from.kind() || ip.kind() !== to.kind()) return false;
  return value(start) <= value(address) && value(address) <= value(end);
}
