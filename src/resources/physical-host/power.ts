/**
 * A reservable host's power (issue 48) as os-hosts serves it: its settings (stored, the password
 * never shown again), what is known of its power, when it is next needed (any booking: whole
 * host, instance slots, preemptible, lendings, maintenance), and waking or putting it to sleep by
 * hand. The planner's workflow will use the same reads and the same drivers.
 */
import { listHosts, type HostRecord } from '../../db/hosts';
import { nextHostNeeds } from '../../db/host-allocations';
import { allHostPower, hostPowerOf, recordPowerState, saveHostPowerSettings, type HostPowerRecord } from '../../db/host-power';
import { nextMaintenanceNeeds } from '../../db/maintenance';
import type { Pool } from '../../db/pool';
import { missingPowerSetting, powerView, type HostPowerSettings, type HostPowerView, type PowerState } from '../../domain/host-power';
import { invalidLease, leaseConflict } from '../../domain/lease';
import { hostNeeds, type PlannedHost } from '../../domain/power-plan';
import { powerDriverFor, type PowerDriverDeps } from '../../power';

/** A change of a host's power settings: the fields given replace the stored ones (null clears one); the others stay. */
export type HostPowerPatch = Partial<{ [K in keyof HostPowerSettings]: HostPowerSettings[K] }>;

/** What os-hosts shows of one host's power (admins only). */
export interface HostPowerStatus {
  /** The settings (the password as `password_set`); null: none (the `none` driver). */
  power: HostPowerView | null;
  /** The last state read or brought about (not read from the BMC for the answer). */
  power_state: PowerState;
  /** Since when the host has been off; null when it is not. */
  powered_off_since: number | null;
  /** The start of its earliest booking of any kind not ended yet (in the past: booked now); null: none. */
  next_needed: number | null;
}

const NO_SETTINGS: HostPowerSettings = { driver: 'none', address: null, port: null, username: null, password: null, node: null, manage: true, bootSeconds: null };

export class HostPower {
  constructor(
    private readonly pool: Pool,
    private readonly deps: { drivers: PowerDriverDeps; defaultBootMs: number },
  ) {}

  /** When the host is next needed, and until when it is busy now. */
  async need(hostId: string, nowMs: number): Promise<Pick<PlannedHost, 'nextNeededMs' | 'busyUntilMs'>> {
    const rows = [...(await nextHostNeeds(this.pool, nowMs, [hostId])), ...(await nextMaintenanceNeeds(this.pool, nowMs, [hostId]))];
    return hostNeeds(rows).get(hostId) ?? { nextNeededMs: null, busyUntilMs: null };
  }

  /**
   * The planner's view of every enrolled host (not released) with a power driver: its last known
   * power, whether it is managed, its next need and its boot time (planPower's input). Three reads
   * whatever the number of hosts.
   */
  async plannedHosts(nowMs: number): Promise<PlannedHost[]> {
    const powered = await allHostPower(this.pool);
    const hosts = (await listHosts(this.pool)).filter((host) => host.released_at === null && (powered.get(host.id)?.settings.driver ?? 'none') !== 'none');
    if (hosts.length === 0) return [];
    const ids = hosts.map((host) => host.id);
    const needs = hostNeeds([...(await nextHostNeeds(this.pool, nowMs, ids)), ...(await nextMaintenanceNeeds(this.pool, nowMs, ids))]);
    return hosts.map((host) => {
      const record = powered.get(host.id)!;
      const need = needs.get(host.id) ?? { nextNeededMs: null, busyUntilMs: null };
      return { id: host.id, power: record.powerState, manage: record.settings.manage, ...need, bootMs: this.bootMs(record) };
    });
  }

  async status(host: HostRecord, nowMs: number): Promise<HostPowerStatus> {
    const [record, need] = [await hostPowerOf(this.pool, host.id), await this.need(host.id, nowMs)];
    return statusOf(record, need.nextNeededMs);
  }

  /**
   * The host's settings with the patch merged in (`hostId` undefined: a host not enrolled yet, with
   * none), checked complete for their driver: 400 naming what is missing (`command` needs the
   * deployment's programs). Nothing is stored: `save` does, once the rest of the request is done.
   */
  async prepare(hostId: string | undefined, patch: HostPowerPatch): Promise<HostPowerSettings> {
    const stored = (hostId === undefined ? undefined : (await hostPowerOf(this.pool, hostId))?.settings) ?? NO_SETTINGS;
    const merged: HostPowerSettings = { ...stored, ...Object.fromEntries(Object.entries(patch).filter(([, value]) => value !== undefined)) };
    const missing = missingPowerSetting(merged);
    if (missing !== undefined) throw invalidLease(`power: the ${merged.driver} driver needs ${missing}`);
    if (merged.driver === 'command' && !this.deps.drivers.commands) {
      throw invalidLease('power: the command driver runs the deployment’s programs, and none are configured (LK_POWER_COMMAND_ON and LK_POWER_COMMAND_OFF)');
    }
    return merged;
  }

  async save(hostId: string, settings: HostPowerSettings): Promise<void> {
    await saveHostPowerSettings(this.pool, hostId, settings);
  }

  /** The host's boot time: its own setting, or the deployment's default (its learned boots come with the planner). */
  private bootMs(record: HostPowerRecord): number {
    return record.settings.bootSeconds === null ? this.deps.defaultBootMs : record.settings.bootSeconds * 1000;
  }

  /**
   * Wakes the host or puts it to sleep by hand (an admin's), through its driver. Off is refused
   * (409) while the host is booked now or its next booking starts within its boot time: it could
   * not be up in time. Records the state brought about.
   */
  async powerByHand(host: HostRecord, action: 'on' | 'off', nowMs: number, signal?: AbortSignal): Promise<HostPowerStatus> {
    const record = await hostPowerOf(this.pool, host.id);
    const driver = record && powerDriverFor(host.hypervisor_hostname, record.settings, this.deps.drivers);
    if (!record || !driver) throw leaseConflict(`host ${host.hypervisor_hostname} has no power driver: set its power settings first (PUT /v1/os-hosts/${host.id} {"power": {"driver": …}})`);
    const need = await this.need(host.id, nowMs);
    if (action === 'off' && need.nextNeededMs !== null) {
      if (need.nextNeededMs <= nowMs) throw leaseConflict(`host ${host.hypervisor_hostname} is booked now: it cannot be powered off`);
      const bootMs = this.bootMs(record);
      if (need.nextNeededMs - nowMs <= bootMs) {
        throw leaseConflict(`host ${host.hypervisor_hostname} is booked from ${new Date(need.nextNeededMs).toISOString()}, within its boot time (${Math.round(bootMs / 1000)} s): it cannot be powered off`);
      }
    }
    if (action === 'on') await driver.powerOn(signal);
    else await driver.powerOff(signal);
    await recordPowerState(this.pool, host.id, action, nowMs);
    return statusOf(await hostPowerOf(this.pool, host.id), need.nextNeededMs);
  }
}

function statusOf(record: HostPowerRecord | undefined, nextNeededMs: number | null): HostPowerStatus {
  return {
    power: record ? powerView(record.settings) : null,
    power_state: record?.powerState ?? 'unknown',
    powered_off_since: record?.poweredOffSinceMs ?? null,
    next_needed: nextNeededMs,
  };
}
