/**
 * `npm run bench:preemptible` (issue 43), in two parts (LK_BENCH_PREEMPT_PARTS):
 *
 * `week`: a simulated week on LK_BENCH_HOSTS hosts (100) against the real calendar and PostgreSQL,
 * no workflows. Regular leases arrive at random (Poisson, a rate that would book 60 % of the
 * hosts; sizes 1–8, 1–24 h, leads 0–48 h) from two days before the week until two days after;
 * every 15 simulated minutes of the week a backlog of preemptible asks (1–4 hosts, 2–12 h) is
 * admitted into whatever is free from then on. The same arrivals run twice, without the backlog
 * and with it, each booked as the API's create path books (bookWithin, preempt: true). Pool
 * utilisation over the week both ways, regular refusals both ways (they must be equal), the cuts
 * and each cut's warning (its new end − the admission that cut it) against
 * LK_PREEMPT_WARNING_MINUTES, preemptible host-hours delivered against asked.
 * Simulated time: the week lies in 2099, so the calendar (which asks the clock, and PostgreSQL's
 * now(), what has begun) sees every booking as not begun. Admission is in order of simulated time,
 * one at a time, so what each decision sees is what had been decided before it; only the
 * calendar's preference among preemptible hosts (those not begun before those running) cannot
 * tell them apart: it takes them by host id.
 *
 * `start-lag`: LK_BENCH_LEASES one-host regular leases (200) starting within one minute on the
 * real Temporal (dev server) with the worker as its own process, the API and the outbox sweeps in
 * this one, on hosts that are all free, then again on hosts that running preemptible leases all
 * hold (each regular admission cuts one), every lead at least the warning, set to 1 minute here
 * so that it runs in minutes. Start lag p50/p99 both ways, and each cut's warning as delivered
 * (its end − when its workflow was told).
 *
 * Writes bench/results/preemptible.json.
 */
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import pino from 'pino';
import type { Pool } from '../src/db/pool';
import { isLeaseConflict, type Lease } from '../src/domain/lease';
import { loadConfig } from '../src/config';
import { LeaseOutbox } from '../src/outbox';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { HostCalendar } from '../src/resources/physical-host/calendar';
import { bookInTransaction } from '../src/resources/shared/booking';
import { blazarHostReservation, pendingReservation, reservationContext } from '../dev-stack/fixtures/builders';
import { doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, inSeconds, startTestStack, type TestStack } from '../dev-stack/stack';
import { startWorkerProcess } from '../dev-stack/worker-process';
import type { ManagedProcess } from '../dev-stack/processes';
import { runBenchmark, stopOnExit, summary } from './common';
import { randomFrom } from './random';
import { arrivalsPerHour, judgeWarnings, preemptibleAsk, regularArrivals, type Cut, type PreemptibleAsk, type RegularArrival } from './preemptible-week';

const HOSTS = Number(process.env.LK_BENCH_HOSTS ?? 100);
const DAYS = Number(process.env.LK_BENCH_DAYS ?? 7);
const SEED = Number(process.env.LK_BENCH_SEED ?? 43);
const LEASES = Number(process.env.LK_BENCH_LEASES ?? 200);
const PARTS = (process.env.LK_BENCH_PREEMPT_PARTS ?? 'week,start-lag').split(',');

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
/** A Monday far ahead: nothing in the simulated week has begun by the database's now(). */
const WEEK_START = Date.UTC(2099, 0, 5);
const REGULAR_UTILISATION = 0.6;
/** Regular arrivals begin this long before the week (its first days start full) and go on this long after it (its last preemptible leases meet the same stream). */
const MARGIN_MS = 2 * DAY;
const STEP_MS = 15 * MINUTE;
/** Preemptible asks waiting at each step; a step stops after this many refusals (what is left waits for the next step). */
const BACKLOG = 32;
const REFUSALS_PER_STEP = 4;
/** The start-lag part's warning, so that a lead of at least the warning keeps it to minutes. */
const FAST_WARNING_MINUTES = 1;
const SPREAD_S = 60;
/** Longer than the spread: every regular lease of a wave overlaps every other, so each needs a host of its own (and, with preemption, cuts one). */
const DURATION_S = SPREAD_S + 30;
const CONCURRENCY = 10;

