/**
 * A reservable host's power settings (issue 48), as an admin enrols them and the power drivers
 * (src/power) use them: which driver reaches the host, with what address and credentials, whether
 * the planner may power it off, and how long it takes to boot until its own boots say.
 */

/** How a host's power is reached; `none`: it is not (the planner leaves it on). */
export const POWER_DRIVER_KINDS = ['ipmi', 'ironic', 'command', 'none'] as const;
export type PowerDriverKind = (typeof POWER_DRIVER_KINDS)[number];

/** What a driver reads of a host's power: `unknown` when the BMC (or program, or Ironic) does not say. */
export type PowerState = 'on' | 'off' | 'unknown';

/** IPMI's own port (RMCP, UDP). */
export const IPMI_DEFAULT_PORT = 623;

/** The stored settings, password included: read only by the driver that uses them, never shown. */
export interface HostPowerSettings {
  driver: PowerDriverKind;
  /** ipmi: the BMC's address (IP or DNS name); command: passed to the programs if set. */
  address: string | null;
  /** ipmi: the BMC's UDP port (default 623). */
  port: number | null;
  /** ipmi: the BMC user. */
  username: string | null;
  /** ipmi: the BMC user's password (given to ipmitool in its environment, never on its command line). */
  password: string | null;
  /** ironic: the node's UUID or name. */
  node: string | null;
  /** Whether the planner may power the host off when it is idle (false: it is left on; waking by hand still works). */
  manage: boolean;
  /** How long the host takes to boot until enough of its own boots are known (undefined: the deployment's default). */
  bootSeconds: number | null;
}

/** The settings as os-hosts shows them to an admin: the password only as whether one is set. */
export interface HostPowerView {
  driver: PowerDriverKind;
  address: string | null;
  port: number | null;
  username: string | null;
  password_set: boolean;
  node: string | null;
  manage: boolean;
  boot_seconds: number | null;
}

export function powerView(settings: HostPowerSettings): HostPowerView {
  return {
    driver: settings.driver,
    address: settings.address,
    port: settings.driver === 'ipmi' ? (settings.port ?? IPMI_DEFAULT_PORT) : settings.port,
    username: settings.username,
    password_set: settings.password !== null,
    node: settings.node,
    manage: settings.manage,
    boot_seconds: settings.bootSeconds,
  };
}

/** What a driver of this kind cannot do without (undefined: the settings are complete). */
export function missingPowerSetting(settings: HostPowerSettings): string | undefined {
  switch (settings.driver) {
    case 'ipmi':
      if (settings.address === null) return 'address (the BMC’s address)';
      if (settings.username === null) return 'username (the BMC user)';
      if (settings.password === null) return 'password (the BMC user’s password)';
      return undefined;
    case 'ironic':
      return settings.node === null ? 'node (the Ironic node’s UUID or name)' : undefined;
    default:
      return undefined;
  }
}
