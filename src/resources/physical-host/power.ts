/**
 * A reservable host's power (issue 48) as os-hosts serves it: its settings (stored, the password
 * never shown again), what is known of its power, when it is next needed (any booking: whole
 * host, instance slots, preemptible, lendings, maintenance), and waking or putting it to sleep by
 * hand. The planner's workflow will use the same reads and the same drivers.
 */
import { bootDurations, recordBoot } from '../../db/host-boots';
import { computeHostName, hypervisorProperties, listHosts, type HostRecord } from '../../db/hosts';
import { nextHostNeeds } from '../../db/host-allocations';
import { allHostPower, hostPowerOf, recordPowerState, saveHostPowerSettings, type HostPowerRecord } from '../../db/host-power';
import { nextMaintenanceNeeds } from '../../db/maintenance';
import type { Pool } from '../../db/pool';
import { missingPowerSetting, powerView, type HostPowerSettings, type HostPowerView, type PowerState } from '../../domain/host-power';
import { invalidLease, leaseConflict } from '../../domain/lease';
import { hostNeeds, learnedBootMs, maySleep, planPower, wakeAtMs, type PlannedHost, type PowerPlan, type PowerPlanSettings } from '../../domain/power-plan';
import type { Config } from '../../config';
import type { IronicClient } from '../../openstack/ironic';
import type { NovaClient } from '../../openstack/nova';
import { powerDriverFor, PowerConfigError, type PowerDriver, type PowerDriverDeps } from '../../power';

/**
 * The reason the planner gives the compute service it disables before a power-off. It enables
 * again only a service disabled with this prefix: one an operator disabled for another reason stays
 * as they left it.
 */
export const POWERED_OFF_REASON = 'leasekeeper: powered off';

/** What the planner's look at a woken host found: up (and enabled again if the planner disabled it), still booting, or given up on (past its boot time and the resume time-out, or no longer on). */
export type WakeOutcome = 'up' | 'booting' | 'given-up';

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

/** A host powered off now (the admins' calendar shades it): since when, and when the planner will wake it (null: not planned). */
export interface PoweredOffSpan {
  hostId: string;
  sinceMs: number;
  wakeAtMs: number | null;
}

const NO_SETTINGS: HostPowerSettings = { driver: 'none', address: null, port: null, username: null, password: null, node: null, manage: true, bootSeconds: null };

export class HostPower {
  constructor(
    private readonly pool: Pool,
    private readonly deps: {
      drivers: PowerDriverDeps;
      defaultBootMs: number;
      /** How many of a host's last boots are kept and learned from (LK_POWER_BOOT_SAMPLES); 5 unset. */
      bootSamples?: number;
      /** Past its boot time, how long more a woken host may take (LK_POWER_RESUME_TIMEOUT_SECONDS); 600 s unset. */
      resumeTimeoutMs?: number;
      /** Nova, for the planner's disable before a power-off and enable after a wake; none: no compute service is touched (tests of the calendar alone). */
      nova?: () => NovaClient;
    },
  ) {}

  private get bootSamples(): number {
    return this.deps.bootSamples ?? 5;
  }

  /** When the host is next needed, and until when it is busy now. */
  async need(hostId: string, nowMs: number): Promise<Pick<PlannedHost, 'nextNeededMs' | 'busyUntilMs'>> {
    return (await this.needsOf([hostId], nowMs)).get(hostId) ?? { nextNeededMs: null, busyUntilMs: null };
  }

  /** The hosts' next needs from every source (bookings of any kind, maintenance windows): two reads. */
  private async needsOf(hostIds: string[], nowMs: number): Promise<ReturnType<typeof hostNeeds>> {
    return hostNeeds([...(await nextHostNeeds(this.pool, nowMs, hostIds)), ...(await nextMaintenanceNeeds(this.pool, nowMs, hostIds))]);
  }

