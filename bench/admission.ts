/**
 * `npm run bench:admission`: 50 concurrent clients creating and deleting host leases over 100
 * hosts for 60 s, through the API, the real worker and the PostgreSQL calendar. Prints
 * admissions/s, create latency and the number of double bookings found afterwards (must be 0);
 * writes bench/results/admission.json. LK_BENCH_SECONDS / LK_BENCH_CLIENTS / LK_BENCH_HOSTS override.
 * LK_BENCH_WORKERS=N runs the worker as N processes of its own (dist/bench/calendar-only-worker.js)
 * instead of inside the benchmark, LK_BENCH_APIS=M the API as M processes (the clients take turns),
 * each measured apart: admission-Nw-Mapi.json.
 * LK_BENCH_BURST=N: bursts instead: every client sends N creates back to back, and nothing is
 * deleted (a class booking at 9:00); LK_BENCH_BURSTS (default 5) such bursts, each once the workflows
 * of the one before run; the rate is over the bursts' wall time: admission-burstN.json.
 * LK_ADMISSION=workflow measures the lease workflow admitting (before the API admitted host
 * leases itself): admission-by-workflow….json. The lag from each 201 to the lease's workflow
 * running is measured for every admitted lease (up to LAG_CHECKS of them: beyond, a uniform sample).
 * LK_BENCH_AS=member: the clients are members of project `bench` instead of admins (who are exempt
 * from the usage policy), and the project's policy has an approval rule every lease meets
 * (`always`) with the other limits set out of reach: every create is checked by the rules and
 * admitted PENDING_APPROVAL, what approval costs at admission: admission-member….json. Its
 * max_leases and max_hosts make every create take the project's policy lock, so the clients queue
 * on it: LK_BENCH_APPROVAL=off (members only) keeps the same policy without the approval rule, to
 * tell the lock's share from approval's: admission-member-noapproval….json.
 * A run with any error (neither 201 nor 409) fails.
 */
import path from 'node:path';
import { hostReservation, pendingReservation, reservationContext } from '../dev-stack/fixtures/builders';
import { doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, startTestStack } from '../dev-stack/stack';
import { WorkflowNotFoundError } from '@temporalio/client';
import { owedStartsCount } from '../src/db/lease-outbox';
import { isLostRace, type Pool } from '../src/db/pool';
import { ApplicationFailure } from '@temporalio/common';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { HostCalendar } from '../src/resources/physical-host/calendar';
import { leaseWorkflowId } from '../workflows/lease/messages';
import { measuredWorkers, runBenchmark, summary, workflowRunningAt } from './common';
import { formatRequestDate } from '../src/domain/dates';

const SECONDS = Number(process.env.LK_BENCH_SECONDS ?? 60);
const CLIENTS = Number(process.env.LK_BENCH_CLIENTS ?? 50);
const HOSTS = Number(process.env.LK_BENCH_HOSTS ?? 100);
/** Admitted leases whose workflow's first task is looked up afterwards: all of them, up to this many. */
const RUNNING_SAMPLE = 5_000;
const BURST = process.env.LK_BENCH_BURST === undefined ? undefined : Number(process.env.LK_BENCH_BURST);
/** Bursts, one after the other once the workflows of the one before are running (several classes, each booking at once). */
const BURSTS = Number(process.env.LK_BENCH_BURSTS ?? 5);
const BY_WORKFLOW = process.env.LK_ADMISSION === 'workflow';
/** Worker and API processes; absent: both run inside this process. */
const WORKERS = process.env.LK_BENCH_WORKERS === undefined ? undefined : Number(process.env.LK_BENCH_WORKERS);
const APIS = process.env.LK_BENCH_APIS === undefined ? undefined : Number(process.env.LK_BENCH_APIS);
const AS = process.env.LK_BENCH_AS ?? 'admin';
/** The members' project's policy: every lease waits for approval; nothing else refuses (the creates start in 2099, up to 3 hosts). */
const MEMBER_POLICY = { approval: [{ always: true, timeout: 30 * 1440 }], max_advance: '36500d', max_leases: 1_000_000, max_hosts: 1_000 };
/** LK_BENCH_APPROVAL=off: the members' policy without its approval rule (the same limits, the same lock). */
const APPROVAL = process.env.LK_BENCH_APPROVAL ?? 'on';
const memberPolicy = () => (APPROVAL === 'off' ? { ...MEMBER_POLICY, approval: [] } : MEMBER_POLICY);
const waitsForApproval = AS === 'member' && APPROVAL !== 'off';
const MEMBER_HEADERS = { 'x-project-id': 'bench', 'x-user-id': 'bench-member', 'x-roles': 'member' };

