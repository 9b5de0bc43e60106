/**
 * A reservable host's power (issue 48) as os-hosts serves it: its settings (stored, the password
 * never shown again), what is known of its power, when it is next needed (any booking: whole
 * host, instance slots, preemptible, lendings, maintenance), and waking or putting it to sleep by
 * hand; and the power planner's steps over the same reads and drivers.
 *
 * A power-off is claimed first (`powering_off_at`), in a transaction holding the host's row against
 * new bookings (lockHostAgainstBookings) that finds the host free: a booking committed before the
 * claim keeps the host on; one made after it counts the host as asleep (sleepingHostIds), and the
 * planner wakes the host for it once the power-off is done (the host is then not on).
 */
import { bootDurations, recordBoot } from '../../db/host-boots';
import { computeHostName, hypervisorProperties, listHosts, lockHostAgainstBookings, type HostRecord } from '../../db/hosts';
import { nextHostNeeds } from '../../db/host-allocations';
import {
  allHostPower, awaitedWakes, awakeHostIds, claimPowerOff, hostPowerOf, recordPowerError, recordPowerState, recordReadPowerState, recordWake, recordWakeSettled, releasePowerOff, saveHostPowerSettings,
  type HostPowerRecord,
} from '../../db/host-power';
import { nextMaintenanceNeeds } from '../../db/maintenance';
import type { Pool } from '../../db/pool';
import { inTransaction } from '../../db/transaction';
import { missingPowerSetting, powerView, type HostPowerSettings, type HostPowerView, type PowerState } from '../../domain/host-power';
import { invalidLease, leaseConflict } from '../../domain/lease';
import { hostNeeds, learnedBootMs, maySleep, planPower, wakeAtMs, type PlannedHost, type PowerPlan, type PowerPlanSettings } from '../../domain/power-plan';
import type { Config } from '../../config';
import type { IronicClient } from '../../openstack/ironic';
import type { ComputeService, NovaClient } from '../../openstack/nova';
import { sleep } from '../../openstack/wait';
import { powerDriverFor, PowerConfigError, PowerError, type PowerDriver, type PowerDriverDeps } from '../../power';
import type { PoolClient } from 'pg';

/**
 * The reason the planner gives the compute service it disables before a power-off. It enables
 * again only a service disabled with this prefix: one an operator disabled for another reason stays
 * as they left it.
 */
export const POWERED_OFF_REASON = 'leasekeeper: powered off';

/** A driver failure no retry changes (credentials refused, settings that cannot work): tried again after this, doubling each time up to an hour. */
const RETRY_AFTER_FINAL_ERROR = { baseMs: 60_000, capMs: 3_600_000 };

/** What the planner's look at a woken host found: up (and enabled again if the planner disabled it), still booting, or given up on (past its boot deadline). */
export type WakeOutcome = 'up' | 'booting' | 'given-up';

/** What a power-off came to: off, or kept on (and why). */
export type PowerOffOutcome = { state: 'off' } | { state: 'kept'; reason: string };

/** What a wake came to: woken (its boot awaited until its deadline), or found on already (no boot). */
export type WakeResult = 'woken' | 'already-on';

/** The planner's plan, with the hosts whose power is to be read (unknown, or a power-off left unfinished). Hosts whose driver backs off are in no list. */
export interface HostPowerPlan extends PowerPlan {
  readState: string[];
}

/** What a look at the awaited wakes and the awake hosts found and did. */
export interface WakesSettled {
  /** Hosts woken whose compute service is not up yet, within their boot deadline. */
  booting: string[];
  /** …past it (the host monitor fails them). */
  givenUp: string[];
  /** Hosts whose compute service the planner had disabled, enabled again (on and up in Nova). */
  enabled: string[];
}

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
  /** Its driver's last failure unless a call succeeded since: the message, since when, how many in a row, when the planner tries again (null: at its next look). */
  power_error: { message: string; at: number; failures: number; next_try: number | null } | null;
}