  /**
   * The planner's view of every enrolled host (not released) with a power driver: its last known
   * power, whether it is managed, its next need, its boot time and its capability set (planPower's
   * input). `withUnpowered` (an awake reserve is kept): the hosts without a driver too, on and not
   * managed, so that they count in their set's reserve; the planner never acts on them. Three reads
   * whatever the number of hosts.
   */
  async plannedHosts(nowMs: number, { withUnpowered = false }: { withUnpowered?: boolean } = {}): Promise<PlannedHost[]> {
    const powered = await allHostPower(this.pool);
    const drivenBy = (host: HostRecord) => powered.get(host.id)?.settings.driver ?? 'none';
    const hosts = (await listHosts(this.pool)).filter((host) => host.released_at === null && (withUnpowered || drivenBy(host) !== 'none'));
    if (hosts.length === 0) return [];
    const ids = hosts.map((host) => host.id);
    const needs = await this.needsOf(ids, nowMs);
    const boots = await bootDurations(this.pool, ids, this.bootSamples);
    return hosts.map((host): PlannedHost => {
      const record = powered.get(host.id);
      const need = needs.get(host.id) ?? { nextNeededMs: null, busyUntilMs: null };
      const reserveClass = host.reservable && host.state === 'up' ? capabilitySet(host) : null;
      if (!record || drivenBy(host) === 'none') return { id: host.id, power: 'on', manage: false, ...need, bootMs: this.deps.defaultBootMs, reserveClass };
      return { id: host.id, power: record.powerState, manage: record.settings.manage, ...need, bootMs: this.bootMs(record, boots.get(host.id)), reserveClass };
    });
  }

  /** The planner's look: planPower over every powered host (and, for the awake reserve, the others). */
  async plan(nowMs: number, settings: PowerPlanSettings): Promise<PowerPlan> {
    return planPower(await this.plannedHosts(nowMs, { withUnpowered: (settings.awakeReserve ?? 0) > 0 }), nowMs, settings);
  }

  /**
   * Puts a host to sleep for the planner: read again first (a lease admitted since the plan may
   * need it: then it is kept on), its compute service disabled in Nova with a reason naming its next
   * need, then powered off through its driver, and recorded off. A host whose compute service an
   * operator disabled (another reason) is theirs: kept as it is. Again on a host off: nothing.
   */
  async putToSleep(hostId: string, nowMs: number, settings: Pick<PowerPlanSettings, 'offAfterIdleMs'>): Promise<'off' | 'kept'> {
    const { host, record, driver } = await this.driverOf(hostId);
    if (record.powerState === 'off') return 'off';
    const need = await this.need(hostId, nowMs);
    const planned: PlannedHost = { id: hostId, power: record.powerState, manage: record.settings.manage, ...need, bootMs: await this.learnedBootOf(record) };
    if (record.powerState !== 'on' || !maySleep(planned, nowMs, settings)) return 'kept';
    if (this.deps.nova) {
      const nova = this.deps.nova();
      const [service] = await nova.listServices({ binary: 'nova-compute', host: computeHostName(host) });
      if (service?.status === 'disabled' && !service.disabled_reason?.startsWith(POWERED_OFF_REASON)) return 'kept';
      const until = need.nextNeededMs === null ? 'no booking' : new Date(need.nextNeededMs).toISOString();
      if (service) await nova.updateService(service.id, { status: 'disabled', disabled_reason: `${POWERED_OFF_REASON}, idle until ${until}` });
    }
    await driver.powerOff();
    await recordPowerState(this.pool, hostId, 'off', Date.now());
    return 'off';
  }

  /** Wakes a host for the planner through its driver, and records it on (its boot starts: woken_at). Again on a host on: nothing. */
  async wake(hostId: string): Promise<void> {
    const { record, driver } = await this.driverOf(hostId);
    if (record.powerState === 'on') return;
    await driver.powerOn();
    await recordPowerState(this.pool, hostId, 'on', Date.now());
  }

  /**
   * The planner's look at a host it woke: once Nova reports its compute service up, the service is
   * enabled again if the planner disabled it (never one an operator disabled), and the boot's
   * duration is recorded (its boot time is learned from the last ones). Without Nova: up at once,
   * nothing learned.
   */
  async settleWake(hostId: string, nowMs: number): Promise<WakeOutcome> {
    const record = await hostPowerOf(this.pool, hostId);
    const [host] = await listHosts(this.pool, { id: hostId });
    if (!record || !host || record.powerState !== 'on' || record.wokenAtMs === null) return 'given-up';
    if (!this.deps.nova) return 'up';
    const nova = this.deps.nova();
    const [service] = await nova.listServices({ binary: 'nova-compute', host: computeHostName(host) });
    if (!service || service.state !== 'up' || service.forced_down) {
      const bootMs = await this.learnedBootOf(record);
      return nowMs > record.wokenAtMs + bootMs + (this.deps.resumeTimeoutMs ?? 600_000) ? 'given-up' : 'booting';
    }
    if (service.status === 'disabled' && service.disabled_reason?.startsWith(POWERED_OFF_REASON)) await nova.updateService(service.id, { status: 'enabled' });
    await recordBoot(this.pool, hostId, record.wokenAtMs, nowMs, this.bootSamples);
    return 'up';
  }

