/**
 * `npm run bench:list-all [N]`: the lists without `limit`, against the API as its own process
 * (dist/src/api/main.js, a fresh one per case, so that its peak RSS is the case's):
 *
 * - `GET /v1/leases` of a member whose project holds N leases (default 100 000), once, then 4 at
 *   a time, with /healthz timed meanwhile (does one list hold the event loop?);
 * - `GET /v1/os-hosts/allocations` as admin over N host bookings (100 hosts), once, then 4 at a time.
 *
 * Rows are written straight into PostgreSQL (as bench:list does). The client reads each answer as
 * it comes, counting bytes and items without keeping the body. Writes bench/results/list-all.json.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { newLease, type Lease } from '../src/domain/lease';
import type { ManagedProcess } from '../dev-stack/processes';
import { freePort } from '../dev-stack/ports';
import { insertLeaseRows } from '../dev-stack/fixtures/lease-rows';
import { startTestStack, type TestStack } from '../dev-stack/stack';
import { startApiProcess } from '../dev-stack/worker-process';
import { processStats, runBenchmark, stopOnExit, summary } from './common';

const COUNT = Number(process.argv[2] ?? process.env.LK_BENCH_LIST_ALL ?? 100_000);
const HOSTS = 100;
const PARALLEL = 4;
const PROJECT = 'bench-project-0';
const FIRST_START = Date.UTC(2099, 0, 1);
const MINUTE = 60_000;
const BATCH = 5_000;

/** A project's leases, each with one host reservation (as a member's list shows them). */
async function insertLeases(stack: TestStack): Promise<void> {
  const loadStarted = Date.now();
  for (let from = 0; from < COUNT; from += BATCH) {
    const leases: Lease[] = [];
    for (let i = from; i < Math.min(COUNT, from + BATCH); i++) {
      const start = FIRST_START + i * MINUTE;
      const reservation = { id: randomUUID(), resource_type: 'physical:host', params: { min: 1, max: 1, hypervisor_properties: '', resource_properties: '', on_end: 'default' } };
      const lease = newLease({ id: randomUUID(), name: `all-${i}`, projectId: PROJECT, userId: 'bench', start, end: start + 60 * MINUTE, reservations: [reservation], requestedMs: loadStarted + i });
      leases.push({ ...lease, version: 1 });
    }
    await insertLeaseRows(stack.db.pool, leases);
  }
  await stack.db.pool.query('ANALYZE leases');
}

/** N bookings spread over HOSTS hosts, one hour each, back to back. */
async function insertAllocations(stack: TestStack): Promise<void> {
  const pool = stack.db.pool;
  await pool.query(
    `INSERT INTO hosts (hypervisor_hostname, nova_hypervisor_id, vcpus, memory_mb, local_gb)
     SELECT 'bench-host-' || g, gen_random_uuid()::text, 32, 131072, 1000 FROM generate_series(1, $1::int) g`,
    [HOSTS],
  );
  await pool.query(
    `INSERT INTO host_allocations (host_id, reservation_id, lease_id, project_id, during, blocks, booking_key)
     SELECT h.id, gen_random_uuid(), gen_random_uuid(), 'bench-project-' || (g % 10), tstzrange(t, t + interval '1 hour'), tstzrange(t, t + interval '1 hour'), 'bench'
     FROM hosts h, generate_series(0, $1::int - 1) g, LATERAL (SELECT timestamptz '2099-01-01 00:00+00' + g * interval '1 hour' AS t) x`,
    [Math.ceil(COUNT / HOSTS)],
  );
  await pool.query('ANALYZE host_allocations');
}

/** The API process on the stack's database, listening on a free loopback port. */
async function startApi(stack: TestStack): Promise<{ proc: ManagedProcess; url: string }> {
  const port = await freePort();
  const proc = await startApiProcess(stack, port);
  stopOnExit(() => proc.stop());
  return { proc, url: `http://127.0.0.1:${port}` };
}