/** A host powered off now (the admins' calendar shades it): since when, and when the planner will wake it (null: not planned). */
export interface PoweredOffSpan {
  hostId: string;
  sinceMs: number;
  wakeAtMs: number | null;
}

const NO_SETTINGS: HostPowerSettings = { driver: 'none', address: null, port: null, username: null, password: null, node: null, manage: true, bootSeconds: null };
const NOT_NEEDED: Pick<PlannedHost, 'nextNeededMs' | 'busyUntilMs'> = { nextNeededMs: null, busyUntilMs: null };
type Queryable = Pool | PoolClient;
type HostNeed = Pick<PlannedHost, 'nextNeededMs' | 'busyUntilMs'>;

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

  /** A power-off claimed longer ago than its activity's tries can take was left unfinished (a worker gone): its host's power is read again. */
  private get unfinishedPowerOffMs(): number {
    return 2 * (this.deps.drivers.timeoutMs + 60_000) + 60_000;
  }

  /** The hosts' next needs from every source (bookings of any kind, maintenance windows) and until when they are busy now (hosts without bookings are absent): two reads. */
  private async needsOf(db: Queryable, nowMs: number, hostIds: string[]): Promise<Map<string, HostNeed>> {
    return hostNeeds([...(await nextHostNeeds(db, nowMs, hostIds)), ...(await nextMaintenanceNeeds(db, nowMs, hostIds))]);
  }

  /** When the host is next needed, and until when it is busy now. */
  async need(hostId: string, nowMs: number): Promise<HostNeed> {
    return (await this.needsOf(this.pool, nowMs, [hostId])).get(hostId) ?? NOT_NEEDED;
  }

  /**
   * Every enrolled host (not released) with a power driver, as the planner sees it, and its record.
   * `withUnpowered` (an awake reserve is kept): the hosts without a driver too, on and not managed
   * and without a record, so that they count in their capability set's reserve; the planner never
   * acts on them.
   */
  private async view(nowMs: number, { withUnpowered = false }: { withUnpowered?: boolean } = {}): Promise<Array<{ planned: PlannedHost; record?: HostPowerRecord }>> {
    const powered = await allHostPower(this.pool);
    const drivenBy = (host: HostRecord) => powered.get(host.id)?.settings.driver ?? 'none';
    const hosts = (await listHosts(this.pool)).filter((host) => host.released_at === null && (withUnpowered || drivenBy(host) !== 'none'));
    if (hosts.length === 0) return [];
    const ids = hosts.map((host) => host.id);
    const needs = await this.needsOf(this.pool, nowMs, ids);
    const boots = await bootDurations(this.pool, ids, this.bootSamples);
    return hosts.map((host) => {
      const record = powered.get(host.id);
      const need = needs.get(host.id) ?? NOT_NEEDED;
      const reserveClass = host.reservable && host.state === 'up' ? capabilitySet(host) : null;
      if (!record || drivenBy(host) === 'none') return { planned: { id: host.id, power: 'on', manage: false, ...need, bootMs: this.deps.defaultBootMs, reserveClass } };
      // A power-off under way: neither on (no second power-off) nor known off (woken if needed, once it is done).
      const power = record.poweringOffAtMs === null ? record.powerState : 'unknown';
      return { record, planned: { id: host.id, power, manage: record.settings.manage, ...need, bootMs: this.bootMs(record, boots.get(host.id)), reserveClass } };
    });
  }

  /**
   * The planner's view of every enrolled host (not released) with a power driver: its last known
   * power, whether it is managed, its next need, its boot time and its capability set (planPower's
   * input); with `withUnpowered`, the hosts without a driver too (see view). Four reads whatever
   * the number of hosts.
   */
  async plannedHosts(nowMs: number, options: { withUnpowered?: boolean } = {}): Promise<PlannedHost[]> {
    return (await this.view(nowMs, options)).map((host) => host.planned);
  }

  /**
   * The planner's look: planPower over every powered host, less the hosts whose driver backs off
   * (looked at again when their next try comes), and the hosts whose power is to be read: unknown
   * (not read within `recheckMs`), or a power-off left unfinished.
   */
  async plan(nowMs: number, settings: PowerPlanSettings): Promise<HostPowerPlan> {
    const viewed = await this.view(nowMs, { withUnpowered: (settings.awakeReserve ?? 0) > 0 });
    const plan = planPower(viewed.map((host) => host.planned), nowMs, settings);
    // The planner acts on, reads and backs off only hosts with a driver (a record).
    const hosts = viewed.flatMap(({ planned, record }) => (record ? [{ planned, record }] : []));
    const retryAt = new Map(hosts.flatMap(({ record }) => (record.error && record.error.retryAtMs !== null && record.error.retryAtMs > nowMs ? [[record.hostId, record.error.retryAtMs] as const] : [])));
    const acting = new Set([...plan.powerOff, ...plan.powerOn]);
    let { nextLookMs } = plan;
    for (const [hostId, atMs] of retryAt) if (acting.has(hostId)) nextLookMs = Math.min(nextLookMs, atMs);
    const unread = ({ record }: { record: HostPowerRecord }) =>
      record.poweringOffAtMs === null
        ? record.powerState === 'unknown' && (record.powerStateAtMs === null || record.powerStateAtMs <= nowMs - settings.recheckMs)
        : record.poweringOffAtMs <= nowMs - this.unfinishedPowerOffMs;
    return {
      powerOff: plan.powerOff.filter((id) => !retryAt.has(id)),
      powerOn: plan.powerOn.filter((id) => !retryAt.has(id)),
      readState: hosts.filter((host) => !acting.has(host.record.hostId) && !retryAt.has(host.record.hostId) && unread(host)).map((host) => host.record.hostId),
      nextLookMs,
    };
  }

  /**
   * Puts a host to sleep for the planner: claimed first (its need read again under the lock
   * against new bookings: a lease admitted since the plan keeps it on), kept on when an operator
   * disabled its compute service (another reason) or Nova still lists servers on it; else its
   * compute service disabled with a reason naming its next need, powered off through its driver,
   * and recorded off. A power-off that fails enables the service again. Again on a host off: nothing.
   */
  async putToSleep(hostId: string, nowMs: number, settings: Pick<PowerPlanSettings, 'offAfterIdleMs'>): Promise<PowerOffOutcome> {
    const { host, record, driver } = await this.driverOf(hostId);
    if (record.powerState === 'off') return { state: 'off' };
    if (record.powerState !== 'on') return { state: 'kept', reason: 'its power state is not known' };
    const bootMs = await this.learnedBootOf(record);
    const claim = await this.claimPowerOff(hostId, nowMs, (need) =>
      maySleep({ id: hostId, power: 'on', manage: record.settings.manage, ...need, bootMs }, nowMs, settings) ? undefined : record.settings.manage ? `it is needed from ${when(need.nextNeededMs)}` : 'its power settings say manage: false',
    );
    if ('refused' in claim) return { state: 'kept', reason: claim.refused };
    return this.powerOffClaimed(host, driver, claim.need);
  }

  /**
   * Claims the host for a power-off in one transaction: its row locked against new bookings, its
   * need read, `refuse` asked (a reason to keep it on, or it throws), and `powering_off_at` set.
   */
  private async claimPowerOff(hostId: string, nowMs: number, refuse: (need: HostNeed) => string | undefined): Promise<{ need: HostNeed } | { refused: string }> {
    return inTransaction(this.pool, async (client) => {
      if (!(await lockHostAgainstBookings(client, hostId))) return { refused: 'it is no longer enrolled' };
      const need = (await this.needsOf(client, nowMs, [hostId])).get(hostId) ?? NOT_NEEDED;
      const refused = refuse(need);
      if (refused !== undefined) return { refused };
      await claimPowerOff(client, hostId, Date.now());
      return { need };
    });
  }

  /** The claimed power-off: Nova's checks and disable (when there is a Nova), the driver's power-off, the record; a failure undoes the disable and the claim. */
  private async powerOffClaimed(host: HostRecord, driver: PowerDriver, need: HostNeed, signal?: AbortSignal): Promise<PowerOffOutcome> {
    const nova = this.deps.nova?.();
    let service: ComputeService | undefined;
    try {
      if (nova) {
        const name = computeHostName(host);
        [service] = await nova.listServices({ binary: 'nova-compute', host: name });
        if (service?.status === 'disabled' && !service.disabled_reason?.startsWith(POWERED_OFF_REASON)) return await this.keep(host.id, `an operator disabled its compute service (${service.disabled_reason ?? 'no reason'})`);
        const servers = await nova.listServers({ host: name, all_tenants: true });
        if (servers.length > 0) return await this.keep(host.id, `Nova lists ${servers.length} server(s) on it (${servers.slice(0, 3).map((s) => s.id).join(', ')})`);
        if (service) await nova.updateService(service.id, { status: 'disabled', disabled_reason: `${POWERED_OFF_REASON}, idle until ${need.nextNeededMs === null ? 'no booking' : when(need.nextNeededMs)}` });
      }
      await driver.powerOff(signal);
    } catch (err) {
      // Undone before the error goes on: the host stays on, its service enabled. An undo that fails is noted with the error, never instead of it (the next look's settle enables the service).
      const undo = await Promise.allSettled([releasePowerOff(this.pool, host.id), ...(nova && service ? [enableIfPoweredOff(nova, service.host)] : [])]);
      const undoFailed = undo.flatMap((outcome) => (outcome.status === 'rejected' ? [(outcome.reason as Error).message] : []));
      await this.recordFailure(host.id, err, undoFailed.length ? ` (undoing the power-off's steps failed too: ${undoFailed.join('; ')})` : '');
      throw err;
    }
    await recordPowerState(this.pool, host.id, 'off', Date.now());
    return { state: 'off' };
  }

  private async keep(hostId: string, reason: string): Promise<PowerOffOutcome> {
    await releasePowerOff(this.pool, hostId);
    return { state: 'kept', reason };
  }

  /** Records a driver's failure (a PowerError) on the host: one no retry changes backs the planner off. */
  private async recordFailure(hostId: string, err: unknown, note = ''): Promise<void> {
    if (!(err instanceof PowerError)) return;
    await recordPowerError(this.pool, hostId, `${err.name}: ${err.message}${note}`, Date.now(), err.retryable ? undefined : RETRY_AFTER_FINAL_ERROR).catch(() => undefined);
  }

  /** Wakes a host for the planner through its driver. Again on a host on: nothing. */
  async wake(hostId: string): Promise<WakeResult> {
    const { host, record, driver } = await this.driverOf(hostId);
    if (record.powerState === 'on' && record.poweringOffAtMs === null) return 'already-on';
    return this.wakeWith(host, record, driver);
  }

  /**
   * Wakes the hosts of a lease that starts (issue 48), before its start waits for their boots: each
   * with a power driver that is not recorded on (off, unknown), or whose power-off is under way
   * (waited for first, `pollMs` apart, at most until the planner would count its claim unfinished),
   * is woken through its driver, its wake and boot deadline recorded (untilBooted then waits for
   * it). A lease starting now comes before the planner's look: without this it would go active on a
   * host powered off. Hosts without a driver, and hosts on (a wake already awaited included), are
   * left alone: again, nothing. A driver that fails throws (recorded as the host's power error): the
   * start is tried again. Answers the hosts woken.
   */
  async wakeForStart(hostIds: readonly string[], options: { signal?: AbortSignal; pollMs?: number } = {}): Promise<string[]> {
    const woken: string[] = [];
    for (const hostId of hostIds) {
      let record = await hostPowerOf(this.pool, hostId);
      while (record && record.poweringOffAtMs !== null && Date.now() - record.poweringOffAtMs < this.unfinishedPowerOffMs) {
        await sleep(options.pollMs ?? BOOT_WAIT_POLL_MS, options.signal);
        record = await hostPowerOf(this.pool, hostId);
      }
      if (!record || !asleepForStart(record)) continue;
      const [host] = await listHosts(this.pool, { id: hostId });
      const driver = host && powerDriverFor(host.hypervisor_hostname, record.settings, this.deps.drivers);
      if (!host || !driver) continue;
      if ((await this.wakeWith(host, record, driver, options.signal)) === 'woken') woken.push(hostId);
    }
    return woken;
  }

  /**
   * Of these hosts, those a start would wake (wakeForStart), and by when each would be up if woken
   * now (`nowMs` + its boot time + the resume time-out): what a lease about to start shows while
   * the start wakes them. Only reads.
   */
  async wakesAhead(hostIds: readonly string[], nowMs: number): Promise<Array<{ hostId: string; bootDeadlineMs: number }>> {
    const ahead: Array<{ hostId: string; bootDeadlineMs: number }> = [];
    for (const hostId of hostIds) {
      const record = await hostPowerOf(this.pool, hostId);
      if (record && asleepForStart(record)) ahead.push({ hostId, bootDeadlineMs: nowMs + (await this.learnedBootOf(record)) + (this.deps.resumeTimeoutMs ?? 600_000) });
    }
    return ahead;
  }

  /**
   * Asks the driver for on, unless it says the host is on already (recorded on: no boot to await).
   * A wake asked is recorded with its boot deadline (the wake's time + the host's boot time + the
   * resume time-out), which the planner's settle and the host monitor both read.
   */
  private async wakeWith(host: HostRecord, record: HostPowerRecord, driver: PowerDriver, signal?: AbortSignal): Promise<WakeResult> {
    try {
      const state = await driver.powerState(signal).catch((): PowerState => 'unknown');
      if (state === 'on') {
        await recordReadPowerState(this.pool, host.id, 'on', Date.now());
        return 'already-on';
      }
      await driver.powerOn(signal);
    } catch (err) {
      await this.recordFailure(host.id, err);
      throw err;
    }
    const atMs = Date.now();
    await recordWake(this.pool, host.id, atMs, atMs + (await this.learnedBootOf(record)) + (this.deps.resumeTimeoutMs ?? 600_000));
    return 'woken';
  }

  /** Reads the host's power through its driver and records it (a failure is recorded as the host's power error). */
  async readState(hostId: string): Promise<PowerState> {
    const { driver } = await this.driverOf(hostId);
    let state: PowerState;
    try {
      state = await driver.powerState();
    } catch (err) {
      await this.recordFailure(hostId, err);
      throw err;
    }
    await recordReadPowerState(this.pool, hostId, state, Date.now());
    return state;
  }

  /**
   * The planner's look at the wakes awaited and the awake hosts, in one listing of Nova's compute
   * services: a woken host whose service is up has its boot recorded (its boot time is learned from
   * the last ones) and is no longer awaited; every host recorded on, with no power-off under way,
   * whose service is up and disabled with the planner's reason, is enabled again (woken by the
   * planner, by hand, or late). Never one an operator disabled. `busy`: hosts with a power action in
   * flight, left for the next look. Without Nova: every wake is up at once, nothing learned.
   */
  async settleWakes(nowMs: number, busy: readonly string[] = []): Promise<WakesSettled> {
    const settled: WakesSettled = { booting: [], givenUp: [], enabled: [] };
    const wakes = (await awaitedWakes(this.pool)).filter((wake) => !busy.includes(wake.hostId));
    if (!this.deps.nova) {
      for (const wake of wakes) await recordWakeSettled(this.pool, wake.hostId);
      return settled;
    }
    const nova = this.deps.nova();
    const services = await nova.listServices({ binary: 'nova-compute' });
    const hosts = new Map((await listHosts(this.pool)).map((host) => [host.id, host]));
    const serviceOf = (hostId: string) => {
      const host = hosts.get(hostId);
      return host && services.find((s) => s.host === computeHostName(host));
    };
    for (const wake of wakes) {
      if (isUp(serviceOf(wake.hostId))) {
        await recordBoot(this.pool, wake.hostId, wake.requestedAtMs, nowMs, this.bootSamples);
        await recordWakeSettled(this.pool, wake.hostId);
        // Up in Nova is on, whatever a read of its BMC said meanwhile.
        await recordReadPowerState(this.pool, wake.hostId, 'on', nowMs);
      } else (nowMs > wake.bootDeadlineMs ? settled.givenUp : settled.booting).push(wake.hostId);
    }
    for (const hostId of await awakeHostIds(this.pool)) {
      const service = serviceOf(hostId);
      if (busy.includes(hostId) || !isUp(service) || !disabledByPlanner(service)) continue;
      await nova.updateService(service.id, { status: 'enabled' });
      settled.enabled.push(hostId);
    }
    return settled;
  }

  /** One host's wake as settleWakes finds it (the planner's look of before 2026-11-28, kept for its replays: POWER_PLANNER_LANES). */
  async settleWake(hostId: string, nowMs: number): Promise<WakeOutcome> {
    const settled = await this.settleWakes(nowMs);
    return settled.booting.includes(hostId) ? 'booting' : settled.givenUp.includes(hostId) ? 'given-up' : 'up';
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
    const [needs, boots] = [await this.needsOf(this.pool, nowMs, ids), await bootDurations(this.pool, ids, this.bootSamples)];
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
   * Wakes the host or puts it to sleep by hand (an admin's), through its driver, as the planner
   * does (a wake awaited until its boot deadline; a power-off claimed under the lock against new
   * bookings). Off is refused (409) while the host is booked now or its next booking starts within
   * its boot time: it could not be up in time.
   */
  async powerByHand(host: HostRecord, action: 'on' | 'off', nowMs: number, signal?: AbortSignal): Promise<HostPowerStatus> {
    const record = await hostPowerOf(this.pool, host.id);
    const driver = record && powerDriverFor(host.hypervisor_hostname, record.settings, this.deps.drivers);
    if (!record || !driver) throw leaseConflict(`host ${host.hypervisor_hostname} has no power driver: set its power settings first (PUT /v1/os-hosts/${host.id} {"power": {"driver": …}})`);
    if (action === 'on') await this.wakeWith(host, record, driver, signal);
    else {
      const bootMs = await this.learnedBootOf(record);
      const claim = await this.claimPowerOff(host.id, nowMs, ({ nextNeededMs }) => {
        if (nextNeededMs === null) return undefined;
        if (nextNeededMs <= nowMs) throw leaseConflict(`host ${host.hypervisor_hostname} is booked now: it cannot be powered off`);
        if (nextNeededMs - nowMs <= bootMs) {
          throw leaseConflict(`host ${host.hypervisor_hostname} is booked from ${when(nextNeededMs)}, within its boot time (${Math.round(bootMs / 1000)} s): it cannot be powered off`);
        }
        return undefined;
      });
      if ('refused' in claim) throw leaseConflict(`host ${host.hypervisor_hostname} cannot be powered off: ${claim.refused}`);
      const outcome = await this.powerOffClaimed(host, driver, claim.need, signal);
      if (outcome.state === 'kept') throw leaseConflict(`host ${host.hypervisor_hostname} is kept on: ${outcome.reason}`);
    }
    return this.status(host, nowMs);
  }
}

/** Whether a lease's start wakes the host: it has a power driver and is not recorded on, or its power-off is under way. */
function asleepForStart(record: HostPowerRecord): boolean {
  return record.settings.driver !== 'none' && (record.powerState !== 'on' || record.poweringOffAtMs !== null);
}

/** How often a start that waits for its hosts' boots looks again. */
const BOOT_WAIT_POLL_MS = 1_000;

/**
 * Of these hosts, those woken whose compute service was not seen up yet, within their boot deadline
 * (the planner's settle, or Nova here, sees them up) and within `waitAtMostMs` of their wake (a
 * start waits no longer: START_BOOT_WAIT_MS).
 */
export async function hostsBooting(pool: Pool, hosts: ReadonlyArray<{ id: string; host: string }>, nowMs: number, nova?: NovaClient, waitAtMostMs = Infinity): Promise<Array<{ host: string; bootDeadlineMs: number; waitUntilMs: number }>> {
  const wakes = (await awaitedWakes(pool, hosts.map((h) => h.id))).filter((wake) => Math.min(wake.bootDeadlineMs, wake.requestedAtMs + waitAtMostMs) > nowMs);
  if (wakes.length === 0) return [];
  const up = nova ? new Set((await nova.listServices({ binary: 'nova-compute' })).filter(isUp).map((s) => s.host)) : new Set<string>();
  return wakes.flatMap((wake) => {
    const host = hosts.find((h) => h.id === wake.hostId)!.host;
    return up.has(host) ? [] : [{ host, bootDeadlineMs: wake.bootDeadlineMs, waitUntilMs: Math.min(wake.bootDeadlineMs, wake.requestedAtMs + waitAtMostMs) }];
  });
}

/** What a lease's start shows while it waits for its hosts' boots (its status_reason); undefined: none is booting. */
export function bootWaitReason(booting: ReadonlyArray<{ host: string; bootDeadlineMs: number }>): string | undefined {
  if (booting.length === 0) return undefined;
  const names = booting.map((b) => b.host).join(', ');
  return `waiting for ${booting.length === 1 ? 'host' : 'hosts'} ${names} to boot (expected up by ${new Date(Math.max(...booting.map((b) => b.bootDeadlineMs))).toISOString()})`;
}

/**
 * Waits while any of the hosts is booting (hostsBooting), each look `BOOT_WAIT_POLL_MS` apart: at
 * most until the latest boot deadline (past it, the host monitor fails a host not up, and healing
 * replaces it), and at most `waitAtMostMs` from each wake (measured from the wake recorded in the
 * database, so that an attempt tried again does not wait afresh). Stops with the attempt
 * (`signal`); `progress` keeps the activity alive.
 */
export async function untilBooted(
  pool: Pool,
  hosts: ReadonlyArray<{ id: string; host: string }>,
  options: { nova?: NovaClient; signal?: AbortSignal; progress?: (details: Record<string, unknown>) => void; waitAtMostMs?: number } = {},
): Promise<void> {
  const booting = () => hostsBooting(pool, hosts, Date.now(), options.nova, options.waitAtMostMs);
  for (let now = await booting(); now.length > 0; now = await booting()) {
    options.progress?.({ waitingForBoot: now.map((b) => b.host) });
    await sleep(Math.max(0, Math.min(BOOT_WAIT_POLL_MS, Math.max(...now.map((b) => b.waitUntilMs)) - Date.now())), options.signal);
  }
}

/** Enables the compute service again if the planner's reason disabled it (never one an operator disabled). */
async function enableIfPoweredOff(nova: NovaClient, serviceHost: string): Promise<void> {
  const [service] = await nova.listServices({ binary: 'nova-compute', host: serviceHost });
  if (service && disabledByPlanner(service)) await nova.updateService(service.id, { status: 'enabled' });
}

/** Whether Nova reports the compute service up (and not forced down). */
function isUp(service: ComputeService | undefined): service is ComputeService {
  return service !== undefined && service.state === 'up' && !service.forced_down;
}

/** Whether the planner disabled the compute service (its reason), which it may enable again; never one an operator disabled. */
function disabledByPlanner(service: ComputeService): boolean {
  return service.status === 'disabled' && (service.disabled_reason?.startsWith(POWERED_OFF_REASON) ?? false);
}

const when = (ms: number | null) => (ms === null ? 'no booking' : new Date(ms).toISOString());

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
    power_error: record?.error ? { message: record.error.message, at: record.error.atMs, failures: record.error.count, next_try: record.error.retryAtMs } : null,
  };
}