  private async driverOf(hostId: string): Promise<{ host: HostRecord; record: HostPowerRecord; driver: PowerDriver }> {
    const [host] = await listHosts(this.pool, { id: hostId });
    const record = await hostPowerOf(this.pool, hostId);
    const driver = host && record && powerDriverFor(host.hypervisor_hostname, record.settings, this.deps.drivers);
    if (!host || !record || !driver) throw new PowerConfigError(`host ${hostId} has no power driver (anymore)`, host?.hypervisor_hostname ?? hostId);
    return { host, record, driver };
  }

  private async learnedBootOf(record: HostPowerRecord): Promise<number> {
    return this.bootMs(record, (await bootDurations(this.pool, [record.hostId], this.bootSamples)).get(record.hostId));
  }

  /**
   * The hosts among `hostIds` powered off now, for the admins' calendar: since when, and when the
   * planner will wake them (their next booking less their boot time and `wakeMarginMs`, at the
   * earliest now; null: no booking ahead, or no planner to wake them, `wakeMarginMs` null).
   */
  async poweredOff(hostIds: readonly string[], nowMs: number, wakeMarginMs: number | null): Promise<PoweredOffSpan[]> {
    const wanted = new Set(hostIds);
    const off = [...(await allHostPower(this.pool)).values()].filter((r) => wanted.has(r.hostId) && r.powerState === 'off' && r.poweredOffSinceMs !== null);
    if (off.length === 0 || wakeMarginMs === null) return off.map((record) => ({ hostId: record.hostId, sinceMs: record.poweredOffSinceMs!, wakeAtMs: null }));
    const ids = off.map((r) => r.hostId);
    const [needs, boots] = [await this.needsOf(ids, nowMs), await bootDurations(this.pool, ids, this.bootSamples)];
    return off.map((record) => {
      const wakeAt = wakeAtMs({ nextNeededMs: needs.get(record.hostId)?.nextNeededMs ?? null, bootMs: this.bootMs(record, boots.get(record.hostId)) }, { marginMs: wakeMarginMs });
      return { hostId: record.hostId, sinceMs: record.poweredOffSinceMs!, wakeAtMs: wakeAt === null ? null : Math.max(nowMs, wakeAt) };
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

  /** The host's boot time: the 95th percentile of its last boots once enough are known; until then its own setting, or the deployment's default. */
  private bootMs(record: HostPowerRecord, bootsMs: readonly number[] = []): number {
    const defaultBootMs = record.settings.bootSeconds === null ? this.deps.defaultBootMs : record.settings.bootSeconds * 1000;
    return learnedBootMs(bootsMs, { defaultBootMs, minSamples: this.bootSamples });
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
      const bootMs = await this.learnedBootOf(record);
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

/**
 * Hosts' power as the deployment sets it up (the API's os-hosts, the worker's planner): the drivers
 * with the deployment's bound, programs and cipher suite; Ironic's client only for a host powered
 * through Ironic; Nova's for the planner's disable and enable.
 */
export function deploymentHostPower(pool: Pool, power: Config['power'], clients: { ironic: () => IronicClient; nova?: () => NovaClient }): HostPower {
  return new HostPower(pool, {
    drivers: { timeoutMs: power.timeoutMs, commands: power.commands, ipmiCipherSuite: power.ipmiCipherSuite, ironic: clients.ironic },
    defaultBootMs: power.defaultBootMs,
    bootSamples: power.bootSamples,
    resumeTimeoutMs: power.resumeTimeoutMs,
    nova: clients.nova,
  });
}

/** The hypervisor fields that name one host alone: no part of what a lease can ask of it. */
const HOST_IDENTITY_FIELDS = new Set<string>(['hypervisor_hostname', 'service_name']);

/**
 * A host's capability set for the awake reserve: everything a lease's property queries can compare
 * (the hypervisor's fields but its names, and its extra capabilities, private ones too). Hosts with
 * the same one serve the same leases.
 */
export function capabilitySet(host: HostRecord): string {
  const sorted = (entries: Array<[string, string]>) => entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const hypervisor = sorted(Object.entries(hypervisorProperties(host)).filter(([field]) => !HOST_IDENTITY_FIELDS.has(field)));
  return JSON.stringify([hypervisor, sorted(Object.entries(host.capabilities))]);
}

function statusOf(record: HostPowerRecord | undefined, nextNeededMs: number | null): HostPowerStatus {
  return {
    power: record ? powerView(record.settings) : null,
    power_state: record?.powerState ?? 'unknown',
    powered_off_since: record?.poweredOffSinceMs ?? null,
    next_needed: nextNeededMs,
  };
}
