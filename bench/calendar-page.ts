/**
 * `npm run bench:calendar-page [HOSTS] [LEASES]`: the calendar page in Debian's Chromium with 1,000
 * hosts and 10,000 leases over one month (default), written straight into PostgreSQL. Measured in
 * the browser with the Performance API, for the month view: the answer of GET /v1/calendar (fetch
 * and JSON), the render (components and the canvas' first paint), and scrolling: frame intervals
 * while the wheel scrolls the rows and pans through time. Writes bench/results/calendar-page.json.
 */
import { randomUUID } from 'node:crypto';
import { newLease, type Lease } from '../src/domain/lease';
import { launchChromium } from '../dev-stack/fixtures/browser';
import { insertHostBookingRows, insertLeaseRows } from '../dev-stack/fixtures/lease-rows';
import { startTestStack } from '../dev-stack/stack';
import { runBenchmark, summary } from './common';

const HOSTS = Number(process.argv[2] ?? 1_000);
const LEASES = Number(process.argv[3] ?? 10_000);
const RUNS = 5;
const PROJECTS = 10;
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** The browser's globals this benchmark's page scripts use (the root tsconfig has no DOM types; the scripts run in Chromium). */
interface PageGlobals {
  sessionStorage: { setItem(key: string, value: string): void };
  requestAnimationFrame(callback: () => void): number;
  WheelEvent: new (type: string, init: Record<string, unknown>) => object;
}
interface CanvasLike {
  dispatchEvent(event: object): boolean;
}

