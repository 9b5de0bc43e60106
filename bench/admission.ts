/**
 * `npm run bench:admission`: 50 concurrent clients creating and deleting host leases over 100
 * hosts for 60 s, through the API, the real worker and the PostgreSQL calendar. Prints
 * admissions/s, create latency and the number of double bookings found afterwards (must be 0);
 * writes bench/results/admission.json. LK_BENCH_SECONDS / LK_BENCH_CLIENTS / LK_BENCH_HOSTS override.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import globalSetup from '../test/global-setup';
import globalTeardown from '../test/global-teardown';
import { doubleBookings, insertHost } from '../test/support/hosts';
import { apiClient, startTestStack } from '../test/support/stack';
import { physicalHostPlugin } from '../src/resources/physical-host';

const SECONDS = Number(process.env.LK_BENCH_SECONDS ?? 60);
const CLIENTS = Number(process.env.LK_BENCH_CLIENTS ?? 50);
const HOSTS = Number(process.env.LK_BENCH_HOSTS ?? 100);

function percentile(sorted: number[], p: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] : NaN;
}

function date(ms: number): string {
  return new Date(ms).toISOString().slice(0, 16).replace('T', ' ');
}

async function main(): Promise<void> {
  for (const [name, value, max] of [['LK_BENCH_SECONDS', SECONDS, 600], ['LK_BENCH_CLIENTS', CLIENTS, 500], ['LK_BENCH_HOSTS', HOSTS, 10_000]] as const) {
    if (!Number.isInteger(value) || value < 1 || value > max) throw new Error(`${name} must be 1..${max}`);
  }
  await globalSetup();
  const stack = await startTestStack({ withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false } })] });
  try {
    for (let i = 0; i < HOSTS; i++) await insertHost(stack.db.pool, { name: `bench-host-${i}`, vcpus: [2, 4, 8, 16][i % 4] });
    const api = apiClient(stack.url);
    const horizon = Date.UTC(2099, 0, 1);
    const latencies: number[] = [];
    const counts = { admitted: 0, refused: 0, deleted: 0, errors: 0 };
    const errors = new Map<string, number>();
    const deadline = Date.now() + SECONDS * 1000;
    let serial = 0;

    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (Date.now() < deadline) {
          const i = serial++;
          // Windows fall within one month, one to eight hours long, in whole hours: many overlap.
          const start = horizon + Math.floor(Math.random() * 30 * 24) * 3_600_000;
          const hours = 1 + Math.floor(Math.random() * 8);
          const hosts = 1 + Math.floor(Math.random() * 3);
          const t = performance.now();
          const res = await api('POST', '/v1/leases', {
            name: `bench-${i}`,
            start_date: date(start),
            end_date: date(start + hours * 3_600_000),
            reservations: [{ resource_type: 'physical:host', min: hosts, max: hosts, hypervisor_properties: i % 2 ? '[">=", "$vcpus", "4"]' : '' }],
          });
          latencies.push(performance.now() - t);
          if (res.status === 201) {
            counts.admitted++;
            // Half the leases stay (the calendar fills up), half are deleted again.
            if (i % 2 === 0 && (await api('DELETE', `/v1/leases/${res.body.lease.id}`)).status === 204) counts.deleted++;
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

    const sorted = latencies.map(Math.round).sort((a, b) => a - b);
    const result = {
      benchmark: 'admission',
      date: new Date().toISOString(),
      machine: `${os.cpus().length} cores, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ${os.cpus()[0]?.model ?? 'unknown cpu'}`,
      seconds: SECONDS,
      clients: CLIENTS,
      hosts: HOSTS,
      ...counts,
      admissionsPerSecond: Math.round((counts.admitted / SECONDS) * 10) / 10,
      requestsPerSecond: Math.round((latencies.length / SECONDS) * 10) / 10,
      createLatencyMs: { p50: percentile(sorted, 50), p99: percentile(sorted, 99), max: sorted[sorted.length - 1] },
      doubleBookings: (await doubleBookings(stack.db.pool)).length,
      errorKinds: Object.fromEntries(errors),
    };
    console.log(`\nadmission: ${CLIENTS} clients, ${HOSTS} hosts, ${SECONDS} s (${result.machine})`);
    console.table({
      'admitted / refused (409) / errors': { value: `${counts.admitted} / ${counts.refused} / ${counts.errors}` },
      'admissions per second': { value: result.admissionsPerSecond },
      'create latency p50 / p99 / max (ms)': { value: `${result.createLatencyMs.p50} / ${result.createLatencyMs.p99} / ${result.createLatencyMs.max}` },
      'double bookings afterwards': { value: result.doubleBookings },
    });
    if (errors.size) console.log('errors:', result.errorKinds);
    const out = path.join(__dirname, '..', '..', 'bench', 'results', 'admission.json');
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
    if (result.doubleBookings !== 0) process.exitCode = 1;
  } finally {
    await stack.stop();
    await globalTeardown();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
