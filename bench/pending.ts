/**
 * `npm run bench:pending [N]`: N pending leases (default 100 000, starting in 2099) created through
 * the API, each its own sleeping workflow, with the worker as its own process. Prints the create
 * rate, the worker's and the Temporal server's memory as the count grows (the worker keeps no
 * sleeping lease in memory: it should stay flat), the databases' growth, and list latency with
 * paging and filters; writes bench/results/pending.json.
 * LK_BENCH_CLIENTS (default 32) concurrent creators; LK_BENCH_MAX_MINUTES (default 120) bounds the run.
 */
import type { ManagedProcess } from '../dev-stack/processes';
import { apiClient, startTestStack } from '../dev-stack/stack';
import { listLatency, memberOf, PROJECTS } from './list-queries';
import { measuredWorkers, processStats, runBenchmark, summary, temporalServerStats, temporalStorageMb } from './common';
import { formatRequestDate } from '../src/domain/dates';

const COUNT = Number(process.argv[2] ?? process.env.LK_BENCH_PENDING ?? 100_000);
const CLIENTS = Number(process.env.LK_BENCH_CLIENTS ?? 32);
const MAX_MINUTES = Number(process.env.LK_BENCH_MAX_MINUTES ?? 120);
const FIRST_START = Date.UTC(2099, 0, 1);
const MINUTE = 60_000;
const REST_MS = 60_000;

runBenchmark('pending', async () => {
  for (const [name, value, max] of [['lease count', COUNT, 1_000_000], ['LK_BENCH_CLIENTS', CLIENTS, 500], ['LK_BENCH_MAX_MINUTES', MAX_MINUTES, 600]] as const) {
    if (!Number.isInteger(value) || value < 1 || value > max) throw new Error(`${name} must be 1..${max}`);
  }
  // Members book these 2099 leases: allow that far ahead (the default is a year).
  const stack = await startTestStack({ noWorker: true, env: { LK_MAX_ADVANCE_DAYS: '36500' } });
  let worker: ManagedProcess | undefined;
  try {
    const measured = await measuredWorkers(stack);
    [worker] = measured.workers;
    const { pids: [workerPid], cpuUsed } = measured;
    const dbMb = async () => {
      const { rows } = await stack.db.pool.query<{ bytes: string }>('SELECT pg_database_size(current_database()) AS bytes');
      return Math.round(Number(rows[0].bytes) / 2 ** 20);
    };
    const sample = async (created: number, seconds: number) => ({
      created,
      seconds: Math.round(seconds),
      workerRssMb: processStats(workerPid).rssMb,
      serverRssMb: temporalServerStats()?.rssMb ?? 'not measured (an existing server)',
      temporalDbMb: (await temporalStorageMb()) ?? 'not measured (an existing server)',
      postgresDbMb: await dbMb(),
    });

    const admin = apiClient(stack.url);
    const members = Array.from({ length: PROJECTS }, (_, p) => memberOf(stack.url, p));
    const ids: string[][] = Array.from({ length: PROJECTS }, () => []);
    const createLatency: number[] = [];
    const growth = [await sample(0, 0)];
    const began = Date.now();
    const deadline = began + MAX_MINUTES * MINUTE;
    let next = 0;
    let created = 0;
    let nextSample = Math.ceil(COUNT / 10);
    let resting: Promise<void> | undefined;
    let restAfterFirstTenth: Awaited<ReturnType<typeof sample>> | undefined;
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (next < COUNT && Date.now() < deadline) {
          const i = next++;
          const project = i % PROJECTS;
          // One lease a minute from 2099 on, an hour long: far in the future, never overlapping much.
          const start = FIRST_START + i * MINUTE;
          const t = performance.now();
          const res = await members[project]('POST', '/v1/leases', { name: `pending-${i}`, start_date: formatRequestDate(start), end_date: formatRequestDate(start + 60 * MINUTE) });
          createLatency.push(performance.now() - t);
          if (res.status !== 201) throw new Error(`create ${i}: ${res.status} ${JSON.stringify(res.body)}`);
          ids[project].push(res.body.lease.id);
          created++;
          if (created >= nextSample) {
            nextSample += Math.ceil(COUNT / 10);
            growth.push(await sample(created, (Date.now() - began) / 1000));
            const last = growth[growth.length - 1];
            console.log(`${last.created} created in ${last.seconds} s · worker ${last.workerRssMb} MB · server ${last.serverRssMb} MB · temporal db ${last.temporalDbMb} MB · postgres ${last.postgresDbMb} MB`);
            if (growth.length === 2) {
              // The first tenth made: every client rests a minute, and the worker's memory at rest is
              // the baseline the end is compared with (busy RSS is mostly garbage not yet collected).
              resting ??= (async () => {
                await new Promise((resolve) => setTimeout(resolve, REST_MS));
                restAfterFirstTenth = await sample(created, (Date.now() - began) / 1000);
                console.log(`at rest after ${created}: worker ${restAfterFirstTenth.workerRssMb} MB`);
              })();
            }
          }
          await resting;
        }
      }),
    );
    const createSeconds = (Date.now() - began - (restAfterFirstTenth ? REST_MS : 0)) / 1000;
    // A minute at rest: whatever the worker still holds after the burst.
    await new Promise((resolve) => setTimeout(resolve, REST_MS));
    const atRest = await sample(created, (Date.now() - began) / 1000);

    const listLatencyMs = await listLatency(stack.url, { admin, members, ids, created, firstStart: FIRST_START });
    console.table(listLatencyMs);

    const result = {
      leases: created,
      requested: COUNT,
      clients: CLIENTS,
      createSeconds: Math.round(createSeconds),
      createPerSecond: Math.round((created / createSeconds) * 10) / 10,
      createLatencyMs: summary(createLatency),
      growth,
      restAfterFirstTenth,
      atRest,
      cpuSeconds: cpuUsed(),
      workerPeakRssMb: processStats(workerPid).peakRssMb,
      listLatencyMs,
    };
    console.log(`\npending: ${created} of ${COUNT} leases created in ${result.createSeconds} s (${result.createPerSecond}/s, ${CLIENTS} clients)`);
    const row = (g: Awaited<ReturnType<typeof sample>>) => ({ 'worker RSS (MB)': g.workerRssMb, 'server RSS (MB)': g.serverRssMb, 'temporal db (MB)': g.temporalDbMb, 'postgres db (MB)': g.postgresDbMb });
    console.table({
      ...Object.fromEntries(growth.map((g) => [`${g.created} leases (busy)`, row(g)])),
      ...(restAfterFirstTenth ? { [`${restAfterFirstTenth.created} leases, 60 s at rest`]: row(restAfterFirstTenth) } : {}),
      [`${atRest.created} leases, 60 s at rest`]: row(atRest),
    });
    if (created < COUNT) {
      console.warn(`only ${created} of ${COUNT} leases were created within ${MAX_MINUTES} min`);
      process.exitCode = 1;
    }
    return result;
  } finally {
    await worker?.stop();
    await stack.stop();
  }
});
