/**
 * `npm run bench:notices [N]`: does a webhook receiver slow leases down? N leases (default 100),
 * created by 8 clients, each starting at once and deleted after it is active, in three runs: no
 * webhook; a live receiver; a dead one (it accepts connections and never answers). Prints create
 * latency, start lag (when the start began minus when it was due, or created if later) and delete latency per run, and
 * what the receivers got; writes bench/results/notices.json. Delivery runs in workflows of its own,
 * so the dead receiver should cost the leases nothing.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { insertHost } from '../test/support/hosts';
import { apiClient, startTestStack } from '../test/support/stack';
import { runBenchmark, summary } from './common';

const COUNT = Number(process.argv[2] ?? process.env.LK_BENCH_NOTICE_LEASES ?? 100);
const CLIENTS = 8;
const HOSTS = 10;

/** A receiver on 127.0.0.1: `live` answers 204, `dead` holds every request open until closed. */
async function receiver(kind: 'live' | 'dead') {
  let received = 0;
  const held: http.ServerResponse[] = [];
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (kind === 'dead') {
        held.push(res);
        return;
      }
      received++;
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`,
    received: () => received,
    close: async () => {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

async function run(mode: 'none' | 'live' | 'dead') {
  const target = mode === 'none' ? undefined : await receiver(mode);
  // A short notice timeout keeps the dead receiver's retries busy during the run.
  const env: Record<string, string> = target ? { LK_WEBHOOK_URLS: target.url, LK_NOTICE_TIMEOUT_MS: '2000', LK_NOTIFY_BEFORE_END: 'none' } : { LK_NOTIFY_BEFORE_END: 'none' };
  const stack = await startTestStack({ env, withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })] });
  try {
    for (let h = 0; h < HOSTS; h++) await insertHost(stack.db.pool, { name: `notice-bench-${mode}-${h}` });
    const api = apiClient(stack.url, { 'x-project-id': 'bench', 'x-user-id': 'bench', 'x-roles': 'member' });
    const creates: number[] = [];
    const deletes: number[] = [];
    const ids: string[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (next < COUNT) {
          const i = next++;
          const t = performance.now();
          const res = await api('POST', '/v1/leases', { name: `notice-${mode}-${i}`, start_date: 'now', end_date: new Date(Date.now() + 3_600_000).toISOString().slice(0, 19).replace('T', ' ') });
          creates.push(performance.now() - t);
          if (res.status !== 201) throw new Error(`create ${i}: ${res.status} ${JSON.stringify(res.body)}`);
          ids.push(res.body.lease.id);
        }
      }),
    );
    // Every lease active: its start's lag from the recorded event.
    const deadline = Date.now() + 120_000;
    for (;;) {
      const { rows } = await stack.db.pool.query<{ n: string }>("SELECT count(*)::text AS n FROM leases WHERE status = 'ACTIVE' AND deleted_at IS NULL");
      if (Number(rows[0].n) === COUNT) break;
      if (Date.now() > deadline) throw new Error(`only ${rows[0].n} of ${COUNT} leases active after 120 s`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    // "now" is the start of the minute (as Blazar's): the lag counts from when the lease was created, if later.
    const { rows: lags } = await stack.db.pool.query<{ lag: number }>(
      `SELECT (e->>'startedAt')::float8 - greatest((e->>'time')::float8, (document->>'createdMs')::float8) AS lag FROM leases, jsonb_array_elements(document->'events') e
       WHERE deleted_at IS NULL AND e->>'event_type' = 'start_lease'`,
    );
    next = 0;
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (next < ids.length) {
          const id = ids[next++];
          const t = performance.now();
          const res = await api('DELETE', `/v1/leases/${id}`);
          deletes.push(performance.now() - t);
          if (res.status !== 204) throw new Error(`delete ${id}: ${res.status}`);
        }
      }),
    );
    const result = { mode, createMs: summary(creates), startLagMs: summary(lags.map((r) => r.lag)), deleteMs: summary(deletes), received: target?.received() ?? 0 };
    console.log(`${mode}: create p50 ${result.createMs.p50} ms p99 ${result.createMs.p99} ms · start lag p50 ${result.startLagMs.p50} ms p99 ${result.startLagMs.p99} ms · delete p50 ${result.deleteMs.p50} ms p99 ${result.deleteMs.p99} ms · received ${result.received}`);
    return result;
  } finally {
    await stack.stop();
    await target?.close();
  }
}

runBenchmark('notices', async () => {
  if (!Number.isInteger(COUNT) || COUNT < 1 || COUNT > 10_000) throw new Error('lease count must be 1..10000');
  const runs = [];
  for (const mode of ['none', 'live', 'dead'] as const) runs.push(await run(mode));
  return { leases: COUNT, clients: CLIENTS, runs };
});