/** A random host request like the clients make: within one month, 1–8 h, 1–3 hosts. */
function randomRequest(i: number, horizon: number) {
  const start = horizon + Math.floor(Math.random() * 30 * 24) * 3_600_000;
  const hours = 1 + Math.floor(Math.random() * 8);
  const hosts = 1 + Math.floor(Math.random() * 3);
  return { start, end: start + hours * 3_600_000, hosts, query: i % 2 ? '[">=", "$vcpus", "4"]' : '' };
}

/**
 * The same workload straight on the calendar (no Temporal, no HTTP): the database's share of an
 * admission, to tell where the time goes.
 */
async function calendarOnly(calendar: HostCalendar, seconds: number, horizon: number) {
  const latencies: number[] = [];
  let admitted = 0;
  let lostRaces = 0;
  let serial = 0;
  const deadline = Date.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (Date.now() < deadline) {
        const i = serial++;
        const r = randomRequest(i, horizon);
        const reservation = pendingReservation('physical:host', { min: r.hosts, max: r.hosts, hypervisor_properties: r.query, resource_properties: '', before_end: 'default' });
        const ctx = reservationContext({ leaseName: `direct-${i}`, projectId: 'bench', userId: 'bench', reservation, startMs: r.start, endMs: r.end });
        const t = performance.now();
        try {
          await calendar.book(ctx);
          admitted++;
          if (i % 2 === 0) await calendar.release(ctx, false);
        } catch (err) {
          // A refusal (409), or a booking that lost its race every time it ran (the API answers that 503): counted, not fatal.
          if (isLostRace(err)) lostRaces++;
          else if (!(err instanceof ApplicationFailure)) throw err;
        }
        latencies.push(performance.now() - t);
      }
    }),
  );
  return { admitted, lostRaces, admissionsPerSecond: Math.round((admitted / seconds) * 10) / 10, latencyMs: summary(latencies) };
}

