/**
 * What the host monitor concludes from what it sees of each enrolled host. Pure and deterministic:
 * the monitor workflow runs it on every look. A host with a problem (its compute service down,
 * disabled or forced down, its hypervisor gone) is first only suspect; it is failed once the
 * problem has lasted the grace period, so that a host that flaps (down, up again within the grace)
 * never is. A failed host recovers as soon as it is seen healthy.
 */

export type HostHealthState = 'up' | 'failed';

/** One enrolled host as one look saw it. */
export interface HostObservation {
  hostId: string;
  /** Nova's compute host name, for people reading the monitor. */
  host: string;
  /** What is wrong with it; absent: healthy. */
  problem?: string;
  /** What was last recorded (the hosts table): a monitor that starts afresh carries on from it. */
  recorded: HostHealthState;
}

export interface HostHealth {
  host: string;
  state: HostHealthState;
  /** Since when (epoch ms) it is in this state; undefined for a host only ever seen up. */
  sinceMs?: number;
  reason?: string;
  /** While a problem lasts less than the grace period: since when, and what. */
  suspectSinceMs?: number;
  suspectReason?: string;
}

/** By host id: a plain object, so that it is carried as it is when the monitor continues as new. */
export type HostHealthMap = Record<string, HostHealth>;

export interface HostStateChange {
  hostId: string;
  host: string;
  state: HostHealthState;
  sinceMs: number;
  reason: string;
}

export const RECOVERED_REASON = 'compute service up and enabled again';

/**
 * The hosts' health after one look at `nowMs`, and the changes to record and act on. Hosts no
 * longer enrolled are forgotten.
 */
export function assessHosts(previous: HostHealthMap, observed: HostObservation[], nowMs: number, graceMs: number): { health: HostHealthMap; changes: HostStateChange[] } {
  const health: HostHealthMap = {};
  const changes: HostStateChange[] = [];
  for (const seen of observed) {
    const before: HostHealth = previous[seen.hostId] ?? { host: seen.host, state: seen.recorded };
    if (seen.problem === undefined) {
      if (before.state === 'failed') {
        health[seen.hostId] = { host: seen.host, state: 'up', sinceMs: nowMs, reason: RECOVERED_REASON };
        changes.push({ hostId: seen.hostId, host: seen.host, state: 'up', sinceMs: nowMs, reason: RECOVERED_REASON });
      } else {
        health[seen.hostId] = { host: seen.host, state: 'up', sinceMs: before.sinceMs, reason: before.reason };
      }
      continue;
    }
    if (before.state === 'failed') {
      health[seen.hostId] = { ...before, host: seen.host, reason: before.reason ?? seen.problem };
      continue;
    }
    const suspectSinceMs = before.suspectSinceMs ?? nowMs;
    if (nowMs - suspectSinceMs >= graceMs) {
      health[seen.hostId] = { host: seen.host, state: 'failed', sinceMs: suspectSinceMs, reason: seen.problem };
      changes.push({ hostId: seen.hostId, host: seen.host, state: 'failed', sinceMs: suspectSinceMs, reason: seen.problem });
    } else {
      health[seen.hostId] = { host: seen.host, state: 'up', sinceMs: before.sinceMs, reason: before.reason, suspectSinceMs, suspectReason: seen.problem };
    }
  }
  return { health, changes };
}

/** The ids of the hosts that are failed now. */
export const failedHostIds = (health: HostHealthMap): string[] => Object.keys(health).filter((id) => health[id].state === 'failed');