/** GET /healthz on a connection of its own (a kept-alive one may be closed by the server just as it is reused). */
function healthz(url: string): Promise<void> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent: false }, (res) => {
        res.resume();
        res.on('end', () => resolve()); // 200, or 503 when no worker polls (none runs here): its latency is what counts
      })
      .on('error', reject);
  });
}

/** Reads a whole answer as it comes: status, bytes, how often `marker` occurs (one per item), and whether it ended. */
async function readAll(url: string, headers: Record<string, string>, marker: string) {
  const started = performance.now();
  const res = await fetch(url, { headers });
  let bytes = 0;
  let items = 0;
  let tail = '';
  let complete = true;
  const decoder = new TextDecoder();
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      bytes += chunk.length;
      const text = tail + decoder.decode(chunk, { stream: true });
      items += text.split(marker).length - 1;
      tail = text.slice(-(marker.length - 1)); // shorter than a marker: one split between chunks is counted once, in the next
    }
  } catch {
    complete = false;
  }
  return { status: res.status, seconds: (performance.now() - started) / 1000, bytes, items, complete };
}

/** One request, then PARALLEL at once, each against a fresh API process: time, body size and the API's peak RSS. */
async function measure(stack: TestStack, what: string, pathAndQuery: string, headers: Record<string, string>, marker: string) {
  const round = (x: number, digits = 1) => Math.round(x * 10 ** digits) / 10 ** digits;
  const one = async (parallel: number) => {
    const api = await startApi(stack);
    try {
      const pid = api.proc.child.pid!;
      const rssAtRestMb = processStats(pid).rssMb;
      // /healthz meanwhile, every 100 ms: how long one list holds the API's event loop.
      let listing = true;
      const healthMs: number[] = [];
      const health = (async () => {
        while (listing) {
          const t = performance.now();
          await healthz(`${api.url}/healthz`);
          healthMs.push(performance.now() - t);
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      })();
      const started = performance.now();
      const answers = await Promise.all(Array.from({ length: parallel }, () => readAll(`${api.url}${pathAndQuery}`, headers, marker)));
      const seconds = (performance.now() - started) / 1000;
      listing = false;
      await health;
      const bad = answers.find((a) => a.status !== 200 || !a.complete || a.items !== answers[0].items);
      if (bad) throw new Error(`${what}: ${JSON.stringify(bad)}`);
      return {
        parallel,
        seconds: round(seconds),
        bodyMb: round(answers[0].bytes / 2 ** 20),
        items: answers[0].items,
        apiRssAtRestMb: rssAtRestMb,
        apiPeakRssMb: processStats(pid).peakRssMb,
        healthzMs: summary(healthMs),
      };
    } finally {
      await api.proc.stop();
    }
  };
  const results = [await one(1), await one(PARALLEL)];
  console.log(`\n${what}`);
  console.table(results.map(({ healthzMs, ...r }) => ({ ...r, healthzP99Ms: healthzMs.p99, healthzMaxMs: healthzMs.max })));
  return results;
}

runBenchmark('list-all', async () => {
  if (!Number.isInteger(COUNT) || COUNT < HOSTS || COUNT > 1_000_000) throw new Error(`count must be ${HOSTS}..1000000`);
  const stack = await startTestStack({ noWorker: true });
  try {
    const loadStarted = Date.now();
    await insertLeases(stack);
    await insertAllocations(stack);
    console.log(`${COUNT} leases and ${COUNT} host bookings written in ${Math.round((Date.now() - loadStarted) / 100) / 10} s`);
    const member = { 'X-Project-Id': PROJECT, 'X-Roles': 'member' };
    const leases = await measure(stack, `GET /v1/leases: a member, ${COUNT} leases in the project`, '/v1/leases', member, '"trust_id":null');
    const admin = { 'X-Project-Id': 'admin', 'X-Roles': 'admin' };
    const allocations = await measure(stack, `GET /v1/os-hosts/allocations: admin, ${COUNT} bookings on ${HOSTS} hosts`, '/v1/os-hosts/allocations', admin, '"lease_id":');
    return { leases: COUNT, bookings: COUNT, hosts: HOSTS, list: leases, allocations };
  } finally {
    await stack.stop();
  }
});