runBenchmark('preemptible', async () => {
  for (const [name, value, min, max] of [['LK_BENCH_HOSTS', HOSTS, 8, 10_000], ['LK_BENCH_DAYS', DAYS, 1, 28], ['LK_BENCH_SEED', SEED, 0, 2 ** 31], ['LK_BENCH_LEASES', LEASES, 1, 2_000]] as const) {
    if (!Number.isInteger(value) || value < min || value > max) throw new Error(`${name} must be an integer ${min}..${max}`);
  }
  const unknown = PARTS.filter((part) => part !== 'week' && part !== 'start-lag');
  if (unknown.length > 0 || PARTS.length === 0) throw new Error(`LK_BENCH_PREEMPT_PARTS: week and/or start-lag, got ${process.env.LK_BENCH_PREEMPT_PARTS}`);
  return {
    ...(PARTS.includes('week') ? { week: await simulatedWeek() } : {}),
    ...(PARTS.includes('start-lag') ? { startLag: await startLagWithPreemption() } : {}),
  };
});

// --- the simulated week --------------------------------------------------------------------------

interface WeekRun {
  regularOutcomes: boolean[];
  cuts: Cut[];
  cutLeases: number;
  preemptibleAdmitted: number;
  preemptibleAskedHostHours: number;
  backlogLeft: number;
}

async function simulatedWeek() {
  const warningMs = loadConfig().outbox.preemptionWarningMs;
  const weekEnd = WEEK_START + DAYS * DAY;
  const perHour = arrivalsPerHour(HOSTS, REGULAR_UTILISATION);
  const arrivals = regularArrivals(randomFrom(SEED), perHour, WEEK_START - MARGIN_MS, weekEnd + MARGIN_MS);
  const settings = { cleaningMs: 0, randomChoice: false };
  const stack = await startTestStack({ noWorker: true, withPool: (pool) => [physicalHostPlugin({ pool, settings, cloud: 'calendar-only' })] });
  try {
    const { pool } = stack.db;
    for (let i = 0; i < HOSTS; i++) await insertHost(pool, { name: `week-host-${i}` });
    const calendar = new HostCalendar(pool, settings);
    const runs: Record<string, WeekRun & { utilisation: Awaited<ReturnType<typeof heldHostHours>>; seconds: number; doubleBookings: number }> = {};
    for (const withBacklog of [false, true]) {
      await pool.query('TRUNCATE host_allocations, host_lendings, lease_preemptions');
      const started = performance.now();
      const run = await simulate(pool, calendar, arrivals, withBacklog, weekEnd);
      runs[withBacklog ? 'with' : 'without'] = { ...run, utilisation: await heldHostHours(pool, weekEnd), seconds: Math.round((performance.now() - started) / 100) / 10, doubleBookings: (await doubleBookings(pool)).length };
    }
    const { without, with: lent } = runs;
    const poolHostHours = HOSTS * DAYS * 24;
    const percent = (hostHours: number) => Math.round((hostHours / poolHostHours) * 1000) / 10;
    const refused = (run: WeekRun) => run.regularOutcomes.filter((admitted) => !admitted).length;
    const warnings = judgeWarnings(lent.cuts, warningMs);
    const result = {
      hosts: HOSTS,
      days: DAYS,
      seed: SEED,
      regularArrivalsPerHour: Math.round(perHour * 100) / 100,
      regularArrivals: arrivals.length,
      regularShortLeads: arrivals.filter((a) => a.leadMs < warningMs).length,
      warningMinutes: warningMs / MINUTE,
      utilisationPercent: {
        without: percent(without.utilisation.regular),
        withRegular: percent(lent.utilisation.regular),
        withPreemptibleHeld: percent(lent.utilisation.preemptible),
        with: percent(lent.utilisation.regular + lent.utilisation.preemptible),
      },
      // Refused only with the backlog: a preemptible lease stood in a regular one's way (a defect). Refused only without: the
      // calendars diverged (a lease that preempted took hosts in the preempting order), and one of them fragmented less.
      regularRefused: {
        without: refused(without),
        with: refused(lent),
        onlyWith: lent.regularOutcomes.filter((admitted, i) => !admitted && without.regularOutcomes[i]).length,
        onlyWithout: without.regularOutcomes.filter((admitted, i) => !admitted && lent.regularOutcomes[i]).length,
      },
      preemptible: {
        admitted: lent.preemptibleAdmitted,
        cutLeases: lent.cutLeases,
        askedHostHours: Math.round(lent.preemptibleAskedHostHours),
        deliveredHostHours: Math.round(lent.utilisation.preemptibleWhole),
        deliveredShare: Math.round((lent.utilisation.preemptibleWhole / Math.max(1, lent.preemptibleAskedHostHours)) * 1000) / 10,
        backlogLeft: lent.backlogLeft,
      },
      cuts: lent.cuts.length,
      warnings: { ...warnings, shortestMinutes: warnings.shortestMs === null ? null : Math.round((warnings.shortestMs / MINUTE) * 10) / 10 },
      doubleBookings: { without: without.doubleBookings, with: lent.doubleBookings },
      simulationSeconds: { without: without.seconds, with: lent.seconds },
    };
    console.log(`\npreemptible, simulated week: ${HOSTS} hosts, ${DAYS} days, ${arrivals.length} regular arrivals (${result.regularArrivalsPerHour}/h, ${result.regularShortLeads} with a lead under the ${result.warningMinutes}-min warning)`);
    console.table(result.utilisationPercent);
    console.table({ 'regular refused': result.regularRefused, preemptible: result.preemptible, warnings: result.warnings });
    return result;
  } finally {
    await stack.stop();
  }
}

