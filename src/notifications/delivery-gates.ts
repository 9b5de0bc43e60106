/**
 * What keeps one project's webhooks from holding up everyone's notices: a cap on a project's
 * deliveries in flight (in this worker; the excess is told to wait, and its workflow waits on a
 * timer, holding no activity slot), and each webhook's circuit breaker (src/db/webhooks.ts keeps
 * its state, so every worker and the API see it).
 */

/** A delivery that did not go now: its workflow waits `heldForMs`, then asks again. */
export interface DeliveryHeld {
  heldForMs: number;
  /** `busy`: the project has its cap in flight; `breaker`: the webhook is held back after failing to answer. */
  reason: 'busy' | 'breaker';
}

/** The shortest wait of a delivery whose project is at its cap; its workflow backs off from there. */
export const BUSY_WAIT_MS = 1_000;
/** The longest hold a breaker imposes, however often its probe failed. */
export const MAX_BREAKER_COOLDOWN_MS = 3_600_000;

/**
 * Each project's webhook deliveries in flight in this process, at most `limit` at once. A delivery
 * turned away is told to wait about as long as the oldest of its project's has run so far (at least
 * BUSY_WAIT_MS, at most `longestMs`, the longest a delivery lasts): short behind a quick receiver,
 * long behind one that never answers, so that the waiting ones do not ask again and again meanwhile.
 */
export class ProjectDeliveryCap {
  /** Per project, when each delivery in flight began (ms). */
  private readonly inFlight = new Map<string, number[]>();

  constructor(
    readonly limit: number,
    private readonly longestMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** Takes one of the project's places: its release; or, when none is free, how long to wait before asking again. */
  enter(projectId: string): { leave: () => void } | { waitMs: number } {
    const starts = this.inFlight.get(projectId) ?? [];
    const now = this.now();
    if (starts.length >= this.limit) return { waitMs: Math.min(this.longestMs, Math.max(BUSY_WAIT_MS, now - Math.min(...starts))) };
    starts.push(now);
    this.inFlight.set(projectId, starts);
    let left = false;
    return {
      leave: () => {
        if (left) return;
        left = true;
        starts.splice(starts.indexOf(now), 1);
        if (starts.length === 0 && this.inFlight.get(projectId) === starts) this.inFlight.delete(projectId);
      },
    };
  }

  /** The project's deliveries in flight now. */
  count(projectId: string): number {
    return this.inFlight.get(projectId)?.length ?? 0;
  }
}
