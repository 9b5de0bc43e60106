/**
 * The power drivers (issue 48): one interface (`PowerDriver`), three ways to reach a host's power
 * (`ipmi`, `ironic`, `command`), chosen per host by its power settings. A client layer beside
 * src/openstack: the resource types and the activities use it; it knows no table and no workflow.
 */
import { IPMI_DEFAULT_PORT, missingPowerSetting, type HostPowerSettings } from '../domain/host-power';
import type { IronicClient } from '../openstack/ironic';
import { CommandDriver, type PowerCommands } from './command';
import type { PowerDriver } from './driver';
import { PowerConfigError } from './errors';
import { IpmiDriver } from './ipmi';
import { IronicDriver } from './ironic';

export * from './command';
export * from './driver';
export * from './errors';
export * from './ipmi';
export * from './ironic';

/** What the drivers need of the deployment. */
export interface PowerDriverDeps {
  /** Each driver call's bound. */
  timeoutMs: number;
  /** The `command` driver's programs; undefined when the deployment configured none. */
  commands?: PowerCommands;
  /** Ironic's client, built on first use (only hosts with the `ironic` driver need one). */
  ironic: () => IronicClient;
  /** The ipmitool program (default `ipmitool` on PATH). */
  ipmitool?: string;
  /** The RMCP+ cipher suite every BMC is spoken to with (unset: ipmitool's choice). */
  ipmiCipherSuite?: number;
}

/**
 * The driver for one host by its settings; undefined for `none`. Throws PowerConfigError when the
 * settings (or the deployment's) cannot make one: the API checks the same before storing them.
 */
export function powerDriverFor(host: string, settings: HostPowerSettings, deps: PowerDriverDeps): PowerDriver | undefined {
  const missing = missingPowerSetting(settings);
  if (missing !== undefined) throw new PowerConfigError(`the power settings of ${host} lack ${missing}`, host);
  switch (settings.driver) {
    case 'none':
      return undefined;
    case 'ipmi':
      return new IpmiDriver(
        { host, address: settings.address!, port: settings.port ?? IPMI_DEFAULT_PORT, username: settings.username!, password: settings.password! },
        { timeoutMs: deps.timeoutMs, program: deps.ipmitool, cipherSuite: deps.ipmiCipherSuite },
      );
    case 'ironic':
      return new IronicDriver({ host, node: settings.node! }, deps.ironic(), { timeoutMs: deps.timeoutMs });
    case 'command':
      if (!deps.commands) throw new PowerConfigError(`${host} is powered by the deployment's programs, and none are configured (LK_POWER_COMMAND_ON and LK_POWER_COMMAND_OFF)`, host);
      return new CommandDriver({ host, address: settings.address }, deps.commands, { timeoutMs: deps.timeoutMs });
  }
}
