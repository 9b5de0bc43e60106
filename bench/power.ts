/**
 * `npm run bench:power` (issue 48): a simulated month on 100 hosts of two capability sets with a mix
 * of leases (sizes, lead times, lengths, idle gaps), run through the planner's own rules and the
 * host calendar's own choices on a simulated clock: no servers, no Temporal.
 *
 * - Admission is the host calendar's: free hosts (freeHosts), Blazar's preference (preferenceOrder)
 *   with awake hosts first (awakeFirst over the hosts not on, as sleepingHostIds reads them), one
 *   request of `size` hosts of the lease's set (assignHosts). A lease that does not fit is refused.
 * - The planner's look is planPower over hostNeeds (the rows nextHostNeeds reads: one per booking
 *   not ended) and learnedBootMs (the p95 of a host's last boots, the default until five are known);
 *   it looks every simulated minute (the workflow looks at each admission, wake due and booking end).
 * - A boot takes its host's usual time give or take a little, and now and then much longer (a tail
 *   beyond the learned p95); the boot is recorded when the host is up, as settleWake does.
 * - A lease starts when every host of it is up (the start waits for a boot).
 *
 * Runs with power management off (the reference: every host always on), then on with the awake
 * reserve at each of RESERVES. Reports host-hours powered off, start lag (p50/p99, over all leases and
 * over those whose hosts' boot times were learned), the leases that waited for a boot, and woken
 * late: leases admitted at least their hosts' boot time plus the margin ahead whose host was still
 * not up at the start. Writes bench/results/power.json.
 */
import fs from 'node:fs';
import path from 'node:path';
import { assignHosts, awakeFirst, freeHosts, preferenceOrder, type Blocked, type CalendarSnapshot } from '../src/domain/host-calendar';
import { hostNeeds, learnedBootMs, planPower, type HostNeedRow, type PlannedHost, type PowerPlanSettings } from '../src/domain/power-plan';
import { REPO_ROOT } from '../src/paths';
import { summary } from './common';
import { randomFrom } from './random';

const HOSTS = 100;
/** The capability sets: most hosts plain compute, a fifth with GPUs; leases ask for them in about that share. */
const SETS: Array<{ name: string; hosts: number; share: number }> = [
  { name: 'compute', hosts: 80, share: 0.85 },
  { name: 'gpu', hosts: 20, share: 0.15 },
];
const DAYS = 30;
const STEP_MS = 60_000;
const MIN = 60_000;
const HOUR = 3_600_000;
const END_MS = DAYS * 24 * HOUR;
/** Deployed defaults: LK_POWER_OFF_AFTER_IDLE=2h, LK_POWER_WAKE_MARGIN_SECONDS=300, LK_POWER_RECHECK_SECONDS=300. */
const SETTINGS: PowerPlanSettings = { offAfterIdleMs: 2 * HOUR, marginMs: 300_000, recheckMs: 300_000 };
/** LK_POWER_BOOT_SECONDS and LK_POWER_BOOT_SAMPLES as deployed. */
const BOOT = { defaultBootMs: 600_000, minSamples: 5 };
const RESERVES = [0, 1, 2, 4, 6, 8, 10];
const WIDER_MARGIN_RESERVES = [8, 10, 12];
/** The reserve recommended in docs/performance.md: the smallest meeting the bound in this month, with the 900 s margin. */
const RECOMMENDED_RESERVE = 10;
/** The share of boots in the tail, and how much longer than the host's usual time they take. */
const BOOT_TAIL = { share: 0.04, fromFactor: 1.3, toFactor: 2.5 };

const weighted = <T>(random: () => number, choices: Array<[number, T]>): T => {
  let r = random() * choices.reduce((sum, [w]) => sum + w, 0);
  for (const [w, value] of choices) if ((r -= w) < 0) return value;
  return choices[choices.length - 1][1];
};

interface LeaseRequest { id: number; created: number; start: number; end: number; size: number; set: string }

