/**
 * `npm run bench:power` (issue 48): a simulated month on 100 hosts with a mix of leases (sizes,
 * lead times, lengths, idle gaps), run through the planner's rules alone (planPower, pure) on a
 * simulated clock: no servers, no Temporal. Admission takes free hosts awake first (the host
 * calendar's order, awakeFirst), the planner looks every simulated minute and at each admission
 * (the API's signal), a wake brings the host up after its boot (drawn at most its known boot time,
 * the p95 the planner uses). Reports host-hours powered off, woken-late leases (a host not up at
 * the start although the lease was admitted at least its boot time and margin ahead: must be 0),
 * and the waits of short-notice leases that had to take a sleeping host (no awake one free), with
 * power management off as the reference (no host ever off, no wait). Writes bench/results/power.json.
 */
import fs from 'node:fs';
import path from 'node:path';
import { awakeFirst } from '../src/domain/host-calendar';
import { planPower, type PlannedHost, type PowerPlanSettings } from '../src/domain/power-plan';
import { REPO_ROOT } from '../src/paths';
import { summary } from './common';

const HOSTS = 100;
const DAYS = 30;
const STEP_MS = 60_000;
const HOUR = 3_600_000;
const SETTINGS: PowerPlanSettings = { offAfterIdleMs: 2 * HOUR, marginMs: 300_000, recheckMs: 300_000 };

/** A seeded generator (mulberry32): the same month every run. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}
const rand = random(48);
const pick = <T>(weighted: Array<[number, T]>): T => {
  let r = rand() * weighted.reduce((sum, [w]) => sum + w, 0);
  for (const [w, value] of weighted) if ((r -= w) < 0) return value;
  return weighted[weighted.length - 1][1];
};

interface Booking { start: number; end: number; lease: number }
interface Host { id: string; bootMs: number; power: 'on' | 'off'; upAt: number; bookings: Booking[]; offMs: number }
interface Lease { id: number; created: number; start: number; end: number; size: number; hosts: Host[]; shortNotice: boolean }

const END_MS = DAYS * 24 * HOUR;

/** The month's lease requests, the same for both runs: about 6 an hour in weekdays’ working hours, 1.5 otherwise. */
function requests(): Array<Omit<Lease, 'hosts' | 'shortNotice'>> {
  const out: Array<Omit<Lease, 'hosts' | 'shortNotice'>> = [];
  const arrivals = random(11);
  for (let t = 0, id = 1; t < END_MS; t += STEP_MS) {
    const hourOfDay = (t / HOUR) % 24;
    const weekday = Math.floor(t / (24 * HOUR)) % 7 < 5;
    const rate = (weekday && hourOfDay >= 8 && hourOfDay < 18 ? 6 : 1.5) / 60;
    if (arrivals() >= rate) continue;
    const lead = pick<number>([[30, 0], [20, 10 * 60_000], [25, 2 * HOUR], [15, 24 * HOUR], [10, 7 * 24 * HOUR]]);
    const length = pick<number>([[40, 2 * HOUR], [30, 8 * HOUR], [20, 24 * HOUR], [10, 4 * 24 * HOUR]]);
    const size = pick<number>([[50, 1], [25, 2], [15, 4], [10, 8]]);
    out.push({ id: id++, created: t, start: t + lead, end: t + lead + length, size });
  }
  return out;
}
const REQUESTS = requests();