/** A small deterministic generator (mulberry32): the same calendar every run. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

runBenchmark('calendar-page', async () => {
  if (!Number.isInteger(HOSTS) || HOSTS < 1 || HOSTS > 10_000 || !Number.isInteger(LEASES) || LEASES < 0 || LEASES > 100_000) throw new Error('usage: bench:calendar-page [HOSTS 1..10000] [LEASES 0..100000]');
  const stack = await startTestStack({ noWorker: true });
  const browser = await launchChromium();
  try {
    const pool = stack.db.pool;
    const { rows: hosts } = await pool.query<{ id: string }>(
      `INSERT INTO hosts (hypervisor_hostname, nova_hypervisor_id, hypervisor_type, vcpus, memory_mb, local_gb)
       SELECT 'compute-' || lpad(i::text, 5, '0'), 'h' || i, 'fake', 32, 131072, 1000 FROM generate_series(1, $1) AS i RETURNING id::text`,
      [HOSTS],
    );
    // The month shown: from the start of today (UTC). Each host gets its share of the leases, one after another with gaps.
    const monthStart = Math.floor(Date.now() / DAY) * DAY;
    const next = random(42);
    const perHost = Math.ceil(LEASES / HOSTS);
    const slot = (31 * DAY) / perHost;
    const leases: Lease[] = [];
    const bookings: Array<{ hostId: string; lease: Lease }> = [];
    for (let i = 0; i < LEASES; i++) {
      const host = hosts[i % HOSTS].id;
      const k = Math.floor(i / HOSTS);
      const start = Math.floor((monthStart + k * slot + next() * slot * 0.4) / 60_000) * 60_000;
      const end = start + Math.max(HOUR, Math.floor((next() * slot * 0.55) / 60_000) * 60_000);
      const lease = newLease({ id: randomUUID(), name: `bench-${i}`, projectId: `project-${i % PROJECTS}`, userId: 'bench', start, end, reservations: [], requestedMs: monthStart - HOUR }); // admitted before the month began
      leases.push({ ...lease, version: 1 });
      bookings.push({ hostId: host, lease });
    }
    for (let from = 0; from < leases.length; from += 5_000) await insertLeaseRows(pool, leases.slice(from, from + 5_000));
    await insertHostBookingRows(pool, bookings);
    await pool.query('ANALYZE host_allocations; ANALYZE leases');

    const context = await browser.newContext({ viewport: { width: 1600, height: 1000 }, deviceScaleFactor: 1 });
    // Signed in as a member of one project: a tenth of the bars named, the rest "reserved".
    await context.addInitScript(() => (globalThis as unknown as PageGlobals).sessionStorage.setItem('leasekeeper.credentials', JSON.stringify({ kind: 'noauth', projectId: 'project-0', admin: false })));
    const page = await context.newPage();
    const runs: Array<{ answerMs: number; renderMs: number; totalMs: number; bookings: number; answerKb: number }> = [];
    for (let run = 0; run < RUNS; run++) {
      await page.goto(`${stack.url}/calendar/`);
      await page.getByTestId('gantt').waitFor();
      await page.waitForFunction(() => performance.getEntriesByName('calendar-drawn').length > 0, undefined, { timeout: 60_000 });
      await page.evaluate(() => performance.clearMarks());
      // The month view from today: one answer with the month (and half a month either side) and one render.
      await page.getByRole('button', { name: 'Month' }).click();
      await page.waitForFunction(() => performance.getEntriesByName('calendar-drawn').length > 0, undefined, { timeout: 60_000 });
      const marks = await page.evaluate(() => {
        const at = (name: string) => performance.getEntriesByName(name)[0]?.startTime ?? NaN;
        const resource = performance.getEntriesByType('resource').filter((r) => r.name.includes('/v1/calendar?')).at(-1) as { encodedBodySize?: number } | undefined;
        return { fetch: at('calendar-fetch'), data: at('calendar-data'), drawn: at('calendar-drawn'), bytes: resource?.encodedBodySize ?? 0 };
      });
      const loaded = await page.locator('h2 .count').first().textContent();
      runs.push({
        answerMs: Math.round(marks.data - marks.fetch),
        renderMs: Math.round(marks.drawn - marks.data),
        totalMs: Math.round(marks.drawn - marks.fetch),
        bookings: Number(/(\d+) bookings/.exec(loaded ?? '')?.[1] ?? NaN),
        answerKb: Math.round(marks.bytes / 1024),
      });
    }

    // Scrolling: 120 wheel steps, one per animation frame, down the rows and then through time; frame intervals and long tasks.
    const scrolling = await page.getByTestId('gantt').evaluate<{ rowFrames: number[]; rowLongTasks: number[]; timeFrames: number[]; timeLongTasks: number[] }, undefined, CanvasLike>(async (canvas) => {
      const page = globalThis as unknown as PageGlobals;
      const longTasks: number[] = [];
      const observer = new PerformanceObserver((list) => list.getEntries().forEach((e) => longTasks.push(e.duration)));
      observer.observe({ type: 'longtask' as never }); // a browser entry type Node's types do not list
      const frames: number[] = [];
      const step = (event: Record<string, unknown>) =>
        new Promise<void>((resolve) => {
          const before = performance.now();
          canvas.dispatchEvent(new page.WheelEvent('wheel', { cancelable: true, bubbles: true, ...event }));
          page.requestAnimationFrame(() => page.requestAnimationFrame(() => {
            frames.push(performance.now() - before);
            resolve();
          }));
        });
      for (let i = 0; i < 60; i++) await step({ deltaY: 120 });
      const rowFrames = frames.splice(0);
      const rowLongTasks = longTasks.splice(0);
      for (let i = 0; i < 60; i++) await step({ deltaY: 60, shiftKey: true });
      observer.disconnect();
      return { rowFrames, rowLongTasks, timeFrames: frames, timeLongTasks: longTasks };
    });
    const result = {
      hosts: HOSTS,
      leases: LEASES,
      monthView: {
        answerMs: summary(runs.map((r) => r.answerMs)),
        renderMs: summary(runs.map((r) => r.renderMs)),
        totalMs: summary(runs.map((r) => r.totalMs)),
        bookingsLoaded: runs[0].bookings,
        answerKb: runs[0].answerKb,
      },
      // Two animation frames per step: ~33 ms when every frame is on time at 60 Hz. Down the rows the data is
      // loaded; through time the view leaves the loaded window every ~1.5 views and the next answer is parsed.
      scrollRows: { stepMs: summary(scrolling.rowFrames), longTasks: scrolling.rowLongTasks.length, longestTaskMs: Math.round(Math.max(0, ...scrolling.rowLongTasks)) },
      scrollTime: { stepMs: summary(scrolling.timeFrames), longTasks: scrolling.timeLongTasks.length, longestTaskMs: Math.round(Math.max(0, ...scrolling.timeLongTasks)) },
    };
    console.log(`\ncalendar page: ${HOSTS} hosts, ${LEASES} leases over a month, month view (${RUNS} runs, Chromium headless)`);
    console.table({
      'GET /v1/calendar (fetch + JSON)': result.monthView.answerMs,
      'render (components + canvas)': result.monthView.renderMs,
      total: result.monthView.totalMs,
      'wheel step down the rows': result.scrollRows.stepMs,
      'wheel step through time': result.scrollTime.stepMs,
    });
    console.log(`answer: ${result.monthView.answerKb} KiB, ${result.monthView.bookingsLoaded} bookings; long tasks: ${result.scrollRows.longTasks} down the rows, ${result.scrollTime.longTasks} through time (longest ${result.scrollTime.longestTaskMs} ms)`);
    return result;
  } finally {
    await browser.close();
    await stack.stop();
  }
});
