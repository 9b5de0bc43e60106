/**
 * `npm run bench:series`: what one project's series, admitted in the API in one transaction,
 * costs another project's creates meanwhile (review B7). Project alpha creates daily series of
 * LK_BENCH_SIZES (default 100; "50,100,…" for several) one-host occurrences
 * on the hosts of zone a; two clients of project beta create one-host leases on the same days and
 * hours, either on the hosts of zone b ("other hosts") or of zone a ("same hosts": their inserts
 * meet the series's uncommitted bookings). Beta's create latency is measured with no series and
 * while each series is admitted (LK_BENCH_RUNS series per case, default 3); writes bench/results/series.json.
 */
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, startTestStack } from '../dev-stack/stack';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { formatRequestDate } from '../src/domain/dates';
import { runBenchmark, summary } from './common';

const DAY = 86_400_000;
const HOUR = 3_600_000;
const RUNS = Number(process.env.LK_BENCH_RUNS ?? 3);
const SIZES = (process.env.LK_BENCH_SIZES ?? '100').split(',').map(Number);
const BETA_CLIENTS = 2;
/** Beta's creates measured with no series running, per case. */
const BASELINE_CREATES = 30;

const zone = (z: string) => hostReservation({ min: 1, max: 1, resource_properties: JSON.stringify(['==', '$zone', z]) });

runBenchmark('series', async () => {
  const stack = await startTestStack({
    withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })],
    env: { LK_MAX_OCCURRENCES: String(Math.max(...SIZES)), LK_MAX_LEASES: '1000000' },
  });
  try {
    for (const [i, z] of ['a', 'a', 'a', 'a', 'a', 'a', 'b', 'b', 'b'].entries()) await insertHost(stack.db.pool, { name: `series-host-${i}`, capabilities: { zone: z } });
    const alpha = apiClient(stack.url, { 'X-Project-Id': 'alpha', 'X-Roles': 'member' });
    const beta = apiClient(stack.url, { 'X-Project-Id': 'beta', 'X-Roles': 'member' });
    const firstDay = Math.floor(Date.now() / DAY) * DAY + 2 * DAY;
    // Each series and its creates take an hour of their own (no refusals from earlier ones).
    let hour = 0;
    let serial = 0;
    let refused = 0;
    const betaCreate = async (z: string, hourOfDay: number, days: number): Promise<number> => {
      const day = firstDay + (serial % days) * DAY + hourOfDay * HOUR;
      const t = performance.now();
      const res = await beta('POST', '/v1/leases', { name: `beta-${serial++}`, start_date: formatRequestDate(day), end_date: formatRequestDate(day + HOUR), reservations: [zone(z)] });
      if (res.status === 409) refused++; // that hour of that day full: still a create answered
      else if (res.status !== 201) throw new Error(`beta's create: ${res.status} ${JSON.stringify(res.body).slice(0, 300)}`);
      return performance.now() - t;
    };
    const cases: Record<string, unknown> = {};
    for (const size of SIZES) {
      for (const [label, z] of [['other-hosts', 'b'], ['same-hosts', 'a']] as const) {
        const baselineHour = hour++;
        const baseline: number[] = [];
        await Promise.all(Array.from({ length: BETA_CLIENTS }, async () => {
          for (let n = 0; n < BASELINE_CREATES / BETA_CLIENTS; n++) baseline.push(await betaCreate(z, baselineHour, size));
        }));
        const during: number[] = [];
        const seriesMs: number[] = [];
        for (let run = 0; run < RUNS; run++) {
          const seriesHour = hour++;
          let done = false;
          const t = performance.now();
          const series = alpha('POST', '/v1/leases', {
            name: `s${size}-${seriesHour}`,
            start_date: formatRequestDate(firstDay + seriesHour * HOUR),
            end_date: formatRequestDate(firstDay + seriesHour * HOUR + HOUR),
            reservations: [zone('a')],
            recurrence: `FREQ=DAILY;COUNT=${size}`,
          }).then((res) => {
            seriesMs.push(performance.now() - t);
            done = true;
            if (res.status !== 201) throw new Error(`alpha's series: ${res.status} ${JSON.stringify(res.body).slice(0, 300)}`);
          });
          // Beta's clients create while the series is admitted (bounded: at most 200 each).
          await Promise.all(Array.from({ length: BETA_CLIENTS }, async () => {
            for (let n = 0; n < 200 && !done; n++) during.push(await betaCreate(z, seriesHour, size));
          }));
          await series;
        }
        cases[`${size}-${label}`] = { occurrences: size, beta_hosts: label, beta_create_ms_without: summary(baseline), beta_create_ms_during: summary(during), series_create_ms: summary(seriesMs) };
        console.log(`${size} occurrences, beta on ${label}: without ${JSON.stringify(summary(baseline))}; during ${JSON.stringify(summary(during))}; series ${JSON.stringify(summary(seriesMs))}`);
      }
    }
    return { runs: RUNS, beta_clients: BETA_CLIENTS, beta_refused: refused, cases };
  } finally {
    await stack.stop();
  }
});