/**
 * One run of the week: every regular arrival and (with the backlog) every 15-minute step of the
 * week in simulated time order, each booked as the API books (bookWithin with preempt: true, in
 * its own transaction).
 */
async function simulate(pool: Pool, calendar: HostCalendar, arrivals: RegularArrival[], withBacklog: boolean, weekEnd: number): Promise<WeekRun> {
  const book = async (ctx: ReturnType<typeof hostLease>): Promise<string[] | undefined> => {
    const cut = new Set<string>();
    try {
      await bookInTransaction(pool, async (client) => {
        const ids: string[] = [];
        await calendar.bookWithin(client, ctx, { preempt: true, cut: ids });
        cut.clear(); // a retried transaction: only its last try's cuts count
        for (const id of ids) cut.add(id);
      }, { retryExclusion: true });
      return [...cut];
    } catch (err) {
      if (isLeaseConflict(err)) return undefined;
      throw err;
    }
  };
  const askRandom = randomFrom(SEED + 1);
  const backlog: PreemptibleAsk[] = [];
  const regularOutcomes: boolean[] = [];
  const cuts: Cut[] = [];
  const cutLeases = new Set<string>();
  let preemptibleAdmitted = 0;
  let preemptibleAskedHostHours = 0;
  let next = 0;
  for (let step = WEEK_START; step < weekEnd + MARGIN_MS; step += STEP_MS) {
    // Regular leases asked for up to this step, in order, then the backlog at the step.
    for (; next < arrivals.length && arrivals[next].atMs <= step; next++) {
      const arrival = arrivals[next];
      const cut = await book(hostLease(arrival.hosts, arrival.atMs + arrival.leadMs, arrival.durationMs, false));
      regularOutcomes.push(cut !== undefined);
      if (!cut?.length) continue;
      const { rows } = await pool.query<{ end_ms: number }>('SELECT (extract(epoch FROM end_at) * 1000)::float8 AS end_ms FROM lease_preemptions WHERE lease_id = ANY($1::uuid[])', [cut]);
      for (const row of rows) cuts.push({ warningMs: row.end_ms - arrival.atMs, regularLeadMs: arrival.leadMs });
      for (const id of cut) cutLeases.add(id);
    }
    if (!withBacklog || step >= weekEnd) continue;
    while (backlog.length < BACKLOG) backlog.push(preemptibleAsk(askRandom));
    let refusals = 0;
    for (let i = 0; i < backlog.length && refusals < REFUSALS_PER_STEP; ) {
      const ask = backlog[i];
      if (await book(hostLease(ask.hosts, step, ask.durationMs, true))) {
        preemptibleAdmitted++;
        preemptibleAskedHostHours += (ask.hosts * ask.durationMs) / HOUR;
        backlog.splice(i, 1);
      } else {
        refusals++;
        i++;
      }
    }
  }
  return { regularOutcomes, cuts, cutLeases: cutLeases.size, preemptibleAdmitted, preemptibleAskedHostHours, backlogLeft: backlog.length };
}

