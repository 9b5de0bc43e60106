/**
 * `npm run bench:list [N]`: the lease list queries of bench:pending against N lease rows (default
 * 100 000) written straight into PostgreSQL, as the workflows write them, without their workflows:
 * the API's read path alone, in a minute instead of the forty bench:pending takes to create its
 * leases through Temporal. Writes bench/results/list.json.
 */
import { randomUUID } from 'node:crypto';
import { newLease, type Lease } from '../src/domain/lease';
import { insertLeaseRows } from '../dev-stack/fixtures/lease-rows';
import { apiClient, startTestStack } from '../dev-stack/stack';
import { runBenchmark } from './common';
import { listLatency, memberOf, projectName, PROJECTS } from './list-queries';

const COUNT = Number(process.argv[2] ?? process.env.LK_BENCH_PENDING ?? 100_000);
const FIRST_START = Date.UTC(2099, 0, 1);
const MINUTE = 60_000;
const BATCH = 5_000;

runBenchmark('list', async () => {
  if (!Number.isInteger(COUNT) || COUNT < 1 || COUNT > 1_000_000) throw new Error('lease count must be 1..1000000');
  const stack = await startTestStack({ noWorker: true });
  try {
    const ids: string[][] = Array.from({ length: PROJECTS }, () => []);
    const loadStarted = Date.now();
    for (let from = 0; from < COUNT; from += BATCH) {
      const leases: Lease[] = [];
      for (let i = from; i < Math.min(COUNT, from + BATCH); i++) {
        const start = FIRST_START + i * MINUTE;
        const lease = newLease({ id: randomUUID(), name: `pending-${i}`, projectId: projectName(i % PROJECTS), userId: 'bench', start, end: start + 60 * MINUTE, reservations: [], requestedMs: loadStarted + i });
        leases.push({ ...lease, version: 1 });
        ids[i % PROJECTS].push(lease.id);
      }
      await insertLeaseRows(stack.db.pool, leases);
    }
    await stack.db.pool.query('ANALYZE leases');
    const loadSeconds = Math.round((Date.now() - loadStarted) / 100) / 10;
    const admin = apiClient(stack.url);
    const members = Array.from({ length: PROJECTS }, (_, p) => memberOf(stack.url, p));
    const listLatencyMs = await listLatency(stack.url, { admin, members, ids, created: COUNT, firstStart: FIRST_START });
    console.log(`\nlist: ${COUNT} lease rows (written in ${loadSeconds} s), one query at a time`);
    console.table(listLatencyMs);
    return { leases: COUNT, loadSeconds, listLatencyMs };
  } finally {
    await stack.stop();
  }
});
