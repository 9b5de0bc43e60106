/**
 * bench:preemptible's simulated week (issue 43), the parts without a database: the regular
 * arrivals and the preemptible backlog it draws (seeded), and how a cut's warning is judged.
 */
import { pick } from './random';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;

/** Regular lease sizes (hosts), each as likely as it appears: 1 × 4, 2 × 3, 4 × 2, 8 × 1 (2.6 hosts on average). */
export const REGULAR_SIZES = [1, 1, 1, 1, 2, 2, 2, 4, 4, 8] as const;
/** Durations are whole hours from 1 to 24 (12.5 h on average). */
const MEAN_REGULAR_HOST_HOURS = 2.6 * 12.5;
/** A tenth of the regular leases come with a lead under a quarter hour (under the default warning of 10 min for most); the rest 15 min to 48 h. */
const SHORT_LEAD_SHARE = 0.1;

export interface RegularArrival {
  /** When it is asked for (the admission's decision time), ms. */
  atMs: number;
  hosts: number;
  leadMs: number;
  durationMs: number;
}

/** Poisson arrivals per hour that book `utilisation` of `hosts` on average (before refusals). */
export function arrivalsPerHour(hosts: number, utilisation: number): number {
  return (utilisation * hosts) / MEAN_REGULAR_HOST_HOURS;
}

/**
 * Regular leases arriving as a Poisson process of `perHour` over [fromMs, toMs), each a size from
 * REGULAR_SIZES, 1–24 h, and a lead rounded to the minute (0–15 min for a tenth, 15 min–48 h for
 * the rest). Bounded: at most `limit` arrivals.
 */
export function regularArrivals(random: () => number, perHour: number, fromMs: number, toMs: number, limit = 100_000): RegularArrival[] {
  const out: RegularArrival[] = [];
  let at = fromMs;
  while (out.length < limit) {
    at += Math.round((-Math.log(1 - random()) / perHour) * HOUR);
    if (at >= toMs) break;
    const hosts = pick(random, REGULAR_SIZES);
    const durationMs = (1 + Math.floor(random() * 24)) * HOUR;
    const leadMs = random() < SHORT_LEAD_SHARE ? Math.floor(random() * 15) * MINUTE : (15 + Math.floor(random() * (48 * 60 - 15))) * MINUTE;
    out.push({ atMs: at, hosts, leadMs, durationMs });
  }
  return out;
}

export interface PreemptibleAsk {
  hosts: number;
  durationMs: number;
}

/** The next preemptible ask of the backlog: 1–4 hosts, 2–12 whole hours. */
export function preemptibleAsk(random: () => number): PreemptibleAsk {
  return { hosts: 1 + Math.floor(random() * 4), durationMs: (2 + Math.floor(random() * 11)) * HOUR };
}

export interface Cut {
  /** The preempted lease's new end − when the regular lease that cut it was admitted. */
  warningMs: number;
  /** The regular lease's lead: its start − its admission. */
  regularLeadMs: number;
}

/**
 * Cuts against the configured warning: met, or short; a short one is explained when the regular
 * lease's own lead was shorter than the warning (its start allowed no more), and a defect otherwise.
 */
export function judgeWarnings(cuts: Cut[], warningMs: number): { met: number; short: number; shortExplained: number; shortUnexplained: number; shortestMs: number | null } {
  const short = cuts.filter((cut) => cut.warningMs < warningMs);
  const explained = short.filter((cut) => cut.regularLeadMs < warningMs).length;
  return {
    met: cuts.length - short.length,
    short: short.length,
    shortExplained: explained,
    shortUnexplained: short.length - explained,
    shortestMs: cuts.length ? Math.min(...cuts.map((cut) => cut.warningMs)) : null,
  };
}
