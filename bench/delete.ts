/**
 * `npm run bench:delete [N]`: N pending host leases (default 10 000) booked back to back on 10
 * hosts through the API, then deleted — earliest first, latest first and in random order, a third
 * of the leases each — with the time until every lease is gone. Deleting a lease used to signal
 * every later lease on its hosts (N² signals earliest first, issue 23); the figure to watch is the
 * time per delete staying flat as N grows. Writes bench/results/delete.json.
 * LK_BENCH_CLIENTS (default 16) concurrent clients; LK_BENCH_HOSTS (default 10).
 */
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, eventually, startTestStack } from '../dev-stack/stack';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { cpuMeter, runBenchmark, summary } from './common';
import { formatRequestDate } from '../src/domain/dates';

const COUNT = Number(process.argv[2] ?? process.env.LK_BENCH_DELETE ?? 10_000);
const CLIENTS = Number(process.env.LK_BENCH_CLIENTS ?? 16);
const HOSTS = Number(process.env.LK_BENCH_HOSTS ?? 10);
const HOUR = 3_600_000;
const ORDERS = ['earliest first', 'latest first', 'random'] as const;

/** Runs `work` over `items` with CLIENTS concurrent callers, in the items' order. */
async function concurrently<T>(items: T[], work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: CLIENTS }, async () => {
    while (next < items.length) await work(items[next++]);
  }));
}

function shuffled<T>(items: T[]): T[] {
  const copy = [...items];
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [copy[i], copy[j]] = [copy[j], copy[i]];
  }
  return copy;
}

runBenchmark('delete', async () => {
  for (const [name, value, max] of [['lease count', COUNT, 100_000], ['LK_BENCH_CLIENTS', CLIENTS, 500], ['LK_BENCH_HOSTS', HOSTS, 1_000]] as const) {
    if (!Number.isInteger(value) || value < 1 || value > max) throw new Error(`${name} must be 1..${max}`);
  }
  const stack = await startTestStack({ withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
  try {
    for (let i = 0; i < HOSTS; i++) await insertHost(stack.db.pool, { name: `bench-host-${i}` });
    const api = apiClient(stack.url);
    // One-hour leases from 2099 on, HOSTS per hour: every host carries COUNT / HOSTS leases back to back.
    const first = Date.UTC(2099, 0, 1);
    const leases: Array<{ id: string; start: number }> = [];
    const createStarted = Date.now();
    // Created slot by slot across the calendar (the first lease of every hour, then the second…), so
    // that concurrent creates book different hours instead of racing for the same host.
    const order = Array.from({ length: COUNT }, (_, i) => i).sort((a, b) => (a % HOSTS) - (b % HOSTS) || a - b);
    await concurrently(order, async (i) => {
      const start = first + Math.floor(i / HOSTS) * HOUR;
      const res = await api('POST', '/v1/leases', { name: `queued-${i}`, start_date: formatRequestDate(start), end_date: formatRequestDate(start + HOUR), reservations: [hostReservation()] });
      if (res.status !== 201) throw new Error(`create ${i}: ${res.status} ${JSON.stringify(res.body)}`);
      leases.push({ id: res.body.lease.id, start });
    });
    const createSeconds = (Date.now() - createStarted) / 1000;
    console.log(`${COUNT} leases on ${HOSTS} hosts created in ${Math.round(createSeconds)} s`);

    // Each order deletes its own third of the leases, chosen across the whole calendar.
    const byStart = [...leases].sort((a, b) => a.start - b.start);
    const thirds = ORDERS.map((_, k) => byStart.filter((_, i) => i % ORDERS.length === k));
    const runs: Record<string, unknown> = {};
    for (const [k, order] of ORDERS.entries()) {
      const batch = order === 'earliest first' ? thirds[k] : order === 'latest first' ? [...thirds[k]].reverse() : shuffled(thirds[k]);
      const cpuUsed = cpuMeter();
      const latencies: number[] = [];
      const began = Date.now();
      await concurrently(batch, async (lease) => {
        const t = performance.now();
        const res = await api('DELETE', `/v1/leases/${lease.id}`);
        latencies.push(performance.now() - t);
        if (res.status !== 204) throw new Error(`delete ${lease.id}: ${res.status} ${JSON.stringify(res.body)}`);
      });
      // Gone means gone from the list (the workflow removed its row), not just the 204.
      const remaining = COUNT - thirds.slice(0, k + 1).reduce((sum, t) => sum + t.length, 0);
      await eventually(async () => {
        const { rows } = await stack.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM leases WHERE deleted_at IS NULL');
        return rows[0].n === remaining ? true : undefined;
      }, 60 * 60_000, 500);
      const seconds = (Date.now() - began) / 1000;
      runs[order] = {
        leases: batch.length,
        secondsUntilGone: Math.round(seconds * 10) / 10,
        msPerLease: Math.round((seconds * 1000) / batch.length * 10) / 10,
        deleteLatencyMs: summary(latencies),
        cpuSeconds: cpuUsed(),
      };
      console.log(`${order}: ${batch.length} deleted and gone in ${Math.round(seconds)} s`, runs[order]);
    }
    return { leases: COUNT, hosts: HOSTS, clients: CLIENTS, createSeconds: Math.round(createSeconds), runs };
  } finally {
    await stack.stop();
  }
});