/** A one-reservation host lease of `hosts` hosts over [startMs, startMs + durationMs), as the API stores it. */
function hostLease(hosts: number, startMs: number, durationMs: number, preemptible: boolean) {
  const reservation = pendingReservation('physical:host', { min: hosts, max: hosts, hypervisor_properties: '', resource_properties: '', before_end: 'default', preemptible });
  return reservationContext({ leaseId: randomUUID(), reservation, leaseReservations: [reservation], startMs, endMs: startMs + durationMs });
}

/** Host-hours booked within the week, regular and preemptible (after the cuts), and the preemptible bookings' whole (past the week too). */
async function heldHostHours(pool: Pool, weekEnd: number): Promise<{ regular: number; preemptible: number; preemptibleWhole: number }> {
  const { rows } = await pool.query<{ preemptible: boolean; within: number; whole: number }>(
    `SELECT preemptible,
            coalesce(sum(extract(epoch FROM upper(during * week) - lower(during * week))) FILTER (WHERE during && week), 0)::float8 / 3600 AS within,
            sum(extract(epoch FROM upper(during) - lower(during)))::float8 / 3600 AS whole
     FROM host_allocations, tstzrange(to_timestamp($1 / 1000.0), to_timestamp($2 / 1000.0)) AS week
     GROUP BY preemptible`,
    [WEEK_START, weekEnd],
  );
  const of = (preemptible: boolean) => rows.find((r) => r.preemptible === preemptible);
  return { regular: of(false)?.within ?? 0, preemptible: of(true)?.within ?? 0, preemptibleWhole: of(true)?.whole ?? 0 };
}

// --- start lag with preemption ------------------------------------------------------------------

async function startLagWithPreemption() {
  const env = { LK_PREEMPT_WARNING_MINUTES: String(FAST_WARNING_MINUTES) };
  const stack = await startTestStack({ noWorker: true, env, withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
  let worker: ManagedProcess | undefined;
  let sweeps: LeaseOutbox | undefined;
  try {
    worker = await startWorkerProcess(stack, env, path.join('dist', 'bench', 'calendar-only-worker.js'));
    const running = worker;
    stopOnExit(() => running.stop());
    // The outbox sweeps a deployment's API and worker run (src/api/main.ts, worker/main.ts); neither the
    // test stack's API nor the calendar-only worker runs them, and a cut the admitting API's tell misses waits for them.
    sweeps = new LeaseOutbox({ pool: stack.db.pool, client: stack.temporal.client, taskQueue: stack.config.temporal.taskQueue, log: pino({ level: 'silent' }), ...stack.config.outbox });
    sweeps.runSweeps();
    for (let i = 0; i < LEASES; i++) await insertHost(stack.db.pool, { name: `lag-host-${i}` });
    const api = apiClient(stack.url);

    const without = await regularWave(stack, api, 'free');
    // Every host held by a running preemptible lease, then the same wave again: each admission cuts one.
    await createAll(api, LEASES, (i) => ({ name: `lent-${i}`, start_date: 'now', end_date: inSeconds(7200), reservations: [blazarHostReservation({ preemptible: true })] }));
    await waitFor(stack, 'lent-', (lease) => lease.status === 'ACTIVE', Date.now() + (LEASES + 60) * 1000, 'preemptible leases active');
    const withPreemption = await regularWave(stack, api, 'preempting');
    const told = await stack.db.pool.query<{ warning_ms: number }>("SELECT (extract(epoch FROM end_at - told_at) * 1000)::float8 AS warning_ms FROM lease_preemptions WHERE told_at IS NOT NULL");
    const warningMs = FAST_WARNING_MINUTES * MINUTE;
    const result = {
      leases: LEASES,
      warningMinutes: FAST_WARNING_MINUTES,
      startsWithinSeconds: SPREAD_S,
      startLagMs: { without: without.startLagMs, with: withPreemption.startLagMs },
      createLatencyMs: { without: without.createLatencyMs, with: withPreemption.createLatencyMs },
      leadsShorterThanWarning: { without: without.shortLeads, with: withPreemption.shortLeads },
      cuts: (await stack.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM lease_preemptions')).rows[0].n,
      warningsDelivered: { told: told.rows.length, atLeastConfigured: told.rows.filter((r) => r.warning_ms >= warningMs).length, shortestSeconds: told.rows.length ? Math.round(Math.min(...told.rows.map((r) => r.warning_ms)) / 100) / 10 : null },
      // A cut not told by the end of the wave: how often it was tried, and why it failed.
      untold: (
        await stack.db.pool.query<{ attempts: number; last_error: string | null; age_s: number }>(
          'SELECT attempts, last_error, extract(epoch FROM now() - created_at)::float8 AS age_s FROM lease_preemptions WHERE told_at IS NULL',
        )
      ).rows,
      preemptedEnded: (await stack.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM leases WHERE document->>'name' LIKE 'lent-%' AND document->>'status' = 'TERMINATED' AND document->>'statusReason' LIKE 'preempted:%'")).rows[0].n,
      doubleBookings: (await doubleBookings(stack.db.pool)).length,
    };
    console.log(`\npreemptible, start lag: ${LEASES} regular leases starting within ${SPREAD_S} s, on free hosts and on hosts running preemptible leases (warning ${FAST_WARNING_MINUTES} min)`);
    console.table({ 'start lag without (ms)': without.startLagMs, 'start lag with (ms)': withPreemption.startLagMs });
    console.table({ cuts: result.cuts, ...result.warningsDelivered, preemptedEnded: result.preemptedEnded });
    if (result.untold.length) console.table(result.untold);
    return result;
  } finally {
    await sweeps?.stop();
    await worker?.stop();
    await stack.stop();
  }
}

/** Creates `count` leases through the API, CONCURRENCY at a time; answers each create's latency. */
async function createAll(api: ReturnType<typeof apiClient>, count: number, body: (i: number) => Record<string, unknown>): Promise<number[]> {
  const latency: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < count) {
        const lease = body(next++);
        const t = performance.now();
        const res = await api('POST', '/v1/leases', lease);
        latency.push(performance.now() - t);
        if (res.status !== 201) throw new Error(`create ${String(lease.name)}: ${res.status} ${JSON.stringify(res.body)}`);
      }
    }),
  );
  return latency;
}

