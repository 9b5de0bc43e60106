/**
 * The power planner's rules (issue 48), pure: given each powered host's next need, its power and
 * its boot time, which hosts to power off now, which to power on now, and when to look again.
 *
 * - Off: a host that is on, managed (`manage`), not booked now, and whose next booking (of any
 *   kind: host, slots, preemptible, lending, maintenance) starts later than the idle threshold
 *   (LK_POWER_OFF_AFTER_IDLE) plus its boot time, or that has none.
 * - On: a host that is not on (off, or unknown) whose next booking starts within its boot time plus
 *   the margin, or that is booked now: woken boot time + margin ahead. Managed or not: a host an
 *   admin put to sleep by hand is woken for its bookings too (`manage: false` only keeps the
 *   planner from powering it off).
 * - The margin is at most the idle threshold (config checks it), so a host just woken is never
 *   put back to sleep before its booking: its gap (≤ boot + margin) is below threshold + boot.
 * - The awake reserve (LK_POWER_AWAKE_RESERVE): per capability set (`reserveClass`: hosts with the
 *   same one serve the same leases), at least `awakeReserve` hosts free for long (not booked now,
 *   next booking beyond the idle threshold plus boot time, or none) stay on, so that a lease for
 *   "now" finds one awake instead of waiting for a boot. Hosts the planner may not power off count
 *   first; of the others it keeps those free the longest (they serve the longest "now" lease), and
 *   powers off the rest. When leases took the reserve's hosts, it wakes sleeping hosts free for long
 *   (again the longest free first) to refill it. It never powers a host off to swap it for another.
 * - Next look: the earliest instant a rule's answer changes for some host (a wake falling due, a
 *   booking ending, a reserve host's booking coming near), and at most `recheckMs` from now
 *   (bookings made meanwhile).
 */
import type { PowerState } from './host-power';

export interface PlannedHost {
  id: string;
  power: PowerState;
  /** Whether the planner may power it off (the host's `manage` setting). */
  manage: boolean;
  /** The start of the earliest booking not yet ended (≤ now: booked now); null: none. */
  nextNeededMs: number | null;
  /** When booked now: the end of that booking (the host may sleep after it); null otherwise. */
  busyUntilMs: number | null;
  /** Its boot time (learnedBootMs). */
  bootMs: number;
  /**
   * Its capability set for the awake reserve (hosts with the same one serve the same leases); null
   * or absent: it takes no new bookings (failed, not reservable) and is no part of the reserve.
   */
  reserveClass?: string | null;
}

export interface PowerPlanSettings {
  /** LK_POWER_OFF_AFTER_IDLE: a host sleeps only when its next booking is further than this plus its boot time. */
  offAfterIdleMs: number;
  /** Woken this much before its boot time ahead of a booking (≤ offAfterIdleMs). */
  marginMs: number;
  /** The longest the planner waits before looking again. */
  recheckMs: number;
  /** LK_POWER_AWAKE_RESERVE: hosts free for long kept awake per capability set; absent (a planner started before it existed): 0. */
  awakeReserve?: number;
}

export interface PowerPlan {
  powerOff: string[];
  powerOn: string[];
  /** When to look again (> now). */
  nextLookMs: number;
}

/** Whether the host is booked at `nowMs`. */
function bookedNow(host: PlannedHost, nowMs: number): boolean {
  return host.nextNeededMs !== null && host.nextNeededMs <= nowMs;
}

/** When the host must be up by being woken: its next booking less its boot time and the margin (null: never needed). */
export function wakeAtMs(host: Pick<PlannedHost, 'nextNeededMs' | 'bootMs'>, settings: Pick<PowerPlanSettings, 'marginMs'>): number | null {
  return host.nextNeededMs === null ? null : host.nextNeededMs - host.bootMs - settings.marginMs;
}

/** Whether the host is free for long: not booked now, its next booking beyond the idle threshold plus its boot time (or none). */
export function freeForLong(host: PlannedHost, nowMs: number, settings: Pick<PowerPlanSettings, 'offAfterIdleMs'>): boolean {
  if (bookedNow(host, nowMs)) return false;
  return host.nextNeededMs === null || host.nextNeededMs - nowMs > settings.offAfterIdleMs + host.bootMs;
}

/** Whether a host on may be powered off now: managed, free for long. */
export function maySleep(host: PlannedHost, nowMs: number, settings: Pick<PowerPlanSettings, 'offAfterIdleMs'>): boolean {
  return host.manage && freeForLong(host, nowMs, settings);
}

/** Hosts the planner may not power off first, then those free the longest (none ahead: null), then by id. */
function reserveOrder(a: PlannedHost, b: PlannedHost): number {
  return (
    Number(a.manage) - Number(b.manage) ||
    (b.nextNeededMs ?? Infinity) - (a.nextNeededMs ?? Infinity) ||
    Number(a.id) - Number(b.id) ||
    a.id.localeCompare(b.id)
  );
}

