/**
 * `npm run bench:calendar`: availability and earliest-slot queries through the API with 100 000
 * bookings over 1 000 hosts (100 per host over one year, 1 h to 2 days each). Prints p50/p99 per
 * query kind, and the calendar's own share (no HTTP) for the one-host window; writes
 * bench/results/calendar.json. LK_BENCH_HOSTS / LK_BENCH_PER_HOST / LK_BENCH_SAMPLES override.
 * Also (issue 15): the earliest-slot search alone over 100 000 bookings on one host and over 10
 * hosts (the time it holds the event loop), and the hostile searches of 2 000 / 16 000
 * reservations of 10 000 hosts each and a lease of 50 of them (time of the answer, API RSS).
 */
import { searchEarliestFit, type Blocked, type HostRequest } from '../src/domain/host-calendar';
import { formatRequestDate, wholeMinuteUp } from '../src/domain/dates';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { HostCalendar, SEARCH_WORK_BUDGET } from '../src/resources/physical-host/calendar';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, startTestStack } from '../dev-stack/stack';
import { runBenchmark, summary } from './common';

const HOSTS = Number(process.env.LK_BENCH_HOSTS ?? 1_000);
const PER_HOST = Number(process.env.LK_BENCH_PER_HOST ?? 100);
const SAMPLES = Number(process.env.LK_BENCH_SAMPLES ?? 500);
const DAY = 86_400_000;
const YEAR_START = Date.UTC(2099, 0, 1);
const SLOT_MS = Math.floor((365 * DAY) / PER_HOST);

runBenchmark('calendar', async () => {
  for (const [name, value, max] of [['LK_BENCH_HOSTS', HOSTS, 10_000], ['LK_BENCH_PER_HOST', PER_HOST, 1_000], ['LK_BENCH_SAMPLES', SAMPLES, 100_000]] as const) {
    if (!Number.isInteger(value) || value < 1 || value > max) throw new Error(`${name} must be 1..${max}`);
  }
  const settings = { cleaningMs: 0, randomChoice: false };
  const stack = await startTestStack({ noWorker: true, withPool: (pool) => [physicalHostPlugin({ pool, settings, cloud: 'calendar-only' })] });
  try {
    const { pool } = stack.db;
    const loadStarted = Date.now();
    for (let i = 0; i < HOSTS; i++) await insertHost(pool, { name: `bench-host-${i}`, vcpus: [2, 4, 8, 16][i % 4], capabilities: { rack: `r${i % 20}` } });
    // One booking per slot of each host (slots of a year / PER_HOST): starts somewhere in the first
    // 30 % of the slot, lasts 1 h to 60 % of it (at most 2 days), so bookings of a host never overlap.
    await pool.query('SELECT setseed(0.42)');
    await pool.query(
      `INSERT INTO host_allocations (host_id, reservation_id, lease_id, project_id, during, blocks, booking_key)
       SELECT id, gen_random_uuid(), gen_random_uuid(), 'bench', tstzrange(s, e), tstzrange(s, e), 'bench'
       FROM (SELECT id, to_timestamp(s_ms / 1000.0) AS s, to_timestamp((s_ms + 3600000 + floor(random() * least(0.6 * $2::float8, $3::float8))) / 1000.0) AS e
             FROM (SELECT h.id, $1::float8 + k * $2::float8 + floor(random() * 0.3 * $2::float8) AS s_ms
                   FROM hosts h CROSS JOIN generate_series(0, $4::int - 1) AS k) AS starts) AS slots`,
      [YEAR_START, SLOT_MS, 2 * DAY, PER_HOST],
    );
    await pool.query('ANALYZE');
    const loadSeconds = Math.round((Date.now() - loadStarted) / 100) / 10;
    const { rows } = await pool.query<{ n: string }>('SELECT count(*) AS n FROM host_allocations');
    const bookings = Number(rows[0].n);

    const api = apiClient(stack.url);
    const calendar = new HostCalendar(pool, settings);
    const anyTime = (span: number) => YEAR_START + Math.floor(Math.random() * (365 * DAY - span));
    const oneHost = () => `["==", "$hypervisor_hostname", "bench-host-${Math.floor(Math.random() * HOSTS)}"]`;
    const check = (status: number, body: unknown, what: string) => {
      if (status !== 200) throw new Error(`${what}: ${status} ${JSON.stringify(body)}`);
    };
    const kinds: Record<string, () => Promise<unknown>> = {
      'one host, one week: free intervals (API)': async () => {
        const from = anyTime(7 * DAY);
        const res = await api('GET', `/v1/availability?start=${encodeURIComponent(formatRequestDate(from))}&end=${encodeURIComponent(formatRequestDate(from + 7 * DAY))}&hypervisor_properties=${encodeURIComponent(oneHost())}`);
        check(res.status, res.body, 'availability');
        if (res.body.availability.length !== 1) throw new Error(`expected one host, got ${res.body.availability.length}`);
      },
      'one host, one week: free intervals (calendar, no HTTP)': async () => {
        const from = anyTime(7 * DAY);
        const hosts = await calendar.freeIntervals(from, from + 7 * DAY, { hypervisor_properties: oneHost() });
        if (hosts.length !== 1) throw new Error(`expected one host, got ${hosts.length}`);
      },
      'all hosts, one day: free intervals (API)': async () => {
        const from = anyTime(DAY);
        const res = await api('GET', `/v1/availability?start=${encodeURIComponent(formatRequestDate(from))}&end=${encodeURIComponent(formatRequestDate(from + DAY))}`);
        check(res.status, res.body, 'availability');
        if (res.body.availability.length !== HOSTS) throw new Error(`expected ${HOSTS} hosts, got ${res.body.availability.length}`);
      },
      'earliest slot: one given host, 1 day (API)': async () => {
        const from = anyTime(DAY);
        const res = await api('POST', '/v1/availability/search', {
          start_date: formatRequestDate(from),
          end_date: formatRequestDate(from + DAY),
          reservations: [hostReservation({ hypervisor_properties: oneHost() })],
        });
        check(res.status, res.body, 'search');
      },
      'earliest slot: 10 hosts with ≥ 8 vCPUs, 3 days (API)': async () => {
        const from = anyTime(3 * DAY);
        const res = await api('POST', '/v1/availability/search', {
          start_date: formatRequestDate(from),
          end_date: formatRequestDate(from + 3 * DAY),
          reservations: [hostReservation({ min: 10, max: 10, hypervisor_properties: '[">=", "$vcpus", "8"]' })],
        });
        check(res.status, res.body, 'search');
      },
    };
    const latencyMs: Record<string, ReturnType<typeof summary>> = {};
    for (const [label, query] of Object.entries(kinds)) {
      for (let i = 0; i < 20; i++) await query(); // warm-up: connections, plans
      const latencies: number[] = [];
      for (let i = 0; i < SAMPLES; i++) {
        const t = performance.now();
        await query();
        latencies.push(performance.now() - t);
      }
      latencyMs[label] = summary(latencies);
    }

    const result = {
      hosts: HOSTS,
      bookings,
      loadSeconds,
      samples: SAMPLES,
      latencyMs,
      doubleBookings: (await doubleBookings(pool)).length,
      longSearchMs: longSearches(),
      hostile: await hostileSearches(api),
    };
    console.log(`\ncalendar: ${bookings} bookings over ${HOSTS} hosts (loaded in ${loadSeconds} s), ${SAMPLES} queries of each kind, one at a time`);
    console.table(latencyMs);
    console.table(result.longSearchMs);
    console.table(result.hostile.requests);
    console.log(`API RSS: ${result.hostile.apiRssMbBefore} MB before the hostile searches, ${result.hostile.apiRssMbAfter} MB after`);
    return result;
  } finally {
    await stack.stop();
  }
});

