/**
 * `npm run screenshot:calendar`: regenerates docs/calendar.png, the README's picture of the calendar
 * page. A throw-away stack (PostgreSQL, Temporal dev server, the API; no worker) gets a small demo
 * cloud written straight into its database (GPU and CPU hosts, leases of three projects in every
 * status, compute and bandwidth providers with bookings), then Debian's Chromium shows the week
 * grouped by GPU, with "find a slot" having found room for four A100 hosts.
 */
import fs from 'node:fs';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { newLease, type Lease, type LeaseStatus } from '../src/domain/lease';
import { REPO_ROOT } from '../src/paths';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { startServers, stopServers } from '../dev-stack/servers';
import { launchChromium } from '../dev-stack/fixtures/browser';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { insertHostBookingRows, insertLeaseRows, insertQuantityBookingRow } from '../dev-stack/fixtures/lease-rows';
import { startTestStack } from '../dev-stack/stack';

const OUT = path.join(REPO_ROOT, 'docs', 'calendar.png');
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

async function main(): Promise<void> {
  await startServers();
  try {
    const stack = await startTestStack({ noWorker: true, withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
    const browser = await launchChromium();
    try {
      const pool = stack.db.pool;
      const hosts: Record<string, string> = {};
      const names = [...['01', '02', '03', '04', '05', '06'].map((n) => `gpu-a100-${n}`), 'gpu-h100-01', 'gpu-h100-02', ...['01', '02', '03', '04', '05', '06'].map((n) => `cpu-${n}`)];
      for (const name of names) hosts[name] = await insertHost(pool, { name, vcpus: 64, memory_mb: 262_144, capabilities: { gpu: name.split('-')[1] === 'a100' || name.split('-')[1] === 'h100' ? name.split('-')[1] : 'none' } });

      const today = Math.floor(Date.now() / DAY) * DAY;
      const leases: Lease[] = [];
      const bookings: Array<{ hostId: string; lease: Lease }> = [];
      const lease = (name: string, projectId: string, status: LeaseStatus, startH: number, endH: number, hostNames: string[]) => {
        const start = today + startH * HOUR;
        const made = { ...newLease({ id: randomUUID(), name, projectId, userId: `${projectId}-user`, start, end: today + endH * HOUR, reservations: [], requestedMs: start - HOUR }), version: 1, status };
        leases.push(made);
        for (const h of hostNames) bookings.push({ hostId: hosts[h], lease: made });
      };
      lease('llm-finetune', 'demo', 'ACTIVE', -16, 30, ['gpu-a100-01', 'gpu-a100-02']);
      lease('vision-sweep', 'demo', 'TERMINATED', -40, -20, ['gpu-a100-03']);
      lease('inference-bench', 'demo', 'PENDING', 52, 76, ['gpu-h100-01', 'gpu-h100-02']);
      lease('kernel-ci', 'demo', 'ERROR', 20, 28, ['cpu-01']);
      lease('climate-model', 'physics', 'ACTIVE', -30, 60, ['cpu-02', 'cpu-03', 'cpu-04']);
      lease('md-run', 'bio', 'PENDING', 34, 90, ['gpu-a100-03', 'gpu-a100-04', 'gpu-a100-05']);
      lease('genomics', 'bio', 'ACTIVE', -8, 14, ['gpu-h100-01']);
      lease('lattice-qcd', 'physics', 'PENDING', 100, 140, ['gpu-a100-01', 'gpu-a100-02', 'gpu-a100-06', 'cpu-05', 'cpu-06']);
      await insertLeaseRows(pool, leases);
      await insertHostBookingRows(pool, bookings);
      // Servers' compute capacity and bandwidth, partly booked.
      await pool.query(`INSERT INTO capacity_providers (uuid, name, host, kind, capacity) VALUES
        ('cp-1', 'cpu-05', 'cpu-05', 'compute', '{"VCPU": 64, "MEMORY_MB": 262144}'),
        ('cp-2', 'cpu-06', 'cpu-06', 'compute', '{"VCPU": 64, "MEMORY_MB": 262144}'),
        ('bw-1', 'cpu-05:eth1', 'cpu-05', 'bandwidth', '{"NET_BW_EGR_KILOBIT_PER_SEC": 10000000}')`);
      const usage = [['cp-1', 'demo', { VCPU: 16 }, -10, 40], ['cp-1', 'bio', { VCPU: 32 }, 5, 70], ['cp-2', 'physics', { VCPU: 48 }, -20, 20], ['bw-1', 'demo', { NET_BW_EGR_KILOBIT_PER_SEC: 4_000_000 }, 0, 50]] as const;
      for (const [provider, projectId, amounts, startH, endH] of usage) {
        const owner = leases.find((l) => l.projectId === projectId)!;
        await insertQuantityBookingRow(pool, { providerUuid: provider, leaseId: owner.id, projectId, amounts, startMs: today + startH * HOUR, endMs: today + endH * HOUR });
      }

      const context = await browser.newContext({ viewport: { width: 1360, height: 900 }, deviceScaleFactor: 1 });
      await context.addInitScript(() => (globalThis as unknown as { sessionStorage: { setItem(k: string, v: string): void } }).sessionStorage.setItem('leasekeeper.credentials', JSON.stringify({ kind: 'noauth', projectId: 'demo', admin: false })));
      const page = await context.newPage();
      await page.goto(`${stack.url}/calendar/`);
      await page.getByTestId('gantt').waitFor();
      await page.getByLabel('Group by').selectOption('gpu');
      const form = page.getByRole('form', { name: 'What you need' });
      await form.getByLabel('How many hosts').fill('4');
      await form.getByLabel('Properties').fill('["==", "$gpu", "a100"]');
      await form.getByLabel('For (hours)').fill('12');
      await form.getByRole('button', { name: 'Find offers' }).click();
      await page.getByRole('list', { name: 'Offers' }).waitFor();
      await page.mouse.move(0, 0);
      await page.waitForTimeout(200); // the ghost bars are painted on the next animation frame
      fs.mkdirSync(path.dirname(OUT), { recursive: true });
      await page.screenshot({ path: OUT, fullPage: true });
      console.log(`calendar screenshot: ${path.relative(REPO_ROOT, OUT)}`);
    } finally {
      await browser.close();
      await stack.stop();
    }
  } finally {
    await stopServers();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
