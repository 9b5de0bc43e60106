/**
 * `npm run bench:lifecycle [N]`: N leases (default 1 000, no resources) all starting within the
 * same minute, on the real Temporal with the worker as its own process (LK_BENCH_WORKERS of them,
 * default 1, on one task queue) and the API. Prints start and end lag (when the event began − when
 * it was due), the create latency, and the CPU time and peak memory of the workers and of the
 * Temporal server over the run; writes bench/results/lifecycle[-N-workers].json.
 */
import type { ManagedProcess } from '../dev-stack/processes';
import { apiClient, inSeconds, startTestStack } from '../dev-stack/stack';
import type { Lease } from '../src/domain/lease';
import { measuredWorkers, processStats, runBenchmark, summary, temporalServerStats } from './common';

const count = Number(process.argv[2] ?? process.env.LK_BENCH_LEASES ?? 1_000);
const CONCURRENCY = 10;
const SPREAD_S = 60; // every start falls within one minute
const DURATION_S = 30;
const WORKERS = Number(process.env.LK_BENCH_WORKERS ?? 1);

runBenchmark(WORKERS === 1 ? 'lifecycle' : `lifecycle-${WORKERS}-workers`, async () => {
  if (!Number.isInteger(count) || count < 1 || count > 100_000) throw new Error(`lease count must be 1..100000, got ${process.argv[2]}`);
  if (!Number.isInteger(WORKERS) || WORKERS < 1 || WORKERS > 8) throw new Error(`LK_BENCH_WORKERS must be 1..8, got ${process.env.LK_BENCH_WORKERS}`);
  const stack = await startTestStack({ noWorker: true });
  let workers: ManagedProcess[] = [];
  try {
    const measured = await measuredWorkers(stack, WORKERS);
    ({ workers } = measured);
    const { pids: workerPids, cpuUsed } = measured;
    const api = apiClient(stack.url);
    const creationBudgetS = Math.ceil(count / 30) + 10; // time to create them all before the first start
    const firstStart = Date.now() + creationBudgetS * 1000;
    const createLatency: number[] = [];
    let next = 0;
    const createdAt = Date.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < count) {
          const i = next++;
          const start = firstStart + Math.floor((i / count) * SPREAD_S * 1000);
          const t = performance.now();
          const res = await api('POST', '/v1/leases', { name: `bench-${i}`, start_date: inSeconds(0, start), end_date: inSeconds(DURATION_S, start) });
          createLatency.push(performance.now() - t);
          if (res.status !== 201) throw new Error(`create ${i}: ${res.status} ${JSON.stringify(res.body)}`);
        }
      }),
    );
    const createSeconds = (Date.now() - createdAt) / 1000;
    if (Date.now() > firstStart) console.warn('warning: creation ran past the first start; start lags include it');

    const deadline = firstStart + (SPREAD_S + DURATION_S + 120) * 1000;
    let leases: Lease[] = [];
    for (;;) {
      const { rows } = await stack.db.pool.query<{ document: Lease }>('SELECT document FROM leases WHERE deleted_at IS NULL');
      leases = rows.map((r) => r.document);
      const done = leases.filter((l) => l.status === 'TERMINATED').length;
      if (done === count) break;
      if (Date.now() > deadline) throw new Error(`only ${done}/${count} leases terminated in time`);
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }

    const lag = (type: string) => leases.map((l) => {
      const event = l.events.find((e) => e.event_type === type)!;
      return event.startedAt! - event.time;
    });
    const runSeconds = (Date.now() - createdAt) / 1000;
    // CPU by process (the worker; Temporal and the databases when the benchmark started them), and as a share of one core.
    const cpuSeconds = cpuUsed();
    const cpuPercentOfOneCore = Object.fromEntries(Object.entries(cpuSeconds).flatMap(([role, seconds]) => (typeof seconds === 'number' ? [[role, Math.round((seconds / runSeconds) * 100)]] : [])));
    const memory = (stats: ReturnType<typeof processStats> | undefined) => (stats ? { peakRssMb: stats.peakRssMb, rssMb: stats.rssMb } : 'not measured (an existing server)');
    const result = {
      leases: count,
      runSeconds: Math.round(runSeconds),
      cpuSeconds,
      cpuPercentOfOneCore,
      workers: WORKERS,
      memory: { ...Object.fromEntries(workerPids.map((pid, i) => [WORKERS === 1 ? 'worker' : `worker${i + 1}`, memory(processStats(pid))])), temporal: memory(temporalServerStats()) },
      startsWithinSeconds: SPREAD_S,
      createPerSecond: Math.round(count / createSeconds),
      createLatencyMs: summary(createLatency),
      startLagMs: summary(lag('start_lease')),
      endLagMs: summary(lag('end_lease')),
    };
    console.log(`\nlifecycle: ${count} leases, starts spread over ${SPREAD_S} s, ${DURATION_S} s each`);
    console.table({
      'create latency (ms)': result.createLatencyMs,
      'start lag (ms)': result.startLagMs,
      'end lag (ms)': result.endLagMs,
    });
    console.table({ 'CPU seconds': result.cpuSeconds, 'CPU % of one core': result.cpuPercentOfOneCore });
    console.table(result.memory);
    console.log(`created at ${result.createPerSecond} leases/s`);
    return result;
  } finally {
    await Promise.all(workers.map((worker) => worker.stop()));
    await stack.stop();
  }
});