export function planPower(hosts: readonly PlannedHost[], nowMs: number, settings: PowerPlanSettings): PowerPlan {
  const powerOff: string[] = [];
  const powerOn: string[] = [];
  let nextLookMs = nowMs + settings.recheckMs;
  const lookAt = (atMs: number | null) => {
    if (atMs !== null && atMs > nowMs && atMs < nextLookMs) nextLookMs = atMs;
  };
  for (const host of hosts) {
    const wakeAt = wakeAtMs(host, settings);
    if (host.power === 'on') {
      if (maySleep(host, nowMs, settings)) powerOff.push(host.id);
      // A booking's end may let it sleep; a far booking coming nearer never does (it only stops it).
      else if (bookedNow(host, nowMs)) lookAt(host.busyUntilMs);
    } else if (wakeAt !== null && wakeAt <= nowMs) {
      powerOn.push(host.id);
    } else {
      lookAt(wakeAt);
    }
  }
  const reserve = settings.awakeReserve ?? 0;
  if (reserve > 0) keepReserve(hosts, nowMs, settings, reserve, { powerOff, powerOn, lookAt });
  return { powerOff, powerOn, nextLookMs };
}

/**
 * The awake reserve over the plan's actions: per capability set, the reserve's hosts are taken off
 * `powerOff`, and sleeping hosts free for long are added to `powerOn` for any shortfall. A kept
 * host stops counting when its next booking comes within the threshold plus its boot: looked at then.
 */
function keepReserve(
  hosts: readonly PlannedHost[],
  nowMs: number,
  settings: PowerPlanSettings,
  reserve: number,
  plan: { powerOff: string[]; powerOn: string[]; lookAt: (atMs: number | null) => void },
): void {
  const classes = new Map<string, PlannedHost[]>();
  for (const host of hosts) {
    if (host.reserveClass == null || !freeForLong(host, nowMs, settings)) continue;
    const members = classes.get(host.reserveClass);
    if (members) members.push(host);
    else classes.set(host.reserveClass, [host]);
  }
  const kept = new Set<string>();
  for (const free of classes.values()) {
    const awake = free.filter((host) => host.power === 'on').sort(reserveOrder).slice(0, reserve);
    for (const host of awake) {
      kept.add(host.id);
      if (host.nextNeededMs !== null) plan.lookAt(host.nextNeededMs - settings.offAfterIdleMs - host.bootMs);
    }
    // A host free for long is never due a booking's wake (the margin is at most the threshold): no host is woken twice.
    // Only managed hosts refill it: one with manage: false is woken for its bookings alone (the planner would never put it back to sleep).
    const refill = free.filter((host) => host.power !== 'on' && host.manage).sort(reserveOrder).slice(0, reserve - awake.length);
    for (const host of refill) plan.powerOn.push(host.id);
  }
  const stay = plan.powerOff.filter((id) => !kept.has(id));
  plan.powerOff.splice(0, plan.powerOff.length, ...stay);
}

/** One source's bookings of a host not ended at an instant (host bookings, maintenance windows): the earliest start, and the latest end of those begun. */
export interface HostNeedRow {
  host_id: string;
  start_ms: number;
  /** null: none has begun. */
  busy_until_ms: number | null;
}

/** A host's next need from every source's rows: the earliest start; when booked now, until when. Hosts without rows are not needed. */
export function hostNeeds(rows: readonly HostNeedRow[]): Map<string, Pick<PlannedHost, 'nextNeededMs' | 'busyUntilMs'>> {
  const needs = new Map<string, Pick<PlannedHost, 'nextNeededMs' | 'busyUntilMs'>>();
  for (const row of rows) {
    const known = needs.get(row.host_id);
    const busyUntil = known?.busyUntilMs == null ? row.busy_until_ms : row.busy_until_ms === null ? known.busyUntilMs : Math.max(known.busyUntilMs, row.busy_until_ms);
    needs.set(row.host_id, { nextNeededMs: Math.min(known?.nextNeededMs ?? Infinity, row.start_ms), busyUntilMs: busyUntil });
  }
  return needs;
}

/**
 * A host's boot time: the 95th percentile (nearest rank) of its last boots once there are at least
 * `minSamples` of them, the default until then.
 */
export function learnedBootMs(bootsMs: readonly number[], settings: { defaultBootMs: number; minSamples: number }): number {
  if (bootsMs.length === 0 || bootsMs.length < settings.minSamples) return settings.defaultBootMs;
  const sorted = [...bootsMs].sort((a, b) => a - b);
  return sorted[Math.ceil(0.95 * sorted.length) - 1];
}