/** Waits (polling once a second, until `deadline`) until every lease named `prefix…` meets `done`; answers them. */
async function waitFor(stack: TestStack, prefix: string, done: (lease: Lease) => boolean, deadline: number, what: string): Promise<Lease[]> {
  for (;;) {
    const { rows } = await stack.db.pool.query<{ document: Lease }>("SELECT document FROM leases WHERE deleted_at IS NULL AND document->>'name' LIKE $1", [`${prefix}%`]);
    const leases = rows.map((r) => r.document);
    const count = leases.filter(done).length;
    if (count === LEASES) return leases;
    if (Date.now() > deadline) throw new Error(`${what}: only ${count}/${LEASES} in time`);
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

/**
 * LEASES one-host regular leases, starts spread over SPREAD_S from a first start far enough ahead
 * for every create and the warning; waited for until they all ended (their hosts free again).
 */
async function regularWave(stack: TestStack, api: ReturnType<typeof apiClient>, wave: string) {
  const firstStart = Date.now() + (Math.ceil(LEASES / 30) + 10 + FAST_WARNING_MINUTES * 60) * 1000;
  const startOf = (i: number) => firstStart + Math.floor((i / LEASES) * SPREAD_S * 1000);
  const createdAt: number[] = [];
  const createLatency = await createAll(api, LEASES, (i) => {
    createdAt[i] = Date.now();
    return { name: `${wave}-${i}`, start_date: inSeconds(0, startOf(i)), end_date: inSeconds(DURATION_S, startOf(i)), reservations: [blazarHostReservation()] };
  });
  const leases = await waitFor(stack, `${wave}-`, (lease) => lease.status === 'TERMINATED', firstStart + (SPREAD_S + DURATION_S + 180) * 1000, `${wave} leases ended`);
  const lag = leases.map((lease) => {
    const event = lease.events.find((e) => e.event_type === 'start_lease')!;
    return event.startedAt! - event.time;
  });
  return {
    startLagMs: summary(lag),
    createLatencyMs: summary(createLatency),
    shortLeads: createdAt.filter((at, i) => startOf(i) - at < FAST_WARNING_MINUTES * MINUTE).length,
  };
}