/** The month's lease requests, the same for every run: about 6 an hour in weekdays' working hours, 1.5 otherwise. */
function requests(): LeaseRequest[] {
  const out: LeaseRequest[] = [];
  const arrivals = randomFrom(11);
  const shape = randomFrom(48);
  for (let t = 0, id = 1; t < END_MS; t += STEP_MS) {
    const hourOfDay = (t / HOUR) % 24;
    const weekday = Math.floor(t / (24 * HOUR)) % 7 < 5;
    const rate = (weekday && hourOfDay >= 8 && hourOfDay < 18 ? 6 : 1.5) / 60;
    if (arrivals() >= rate) continue;
    const lead = weighted<number>(shape, [[30, 0], [20, 10 * MIN], [25, 2 * HOUR], [15, 24 * HOUR], [10, 7 * 24 * HOUR]]);
    const length = weighted<number>(shape, [[40, 2 * HOUR], [30, 8 * HOUR], [20, 24 * HOUR], [10, 4 * 24 * HOUR]]);
    const size = weighted<number>(shape, [[50, 1], [25, 2], [15, 4], [10, 8]]);
    const set = weighted(shape, SETS.map((s): [number, string] => [s.share, s.name]));
    out.push({ id: id++, created: t, start: t + lead, end: t + lead + length, size, set });
  }
  return out;
}
const REQUESTS = requests();

interface Host {
  id: string;
  set: string;
  /** Its usual boot (4–11 minutes). */
  usualBootMs: number;
  power: 'on' | 'off';
  /** When its current boot ends (≤ now: up). */
  upAt: number;
  /** When the planner woke it (its boot's start), until the boot is recorded. */
  wokenAt: number | null;
  /** Its last boots, as host_boots keeps them. */
  boots: number[];
  offMs: number;
}
interface Lease extends LeaseRequest { hosts: Host[]; shortNotice: boolean; bootsKnown: boolean }