/**
 * The earliest-slot search alone (what holds the event loop), with the API's limits, over 100 000
 * back-to-back 1-minute bookings with one 3-minute hole at their end: on one host (with 2 free
 * hosts beside it), and spread over 10 hosts; 10 runs each.
 */
function longSearches(): Record<string, ReturnType<typeof summary> & { found: boolean }> {
  const MINUTE = 60_000;
  const out: Record<string, ReturnType<typeof summary> & { found: boolean }> = {};
  for (const spread of [1, 10]) {
    const hostIds = Array.from({ length: Math.max(3, spread) }, (_, i) => `h${i}`);
    const blocked: Blocked[] = [];
    const rows = 100_000 / spread;
    for (let k = 0; k < 100_000; k++) blocked.push({ hostId: hostIds[k % spread], start: Math.floor(k / spread) * MINUTE, end: (Math.floor(k / spread) + 1) * MINUTE });
    const request: HostRequest = { reservationId: 'r', min: hostIds.length, max: hostIds.length, matches: () => true };
    const times: number[] = [];
    let found = false;
    for (let run = 0; run < 10; run++) {
      const t = performance.now();
      const answer = searchEarliestFit([request], { hostIds, blocked, cleaningMs: 0 }, 0, 2 * MINUTE, { align: wholeMinuteUp, workBudget: SEARCH_WORK_BUDGET });
      times.push(performance.now() - t);
      found = answer.start === rows * MINUTE;
    }
    out[`earliest slot, 100 000 bookings ${spread === 1 ? 'on one host' : `over ${spread} hosts`} (search alone)`] = { ...summary(times), found };
  }
  return out;
}

/** Issue 15's requests that took the service down: how long each answer takes, and the API's RSS (it runs in this process). */
async function hostileSearches(api: ReturnType<typeof apiClient>) {
  const huge = hostReservation({ min: 10_000, max: 10_000 });
  const window = { start_date: '2099-06-01 10:00', end_date: '2099-06-01 11:00' };
  const rss = () => Math.round(process.memoryUsage().rss / 1_048_576);
  const apiRssMbBefore = rss();
  const requests: Record<string, { status: number; ms: number }> = {};
  for (const [label, path, count] of [
    ['search, 16 000 × min 10 000 (1 MB)', '/v1/availability/search', 16_000],
    ['search, 2 000 × min 10 000', '/v1/availability/search', 2_000],
    ['search, 50 × min 10 000', '/v1/availability/search', 50],
    ['create, 9 000 × min 10 000 (refused at the edge: no worker involved)', '/v1/leases', 9_000],
  ] as const) {
    const t = performance.now();
    const res = await api('POST', path, { name: 'hostile', ...window, reservations: Array.from({ length: count }, () => huge) });
    requests[label] = { status: res.status, ms: Math.round(performance.now() - t) };
  }
  return { requests, apiRssMbBefore, apiRssMbAfter: rss() };
}
