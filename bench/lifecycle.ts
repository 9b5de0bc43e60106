/**
 * `npm run bench:lifecycle [N]`: N leases (default 1 000, no resources) all starting within the
 * same minute, on the real Temporal dev server with the worker as its own process and the API.
 * Prints start and end lag (when the event began − when it was due), the create latency, and the
 * CPU time and peak memory of the worker and of the Temporal server over the run; writes
 * bench/results/lifecycle.json.
 */
import type { ManagedProcess } from '../scripts/lib/processes';
import { apiClient, inSeconds, startTestStack } from '../test/support/stack';
import { startWorkerProcess } from '../test/support/worker-process';
import type { Lease } from '../src/domain/lease';
import { processStats, runBenchmark, stopOnExit, summary, temporalServer } from './common';

const count = Number(process.argv[2] ?? process.env.LK_BENCH_LEASES ?? 1_000);
const CONCURRENCY = 10;
const SPREAD_S = 60; // every start falls within one minute
const DURATION_S = 30;

runBenchmark('lifecycle', async () => {
  if (!Number.isInteger(count) || count < 1 || count > 100_000) throw new Error(`lease count must be 1..100000, got ${process.argv[2]}`);
  const stack = await startTestStack({ noWorker: true });
  let worker: ManagedProcess | undefined;
  try {
    worker = await startWorkerProcess(stack);
    stopOnExit(() => worker!.stop());
    const workerPid = worker.child.pid!;
    const serverPid = temporalServer().pid;
    const cpuBefore = { worker: processStats(workerPid).cpuSeconds, server: processStats(serverPid).cpuSeconds };
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
    const usage = (pid: number, before: number) => {
      const stats = processStats(pid);
      const cpuSeconds = Math.round((stats.cpuSeconds - before) * 10) / 10;
      return { cpuSeconds, cpuPercentOfOneCore: Math.round((cpuSeconds / runSeconds) * 100), peakRssMb: stats.peakRssMb, rssMb: stats.rssMb };
    };
    const result = {
      leases: count,
      runSeconds: Math.round(runSeconds),
      worker: usage(workerPid, cpuBefore.worker),
      temporalServer: usage(serverPid, cpuBefore.server),
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
    console.table({ worker: result.worker, 'Temporal server': result.temporalServer });
    console.log(`created at ${result.createPerSecond} leases/s`);
    return result;
  } finally {
    await worker?.stop();
    await stack.stop();
  }
});