function simulate(managed: boolean, awakeReserve: number, marginMs = SETTINGS.marginMs) {
  const settings: PowerPlanSettings = { ...SETTINGS, marginMs, awakeReserve };
  const hosts: Host[] = [];
  for (const set of SETS) {
    for (let i = 0; i < set.hosts; i++) {
      const id = String(hosts.length + 1);
      hosts.push({ id, set: set.name, usualBootMs: (4 + Math.floor(randomFrom(hosts.length + 1)() * 8)) * MIN, power: 'on', upAt: 0, wokenAt: null, boots: [], offMs: 0 });
    }
  }
  const byId = new Map(hosts.map((h) => [h.id, h]));
  const bootDraw = randomFrom(7);
  /** One boot's duration: the host's usual time ±10 %, or in the tail. */
  const bootDuration = (h: Host) =>
    bootDraw() < BOOT_TAIL.share
      ? Math.round(h.usualBootMs * (BOOT_TAIL.fromFactor + bootDraw() * (BOOT_TAIL.toFactor - BOOT_TAIL.fromFactor)))
      : Math.round(h.usualBootMs * (0.9 + 0.2 * bootDraw()));
  const knownBootMs = (h: Host) => learnedBootMs(h.boots, BOOT);
  const bookings: Array<Blocked & { lease: number }> = [];
  const waiting: Lease[] = [];
  let admitted = 0;
  let refused = 0;
  let wakes = 0;
  const started: Array<{ lagMs: number; lease: Lease }> = [];

  const planned = (now: number): PlannedHost[] => {
    const rows: HostNeedRow[] = bookings.filter((b) => b.end > now).map((b) => ({ host_id: b.hostId, start_ms: b.start, busy_until_ms: b.start <= now ? b.end : null }));
    const needs = hostNeeds(rows);
    return hosts.map((h) => ({ id: h.id, power: h.power, manage: true, nextNeededMs: null, busyUntilMs: null, ...needs.get(h.id), bootMs: knownBootMs(h), reserveClass: h.set }));
  };
  const look = (now: number) => {
    if (!managed) return;
    const plan = planPower(planned(now), now, settings);
    for (const id of plan.powerOff) {
      const h = byId.get(id)!;
      // A reserve wake no longer needed may be put back to sleep while it boots: that boot is not recorded.
      h.power = 'off';
      h.wokenAt = null;
    }
    for (const id of plan.powerOn) {
      const h = byId.get(id)!;
      h.power = 'on';
      h.wokenAt = now;
      h.upAt = now + bootDuration(h);
      wakes++;
    }
  };
  let nextRequest = 0;
  for (let now = 0; now < END_MS; now += STEP_MS) {
    // Boots that ended are recorded (the last BOOT.minSamples kept), as the planner's look at a woken host does.
    for (const h of hosts) {
      if (h.power === 'on' && h.wokenAt !== null && h.upAt <= now) {
        h.boots = [...h.boots, h.upAt - h.wokenAt].slice(-BOOT.minSamples);
        h.wokenAt = null;
      }
    }
    while (nextRequest < REQUESTS.length && REQUESTS[nextRequest].created <= now) {
      const request = REQUESTS[nextRequest++];
      const calendar: CalendarSnapshot = { hostIds: hosts.map((h) => h.id), blocked: bookings.filter((b) => b.end > now), cleaningMs: 0 };
      const asleep = new Set(hosts.filter((h) => h.power !== 'on').map((h) => h.id));
      const assigned = assignHosts(
        [{ reservationId: String(request.id), min: request.size, max: request.size, matches: (id) => byId.get(id)!.set === request.set }],
        freeHosts(calendar, request.start, request.end),
        awakeFirst(preferenceOrder(calendar, now), asleep),
      );
      if (!assigned) {
        refused++;
        continue;
      }
      const chosen = assigned.get(String(request.id))!.map((id) => byId.get(id)!);
      const lease: Lease = {
        ...request,
        hosts: chosen,
        // Short notice: a host asleep with less than its boot time and the margin to go, or one still booting
        // (a reserve's refill: the calendar counts it awake) expected up less than the margin before the start.
        shortNotice: chosen.some((h) =>
          h.power !== 'on' ? request.start - now < knownBootMs(h) + marginMs : h.wokenAt !== null && h.wokenAt + knownBootMs(h) + marginMs > request.start,
        ),
        bootsKnown: chosen.every((h) => h.boots.length >= BOOT.minSamples),
      };
      for (const h of chosen) bookings.push({ hostId: h.id, start: request.start, end: request.end, lease: request.id });
      admitted++;
      waiting.push(lease);
    }
    look(now);
    for (const lease of [...waiting]) {
      if (lease.start > now) continue;
      const upAt = Math.max(...lease.hosts.map((h) => (h.power === 'on' ? h.upAt : Infinity)));
      if (upAt > now) continue; // its start waits for its hosts' boot
      waiting.splice(waiting.indexOf(lease), 1);
      started.push({ lagMs: Math.max(0, upAt - lease.start), lease });
    }
    for (const h of hosts) if (h.power === 'off') h.offMs += STEP_MS;
    for (let i = bookings.length - 1; i >= 0; i--) if (bookings[i].end <= now) bookings.splice(i, 1);
  }
  const offHours = hosts.reduce((sum, h) => sum + h.offMs, 0) / HOUR;
  const waited = started.filter((s) => s.lagMs > 0);
  return {
    awakeReserve: managed ? awakeReserve : null,
    marginMs,
    leases: REQUESTS.length,
    admitted,
    refused,
    started: started.length,
    hostHours: HOSTS * DAYS * 24,
    hostHoursPoweredOff: Math.round(offHours),
    shareOfHostHoursOff: Math.round((offHours / (HOSTS * DAYS * 24)) * 1000) / 1000,
    wakes,
    startLagMs: summary(started.map((s) => s.lagMs)),
    startLagBootsKnownMs: summary(started.filter((s) => s.lease.bootsKnown).map((s) => s.lagMs)),
    waitedForBoot: { ...summary(waited.map((s) => s.lagMs)), shortNotice: waited.filter((s) => s.lease.shortNotice).length },
    wokenLate: waited.filter((s) => !s.lease.shortNotice).length,
    wokenLateBootsKnown: waited.filter((s) => !s.lease.shortNotice && s.lease.bootsKnown).length,
  };
}

const unmanaged = simulate(false, 0);
const managed = RESERVES.map((reserve) => simulate(true, reserve));
/** Larger reserves with a margin covering most of the boots' tail (LK_POWER_WAKE_MARGIN_SECONDS=900). */
const widerMargin = WIDER_MARGIN_RESERVES.map((reserve) => simulate(true, reserve, 900_000));
const result = {
  benchmark: 'power',
  date: new Date().toISOString(),
  simulated: {
    hosts: HOSTS,
    sets: SETS,
    days: DAYS,
    stepMs: STEP_MS,
    settings: SETTINGS,
    boot: { ...BOOT, usualMinutes: '4–11 per host', draw: `usual ±10 %, ${BOOT_TAIL.share * 100} % of boots ${BOOT_TAIL.fromFactor}–${BOOT_TAIL.toFactor}× usual` },
    recommendedReserve: RECOMMENDED_RESERVE,
  },
  unmanaged,
  managed,
  widerMargin,
};
const out = path.join(REPO_ROOT, 'bench', 'results', 'power.json');
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
console.log(JSON.stringify(result, null, 2));
console.log(`results: ${path.relative(REPO_ROOT, out)}`);