/** Between two bursts: every admitted lease's workflow started (none owed), up to 30 s, then 2 s for their first tasks. */
async function quietAfterBurst(pool: Pool): Promise<void> {
  const until = Date.now() + 30_000;
  while (Date.now() < until) {
    if ((await owedStartsCount(pool)) === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  await new Promise((resolve) => setTimeout(resolve, 2_000));
}

const processes = `${AS === 'member' ? `-member${APPROVAL === 'off' ? '-noapproval' : ''}` : ''}${BY_WORKFLOW ? '-by-workflow' : ''}${BURST === undefined ? '' : `-burst${BURST}`}${WORKERS === undefined ? '' : `-${WORKERS}w`}${APIS === undefined ? '' : `-${APIS}api`}`;

runBenchmark(`admission${processes}`, async () => {
  for (const [name, value, max] of [['LK_BENCH_SECONDS', SECONDS, 600], ['LK_BENCH_CLIENTS', CLIENTS, 500], ['LK_BENCH_HOSTS', HOSTS, 10_000], ['LK_BENCH_WORKERS', WORKERS ?? 1, 8], ['LK_BENCH_APIS', APIS ?? 1, 8], ['LK_BENCH_BURST', BURST ?? 1, 1_000], ['LK_BENCH_BURSTS', BURSTS, 100]] as const) {
    if (!Number.isInteger(value) || value < 1 || value > max) throw new Error(`${name} must be 1..${max}`);
  }
  if (AS !== 'admin' && AS !== 'member') throw new Error('LK_BENCH_AS must be admin or member');
  if (APPROVAL !== 'on' && APPROVAL !== 'off') throw new Error('LK_BENCH_APPROVAL must be on or off');
  if (APPROVAL === 'off' && AS !== 'member') throw new Error('LK_BENCH_APPROVAL=off is for LK_BENCH_AS=member (admins never wait for approval)');
  const stack = await startTestStack({ noWorker: WORKERS !== undefined, withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
  const measured = await measuredWorkers(stack, WORKERS ?? 0, { script: path.join('dist', 'bench', 'calendar-only-worker.js'), apis: APIS ?? 0, apiScript: path.join('dist', 'bench', 'calendar-only-api.js') }).catch(async (err: unknown) => {
    await stack.stop(); // a process that did not start must not leave the stack running
    throw err;
  });
  try {
    for (let i = 0; i < HOSTS; i++) await insertHost(stack.db.pool, { name: `bench-host-${i}`, vcpus: [2, 4, 8, 16][i % 4] });
    const apis = (measured.apis.length ? measured.apis.map((a) => a.url) : [stack.url]).map((url) => apiClient(url, AS === 'member' ? MEMBER_HEADERS : {}));
    if (AS === 'member') {
      const set = await apiClient(stack.url, { 'x-auth-token': 'admin' })('PUT', '/v1/projects/bench/policy', memberPolicy());
      if (set.status !== 200) throw new Error(`the members' policy was refused: ${set.status} ${JSON.stringify(set.body)}`);
    }
    const horizon = Date.UTC(2099, 0, 1);
    const latencies: number[] = [];
    const counts = { admitted: 0, awaitingApproval: 0, refused: 0, deleted: 0, errors: 0 };
    const errors = new Map<string, number>();
    const deadline = Date.now() + SECONDS * 1000;
    let serial = 0;
    /** Admitted leases (RUNNING_SAMPLE of them) and when their 201 arrived: how long after it their workflows ran. */
    const answered: Array<{ id: string; atMs: number; burst: number }> = [];
    let burstIndex = 0;
    // Where the CPU goes: this process (the clients, and the API and worker unless they run apart), those apart, Temporal (and its database), PostgreSQL.
    const cpuUsed = measured.cpuUsed;

    const clientsRun = () => Promise.all(
      Array.from({ length: CLIENTS }, async (_, client) => {
        const api = apis[client % apis.length];
        for (let sent = 0; BURST === undefined ? Date.now() < deadline : sent < BURST; sent++) {
          const i = serial++;
          // Windows fall within one month, one to eight hours long, in whole hours: many overlap.
          const r = randomRequest(i, horizon);
          const t = performance.now();
          const res = await api('POST', '/v1/leases', {
            name: `bench-${i}`,
            start_date: formatRequestDate(r.start),
            end_date: formatRequestDate(r.end),
            reservations: [hostReservation({ min: r.hosts, max: r.hosts, hypervisor_properties: r.query })],
          });
          latencies.push(performance.now() - t);
          if (res.status === 201) {
            counts.admitted++;
            if (res.body.lease.status === 'PENDING_APPROVAL') counts.awaitingApproval++;
            // A uniform sample over the whole run (reservoir sampling): the k-th admission replaces a kept one with chance RUNNING_SAMPLE / k.
            const kept = { id: res.body.lease.id as string, atMs: Date.now(), burst: burstIndex };
            if (answered.length < RUNNING_SAMPLE) answered.push(kept);
            else if (Math.random() < RUNNING_SAMPLE / counts.admitted) answered[Math.floor(Math.random() * RUNNING_SAMPLE)] = kept;
            // Half the leases stay (the calendar fills up), half are deleted again; a burst deletes nothing.
            if (BURST === undefined && i % 2 === 0 && (await api('DELETE', `/v1/leases/${res.body.lease.id}`)).status === 204) counts.deleted++;
          } else if (res.status === 409) {
            counts.refused++;
          } else {
            counts.errors++;
            const key = `${res.status} ${String(res.body?.error_message).slice(0, 80)}`;
            errors.set(key, (errors.get(key) ?? 0) + 1);
          }
        }
      }),
    );

    // The run's length: a burst's is its wall time, bursts' the sum of theirs (not the pauses between).
    let seconds = SECONDS;
    const burstRates: number[] = [];
    if (BURST === undefined) {
      await clientsRun();
    } else {
      seconds = 0;
      for (let burst = 0; burst < BURSTS; burst++) {
        if (burst > 0) await quietAfterBurst(stack.db.pool);
        burstIndex = burst;
        const burstBegan = performance.now();
        const before = counts.admitted;
        await clientsRun();
        const burstSeconds = (performance.now() - burstBegan) / 1000;
        seconds += burstSeconds;
        burstRates.push(Math.round(((counts.admitted - before) / burstSeconds) * 10) / 10);
      }
    }
    // Lag from the 201 to the lease's workflow running (its first workflow task done): below 0 when it ran before the answer.
    const runningLags: number[] = [];
    const slowestByBurst: number[] = [];
    const startedLags: number[] = [];
    let neverRan = 0;
    const toCheck = [...answered];
    // Workflows still owed a start (or waiting for their first task) are waited for, up to a minute after the run.
    const lookUntil = Date.now() + 60_000;
    const firstTaskOf = async (id: string): Promise<{ startedMs: number; firstTaskMs?: number } | undefined> => {
      for (;;) {
        const seen = await workflowRunningAt(stack.temporal.client, leaseWorkflowId(id)).catch((err: unknown) => {
          if (err instanceof WorkflowNotFoundError || (err as { code?: number }).code === 5) return undefined;
          throw err;
        });
        if (seen?.firstTaskMs !== undefined || Date.now() > lookUntil) return seen;
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    };
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        for (let next = toCheck.pop(); next; next = toCheck.pop()) {
          const seen = await firstTaskOf(next.id);
          if (seen?.firstTaskMs === undefined) {
            neverRan++;
          } else {
            // Started (Temporal took the start) and running (the worker completed its first task), after the 201.
            startedLags.push(seen.startedMs - next.atMs);
            runningLags.push(seen.firstTaskMs - next.atMs);
            slowestByBurst[next.burst] = Math.round(Math.max(slowestByBurst[next.burst] ?? -Infinity, seen.firstTaskMs - next.atMs));
          }
        }
      }),
    );

    const perAdmission = (seconds: number | string) => (typeof seconds === 'number' ? Math.round((seconds * 1000) / Math.max(1, counts.admitted) * 10) / 10 : seconds);
    const cpuMsPerAdmission = Object.fromEntries(Object.entries(cpuUsed()).map(([role, seconds]) => [role, perAdmission(seconds)]));

    // The database's share: the same workload on the calendar alone, a year later (no overlap with the above).
    const direct = await calendarOnly(new HostCalendar(stack.db.pool, { cleaningMs: 0, randomChoice: false }), Math.min(SECONDS, 20), horizon + 365 * 86_400_000);

    const result = {
      admittedBy: BY_WORKFLOW ? 'the lease workflow (LK_ADMISSION=workflow)' : 'the API (LK_ADMISSION=api)',
      clientsAre: AS !== 'member' ? 'admins (exempt from the usage policy)' : waitsForApproval ? 'members of project bench, every lease waiting for approval (LK_BENCH_AS=member)' : 'members of project bench, the same policy without its approval rule (LK_BENCH_APPROVAL=off)',
      ...(BURST !== undefined ? { burstPerClient: BURST, bursts: BURSTS, admissionsPerSecondByBurst: burstRates } : {}),
      seconds: Math.round(seconds * 10) / 10,
      clients: CLIENTS,
      hosts: HOSTS,
      workerProcesses: WORKERS ?? 'in the benchmark process',
      apiProcesses: APIS ?? 'in the benchmark process',
      ...counts,
      admissionsPerSecond: Math.round((counts.admitted / seconds) * 10) / 10,
      requestsPerSecond: Math.round((latencies.length / seconds) * 10) / 10,
      workflowsChecked: answered.length,
      createLatencyMs: summary(latencies),
      workflowStartedAfterAnswerMs: summary(startedLags),
      workflowRunningAfterAnswerMs: { ...summary(runningLags), notRunning: neverRan, ...(BURST !== undefined ? { maxByBurst: slowestByBurst } : {}) },
      calendarOnly: direct,
      cpuMsPerAdmission,
      doubleBookings: (await doubleBookings(stack.db.pool)).length,
      errorKinds: Object.fromEntries(errors),
    };
    console.log(`\nadmission by ${BY_WORKFLOW ? 'the workflow' : 'the API'}: ${CLIENTS} clients, ${HOSTS} hosts, ${BURST === undefined ? `${SECONDS} s` : `${BURSTS} bursts of ${BURST} creates each (${result.seconds} s in all; admissions/s by burst: ${burstRates.join(', ')})`}; workers: ${WORKERS ?? 'in process'}, APIs: ${APIS ?? 'in process'}`);
    console.table({
      'admitted / refused (409) / errors': { value: `${counts.admitted} / ${counts.refused} / ${counts.errors}` },
      ...(AS === 'member' ? { 'admitted waiting for approval': { value: counts.awaitingApproval } } : {}),
      'admissions per second': { value: result.admissionsPerSecond },
      'create latency p50 / p99 / max (ms)': { value: `${result.createLatencyMs.p50} / ${result.createLatencyMs.p99} / ${result.createLatencyMs.max}` },
      [`workflow running after the 201 p50 / p99 / max (ms; < 0: before it; ${answered.length} leases)`]: { value: `${result.workflowRunningAfterAnswerMs.p50} / ${result.workflowRunningAfterAnswerMs.p99} / ${result.workflowRunningAfterAnswerMs.max}${neverRan ? `, ${neverRan} not running` : ''}${BURST !== undefined ? ` (max by burst: ${slowestByBurst.join(', ')})` : ''}` },
      'workflow started (Temporal took the start) after the 201 p50 / p99 / max (ms)': { value: `${result.workflowStartedAfterAnswerMs.p50} / ${result.workflowStartedAfterAnswerMs.p99} / ${result.workflowStartedAfterAnswerMs.max}` },
      'calendar alone (no Temporal/HTTP): admissions/s, p50 / p99 (ms)': { value: `${direct.admissionsPerSecond}, ${direct.latencyMs.p50} / ${direct.latencyMs.p99}` },
      'double bookings afterwards': { value: result.doubleBookings },
      ...Object.fromEntries(Object.entries(cpuMsPerAdmission).map(([role, ms]) => [`CPU ms per admission: ${role}`, { value: ms }])),
    });
    if (errors.size) console.log('errors:', result.errorKinds);
    // Every member's lease waits with the approval rule, none without; an error fails the run (its figures would mix in failures).
    const waitedAsExpected = counts.awaitingApproval === (waitsForApproval ? counts.admitted : 0);
    if (result.doubleBookings !== 0 || neverRan !== 0 || !waitedAsExpected || counts.errors !== 0) process.exitCode = 1;
    return result;
  } finally {
    for (const { process: api } of measured.apis) await api.stop();
    for (const worker of measured.workers) await worker.stop();
    await stack.stop();
  }
});
