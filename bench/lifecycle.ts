/**
 * `npm run bench:lifecycle [N]`: N leases (default 200, no resources) all starting within the same
 * minute, on the real Temporal dev server with the real worker and API. Prints start and end lag
 * (when the event began − when it was due) and the create latency; writes bench/results/lifecycle.json.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import globalSetup from '../test/global-setup';
import globalTeardown from '../test/global-teardown';
import { apiClient, inSeconds, startTestStack } from '../test/support/stack';
import type { Lease } from '../src/domain/lease';

const count = Number(process.argv[2] ?? process.env.LK_BENCH_LEASES ?? 200);
const CONCURRENCY = 10;
const SPREAD_S = 60; // every start falls within one minute
const DURATION_S = 30;

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

function summary(values: number[]) {
  const sorted = [...values].sort((a, b) => a - b);
  return { n: sorted.length, p50: percentile(sorted, 50), p99: percentile(sorted, 99), max: sorted[sorted.length - 1] };
}

async function main(): Promise<void> {
  if (!Number.isInteger(count) || count < 1 || count > 100_000) throw new Error(`lease count must be 1..100000, got ${process.argv[2]}`);
  await globalSetup();
  const stack = await startTestStack();
  try {
    const api = apiClient(stack.url);
    const creationBudgetS = Math.ceil(count / 40) + 5; // time to create them all before the first start
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
    const result = {
      benchmark: 'lifecycle',
      date: new Date().toISOString(),
      machine: `${os.cpus().length} cores, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ${os.cpus()[0]?.model ?? 'unknown cpu'}`,
      leases: count,
      startsWithinSeconds: SPREAD_S,
      createPerSecond: Math.round(count / createSeconds),
      createLatencyMs: summary(createLatency.map(Math.round)),
      startLagMs: summary(lag('start_lease')),
      endLagMs: summary(lag('end_lease')),
    };
    console.log(`\nlifecycle: ${count} leases, starts spread over ${SPREAD_S} s, ${DURATION_S} s each (${result.machine})`);
    console.table({
      'create latency (ms)': result.createLatencyMs,
      'start lag (ms)': result.startLagMs,
      'end lag (ms)': result.endLagMs,
    });
    console.log(`created at ${result.createPerSecond} leases/s`);
    const out = path.join(__dirname, '..', '..', 'bench', 'results', 'lifecycle.json');
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  } finally {
    await stack.stop();
    await globalTeardown();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
