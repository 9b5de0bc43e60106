/**
 * Hosts' power (issue 48), admin only (src/api/hosts.ts serves it): the `power` settings os-hosts
 * takes on enrolment (POST) and update (PUT), their view (the password never shown again:
 * `password_set`), and the body of `POST /v1/os-hosts/{id}/power`.
 */
import { z } from 'zod';
import { POWER_DRIVER_KINDS } from '../domain/host-power';
import { formatBlazarTimestamp } from '../domain/dates';
import type { HostPowerPatch, HostPowerStatus } from '../resources/physical-host/power';
import { ApiError, parseRequest } from './errors';

/** Starts with a letter or digit (so that no value reads as an option of the program it is given to). */
const LEADING = /^[A-Za-z0-9]/;
const nullable = <T extends z.ZodType>(schema: T) => schema.nullable().optional();

/** `power` in an os-hosts body: each field optional (a change keeps what it does not name), null clears one. */
export const powerSettingsBody = z.strictObject({
  driver: z.enum(POWER_DRIVER_KINDS, { error: `expected one of ${POWER_DRIVER_KINDS.join(', ')}` }).optional(),
  // An IPv4 or IPv6 address or a DNS name.
  address: nullable(z.string().max(255).regex(/^[A-Za-z0-9.:-]+$/, 'expected an IP address or a host name').regex(LEADING, 'expected an IP address or a host name')),
  port: nullable(z.number().int().min(1).max(65_535)),
  // IPMI user names are at most 16 bytes, passwords at most 20 (IPMI 2.0).
  username: nullable(z.string().min(1).max(16).regex(/^[\x21-\x7e]+$/, 'expected printable ASCII without spaces').regex(LEADING, 'expected to start with a letter or digit')),
  password: nullable(z.string().min(1).max(20).regex(/^[\x20-\x7e]+$/, 'expected printable ASCII')),
  // An Ironic node's UUID or name.
  node: nullable(z.string().min(1).max(255).regex(/^[A-Za-z0-9][A-Za-z0-9._~:-]*$/, 'expected an Ironic node UUID or name')),
  manage: z.boolean().optional(),
  boot_seconds: nullable(z.number().int().min(1).max(86_400)),
});

/** The `power` field of an os-hosts body (an object, or its JSON text as `blazar host-update --extra` sends one) as a patch; undefined when absent. */
export function powerPatchOf(value: unknown): HostPowerPatch | undefined {
  if (value === undefined) return undefined;
  let json: unknown = value;
  if (typeof value === 'string') {
    try {
      json = JSON.parse(value) as unknown;
    } catch {
      throw new ApiError(400, 'power: expected an object such as {"driver": "ipmi", "address": "10.0.0.5", "username": "admin", "password": "…"}');
    }
  }
  const { boot_seconds: bootSeconds, ...rest } = parseRequest(powerSettingsBody, json, 'power');
  return { ...rest, bootSeconds };
}

/** What os-hosts shows of a host's power, its instants in Blazar's timestamp form. */
export function powerFields(status: HostPowerStatus) {
  const timestamp = (ms: number | null) => (ms === null ? null : formatBlazarTimestamp(ms));
  const error = status.power_error && { message: status.power_error.message, at: timestamp(status.power_error.at), failures: status.power_error.failures, next_try: timestamp(status.power_error.next_try) };
  return { power: status.power, power_state: status.power_state, powered_off_since: timestamp(status.powered_off_since), next_needed: timestamp(status.next_needed), power_error: error };
}

/** `POST /v1/os-hosts/{id}/power`. */
export const powerActionBody = z.strictObject({ action: z.enum(['on', 'off'], { error: 'expected "on" or "off"' }) });
