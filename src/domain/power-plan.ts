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
 * - Next look: the earliest instant a rule's answer changes for some host (a wake falling due, a
 *   booking ending), and at most `recheckMs` from now (bookings made meanwhile).
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
}

export interface PowerPlanSettings {
  /** LK_POWER_OFF_AFTER_IDLE: a host sleeps only when its next booking is further than this plus its boot time. */
  offAfterIdleMs: number;
  /** Woken this much before its boot time ahead of a booking (≤ offAfterIdleMs). */
  marginMs: number;
  /** The longest the planner waits before looking again. */
  recheckMs: number;
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

/** Whether a host on may be powered off now: managed, not booked, its next booking far enough away. */
export function maySleep(host: PlannedHost, nowMs: number, settings: Pick<PowerPlanSettings, 'offAfterIdleMs'>): boolean {
  if (!host.manage || bookedNow(host, nowMs)) return false;
  return host.nextNeededMs === null || host.nextNeededMs - nowMs > settings.offAfterIdleMs + host.bootMs;
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
  return { powerOff, powerOn, nextLookMs };
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