function simulate(managed: boolean) {
  const hosts: Host[] = Array.from({ length: HOSTS }, (_, i) => ({ id: String(i + 1), bootMs: (4 + Math.floor(random(i + 1)() * 8)) * 60_000, power: 'on', upAt: 0, bookings: [], offMs: 0 }));
  const actualBoot = random(7);
  const leases: Lease[] = REQUESTS.map((r) => ({ ...r, hosts: [], shortNotice: false }));
  const endMs = END_MS;
  const waiting: Lease[] = [];
  let admitted = 0;
  let refused = 0;
  const lateMs: number[] = [];
  let wokenLate = 0;
  const shortNoticeWaits: number[] = [];
  let nextLease = 0;
  const planned = (now: number): PlannedHost[] =>
    hosts.map((h) => {
      const open = h.bookings.filter((b) => b.end > now);
      const nextNeededMs = open.length ? Math.min(...open.map((b) => b.start)) : null;
      const current = open.filter((b) => b.start <= now);
      return { id: h.id, power: h.power, manage: true, nextNeededMs, busyUntilMs: current.length ? Math.max(...current.map((b) => b.end)) : null, bootMs: h.bootMs };
    });
  const look = (now: number) => {
    if (!managed) return;
    const plan = planPower(planned(now), now, SETTINGS);
    for (const id of plan.powerOff) hosts[Number(id) - 1].power = 'off';
    for (const id of plan.powerOn) {
      const h = hosts[Number(id) - 1];
      h.power = 'on';
      h.upAt = now + Math.round(h.bootMs * (0.7 + 0.3 * actualBoot()));
    }
  };
  for (let now = 0; now < endMs; now += STEP_MS) {
    while (nextLease < leases.length && leases[nextLease].created <= now) {
      const lease = leases[nextLease++];
      const free = hosts.filter((h) => h.bookings.every((b) => b.end <= lease.start || b.start >= lease.end));
      if (free.length < lease.size) {
        refused++;
        continue;
      }
      // Blazar's order (idle from now on first, by id), then awake first.
      const idle = free.filter((h) => h.bookings.every((b) => b.end <= now));
      const order = [...idle, ...free.filter((h) => !idle.includes(h))].map((h) => h.id);
      const chosen = awakeFirst(order, new Set(hosts.filter((h) => h.power !== 'on').map((h) => h.id))).slice(0, lease.size);
      lease.hosts = chosen.map((id) => hosts[Number(id) - 1]);
      lease.shortNotice = lease.hosts.some((h) => h.power !== 'on' && lease.start - now < h.bootMs + SETTINGS.marginMs);
      for (const h of lease.hosts) h.bookings.push({ start: lease.start, end: lease.end, lease: lease.id });
      admitted++;
      waiting.push(lease);
    }
    // The planner looks every minute (it looks at least at each wake due, each booking's end and each admission).
    look(now);
    for (const lease of [...waiting]) {
      if (lease.start > now) continue;
      const upAt = Math.max(...lease.hosts.map((h) => (h.power === 'on' ? h.upAt : Infinity)));
      if (upAt > now) continue; // waits for its hosts' boot
      waiting.splice(waiting.indexOf(lease), 1);
      const lag = Math.max(0, upAt - lease.start);
      lateMs.push(lag);
      if (lag > 0 && lease.shortNotice) shortNoticeWaits.push(lag);
      else if (lag > 0) wokenLate++;
    }
    for (const h of hosts) if (h.power === 'off') h.offMs += STEP_MS;
    for (const h of hosts) h.bookings = h.bookings.filter((b) => b.end > now);
  }
  const bookedHours = leases.reduce((sum, l) => sum + l.hosts.length * (Math.min(l.end, endMs) - Math.min(l.start, endMs)), 0) / HOUR;
  const offHours = hosts.reduce((sum, h) => sum + h.offMs, 0) / HOUR;
  return {
    leases: leases.length,
    admitted,
    refused,
    hostHours: HOSTS * DAYS * 24,
    bookedHostHours: Math.round(bookedHours),
    hostHoursPoweredOff: Math.round(offHours),
    shareOfHostHoursOff: Math.round((offHours / (HOSTS * DAYS * 24)) * 1000) / 1000,
    wokenLate,
    startLagMs: summary(lateMs),
    shortNoticeWaits: { count: shortNoticeWaits.length, ...summary(shortNoticeWaits) },
  };
}

const result = {
  benchmark: 'power',
  date: new Date().toISOString(),
  simulated: { hosts: HOSTS, days: DAYS, stepMs: STEP_MS, settings: SETTINGS, bootMinutes: '4–11 per host, actual boots 70–100 % of it' },
  managed: simulate(true),
  unmanaged: simulate(false),
};
const out = path.join(REPO_ROOT, 'bench', 'results', 'power.json');
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
console.log(JSON.stringify(result, null, 2));
console.log(`results: ${path.relative(REPO_ROOT, out)}`);
