/**
 * `npm run bench:report` (and the end of `npm run bench`): every figure of the latest results in
 * bench/results/ against its goal, as one table; writes bench/results/summary.json.
 */
import fs from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from '../src/paths';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

interface Row {
  benchmark: string;
  figure: string;
  goal: string;
  measured: string;
  met: 'yes' | 'NO' | '—';
}

const RESULTS = path.join(REPO_ROOT, 'bench', 'results');

function load(name: string): Json | undefined {
  const file = path.join(RESULTS, `${name}.json`);
  return fs.existsSync(file) ? (JSON.parse(fs.readFileSync(file, 'utf8')) as Json) : undefined;
}

/** `role: figure` for each process a benchmark measured (cpuMeter's roles). */
const byRole = (figures: Record<string, number | string>, show: (role: string, value: number | string) => string) =>
  Object.entries(figures).map(([role, value]) => `${role}: ${show(role, value)}`).join(', ');

const atMost = (value: number, goal: number) => (value <= goal ? 'yes' : 'NO');
const atLeast = (value: number, goal: number) => (value >= goal ? 'yes' : 'NO');

function rows(): Row[] {
  const out: Row[] = [];
  const add = (benchmark: string, figure: string, goal: string, measured: string, met: Row['met']) => out.push({ benchmark, figure, goal, measured, met });

  const lifecycle = load('lifecycle');
  if (lifecycle) {
    const b = `lifecycle (${lifecycle.leases} leases${lifecycle.temporal ? `; ${lifecycle.temporal}` : ''})`;
    add(b, 'start lag p50 / p99 / max', 'p99 ≤ 1000 ms', `${lifecycle.startLagMs.p50} / ${lifecycle.startLagMs.p99} / ${lifecycle.startLagMs.max} ms`, atMost(lifecycle.startLagMs.p99, 1000));
    add(b, 'end lag p50 / p99 / max', 'p99 ≤ 1000 ms', `${lifecycle.endLagMs.p50} / ${lifecycle.endLagMs.p99} / ${lifecycle.endLagMs.max} ms`, atMost(lifecycle.endLagMs.p99, 1000));
    if (lifecycle.cpuSeconds) {
      add(b, 'CPU seconds by process', 'reported', byRole(lifecycle.cpuSeconds, (role, seconds) => `${seconds} s${typeof seconds === 'number' ? ` (${lifecycle.cpuPercentOfOneCore[role]} % of a core)` : ''}`), '—');
      add(b, 'peak RSS: worker / Temporal', 'reported', `${lifecycle.memory.worker.peakRssMb} / ${lifecycle.memory.temporal.peakRssMb ?? lifecycle.memory.temporal} MB`, '—');
    } else if (lifecycle.worker) {
      add(b, 'worker CPU / peak RSS', 'reported', `${lifecycle.worker.cpuSeconds} s (${lifecycle.worker.cpuPercentOfOneCore} % of a core) / ${lifecycle.worker.peakRssMb} MB`, '—');
      add(b, 'Temporal server CPU / peak RSS', 'reported', `${lifecycle.temporalServer.cpuSeconds} s (${lifecycle.temporalServer.cpuPercentOfOneCore} % of a core) / ${lifecycle.temporalServer.peakRssMb} MB`, '—');
    }
  }
  // Admission on each Temporal it ran on (the dev server, and temporal-server: LK_TEMPORAL=server), a
  // 60-s run and a burst (LK_BENCH_BURST), and the workflow admitting for comparison (LK_ADMISSION=workflow).
  const admissionRuns = fs.existsSync(RESULTS)
    ? fs.readdirSync(RESULTS).filter((file) => /^admission(-by-workflow)?(-burst\d+)?(-temporal-server)?\.json$/.test(file)).sort().map((file) => load(file.replace(/\.json$/, '')))
    : [];
  for (const admission of admissionRuns) {
    if (!admission) continue;
    const run = admission.burstPerClient ? `${admission.bursts ?? 1} burst(s) of ${admission.burstPerClient} creates each, ${admission.seconds} s in all` : `${admission.seconds} s`;
    const by = admission.admittedBy ? `; admitted by ${String(admission.admittedBy).replace(/ \(.*\)$/, '')}` : '';
    const b = `admission (${admission.clients} clients, ${admission.hosts} hosts, ${run}${by}${admission.temporal ? `; ${admission.temporal}` : ''})`;
    const byBurst: number[] | undefined = admission.admissionsPerSecondByBurst;
    add(b, 'admissions per second', '≥ 50 /s', `${admission.admissionsPerSecond} /s${byBurst ? ` (by burst: ${byBurst.join(', ')})` : ''}`, atLeast(admission.admissionsPerSecond, 50));
    add(b, 'create latency p50 / p99', 'p99 ≤ 1000 ms', `${admission.createLatencyMs.p50} / ${admission.createLatencyMs.p99} ms`, atMost(admission.createLatencyMs.p99, 1000));
    const running = admission.workflowRunningAfterAnswerMs;
    const checked = admission.workflowsChecked ? `, ${admission.workflowsChecked} leases` : '';
    if (running) add(b, `workflow running after the 201 p50 / p99 / max (< 0: before it${checked})`, 'every one ≤ 5000 ms', `${running.p50} / ${running.p99} / ${running.max} ms${running.notRunning ? `, ${running.notRunning} not running` : ''}`, running.notRunning ? 'NO' : atMost(running.max, 5000));
    add(b, 'double bookings afterwards', '0', String(admission.doubleBookings), admission.doubleBookings === 0 ? 'yes' : 'NO');
    add(b, 'calendar alone: admissions/s, p99', 'reported', `${admission.calendarOnly.admissionsPerSecond} /s, ${admission.calendarOnly.latencyMs.p99} ms`, '—');
    if (admission.cpuMsPerAdmission) add(b, 'CPU ms per admission by process', 'reported', byRole(admission.cpuMsPerAdmission, (_, ms) => `${ms}${typeof ms === 'number' ? ' ms' : ''}`), '—');
  }
  for (const starts of [load('workflow-start'), load('workflow-start-temporal-server')]) {
    if (!starts) continue;
    const b = `workflow-start (${starts.leases} workflows, ${starts.clients} callers${starts.temporal ? `; ${starts.temporal}` : ''})`;
    add(b, 'starts accepted per second', 'reported', `${starts.startsAcceptedPerSecond} /s`, '—');
    add(b, 'all running after, per second', 'reported (the ceiling of a workflow per lease)', `${starts.allRunningAfterSeconds} s, ${starts.runningPerSecond} /s`, '—');
    add(b, 'start → first task lag p50 / p99', 'reported', `${starts.firstTaskLagMs.p50} / ${starts.firstTaskLagMs.p99} ms`, '—');
    add(b, 'CPU ms per workflow by process', 'reported', byRole(starts.cpuMsPerWorkflow, (_, ms) => `${ms}${typeof ms === 'number' ? ' ms' : ''}`), '—');
  }
  const pending = load('pending');
  if (pending) {
    const b = `pending (${pending.leases} leases)`;
    const growth = pending.growth as Array<{ created: number; workerRssMb: number }>;
    const baseline = (pending.restAfterFirstTenth ?? growth[1] ?? growth[0]) as { created: number; workerRssMb: number };
    const rise = pending.atRest.workerRssMb - baseline.workerRssMb;
    add(b, `worker RSS at rest: ${baseline.created} → ${pending.atRest.created} leases`, 'flat (grows ≤ 25 %)', `${baseline.workerRssMb} → ${pending.atRest.workerRssMb} MB (${rise >= 0 ? '+' : ''}${rise}); busy peak ${Math.max(...growth.map((g) => g.workerRssMb))} MB`, rise <= 0.25 * baseline.workerRssMb ? 'yes' : 'NO');
    add(b, 'Temporal DB / PostgreSQL growth', 'reported', `${pending.growth[0].temporalDbMb} → ${pending.atRest.temporalDbMb} MB / ${pending.growth[0].postgresDbMb} → ${pending.atRest.postgresDbMb} MB`, '—');
    add(b, 'time to create', 'reported', `${pending.createSeconds} s (${pending.createPerSecond} /s)`, '—');
    const lists = Object.entries(pending.listLatencyMs as Record<string, { p99: number }>);
    const worst = lists.reduce((a, c) => (c[1].p99 > a[1].p99 ? c : a));
    add(b, `list p99, worst of ${lists.length} kinds (${worst[0]})`, 'p99 ≤ 50 ms', `${worst[1].p99} ms`, atMost(worst[1].p99, 50));
  }
  const list = load('list');
  if (list) {
    const b = `list (${list.leases} lease rows, no workflows)`;
    const lists = Object.entries(list.listLatencyMs as Record<string, { p99: number }>);
    const worst = lists.reduce((a, c) => (c[1].p99 > a[1].p99 ? c : a));
    add(b, `list p99, worst of ${lists.length} kinds (${worst[0]})`, 'p99 ≤ 50 ms', `${worst[1].p99} ms`, atMost(worst[1].p99, 50));
  }
  const calendar = load('calendar');
  if (calendar) {
    const b = `calendar (${calendar.bookings} bookings, ${calendar.hosts} hosts)`;
    for (const [kind, latency] of Object.entries(calendar.latencyMs as Record<string, { p50: number; p99: number }>)) {
      const oneHost = kind.startsWith('one host, one week: free intervals (API)');
      add(b, `${kind} p50 / p99`, oneHost ? 'p99 ≤ 10 ms' : 'reported', `${latency.p50} / ${latency.p99} ms`, oneHost ? atMost(latency.p99, 10) : '—');
    }
    // Issue 15: what holds the event loop must stay under ~100 ms.
    for (const [kind, latency] of Object.entries((calendar.longSearchMs ?? {}) as Record<string, { p50: number; max: number }>)) {
      add(b, `${kind} p50 / max`, 'max ≤ 100 ms', `${latency.p50} / ${latency.max} ms`, atMost(latency.max, 100));
    }
    for (const [kind, answer] of Object.entries((calendar.hostile?.requests ?? {}) as Record<string, { status: number; ms: number }>)) {
      add(b, `hostile ${kind}`, '4xx, ≤ 100 ms', `${answer.status} in ${answer.ms} ms`, answer.status >= 400 && answer.status < 500 && answer.ms <= 100 ? 'yes' : 'NO');
    }
    if (calendar.hostile) add(b, 'API RSS before / after the hostile requests', 'reported', `${calendar.hostile.apiRssMbBefore} / ${calendar.hostile.apiRssMbAfter} MB`, '—');
  }
  const page = load('calendar-page');
  if (page) {
    const b = `calendar-page (${page.hosts} hosts, ${page.leases} leases over a month, Chromium)`;
    add(b, 'month view: answer + render, slowest of 5', '< 1000 ms', `${page.monthView.totalMs.max} ms (answer ${page.monthView.answerMs.max} ms, render ${page.monthView.renderMs.max} ms)`, atMost(page.monthView.totalMs.max, 999));
    // Smooth: down the rows a wheel step paints within ~3 frames at 60 Hz and nothing blocks the page for 50 ms;
    // through time the same, but for the next window's answer, parsed when the view leaves the loaded one.
    add(b, 'down the rows: wheel step p99 / long tasks', '≤ 50 ms / 0', `${page.scrollRows.stepMs.p99} ms / ${page.scrollRows.longTasks}`, page.scrollRows.stepMs.p99 <= 50 && page.scrollRows.longTasks === 0 ? 'yes' : 'NO');
    add(b, 'through time: wheel step p99 / long tasks (longest)', 'reported', `${page.scrollTime.stepMs.p99} ms / ${page.scrollTime.longTasks} (${page.scrollTime.longestTaskMs} ms)`, '—');
  }
  const offers = load('offers');
  if (offers) {
    // Issue 41: POST /v1/offers p99 ≤ 200 ms at 1 000 hosts and 100 000 bookings, and with 10 000 slot bookings.
    type Run = { latencyMs: Record<string, { p50: number; p99: number; max: number }> };
    const scenarios: Array<[string, Run | undefined]> = [
      [`offers (hosts: ${offers.hosts?.bookings} bookings, ${offers.hosts?.hosts} hosts)`, offers.hosts],
      [`offers (slots: ${offers.slots?.slotBookings} slot bookings, ${offers.slots?.hosts} hosts)`, offers.slots?.slots],
      [`offers (slots and floating IPs: ${offers.slots?.slotBookings} slot bookings)`, offers.slots?.slotsAndFloatingIps],
    ];
    for (const [b, run] of scenarios) {
      for (const [how, latency] of Object.entries(run?.latencyMs ?? {})) add(b, `POST /v1/offers, ${how}: p50 / p99 / max`, 'p99 ≤ 200 ms', `${latency.p50} / ${latency.p99} / ${latency.max} ms`, atMost(latency.p99, 200));
    }
  }
  const preemptible = load('preemptible');
  if (preemptible?.week) {
    // Issue 43: the same regular admissions with the backlog, every warning met or its shortfall explained.
    const { week } = preemptible;
    const b = `preemptible (simulated ${week.days} days, ${week.hosts} hosts, seed ${week.seed})`;
    add(b, 'pool utilisation without / with', 'reported', `${week.utilisationPercent.without} / ${week.utilisationPercent.with} %`, '—');
    add(b, 'regular leases refused only with the backlog', '0', `${week.regularRefused.onlyWith} (refused without / with: ${week.regularRefused.without} / ${week.regularRefused.with})`, week.regularRefused.onlyWith === 0 ? 'yes' : 'NO');
    add(b, 'cuts: warned in full / short, of which unexplained', '0 unexplained', `${week.warnings.met} / ${week.warnings.short}, ${week.warnings.shortUnexplained}`, week.warnings.shortUnexplained === 0 ? 'yes' : 'NO');
  }
  if (preemptible?.startLag) {
    const lag = preemptible.startLag;
    const b = `preemptible (${lag.leases} leases starting within ${lag.startsWithinSeconds} s)`;
    add(b, 'start lag p99 without / with preemption', 'p99 ≤ 1000 ms', `${lag.startLagMs.without.p99} / ${lag.startLagMs.with.p99} ms`, atMost(Math.max(lag.startLagMs.without.p99, lag.startLagMs.with.p99), 1000));
  }
  const deletion = load('delete');
  if (deletion) {
    const b = `delete (${deletion.leases} pending leases on ${deletion.hosts} hosts)`;
    const runs = Object.entries(deletion.runs as Record<string, { leases: number; secondsUntilGone: number; msPerLease: number }>);
    const slowest = Math.max(...runs.map(([, r]) => r.msPerLease));
    const fastest = Math.min(...runs.map(([, r]) => r.msPerLease));
    for (const [order, run] of runs) add(b, `${order}: ${run.leases} deleted until gone`, 'reported', `${run.secondsUntilGone} s (${run.msPerLease} ms per lease)`, '—');
    // Linear whatever the order: no order may cost much more per lease than another (earliest first was N²).
    add(b, 'slowest order per lease / fastest', '≤ 2×', `${Math.round((slowest / fastest) * 10) / 10}×`, atMost(slowest / fastest, 2));
  }
  const listAll = load('list-all');
  if (listAll) {
    type Case = { parallel: number; seconds: number; bodyMb: number; apiPeakRssMb: number; healthzMs: { max: number } };
    for (const [what, cases] of [[`GET /v1/leases, ${listAll.leases} leases of one project`, listAll.list], [`GET /v1/os-hosts/allocations, ${listAll.bookings} bookings`, listAll.allocations]] as Array<[string, Case[]]>) {
      const b = `list-all (${what})`;
      for (const c of cases) {
        // Streamed: the API's memory must not follow the answer's size (a list of 100 000 leases is ~140 MB of JSON).
        add(b, `${c.parallel} at once: API peak RSS`, '≤ 300 MB', `${c.apiPeakRssMb} MB (${c.bodyMb} MB answer each)`, atMost(c.apiPeakRssMb, 300));
        add(b, `${c.parallel} at once: time / slowest /healthz meanwhile`, '/healthz ≤ 1000 ms', `${c.seconds} s / ${c.healthzMs.max} ms`, atMost(c.healthzMs.max, 1000));
      }
    }
  }
  return out;
}

const table = rows();
if (table.length === 0) {
  console.log('no results yet: run npm run bench (or one of bench:lifecycle, bench:admission, bench:pending, bench:calendar)');
} else {
  console.log('\nfigures against goals (bench/results/*.json):');
  console.table(table);
  fs.writeFileSync(path.join(RESULTS, 'summary.json'), `${JSON.stringify({ date: new Date().toISOString(), rows: table }, null, 2)}\n`);
}
